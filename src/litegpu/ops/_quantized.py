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
