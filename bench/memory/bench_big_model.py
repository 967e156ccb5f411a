"""Peak memory and time of a model past 2 GB: written, loaded, compiled and run on the CPU.

Writes a decoder from ``bench/models/decoder_model.py`` (weights after the FlatBuffer) unless ``--model`` names
one, then in fresh processes (so each VmHWM is its own) runs litegpu and, optionally, the official
interpreter: load, prefill (the first includes tracing and compiling), decode steps.  Peak resident
memory is the kernel's VmHWM; RssFile is the part that is pages of the memory-mapped model file.

    python bench/memory/bench_big_model.py --gigabytes 3.2 --weights float16 [--official builtin] [--keep DIR]
        [--fold-growth-mib M]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
import harness  # noqa: E402

MEMORY = r"""
def memory():
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key = line.split(":")[0]
            if key in ("VmHWM", "VmRSS", "RssAnon", "RssFile"):
                out[key] = int(line.split()[1]) * 1024
    return out
"""

LITEGPU_CHILD = MEMORY + r"""
import json, os, sys, time, warnings
import numpy as np
import jax, litegpu
import litegpu.ops._catalog
path, steps = sys.argv[1], int(sys.argv[2])
if len(sys.argv) > 3:  # --fold-growth-mib: how much float16 -> float32 (etc.) the backend folds at load
    import litegpu.backends.xla.state
    litegpu.backends.xla.state.FOLD_GROWTH_BUDGET_BYTES = int(float(sys.argv[3]) * 2**20)
if os.environ.get("LITEGPU_BENCH_CHUNK_MIB"):  # --chunk-mib: the converted-weight slice of a matmul
    import litegpu.ops.matmul
    litegpu.ops.matmul.CONVERTED_WEIGHT_CHUNK_BYTES = int(float(os.environ["LITEGPU_BENCH_CHUNK_MIB"]) * 2**20)
phases = [("imports", 0.0, memory())]
t = time.perf_counter()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    model = litegpu.CompiledModel.from_file(path, litegpu.HardwareAccelerator.CPU)
phases.append(("load", time.perf_counter() - t, memory()))
details = model.get_input_tensor_details("prefill")
T = details["tokens"]["shape"][1]
caches = {n: model.create_input_buffer_by_name("prefill", n) for n in details if n.startswith("kv_cache")}
logits = {k: model.create_output_buffer_by_name(k, "logits") for k in ("prefill", "decode")}

def step(key, tokens, pos):
    feeds = {"tokens": litegpu.TensorBuffer(np.asarray([tokens], np.int32)),
             "input_pos": litegpu.TensorBuffer(np.asarray([pos], np.int32)), **caches}
    model.run_by_name(key, feeds, {"logits": logits[key], **caches})
    return logits[key].read()[0]

prompt = [(7 * i + 3) % 97 + 1 for i in range(T)]
tokens = []
t = time.perf_counter()
last = step("prefill", prompt, 0)[-1]
phases.append(("first prefill (trace + compile + run)", time.perf_counter() - t, memory()))
t = time.perf_counter()
step("prefill", prompt, 0)
phases.append(("prefill", time.perf_counter() - t, memory()))
t = time.perf_counter()
last = step("prefill", prompt, 0)[-1]
tokens.append(int(np.argmax(last)))
last = step("decode", [tokens[-1]], T)[0]
phases.append(("first decode (trace + compile + run)", time.perf_counter() - t, memory()))
times = []
for i in range(steps):
    tokens.append(int(np.argmax(last)))
    t = time.perf_counter()
    last = step("decode", [tokens[-1]], T + 1 + i)[0]
    times.append(time.perf_counter() - t)
phases.append((f"{steps} decode steps", sum(times), memory()))
tokens.append(int(np.argmax(last)))
print("RESULT " + json.dumps({"phases": phases, "tokens": tokens, "decode_median_s": float(np.median(times)),
                              "first_logits": [float(v) for v in logits["decode"].read().reshape(-1)[:8]]}))
"""

OFFICIAL_CHILD = MEMORY + r"""
import json, sys, time
import numpy as np
from ai_edge_litert import interpreter as litert
path, steps, resolver = sys.argv[1], int(sys.argv[2]), sys.argv[3]
phases = [("imports", 0.0, memory())]
kind = {"builtin": "BUILTIN_WITHOUT_DEFAULT_DELEGATES", "xnnpack": "AUTO"}[resolver]
t = time.perf_counter()
interp = litert.Interpreter(model_path=path, experimental_op_resolver_type=getattr(litert.OpResolverType, kind),
                            num_threads=2)
prefill, decode = interp.get_signature_runner("prefill"), interp.get_signature_runner("decode")
phases.append(("load", time.perf_counter() - t, memory()))
shapes = prefill.get_input_details()
T = shapes["tokens"]["shape"][1]
caches = {n: np.zeros(d["shape"], np.float32) for n, d in shapes.items() if n.startswith("kv_cache")}

def step(runner, tokens, pos):
    out = runner(tokens=np.asarray([tokens], np.int32), input_pos=np.asarray([pos], np.int32), **caches)
    caches.update({k: v for k, v in out.items() if k != "logits"})
    return out["logits"][0]

prompt = [(7 * i + 3) % 97 + 1 for i in range(T)]
t = time.perf_counter()
last = step(prefill, prompt, 0)[-1]
phases.append(("first prefill", time.perf_counter() - t, memory()))
tokens = [int(np.argmax(last))]
t = time.perf_counter()
last = step(decode, [tokens[-1]], T)[0]
phases.append(("first decode", time.perf_counter() - t, memory()))
times = []
for i in range(steps):
    tokens.append(int(np.argmax(last)))
    t = time.perf_counter()
    last = step(decode, [tokens[-1]], T + 1 + i)[0]
    times.append(time.perf_counter() - t)
phases.append((f"{steps} decode steps", sum(times), memory()))
tokens.append(int(np.argmax(last)))
print("RESULT " + json.dumps({"phases": phases, "tokens": tokens, "decode_median_s": float(np.median(times)),
                              "first_logits": [float(v) for v in last.reshape(-1)[:8]]}))
"""


def run_child(code: str, *args: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"child failed ({proc.returncode}):\n{proc.stderr[-3000:]}")


def write_model(path: Path, gigabytes: float, weights: str, width: int, alignment: int | None) -> dict:
    start = time.perf_counter()
    extra = ["--alignment", str(alignment)] if alignment else []
    proc = subprocess.run([sys.executable, str(harness.BENCH / "models" / "decoder_model.py"), str(path), *extra, "--target-bytes",
                           str(gigabytes * 1e9), "--weights", weights, "--width", str(width), "--heads",
                           str(width // 128), "--vocab", "32000", "--max-len", "256", "--prefill-len", "16",
                           "--extended-buffers"], capture_output=True, text=True, check=True)
    line = proc.stdout.strip().splitlines()[-1]
    return {"seconds": time.perf_counter() - start, "peak_rss": float(line.rsplit("peak RSS ", 1)[1].split()[0]) * 2**20,
            "summary": line}


def table(name: str, result: dict, file_size: int) -> str:
    rows = [f"**{name}**", "", harness.table_head(["phase", "seconds", "VmHWM GiB", "x file",
                                                  "RSS GiB (file-backed / anonymous)"], "lrrrl")]
    for phase, seconds, mem in result["phases"]:
        rows.append(f"| {phase} | {seconds:.2f} | {mem['VmHWM'] / 2**30:.2f} | {mem['VmHWM'] / file_size:.2f} | "
                    f"{mem['VmRSS'] / 2**30:.2f} ({mem['RssFile'] / 2**30:.2f} / {mem['RssAnon'] / 2**30:.2f}) |")
    return "\n".join(rows)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, help="an existing decoder file (else one is written)")
    p.add_argument("--gigabytes", type=float, default=3.2)
    p.add_argument("--weights", choices=("float32", "float16", "int8", "int4"), default="float16")
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--steps", type=int, default=8, help="timed decode steps")
    p.add_argument("--official", choices=("none", "builtin", "xnnpack"), default="none",
                   help="also run the official interpreter (builtin kernels, or with XNNPACK)")
    p.add_argument("--alignment", type=int, default=None,
                   help="experiment: write with this block alignment instead of the writer's (see decoder_model.py)")
    p.add_argument("--fold-growth-mib", type=float, default=None,
                   help="experiment: litegpu's FOLD_GROWTH_BUDGET_BYTES in MiB (weights converted once at load "
                        "into bigger ones, float16 -> float32, instead of in every run)")
    p.add_argument("--chunk-mib", type=float, default=None,
                   help="experiment: litegpu's CONVERTED_WEIGHT_CHUNK_BYTES in MiB (the slice of a matmul's weights "
                        "converted at a time)")
    p.add_argument("--keep", type=Path, help="write the model into this folder and keep it")
    p.add_argument("--json", type=Path, help="write all numbers here")
    args = harness.parse_args(p)
    report: dict = {}
    path = args.model
    if path is None:
        folder = args.keep or Path(tempfile.mkdtemp(prefix="litegpu-big-", dir=os.environ.get("TMPDIR", "/tmp")))
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"decoder_{args.weights}_{args.gigabytes:g}gb.tflite"
        report["write"] = write_model(path, args.gigabytes, args.weights, args.width, args.alignment)
        print(report["write"]["summary"])
    size = os.path.getsize(path)
    report["file_bytes"] = size
    try:
        os.posix_fadvise(os.open(path, os.O_RDONLY), 0, 0, os.POSIX_FADV_DONTNEED)  # start from a cold page cache
    except (AttributeError, OSError):
        pass
    extra = [] if args.fold_growth_mib is None else [str(args.fold_growth_mib)]
    if args.chunk_mib is not None:
        os.environ["LITEGPU_BENCH_CHUNK_MIB"] = str(args.chunk_mib)
    report["litegpu"] = run_child(LITEGPU_CHILD, str(path), str(args.steps), *extra)
    print(table(f"litegpu, {path.name}, {size / 2**30:.2f} GiB", report["litegpu"], size))
    if args.official != "none":
        report["official"] = run_child(OFFICIAL_CHILD, str(path), str(args.steps), args.official)
        print(table(f"official ({args.official}), {path.name}", report["official"], size))
        print("tokens equal:", report["official"]["tokens"] == report["litegpu"]["tokens"],
              report["official"]["tokens"], report["litegpu"]["tokens"])
    if "write" in report:
        print(f"writer: {report['write']['seconds']:.1f} s, peak RSS {report['write']['peak_rss'] / size:.2f} x file")
    if args.json:
        harness.write_json(args.json, report)
    if args.keep is None and args.model is None:
        path.unlink()
        folder.rmdir()
    return 0


if __name__ == "__main__":
    sys.exit(main())
