"""Elementwise unary math.

Quantized, as the official kernels (elementwise.cc, exp.cc, neg.cc):
ABS (int8, int16: requantized |x - zp|); LOG, EXP (int8: a 256-entry table, int16: the 513-entry
interpolated table); RSQRT (int8: the fixed-point Newton inverse square root, precomputed for the
256 inputs; int16: the interpolated table); SQRT (int8, int16: float32 sqrt, truncated); NEG
(int8, int16: the raw values negated with wrap-around, quantization ignored, as the official).

The official RSQRT and SQRT fail at run time for inputs below the input zero point (a negative
real value).  The reference backend raises ``ModelExecutionError`` like them; an XLA program
cannot raise, so it returns what the official arithmetic gives without the check (RSQRT: the
value for x - zp = 1 in int8 and the table's value in int16; SQRT: the lowest output).

Float results follow the C library of the official kernels (inf, NaN and all):
LOG of a negative is NaN, RSQRT(0) is inf.  ROUND rounds half to even.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ModelExecutionError
from . import _official_math as official_math
from . import _quantized as qz
from . import _fixedpoint as fp
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
    # int8 / int16: reference_ops::Negate of the raw values, scales and zero points ignored
    # (-(-128) wraps to -128)
    dtypes = FLOATS + ("int32", "int64", "int8", "int16")

    def apply(self, xp, x):
        return -x


class _QuantizedUnary(_Unary):
    """A unary op with integer kernels for the int8 / int16 dtypes it lists: ``quantized``
    runs them; ``check_domain`` is the official run-time input check (reference backend only)."""

    def quantized(self, ctx: OpContext, xp: Any, x: Any) -> Any:
        raise NotImplementedError

    def check_domain(self, ctx: OpContext, x: np.ndarray) -> None:
        pass

    def is_integer(self, ctx: OpContext) -> bool:
        dtype = ctx.input(0).dtype
        if dtype not in ("int8", "int16"):
            return False
        if not qz.is_quantized(ctx.input(0)):
            raise ModelExecutionError(f"{ctx.op}: {dtype} input needs quantization parameters")
        return True

    def reference(self, ctx, x):
        if self.is_integer(ctx):
            self.check_domain(ctx, x)
            return self.quantized(ctx, np, x)
        return super().reference(ctx, x)

    def lower(self, ctx, x):
        if self.is_integer(ctx):
            return self.quantized(ctx, ctx.xp, x)
        return super().lower(ctx, x)


def _table_activation(ctx: OpContext, xp: Any, x: Any, transform: Any) -> Any:
    """LUTPopulate + LookupTable: 256 entries for int8, 513 interpolated ones for int16."""
    in_scale, in_zp, out_scale, out_zp = _quantized_io(ctx)
    if ctx.input(0).dtype == "int8":
        return qz.lookup_8bit(xp, qz.lut_8bit(transform, in_scale, in_zp, out_scale, out_zp, "int8"), x, "int8")
    return qz.lookup_int16(xp, qz.lut_int16(transform, in_scale, in_zp, out_scale, out_zp), x)


def _below_zero_point(ctx: OpContext, x: np.ndarray, message: str) -> None:
    _, in_zp = qz.scale_and_zero_point(ctx, ctx.input(0), "input")
    if np.any(x.astype(np.int64) < in_zp):
        raise ModelExecutionError(f"{ctx.op}: {message} (an input is below the zero point {in_zp})")


@register("EXP")
class Exp(_QuantizedUnary):
    dtypes = FLOATS + ("int8", "int16")

    def apply(self, xp, x):
        return xp.exp(x)

    def compute(self, ctx, x):
        if ctx.official_float_order and x.dtype == np.float32:  # reference_ops::Exp: glibc's expf, bit for bit
            return official_math.glibc_expf(ctx, x)
        return super().compute(ctx, x)

    def quantized(self, ctx, xp, x):
        # The official int8 table saturates results too large for int32 at 127 (where lut_8bit's
        # x86 conversion would give INT32_MIN): capping exp at 2^30 output units is equivalent.
        _, _, out_scale, _ = _quantized_io(ctx)
        cap = np.float32(2.0 ** 30) * np.float32(out_scale)

        def capped_exp(v: np.ndarray) -> np.ndarray:
            return np.minimum(qz.libm_f32(np.exp, v), cap).astype(np.float32)

        return _table_activation(ctx, xp, x, capped_exp if ctx.input(0).dtype == "int8" else
                                 (lambda v: qz.libm_f32(np.exp, v)))


@register("LOG")
class Log(_QuantizedUnary):
    dtypes = FLOATS + ("int8", "int16")

    def apply(self, xp, x):
        return xp.log(x)

    def quantized(self, ctx: OpContext, xp: Any, x: Any) -> Any:
        """LogLUTPrepare: logf of the dequantized value; values <= 0 map to the lowest output."""
        _, _, out_scale, out_zp = _quantized_io(ctx)
        low, _ = qz.dtype_limits(ctx.input(0).dtype)
        output_min = np.float32(low - out_zp) * np.float32(out_scale)

        def log_or_min(v: np.ndarray) -> np.ndarray:
            return np.where(v <= 0, output_min, qz.libm_f32(np.log, v)).astype(np.float32)

        return _table_activation(ctx, xp, x, log_or_min)


@register("SQRT")
class Sqrt(_QuantizedUnary):
    dtypes = FLOATS + ("int8", "int16")

    def apply(self, xp, x):
        return xp.sqrt(x)

    def check_domain(self, ctx, x):
        _below_zero_point(ctx, x, "Sqrt is only defined for non-negative values")

    def quantized(self, ctx, xp, x):
        """SqrtEvalQuantized: sqrtf of the float32-dequantized value divided by the output scale,
        truncated toward zero (not rounded), plus the zero point, saturated.  Precomputed for
        every input value (65536 for int16)."""
        in_scale, in_zp, out_scale, out_zp = _quantized_io(ctx)
        dtype = ctx.input(0).dtype
        low, high = qz.dtype_limits(dtype)
        values = np.arange(low, high + 1, dtype=np.int64)
        with np.errstate(all="ignore"):
            dequantized = np.float32(in_scale) * (values - in_zp).astype(np.float32)
            root = qz.libm_f32(np.sqrt, dequantized)
            truncated = fp.float_to_int32_like_x86(np, np.trunc(root / np.float32(out_scale)))
        table = np.clip(fp.wrap_int32(np, truncated + out_zp), low, high).astype(np.int32)
        return xp.take(xp.asarray(table), x.astype(xp.int32) - low)


@register("RSQRT")
class Rsqrt(_QuantizedUnary):
    dtypes = FLOATS + ("int8", "int16")

    def reference(self, ctx, x):
        if self.is_integer(ctx):
            return super().reference(ctx, x)
        with np.errstate(all="ignore"):
            return (1 / np.sqrt(x)).astype(x.dtype)

    def lower(self, ctx, x):
        if self.is_integer(ctx):
            return super().lower(ctx, x)
        if ctx.official_float_order and x.dtype == np.float32:
            # The official kernel's 1.f / std::sqrt(f), each step correctly rounded.  XLA's rsqrt is an ulp off
            # now and then; RMSNorm's RSQRT feeds the hybrid FULLY_CONNECTEDs of quantized LLMs, whose int8 row
            # quantization turns that ulp into a quantization step (6 % of a 576-wide SmolLM's logits, int4).
            return fp.divide_f32_exactly(ctx.xp, np.float32(1), ctx.lax.sqrt(x))
        return ctx.lax.rsqrt(x)

    def check_domain(self, ctx, x):
        _below_zero_point(ctx, x, "Rsqrt is only defined for positive values")

    def quantized(self, ctx, xp, x):
        in_scale, in_zp, out_scale, out_zp = _quantized_io(ctx)
        if ctx.input(0).dtype == "int16":
            def inverse_sqrt_or_max(v: np.ndarray) -> np.ndarray:
                with np.errstate(all="ignore"):
                    inverse = np.float32(1) / qz.libm_f32(np.sqrt, v)
                return np.where(v <= 0, np.float32(32767) * np.float32(out_scale), inverse).astype(np.float32)

            return qz.lookup_int16(xp, qz.lut_int16(inverse_sqrt_or_max, in_scale, in_zp, out_scale, out_zp), x)
        table = _int8_rsqrt_table(in_scale, in_zp, out_scale, out_zp)
        return qz.lookup_8bit(xp, table, x, "int8")


# --- int8 RSQRT: GetInvSqrtQuantizedMultiplierExp (gemmlowp fixed point, python ints) ---------

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1


def _wrap32(v: int) -> int:
    return ((v + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def _high_mul(a: int, b: int) -> int:
    """SaturatingRoundingDoublingHighMul on python ints."""
    if a == b == _INT32_MIN:
        return _INT32_MAX
    ab = a * b
    total = ab + ((1 << 30) if ab >= 0 else 1 - (1 << 30))
    return -((-total) >> 31) if total < 0 else total >> 31  # C division truncates


def _divide_by_pot(x: int, exponent: int) -> int:
    mask = (1 << exponent) - 1
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> exponent) + (1 if (x & mask) > threshold else 0)


def _multiply_by_pot(x: int, exponent: int) -> int:
    """SaturatingRoundingMultiplyByPOT: a saturating left shift or a rounding right shift."""
    if exponent < 0:
        return _divide_by_pot(x, -exponent)
    threshold = (1 << (31 - exponent)) - 1
    if x > threshold:
        return _INT32_MAX
    if x < -threshold:
        return _INT32_MIN
    return x << exponent


def _inverse_sqrt_multiplier(value: int) -> tuple[int, int]:
    """GetInvSqrtQuantizedMultiplierExp(value, kReverseShift): (multiplier, left shift) of
    1 / sqrt(value) by five Newton-Raphson steps in Q3.28 from the guess 1."""
    if value <= 1:  # 0 and 1 (and the negatives the official kernel rejects earlier)
        return _INT32_MAX, 0
    shift = 11
    while value >= (1 << 29):
        value //= 4
        shift += 1
    pairs = ((32 - value.bit_length()) - 1) // 2 - 1
    shift -= pairs
    value <<= 2 * pairs
    half_input = _divide_by_pot(value >> 1, 1)
    half_three = (1 << 28) + (1 << 27)
    x = 1 << 28  # F3::One()
    for _ in range(5):
        x3 = _multiply_by_pot(_high_mul(_high_mul(x, x), x), 6)  # F9 -> F3
        x = _multiply_by_pot(_wrap32(_high_mul(half_three, x) - _high_mul(half_input, x3)), 3)  # F6 -> F3
    x = _high_mul(x, 1518500250)  # * sqrt(2) / 2
    if shift < 0:
        x = _wrap32(x << -shift)
        shift = 0
    return x, -shift


def _int8_rsqrt_table(in_scale: float, in_zp: int, out_scale: float, out_zp: int) -> np.ndarray:
    """RsqrtEvalQuantizedInt8 for every int8 input: 1/sqrt(x - zp) as a multiplier applied to
    2^20, then rescaled by 1 / (sqrtf(in_scale) * out_scale) and 2^-20; x == zp gives 127."""
    k_shift = 20
    real = 1.0 / float(np.float32(qz.libm_f32(np.sqrt, np.float32(in_scale)) * np.float32(out_scale)))
    multiplier, shift = fp.quantize_multiplier(real)
    table = np.empty(256, np.int8)
    for i, v in enumerate(range(-128, 128)):
        value = v - in_zp
        if value == 0:
            table[i] = 127
            continue
        inv_multiplier, inv_shift = _inverse_sqrt_multiplier(value)
        data = int(fp.multiply_by_quantized_multiplier(np, np.int64(1), inv_multiplier, inv_shift + k_shift))
        out = int(fp.multiply_by_quantized_multiplier(np, np.int64(data), multiplier, shift - k_shift)) + out_zp
        table[i] = min(max(out, -128), 127)
    return table


@register("SQUARE")
class Square(_Unary):
    def apply(self, xp, x):
        return x * x


class _GlibcTrig(_Unary):
    """std::sin / std::cos: glibc's sinf / cosf (RoPE's angles).  numpy's float32 ones are an ulp off them in
    15 % of elements; XLA CPU's equal them (measured, |x| up to 3e38), so only the reference needs the
    emulation."""

    cosine = False

    def compute(self, ctx, x):
        if ctx.lax is None and x.dtype == np.float32:
            return official_math.glibc_sincosf(ctx, x, cosine=self.cosine)
        return super().compute(ctx, x)


@register("SIN")
class Sin(_GlibcTrig):
    def apply(self, xp, x):
        return xp.sin(x)


@register("COS")
class Cos(_GlibcTrig):
    cosine = True

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
