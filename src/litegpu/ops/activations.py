"""Activation functions (float; quantized int8/uint8 HARD_SWISH follows the official fixed-point kernel)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import ModelExecutionError
from . import _official_math as official_math
from . import _quantized as qz
from . import _fixedpoint as fp
from .binary import broadcast_shape
from .registry import Op, OpContext, register

FLOATS = ("float32", "float16")


class _Activation(Op):
    dtypes = FLOATS

    def apply(self, ctx: OpContext, xp: Any, x: Any) -> Any:
        raise NotImplementedError

    def quantized(self, ctx: OpContext, xp: Any, x: Any) -> Any:
        """The integer kernel; only called for the dtypes a subclass lists."""
        raise NotImplementedError

    def compute(self, ctx: OpContext, x: Any) -> Any:
        if np.dtype(x.dtype).kind in "iu" and type(self).quantized is not _Activation.quantized:
            _require_same_type(ctx)
            return self.quantized(ctx, ctx.xp, x)
        with np.errstate(all="ignore"):
            return self.apply(ctx, ctx.xp, x)


def _clip(xp: Any, x: Any, low: float, high: float) -> Any:
    return xp.clip(x, low, high).astype(x.dtype)


def _require_same_type(ctx: OpContext) -> None:
    x, y = ctx.input(0), ctx.output(0)
    if x.dtype != y.dtype:
        raise ModelExecutionError(f"{ctx.op}: the output type {y.dtype} must be the input type {x.dtype}")


def _quant_params(ctx: OpContext) -> tuple[float, int, float, int]:
    in_scale, in_zp = qz.scale_and_zero_point(ctx, ctx.input(0), "input")
    out_scale, out_zp = qz.scale_and_zero_point(ctx, ctx.output(0), "output")
    return in_scale, in_zp, out_scale, out_zp


def _require_symmetric_int16(ctx: OpContext) -> None:
    if ctx.input(0).dtype == "int16":
        _, in_zp, _, out_zp = _quant_params(ctx)
        if in_zp != 0 or out_zp != 0:
            raise ModelExecutionError(f"{ctx.op}: int16 input and output need zero points 0, "
                                      f"got {in_zp} and {out_zp}")


def _f32_ratio(numerator: float, denominator: float) -> float:
    """``float / float`` as the official Prepare computes it, before QuantizeMultiplier(double)."""
    return float(np.float32(numerator) / np.float32(denominator))


# --- RELU family: requantize input -> output scale, clamp to the activation's quantized range ---

class _QuantizedRelu(_Activation):
    """ReluPrepare / QuantizedReluX: ``out_zp + MultiplyByQuantizedMultiplier(x - in_zp, in/out scale)``
    clamped to the activation bounds quantized with the output scale (``roundf(bound / scale)``)."""

    bounds: tuple[float, float] = (0.0, math.inf)

    def quantized(self, ctx, xp, x):
        _require_symmetric_int16(ctx)
        in_scale, in_zp, out_scale, out_zp = _quant_params(ctx)
        multiplier, shift = fp.quantize_multiplier(_f32_ratio(in_scale, out_scale))
        low, high = self.quantized_bounds(ctx.output(0).dtype, out_scale, out_zp)
        scaled = fp.multiply_by_quantized_multiplier(xp, x.astype(xp.int64) - in_zp, multiplier, shift)
        return xp.clip(scaled + out_zp, low, high)

    def quantized_bounds(self, dtype: str, scale: float, zero_point: int) -> tuple[int, int]:
        qmin, qmax = qz.dtype_limits(dtype)

        def quantize(bound: float) -> int:
            return zero_point + int(fp.round_half_away(float(np.float32(bound) / np.float32(scale))))

        low = max(qmin, quantize(self.bounds[0]))
        high = qmax if math.isinf(self.bounds[1]) else min(qmax, quantize(self.bounds[1]))
        return low, high


@register("RELU")
class Relu(_QuantizedRelu):
    dtypes = FLOATS + ("int8", "uint8", "int16")

    def apply(self, ctx, xp, x):
        return xp.maximum(x, 0).astype(x.dtype)


@register("RELU6")
class Relu6(_QuantizedRelu):
    dtypes = FLOATS + ("int8", "uint8", "int16")
    bounds = (0.0, 6.0)

    def apply(self, ctx, xp, x):
        return _clip(xp, x, 0, 6)


@register("RELU_N1_TO_1")
class ReluN1To1(_QuantizedRelu):
    dtypes = FLOATS + ("int8", "uint8")
    bounds = (-1.0, 1.0)

    def apply(self, ctx, xp, x):
        return _clip(xp, x, -1, 1)


@register("RELU_0_TO_1")
class Relu0To1(_QuantizedRelu):
    dtypes = FLOATS + ("int8", "uint8")
    bounds = (0.0, 1.0)

    def apply(self, ctx, xp, x):
        return _clip(xp, x, 0, 1)


# --- LOGISTIC / TANH: 8-bit through a 256-entry table, int16 through the sigmoid table ---

def _logistic_f32(v: np.ndarray) -> np.ndarray:
    return np.float32(1) / (np.float32(1) + qz.libm_f32(np.exp, -v))


def _tanh_f32(v: np.ndarray) -> np.ndarray:
    return qz.libm_f32(np.tanh, v)


def _lut_activation(ctx: OpContext, xp: Any, x: Any, transform: Any) -> Any:
    in_scale, in_zp, out_scale, out_zp = _quant_params(ctx)
    dtype = ctx.input(0).dtype
    return qz.lookup_8bit(xp, qz.lut_8bit(transform, in_scale, in_zp, out_scale, out_zp, dtype), x, dtype)


def _checked_log2(scale: float) -> tuple[bool, int]:
    """``CheckedLog2``: (whether ``scale`` is a power of two, the rounded log2), in float32."""
    log2 = np.float32(np.float32(math.log(np.float32(scale))) * np.float32(1.0 / math.log(2.0)))
    rounded = fp.round_half_away(float(log2))
    return abs(float(log2) - rounded) < 1e-3, int(rounded)


def _int16_sigmoid_rescale(ctx: OpContext, integer_bits: int) -> tuple[int, int, bool]:
    """The int16 input rescaling of SigmoidPrepare / TanhPrepare: (multiplier, left shift, whether
    the power-of-two scale takes the optimized gemmlowp fixed-point path instead)."""
    in_scale, in_zp, out_scale, out_zp = _quant_params(ctx)
    if in_zp != 0 or out_zp != 0:
        raise ModelExecutionError(f"{ctx.op}: int16 input and output need zero points 0, got {in_zp} and {out_zp}")
    out_pot, out_log2 = _checked_log2(out_scale)
    if not out_pot or out_log2 != -15:
        raise ModelExecutionError(f"{ctx.op}: int16 output scale must be 1/32768, got {out_scale}")
    is_pot, log2 = _checked_log2(in_scale)
    left_shift = (15 - integer_bits) + log2
    pot_shifts = (0,) if ctx.op.opcode_name == "LOGISTIC" else (0, 1)
    if is_pot and left_shift in pot_shifts:
        return 0, left_shift, True
    multiplier, left_shift = in_scale * 4096.0 * 3.0, 0
    while multiplier <= 32767.0 / 2.0 and left_shift <= 30:
        left_shift += 1
        multiplier *= 2.0
    return int(multiplier), left_shift, False


# --- int16 LOGISTIC / TANH at input scales 2^-12 (TANH also 2^-11): gemmlowp's fixed-point
# logistic and tanh of Q3.12 raw values (``fixedpoint``'s tables for all 65536 inputs). ---

def _gemmlowp_int16_table(op: str, left_shift: int) -> np.ndarray:
    """gemmlowp::logistic / gemmlowp::tanh of every int16 input read as Q3.12 (TANH with left shift 1
    doubles it first, saturating); index = input + 32768."""
    if op == "LOGISTIC":
        return fp.gemmlowp_logistic16_table(3)
    x = fp.saturating_multiply_by_pot16(np.arange(-32768, 32768, dtype=np.int64), left_shift)
    return fp.gemmlowp_tanh16_table(3)[x + 32768]


# sigmoid(i / 24) in Q0.16 (sigmoid_table_uint16 of the official kernels; not a plain rounding of it)
_SIGMOID_TABLE = np.array([
    32768, 33451, 34133, 34813, 35493, 36169, 36843, 37513, 38180, 38841, 39498, 40149, 40794, 41432, 42064,
    42688, 43304, 43912, 44511, 45102, 45683, 46255, 46817, 47369, 47911, 48443, 48964, 49475, 49975, 50464,
    50942, 51409, 51865, 52311, 52745, 53169, 53581, 53983, 54374, 54755, 55125, 55485, 55834, 56174, 56503,
    56823, 57133, 57433, 57724, 58007, 58280, 58544, 58800, 59048, 59288, 59519, 59743, 59959, 60168, 60370,
    60565, 60753, 60935, 61110, 61279, 61441, 61599, 61750, 61896, 62036, 62172, 62302, 62428, 62549, 62666,
    62778, 62886, 62990, 63090, 63186, 63279, 63368, 63454, 63536, 63615, 63691, 63765, 63835, 63903, 63968,
    64030, 64090, 64148, 64204, 64257, 64308, 64357, 64405, 64450, 64494, 64536, 64576, 64614, 64652, 64687,
    64721, 64754, 64786, 64816, 64845, 64873, 64900, 64926, 64950, 64974, 64997, 65019, 65039, 65060, 65079,
    65097, 65115, 65132, 65149, 65164, 65179, 65194, 65208, 65221, 65234, 65246, 65258, 65269, 65280, 65291,
    65301, 65310, 65319, 65328, 65337, 65345, 65352, 65360, 65367, 65374, 65381, 65387, 65393, 65399, 65404,
    65410, 65415, 65420, 65425, 65429, 65433, 65438, 65442, 65445, 65449, 65453, 65456, 65459, 65462, 65465,
    65468, 65471, 65474, 65476, 65479, 65481, 65483, 65485, 65488, 65489, 65491, 65493, 65495, 65497, 65498,
    65500, 65501, 65503, 65504, 65505, 65507, 65508, 65509, 65510, 65511, 65512, 65513, 65514, 65515, 65516,
    65517, 65517, 65518, 65519, 65520, 65520, 65521, 65522, 65522, 65523, 65523, 65524, 65524, 65525, 65525,
    65526, 65526, 65526, 65527, 65527, 65528, 65528, 65528, 65529, 65529, 65529, 65529, 65530, 65530, 65530,
    65530, 65531, 65531, 65531, 65531, 65531, 65532, 65532, 65532, 65532, 65532, 65532, 65533, 65533, 65533,
    65533, 65533, 65533, 65533, 65533, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534,
    65535], np.int64)


def _sigmoid_interpolated(xp: Any, magnitude: Any, fraction_bits: int, saturated: int) -> Any:
    """Linear interpolation in the sigmoid table: ``magnitude`` is |input| in units of 1/24 with
    ``fraction_bits`` fractional bits; ``saturated`` is the value past the table's end."""
    table = xp.asarray(_SIGMOID_TABLE)
    whole = magnitude >> fraction_bits
    inside = whole < 255
    index = xp.where(inside, whole, 0)
    low, high = xp.take(table, index), xp.take(table, index + 1)
    fraction = magnitude & ((1 << fraction_bits) - 1)
    return xp.where(inside, (low << fraction_bits) + fraction * (high - low), saturated)


def _int16_logistic(ctx: OpContext, xp: Any, x: Any) -> Any:
    """reference_integer_ops::Logistic (int16): rescale to 1/(3*4096) units, interpolate the table."""
    multiplier, left_shift, _ = _int16_sigmoid_rescale(ctx, integer_bits=3)
    scaled = _rescale_int16_input(xp, x, multiplier, left_shift)
    result = _sigmoid_interpolated(xp, xp.abs(scaled), 9, 0x7FFF << 10)
    result = xp.where(scaled >= 0, result + (1 << 9), (1 << 25) - result + (1 << 9) - 1)
    return result >> 10


def _int16_tanh(ctx: OpContext, xp: Any, x: Any) -> Any:
    """reference_integer_ops::Tanh (int16): tanh(x) = 2 sigmoid(2x) - 1 on the same table."""
    multiplier, left_shift, _ = _int16_sigmoid_rescale(ctx, integer_bits=3)
    scaled = _rescale_int16_input(xp, x, multiplier, left_shift)
    result = _sigmoid_interpolated(xp, xp.abs(scaled), 8, 0xFFFF << 8)
    result = xp.where(scaled >= 0, result - (1 << 23) + (1 << 7), -result + (1 << 23) + (1 << 7) - 1)
    return result >> 8


def _rescale_int16_input(xp: Any, x: Any, multiplier: int, left_shift: int) -> Any:
    """``(x * multiplier + round) >> left_shift``: to units of 1/(3 * 4096) (int32 arithmetic, which
    cannot overflow: the multiplier stays below 2^15)."""
    rounding = (1 << (left_shift - 1)) if left_shift > 0 else 0
    return (x.astype(xp.int64) * multiplier + rounding) >> left_shift


class _SigmoidLike(_Activation):
    dtypes = FLOATS + ("int8", "uint8", "int16")

    def quantized(self, ctx, xp, x):
        if ctx.input(0).dtype == "int16":
            _, left_shift, power_of_two = _int16_sigmoid_rescale(ctx, 3)
            if power_of_two:  # optimized_ops::Logistic / Tanh (int16): gemmlowp on Q3.12 inputs
                table = _gemmlowp_int16_table(ctx.op.opcode_name, left_shift)
                return xp.take(xp.asarray(table), x.astype(xp.int32) + 32768)
            return self.int16(ctx, xp, x)
        self.check_8bit_output(ctx)
        return _lut_activation(ctx, xp, x, self.transform)

    def check_8bit_output(self, ctx: OpContext) -> None:
        pass


@register("LOGISTIC")
class Logistic(_SigmoidLike):
    transform = staticmethod(_logistic_f32)
    int16 = staticmethod(_int16_logistic)

    def check_8bit_output(self, ctx):
        _, _, out_scale, _ = _quant_params(ctx)
        if out_scale != 1.0 / 256:
            raise ModelExecutionError(f"{ctx.op}: 8-bit output scale must be 1/256, got {out_scale}")

    def reference(self, ctx, x):
        if np.dtype(x.dtype).kind in "iu":
            return self.compute(ctx, x)
        if x.dtype == np.float32:  # the builtin kernel's arithmetic (Eigen's packets), bit for bit
            return official_math.logistic(ctx, x)
        with np.errstate(all="ignore"):
            return (1 / (1 + np.exp(-x.astype(np.float64)))).astype(x.dtype)

    def lower(self, ctx, x):
        if np.dtype(x.dtype).kind in "iu":
            return self.compute(ctx, x)
        if ctx.official_float_order and x.dtype == np.float32:
            # SiLU's sigmoid in LLM feed-forward layers: XLA's logistic is an ulp off the builtin kernel in
            # about half the elements, which the hybrid layers after it can turn into a quantization step.
            return official_math.logistic(ctx, x)
        return ctx.lax.logistic(x)


@register("TANH")
class Tanh(_SigmoidLike):
    transform = staticmethod(_tanh_f32)
    int16 = staticmethod(_int16_tanh)

    def apply(self, ctx, xp, x):
        if ctx.official_float_order and x.dtype == np.float32:  # Eigen's fast tanh, bit for bit
            return official_math.tanh(ctx, x)
        return xp.tanh(x)


# --- LEAKY_RELU, ELU ---

@register("LEAKY_RELU")
class LeakyRelu(_Activation):
    dtypes = FLOATS + ("int8", "uint8", "int16")

    def apply(self, ctx, xp, x):
        alpha = np.asarray(ctx.options.get("alpha", 0.0), dtype=x.dtype)
        return xp.where(x > 0, x, x * alpha)

    def quantized(self, ctx, xp, x):
        """reference_ops::QuantizeLeakyRelu: one multiplier for x >= zero point, one (with alpha) below."""
        _require_symmetric_int16(ctx)
        in_scale, in_zp, out_scale, out_zp = _quant_params(ctx)
        alpha = np.float32(ctx.options.get("alpha", 0.0))
        alpha_mult, alpha_shift = fp.quantize_multiplier(
            float(np.float32(np.float32(in_scale) * alpha) / np.float32(out_scale)))
        id_mult, id_shift = fp.quantize_multiplier(_f32_ratio(in_scale, out_scale))
        centered = x.astype(xp.int64) - in_zp
        positive = centered >= 0
        scaled = fp.multiply_by_quantized_multiplier(xp, centered, xp.where(positive, id_mult, alpha_mult),
                                                     xp.where(positive, id_shift, alpha_shift))
        low, high = qz.dtype_limits(ctx.output(0).dtype)
        return xp.clip(scaled + out_zp, low, high)


def _elu_f32(v: np.ndarray) -> np.ndarray:
    return np.where(v < 0, qz.libm_f32(np.expm1, v), v).astype(np.float32)


@register("ELU")
class Elu(_Activation):
    dtypes = FLOATS + ("int8",)

    def apply(self, ctx, xp, x):
        return xp.where(x < 0, xp.expm1(x), x)

    def quantized(self, ctx, xp, x):
        return _lut_activation(ctx, xp, x, _elu_f32)


@register("HARD_SWISH")
class HardSwish(_Activation):
    dtypes = FLOATS + ("int8", "uint8")

    def apply(self, ctx, xp, x):
        if np.dtype(x.dtype).kind in "iu":
            return _quantized_hard_swish(ctx, xp, x)
        if ctx.official_float_order and x.dtype == np.float32:
            return _hard_swish_as_the_builtin_kernel(xp, x)
        return x * _clip(xp, x + 3, 0, 6) / np.asarray(6, x.dtype)


_HARD_SWISH_BLOCK = 4  # one float32x4 of optimized_ops::HardSwish's NEON loops


def _hard_swish_as_the_builtin_kernel(xp: Any, x: Any) -> Any:
    """``optimized_ops::HardSwish`` (NEON, NEON_2_SSE on x86), bit for bit: blocks of 4 values as
    ``(x * (1/6)) * min(6, max(0, x + 3))``, the last size % 4 as ``(x * min(6, max(0, x + 3))) * (1/6)``, each
    step rounded to float32 (``x * relu6(x + 3) / 6`` is an ulp off in a third of the values, which a
    dynamic-range MobileNetV3's hybrid layers carried to 3.6e-3 of its largest output)."""
    one_sixth = np.float32(1 / 6)
    flat = x.reshape(-1)
    head = flat.shape[0] - flat.shape[0] % _HARD_SWISH_BLOCK
    reluish = _clip(xp, flat + np.float32(3), 0, 6)
    blocks = (flat[:head] * one_sixth) * reluish[:head]
    tail = (flat[head:] * reluish[head:]) * one_sixth
    return xp.concatenate([blocks, tail]).reshape(x.shape)


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
    """0.5 x (1 + erf(x / sqrt 2)); with ``approximate`` the tanh form of the official kernel.
    8-bit: a 256-entry table of the float32 transform (GeluPrepare)."""

    dtypes = FLOATS + ("int8", "uint8")

    def quantized(self, ctx, xp, x):
        transform = _gelu_approximate_f32 if ctx.options.get("approximate", False) else _gelu_f32
        return _lut_activation(ctx, xp, x, transform)

    def reference(self, ctx, x):
        if np.dtype(x.dtype).kind in "iu":
            return self.compute(ctx, x)
        if x.dtype == np.float32 and not ctx.options.get("approximate", False):
            return official_math.gelu(ctx, x)  # the builtin kernel's Eigen erfc, bit for bit
        wide = x.astype(np.float64)
        with np.errstate(all="ignore"):  # -inf gives NaN, as in the official kernel
            if ctx.options.get("approximate", False):
                y = _gelu_tanh(np, wide)
            else:
                erfc = np.vectorize(math.erfc, otypes=[np.float64])
                y = 0.5 * wide * erfc(-wide / math.sqrt(2)) if wide.size else wide
        return np.asarray(y).astype(x.dtype)

    def lower(self, ctx, x):
        if np.dtype(x.dtype).kind in "iu":
            return self.compute(ctx, x)
        if ctx.options.get("approximate", False):
            return _gelu_tanh(ctx.xp, x)
        if ctx.official_float_order and x.dtype == np.float32:
            # XLA's erfc is an ulp off Eigen's in about a third of the elements, which a dynamic-range
            # FULLY_CONNECTED after it can turn into a quantization step (a Keras transformer: 3e-3)
            return official_math.gelu(ctx, x)
        return 0.5 * x * ctx.lax.erfc(-x * np.asarray(1 / math.sqrt(2), x.dtype))


def _gelu_tanh(xp: Any, x: Any) -> Any:
    return 0.5 * x * (1 + xp.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))


def _gelu_f32(v: np.ndarray) -> np.ndarray:
    """reference_ops::GeluTransform in float32: 0.5f * x * erfc(x * -M_SQRT1_2)."""
    erfc = np.vectorize(math.erfc, otypes=[np.float64])
    return np.float32(0.5) * v * erfc(v * np.float32(-math.sqrt(0.5))).astype(np.float32)


def _gelu_approximate_f32(v: np.ndarray) -> np.ndarray:
    """reference_ops::GeluTransformApproximate in float32."""
    inner = np.float32(_SQRT_2_OVER_PI) * (v + np.float32(0.044715) * v * v * v)
    return np.float32(0.5) * v * (np.float32(1) + qz.libm_f32(np.tanh, inner))


@register("PRELU")
class Prelu(Op):
    """x where x >= 0, else alpha * x; alpha broadcasts to x's shape (usually per channel).

    Not int16: the official kernel (ai-edge-litert 2.3.0) runs int16 through the 8-bit code with
    the alpha buffer read as int8 (the first N bytes of the int16 data), which is meaningless."""

    dtypes = FLOATS + ("int8", "uint8")

    def compute(self, ctx: OpContext, x: Any, alpha: Any) -> Any:
        if np.dtype(x.dtype) != np.dtype(alpha.dtype):
            raise ModelExecutionError(f"{ctx.op}: alpha must have the input's type {x.dtype}, got {alpha.dtype}")
        if broadcast_shape(ctx, x, alpha) != tuple(x.shape):
            raise ModelExecutionError(f"{ctx.op}: alpha {tuple(alpha.shape)} must broadcast to the input's "
                                      f"shape {tuple(x.shape)}")
        if np.dtype(x.dtype).kind in "iu":
            return _quantized_prelu(ctx, ctx.xp, x, alpha)
        return ctx.xp.where(x >= 0, x, x * alpha)


def _quantized_prelu(ctx: OpContext, xp: Any, x: Any, alpha: Any) -> Any:
    """reference_ops::Prelu (8-bit): x - zp rescaled by in/out scale where it is >= 0, else
    (x - zp) * (alpha - alpha_zp) rescaled by in * alpha / out scale."""
    _require_same_type(ctx)
    in_scale, in_zp, out_scale, out_zp = _quant_params(ctx)
    alpha_scale, alpha_zp = qz.scale_and_zero_point(ctx, ctx.input(1), "alpha")
    mult_1, shift_1 = fp.quantize_multiplier(_f32_ratio(in_scale, out_scale))
    mult_2, shift_2 = fp.quantize_multiplier(_f32_ratio(float(np.float32(in_scale) * np.float32(alpha_scale)),
                                                        out_scale))
    centered = x.astype(xp.int64) - in_zp
    positive = centered >= 0
    product = xp.where(positive, centered, centered * (alpha.astype(xp.int64) - alpha_zp))
    scaled = fp.multiply_by_quantized_multiplier(xp, product, xp.where(positive, mult_1, mult_2),
                                                 xp.where(positive, shift_1, shift_2))
    low, high = qz.dtype_limits(ctx.output(0).dtype)
    return xp.clip(scaled + out_zp, low, high)
