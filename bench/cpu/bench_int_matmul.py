"""Why litegpu's integer kernels multiply matrices on float GEMMs under XLA CPU.

    python bench/cpu/bench_int_matmul.py [--repeats 20]

TFLite's int8 kernels accumulate int8 x int8 products in int32.  litegpu computes
the accumulator exactly as int64 in the reference kernels; under XLA the same
product runs as a float32 GEMM when every partial sum provably stays below 2^24
(``litegpu.ops._quantized.exact_matmul``), or as float64 below 2^53.  This times
the choices on matrix shapes from int8 MobileNetV3 (process CPU time, medians of
alternating runs) and checks that all of them give identical integers.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
import harness  # noqa: E402

SHAPES = [(49, 576, 96), (3136, 16, 72), (196, 240, 40), (784, 96, 24), (1, 1024, 1000)]


def main() -> None:
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    highest = jax.lax.Precision.HIGHEST
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=20)
    args = harness.parse_args(parser)
    variants = {
        "int64": lambda x, w: jnp.matmul(x.astype(jnp.int64) + 3, w.astype(jnp.int64)),
        "int32": lambda x, w: jnp.matmul(x.astype(jnp.int32) + 3, w.astype(jnp.int32)).astype(jnp.int64),
        "float32": lambda x, w: jnp.matmul(x.astype(jnp.float32) + 3, w.astype(jnp.float32),
                                           precision=highest).astype(jnp.int64),
        "float64": lambda x, w: jnp.matmul(x.astype(jnp.float64) + 3, w.astype(jnp.float64),
                                           precision=highest).astype(jnp.int64),
    }
    print(harness.table_head(["M x K x N", *(f"{n} ms" for n in variants)], "l" + "r" * len(variants)))
    for m, k, n in SHAPES:
        rng = np.random.default_rng(0)
        x = rng.integers(-128, 128, (m, k)).astype(np.int8)
        w = rng.integers(-127, 128, (k, n)).astype(np.int8)
        fs = {name: jax.jit(f) for name, f in variants.items()}
        reference = np.asarray(fs["int64"](x, w))
        for name, f in fs.items():
            # float32 is only exact below 2^24 per partial sum; these shapes stay below it except K=1024
            if name != "float32" or k * 131 * 127 < 1 << 24:
                assert np.array_equal(np.asarray(f(x, w)), reference), name
        times = harness.alternate({name: lambda f=f: jax.block_until_ready(f(x, w)) for name, f in fs.items()},
                                  args.repeats, clock=time.process_time)
        cells = " | ".join(f"{np.median(t) * 1e3:.3f}" for t in times.values())
        print(f"| {m} x {k} x {n} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
