"""litegpu vs the official runtime on the same models, inputs and machine.

For each model: the official Interpreter (XNNPACK, same thread count) and
litegpu's XLA backend run alternately on the same inputs, outputs read back
to host memory every time (the official Python benchmark tool never reads
outputs, so its figures stop at dispatch).  Prints a markdown table with
medians and the ratio official/litegpu (above 1: litegpu is faster).

    python bench/cpu/compare_official.py [--models DIR] [--runs 30] [--threads 2] [--out bench/results.md]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
import harness  # noqa: E402

DEFAULT_MODELS = harness.SHARED_MODELS


def time_litegpu(path: Path, inputs: list[np.ndarray]):
    from litegpu.backends.xla.backend import XlaBackend
    from litegpu.ir import read_model

    backend = XlaBackend(read_model(path))

    def run() -> list[np.ndarray]:
        return [np.asarray(y) for y in backend.run(inputs)]

    return run


def measure(path: Path, runs: int, threads: int) -> dict:
    probe = harness.official_interpreter(path, allocate=False)
    inputs = harness.random_inputs(probe.get_input_details())
    result: dict = {"model": path.stem}
    t0 = time.perf_counter()
    ours = time_litegpu(path, inputs)
    first = ours()
    result["litegpu_first_ms"] = (time.perf_counter() - t0) * 1e3
    official, _ = harness.official_runner(path, inputs, threads)
    expected = official()
    result["max_abs_diff"] = max(float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
                                 for a, b in zip(first, expected))
    times = harness.alternate({"official": official, "litegpu": ours}, runs, warmup=3)
    for name, values in times.items():
        result[f"{name}_median_ms"] = harness.median_ms(values)
        result[f"{name}_min_ms"] = min(values) * 1e3
    result["ratio"] = result["official_median_ms"] / result["litegpu_median_ms"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, default=DEFAULT_MODELS)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", nargs="*", default=None, help="model stems to run")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    rows = []
    for path in sorted(args.models.glob("*.tflite")):
        if args.only and path.stem not in args.only:
            continue
        try:
            rows.append(measure(path, args.runs, args.threads))
        except Exception as e:  # a model we cannot run yet is reported, not hidden
            rows.append({"model": path.stem, "error": f"{type(e).__name__}: {str(e)[:120]}"})
        print(json.dumps(rows[-1]), flush=True)
    print(f"\n{harness.machine_line()}, threads={args.threads}\n")
    print(harness.table_head(["model", "official XNNPACK median ms", "litegpu XLA CPU median ms",
                              "ratio (official / litegpu)", "first run ms", "max abs diff"], "lrrrrr"))
    ratios = []
    for r in rows:
        if "error" in r:
            print(f"| {r['model']} | - | - | - | - | {r['error']} |")
            continue
        ratios.append(r["ratio"])
        print(f"| {r['model']} | {r['official_median_ms']:.2f} | {r['litegpu_median_ms']:.2f} | {r['ratio']:.2f} | "
              f"{r['litegpu_first_ms']:.0f} | {r['max_abs_diff']:.1e} |")
    if ratios:
        print(f"\nGeometric mean ratio: {harness.geomean(ratios):.2f}")
    if args.json:
        harness.write_json(args.json, rows)


if __name__ == "__main__":
    main()
