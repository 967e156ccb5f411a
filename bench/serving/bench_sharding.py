"""A decoder's weights split over 1, 2, 4 ... devices: bytes per device, decode tokens/s, same tokens.

    python bench/serving/bench_sharding.py [--fake-cpu-devices 4] [--megabytes 200] [--weights float32|float16|int8|int4]
    python bench/serving/bench_sharding.py --accelerator gpu [--megabytes 20000]      # a multi-GPU host

Writes an LLM-style decoder (``bench/models/decoder_model.py``, width 1024 unless ``--width``, 8 heads) of about
``--megabytes`` of weights, then for each device count runs ``litegpu.generate`` (``Options(devices=n)``:
matrix weights split along their output axis, KV cache by head) and prints the measured weight bytes per
device (from the arrays' shards), the time to first token and the decode rate; the greedy tokens must equal
one device's.  With ``--fake-cpu-devices N`` this CPU is split into N XLA devices (they share its cores:
the figures show that splitting works and what it costs, not what N GPUs give).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
import harness  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accelerator", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--fake-cpu-devices", type=int, default=0)
    parser.add_argument("--megabytes", type=float, default=200)
    parser.add_argument("--weights", default="float32", choices=("float32", "float16", "int8", "int4"))
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--new", type=int, default=32)
    args = harness.parse_args(parser)
    if args.fake_cpu_devices:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   f" --xla_force_host_platform_device_count={args.fake_cpu_devices}")
    import decoder_model as dm
    import jax
    import numpy as np

    import litegpu

    available = len(jax.devices(args.accelerator))
    counts = [n for n in (1, 2, 4, 8) if n <= available]
    config = dm.config_for_bytes(int(args.megabytes * 1e6), width=args.width, heads=8, weights=args.weights,
                                 vocab=32000, max_len=256, prefill_len=16)
    prompt = [int(t) for t in np.random.default_rng(0).integers(1, 1000, args.prompt)]
    flag = litegpu.HardwareAccelerator.GPU if args.accelerator == "gpu" else litegpu.HardwareAccelerator.CPU
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "decoder.tflite"
        dm.write_decoder(config, path)
        print(f"decoder: {config.layers} layers, width {config.width}, {args.weights}, "
              f"{path.stat().st_size / 1e6:.0f} MB file; {args.accelerator} devices: {available}")
        print(harness.table_head(["devices", "weight MiB per device (measured)", "of one device's",
                                  "time to first token ms", "decode tokens/s", "tokens equal 1 device's"], "rrrrrl"))
        reference = None
        one_device_bytes = None
        for n in counts:
            model = litegpu.CompiledModel.from_file(str(path), options=litegpu.Options(flag, devices=n))
            litegpu.generate(model, prompt, 2)  # compile prefill and decode
            start = time.perf_counter()
            first = None
            tokens = []
            for token in litegpu.generate_stream(model, prompt, args.new):
                tokens.append(token)
                if first is None:
                    first = time.perf_counter()
            end = time.perf_counter()
            per_device = max(model.weight_placement().measured_bytes_per_device)
            one_device_bytes = one_device_bytes or per_device
            reference = reference or tokens
            print(f"| {n} | {per_device / 2**20:.1f} | {per_device / one_device_bytes:.2f} | "
                  f"{(first - start) * 1e3:.1f} | {(args.new - 1) / (end - first):.1f} | {tokens == reference} |",
                  flush=True)
            model.close()


if __name__ == "__main__":
    main()
