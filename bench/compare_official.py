"""litegpu vs the official runtime on the same models, inputs and machine.

For each model: the official Interpreter (XNNPACK, same thread count) and
litegpu's XLA backend run alternately on the same inputs, outputs read back
to host memory every time (the official Python benchmark tool never reads
outputs, so its figures stop at dispatch).  Prints a markdown table with
medians and the ratio official/litegpu (above 1: litegpu is faster).

    python bench/compare_official.py [--models DIR] [--runs 30] [--threads 2] [--out bench/results.md]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import numpy as np

DEFAULT_MODELS = Path(__file__).resolve().parents[2] / "shared" / "models"


def random_inputs(details: list[dict], seed: int = 0, int_low: int = -100) -> list[np.ndarray]:
    """Seeded inputs: floats in [-1, 1), integers in [int_low, 100) clipped to the dtype."""
    rng = np.random.default_rng(seed)
    out = []
    for d in details:
        shape, dtype = tuple(int(n) for n in d["shape"]), np.dtype(d["dtype"])
        if dtype.kind == "f":
            out.append(rng.uniform(-1, 1, shape).astype(dtype))
        elif dtype.kind in "iu":
            info = np.iinfo(dtype)
            out.append(rng.integers(max(info.min, int_low), min(info.max, 100), shape).astype(dtype))
        else:
            out.append(np.zeros(shape, dtype))
    return out


def official_runner(path: Path, inputs: list[np.ndarray], threads: int):
    """(run, interpreter): ``run()`` sets the inputs, invokes and reads every output back."""
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_path=str(path), num_threads=threads)
    interp.allocate_tensors()
    ins, outs = interp.get_input_details(), interp.get_output_details()

    def run() -> list[np.ndarray]:
        for d, x in zip(ins, inputs):
            interp.set_tensor(d["index"], x)
        interp.invoke()
        return [interp.get_tensor(d["index"]) for d in outs]

    return run, interp


def time_litegpu(path: Path, inputs: list[np.ndarray]):
    from litegpu.backends.xla.backend import XlaBackend
    from litegpu.ir import read_model

    backend = XlaBackend(read_model(path))

    def run() -> list[np.ndarray]:
        return [np.asarray(y) for y in backend.run(inputs)]

    return run


def measure(path: Path, runs: int, threads: int) -> dict:
    from ai_edge_litert.interpreter import Interpreter

    probe = Interpreter(model_path=str(path))
    inputs = random_inputs(probe.get_input_details())
    result: dict = {"model": path.stem}
    t0 = time.perf_counter()
    ours = time_litegpu(path, inputs)
    first = ours()
    result["litegpu_first_ms"] = (time.perf_counter() - t0) * 1e3
    official, _ = official_runner(path, inputs, threads)
    expected = official()
    result["max_abs_diff"] = max(float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
                                 for a, b in zip(first, expected))
    times: dict[str, list[float]] = {"official": [], "litegpu": []}
    for _ in range(3):  # warm-up, alternating
        official(), ours()
    for _ in range(runs):
        for name, fn in (("official", official), ("litegpu", ours)):
            t = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - t) * 1e3)
    for name, values in times.items():
        result[f"{name}_median_ms"] = statistics.median(values)
        result[f"{name}_min_ms"] = min(values)
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
    print(f"\nMachine: {platform.machine()}, {platform.processor() or 'cpu'}, threads={args.threads}\n")
    print("| model | official XNNPACK median ms | litegpu XLA CPU median ms | ratio (official / litegpu) | first run ms | max abs diff |")
    print("|---|---:|---:|---:|---:|---:|")
    ratios = []
    for r in rows:
        if "error" in r:
            print(f"| {r['model']} | - | - | - | - | {r['error']} |")
            continue
        ratios.append(r["ratio"])
        print(f"| {r['model']} | {r['official_median_ms']:.2f} | {r['litegpu_median_ms']:.2f} | {r['ratio']:.2f} | "
              f"{r['litegpu_first_ms']:.0f} | {r['max_abs_diff']:.1e} |")
    if ratios:
        print(f"\nGeometric mean ratio: {float(np.exp(np.mean(np.log(ratios)))):.2f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
