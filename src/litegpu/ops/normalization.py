"""SOFTMAX, LOG_SOFTMAX, L2_NORMALIZATION, LOCAL_RESPONSE_NORMALIZATION (float32; SOFTMAX also
int8 / uint8 / int16, LOG_SOFTMAX also int8 / uint8, as the official optimized kernels).

All normalise along the last axis, as the official kernels do for any rank.
SOFTMAX scales the max-shifted logits by ``beta`` before exponentiating;
L2_NORMALIZATION divides by max(||x||, 1e-6) (so a zero vector stays zero);
LOCAL_RESPONSE_NORMALIZATION sums squares over ``radius`` channels on each
side (clipped at the edges) and takes 4-D input only.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from ..errors import ModelExecutionError
from . import _quantized as qz
from . import _fixedpoint as fp
from ._official_math import glibc_expf, sum_in_depth_order
from .registry import Op, OpContext, register

L2_NORM_EPSILON = 1e-6


def _require_rank(ctx: OpContext, x: Any, low: int, high: int) -> None:
    if not low <= x.ndim <= high:
        raise ModelExecutionError(f"{ctx.op}: input must have rank {low}..{high}, got shape {tuple(x.shape)}")


@register("SOFTMAX")
class Softmax(Op):
    dtypes = ("float32", "int8", "uint8", "int16")

    def unsupported_reason(self, op, subgraph, target):
        reason = super().unsupported_reason(op, subgraph, target)
        x, y = subgraph.tensors[op.inputs[0]], subgraph.tensors[op.outputs[0]]
        if reason is None and x.dtype in ("int8", "uint8") and y.dtype not in ("int8", "uint8"):
            reason = f"{x.dtype} input with {y.dtype} output is not supported (only 8-bit outputs)"
        if reason is None and x.dtype == "int16" and y.dtype != "int16":
            reason = f"int16 input with {y.dtype} output is not supported"
        return reason

    def compute(self, ctx: OpContext, x: Any) -> Any:
        xp = ctx.xp
        _require_rank(ctx, x, 1, 8)
        if ctx.input(0).dtype in ("int8", "uint8"):
            return _softmax_8bit(ctx, xp, x)
        if ctx.input(0).dtype == "int16":
            _require_rank(ctx, x, 1, 4)  # the official int16 kernel's limit
            return _softmax_int16(ctx, xp, x)
        if ctx.official_float_order and x.dtype == np.float32 and x.size:
            return _official_float_softmax(ctx, x)
        shifted = (x - xp.max(x, axis=-1, keepdims=True)) * xp.asarray(ctx.options.beta, x.dtype)
        e = xp.exp(shifted)
        return e / xp.sum(e, axis=-1, keepdims=True)


def _official_float_softmax(ctx: OpContext, x: Any) -> Any:
    """optimized_ops::Softmax (float32, one thread), bit for bit: ``(x - max) * beta`` in float32, Eigen's
    ``exp()`` over the whole tensor (packets, then glibc's expf on the last n % 4 elements), each row summed
    in Eigen's vectorized order (``reduce._eigen_row_sums``, as MEAN), ``1 / sum`` and one product per element.
    The exponentials can be subnormal: they and the products stay in float64 on the float32 grid."""
    from . import _official_math as official_math
    from .reduce import _eigen_row_sums

    xp = ctx.xp
    with np.errstate(all="ignore"):
        shifted = (x - xp.max(x, axis=-1, keepdims=True)) * xp.asarray(np.float32(ctx.options.beta))
    e = official_math.eigen_exp64(ctx, shifted)
    rows = xp.reshape(e.astype(xp.float32), (-1, x.shape[-1]))
    total = xp.reshape(_eigen_row_sums(ctx, rows), x.shape[:-1] + (1,))
    scale = fp.divide_f32_exactly(xp, np.float32(1), total).astype(xp.float64)
    with np.errstate(all="ignore"):
        return official_math._to_f32(ctx, official_math._f32_grid(ctx, e * scale))


# the official 8-bit kernels' constant tables are computed once in numpy, with official_math's exact glibc expf
_NUMPY = SimpleNamespace(xp=np, lax=None)


def _softmax_exp_table(input_scale: float, beta: float) -> np.ndarray:
    """PopulateSoftmaxLookupTable: entry 255 - d holds ``expf(-input_scale * beta * d)`` in float32 for every
    distance d from the row maximum (glibc's expf, float32 arithmetic, as the C++)."""
    scale = -np.float32(input_scale) * np.float32(beta)
    distance = (255 - np.arange(256)).astype(np.float32)
    with np.errstate(over="ignore"):
        return glibc_expf(_NUMPY, scale * distance)


def _softmax_8bit(ctx: OpContext, xp: Any, x: Any) -> Any:
    """optimized_ops::Softmax for 8-bit input and output, the x86 build's path (the uint16 table of
    SoftmaxInt8LUT is aarch64 with clang only): exp from a 256-entry float32 table indexed by the distance to
    the row maximum, the row summed left to right in float32, ``inv = 1 / (sum * output_scale)`` in float32,
    then each ``exp * inv`` rounded half away from zero (int8: std::round) or as ``(int)(p + 0.5f)`` (uint8),
    plus the zero point, saturated.  Measured bit for bit against the official kernel (an int8 transformer's
    attention, where the uint16-table form was 1 LSB off in 6 of 65,536 elements)."""
    out_dtype = ctx.output(0).dtype
    in_scale, _ = qz.scale_and_zero_point(ctx, ctx.input(0), "input")
    out_scale, out_zp = qz.scale_and_zero_point(ctx, ctx.output(0), "output")
    wide = x.astype(xp.int64)
    distance_from_top = 255 - (xp.max(wide, axis=-1, keepdims=True) - wide)  # the table index
    exp = xp.take(xp.asarray(_softmax_exp_table(in_scale, float(ctx.options.beta))), distance_from_top)
    total = _sequential_sum_f32(ctx, exp)
    # float32 product, then a correctly rounded float32 division (XLA's is a reciprocal sequence)
    inverse = fp.divide_f32_exactly(xp, np.float32(1), _round_to_f32(ctx, total.astype(xp.float64) * float(
        np.float32(out_scale))).astype(xp.float32))
    probability = _round_to_f32(ctx, exp.astype(xp.float64) * inverse.astype(xp.float64))
    if out_dtype == "uint8":
        rounded = xp.floor(_round_to_f32(ctx, probability + 0.5))  # (int32_t)(p + 0.5f): p >= 0
    else:
        rounded = xp.floor(probability + 0.5)  # std::round of p >= 0, in float64: no float32 rounding of p + 0.5
    low, high = qz.dtype_limits(out_dtype)
    return xp.clip(rounded.astype(xp.int64) + out_zp, low, high)


# --- int16 SOFTMAX: reference_ops::SoftmaxInt16 with its two interpolated tables ---------------

_INT16_RANGE = 65535


def _softmax_int16_tables() -> tuple[np.ndarray, np.ndarray]:
    """exp on [-10, 0] and 1 / (1 + x) on [0, 1], both to [-1, 1]: built in double, as SoftmaxPrepare."""
    with np.errstate(all="ignore"):
        exp_table = qz.lut_int16(np.exp, 10.0 / _INT16_RANGE, 32767, 2.0 / _INT16_RANGE, 0, np.float64)
        reciprocal_table = qz.lut_int16(lambda v: 1.0 / (1.0 + v), 1.0 / _INT16_RANGE, -32768,
                                        2.0 / _INT16_RANGE, 0, np.float64)
    return exp_table, reciprocal_table


def _check_int16_softmax_output(ctx: OpContext) -> float:
    in_scale, in_zp = qz.scale_and_zero_point(ctx, ctx.input(0), "input")
    out_scale, out_zp = qz.scale_and_zero_point(ctx, ctx.output(0), "output")
    if in_zp != 0 or out_zp != 0:
        raise ModelExecutionError(f"{ctx.op}: int16 input and output need zero points 0, got {in_zp} and {out_zp}")
    if abs(np.float32(out_scale) - np.float32(1 / 32768)) > np.float32(0.001 / 32768):
        raise ModelExecutionError(f"{ctx.op}: int16 output scale must be 1/32768, got {out_scale}")
    return in_scale


def _softmax_int16(ctx: OpContext, xp: Any, x: Any) -> Any:
    """Per row: exp of (x - max) rescaled to [-10, 0] from the exp table; the int32 sum normalised
    to [1, 2) by its leading zeros; its reciprocal from the 1/(1+x) table; the product rounded."""
    in_scale = _check_int16_softmax_output(ctx)
    beta = np.float32(ctx.options.beta)
    multiplier, shift = fp.quantize_multiplier(float(np.float32(in_scale) * beta) / (10.0 / 65535.0))
    exp_table, reciprocal_table = _softmax_int16_tables()
    wide = x.astype(xp.int64)
    diff = wide - xp.max(wide, axis=-1, keepdims=True)
    scaled = fp.multiply_by_quantized_multiplier(xp, diff, multiplier, shift)
    exps = qz.lookup_int16(xp, exp_table, xp.clip(scaled + 32767, -32768, 32767)).astype(xp.int64)
    total = xp.sum(exps, axis=-1, keepdims=True)
    headroom_plus_one = 32 - fp.bit_length(xp, total)
    normalised = ((total << (headroom_plus_one - 1)) + (1 << 13)) >> 14
    reciprocal = qz.lookup_int16(xp, reciprocal_table,
                                 xp.clip(normalised - ((1 << 15) + (1 << 16)), -32768, 32767)).astype(xp.int64)
    right_shift = 31 - headroom_plus_one
    result = (exps * reciprocal + (xp.asarray(1, xp.int64) << (right_shift - 1))) >> right_shift
    return xp.clip(result, 0, 32767)


# --- 8-bit LOG_SOFTMAX: optimized_ops::LogSoftmax (float32 table of exp, float32 arithmetic) ---

def _log_softmax_8bit(ctx: OpContext, xp: Any, x: Any) -> Any:
    """sum_exp = exp(-scale * (max - x)) from a 256-entry expf table, summed left to right in
    float32; log_prob = (scale / out_scale) * x - (scale * max + logf(sum_exp)) / out_scale on the
    raw values, rounded half to even (std::rint), plus the zero point, saturated."""
    dtype = ctx.input(0).dtype
    in_scale, _ = qz.scale_and_zero_point(ctx, ctx.input(0), "input")
    out_scale, out_zp = qz.scale_and_zero_point(ctx, ctx.output(0), "output")
    expected_zp = 127 if dtype == "int8" else 255
    if ctx.output(0).dtype != dtype or out_scale != 16.0 / 256 or out_zp != expected_zp:
        raise ModelExecutionError(f"{ctx.op}: {dtype} output must be {dtype} with scale 16/256 and zero point "
                                  f"{expected_zp}, got {ctx.output(0).dtype} {out_scale} / {out_zp}")
    f32 = np.float32
    with np.errstate(over="ignore"):
        table = qz.libm_f32(np.exp, (-f32(in_scale) * f32(1.0)) * np.arange(255, -1, -1).astype(f32))
    wide = x.astype(xp.int64)  # raw int8 values: no +128 offset (verified: it changes roundings)
    top = xp.max(wide, axis=-1, keepdims=True)
    sum_exp = _sequential_sum_f32(ctx, xp.take(xp.asarray(table), 255 - top + wide))

    def r(v: Any) -> Any:
        return _round_to_f32(ctx, v)

    # each float32 operation as float64 then rounded, which is exact for *, / and logf
    log_sum_exp = r(xp.log(sum_exp.astype(xp.float64)))
    in_scale64, out_scale64 = float(f32(in_scale)), float(f32(out_scale))
    precomputed = r(r(r(in_scale64 * top.astype(xp.float64)) + log_sum_exp) / out_scale64)
    scaled = r(float(f32(in_scale) / f32(out_scale)) * wide.astype(xp.float64))
    log_prob = r(scaled - precomputed)
    low, high = qz.dtype_limits(dtype)
    return xp.clip(xp.round(log_prob).astype(xp.int64) + out_zp, low, high)


def _round_to_f32(ctx: OpContext, v: Any) -> Any:
    """float64 values rounded to float32's precision, kept in float64.  On XLA by reduce_precision:
    a float32 round trip would be dropped (XLA allows excess precision and removes the converts)."""
    if ctx.lax is None:
        return v.astype(np.float32).astype(np.float64)
    return ctx.lax.reduce_precision(v, exponent_bits=8, mantissa_bits=23)


def _sequential_sum_f32(ctx: OpContext, values: Any) -> Any:
    """float32 sum along the last axis, strictly left to right like the C++ loop (keepdims)."""
    if ctx.lax is None:
        return np.cumsum(values.astype(np.float32), axis=-1, dtype=np.float32)[..., -1:]
    xp = ctx.xp
    columns = xp.moveaxis(values.astype(xp.float32), -1, 0)
    total, _ = ctx.lax.scan(lambda acc, column: (acc + column, None),
                            xp.zeros(columns.shape[1:], xp.float32), columns)
    return total[..., None]


@register("LOG_SOFTMAX")
class LogSoftmax(Op):
    dtypes = ("float32", "int8", "uint8")

    def compute(self, ctx: OpContext, x: Any) -> Any:
        xp = ctx.xp
        _require_rank(ctx, x, 1, 8)
        if ctx.input(0).dtype in ("int8", "uint8"):
            return _log_softmax_8bit(ctx, xp, x)
        shifted = x - xp.max(x, axis=-1, keepdims=True)
        return shifted - xp.log(xp.sum(xp.exp(shifted), axis=-1, keepdims=True))


@register("L2_NORMALIZATION")
class L2Normalization(Op):
    dtypes = ("float32", "int8", "uint8")

    def unsupported_reason(self, op, subgraph, target):
        reason = super().unsupported_reason(op, subgraph, target)
        activation = op.options.get("fused_activation_function", "NONE")
        if reason is None and activation != "NONE":  # the official Prepare rejects these too
            reason = f"fused activation {activation} (the official kernel takes only NONE)"
        return reason

    def compute(self, ctx: OpContext, x: Any) -> Any:
        xp = ctx.xp
        _require_rank(ctx, x, 1, 8)
        if ctx.input(0).dtype in ("int8", "uint8"):
            return _l2_normalization_8bit(ctx, x)
        if ctx.official_float_order and x.dtype == np.float32:
            # the builtin kernel: the squares summed in order, each rounded, then a division per element (XLA
            # would multiply by the norm's reciprocal)
            squares = sum_in_depth_order(xp, ctx.lax, x[..., None, :], x[..., :, None])[..., 0]
            norm = xp.maximum(xp.sqrt(squares), xp.asarray(L2_NORM_EPSILON, x.dtype))
            return fp.divide_f64_exactly(xp, x.astype(xp.float64), norm.astype(xp.float64)).astype(xp.float32)
        norm = xp.sqrt(xp.sum(x * x, axis=-1, keepdims=True))
        return x / xp.maximum(norm, xp.asarray(L2_NORM_EPSILON, x.dtype))


def _l2_output_zero_point(ctx: OpContext) -> int:
    """The official Prepare fixes the output quantization: scale 1/128, zero point 128 (uint8) or 0 (int8)."""
    dtype = ctx.output(0).dtype
    scale, zero_point = qz.scale_and_zero_point(ctx, ctx.output(0), "output")
    expected = 128 if dtype == "uint8" else 0
    if scale != float(np.float32(1 / 128)) or zero_point != expected:
        raise ModelExecutionError(f"{ctx.op}: a {dtype} output must have scale 1/128 and zero point {expected}, "
                                  f"got {scale} and {zero_point}")
    return zero_point


def _l2_normalization_8bit(ctx: OpContext, x: Any) -> Any:
    """The official 8-bit kernels: the zero-point centred row's sum of squares in int32, its
    inverse square root as a fixed-point multiplier (``GetInvSqrtQuantizedMultiplierExp``),
    then the optimized uint8 kernel rescales 128 * diff (+128), the int8 reference kernel
    rescales diff with 7 more bits of left shift."""
    xp = ctx.xp
    out_zp = _l2_output_zero_point(ctx)
    _, in_zp = qz.scale_and_zero_point(ctx, ctx.input(0), "input")
    diff = x.astype(xp.int64) - in_zp
    square_sum = fp.wrap_int32(xp, xp.sum(diff * diff, axis=-1, keepdims=True))
    multiplier, right_shift = fp.inv_sqrt_multiplier(xp, square_sum)
    if ctx.input(0).dtype == "uint8":
        y = fp.multiply_by_quantized_multiplier(xp, 128 * diff, multiplier, -right_shift) + out_zp
    else:
        y = fp.multiply_by_quantized_multiplier(xp, diff, multiplier, 7 - right_shift)
    low, high = qz.dtype_limits(ctx.output(0).dtype)
    return xp.clip(y, low, high)


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
