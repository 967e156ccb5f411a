"""Activation functions (float; quantized int8/uint8 HARD_SWISH follows the official fixed-point kernel)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import ModelExecutionError
from . import _quantized as qz
from . import fixedpoint as fp
from .binary import broadcast_shape
from .registry import Op, OpContext, register

FLOATS = ("float32", "float16")


class _Activation(Op):
    dtypes = FLOATS

    def apply(self, ctx: OpContext, xp: Any, x: Any) -> Any:
        raise NotImplementedError

    def compute(self, ctx: OpContext, x: Any) -> Any:
        with np.errstate(all="ignore"):
            return self.apply(ctx, ctx.xp, x)


def _clip(xp: Any, x: Any, low: float, high: float) -> Any:
    return xp.clip(x, low, high).astype(x.dtype)


@register("RELU")
class Relu(_Activation):
    def apply(self, ctx, xp, x):
        return xp.maximum(x, 0).astype(x.dtype)


@register("RELU6")
class Relu6(_Activation):
    def apply(self, ctx, xp, x):
        return _clip(xp, x, 0, 6)


@register("RELU_N1_TO_1")
class ReluN1To1(_Activation):
    def apply(self, ctx, xp, x):
        return _clip(xp, x, -1, 1)


@register("RELU_0_TO_1")
class Relu0To1(_Activation):
    def apply(self, ctx, xp, x):
        return _clip(xp, x, 0, 1)


@register("LOGISTIC")
class Logistic(_Activation):
    def reference(self, ctx, x):
        with np.errstate(all="ignore"):
            return (1 / (1 + np.exp(-x.astype(np.float64)))).astype(x.dtype)

    def lower(self, ctx, x):
        return ctx.lax.logistic(x)


@register("TANH")
class Tanh(_Activation):
    def apply(self, ctx, xp, x):
        return xp.tanh(x)


@register("LEAKY_RELU")
class LeakyRelu(_Activation):
    def apply(self, ctx, xp, x):
        alpha = np.asarray(ctx.options.get("alpha", 0.0), dtype=x.dtype)
        return xp.where(x > 0, x, x * alpha)


@register("ELU")
class Elu(_Activation):
    def apply(self, ctx, xp, x):
        return xp.where(x < 0, xp.expm1(x), x)


@register("HARD_SWISH")
class HardSwish(_Activation):
    dtypes = FLOATS + ("int8", "uint8")

    def apply(self, ctx, xp, x):
        if np.dtype(x.dtype).kind in "iu":
            return _quantized_hard_swish(ctx, xp, x)
        return x * _clip(xp, x + 3, 0, 6) / np.asarray(6, x.dtype)


# --- quantized HARD_SWISH: the official 16-bit fixed-point recipe (reference/hard_swish.h) ---

def _int16_rounding_doubling_high_mul(xp: Any, a: Any, b: Any) -> Any:
    """gemmlowp's SaturatingRoundingDoublingHighMul on int16 values."""
    ab = a * b
    nudge = xp.where(ab >= 0, 1 << 14, 1 - (1 << 14))
    total = ab + nudge
    high = xp.where(total < 0, -((-total) >> 15), total >> 15)  # C division truncates
    return xp.where((a == b) & (a == -32768), 32767, high)


def _int16_doubling_high_mul(xp: Any, a: Any, b: Any) -> Any:
    """SaturatingDoublingHighMul: like the above, but truncating instead of rounding."""
    ab = a * b
    high = xp.where(ab < 0, -((-ab) >> 15), ab >> 15)
    return xp.where((a == b) & (a == -32768), 32767, high)


def _saturating_left_shift_int16(xp: Any, x: Any, amount: int) -> Any:
    return xp.clip(x * (1 << amount), -32768, 32767)


def _downscale_to_int16_multiplier(multiplier: int) -> int:
    """DownScaleInt32ToInt16Multiplier: round the Q0.31 multiplier to Q0.15."""
    if multiplier >= (1 << 31) - 1 - (1 << 15):
        return 32767
    return (multiplier + (1 << 15)) >> 16


def _hard_swish_params(ctx: OpContext) -> tuple:
    in_scale, in_zp = qz.scale_and_zero_point(ctx, ctx.input(0), "input")
    out_scale, out_zp = qz.scale_and_zero_point(ctx, ctx.output(0), "output")
    # float32 arithmetic, as the official Prepare
    hires_input_scale = np.float32(1.0 / 128.0) * np.float32(in_scale)
    output_multiplier, output_exponent = fp.quantize_multiplier(float(hires_input_scale / np.float32(out_scale)))
    reluish_multiplier, reluish_exponent = fp.quantize_multiplier(
        float(hires_input_scale / np.float32(3.0 / 32768.0)))
    if output_exponent > 0:
        raise ModelExecutionError(f"{ctx.op}: output scale {out_scale} is too small for input scale {in_scale} "
                                  "(the official kernel requires output_scale >= input_scale / 128)")
    return (in_zp, out_zp, _downscale_to_int16_multiplier(output_multiplier), output_exponent,
            _downscale_to_int16_multiplier(reluish_multiplier), reluish_exponent)


def _quantized_hard_swish(ctx: OpContext, xp: Any, x: Any) -> Any:
    in_zp, out_zp, out_mult, out_exp, relu_mult, relu_exp = _hard_swish_params(ctx)
    hires = (x.astype(xp.int64) - in_zp) * (1 << 7)
    on_preshift_output_scale = _int16_rounding_doubling_high_mul(xp, hires, out_mult)
    reluish = hires
    if relu_exp > 0:  # all but the last bit of left shift, so saturation here never shows
        reluish = _saturating_left_shift_int16(xp, reluish, relu_exp - 1)
    reluish = _int16_rounding_doubling_high_mul(xp, reluish, relu_mult)
    if relu_exp > 0:
        reluish = _saturating_left_shift_int16(xp, reluish, 1)
    if relu_exp < 0:
        reluish = fp.rounding_divide_by_pot(xp, reluish, -relu_exp)
    reluish = (reluish + (1 << 15)) >> 1  # [-1, 1] -> [0, 1] in Q0.15
    preshift = _int16_doubling_high_mul(xp, reluish, on_preshift_output_scale)
    y = fp.rounding_divide_by_pot(xp, preshift, -out_exp) + out_zp
    low, high = qz.dtype_limits(ctx.output(0).dtype)
    return xp.clip(y, low, high)


_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


@register("GELU")
class Gelu(_Activation):
    """0.5 x (1 + erf(x / sqrt 2)); with ``approximate`` the tanh form of the official kernel."""

    def reference(self, ctx, x):
        wide = x.astype(np.float64)
        with np.errstate(all="ignore"):  # -inf gives NaN, as in the official kernel
            if ctx.options.get("approximate", False):
                y = _gelu_tanh(np, wide)
            else:
                erfc = np.vectorize(math.erfc, otypes=[np.float64])
                y = 0.5 * wide * erfc(-wide / math.sqrt(2)) if wide.size else wide
        return np.asarray(y).astype(x.dtype)

    def lower(self, ctx, x):
        if ctx.options.get("approximate", False):
            return _gelu_tanh(ctx.xp, x)
        return 0.5 * x * ctx.lax.erfc(-x * np.asarray(1 / math.sqrt(2), x.dtype))


def _gelu_tanh(xp: Any, x: Any) -> Any:
    return 0.5 * x * (1 + xp.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))


@register("PRELU")
class Prelu(Op):
    """x where x >= 0, else alpha * x; alpha broadcasts to x's shape (usually per channel)."""

    dtypes = FLOATS

    def compute(self, ctx: OpContext, x: Any, alpha: Any) -> Any:
        if np.dtype(x.dtype) != np.dtype(alpha.dtype):
            raise ModelExecutionError(f"{ctx.op}: alpha must have the input's type {x.dtype}, got {alpha.dtype}")
        if broadcast_shape(ctx, x, alpha) != tuple(x.shape):
            raise ModelExecutionError(f"{ctx.op}: alpha {tuple(alpha.shape)} must broadcast to the input's "
                                      f"shape {tuple(x.shape)}")
        return ctx.xp.where(x >= 0, x, x * alpha)
