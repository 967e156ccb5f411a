"""XNNPACK at one thread against the physical cores, per model: where do more threads stop paying?

    PYTHONPATH=src python bench/cpu/threads.py [MODEL.tflite ...] [--rounds 400]

Without model arguments: every model in ../shared/models and tests/heldout/models.  For each model, two official
interpreters (``ai_edge_litert``, default XNNPACK delegate), one thread and the physical cores, run alternately
on the same seeded inputs, every output read back; the order is shuffled each round (seeded).  Prints the
median of each, their ratio, and the model's multiply-accumulates as litegpu's planner counts them
(``ir.macs.model_macs``), which is what ``backends.litert`` decides the thread count on.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
import harness  # noqa: E402

DEFAULT_DIRS = [harness.SHARED_MODELS, harness.ROOT / "tests" / "heldout" / "models"]


def measure(path: Path, cores: int, rounds: int) -> dict:
    from litegpu.ir.macs import model_macs
    from litegpu.ir import read_model

    probe = harness.official_interpreter(path)
    inputs = harness.random_inputs(probe.get_input_details(), int_low=0)
    runners = {n: harness.official_runner(path, inputs, n)[0] for n in sorted({1, cores})}
    times = harness.alternate(runners, rounds, order="shuffle", warmup=1)
    medians = {n: statistics.median(v) * 1e6 for n, v in times.items()}
    return {"model": path.stem, "macs": model_macs(read_model(path)), "us": medians,
            "one_vs_cores": medians[cores] / medians[1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--rounds", type=int, default=400)
    args = harness.parse_args(parser)
    from litegpu.backends.engine import physical_cores

    cores = physical_cores()
    models = args.models or sorted(p for d in DEFAULT_DIRS if d.is_dir() for p in d.glob("*.tflite"))
    print(harness.table_head(["model", "MACs", "1 thread us", f"{cores} threads us", f"{cores} threads / 1 thread"],
                             "lrrrr"))
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
