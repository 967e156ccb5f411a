"""Warm start, whole process: litegpu with its compile cache filled beside the official interpreter's load + first run.

    PYTHONPATH=src python bench/startup/warm_start.py [MODEL.tflite ...] [--runs 10]

Without model arguments: every model in ../shared/models and bench/.zoo.  Each start is a new Python process,
timed from the parent (``subprocess.run``: the interpreter's start, imports, loading the model, one run on
seeded inputs and reading its outputs, and the exit), the two alternating:

- official: ``from ai_edge_litert.interpreter import Interpreter``, load, ``allocate_tensors``, set / invoke /
  get (the physical cores' threads, as litegpu's default);
- litegpu warm: ``import litegpu``, ``CompiledModel.from_file`` with ``Options(serialization_dir=...)`` holding
  what a first process (the cold start, run once before and not counted) wrote, one ``run``.

Bytecode is written and kept (an installed package has its .pyc files), so neither start compiles Python.
Prints the median wall and CPU (user + system) seconds of each, their differences (issue 26's goal: litegpu
within 0.2 s) and the plan.  On a machine others share, read the CPU columns: the load stretches wall time.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
import harness  # noqa: E402

DEFAULT_DIRS = [harness.SHARED_MODELS, harness.ZOO_CACHE]

OFFICIAL = """
import sys, numpy as np
from ai_edge_litert.interpreter import Interpreter
interpreter = Interpreter(model_path=sys.argv[1], num_threads=int(sys.argv[2]))
interpreter.allocate_tensors()
rng = np.random.default_rng(0)
for d in interpreter.get_input_details():
    x = rng.uniform(-1, 1, d["shape"]) if np.dtype(d["dtype"]).kind == "f" else np.zeros(d["shape"])
    interpreter.set_tensor(d["index"], x.astype(d["dtype"]))
interpreter.invoke()
[interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]
"""

LITEGPU = """
import sys, numpy as np
import litegpu
engines = tuple(sys.argv[3].split(",")) if len(sys.argv) > 3 and sys.argv[3] else None
model = litegpu.CompiledModel.from_file(sys.argv[1], options=litegpu.Options(
    litegpu.HardwareAccelerator.CPU, serialization_dir=sys.argv[2], cpu_options=litegpu.CpuOptions(engines=engines)))
rng = np.random.default_rng(0)
inputs = {}
for name, d in model.get_input_tensor_details(0).items():
    x = rng.uniform(-1, 1, d["shape"]) if np.dtype(d["dtype"]).kind == "f" else np.zeros(d["shape"])
    inputs[name] = x.astype(d["dtype"])
model.run(inputs)
if len(sys.argv) > 4:
    print(model.plan.engine_summary())
"""


def start(code: str, *args: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one process running ``code``: on a machine others share, the CPU time
    (user + system, the kernel's own accounting of the finished child) is what the load does not stretch."""
    elapsed, cpu, done = harness.timed_process([sys.executable, "-c", code, *args], timeout=600)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed")
    return elapsed, cpu


def measure(path: Path, runs: int, threads: int, engines: str = "") -> dict:
    with tempfile.TemporaryDirectory() as cache:
        cold = subprocess.run([sys.executable, "-c", LITEGPU, str(path), cache, engines, "plan"], capture_output=True,
                              text=True, env=harness.child_environment(), timeout=900)
        if cold.returncode != 0:
            return {"model": path.stem, "error": cold.stderr.strip().splitlines()[-1][:160]}
        start(OFFICIAL, str(path), str(threads))  # page cache and bytecode warm for both
        times: dict[str, list[tuple[float, float]]] = {"official": [], "litegpu": []}
        for _ in range(runs):
            times["official"].append(start(OFFICIAL, str(path), str(threads)))
            times["litegpu"].append(start(LITEGPU, str(path), cache, engines))
    row = {"model": path.stem, "plan": cold.stdout.strip().splitlines()[-1]}
    for k, name in enumerate(("wall", "cpu")):
        official, ours = (statistics.median(t[k] for t in times[v]) for v in ("official", "litegpu"))
        row.update({f"official_{name}_s": official, f"litegpu_{name}_s": ours, f"difference_{name}_s": ours - official})
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--engines", default="", help="CpuOptions(engines=...) for litegpu, comma-separated "
                        "(e.g. openvino: the warm start of a model planned on OpenVINO)")
    args = parser.parse_args()
    from litegpu.backends.engine import physical_cores

    models = args.models or sorted(p for d in DEFAULT_DIRS if d.is_dir() for p in d.glob("*.tflite"))
    print(f"{harness.machine_line()}; whole process, median of {args.runs} starts each, alternating; wall and CPU "
          "(user + system) seconds\n")
    print(harness.table_head(["model", "official wall s", "litegpu warm wall s", "difference", "official CPU s",
                              "litegpu warm CPU s", "difference", "litegpu plan"], "lrrrrrrl"))
    for path in models:
        row = measure(path, args.runs, physical_cores(), args.engines)
        if "error" in row:
            print(f"| {row['model']} | error: {row['error']} |" + " |" * 6, flush=True)
            continue
        print(f"| {row['model']} | {row['official_wall_s']:.3f} | {row['litegpu_wall_s']:.3f} | "
              f"{row['difference_wall_s']:+.3f} | {row['official_cpu_s']:.3f} | {row['litegpu_cpu_s']:.3f} | "
              f"{row['difference_cpu_s']:+.3f} | {row['plan']} |", flush=True)


if __name__ == "__main__":
    main()
