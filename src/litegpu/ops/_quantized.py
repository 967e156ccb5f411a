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
from . import fixedpoint as fp

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
    raise ModelExecutionError(f"fused activation {activation} is not supported on quantized values")


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

def symmetric_quantize_batches(xp: Any, x: Any) -> tuple[Any, Any]:
    """``SymmetricQuantizeFloats`` of each batch (leading axis) of a float32 array:
    int8 values in [-127, 127] and one float32 scale per batch (1 for an all-zero batch).
    The scale is range / 127, the quantization multiplies by 127 / range (both float32)
    and rounds half away from zero, as the portable kernel does."""
    rows = x.reshape(x.shape[0], -1).astype(xp.float32)
    value_range = xp.max(xp.abs(rows), axis=1) if rows.shape[1] else xp.zeros(rows.shape[0], xp.float32)
    empty = value_range == 0
    safe = xp.where(empty, xp.float32(1), value_range)
    scale = xp.where(empty, xp.float32(1), safe / xp.float32(127)).astype(xp.float32)
    inverse = (xp.float32(127) / safe).astype(xp.float32)
    scaled = (rows * inverse[:, None]).astype(xp.float32)
    values = xp.clip(fp.round_half_away_from_zero(xp, scaled), -127, 127)
    values = xp.where(empty[:, None], 0, values).astype(xp.int64)
    return values.reshape(x.shape), scale


def asymmetric_quantize_batches(xp: Any, x: Any) -> tuple[Any, Any, Any]:
    """``AsymmetricQuantizeFloats`` of each batch (leading axis) of a float32 array:
    int8 values, a float32 scale and an int zero point per batch.  The range always
    includes 0; scale and zero point are chosen in double precision (the zero point
    from whichever end loses less, nudged into [-128, 127]); values are
    round(zero_point + x * float32(1 / scale)) in float32, clamped."""
    rows = x.reshape(x.shape[0], -1).astype(xp.float32)
    if rows.shape[1]:
        rmin = xp.minimum(xp.min(rows, axis=1), 0).astype(xp.float64)
        rmax = xp.maximum(xp.max(rows, axis=1), 0).astype(xp.float64)
    else:
        rmin = rmax = xp.zeros(rows.shape[0], xp.float64)
    flat = rmin == rmax
    scale64 = xp.where(flat, 1.0, (rmax - rmin) / 255.0)
    from_min, from_max = -128.0 - rmin / scale64, 127.0 - rmax / scale64
    min_error = 128.0 + xp.abs(rmin / scale64)
    max_error = 127.0 + xp.abs(rmax / scale64)
    zero_point = xp.where(min_error < max_error, from_min, from_max)
    zero_point = xp.where(zero_point <= -128, -128,
                          xp.where(zero_point >= 127, 127, fp.round_half_away_from_zero(xp, zero_point)))
    zero_point = xp.where(flat, 0, zero_point).astype(xp.int64)
    scale = xp.where(flat, 1.0, scale64).astype(xp.float32)
    inverse = (1.0 / scale.astype(xp.float64)).astype(xp.float32)
    shifted = (zero_point.astype(xp.float32)[:, None] + (rows * inverse[:, None]).astype(xp.float32)).astype(xp.float32)
    values = xp.clip(fp.round_half_away_from_zero(xp, shifted), -128, 127)
    values = xp.where(flat[:, None], 0, values).astype(xp.int64)
    return values.reshape(x.shape), scale, zero_point


def is_affine_tensor(t: Any) -> bool:
    """The tensor carries at least one scale (any integer dtype, packed ones included)."""
    return t is not None and t.quantization is not None and t.quantization.is_affine

