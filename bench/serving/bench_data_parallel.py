"""Data-parallel batched runs: examples per second on 1, 2 and 4 devices.

    python bench/serving/bench_data_parallel.py MODEL.tflite [--examples 32] [--fake-cpu-devices 4] [--seconds 3]

``--fake-cpu-devices N`` splits this machine's CPU into N XLA devices (they share the same cores: the figures
show the cost of splitting, not a speed-up); on a multi-GPU host leave it out and run with
``--accelerator gpu`` to use the real devices.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
import harness  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--examples", type=int, default=32)
    parser.add_argument("--fake-cpu-devices", type=int, default=0)
    parser.add_argument("--accelerator", default="cpu", choices=("cpu", "gpu"))
    parser.add_argument("--seconds", type=float, default=3.0)
    args = harness.parse_args(parser)
    if args.fake_cpu_devices:
        os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={args.fake_cpu_devices}"
    import numpy as np

    import litegpu

    flags = litegpu.HardwareAccelerator.GPU if args.accelerator == "gpu" else litegpu.HardwareAccelerator.CPU
    model = litegpu.CompiledModel.from_file(args.model, hardware_accel=flags)
    name, detail = next(iter(model.get_input_tensor_details(0).items()))
    xs = np.random.default_rng(0).uniform(-1, 1, (args.examples,) + tuple(detail["shape"][1:])).astype(detail["dtype"])
    available = len(__import__("jax").devices(args.accelerator))
    print(harness.table_head(["devices", f"examples/s ({args.examples} per call)"], "rr"))
    for count in (1, 2, 4):
        if count > available:
            break
        batched = model.batched(devices=count)
        batched.run({name: xs})
        done, start = 0, time.perf_counter()
        while time.perf_counter() - start < args.seconds:
            batched.run({name: xs})
            done += args.examples
        print(f"| {count} | {done / (time.perf_counter() - start):.0f} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
