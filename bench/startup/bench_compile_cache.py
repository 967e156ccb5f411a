"""Start-up with and without the compile cache, each start in a new process.

Measures, after imports (numpy, jax, litegpu and its op modules), the time from
``CompiledModel.from_file()`` to the first output read back, with a cold cache
(empty serialization dir) and a warm one (filled by an earlier process).

    python bench/startup/bench_compile_cache.py [MODEL] [--runs 3]
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

DEFAULT_MODEL = harness.SHARED_MODELS / "mobilenet_v3_small_float32.tflite"

CHILD = r"""
import sys, time
import numpy as np, jax, litegpu
import litegpu.ops._catalog  # op modules are imports too
from litegpu.format import load_schema
load_schema()
t = time.perf_counter()
options = litegpu.Options(litegpu.HardwareAccelerator.CPU, serialization_dir=sys.argv[2])
model = litegpu.CompiledModel.from_file(sys.argv[1], options=options)
inputs, outputs = model.create_input_buffers(0), model.create_output_buffers(0)
for b in inputs:
    d = b.get_tensor_details()
    b.write(np.zeros(d["shape"], d["dtype"]))
model.run_by_index(0, inputs, outputs)
outputs[0].read()
print(time.perf_counter() - t)
"""


def start_once(model: Path, cache_dir: str) -> float:
    out = subprocess.run([sys.executable, "-c", CHILD, str(model), cache_dir], capture_output=True, text=True,
                         check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--runs", type=int, default=3)
    args = harness.parse_args(parser)
    cold, warm = [], []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as d:
            cold.append(start_once(args.model, d))
            warm.append(start_once(args.model, d))
    c, w = statistics.median(cold), statistics.median(warm)
    print(f"model: {args.model.name}")
    print(f"cold cache: median {c * 1e3:.0f} ms  ({', '.join(f'{x * 1e3:.0f}' for x in cold)})")
    print(f"warm cache: median {w * 1e3:.0f} ms  ({', '.join(f'{x * 1e3:.0f}' for x in warm)})")
    print(f"speed-up: {c / w:.1f}x")


if __name__ == "__main__":
    main()
