"""The first five minutes (issue 35): whole-process starts of a user's script, litegpu against the official
interpreter running the same script, the first start ever (empty compile cache) and the second.

    PYTHONPATH=src python bench/startup/startup.py [--runs 5] [--models face hand int8 transformer vgg] [--skip-crowd]

What is timed, each a new Python process, litegpu's and the official interpreter's in turn (A B A B ...):

- a script that loads a model and runs it once on seeded inputs, reading the outputs: with litegpu
  ``CompiledModel.from_file(path)`` and ``model.run(inputs)`` (no options: the compile cache on by default), with
  the official package ``Interpreter(model_path=path)``, ``allocate_tensors``, set / invoke / get (its defaults);
- litegpu's *first* start: ``LITEGPU_CACHE_DIR`` a new empty folder for every run; its *second* start: a folder a
  first start filled (the official interpreter keeps nothing between processes: its script is the same both
  times);
- ``litegpu run`` (second start) on the bundled model, wall time;
- eight processes started at once on an empty cache (the bundled model on the default path, and on the builtin
  kernels, whose XLA program is compiled): every process's outputs, how many cache entries each process wrote
  (a store counted per process), and whether the cache holds one verified entry per program.

Medians of ``--runs`` runs (at least 5), wall and CPU (user + system, the kernel's accounting of each finished
child: on a machine others share, the CPU seconds are what the load does not stretch).  Bytecode is written and
kept (an installed package has its .pyc files).  The models: the bundled face detector; ../shared/models' hand
landmark (MediaPipe), int8 MobileNetV3 and transformer encoder; and a VGG-16 convolution trunk at batch 2 made
here with litegpu's builder (31 G multiply-accumulates: past the size where the planner times the engines, so
OpenVINO runs it without timing).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
import harness  # noqa: E402

ROOT = harness.ROOT
SHARED = harness.SHARED_MODELS

OFFICIAL = """
import sys, numpy as np
from ai_edge_litert.interpreter import Interpreter
interpreter = Interpreter(model_path=sys.argv[1])
interpreter.allocate_tensors()
rng = np.random.default_rng(0)
for d in interpreter.get_input_details():
    x = rng.uniform(-1, 1, d["shape"]) if np.dtype(d["dtype"]).kind == "f" else rng.integers(-100, 100, d["shape"])
    interpreter.set_tensor(d["index"], x.astype(d["dtype"]))
interpreter.invoke()
outputs = [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]
"""

LITEGPU = """
import sys, numpy as np
import litegpu
model = litegpu.CompiledModel.from_file(sys.argv[1])
rng = np.random.default_rng(0)
inputs = {}
for name, d in model.get_input_tensor_details(0).items():
    x = rng.uniform(-1, 1, d["shape"]) if np.dtype(d["dtype"]).kind == "f" else rng.integers(-100, 100, d["shape"])
    inputs[name] = x.astype(d["dtype"])
outputs = model.run(inputs)
if len(sys.argv) > 2:
    print(model.plan.engine_summary())
"""

# One of eight processes started together: the outputs, and how many entries this process stored.
CROWD = """
import json, sys, numpy as np
import litegpu
from litegpu.backends import cache
stored = []
original = cache.CompileCache.store
def counting(self, key, payload, meta=None):
    stored.append(key)
    return original(self, key, payload, meta)
cache.CompileCache.store = counting
options = None
if sys.argv[2] == "builtin":
    options = litegpu.Options(litegpu.HardwareAccelerator.CPU,
                              cpu_options=litegpu.CpuOptions(kernel_mode=litegpu.CpuKernelMode.BUILTIN))
model = litegpu.CompiledModel.from_file(sys.argv[1], options=options)
reference = np.load(sys.argv[3])
inputs = {k.split("/")[-1]: reference[k] for k in reference.files if k.startswith("-/in/")}
outputs = model.run(inputs)
print(json.dumps({"stored": stored, "outputs": {k: v.tolist() for k, v in outputs.items()}}))
"""


def environment(cache_dir: str | None) -> dict:
    env = harness.child_environment(PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if cache_dir is not None:
        env["LITEGPU_CACHE_DIR"] = cache_dir
    return env


def start(argv: list[str], env: dict) -> tuple[float, float, str]:
    """(wall s, CPU s, stdout) of one whole process."""
    wall, cpu, done = harness.timed_process(argv, env, timeout=900)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(argv[:3])}: {done.stderr.strip()[-400:]}")
    return wall, cpu, done.stdout


def vgg_trunk(path: Path, batch: int = 2) -> Path:
    """VGG-16's thirteen 3x3 convolutions (random weights), max pools between the blocks, a mean and a small
    classifier: 15.4 G multiply-accumulates an image."""
    import numpy as np

    sys.path.insert(0, str(ROOT / "src"))
    from litegpu.ir.builder import ModelBuilder
    from litegpu.ir.save import write_model

    if path.exists():
        return path
    rng = np.random.default_rng(0)
    b = ModelBuilder()
    size, channels = 224, 3
    x = b.input("image", (batch, size, size, channels))
    for block, (width, convs) in enumerate(((64, 2), (128, 2), (256, 3), (512, 3), (512, 3))):
        for k in range(convs):
            w = b.constant(f"w{block}_{k}", (rng.normal(size=(width, 3, 3, channels)) * (2 / (9 * channels)) ** 0.5
                                              ).astype(np.float32))
            bias = b.constant(f"b{block}_{k}", np.zeros(width, np.float32))
            y = b.tensor(f"c{block}_{k}", (batch, size, size, width))
            b.op("CONV_2D", [x, w, bias], [y], padding="SAME", stride_w=1, stride_h=1,
                 fused_activation_function="RELU")
            x, channels = y, width
        size //= 2
        pooled = b.tensor(f"p{block}", (batch, size, size, channels))
        b.op("MAX_POOL_2D", [x], [pooled], padding="VALID", stride_w=2, stride_h=2, filter_width=2, filter_height=2)
        x = pooled
    mean = b.tensor("mean", (batch, channels))
    b.op("MEAN", [x, b.constant("axes", np.array([1, 2], np.int32))], [mean], keep_dims=False)
    logits = b.tensor("logits", (batch, 10))
    b.op("FULLY_CONNECTED", [mean, b.constant("fc", rng.normal(size=(10, channels)).astype(np.float32) * 0.05), -1],
         [logits])
    b.output(logits)
    write_model(b.build(), path)
    return path


def models(names: list[str], work: Path) -> dict[str, Path]:
    known = {
        "face": ROOT / "src" / "litegpu" / "models" / "mediapipe_face_detection_short_range.tflite",
        "hand": SHARED / "mediapipe_hand_landmark_lite.tflite",
        "int8": SHARED / "mobilenet_v3_small_int8.tflite",
        "transformer": SHARED / "transformer_encoder_float32.tflite",
    }
    found = {}
    for name in names:
        if name == "vgg":
            found[name] = vgg_trunk(work / "vgg16_trunk_b2.tflite")
        elif name in known and known[name].is_file():
            found[name] = known[name]
        else:
            print(f"skipping {name}: not found", file=sys.stderr)
    return found


def medians(samples: list[tuple[float, float, str]]) -> tuple[float, float]:
    return statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)


def measure_model(path: Path, runs: int, work: Path) -> dict:
    python = sys.executable
    official = [python, "-c", OFFICIAL, str(path)]
    ours = [python, "-c", LITEGPU, str(path)]
    filled = tempfile.mkdtemp(prefix="filled-", dir=work)
    plan = start(ours + ["plan"], environment(filled))[2].strip().splitlines()[-1]  # the first start, kept
    start(official, environment(None))  # page cache and bytecode warm for both
    first, second, reference = [], [], []
    for _ in range(runs):
        reference.append(start(official, environment(None)))
        first.append(start(ours, environment(tempfile.mkdtemp(prefix="empty-", dir=work))))
        reference.append(start(official, environment(None)))
        second.append(start(ours, environment(filled)))
    row = {"model": path.stem, "plan": plan}
    row["official_wall"], row["official_cpu"] = medians(reference)
    row["first_wall"], row["first_cpu"] = medians(first)
    row["second_wall"], row["second_cpu"] = medians(second)
    return row


def measure_cli(runs: int, work: Path) -> tuple[float, float, list[float]]:
    """``litegpu run`` on the bundled model, its second start (the cache a first run filled)."""
    filled = tempfile.mkdtemp(prefix="cli-", dir=work)
    argv = [sys.executable, "-m", "litegpu.cli.main", "run"]
    start(argv, environment(filled))
    samples = [start(argv, environment(filled)) for _ in range(runs)]
    wall, cpu = medians(samples)
    return wall, cpu, sorted(s[0] for s in samples)


def crowd(path: Path, kernels: str, work: Path, processes: int = 8) -> dict:
    """``processes`` litegpu processes started at once on one empty cache."""
    sys.path.insert(0, str(ROOT / "src"))
    import numpy as np

    from litegpu.backends.cache import CompileCache

    directory = tempfile.mkdtemp(prefix="crowd-", dir=work)
    reference = path.with_suffix(".reference.npz")
    argv = [sys.executable, "-c", CROWD, str(path), kernels, str(reference)]
    begin = time.perf_counter()
    children = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=environment(directory)) for _ in range(processes)]
    results = []
    for child in children:
        out, err = child.communicate(timeout=900)
        if child.returncode != 0:
            raise RuntimeError(err.strip()[-400:])
        results.append(json.loads(out.strip().splitlines()[-1]))
    wall = time.perf_counter() - begin
    expected = np.load(reference)
    worst = 0.0
    for r in results:
        for name, values in r["outputs"].items():
            want = expected[f"-/out/{name}" if kernels == "fast" else f"-/out_ref/{name}"]
            worst = max(worst, float(np.abs(np.asarray(values, np.float32) - want).max() / np.abs(want).max()))
    cache = CompileCache(directory)
    entries = list(cache.entries())
    stores = [len(r["stored"]) for r in results]
    every_key = [k for r in results for k in r["stored"]]
    return {"kernels": kernels, "processes": processes, "wall_s": wall, "entries": len(entries),
            "stores_per_process": stores, "keys_stored_twice": len(every_key) - len(set(every_key)),
            "verify_problems": len(cache.verify()), "largest_relative_difference": worst,
            "what": sorted(f"{e.engine} {e.what}" for e in entries)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--models", nargs="*", default=["face", "hand", "int8", "transformer", "vgg"])
    parser.add_argument("--skip-crowd", action="store_true")
    parser.add_argument("--skip-cli", action="store_true")
    args = parser.parse_args()
    if args.runs < 5:
        parser.error("--runs: at least 5 (medians of five runs or more)")
    work = Path(tempfile.mkdtemp(prefix="litegpu-startup-"))
    print(f"{harness.machine_line()}; medians of {args.runs} runs, alternating with the official interpreter\n")
    print(harness.table_head(["model", "litegpu plan", "official wall s", "first start wall s (ratio)",
                              "second start wall s (ratio)", "official CPU s", "first start CPU s (ratio)",
                              "second start CPU s (ratio)"], "llrrrrrr"))
    for name, path in models(args.models, work).items():
        r = measure_model(path, args.runs, work)
        print(f"| {r['model']} | {r['plan']} | {r['official_wall']:.3f} | {r['first_wall']:.3f} "
              f"({r['first_wall'] / r['official_wall']:.2f}x) | {r['second_wall']:.3f} "
              f"({r['second_wall'] / r['official_wall']:.2f}x) | {r['official_cpu']:.3f} | {r['first_cpu']:.3f} "
              f"({r['first_cpu'] / r['official_cpu']:.2f}x) | {r['second_cpu']:.3f} "
              f"({r['second_cpu'] / r['official_cpu']:.2f}x) |", flush=True)
    if not args.skip_cli:
        wall, cpu, walls = measure_cli(args.runs, work)
        print(f"\n`litegpu run` (bundled model, second start): median wall {wall:.3f} s, CPU {cpu:.3f} s "
              f"(walls {', '.join(f'{w:.3f}' for w in walls)})", flush=True)
    if not args.skip_crowd:
        face = ROOT / "src" / "litegpu" / "models" / "mediapipe_face_detection_short_range.tflite"
        for kernels in ("fast", "builtin"):
            print(f"\neight processes at once, empty cache, {kernels} kernels: {json.dumps(crowd(face, kernels, work))}",
                  flush=True)
    print(f"\nafter: {harness.machine_line()}")


if __name__ == "__main__":
    main()
