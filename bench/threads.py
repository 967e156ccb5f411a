"""XNNPACK at one thread against the physical cores, per model: where do more threads stop paying?

    PYTHONPATH=src python bench/threads.py [MODEL.tflite ...] [--rounds 400]

Without model arguments: every model in ../shared/models and tests/heldout/models.  For each model, two official
interpreters (``ai_edge_litert``, default XNNPACK delegate), one thread and the physical cores, run alternately
on the same seeded inputs, every output read back; the order is shuffled each round (seeded).  Prints the
median of each, their ratio, and the model's multiply-accumulates as litegpu's planner counts them
(``ir.macs.model_macs``), which is what ``backends.litert`` decides the thread count on.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import compare_official  # noqa: E402  (seeded inputs and the official runner)

DEFAULT_DIRS = [ROOT.parent / "shared" / "models", ROOT / "tests" / "heldout" / "models"]


def measure(path: Path, cores: int, rounds: int) -> dict:
    from ai_edge_litert.interpreter import Interpreter

    from litegpu.ir.macs import model_macs
    from litegpu.ir import read_model

    probe = Interpreter(model_path=str(path))
    probe.allocate_tensors()
    inputs = compare_official.random_inputs(probe.get_input_details(), int_low=0)
    runners = {n: compare_official.official_runner(path, inputs, n)[0] for n in sorted({1, cores})}
    times: dict[int, list[float]] = {n: [] for n in runners}
    for run in runners.values():
        run()
    shuffle = random.Random(0)
    for _ in range(rounds):
        for n in shuffle.sample(list(runners), len(runners)):
            start = time.perf_counter()
            runners[n]()
            times[n].append(time.perf_counter() - start)
    medians = {n: statistics.median(v) * 1e6 for n, v in times.items()}
    return {"model": path.stem, "macs": model_macs(read_model(path)), "us": medians,
            "one_vs_cores": medians[cores] / medians[1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--rounds", type=int, default=400)
    args = parser.parse_args()
    from litegpu.backends.engine import physical_cores

    cores = physical_cores()
    models = args.models or sorted(p for d in DEFAULT_DIRS if d.is_dir() for p in d.glob("*.tflite"))
    print(f"| model | MACs | 1 thread us | {cores} threads us | {cores} threads / 1 thread |")
    print("|---|---:|---:|---:|---:|")
    rows = []
    for path in models:
        try:
            row = measure(path, cores, args.rounds)
        except Exception as e:  # noqa: BLE001  (a model the interpreter refuses is reported, not hidden)
            print(f"| {path.stem} | error: {str(e).strip().splitlines()[-1][:100]} | | | |")
            continue
        rows.append(row)
        print(f"| {row['model']} | {row['macs']:,} | {row['us'][1]:.1f} | {row['us'][cores]:.1f} | "
              f"{row['one_vs_cores']:.2f} |", flush=True)
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
