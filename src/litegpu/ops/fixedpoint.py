"""TFLite's fixed-point arithmetic, bit for bit: the integer core of every quantized kernel.

The official runtime never rescales quantized values with floats at run time:
a real multiplier ``m`` becomes an int32 ``multiplier`` (Q0.31, in [2^30, 2^31))
and a power-of-two ``shift`` (``QuantizeMultiplier``), and values are rescaled by
``MultiplyByQuantizedMultiplier``: a saturating, rounding doubling high multiply
followed by a rounding right shift (the default "double rounding" build).

Array functions take ``xp`` (numpy or jax.numpy) and work elementwise with
broadcasting, so per-channel multipliers are arrays.  They compute in int64,
which jax only has with ``jax_enable_x64`` (the XLA backend turns it on).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1


def round_half_away(value: float) -> float:
    """C's ``std::round`` (TfLiteRound) on one python float."""
    whole = math.trunc(value)
    return float(whole + (math.copysign(1, value) if abs(value - whole) >= 0.5 else 0))


def quantize_multiplier(real_multiplier: float) -> tuple[int, int]:
    """``QuantizeMultiplier``: ``real ~= multiplier * 2^(shift - 31)``, multiplier in [2^30, 2^31)."""
    if real_multiplier == 0.0:
        return 0, 0
    q, shift = math.frexp(real_multiplier)
    q_fixed = int(round_half_away(q * (1 << 31)))
    if q_fixed == 1 << 31:
        q_fixed //= 2
        shift += 1
    if shift < -31:  # every bit would be shifted out: the official code flushes to zero
        return 0, 0
    return q_fixed, shift


def quantize_multipliers(real_multipliers: Any) -> tuple[np.ndarray, np.ndarray]:
    """``quantize_multiplier`` of each element (per-channel scales): int32 arrays."""
    pairs = [quantize_multiplier(float(m)) for m in np.asarray(real_multipliers, np.float64).reshape(-1)]
    shape = np.shape(real_multipliers)
    multipliers = np.array([p[0] for p in pairs], np.int64).reshape(shape).astype(np.int32)
    shifts = np.array([p[1] for p in pairs], np.int64).reshape(shape).astype(np.int32)
    return multipliers, shifts


def wrap_int32(xp: Any, x: Any) -> Any:
    """Two's-complement wrap of int64 values to int32's range, as C int32 arithmetic does."""
    x = xp.asarray(x, xp.int64)
    return ((x + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def _truncating_divide(xp: Any, x: Any, divisor: int) -> Any:
    """C integer division (rounds toward zero) of int64 values by a positive divisor."""
    quotient = xp.abs(x) // divisor
    return xp.where(x < 0, -quotient, quotient)


def saturating_rounding_doubling_high_mul(xp: Any, a: Any, b: Any) -> Any:
    """gemmlowp's ``SaturatingRoundingDoublingHighMul`` of int32 values (as int64 arrays)."""
    a = xp.asarray(a, xp.int64)
    b = xp.asarray(b, xp.int64)
    overflow = (a == b) & (a == INT32_MIN)
    ab = a * b
    nudge = xp.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    high = _truncating_divide(xp, ab + nudge, 1 << 31)
    return xp.where(overflow, INT32_MAX, high)


def rounding_divide_by_pot(xp: Any, x: Any, exponent: Any) -> Any:
    """gemmlowp's ``RoundingDivideByPOT``: x / 2^exponent rounded half away from zero."""
    x = xp.asarray(x, xp.int64)
    exponent = xp.asarray(exponent, xp.int64)
    mask = (xp.asarray(1, xp.int64) << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + xp.where(x < 0, 1, 0)
    return (x >> exponent) + xp.where(remainder > threshold, 1, 0)


def multiply_by_quantized_multiplier(xp: Any, x: Any, multiplier: Any, shift: Any) -> Any:
    """``MultiplyByQuantizedMultiplier`` (int32 x, double rounding): int64 array of int32 values."""
    shift = xp.asarray(shift, xp.int64)
    left = xp.maximum(shift, 0)
    right = xp.maximum(-shift, 0)
    # x * (1 << left_shift) is int32 arithmetic in the official code: it wraps.
    scaled = wrap_int32(xp, xp.asarray(x, xp.int64) << left)
    return rounding_divide_by_pot(xp, saturating_rounding_doubling_high_mul(xp, scaled, multiplier), right)


def multiply_by_quantized_multiplier_int64(xp: Any, x: Any, multiplier: Any, shift: Any) -> Any:
    """The int64-input overload (16x8 kernels): a 16-bit multiplier, one rounding shift."""
    multiplier = xp.asarray(multiplier, xp.int64)
    reduced = xp.where(multiplier < 0x7FFF0000, (multiplier + (1 << 15)) >> 16, 0x7FFF)
    total_shift = 15 - xp.asarray(shift, xp.int64)
    rounded = xp.asarray(x, xp.int64) * reduced + (xp.asarray(1, xp.int64) << (total_shift - 1))
    return wrap_int32(xp, rounded >> total_shift)


def round_half_away_from_zero(xp: Any, x: Any) -> Any:
    """Elementwise ``std::round`` of floats (numpy/jax round halves to even)."""
    whole = xp.trunc(x)
    fraction = x - whole  # exact in floating point
    return whole + xp.where(xp.abs(fraction) >= 0.5, xp.sign(x), 0).astype(x.dtype)


def float_to_int32_like_x86(xp: Any, x: Any) -> Any:
    """``static_cast<int32_t>`` of already-rounded floats as x86 does it: NaN and
    out-of-range values become INT32_MIN (the "integer indefinite" value)."""
    in_range = (x >= -2.0 ** 31) & (x < 2.0 ** 31)  # False for NaN
    safe = xp.where(in_range, x, 0)
    return xp.where(in_range, safe.astype(xp.int64), INT32_MIN)


def divide_f32_exactly(xp: Any, x: Any, divisor: Any) -> Any:
    """float32 ``x / divisor`` correctly rounded, as C computes it.

    XLA on CPU compiles float32 division to a reciprocal-based sequence that is
    off by one ulp in about a third of the cases, which moves values across
    rounding boundaries; a float64 quotient rounded to float32 is exact (53 bits
    are enough for a correctly rounded single-precision division)."""
    quotient = xp.asarray(x, xp.float64) / xp.asarray(divisor, xp.float64)
    return quotient.astype(xp.float32)
