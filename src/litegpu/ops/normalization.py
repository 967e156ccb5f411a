"""SOFTMAX, LOG_SOFTMAX, L2_NORMALIZATION, LOCAL_RESPONSE_NORMALIZATION (float32; SOFTMAX also 8-bit).

All normalise along the last axis, as the official kernels do for any rank.
SOFTMAX scales the max-shifted logits by ``beta`` before exponentiating;
L2_NORMALIZATION divides by max(||x||, 1e-6) (so a zero vector stays zero);
LOCAL_RESPONSE_NORMALIZATION sums squares over ``radius`` channels on each
side (clipped at the edges) and takes 4-D input only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ModelExecutionError
from . import _quantized as qz
from . import fixedpoint as fp
from .registry import Op, OpContext, register

L2_NORM_EPSILON = 1e-6


def _require_rank(ctx: OpContext, x: Any, low: int, high: int) -> None:
    if not low <= x.ndim <= high:
        raise ModelExecutionError(f"{ctx.op}: input must have rank {low}..{high}, got shape {tuple(x.shape)}")


@register("SOFTMAX")
class Softmax(Op):
    dtypes = ("float32", "int8", "uint8")

    def unsupported_reason(self, op, subgraph, target):
        reason = super().unsupported_reason(op, subgraph, target)
        x, y = subgraph.tensors[op.inputs[0]], subgraph.tensors[op.outputs[0]]
        if reason is None and x.dtype in ("int8", "uint8") and y.dtype not in ("int8", "uint8"):
            reason = f"{x.dtype} input with {y.dtype} output is not supported (only 8-bit outputs)"
        return reason

    def compute(self, ctx: OpContext, x: Any) -> Any:
        xp = ctx.xp
        _require_rank(ctx, x, 1, 8)
        if ctx.input(0).dtype in ("int8", "uint8"):
            return _softmax_8bit_lut(ctx, xp, x)
        shifted = (x - xp.max(x, axis=-1, keepdims=True)) * xp.asarray(ctx.options.beta, x.dtype)
        e = xp.exp(shifted)
        return e / xp.sum(e, axis=-1, keepdims=True)


def _softmax_exp_table(input_scale: float, beta: float) -> np.ndarray:
    """PopulateSoftmaxUInt8LookupTable: exp(-scale * beta * (255 - v)) in Q0.16 (saturated at
    65535) for every distance v from the row maximum, computed in float32 like the C++."""
    scale = -np.float32(input_scale) * np.float32(beta)
    distance = (255 - np.arange(256)).astype(np.float32)
    with np.errstate(over="ignore"):
        scaled = np.exp(scale * distance) * np.float32(65535.0) + np.float32(0.5)
    return np.minimum(scaled.astype(np.int64), 65535)


def _softmax_8bit_lut(ctx: OpContext, xp: Any, x: Any) -> Any:
    """The official optimized 8-bit softmax (SoftmaxInt8LUT, x86 = its scalar loops): exp from a
    256-entry table indexed by the distance to the row maximum, the row sum in integers, and one
    per-row multiplier ``QuantizeMultiplier(1 / (sum * output_scale))`` from a float32 division,
    applied with MultiplyByQuantizedMultiplier.  The reference kernel (fixed-point exp) differs."""
    in_scale, _ = qz.scale_and_zero_point(ctx, ctx.input(0), "input")
    out_scale, out_zp = qz.scale_and_zero_point(ctx, ctx.output(0), "output")
    table = _softmax_exp_table(in_scale, float(ctx.options.beta))
    wide = x.astype(xp.int64)
    distance_from_top = 255 - (xp.max(wide, axis=-1, keepdims=True) - wide)  # the table index
    exp = xp.asarray(table)[distance_from_top]
    total = xp.sum(exp, axis=-1, keepdims=True)
    inverse = np.float32(1.0) / (total.astype(xp.float32) * np.float32(out_scale))
    if isinstance(inverse, np.ndarray):
        multiplier, shift = fp.quantize_multipliers(inverse.astype(np.float64))
    else:
        multiplier, shift = _traced_quantize_multiplier(xp, inverse)
    y = fp.multiply_by_quantized_multiplier(xp, exp, multiplier, shift) + out_zp
    low, high = qz.dtype_limits(ctx.output(0).dtype)
    return xp.clip(y, low, high)


def _traced_quantize_multiplier(xp: Any, real: Any) -> tuple[Any, Any]:
    """QuantizeMultiplier of positive float32 values inside a trace (the row sums are data)."""
    mantissa, exponent = xp.frexp(real.astype(xp.float64))
    q = xp.floor(mantissa * float(1 << 31) + 0.5).astype(xp.int64)  # positive: half away == half up
    overflow = q == (1 << 31)
    return xp.where(overflow, q // 2, q), xp.where(overflow, exponent + 1, exponent).astype(xp.int64)


@register("LOG_SOFTMAX")
class LogSoftmax(Op):
    dtypes = ("float32",)

    def compute(self, ctx: OpContext, x: Any) -> Any:
        xp = ctx.xp
        _require_rank(ctx, x, 1, 8)
        shifted = x - xp.max(x, axis=-1, keepdims=True)
        return shifted - xp.log(xp.sum(xp.exp(shifted), axis=-1, keepdims=True))


@register("L2_NORMALIZATION")
class L2Normalization(Op):
    dtypes = ("float32",)

    def unsupported_reason(self, op, subgraph, target):
        reason = super().unsupported_reason(op, subgraph, target)
        activation = op.options.get("fused_activation_function", "NONE")
        if reason is None and activation != "NONE":  # the official Prepare rejects these too
            reason = f"fused activation {activation} (the official kernel takes only NONE)"
        return reason

    def compute(self, ctx: OpContext, x: Any) -> Any:
        xp = ctx.xp
        _require_rank(ctx, x, 1, 8)
        norm = xp.sqrt(xp.sum(x * x, axis=-1, keepdims=True))
        return x / xp.maximum(norm, xp.asarray(L2_NORM_EPSILON, x.dtype))


@register("LOCAL_RESPONSE_NORMALIZATION")
class LocalResponseNormalization(Op):
    dtypes = ("float32",)

    def compute(self, ctx: OpContext, x: Any) -> Any:
        xp = ctx.xp
        _require_rank(ctx, x, 4, 4)
        o = ctx.options
        radius, depth = int(o.radius), x.shape[-1]
        squares = xp.pad(x * x, [(0, 0)] * 3 + [(radius, radius)])
        # channels outside [0, depth) are zeros in the padded squares: the clipped window
        window = sum(squares[..., k:k + depth] for k in range(2 * radius + 1))
        dtype = x.dtype
        return x * xp.power(xp.asarray(o.bias, dtype) + xp.asarray(o.alpha, dtype) * window,
                            xp.asarray(-o.beta, dtype))
