"""Reductions: MEAN, SUM, REDUCE_PROD/MAX/MIN/ANY/ALL, ARG_MAX/ARG_MIN, CUMSUM, TOPK_V2.

Axes are static (a constant or folded shape arithmetic); negative and
duplicate axes are allowed, and an empty axis list reduces nothing.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import ModelExecutionError
from . import _fixedpoint as fp
from ._common import rounded_apart
from .registry import Op, OpContext, register
from .shape import normalize_axis, output_dtype, static_ints


def reduction_axes(ctx: OpContext, axes: Any, rank: int) -> tuple[int, ...]:
    return tuple(sorted({normalize_axis(ctx, a, rank) for a in static_ints(ctx, axes, "axes")}))


def keep_or_drop(ctx: OpContext, y: Any, x_shape: tuple, axes: tuple[int, ...]) -> Any:
    """Reduce with keepdims, then drop the axes unless keep_dims is set."""
    if ctx.options.get("keep_dims", False):
        return y
    return ctx.xp.reshape(y, tuple(d for i, d in enumerate(x_shape) if i not in axes))


class _Reduce(Op):
    dtypes = ("float32", "int32", "int64")

    def reduce(self, ctx: OpContext, x: Any, axes: tuple[int, ...]) -> Any:
        raise NotImplementedError

    def compute(self, ctx: OpContext, x: Any, axes: Any) -> Any:
        ax = reduction_axes(ctx, axes, x.ndim)
        y = self.reduce(ctx, x, ax) if ax else x
        return keep_or_drop(ctx, y, tuple(x.shape), ax)


QUANTIZED = ("int8", "uint8", "int16")


def _affine(t) -> tuple[float, int] | None:
    q = t.quantization
    if q is None or not q.is_affine:
        return None
    return float(q.scale[0]), int(q.zero_point[0]) if q.zero_point else 0


class _MeanOrSum(_Reduce):
    """Float and integer sums; quantized inputs rescale like the official integer kernels."""

    dtypes = ("float32", "int32", "int64") + QUANTIZED
    compute_sum = True

    def quantized_params(self, ctx: OpContext):
        if ctx.input(0).dtype not in QUANTIZED:
            return None
        qin, qout = _affine(ctx.input(0)), _affine(ctx.output(0))
        if qin is None or qout is None:
            return None
        if ctx.input(0).dtype == "int16" and (qin[1] or qout[1]):
            raise ModelExecutionError(f"{ctx.op}: int16 tensors must have zero points of 0")
        return qin, qout

    def reduce(self, ctx, x, axes):
        params = self.quantized_params(ctx)
        if params is not None:
            return _quantized_mean_or_sum(ctx, x, axes, *params, self.compute_sum)
        return self.plain(ctx, x, axes)

    def plain(self, ctx, x, axes):
        return ctx.xp.sum(x, axis=axes, keepdims=True, dtype=x.dtype)


def _quantized_mean_or_sum(ctx: OpContext, x: Any, axes: tuple[int, ...], qin: tuple[float, int],
                           qout: tuple[float, int], compute_sum: bool) -> Any:
    """reference_ops::QuantizedMeanOrSum, or the optimized 4-D spatial mean the official runtime picks."""
    xp = ctx.xp
    count = int(np.prod([x.shape[a] for a in axes]))
    info = np.iinfo(x.dtype)
    total = xp.sum(x.astype(np.int64), axis=axes, keepdims=True)
    if (not compute_sum and x.dtype in (np.int8, np.uint8) and x.ndim == 4 and set(axes) == {1, 2}
            and ctx.options.get("keep_dims", False)):
        # optimized Mean4D: float-derived bias, 1/count folded into the multiplier
        temp = np.float32(np.float32(qin[1]) * np.float32(qin[0])) / np.float32(qout[0])
        temp = temp + np.float32(0.5) if temp > 0 else temp - np.float32(0.5)
        bias = qout[1] - int(temp)
        multiplier, shift = fp.quantize_multiplier(float(np.float32(qin[0]) / (np.float32(count) * np.float32(qout[0]))))
        total = fp.wrap_int32(xp, total)
        # Channels in whole blocks of 16 take the vector loop (NEON rounding), the rest the scalar one;
        # blocks count from the start of each thread's channel range.
        in_vector_loop = _mean4d_vector_channels(x.shape[3], OFFICIAL_NUM_THREADS)
        scalar = fp.multiply_by_quantized_multiplier(xp, total, multiplier, shift)
        if in_vector_loop.any():
            scalar = xp.where(in_vector_loop, _neon_multiply_by_quantized_multiplier(xp, total, multiplier, shift),
                              scalar)
        return xp.clip(scalar + bias, info.min, info.max).astype(x.dtype)
    if compute_sum:
        # optimized QuantizedMeanOrSum (what SUM runs): float32 rescaling, rounded half away from zero
        scale = np.float32(qin[0]) / np.float32(qout[0])
        bias = np.float32(np.float32(-qin[1]) * scale) * np.float32(count)
        # Each float32 step rounded on its own, in float64: XLA would otherwise fuse the multiply-add
        # (and it drops a float64 -> float32 -> float64 round trip, hence reduce_precision).
        product = fp.wrap_int32(xp, total).astype(np.float32).astype(np.float64) * np.float64(scale)
        product = ctx.lax.reduce_precision(product, 8, 23) if ctx.lax is not None else \
            product.astype(np.float32).astype(np.float64)
        real = (product + np.float64(bias)).astype(np.float32)
        y = fp.float_to_int32_like_x86(xp, fp.round_half_away_from_zero(xp, real)) + qout[1]
        return xp.clip(y, info.min, info.max).astype(x.dtype)
    multiplier, shift = fp.quantize_multiplier(float(np.float32(qin[0])) / float(np.float32(qout[0])))
    if count > 0:
        bits = min(count.bit_length() - 1, 32, 31 + shift)
        multiplier = (multiplier << bits) // count
        shift -= bits
    shifted = fp.wrap_int32(xp, total - qin[1] * count)
    y = fp.multiply_by_quantized_multiplier(xp, shifted, multiplier, shift) + qout[1]
    return xp.clip(y, info.min, info.max).astype(x.dtype)


# The thread count of the official runtime whose results we match.  The optimized 4-D MEAN
# splits the channels evenly over min(threads, channels // 8) threads, and which channels
# round the vector way depends on that split, so results differ between thread counts
# (measured: a 48-channel MEAN differs in channel 42 between 1 and 2 threads).  1 is what
# the Python Interpreter uses by default (and the one-op oracle); the shared models'
# reference files were made with 2.
OFFICIAL_NUM_THREADS = 1


def _mean4d_vector_channels(depth: int, threads: int) -> np.ndarray:
    """Which output channels the optimized Mean4D's 16-wide loop handles (MeanWorkerTask split)."""
    threads = max(1, min(threads, depth // 8))
    vector = np.zeros(depth, bool)
    start = 0
    for i in range(threads):
        end = start + (depth - start) // (threads - i)
        vector[start:start + (end - start) // 16 * 16] = True
        start = end
    return vector


def _neon_multiply_by_quantized_multiplier(xp: Any, x: Any, multiplier: int, shift: int) -> Any:
    """MultiplyByQuantizedMultiplier4Rows: vqrdmulh then vrshl, both rounding halves up (not away from zero)."""
    left, right = max(shift, 0), max(-shift, 0)
    x = fp.wrap_int32(xp, x << left)
    high = (2 * x * multiplier + (1 << 31)) >> 32
    return (high + (1 << (right - 1))) >> right if right else high


@register("SUM")
class Sum(_MeanOrSum):
    compute_sum = True


@register("MEAN")
class Mean(_MeanOrSum):
    compute_sum = False

    def plain(self, ctx, x, axes):
        xp = ctx.xp
        count = int(np.prod([x.shape[a] for a in axes]))
        if np.dtype(x.dtype).kind in "iu":
            # Integer means truncate toward zero, like the official kernel's C division.
            if count == 0:
                raise ModelExecutionError(f"{ctx.op}: mean over zero elements")
            total = xp.sum(x, axis=axes, keepdims=True, dtype=np.int64)
            q = xp.abs(total) // count
            return (xp.sign(total) * q).astype(x.dtype)
        if not ctx.official_float_order or x.dtype != np.float32 or count == 0:
            return (xp.sum(x, axis=axes, keepdims=True, dtype=np.float32) / np.float32(count)).astype(x.dtype)
        # correctly rounded, as C divides (XLA CPU would multiply by the reciprocal)
        return fp.divide_f32_exactly(xp, _official_float_mean(ctx, x, axes), np.float32(count))


# The official float MEAN sums in one of two orders (measured bit for bit against the builtin kernels): over the
# last axis alone with more than one output, Eigen's column sum (optimized_ops::MeanGeneral, "MeanLastDim"):
# 4-wide SSE packets from the first 16-byte aligned element, two packet accumulators, reduced (a0+a2)+(a1+a3),
# the unaligned head and the tail added one by one after; otherwise (one output, other axes) reference_ops::Mean,
# a sequential sum in row-major order.  Other orders are an ulp or so away, which alone is harmless; but RMSNorm's
# MEAN feeds hybrid FULLY_CONNECTEDs whose int8 row quantization turns an ulp into a whole quantization step now
# and then (a 576-wide SmolLM, dynamic_int4_block32: 9 % of the largest logit at one decode step).
EIGEN_PACKET = 4
ALIGNMENT_ELEMENTS = 4  # 16 bytes of float32; tensors start 64-byte aligned in the official arena


def _official_float_mean(ctx: OpContext, x: Any, axes: tuple[int, ...]) -> Any:
    """The official float MEAN's sum (see above), keepdims, before the division by the count."""
    xp = ctx.xp
    x = _rounded(ctx, x)
    kept = [a for a in range(x.ndim) if a not in axes]
    outputs = int(np.prod([x.shape[a] for a in kept]))
    rows = xp.reshape(xp.transpose(x, kept + list(axes)), (outputs, -1))
    if axes == (x.ndim - 1,) and outputs > 1:
        total = _eigen_row_sums(ctx, rows)
    else:
        total = _fold_last_axis(ctx, rows, lambda acc, v: acc + v)
    return xp.reshape(total, tuple(1 if a in axes else d for a, d in enumerate(x.shape)))


def _rounded(ctx: OpContext, x: Any) -> Any:
    return rounded_apart(ctx.xp, ctx.lax, x)


def _eigen_row_sums(ctx: OpContext, rows: Any) -> Any:
    """Eigen's vectorized redux of each row of ``rows`` [outputs, n], row j starting at element j * n of a
    16-byte aligned buffer: its aligned start (and so its packets) depends on j * n modulo 4."""
    xp = ctx.xp
    outputs, n = rows.shape
    phases = (np.arange(outputs) * n) % ALIGNMENT_ELEMENTS
    total = None
    for phase in sorted(set(phases.tolist())):
        head = (ALIGNMENT_ELEMENTS - phase) % ALIGNMENT_ELEMENTS
        sums = _eigen_redux(ctx, rows, min(head, n))
        total = sums if total is None else xp.where(xp.asarray(phases == phase), sums, total)
    return total


def _eigen_redux(ctx: OpContext, rows: Any, start: int) -> Any:
    """redux_impl<LinearVectorizedTraversal> over the last axis with packets from ``start``."""
    xp, p = ctx.xp, EIGEN_PACKET
    n = rows.shape[-1]
    size = (n - start) // p * p
    if size == 0:
        return _fold_last_axis(ctx, rows, lambda acc, v: acc + v)
    size2 = (n - start) // (2 * p) * (2 * p)
    packets = xp.reshape(rows[:, start:start + size], (rows.shape[0], size // p, p))
    acc = packets[:, 0]
    if size > p:
        pairs = xp.reshape(packets[:, :size2 // p], (rows.shape[0], size2 // (2 * p), 2 * p))
        both = _fold_middle_axis(ctx, pairs)
        acc = both[:, :p] + both[:, p:]
        if size > size2:
            acc = acc + packets[:, -1]
    total = (acc[:, 0] + acc[:, 2]) + (acc[:, 1] + acc[:, 3])
    for i in list(range(start)) + list(range(start + size, n)):
        total = total + rows[:, i]
    return total


def _fold_middle_axis(ctx: OpContext, values: Any) -> Any:
    """values [rows, steps, width] summed over steps in order (a sequential left fold), [rows, width]."""
    if ctx.lax is None:
        acc = values[:, 0]
        for i in range(1, values.shape[1]):
            acc = acc + values[:, i]
        return acc
    acc, _ = ctx.lax.scan(lambda a, v: (a + v, None), values[:, 0], ctx.xp.moveaxis(values[:, 1:], 1, 0))
    return acc


@register("REDUCE_PROD")
class ReduceProd(_Reduce):
    dtypes = ("float32", "int8", "int16", "int32", "int64")  # no uint8: the official kernel refuses it

    def compute(self, ctx: OpContext, x: Any, axes: Any) -> Any:
        ax = reduction_axes(ctx, axes, x.ndim)
        # with no axes the official kernel is a no-op: the values are copied, not rescaled
        if ax and ctx.input(0).dtype in ("int8", "int16") and _affine(ctx.input(0)) is not None:
            return keep_or_drop(ctx, _quantized_prod(ctx, x, ax), tuple(x.shape), ax)
        return super().compute(ctx, x, axes)

    def reduce(self, ctx, x, axes):
        return ctx.xp.prod(x, axis=axes, keepdims=True, dtype=x.dtype)


def _quantized_prod(ctx: OpContext, x: Any, axes: tuple[int, ...]) -> Any:
    """``QuantizedReduceProd``: the zero-point centred values multiplied in input order, each
    product after the first rescaled by in_scale / out_scale^(1/n) (the int64
    MultiplyByQuantizedMultiplier), and the result once more, so that n rescalings make
    in_scale^n / out_scale."""
    xp = ctx.xp
    (in_scale, in_zp), (out_scale, out_zp) = _affine(ctx.input(0)), _affine(ctx.output(0))
    if x.dtype == np.int16 and (in_zp or out_zp):
        raise ModelExecutionError(f"{ctx.op}: int16 tensors must have zero points of 0")
    count = int(np.prod([x.shape[a] for a in axes]))
    if count == 0:
        raise ModelExecutionError(f"{ctx.op}: a quantized product over zero elements is not defined")
    scaling = float(np.float32(in_scale)) / math.pow(float(np.float32(out_scale)), 1.0 / count)
    multiplier, shift = fp.quantize_multiplier(scaling)
    kept = [a for a in range(x.ndim) if a not in axes]
    # reduced axes last, in row-major order: the order the official loop meets the values
    values = xp.transpose(x.astype(xp.int64) - in_zp, kept + list(axes))
    values = xp.reshape(values, tuple(x.shape[a] for a in kept) + (count,))

    def step(acc: Any, value: Any) -> Any:
        return fp.multiply_by_quantized_multiplier_int64(xp, acc * value, multiplier, shift)

    acc = _fold_last_axis(ctx, values, step)
    info = np.iinfo(x.dtype)
    y = xp.clip(fp.multiply_by_quantized_multiplier_int64(xp, acc, multiplier, shift) + out_zp, info.min, info.max)
    return xp.reshape(y.astype(x.dtype), tuple(1 if a in axes else d for a, d in enumerate(x.shape)))


def _fold_last_axis(ctx: OpContext, values: Any, step: Any) -> Any:
    """A sequential left fold over the last axis, starting from its first entry."""
    xp = ctx.xp
    if ctx.lax is None:
        acc = values[..., 0]
        for i in range(1, values.shape[-1]):
            acc = step(acc, values[..., i])
        return acc
    rest = xp.moveaxis(values[..., 1:], -1, 0)
    acc, _ = ctx.lax.scan(lambda a, v: (step(a, v), None), values[..., 0], rest)
    return acc


class _Extremum(_Reduce):
    dtypes = ("float32", "int8", "uint8", "int16", "int32", "int64")
    take_max = True

    def reduce(self, ctx, x, axes):
        xp = ctx.xp
        dtype = np.dtype(x.dtype)
        if dtype.name in QUANTIZED and _affine(ctx.input(0)) != _affine(ctx.output(0)):
            raise ModelExecutionError(f"{ctx.op}: quantized input and output need the same scale and zero point")
        if dtype.name == "int16" and (_affine(ctx.input(0)) or (0.0, 0))[1]:
            raise ModelExecutionError(f"{ctx.op}: int16 tensors must have zero points of 0")
        if any(x.shape[a] == 0 for a in axes):
            # The official kernels start from the type's lowest (or highest) value.
            info = np.finfo(dtype) if dtype.kind == "f" else np.iinfo(dtype)
            if dtype.kind == "f":
                fill = -np.inf if self.take_max else np.inf
            else:
                fill = info.min if self.take_max else info.max
            shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
            return xp.full(shape, fill, dtype)
        return (xp.max if self.take_max else xp.min)(x, axis=axes, keepdims=True)


@register("REDUCE_MAX")
class ReduceMax(_Extremum):
    take_max = True


@register("REDUCE_MIN")
class ReduceMin(_Extremum):
    take_max = False


@register("REDUCE_ANY")
class ReduceAny(_Reduce):
    dtypes = ("bool",)

    def reduce(self, ctx, x, axes):
        return ctx.xp.any(x, axis=axes, keepdims=True)


@register("REDUCE_ALL")
class ReduceAll(_Reduce):
    dtypes = ("bool",)

    def reduce(self, ctx, x, axes):
        return ctx.xp.all(x, axis=axes, keepdims=True)


class _ArgExtremum(Op):
    dtypes = ("float32", "int8", "uint8", "int32", "bool")
    take_max = True

    def compute(self, ctx: OpContext, x: Any, axis: Any) -> Any:
        values = static_ints(ctx, axis, "the axis")
        if len(values) != 1:
            raise ModelExecutionError(f"{ctx.op}: axis must hold one value, got {values}")
        a = normalize_axis(ctx, values[0], x.ndim)
        if x.shape[a] == 0:
            raise ModelExecutionError(f"{ctx.op}: cannot take the arg extremum of an empty axis")
        xp = ctx.xp
        # Ties go to the first index, as in the official kernel's strict comparison.
        index = xp.argmax(x, axis=a) if self.take_max else xp.argmin(x, axis=a)
        return index.astype(output_dtype(ctx))


@register("ARG_MAX")
class ArgMax(_ArgExtremum):
    take_max = True


@register("ARG_MIN")
class ArgMin(_ArgExtremum):
    take_max = False


@register("CUMSUM")
class Cumsum(Op):
    dtypes = ("float32", "int32", "int64")

    def compute(self, ctx: OpContext, x: Any, axis: Any) -> Any:
        values = static_ints(ctx, axis, "the axis")
        if len(values) != 1:
            raise ModelExecutionError(f"{ctx.op}: axis must hold one value, got {values}")
        a = normalize_axis(ctx, values[0], x.ndim)
        xp = ctx.xp
        reverse = bool(ctx.options.get("reverse", False))
        y = xp.flip(x, a) if reverse else x
        y = xp.cumsum(y, axis=a, dtype=x.dtype)
        if ctx.options.get("exclusive", False):
            # Shift by one along the axis, starting from zero.
            pad = [(0, 0)] * x.ndim
            pad[a] = (1, 0)
            y = xp.pad(y, pad)[(slice(None),) * a + (slice(0, x.shape[a]),)]
        return xp.flip(y, a) if reverse else y


@register("TOPK_V2")
class TopKV2(Op):
    dtypes = ("float32", "int8", "uint8", "int16", "int32", "int64")

    def _k(self, ctx: OpContext, x: Any, k: Any) -> int:
        values = static_ints(ctx, k, "k")
        if len(values) != 1 or x.ndim < 1 or not 0 <= values[0] <= x.shape[-1]:
            raise ModelExecutionError(f"{ctx.op}: k={values} must be one value in [0, {x.shape[-1] if x.ndim else 0}]")
        return values[0]

    def reference(self, ctx: OpContext, x: np.ndarray, k: np.ndarray) -> list[np.ndarray]:
        kk = self._k(ctx, x, k)
        # Larger values first; among equal values the lower index first.
        positions = np.broadcast_to(np.arange(x.shape[-1]), x.shape)
        order = np.lexsort((positions, _descending_key(x)), axis=-1)[..., :kk]
        return [np.take_along_axis(x, order, axis=-1), order.astype(output_dtype(ctx, 1))]

    def lower(self, ctx: OpContext, x: Any, k: Any) -> list[Any]:
        kk = self._k(ctx, x, k)
        values, indices = ctx.lax.top_k(x, kk)
        return [values, indices.astype(output_dtype(ctx, 1))]


def _descending_key(x: np.ndarray) -> np.ndarray:
    """A key whose ascending order is x's descending order, without integer overflow."""
    if x.dtype.kind == "f":
        return -x.astype(np.float64)
    return -x.astype(np.int64) if x.dtype != np.uint64 else ~x
