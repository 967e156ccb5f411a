"""What the integer kernels share: tensor quantization parameters, activation ranges
in the quantized domain, per-channel requantization, saturation.

Not an op module (the leading underscore keeps ``_catalog`` from importing it as one).
Functions take ``xp`` where they touch arrays, so numpy and jax.numpy (x64) share them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ModelExecutionError
from ..ir import numpy_dtype
from . import _fixedpoint as fp

QUANTIZED_8BIT = ("int8", "uint8")


def is_quantized(t: Any) -> bool:
    return t is not None and t.dtype in ("int8", "uint8", "int16") and t.quantization is not None \
        and t.quantization.is_affine


def scale_and_zero_point(ctx: Any, t: Any, what: str) -> tuple[float, int]:
    """Per-tensor (scale as float32-valued python float, zero point)."""
    q = t.quantization
    if q is None or not q.is_affine:
        raise ModelExecutionError(f"{ctx.op}: the {what} tensor {t.name!r} has no quantization scale")
    if len(q.scale) != 1:
        raise ModelExecutionError(f"{ctx.op}: the {what} tensor {t.name!r} needs one scale, has {len(q.scale)}")
    return float(np.float32(q.scale[0])), int(q.zero_point[0]) if q.zero_point else 0


def channel_scales(ctx: Any, t: Any, what: str, channels: int) -> np.ndarray:
    """Per-channel (or broadcast per-tensor) scales of a weight tensor, as float32 values."""
    q = t.quantization
    if q is None or not q.is_affine:
        raise ModelExecutionError(f"{ctx.op}: the {what} tensor {t.name!r} has no quantization scale")
    scales = np.asarray(q.scale, np.float32)
    if scales.size == 1:
        return np.full(channels, scales[0], np.float32)
    if scales.size != channels:
        raise ModelExecutionError(f"{ctx.op}: the {what} tensor {t.name!r} has {scales.size} scales for "
                                  f"{channels} output channels")
    return scales


def dtype_limits(dtype: str) -> tuple[int, int]:
    info = np.iinfo(numpy_dtype(dtype))
    return int(info.min), int(info.max)


def activation_range(activation: str | None, scale: float, zero_point: int, dtype: str) -> tuple[int, int]:
    """``CalculateActivationRangeQuantized``: the fused activation's bounds as quantized values."""
    qmin, qmax = dtype_limits(dtype)

    def quantize(real: float) -> int:  # float32 division, then std::round
        return zero_point + int(fp.round_half_away(float(np.float32(real) / np.float32(scale))))

    if activation in (None, "NONE"):
        return qmin, qmax
    if activation == "RELU":
        return max(qmin, quantize(0.0)), qmax
    if activation == "RELU6":
        return max(qmin, quantize(0.0)), min(qmax, quantize(6.0))
    if activation == "RELU_N1_TO_1":
        return max(qmin, quantize(-1.0)), min(qmax, quantize(1.0))
    # TANH, SIGN_BIT, ...: the official helper falls through to the full range, i.e. no activation (ops that
    # refuse them, e.g. FULLY_CONNECTED, check before getting here).
    return qmin, qmax


def per_channel_multipliers(input_scale: float, weight_scales: np.ndarray, output_scale: float
                            ) -> tuple[np.ndarray, np.ndarray]:
    """The official conv/FC multipliers: input * weight / output scale in double, then QuantizeMultiplier."""
    real = [float(np.float32(input_scale)) * float(s) / float(np.float32(output_scale)) for s in weight_scales]
    return fp.quantize_multipliers(np.asarray(real, np.float64))


def ruy_multiply_by_quantized_multiplier(xp: Any, x: Any, multiplier: Any, shift: Any) -> Any:
    """The rescaling of ruy's x86 (AVX2 / AVX-512) int8 GEMM kernels, which the official
    optimized CONV_2D and FULLY_CONNECTED run: like gemmlowp's it rounds twice (the high
    multiply, then the right shift), but both roundings are half *up* (add half, arithmetic
    shift), where gemmlowp rounds half away from zero.  Verified bit-exact on the
    MobileNetV3 int8 intermediates; gemmlowp rounding differs by 1 in ~0.05% of elements."""
    shift = xp.asarray(shift, xp.int64)
    scaled = fp.wrap_int32(xp, xp.asarray(x, xp.int64) << xp.maximum(shift, 0))
    high = (scaled * xp.asarray(multiplier, xp.int64) + (1 << 30)) >> 31
    right = xp.maximum(-shift, 0)
    half = xp.where(right > 0, xp.asarray(1, xp.int64) << xp.maximum(right - 1, 0), 0)
    return (high + half) >> right


def requantize_accumulator(xp: Any, acc: Any, multiplier: Any, shift: Any, zero_point: int,
                           low: int, high: int, *, ruy: Any = False) -> Any:
    """int32 accumulator -> output: rescale (TFLite's MultiplyByQuantizedMultiplier, or ruy's
    half-up rounding where ``ruy`` is True: a bool or a per-channel mask), add the zero
    point, clamp to [low, high]."""
    acc = fp.wrap_int32(xp, acc)
    multiplier, shift = xp.asarray(multiplier, xp.int64), xp.asarray(shift, xp.int64)
    if isinstance(ruy, bool):
        rescale = ruy_multiply_by_quantized_multiplier if ruy else fp.multiply_by_quantized_multiplier
        scaled = rescale(xp, acc, multiplier, shift)
    else:
        scaled = xp.where(xp.asarray(ruy), ruy_multiply_by_quantized_multiplier(xp, acc, multiplier, shift),
                          fp.multiply_by_quantized_multiplier(xp, acc, multiplier, shift))
    return xp.clip(scaled + zero_point, low, high)


# --- 8-bit lookup tables (LUTPopulate<int8/uint8>) and the float32 libm emulation they need.
# Added for quantized activations / unary ops (activations.py, unary.py). ---

def libm_f32(fn: Any, x: np.ndarray) -> np.ndarray:
    """A float32 C math function (``expf``, ``tanhf``...) as glibc computes it: the float64
    result rounded to float32, which is the correctly rounded value glibc gives in practice."""
    with np.errstate(all="ignore"):
        return fn(np.asarray(x, np.float32).astype(np.float64)).astype(np.float32)


def lut_8bit(transform: Any, input_scale: float, input_zero_point: int, output_scale: float,
             output_zero_point: int, dtype: str) -> np.ndarray:
    """``LUTPopulate`` for int8/uint8: entry ``i`` holds the output for the input value ``min + i``.

    The official table is built in float32: dequantize, ``transform`` (float32 -> float32),
    multiply by the float32 reciprocal of the output scale, ``roundf``, add the zero point,
    truncate to int32 (x86: NaN / out of range give INT32_MIN), clamp."""
    low, high = dtype_limits(dtype)
    values = np.arange(low, high + 1, dtype=np.int64)
    with np.errstate(all="ignore"):
        dequantized = np.float32(input_scale) * (values - input_zero_point).astype(np.float32)
        transformed = np.asarray(transform(dequantized), np.float32)
        inverse_scale = np.float32(1) / np.float32(output_scale)
        rescaled = fp.round_half_away_from_zero(np, transformed * inverse_scale)
        quantized = fp.float_to_int32_like_x86(np, rescaled + np.float32(output_zero_point))
    return np.clip(quantized, low, high).astype(numpy_dtype(dtype))


def lookup_8bit(xp: Any, table: np.ndarray, x: Any, dtype: str) -> Any:
    """``table[x - min]`` for int8/uint8 ``x``: a gather on XLA."""
    low, _ = dtype_limits(dtype)
    return xp.take(xp.asarray(table), x.astype(xp.int32) - low)


# --- hybrid (dynamic-range) kernels: float activations quantized on the fly ----------
# (conv.py: CONV_2D / DEPTHWISE_CONV_2D / TRANSPOSE_CONV with float input and int8 weights)

def quantize_rows(xp: Any, rows: Any, asymmetric: bool) -> tuple[Any, Any, Any]:
    """``BatchQuantizeFloats`` over the last axis: (int8 values as int64, float32 scale, int64 zero point)."""
    rows = rows.astype(xp.float32)
    if rows.shape[-1] == 0:  # nothing to quantize: scale 1, zero point 0
        ones = xp.ones(rows.shape[:-1] + (1,), xp.float32)
        return rows.astype(xp.int64), ones, xp.zeros(ones.shape, xp.int64)
    lo, hi = rows.min(axis=-1, keepdims=True), rows.max(axis=-1, keepdims=True)
    if not asymmetric:  # SymmetricQuantizeFloats
        value_range = xp.maximum(xp.abs(lo), xp.abs(hi))
        empty = value_range == 0
        safe = xp.where(empty, xp.float32(1), value_range)
        scale = xp.where(empty, xp.float32(1), fp.divide_f64_exactly(xp, safe, 127.0).astype(xp.float32))
        inverse = fp.divide_f64_exactly(xp, 127.0, safe).astype(xp.float32)
        values = fp.round_half_away_from_zero(xp, rows * inverse)
        values = xp.where(empty, 0, xp.clip(values, -127, 127)).astype(xp.int64)
        return values, scale, xp.zeros_like(values[..., :1])
    # AsymmetricQuantizeFloats: the zero point is nudged in double precision, but the range
    # rmax - rmin is a float32 difference (measured: the double difference gives a scale one
    # ulp off in ~1 row of 10, as the optimized x86 build keeps rmin / rmax as floats)
    rmin32, rmax32 = xp.minimum(lo, 0), xp.maximum(hi, 0)
    rmin, rmax = rmin32.astype(xp.float64), rmax32.astype(xp.float64)
    empty = rmin == rmax
    scale64 = xp.where(empty, 1.0, fp.divide_f64_exactly(xp, (rmax32 - rmin32).astype(xp.float64), 255.0))
    low, high = fp.divide_f64_exactly(xp, rmin, scale64), fp.divide_f64_exactly(xp, rmax, scale64)
    from_min, from_max = -128.0 - low, 127.0 - high
    use_min = (128.0 + xp.abs(low)) < (127.0 + xp.abs(high))
    zero_point = xp.where(use_min, from_min, from_max)
    zero_point = xp.where(zero_point <= -128, -128.0,
                          xp.where(zero_point >= 127, 127.0, fp.round_half_away_from_zero(xp, zero_point)))
    zero_point = xp.where(empty, 0.0, zero_point)
    scale = scale64.astype(xp.float32)
    inverse = fp.divide_f64_exactly(xp, 1.0, scale.astype(xp.float64)).astype(xp.float32)
    # The official kernel rounds x * inverse and then adds the zero point: rounding zero_point + x * inverse
    # instead is one unit off where the float32 sum lands on a .5 tie that the product was not on (found as
    # the first diverging tensor of a dynamic-range encoder: one element of one row of 16k).
    values = zero_point.astype(xp.int64) + fp.round_half_away_from_zero(xp, rows * inverse).astype(xp.int64)
    values = xp.where(empty, 0, xp.clip(values, -128, 127)).astype(xp.int64)
    return values, scale, zero_point.astype(xp.int64)



def symmetric_quantize_batches(xp: Any, x: Any) -> tuple[Any, Any]:
    """``quantize_rows`` (symmetric) of each batch (leading axis): values shaped like ``x``, one scale per batch."""
    values, scale, _ = quantize_rows(xp, x.reshape(x.shape[0], -1), False)
    return values.reshape(x.shape), scale[:, 0]


def asymmetric_quantize_batches(xp: Any, x: Any) -> tuple[Any, Any, Any]:
    """``quantize_rows`` (asymmetric) of each batch (leading axis): values shaped like ``x``, one scale and
    zero point per batch."""
    values, scale, zero_point = quantize_rows(xp, x.reshape(x.shape[0], -1), True)
    return values.reshape(x.shape), scale[:, 0], zero_point[:, 0]


def is_affine_tensor(t: Any) -> bool:
    """The tensor carries at least one scale (any integer dtype, packed ones included)."""
    return t is not None and t.quantization is not None and t.quantization.is_affine



# --- exact integer matrix products on float GEMMs (lead) -------------------------------------

F32_EXACT = 1 << 24   # every integer of magnitude up to 2^24 is a float32
F64_EXACT = 1 << 53


def magnitude_bound(values: Any) -> int:
    """The largest |value| of a static integer array (0 when empty)."""
    values = np.asarray(values)
    return int(np.abs(values.astype(np.int64)).max()) if values.size else 0


def exact_matmul(xp: Any, a: Any, b: Any, bound: int) -> Any:
    """``a @ b`` of integer-valued arrays as int64, exactly, given ``bound`` >= every sum of
    |a_ik * b_kj| over k.  Under XLA it runs as a float32 (or float64) GEMM: every partial sum
    is then an integer the float type holds exactly, in any summation order, and XLA CPU's
    float GEMMs are 5 to 20 times faster than its int64 dot (bench/cpu/bench_int_matmul.py).
    numpy keeps int64 arithmetic."""
    if xp is np or bound >= F64_EXACT:
        return xp.matmul(a.astype(xp.int64), b.astype(xp.int64))
    import jax

    dtype = xp.float32 if bound < F32_EXACT else xp.float64
    product = xp.matmul(a.astype(dtype), b.astype(dtype), precision=jax.lax.Precision.HIGHEST)
    return product.astype(xp.int64)


def dot_bound(lhs_magnitude: int, rhs: Any, contract_axis: int) -> int:
    """A bound on |sum_k lhs_k * rhs_k| for any lhs with |lhs_k| <= ``lhs_magnitude`` and the static
    ``rhs`` contracted along ``contract_axis``: lhs_magnitude * max over outputs of sum_k |rhs_k|."""
    rhs = np.abs(np.asarray(rhs).astype(np.int64))
    if rhs.size == 0:
        return 0
    return lhs_magnitude * int(rhs.sum(axis=contract_axis).max())


def centred_magnitude(dtype: str, zero_point: int) -> int:
    """The largest |q - zero_point| a ``dtype`` value q can have."""
    low, high = dtype_limits(dtype)
    return max(abs(low - zero_point), abs(high - zero_point))


# --- int16 interpolated lookup tables (LUTPopulate<int16_t> / LUTLookup) ----------------
# Added for the int16 unary ops (unary.py: RSQRT, LOG, EXP) and int16 SOFTMAX (normalization.py). ---

def _float_to_int16_like_x86(values: np.ndarray) -> np.ndarray:
    """``static_cast<int16_t>`` of a float: a 32-bit truncating conversion (NaN gives INT32_MIN)
    whose low 16 bits are kept."""
    wide = fp.float_to_int32_like_x86(np, np.trunc(values))
    return (((wide + (1 << 15)) & 0xFFFF) - (1 << 15)).astype(np.int16)


def lut_int16(transform: Any, input_scale: float, input_zero_point: int, output_scale: float,
              output_zero_point: int, float_dtype: Any = np.float32) -> np.ndarray:
    """``LUTPopulateInt16``: 513 samples of ``transform`` over the whole int16 input range,
    each biased by half the error the linear interpolation makes at the segment's midpoint.

    Computed in ``float_dtype`` (float32, or float64 where the official caller passes doubles)
    like the C++.  The output zero point only enters through the output range, whose width
    sets the scaling: the table holds ``round(f(x) / scale)``, not shifted by the zero point."""
    f = np.dtype(float_dtype).type
    with np.errstate(all="ignore"):
        input_min = f(input_scale) * f(-32768 - input_zero_point)
        input_max = f(input_scale) * f(32767 - input_zero_point)
        output_min = f(output_scale) * f(-32768 - output_zero_point)
        output_max = f(output_scale) * f(32767 - output_zero_point)
        step = (input_max - input_min) / f(512)
        half_step = step / f(2)
        scaling = f(65536) / (output_max - output_min)
        i = np.arange(512).astype(float_dtype)
        sample_at = input_min + i * step
        value = np.asarray(transform(sample_at), float_dtype)
        midpoint = np.asarray(transform(sample_at + half_step), float_dtype)
        following = np.asarray(transform(input_min + (i + f(1)) * step), float_dtype)

        def rnd(v: np.ndarray) -> np.ndarray:
            return fp.round_half_away_from_zero(np, np.asarray(v, float_dtype)).astype(float_dtype)

        sample = rnd(value * scaling)
        interpolated = rnd((following * scaling + sample) / f(2))
        bias = rnd((interpolated - rnd(midpoint * scaling)) / f(2))
        last = rnd(np.asarray(transform(np.array([input_max], float_dtype)), float_dtype) * scaling)
        entries = np.concatenate([sample - bias, last])
        # std::max/std::min keep a NaN first argument, as here
        entries = np.where(np.isnan(entries), entries, np.clip(entries, f(-32768), f(32767)))
    return _float_to_int16_like_x86(entries)


def lookup_int16(xp: Any, table: np.ndarray, x: Any) -> Any:
    """``LUTLookup`` of int16 values: the top 9 bits pick a segment, the low 7 interpolate
    (int16 slope and result wrap, as the C++ casts do)."""
    wide = x.astype(xp.int32)
    index = 256 + (wide >> 7)
    fraction = wide & 0x7F
    entries = xp.asarray(table.astype(np.int32))
    base = xp.take(entries, index)
    slope = _wrap_int16(xp, xp.take(entries, index + 1) - base)
    return _wrap_int16(xp, base + ((slope * fraction + 64) >> 7))


def _wrap_int16(xp: Any, v: Any) -> Any:
    return ((v + (1 << 15)) & 0xFFFF) - (1 << 15)
