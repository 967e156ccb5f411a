"""Examples per second: one example per call (default engine) against ``CompiledModel.batched()`` with 8 and 32.

    python bench/bench_batching.py MODEL.tflite ... [--seconds 3] [--threads 2]

Same inputs, outputs read back; batched runs use the XLA engine (vmap of the batch-1 program).
GPU: add ``--accelerator gpu`` on a machine with one.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np


def throughput(fn, examples: int, seconds: float) -> float:
    fn()  # compile / warm up
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn()
        done += examples
    return done / (time.perf_counter() - start)


def main() -> None:
    import litegpu

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--accelerator", default="cpu", choices=("cpu", "gpu"))
    args = parser.parse_args()
    flags = litegpu.HardwareAccelerator.GPU if args.accelerator == "gpu" else litegpu.HardwareAccelerator.CPU
    print("| model | batch 1 ex/s (default engine) | batch 1 ex/s (XLA) | batched 8 ex/s | batched 32 ex/s |\n"
          "|---|---:|---:|---:|---:|")
    for path in args.models:
        options = litegpu.Options(flags, cpu_options=litegpu.CpuOptions(num_threads=args.threads))
        model = litegpu.CompiledModel.from_file(str(path), options=options)
        exact = litegpu.CompiledModel.from_file(str(path), options=litegpu.Options(
            flags, cpu_options=litegpu.CpuOptions(num_threads=args.threads, kernel_mode=litegpu.CpuKernelMode.BUILTIN)))
        details = model.get_input_tensor_details(0)
        rng = np.random.default_rng(0)

        def batch(n: int) -> dict:
            return {k: (rng.uniform(-1, 1, (n,) + tuple(d["shape"][1:])) if np.dtype(d["dtype"]).kind == "f"
                        else rng.integers(0, 100, (n,) + tuple(d["shape"][1:]))).astype(d["dtype"])
                    for k, d in details.items()}

        one = batch(1)
        rates = [throughput(lambda: model.run(one), 1, args.seconds),
                 throughput(lambda: exact.run(one), 1, args.seconds)]
        batched = model.batched()
        for n in (8, 32):
            feed = batch(n)
            rates.append(throughput(lambda: batched.run(feed), n, args.seconds))
        print(f"| {path.stem} | " + " | ".join(f"{r:.0f}" for r in rates) + " |", flush=True)


if __name__ == "__main__":
    main()
