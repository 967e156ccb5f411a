"""Times XLA CPU lowerings of float CONV_2D, under jax.jit, to choose one per layer shape.

    python bench/cpu/bench_conv.py [--repeats 15]

- "conv": ``lax.conv_general_dilated`` (NHWC/OHWI), what XLA would pick by itself;
- "taps": one matrix product per kernel tap, summed (the integer kernels' accumulation);
- "im2col": the kernel taps concatenated along channels, then one matrix product.

Times are process CPU time (all threads), medians of alternating runs, so the
comparison holds on a loaded machine.  ``litegpu.ops.conv.conv_lowering`` is the
choice the op makes for a shape; its row is marked.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
import harness  # noqa: E402

# (H, W, Cin, Cout, K, stride): first layers of image models (3 input channels), then
# MobileNet/ResNet/VGG-like middle and late layers.
SHAPES = [
    (128, 128, 3, 24, 5, 2),
    (224, 224, 3, 16, 3, 2),
    (224, 224, 3, 32, 3, 2),
    (112, 112, 16, 16, 3, 1),
    (56, 56, 24, 48, 3, 1),
    (56, 56, 64, 64, 3, 1),
    (28, 28, 64, 64, 3, 1),
    (14, 14, 128, 128, 3, 1),
    (14, 14, 256, 256, 3, 1),
    (7, 7, 512, 512, 3, 1),
]


def variants(k: int, stride: int, out_hw: tuple[int, int], pads: list):
    import jax
    import jax.numpy as jnp
    from jax import lax

    highest = lax.Precision.HIGHEST
    oh, ow = out_hw

    def windows(x):
        x = jnp.pad(x, ((0, 0), pads[0], pads[1], (0, 0)))
        return [x[:, i:i + (oh - 1) * stride + 1:stride, j:j + (ow - 1) * stride + 1:stride, :]
                for i in range(k) for j in range(k)]

    def conv(x, w):
        return lax.conv_general_dilated(x, w, (stride, stride), pads, dimension_numbers=("NHWC", "OHWI", "NHWC"),
                                        precision=highest)

    def taps(x, w):
        terms = [jnp.einsum("nhwc,oc->nhwo", t, w[:, n // k, n % k, :], precision=highest)
                 for n, t in enumerate(windows(x))]
        return sum(terms[1:], terms[0])

    def im2col(x, w):
        patches = jnp.concatenate(windows(x), axis=-1)
        return jnp.einsum("nhwk,ok->nhwo", patches, w.reshape(w.shape[0], -1), precision=highest)

    return {name: jax.jit(f) for name, f in (("conv", conv), ("taps", taps), ("im2col", im2col))}


def main() -> None:
    import jax

    from litegpu.ops._common import explicit_padding
    from litegpu.ops.conv import conv_lowering

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=15)
    args = harness.parse_args(parser)
    print(harness.table_head(["layer (H, W, Cin, Cout, K, stride)", "conv ms", "taps ms", "im2col ms",
                              "litegpu picks"], "lrrrl"))
    for h, w, cin, cout, k, s in SHAPES:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((1, h, w, cin), np.float32)
        wt = rng.standard_normal((cout, k, k, cin), np.float32)
        pads = explicit_padding("SAME", (h, w), (k, k), (s, s), (1, 1))
        out_hw = (-(-h // s), -(-w // s))
        fs = variants(k, s, out_hw, [tuple(p) for p in pads])
        reference = np.asarray(fs["conv"](x, wt))
        for name, f in fs.items():
            np.testing.assert_allclose(np.asarray(f(x, wt)), reference, rtol=1e-4, atol=1e-3, err_msg=name)
        times = harness.alternate({name: lambda f=f: jax.block_until_ready(f(x, wt)) for name, f in fs.items()},
                                  args.repeats, clock=time.process_time)
        pick = conv_lowering((1, h, w, cin), (cout, k, k, cin), (s, s), (1, 1), out_hw)
        cells = " | ".join(f"{np.median(times[n]) * 1e3:.3f}" for n in ("conv", "taps", "im2col"))
        print(f"| {(h, w, cin, cout, k, s)} | {cells} | {pick} |", flush=True)


if __name__ == "__main__":
    main()
