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

import contextlib
import contextvars
import math
from typing import Any

import numpy as np

from ._common import while_set

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


def truncating_divide(xp: Any, x: Any, divisor: int) -> Any:
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
    high = truncating_divide(xp, ab + nudge, 1 << 31)
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


# Set while XLA CPU programs are traced (``exact_divisions``): only there does ``divide_f64_exactly`` pay for its
# barrier (the GPU's float view of a quantized model is not bit for bit anyway, and the barrier costs kernels).
_EXACT_DIVISIONS = contextvars.ContextVar("litegpu_exact_divisions", default=False)


def exact_divisions(wanted: bool = True) -> contextlib.AbstractContextManager:
    """Trace with ``divide_f64_exactly`` dividing as C does (XLA CPU, where the builtin kernels' bits are the goal)."""
    return while_set(_EXACT_DIVISIONS, wanted)


def divide_f64_exactly(xp: Any, x: Any, divisor: Any) -> Any:
    """float64 ``x / divisor`` as C divides doubles.  XLA CPU does not always: its simplifier turns a
    division by a constant into a multiplication by the rounded reciprocal, and two divisions by one value
    in one kernel came out as multiplications by its reciprocal too (a dynamic-range FULLY_CONNECTED's row
    range / 255.0, then rmin / scale and rmax / scale: the zero point of a row whose two candidates straddle
    -0.5 came out one off, measured; a division by one value for a whole vector too).  Each division gets
    the pair (x, divisor), broadcast, through an optimization barrier of its own, which the simplifier and the
    kernel's code generation do not see through.  The barrier keeps XLA from fusing across it (on a GPU:
    8 more kernels a decode step of an 8-layer int4 decoder), so it is used while XLA CPU programs are traced
    (``exact_divisions``) only."""
    divisor = xp.asarray(divisor, xp.float64)
    if xp is not np and _EXACT_DIVISIONS.get():
        import jax

        # both broadcast to the result's shape first: a divisor the kernel sees as one value for every element
        # is divided into 1 once and multiplied (LLVM's reciprocal transform hoists it out of the loop)
        x = xp.asarray(x, xp.float64)
        shape = np.broadcast_shapes(x.shape, divisor.shape)
        x, divisor = jax.lax.optimization_barrier((xp.broadcast_to(x, shape), xp.broadcast_to(divisor, shape)))
    return x / divisor


# --- gemmlowp's int16 logistic and tanh (FixedPoint<int16_t, N> -> Q0.15), any integer bits N.
# Added for the full-integer LSTM (_lstm_integer.py: PortableApplySigmoid / PortableApplyTanh).
# Evaluated once in numpy for all 65536 raw inputs; a kernel looks its values up. int64 arrays
# hold the int16 raw values; _wrap16 wraps like the C++ int16 casts. ---

def _wrap16(v: np.ndarray) -> np.ndarray:
    return ((v + (1 << 15)) & 0xFFFF) - (1 << 15)


def _high_mul16(a: np.ndarray, b: Any) -> np.ndarray:
    """SaturatingRoundingDoublingHighMul on int16 raw values (Qm times Qn is Q(m+n))."""
    ab = a * b
    high = truncating_divide(np, ab + np.where(ab >= 0, 1 << 14, 1 - (1 << 14)), 1 << 15)
    return np.where((a == b) & (a == -32768), 32767, high)


def saturating_multiply_by_pot16(x: np.ndarray, exponent: int) -> np.ndarray:
    """SaturatingRoundingMultiplyByPOT on int16: saturating left or rounding right shift."""
    if exponent > 0:
        limit = (1 << (15 - exponent)) - 1
        return np.where(x > limit, 32767, np.where(x < -limit, -32768, x << exponent))
    return rounding_divide_by_pot(np, x, -exponent) if exponent < 0 else x


def _constant16(raw_int32: int) -> int:
    """A GEMMLOWP_CHECKED_FIXEDPOINT_CONSTANT for int16: the int32 raw value rounding-divided by 2^16."""
    return int(rounding_divide_by_pot(np, np.int64(raw_int32), 16))


def _exp_on_quarter16(a: np.ndarray) -> np.ndarray:
    """exp_on_interval_between_negative_one_quarter_and_0_excl (Q0.15 in and out)."""
    constant_term, one_third = _constant16(1895147668), _constant16(715827883)
    x = _wrap16(a + (1 << 12))
    x2 = _high_mul16(x, x)
    x3 = _high_mul16(x2, x)
    x4 = _high_mul16(x2, x2)
    series = saturating_multiply_by_pot16(_wrap16(_high_mul16(_wrap16(saturating_multiply_by_pot16(x4, -2) + x3), one_third) + x2), -1)
    return np.clip(constant_term + _high_mul16(constant_term, _wrap16(x + series)), -32768, 32767)


_EXP_BARREL_SHIFTER = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535),
                       (3, 720401), (4, 242))


def _exp_on_negative16(a: np.ndarray, integer_bits: int) -> np.ndarray:
    """exp_on_negative_values of Q(integer_bits).(15 - integer_bits) raw values, as Q0.15."""
    fractional_bits = 15 - integer_bits
    quarter = 1 << (fractional_bits - 2)
    shifted = _wrap16((a & (quarter - 1)) - quarter)
    result = _exp_on_quarter16(saturating_multiply_by_pot16(shifted, integer_bits))
    remainder = _wrap16(shifted - a)
    for exponent, multiplier in _EXP_BARREL_SHIFTER:
        if integer_bits > exponent:
            bit = remainder & (1 << (fractional_bits + exponent))
            result = np.where(bit != 0, _high_mul16(result, _constant16(multiplier)), result)
    if integer_bits > 5:  # below -32 the barrel shifter has no factor: gemmlowp flushes to 0
        result = np.where(a < _constant16(-(1 << (36 - integer_bits))), 0, result)
    return np.where(a == 0, 32767, result)


def _newton_reciprocal16(a: np.ndarray) -> np.ndarray:
    """The Newton-Raphson core of one_over_one_plus_x_for_x_in_0_1 and
    one_minus_x_over_one_plus_x_for_x_in_0_1: about 2 / (1 + a), Q2.13."""
    total = a + 32767
    half_denominator = truncating_divide(np, total + np.where(total >= 0, 1, -1), 2)  # RoundingHalfSum(a, One)
    x = _wrap16(_constant16(1515870810) + _high_mul16(half_denominator, _constant16(-1010580540)))
    for _ in range(3):
        remainder = _wrap16((1 << 13) - _high_mul16(half_denominator, x))
        x = _wrap16(x + saturating_multiply_by_pot16(_high_mul16(x, remainder), 2))
    return x


def gemmlowp_logistic16_table(integer_bits: int) -> np.ndarray:
    """gemmlowp::logistic of every FixedPoint<int16_t, integer_bits> raw value (index raw + 32768),
    as int16 Q0.15."""
    x = np.arange(-32768, 32768, dtype=np.int64)
    positive = x > 0
    magnitude = np.where(positive, x, _wrap16(-x))
    # one_over_one_plus_x: ExactMulByPot<-1> of the Q2.13 reciprocal is Q1.14, then Rescale<0>
    on_positive = saturating_multiply_by_pot16(_newton_reciprocal16(_exp_on_negative16(_wrap16(-magnitude), integer_bits)), 1)
    result = np.where(positive, on_positive, _wrap16(32767 - on_positive))
    return np.where(x == 0, _constant16(1 << 30), result).astype(np.int16)


def gemmlowp_tanh16_table(integer_bits: int) -> np.ndarray:
    """gemmlowp::tanh of every FixedPoint<int16_t, integer_bits> raw value (index raw + 32768),
    as int16 Q0.15."""
    x = np.arange(-32768, 32768, dtype=np.int64)
    negative = x < 0
    magnitude = np.where(negative, x, _wrap16(-x))
    # neg_tanh_on_negative_values: ExactMulByPot<1> reads the same raw values with one more integer bit
    neg_tanh = saturating_multiply_by_pot16(_wrap16(_newton_reciprocal16(_exp_on_negative16(magnitude, integer_bits + 1))
                                          - (1 << 13)), 2)
    return np.where(x == 0, 0, np.where(negative, _wrap16(-neg_tanh), neg_tanh)).astype(np.int16)


def bit_length(xp: Any, x: Any) -> Any:
    """Bits of non-negative int32 values (0 for 0; 32 - CountLeadingZeros): frexp's exponent of their
    exact float64 value."""
    return xp.frexp(xp.asarray(x).astype(xp.float64))[1].astype(xp.int64)


def saturating_shift_left(xp: Any, x: Any, exponent: int) -> Any:
    """gemmlowp ``SaturatingRoundingMultiplyByPOT<exponent > 0>`` on int32 raw values."""
    limit = (1 << (31 - exponent)) - 1
    return xp.where(x > limit, INT32_MAX, xp.where(x < -limit, INT32_MIN, x << exponent))


def inv_sqrt_multiplier(xp: Any, value: Any) -> tuple[Any, Any]:
    """``GetInvSqrtQuantizedMultiplierExp`` of positive int32 values, elementwise: 1 / sqrt(value) as a
    Q0.31 multiplier and a right shift, by five Newton-Raphson steps in gemmlowp's Q3.28 from the value
    normalised to [2^27, 2^29).  0 and 1 give INT32_MAX and no shift (the official special case)."""
    value = xp.asarray(value, xp.int64)
    small = value <= 1
    value = xp.where(small, 2, value)
    big = value >= (1 << 29)  # one division by 4 brings any int32 below 2^29
    value = xp.where(big, value // 4, value)
    shift = 11 + big.astype(xp.int64)
    pairs = (32 - bit_length(xp, value) - 1) // 2 - 1
    shift = shift - pairs
    value = value << (2 * pairs)
    srdhm = saturating_rounding_doubling_high_mul
    half_input = rounding_divide_by_pot(xp, value >> 1, 1)
    half_three = (1 << 28) + (1 << 27)
    x = xp.full(value.shape, 1 << 28, xp.int64)  # Q3.28 one
    for _ in range(5):
        cube = saturating_shift_left(xp, srdhm(xp, srdhm(xp, x, x), x), 6)
        x = saturating_shift_left(xp, wrap_int32(xp, srdhm(xp, half_three, x) - srdhm(xp, half_input, cube)), 3)
    x = srdhm(xp, x, 1518500250)  # * sqrt(2) / 2
    x = xp.where(shift < 0, wrap_int32(xp, x << xp.maximum(-shift, 0)), x)
    shift = xp.maximum(shift, 0)
    return xp.where(small, INT32_MAX, x), xp.where(small, 0, shift)
