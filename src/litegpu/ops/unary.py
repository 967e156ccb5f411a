"""Elementwise unary math.

Quantized: ABS (int8, int16: requantized |x - zp|) and LOG (int8: a 256-entry table), as the
official elementwise.cc kernels.

Float results follow the C library of the official kernels (inf, NaN and all):
LOG of a negative is NaN, RSQRT(0) is inf.  ROUND rounds half to even.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ModelExecutionError
from . import _quantized as qz
from . import fixedpoint as fp
from .registry import Op, OpContext, register

FLOATS = ("float32", "float16")


class _Unary(Op):
    dtypes = FLOATS

    def apply(self, xp: Any, x: Any) -> Any:
        raise NotImplementedError

    def compute(self, ctx: OpContext, x: Any) -> Any:
        with np.errstate(all="ignore"):  # inf / NaN results are the official semantics
            return self.apply(ctx.xp, x)


def _quantized_io(ctx: OpContext) -> tuple[float, int, float, int]:
    x, y = ctx.input(0), ctx.output(0)
    if x.dtype != y.dtype:
        raise ModelExecutionError(f"{ctx.op}: the output type {y.dtype} must be the input type {x.dtype}")
    in_scale, in_zp = qz.scale_and_zero_point(ctx, x, "input")
    out_scale, out_zp = qz.scale_and_zero_point(ctx, y, "output")
    if x.dtype == "int16" and (in_zp != 0 or out_zp != 0):
        raise ModelExecutionError(f"{ctx.op}: int16 input and output need zero points 0, got {in_zp} and {out_zp}")
    return in_scale, in_zp, out_scale, out_zp


@register("ABS")
class Abs(_Unary):
    dtypes = FLOATS + ("int32", "int8", "int16")

    def compute(self, ctx, x):
        if ctx.input(0).dtype in ("int8", "int16") and qz.is_quantized(ctx.input(0)):
            return self.quantized(ctx, ctx.xp, x)
        if ctx.input(0).dtype == "int16":  # unquantized int16: |x| truncated to int16 (wraps at -32768)
            return ctx.xp.abs(x.astype(ctx.xp.int32)).astype(ctx.xp.int16)
        return super().compute(ctx, x)

    def apply(self, xp, x):
        return xp.abs(x)

    def quantized(self, ctx: OpContext, xp: Any, x: Any) -> Any:
        """AbsEvalQuantized: |x - in_zp|, rescaled only when the scales differ, + out_zp, saturated."""
        in_scale, in_zp, out_scale, out_zp = _quantized_io(ctx)
        value = xp.abs(x.astype(xp.int64) - in_zp)
        if in_scale != out_scale:
            multiplier, shift = fp.quantize_multiplier(float(np.float32(in_scale) / np.float32(out_scale)))
            value = fp.multiply_by_quantized_multiplier(xp, value, multiplier, shift)
        return xp.clip(value + out_zp, *qz.dtype_limits(ctx.output(0).dtype))


@register("NEG")
class Neg(_Unary):
    dtypes = FLOATS + ("int32", "int64")

    def apply(self, xp, x):
        return -x


@register("EXP")
class Exp(_Unary):
    def apply(self, xp, x):
        return xp.exp(x)


@register("LOG")
class Log(_Unary):
    dtypes = FLOATS + ("int8",)

    def compute(self, ctx, x):
        if ctx.input(0).dtype == "int8":
            return self.quantized(ctx, ctx.xp, x)
        return super().compute(ctx, x)

    def apply(self, xp, x):
        return xp.log(x)

    def quantized(self, ctx: OpContext, xp: Any, x: Any) -> Any:
        """LogLUTPrepare: logf of the dequantized value; values <= 0 map to the lowest output."""
        in_scale, in_zp, out_scale, out_zp = _quantized_io(ctx)
        output_min = np.float32(-128 - out_zp) * np.float32(out_scale)

        def log_or_min(v: np.ndarray) -> np.ndarray:
            return np.where(v <= 0, output_min, qz.libm_f32(np.log, v)).astype(np.float32)

        table = qz.lut_8bit(log_or_min, in_scale, in_zp, out_scale, out_zp, "int8")
        return qz.lookup_8bit(xp, table, x, "int8")


@register("SQRT")
class Sqrt(_Unary):
    def apply(self, xp, x):
        return xp.sqrt(x)


@register("RSQRT")
class Rsqrt(_Unary):
    def reference(self, ctx, x):
        with np.errstate(all="ignore"):
            return (1 / np.sqrt(x)).astype(x.dtype)

    def lower(self, ctx, x):
        return ctx.lax.rsqrt(x)


@register("SQUARE")
class Square(_Unary):
    def apply(self, xp, x):
        return x * x


@register("SIN")
class Sin(_Unary):
    def apply(self, xp, x):
        return xp.sin(x)


@register("COS")
class Cos(_Unary):
    def apply(self, xp, x):
        return xp.cos(x)


@register("FLOOR")
class Floor(_Unary):
    def apply(self, xp, x):
        return xp.floor(x)


@register("CEIL")
class Ceil(_Unary):
    def apply(self, xp, x):
        return xp.ceil(x)


@register("ROUND")
class Round(_Unary):
    def apply(self, xp, x):
        return xp.round(x)  # half to even in numpy and jax, as in the official kernel


@register("SIGN")
class Sign(_Unary):
    dtypes = FLOATS + ("float64", "int32")

    def apply(self, xp, x):
        return xp.sign(x)


@register("ZEROS_LIKE")
class ZerosLike(_Unary):
    dtypes = ("float32", "float16", "int32", "int64")

    def apply(self, xp, x):
        return xp.zeros_like(x)
