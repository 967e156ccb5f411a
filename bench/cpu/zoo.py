"""The model zoo: litegpu and the official runtime on the same models, inputs and machine.

    python bench/cpu/zoo.py build [NAME ...]      # convert the Keras zoo with /work/venv-tf (into $LITEGPU_ZOO_DIR/keras)
    python bench/cpu/zoo.py run [--only STEM ...] [--threads 2] [--max-runs 30] [--seconds 4]
    python bench/cpu/zoo.py table                 # the markdown table of bench/cpu/zoo.json
    python bench/cpu/zoo.py plot                  # bench/cpu/zoo.png from bench/cpu/zoo.json

``run`` measures every converted zoo model (batch 1 and batch 8) and every
model in /work/shared/models.  Each model is measured in its own process (a
crash, a runaway compile or the memory of a big model stays there), where
these variants run alternately on the same inputs, round-robin with the
starting variant rotated every round:

- official: ``ai_edge_litert`` Interpreter, default delegate (XNNPACK), ``--threads`` threads;
- litegpu CPU: ``CompiledModel`` with ``HardwareAccelerator.CPU``;
- litegpu GPU fp32 and fp16: only where JAX sees a GPU (skipped otherwise);
- JAX floor (GPU): the cheapest JAX program with the model's inputs and outputs (copy the inputs in, one
  kernel that writes outputs of the model's shapes, copy them out): what any JAX program, litegpu's or one
  written in JAX by hand, pays per call on that GPU, so litegpu's own cost per call is the difference;
- litegpu IREE fp32 and fp16 (``--iree``): the GPU through IREE on Vulkan (``GpuOptions(engine="iree")``),
  its programs read from the compile cache ``$LITEGPU_IREE_CACHE`` when set (``bench/gpu/iree_precompile.py``
  fills one for a GPU machine without IREE's compiler), beside XLA on CUDA on the same GPU;
- official GPU: ``ai_edge_litert``'s ``CompiledModel`` with ``HardwareAccelerator.GPU`` (its WebGPU
  accelerator over Vulkan; its default precision, fp16), where JAX sees a GPU and a probe in a child
  process shows it can run a model at all (it raises without a Vulkan driver, and a crash there must not
  take litegpu's numbers with it).  A model it cannot run gets an error entry.

Every timed run writes the inputs and reads every output back to host memory.
The number of timed runs adapts to the model: as many as fit in ``--seconds``
per variant, at least ``--min-runs`` and at most ``--max-runs``.
Results go to bench/cpu/zoo.json; ratios are official / litegpu (above 1: litegpu is faster).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # bench/: the shared harness
import harness  # noqa: E402

ZOO_DIR = harness.KERAS_ZOO
SHARED_MODELS = harness.SHARED_MODELS
TF_PYTHON = harness.TF_PYTHON
RESULTS = HERE / "zoo.json"
PLOT = HERE / "zoo.png"
SEED = 1234
MODEL_TIMEOUT_S = 1500

# Latency the LiteRT GPU documentation lists for a Samsung Galaxy S24, by zoo stem.  Empty on purpose:
# the table could not be found in the sources reachable from here (see BENCHMARKS.md); fill it from the
# page, citing it, rather than from memory.
S24_GPU_REFERENCE_MS: dict[str, float] = {}


# ---- building ---------------------------------------------------------------------------------
def build(names: list[str]) -> int:
    if not TF_PYTHON.exists():
        sys.exit(f"{TF_PYTHON} not found: the zoo is converted with TensorFlow's own converter in that venv")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.call([str(TF_PYTHON), str(harness.BENCH / "models" / "zoo_models.py"), str(ZOO_DIR), *names],
                           env=env)


def zoo_files(only: list[str] | None) -> list[Path]:
    # harness.ZOO_CACHE's own top too: a flat folder of a few zoo models (bench/gpu/gpu_checks.sh's .gpu/zoo)
    files = sorted(ZOO_DIR.glob("*.tflite")) + sorted(harness.ZOO_CACHE.glob("*.tflite")) + sorted(
        SHARED_MODELS.glob("*.tflite"))
    return [f for f in files if not only or f.stem in only]


# ---- measuring one model (child process) --------------------------------------------------------
def official_runner(path: Path, inputs: list[np.ndarray], threads: int) -> tuple[Callable, dict]:
    run, interp = harness.official_runner(path, inputs, threads)
    # The Python API does not say which ops XNNPACK took; a DELEGATE node says it took some.
    names = [o["op_name"] for o in interp._get_ops_details()]
    return run, {"delegate_nodes": names.count("DELEGATE"), "ops": len(names) - names.count("DELEGATE")}


def litegpu_runner(path: Path, inputs: list[np.ndarray], accelerator: str, precision: str,
                   threads: int, engine: str | None = None) -> tuple[Callable, dict]:
    import litegpu

    flags = litegpu.HardwareAccelerator.GPU if accelerator == "gpu" else litegpu.HardwareAccelerator.CPU
    # IREE's GPU runs with GPU | CPU: ops IREE refuses (exact integer kernels) fall back to the CPU
    flags = flags | litegpu.HardwareAccelerator.CPU if engine == "iree" else flags
    # the CPU side gets the official interpreter's thread count: on a 16-core GPU host the default (every
    # core) made litegpu's CPU column look up to 2x faster than a 2-thread XNNPACK for no reason of its own
    options = litegpu.Options(flags, cpu_options=litegpu.CpuOptions(num_threads=threads),
                              gpu_options=litegpu.GpuOptions(precision=precision, engine=engine),
                              serialization_dir=os.environ.get("LITEGPU_IREE_CACHE") if engine == "iree" else None)
    model = litegpu.CompiledModel.from_file(str(path), options=options)
    # The official runner feeds the model's subgraph inputs; litegpu runs signature 0, in its order.
    details = model.get_input_tensor_details(0)
    by_index = {int(d["index"]): d for d in details.values()}
    ins, outs = model.create_input_buffers(0), model.create_output_buffers(0)
    sg_inputs = list(model.model.subgraphs[0].inputs)
    for buf, d in zip(ins, details.values()):
        buf.write(inputs[sg_inputs.index(int(d["index"]))])
    out_index = [int(d["index"]) for d in model.get_output_tensor_details(0).values()]
    sg_outputs = list(model.model.subgraphs[0].outputs)

    def run() -> list[np.ndarray]:
        model.run_by_index(0, ins, outs)
        got = {i: o.read() for i, o in zip(out_index, outs)}
        return [got[t] for t in sg_outputs if t in got]

    plan = model.plan
    info = {"fully_delegated": bool(model.is_fully_accelerated()), "backend": plan.target.value,
            "ops": plan.num_ops, "refused": [str(u) for u in plan.unsupported][:5], "inputs_by_index": len(by_index)}
    if engine == "iree":
        info["engines"] = plan.engine_summary()
    return run, info


def iree_device() -> str | None:
    """The GPU IREE runs on here (None: no IREE runtime or no Vulkan / Metal GPU)."""
    try:
        from litegpu.backends.iree.engine import iree_devices

        found = iree_devices(allow_software=os.environ.get("LITEGPU_IREE_SOFTWARE") == "1")
    except ImportError:
        return None
    return found[0].describe() if found else None


def jax_floor_runner(inputs: list[np.ndarray], output_shapes: list[tuple], platform: str = "gpu"
                     ) -> tuple[Callable, dict]:
    """The floor of one call of any JAX program with these inputs and outputs: the inputs copied to the device,
    one jitted program that reads each input and writes outputs of the given shapes, the outputs read back."""
    import jax
    import jax.numpy as jnp

    device = jax.devices(platform)[0]

    @jax.jit
    def program(*xs):
        seed = sum(x.reshape(-1)[0].astype(jnp.float32) for x in xs)
        return [jnp.full(shape, seed, jnp.float32) for shape in output_shapes]

    def run() -> list[np.ndarray]:
        return [np.asarray(y) for y in program(*[jax.device_put(x, device) for x in inputs])]

    return run, {}


def official_gpu_runner(path: Path, inputs: list[np.ndarray], accelerator: str = "GPU") -> tuple[Callable, dict]:
    """The official CompiledModel on its GPU accelerator: signature 0, inputs matched by tensor index
    (``accelerator="CPU"`` runs the same code on its CPU, to check the runner where there is no GPU)."""
    from ai_edge_litert.compiled_model import CompiledModel
    from ai_edge_litert.hardware_accelerator import HardwareAccelerator

    from litegpu.ir import read_model

    model = CompiledModel.from_file(str(path), hardware_accel=getattr(HardwareAccelerator, accelerator))
    sg = read_model(path).subgraphs[0]
    key = model.get_signature_by_index(0)["key"]
    in_details = list(model.get_input_tensor_details(key).values())
    out_details = list(model.get_output_tensor_details(key).values())
    ins, outs = model.create_input_buffers(0), model.create_output_buffers(0)
    by_index = dict(zip(sg.inputs, inputs))
    feeds = [by_index[int(d["index"])] for d in in_details]
    sizes = [(int(np.prod(d["shape"])), np.dtype(d["dtype"]), tuple(d["shape"]), int(d["index"])) for d in out_details]

    def run() -> list[np.ndarray]:
        for buf, x in zip(ins, feeds):
            buf.write(x)
        model.run_by_index(0, ins, outs)
        got = {i: o.read(n, dtype).reshape(shape) for o, (n, dtype, shape, i) in zip(outs, sizes)}
        return [got[t] for t in sg.outputs if t in got]

    return run, {"fully_delegated": bool(model.is_fully_accelerated())}


OFFICIAL_GPU_PROBE = r"""
import sys
import numpy as np
from ai_edge_litert.compiled_model import CompiledModel
from ai_edge_litert.hardware_accelerator import HardwareAccelerator
from litegpu.ir.builder import ModelBuilder
from litegpu.ir.save import to_bytes
b = ModelBuilder()
x = b.input("x", (1, 4))
y = b.tensor("y", (1, 4))
b.op("ADD", [x, x], [y])
b.output(y)
try:
    model = CompiledModel.from_buffer(to_bytes(b.build()), hardware_accel=HardwareAccelerator.GPU)
    ins, outs = model.create_input_buffers(0), model.create_output_buffers(0)
    ins[0].write(np.arange(4, dtype=np.float32).reshape(1, 4))
    model.run_by_index(0, ins, outs)
    got = outs[0].read(4, np.float32)
    assert np.allclose(got, [0, 2, 4, 6]), f"wrong result {got}"
except Exception as e:
    print("PROBE-ERROR", type(e).__name__, " ".join(str(e).split())[:300])
    sys.exit(1)
print("PROBE-OK")
"""


def official_gpu_probe() -> str | None:
    """None when the official GPU accelerator runs a one-op model here, else why not (run in a child)."""
    try:
        done = subprocess.run([sys.executable, "-c", OFFICIAL_GPU_PROBE], capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return "the probe timed out after 300 s"
    if done.returncode == 0 and "PROBE-OK" in done.stdout:
        return None
    said = [ln.removeprefix("PROBE-ERROR ") for ln in done.stdout.splitlines() if ln.startswith("PROBE-ERROR")]
    return said[-1] if said else f"the probe died (exit {done.returncode}) in the official runtime"


def max_abs_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    if len(a) != len(b):
        return float("nan")
    return max((float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))) if x.size else 0.0
                for x, y in zip(a, b)), default=0.0)


def measure_one(path: Path, threads: int, seconds: float, min_runs: int, max_runs: int,
                official_gpu: bool = False, iree: bool = False) -> dict:
    import jax

    from litegpu.ir import read_model

    record: dict[str, Any] = {"model": path.stem, "source": "shared" if path.resolve().parent == SHARED_MODELS.resolve() else "zoo",
                              "file_bytes": path.stat().st_size}
    model_ir = read_model(path)
    details = [{"shape": t.shape, "dtype": np.dtype(_np_dtype(t.dtype)).name}
               for t in (model_ir.subgraphs[0].tensors[i] for i in model_ir.subgraphs[0].inputs)]
    inputs = harness.random_inputs(details, SEED, int_low=0)  # non-negative: ids and indices
    record["inputs"] = [f"{list(d['shape'])} {d['dtype']}" for d in details]
    variants = {"official_cpu": lambda: official_runner(path, inputs, threads),
                "litegpu_cpu": lambda: litegpu_runner(path, inputs, "cpu", "fp32", threads)}
    has_gpu = any(d.platform == "gpu" for d in jax.devices()) if _has_gpu_backend(jax) else False
    if has_gpu:
        variants["litegpu_gpu_fp32"] = lambda: litegpu_runner(path, inputs, "gpu", "fp32", threads)
        variants["litegpu_gpu_fp16"] = lambda: litegpu_runner(path, inputs, "gpu", "fp16", threads)
        output_shapes = [tuple(model_ir.subgraphs[0].tensors[t].shape) for t in model_ir.subgraphs[0].outputs]
        variants["jax_floor_gpu"] = lambda: jax_floor_runner(inputs, output_shapes)
    if iree:
        variants["litegpu_iree_fp32"] = lambda: litegpu_runner(path, inputs, "gpu", "fp32", threads, "iree")
        variants["litegpu_iree_fp16"] = lambda: litegpu_runner(path, inputs, "gpu", "fp16", threads, "iree")
    if official_gpu:
        variants["official_gpu"] = lambda: official_gpu_runner(path, inputs)
    record["gpu"] = has_gpu
    runners: dict[str, Callable] = {}
    outputs: dict[str, list[np.ndarray]] = {}
    for name, make in variants.items():
        entry: dict[str, Any] = {}
        try:
            t = time.perf_counter()
            run, info = make()
            entry.update(info)
            entry["init_ms"] = (time.perf_counter() - t) * 1e3
            t = time.perf_counter()
            outputs[name] = run()
            entry["first_run_ms"] = (time.perf_counter() - t) * 1e3
            runners[name] = run
        except Exception as e:  # noqa: BLE001  (a model one runtime cannot run is reported, not hidden)
            entry["error"] = f"{type(e).__name__}: {' '.join(str(e).split())[:400]}"
        record[name] = entry
    if "official_cpu" in outputs:
        for name, got in outputs.items():
            if name not in ("official_cpu", "jax_floor_gpu"):  # the floor computes nothing of the model
                record[name]["max_abs_diff"] = max_abs_diff(got, outputs["official_cpu"])
    # one warm-up round, which also sizes the timed part
    warm = {}
    for name, run in runners.items():
        t = time.perf_counter()
        run()
        warm[name] = time.perf_counter() - t
    slowest = max(warm.values(), default=1.0)
    runs = int(min(max_runs, max(min_runs, seconds / max(slowest, 1e-6))))
    times = harness.alternate(runners, runs, order="rotate")
    for name, values in times.items():
        record[name].update(median_ms=harness.median_ms(values), min_ms=min(values) * 1e3,
                            p95_ms=harness.percentile_ms(values, 95), runs=len(values))
    official = record["official_cpu"].get("median_ms")
    for name, values in times.items():
        if name != "official_cpu" and official:
            record[name]["ratio_official_over_litegpu"] = official / harness.median_ms(values)
    reference = S24_GPU_REFERENCE_MS.get(path.stem)
    if reference:
        record["s24_gpu_reference_ms"] = reference
    record["load_average_1m"] = round(os.getloadavg()[0], 2)
    return record


def jax_sees_gpu() -> bool:
    import jax

    return _has_gpu_backend(jax)


def _has_gpu_backend(jax: Any) -> bool:
    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:
        return False


def _np_dtype(name: str) -> Any:
    from litegpu.ir import numpy_dtype

    return numpy_dtype(name)


def run_all(args: argparse.Namespace) -> None:
    files = zoo_files(args.only)
    if not files:
        sys.exit(f"no models: run `python bench/cpu/zoo.py build` first (looked in {ZOO_DIR} and {SHARED_MODELS})")
    previous = {r["model"]: r for r in json.loads(args.results.read_text())["models"]} if (
        args.only and args.results.exists()) else {}
    rows = []
    started = time.perf_counter()
    official_gpu_problem = official_gpu_probe() if jax_sees_gpu() else "JAX sees no GPU: not tried"
    print(f"official GPU accelerator: {official_gpu_problem or 'runs'}", flush=True)
    iree_gpu = iree_device() if args.iree else None
    if args.iree:
        print(f"IREE: {iree_gpu or 'no IREE runtime or no Vulkan GPU here: not measured'}", flush=True)
    for path in files:
        cmd = [sys.executable, __file__, "one", str(path), "--threads", str(args.threads), "--seconds",
               str(args.seconds), "--min-runs", str(args.min_runs), "--max-runs", str(args.max_runs)]
        if official_gpu_problem is None:
            cmd.append("--official-gpu")
        if iree_gpu:
            cmd.append("--iree")
        t = time.perf_counter()
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=MODEL_TIMEOUT_S,
                                  check=False)
            lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
            record = json.loads(lines[-1]) if lines else {
                "model": path.stem, "error": f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"}
        except subprocess.TimeoutExpired:
            record = {"model": path.stem, "error": f"timed out after {MODEL_TIMEOUT_S} s"}
        record["wall_s"] = round(time.perf_counter() - t, 1)
        rows.append(record)
        print(summary_line(record), flush=True)
    merged = {**previous, **{r["model"]: r for r in rows}}
    result = {"machine": {**machine(), "official_gpu": official_gpu_problem or "runs",
                          **({"iree": iree_gpu} if args.iree else {})}, "threads": args.threads,
              "wall_s": round(time.perf_counter() - started),
              "models": sorted(merged.values(), key=lambda r: r["model"])}
    harness.write_json(args.results, result)
    print(markdown(result))


def summary_line(r: dict) -> str:
    parts = [r["model"]]
    for name in ("official_cpu", "litegpu_cpu", "litegpu_gpu_fp32", "litegpu_gpu_fp16", "jax_floor_gpu",
                 "litegpu_iree_fp32", "litegpu_iree_fp16", "official_gpu"):
        v = r.get(name, {})
        if "median_ms" in v:
            parts.append(f"{name} {v['median_ms']:.2f} ms")
        elif "error" in v:  # the whole message: on a lent GPU machine the log may be all that comes back
            parts.append(f"{name} error ({v['error']})")
    if "error" in r:
        parts.append(r["error"])
    return "  ".join(parts) + f"  ({r.get('wall_s', '?')} s)"


def machine() -> dict:
    info = harness.machine("jax", "ai-edge-litert")
    try:
        import jax

        info["devices"] = [str(d) for d in jax.devices()]
    except ImportError:
        pass
    return info


# ---- reporting --------------------------------------------------------------------------------
def _cell(v: dict, key: str, fmt: str) -> str:
    return format(v[key], fmt) if key in v else "-"


def markdown(result: dict) -> str:
    gpu = any(r.get("gpu") for r in result["models"])
    official_gpu = any("official_gpu" in r for r in result["models"])
    iree = any("litegpu_iree_fp32" in r for r in result["models"])
    head = ["model", "litegpu delegation", "XNNPACK partitions", "official XNNPACK ms", "litegpu CPU ms", "ratio CPU (official / litegpu)"]
    if gpu:
        head += ["litegpu GPU fp32 ms", "litegpu GPU fp16 ms", "JAX floor ms", "ratio GPU fp32 (official CPU / litegpu)"]
    if iree:
        head += ["litegpu IREE fp32 ms", "litegpu IREE fp16 ms"]
    if official_gpu:
        head += ["official GPU ms (its default fp16)", "ratio GPU fp16 (official GPU / litegpu)"]
    if official_gpu and iree:
        head += ["ratio IREE fp16 (official GPU / litegpu IREE)"]
    head += ["S24 GPU ref ms", "runs", "litegpu first run ms", "max abs diff"]
    lines = [harness.table_head(head, "l" * len(head))]
    ratios: dict[str, list[float]] = {"litegpu_cpu": [], "litegpu_gpu_fp32": [], "litegpu_gpu_fp16 vs official_gpu": [],
                                      "litegpu_iree_fp16 vs official_gpu": []}
    for r in result["models"]:
        if "error" in r:
            lines.append(f"| {r['model']} | " + " | ".join(["-"] * (len(head) - 2)) + f" | {r['error'][:80]} |")
            continue
        o, c = r.get("official_cpu", {}), r.get("litegpu_cpu", {})
        deleg = ("error: " + c["error"][:70]) if "error" in c else (
            "full" if c.get("fully_delegated") else f"partial ({c.get('backend')})")
        cells = [r["model"], deleg, str(o.get("delegate_nodes", "-")),
                 _cell(o, "median_ms", ".2f") if "error" not in o else "cannot run",
                 _cell(c, "median_ms", ".2f"), _cell(c, "ratio_official_over_litegpu", ".2f")]
        if "ratio_official_over_litegpu" in c:
            ratios["litegpu_cpu"].append(c["ratio_official_over_litegpu"])
        if gpu:
            g32, g16 = r.get("litegpu_gpu_fp32", {}), r.get("litegpu_gpu_fp16", {})
            cells += [_cell(g32, "median_ms", ".2f"), _cell(g16, "median_ms", ".2f"),
                      _cell(r.get("jax_floor_gpu", {}), "median_ms", ".2f"),
                      _cell(g32, "ratio_official_over_litegpu", ".1f")]
            if "ratio_official_over_litegpu" in g32:
                ratios["litegpu_gpu_fp32"].append(g32["ratio_official_over_litegpu"])
        if iree:
            i32, i16 = r.get("litegpu_iree_fp32", {}), r.get("litegpu_iree_fp16", {})
            cells += [_cell(v, "median_ms", ".2f") if "error" not in v else "error: " + v["error"][:40]
                      for v in (i32, i16)]
        if official_gpu:
            og, g16 = r.get("official_gpu", {}), r.get("litegpu_gpu_fp16", {})
            ratio = og["median_ms"] / g16["median_ms"] if "median_ms" in og and "median_ms" in g16 else None
            cells += [_cell(og, "median_ms", ".2f") if "error" not in og else "error: " + og["error"][:40],
                      f"{ratio:.2f}" if ratio else "-"]
            if ratio:
                ratios["litegpu_gpu_fp16 vs official_gpu"].append(ratio)
        if official_gpu and iree:
            og, i16 = r.get("official_gpu", {}), r.get("litegpu_iree_fp16", {})
            ratio = og["median_ms"] / i16["median_ms"] if "median_ms" in og and "median_ms" in i16 else None
            cells.append(f"{ratio:.2f}" if ratio else "-")
            if ratio:
                ratios["litegpu_iree_fp16 vs official_gpu"].append(ratio)
        cells += [str(r.get("s24_gpu_reference_ms", "-")), str(c.get("runs", o.get("runs", "-"))),
                  _cell(c, "first_run_ms", ".0f"), _cell(c, "max_abs_diff", ".1e")]
        lines.append("| " + " | ".join(cells) + " |")
    for name, values in ratios.items():
        if values:
            g = harness.geomean(values)
            what = f"official GPU / {name.split(' vs ')[0]}" if " vs " in name else f"official / {name}"
            lines.append(f"\nGeometric mean ratio {what}: **{g:.2f}** over {len(values)} models")
    return "\n".join(lines)


def plot(result: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["models"] if "median_ms" in r.get("litegpu_cpu", {})
            or "median_ms" in r.get("official_cpu", {})]
    variants = [("official_cpu", "official XNNPACK CPU"), ("litegpu_cpu", "litegpu CPU"),
                ("litegpu_gpu_fp32", "litegpu GPU fp32"), ("litegpu_gpu_fp16", "litegpu GPU fp16"),
                ("official_gpu", "official GPU (fp16)")]
    variants = [(k, label) for k, label in variants if any("median_ms" in r.get(k, {}) for r in rows)]
    fig, ax = plt.subplots(figsize=(10, 0.32 * len(rows) * len(variants) / 2 + 2))
    height = 0.8 / len(variants)
    y = np.arange(len(rows))
    for i, (key, label) in enumerate(variants):
        values = [r.get(key, {}).get("median_ms", np.nan) for r in rows]
        ax.barh(y + i * height, values, height=height, label=label)
    ax.set_yticks(y + height * (len(variants) - 1) / 2, [r["model"] for r in rows])
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("median latency per run, ms (log scale; outputs read back every run)")
    m = result["machine"]
    ax.set_title(f"litegpu vs official runtime, {m.get('cpu', m['machine'])}, {m['cpus']} CPUs")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(PLOT, dpi=110)
    print(f"wrote {PLOT}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build")
    b.add_argument("names", nargs="*")
    for name in ("run", "one"):
        p = sub.add_parser(name)
        if name == "one":
            p.add_argument("file", type=Path)
        else:
            p.add_argument("--only", nargs="*", default=None, help="model stems")
        p.add_argument("--threads", type=int, default=2)
        if name == "run":
            p.add_argument("--results", type=Path, default=RESULTS, help="the JSON written (default bench/cpu/zoo.json)")
        p.add_argument("--seconds", type=float, default=4.0, help="timed seconds per variant and model")
        p.add_argument("--min-runs", type=int, default=5)
        p.add_argument("--max-runs", type=int, default=30)
        if name == "one":
            p.add_argument("--official-gpu", action="store_true", help="also the official GPU accelerator")
        p.add_argument("--iree", action="store_true", help="also litegpu through IREE on the Vulkan GPU")
    sub.add_parser("table")
    sub.add_parser("plot")
    args = parser.parse_args()
    if args.command == "build":
        sys.exit(build(args.names))
    if args.command == "one":
        print(json.dumps(measure_one(args.file, args.threads, args.seconds, args.min_runs, args.max_runs,
                                     args.official_gpu, args.iree)))
    elif args.command == "run":
        run_all(args)
        if args.results == RESULTS:  # the plot is of bench/cpu/zoo.json; a run written elsewhere is a side run
            plot(json.loads(args.results.read_text()))
    elif args.command == "table":
        print(markdown(json.loads(RESULTS.read_text())))
    else:
        plot(json.loads(RESULTS.read_text()))


if __name__ == "__main__":
    main()
