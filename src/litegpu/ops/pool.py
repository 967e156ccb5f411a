"""MAX_POOL_2D, AVERAGE_POOL_2D, L2_POOL_2D on NHWC float32, with fused activations;
MAX and AVERAGE also on int8 / uint8 / int16 (the stored integers, no rescaling).

Windows never read padding: the max is over the in-bounds pixels, the average
and the L2 mean divide by the number of in-bounds pixels of each window (not
by the filter size), as in the official kernels.  The reference walks the
filter taps; the XLA lowering is ``lax.reduce_window`` with a static table of
per-window pixel counts.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ModelExecutionError
from . import _fixedpoint as fp
from . import _quantized as qz
from ._common import explicit_padding, fused_activation
from .registry import Op, OpContext, register


def _pool_geometry(ctx: OpContext, x_shape: tuple) -> tuple:
    if len(x_shape) != 4:
        raise ModelExecutionError(f"{ctx.op}: input must be NHWC (rank 4), got shape {tuple(x_shape)}")
    o = ctx.options
    window = (o.filter_height, o.filter_width)
    strides = (o.stride_h, o.stride_w)
    if min(window) <= 0 or min(strides) <= 0:
        raise ModelExecutionError(f"{ctx.op}: filter {window} and strides {strides} must be positive")
    pads = explicit_padding(o.padding, (x_shape[1], x_shape[2]), window, strides)
    out_hw = tuple((x_shape[1 + a] + sum(pads[a]) - window[a]) // strides[a] + 1 for a in range(2))
    if min(out_hw) <= 0:
        raise ModelExecutionError(f"{ctx.op}: a {window} window does not fit the {x_shape[1:3]} input "
                                  f"with {o.padding} padding")
    return window, strides, pads, out_hw


def _taps(x: np.ndarray, window: tuple, strides: tuple, out_hw: tuple) -> list[np.ndarray]:
    """Every filter tap's view of the (already padded) input, one per window position."""
    (fh, fw), (sh, sw), (oh, ow) = window, strides, out_hw
    return [x[:, i:i + (oh - 1) * sh + 1:sh, j:j + (ow - 1) * sw + 1:sw, :] for i in range(fh) for j in range(fw)]


def _window_counts(x_shape: tuple, window: tuple, strides: tuple, pads: list, out_hw: tuple) -> np.ndarray:
    """In-bounds pixels of each window, shaped [1, OH, OW, 1]."""
    ones = np.pad(np.ones((1, x_shape[1], x_shape[2], 1), np.float32), [(0, 0), *pads, (0, 0)])
    return np.sum(_taps(ones, window, strides, out_hw), axis=0)


class _Pool(Op):
    dtypes = ("float32",)

    def reference(self, ctx: OpContext, x: np.ndarray) -> np.ndarray:
        window, strides, pads, out_hw = _pool_geometry(ctx, x.shape)
        if x.dtype.kind in "iu":
            y = self.pool_taps_quantized(x, window, strides, pads, out_hw)
            return np.clip(y, *_quantized_activation_range(ctx))
        y = self.pool_taps(x.astype(np.float32), window, strides, pads, out_hw)
        return fused_activation(np, y, ctx.options.fused_activation_function)

    def lower(self, ctx: OpContext, x: Any) -> Any:
        window, strides, pads, out_hw = _pool_geometry(ctx, x.shape)
        if np.dtype(x.dtype).kind in "iu":
            y = self.pool_xla_quantized(ctx, x, window, strides, pads, out_hw)
            return ctx.xp.clip(y, *_quantized_activation_range(ctx))
        y = self.pool_xla(ctx, x, window, strides, pads, out_hw)
        return fused_activation(ctx.xp, y, ctx.options.fused_activation_function)

    def pool_taps(self, x, window, strides, pads, out_hw):
        raise NotImplementedError

    def pool_xla(self, ctx, x, window, strides, pads, out_hw):
        raise NotImplementedError

    def pool_taps_quantized(self, x, window, strides, pads, out_hw):
        raise NotImplementedError

    def pool_xla_quantized(self, ctx, x, window, strides, pads, out_hw):
        raise NotImplementedError


QUANTIZED = ("int8", "uint8", "int16")


# Fused TANH / SIGN_BIT on a pool compute nothing, as in the official kernels (their clamp range ignores them).
def _quantized_activation_range(ctx: OpContext) -> tuple[int, int]:
    """The fused activation's bounds with the output's quantization.  The official kernels pool the
    stored integers without rescaling (they only debug-check that input and output share scale and
    zero point), so neither is used elsewhere."""
    x, y = ctx.input(0), ctx.output(0)
    if x.dtype != y.dtype:
        raise ModelExecutionError(f"{ctx.op}: the output type {y.dtype} must be the input type {x.dtype}")
    scale, zero_point = qz.scale_and_zero_point(ctx, y, "output")
    return qz.activation_range(ctx.options.fused_activation_function, scale, zero_point, y.dtype)


def _rounded_average(xp: Any, total: Any, counts: Any) -> Any:
    """The official integer average: C division of ``total -/+ count / 2``, which rounds half away
    from zero (int8: optimized_integer_ops, uint8: optimized_ops, int16: reference_integer_ops)."""
    half = counts // 2
    return xp.where(total > 0, (total + half) // counts, -((half - total) // counts))


def _window_sum(lax: Any, x: Any, window: tuple, strides: tuple, pads: list) -> Any:
    return lax.reduce_window(x, np.array(0, x.dtype), lax.add, (1, *window, 1), (1, *strides, 1),
                             [(0, 0), *pads, (0, 0)])


# Windows of more taps than this are summed in a loop: unrolled, a global pool of a 128x128 map (MediaPipe's
# selfie segmentation) is 16,384 adds in one XLA program, whose compiler then overflows its stack.
IN_ORDER_UNROLLED_TAPS = 64


def _window_sum_in_order(xp: Any, lax: Any, x: Any, window: tuple, strides: tuple, pads: list, out_hw: tuple) -> Any:
    """Each window's sum as the builtin float kernel adds it: from zero, its pixels in row-major order (the
    padding's zeros change nothing).  XLA's reduce_window adds them in an order of its own, an ulp away."""
    (fh, fw), (sh, sw), (oh, ow) = window, strides, out_hw
    padded = xp.pad(x, [(0, 0), *pads, (0, 0)])
    total = xp.zeros((x.shape[0], oh, ow, x.shape[3]), x.dtype)
    if fh * fw <= IN_ORDER_UNROLLED_TAPS:
        for tap in _taps(padded, window, strides, out_hw):
            total = total + tap
        return total
    span = (x.shape[0], (oh - 1) * sh + 1, (ow - 1) * sw + 1, x.shape[3])

    def add_tap(k: Any, acc: Any) -> Any:
        view = lax.dynamic_slice(padded, (0, k // fw, k % fw, 0), span)
        return acc + view[:, ::sh, ::sw, :]

    return lax.fori_loop(0, fh * fw, add_tap, total)


@register("MAX_POOL_2D")
class MaxPool2D(_Pool):
    dtypes = ("float32",) + QUANTIZED

    def pool_taps(self, x, window, strides, pads, out_hw):
        padded = np.pad(x, [(0, 0), *pads, (0, 0)], constant_values=-np.inf)
        return np.max(_taps(padded, window, strides, out_hw), axis=0)

    def pool_xla(self, ctx, x, window, strides, pads, out_hw):
        lax = ctx.lax
        return lax.reduce_window(x, np.array(-np.inf, x.dtype), lax.max, (1, *window, 1), (1, *strides, 1),
                                 [(0, 0), *pads, (0, 0)])

    def pool_taps_quantized(self, x, window, strides, pads, out_hw):
        padded = np.pad(x, [(0, 0), *pads, (0, 0)], constant_values=np.iinfo(x.dtype).min)
        return np.max(_taps(padded, window, strides, out_hw), axis=0)

    def pool_xla_quantized(self, ctx, x, window, strides, pads, out_hw):
        lax = ctx.lax
        lowest = np.array(np.iinfo(np.dtype(x.dtype)).min, x.dtype)
        return lax.reduce_window(x, lowest, lax.max, (1, *window, 1), (1, *strides, 1), [(0, 0), *pads, (0, 0)])


@register("AVERAGE_POOL_2D")
class AveragePool2D(_Pool):
    dtypes = ("float32",) + QUANTIZED

    def pool_taps(self, x, window, strides, pads, out_hw):
        padded = np.pad(x, [(0, 0), *pads, (0, 0)])
        total = np.sum(_taps(padded, window, strides, out_hw), axis=0)
        return total / _window_counts(x.shape, window, strides, pads, out_hw)

    def pool_xla(self, ctx, x, window, strides, pads, out_hw):
        counts = _window_counts(x.shape, window, strides, pads, out_hw).astype(x.dtype)
        if ctx.official_float_order:  # XLA CPU's float32 division is an ulp off in about a third of cases
            return fp.divide_f32_exactly(ctx.xp, _window_sum_in_order(ctx.xp, ctx.lax, x, window, strides, pads, out_hw),
                                         counts)
        return _window_sum(ctx.lax, x, window, strides, pads) / counts

    def pool_taps_quantized(self, x, window, strides, pads, out_hw):
        padded = np.pad(x.astype(np.int64), [(0, 0), *pads, (0, 0)])
        total = np.sum(_taps(padded, window, strides, out_hw), axis=0)
        return _rounded_average(np, total, _window_counts(x.shape, window, strides, pads, out_hw).astype(np.int64))

    def pool_xla_quantized(self, ctx, x, window, strides, pads, out_hw):
        counts = _window_counts(x.shape, window, strides, pads, out_hw).astype(np.int32)
        total = _window_sum(ctx.lax, x.astype(ctx.xp.int32), window, strides, pads)
        return _rounded_average(ctx.xp, total, counts)


@register("L2_POOL_2D")
class L2Pool2D(_Pool):
    def pool_taps(self, x, window, strides, pads, out_hw):
        padded = np.pad(x * x, [(0, 0), *pads, (0, 0)])
        total = np.sum(_taps(padded, window, strides, out_hw), axis=0)
        return np.sqrt(total / _window_counts(x.shape, window, strides, pads, out_hw))

    def pool_xla(self, ctx, x, window, strides, pads, out_hw):
        counts = _window_counts(x.shape, window, strides, pads, out_hw).astype(x.dtype)
        return ctx.xp.sqrt(_window_sum(ctx.lax, x * x, window, strides, pads) / counts)
