"""OpenVINO in bf16 (``CpuOptions(precision="bf16")``) against fp32: error and speed, same inputs.

    python bench/cpu/bf16_error.py MODEL.tflite ... [--threads 2] [--runs 30]

Relative error = max |bf16 - fp32| / max |fp32| over every float output.  Runs alternate.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
import harness  # noqa: E402


def measure(path: Path, threads: int, runs: int) -> dict:
    import litegpu

    def compiled(precision: str):
        return litegpu.CompiledModel.from_file(str(path), options=litegpu.Options(
            litegpu.HardwareAccelerator.CPU, cpu_options=litegpu.CpuOptions(num_threads=threads, precision=precision)))

    fp32, bf16 = compiled("fp32"), compiled("bf16")
    details = fp32.get_input_tensor_details(0)
    feed = dict(zip(details, harness.random_inputs(list(details.values()), int_low=0)))
    a, b = fp32.run(feed), bf16.run(feed)
    errors = [float(np.max(np.abs(b[k].astype(np.float64) - a[k])) / max(float(np.max(np.abs(a[k]))), 1e-12))
              for k in a if a[k].dtype.kind == "f"]
    times = harness.alternate({"fp32": lambda: fp32.run(feed), "bf16": lambda: bf16.run(feed)}, runs)
    return {"model": path.stem, "plan": fp32.plan.engine_summary(), "max_rel_error": max(errors, default=0.0),
            "fp32_ms": harness.median_ms(times["fp32"]), "bf16_ms": harness.median_ms(times["bf16"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=30)
    args = harness.parse_args(parser)
    print(harness.table_head(["model", "fp32 ms", "bf16 ms", "speed-up", "max relative error"], "lrrrr"))
    for path in args.models:
        r = measure(path, args.threads, args.runs)
        print(f"| {r['model']} | {r['fp32_ms']:.2f} | {r['bf16_ms']:.2f} | {r['fp32_ms'] / r['bf16_ms']:.2f}x | "
              f"{r['max_rel_error']:.1e} |", flush=True)


if __name__ == "__main__":
    main()
