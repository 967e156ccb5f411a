"""Times the two XLA lowerings of DEPTHWISE_CONV_2D on CPU, under jax.jit.

    python bench/cpu/bench_depthwise.py

"taps" is the unrolled multiply-add of shifted slices (what litegpu runs on
XLA CPU); "grouped" is ``lax.conv_general_dilated`` with
``feature_group_count`` = channels (what it runs on GPU).  Both run through
the real op (a one-op model in the XLA backend), the target forced per row.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from litegpu.backends.xla.backend import XlaBackend
from litegpu.ir.builder import ModelBuilder
from litegpu.ops import Target
from litegpu.ops._common import conv_output_size

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
import harness  # noqa: E402

# (H, W, C, stride) of 3x3 depthwise layers in MobileNet V1 / V2 at 224x224
SHAPES = [
    (112, 112, 32, 1),
    (112, 112, 96, 2),
    (56, 56, 144, 1),
    (28, 28, 192, 1),
    (14, 14, 576, 1),
    (7, 7, 960, 1),
]
REPEATS = 20


def depthwise_model(h: int, w: int, c: int, stride: int):
    rng = np.random.default_rng(0)
    b = ModelBuilder()
    x = b.input("x", (1, h, w, c))
    k = b.constant("w", rng.standard_normal((1, 3, 3, c)).astype(np.float32))
    bias = b.constant("bias", rng.standard_normal(c).astype(np.float32))
    oh, ow = (conv_output_size(n, 3, stride, 1, "SAME") for n in (h, w))
    y = b.tensor("y", (1, oh, ow, c))
    b.op("DEPTHWISE_CONV_2D", [x, k, bias], [y], padding="SAME", stride_h=stride, stride_w=stride,
         depth_multiplier=1, fused_activation_function="RELU6")
    b.output(y)
    return b.build()


def time_lowering(model, x: np.ndarray, target: Target) -> float:
    backend = XlaBackend(model)
    backend.target = target  # picked up when the program is traced
    backend.run([x])[0].block_until_ready()  # compile
    return min(harness.timed(lambda: backend.run([x])[0].block_until_ready(), REPEATS, warmup=0)) * 1e3


def main() -> None:
    print(harness.machine_line(), flush=True)
    print(f"{'layer (HxWxC, stride)':<24}{'taps ms':>10}{'grouped ms':>12}{'speed-up':>10}")
    for h, w, c, stride in SHAPES:
        model = depthwise_model(h, w, c, stride)
        x = np.random.default_rng(1).standard_normal((1, h, w, c)).astype(np.float32)
        taps = time_lowering(model, x, Target.XLA_CPU)
        grouped = time_lowering(model, x, Target.XLA_GPU)
        print(f"{f'{h}x{w}x{c}, s{stride}':<24}{taps:>10.2f}{grouped:>12.2f}{grouped / taps:>9.1f}x")


if __name__ == "__main__":
    main()
