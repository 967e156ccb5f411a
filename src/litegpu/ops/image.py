"""Image resampling and block rearrangement ops on NHWC tensors.

RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR compute their source indices and
weights ahead of time in float32 with the official kernels' index math
(``align_corners`` scales by (in-1)/(out-1); ``half_pixel_centers`` samples
pixel centres, and nearest-neighbour with ``align_corners`` rounds half away
from zero instead of flooring), then gather; the tables are static, so the
same body serves numpy and XLA.  DEPTH_TO_SPACE / SPACE_TO_DEPTH and
BATCH_TO_SPACE_ND / SPACE_TO_BATCH_ND are reshapes and transposes.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import ModelExecutionError
from . import _fixedpoint as fp
from ._common import float32_steps, rounded_apart
from .registry import Op, OpContext, register
from .shape import (
    ANY_DTYPE,
    QUANTIZED_DTYPES,
    legacy_quant_params,
    require_int16_zero_points,
    require_same_quantization,
)

# The types the official DEPTH_TO_SPACE / SPACE_TO_DEPTH accept (no int16, float16, bool).
BLOCK_DTYPES = ("float32", "int8", "uint8", "int32", "int64")


def _require_rank(ctx: OpContext, x: Any, rank: int) -> None:
    if x.ndim != rank:
        raise ModelExecutionError(f"{ctx.op}: input must have rank {rank}, got shape {tuple(x.shape)}")


def _resize_size(ctx: OpContext, x: Any, size: Any) -> tuple[int, int]:
    _require_rank(ctx, x, 4)
    hw = ctx.static(size).reshape(-1)
    if hw.size != 2 or min(hw) <= 0:
        raise ModelExecutionError(f"{ctx.op}: size must be two positive values [height, width], got {hw.tolist()}")
    o = ctx.options
    if o.align_corners and o.half_pixel_centers:
        raise ModelExecutionError(f"{ctx.op}: align_corners and half_pixel_centers cannot both be set")
    return int(hw[0]), int(hw[1])


def _resize_scale(in_size: int, out_size: int, align_corners: bool) -> np.float32:
    if align_corners and out_size > 1:
        return np.float32(in_size - 1) / np.float32(out_size - 1)
    return np.float32(in_size) / np.float32(out_size)


def bilinear_taps(in_size: int, out_size: int, align_corners: bool,
                  half_pixel_centers: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lower index, upper index, weight of the upper) for each output position on one axis."""
    scale = _resize_scale(in_size, out_size, align_corners)
    pos = np.arange(out_size, dtype=np.float32)
    if half_pixel_centers:
        scaled = (pos + np.float32(0.5)) * scale - np.float32(0.5)
    else:
        scaled = pos * scale
    lower = np.maximum(np.floor(scaled).astype(np.int64), 0)
    upper = np.minimum(np.ceil(scaled).astype(np.int64), in_size - 1)
    # Left of the first pixel centre ``scaled`` is negative while lower is 0: the
    # weights become 1-w and w with w < 0, still summing to one, as in the kernel.
    return lower, upper, (scaled - lower.astype(np.float32)).astype(np.float32)


def nearest_index(in_size: int, out_size: int, align_corners: bool, half_pixel_centers: bool) -> np.ndarray:
    scale = _resize_scale(in_size, out_size, align_corners)
    offset = np.float32(0.5) if half_pixel_centers else np.float32(0.0)
    scaled = (np.arange(out_size, dtype=np.float32) + offset) * scale
    # TfLiteRound rounds half away from zero; ``scaled`` is never negative here
    index = np.floor(scaled + np.float32(0.5)) if align_corners else np.floor(scaled)
    index = np.minimum(index.astype(np.int64), in_size - 1)
    return np.maximum(index, 0) if half_pixel_centers else index


@register("RESIZE_BILINEAR")
class ResizeBilinear(Op):
    dtypes = ("float32", "int8", "uint8", "int16")

    def compute(self, ctx: OpContext, x: Any, size: Any) -> Any:
        out_h, out_w = _resize_size(ctx, x, size)
        dtype = ctx.input(0).dtype
        if dtype == "uint8":
            return _bilinear_uint8(ctx, x, out_h, out_w)
        if dtype in ("int8", "int16"):
            return _bilinear_integer(ctx, x, out_h, out_w)
        if ctx.builtin_kernels:
            return _bilinear_float_as_the_builtin_kernel(ctx, x, out_h, out_w)
        xp = ctx.xp
        o = ctx.options
        y0, y1, fy = bilinear_taps(x.shape[1], out_h, o.align_corners, o.half_pixel_centers)
        x0, x1, fx = bilinear_taps(x.shape[2], out_w, o.align_corners, o.half_pixel_centers)
        fy = fy.reshape(1, -1, 1, 1)
        fx = fx.reshape(1, 1, -1, 1)
        top, bottom = xp.take(x, y0, axis=1), xp.take(x, y1, axis=1)
        # the kernel's sum, term by term
        return (xp.take(top, x0, axis=2) * (1 - fy) * (1 - fx) + xp.take(bottom, x0, axis=2) * fy * (1 - fx)
                + xp.take(top, x1, axis=2) * (1 - fy) * fx + xp.take(bottom, x1, axis=2) * fy * fx)


def _bilinear_float_as_the_builtin_kernel(ctx: OpContext, x: Any, out_h: int, out_w: int) -> Any:
    """The official optimized float kernel, which the builtin kernels run (``CpuKernelMode.BUILTIN``): a 2x
    upscale without align_corners or half_pixel_centers as ``ResizeBilinear2x2`` (means of neighbours), anything
    else as ``ResizeBilinearGeneric``: the four products with float32 weights (``(1 - fy) * (1 - fx)`` ...)
    added to the output in the order y0x0, y0x1, y1x0, y1x1, each rounded.  The reference kernel (the numpy
    reference) multiplies the input by each weight in turn and adds y1x0 second: an ulp or so apart."""
    xp, lax, o = ctx.xp, ctx.lax, ctx.options
    in_h, in_w = x.shape[1], x.shape[2]
    if not o.align_corners and not o.half_pixel_centers and (out_h, out_w) == (2 * in_h, 2 * in_w):
        return _bilinear_2x2(xp, lax, x)
    y0, y1, fy = bilinear_taps(in_h, out_h, o.align_corners, o.half_pixel_centers)
    x0, x1, fx = bilinear_taps(in_w, out_w, o.align_corners, o.half_pixel_centers)
    one = np.float32(1)
    wy, wx = (one - fy, fy), (one - fx, fx)
    rows = (xp.take(x, y0, axis=1), xp.take(x, y1, axis=1))
    total = None
    for r, c in ((0, 0), (0, 1), (1, 0), (1, 1)):
        weight = np.multiply.outer(wy[r], wx[c]).astype(np.float32).reshape(1, out_h, out_w, 1)
        term = rounded_apart(xp, lax, xp.take(rows[r], (x0, x1)[c], axis=2) * weight)
        total = term if total is None else total + term
    return total


def _bilinear_2x2(xp: Any, lax: Any, x: Any) -> Any:
    """``ResizeBilinear2x2``: each input pixel ``a`` with its right, lower and lower-right neighbours ``b``,
    ``c``, ``d`` (itself past the last row or column) gives the 2x2 outputs ``a``, ``(a + b) / 2``,
    ``(a + c) / 2`` and ``((a + c) / 2 + (b + d) / 2) / 2``."""
    n, h, w, depth = x.shape
    right = xp.take(x, np.minimum(np.arange(w) + 1, w - 1), axis=2)
    below, below_right = (xp.take(v, np.minimum(np.arange(h) + 1, h - 1), axis=1) for v in (x, right))
    half = np.float32(0.5)
    top_right, bottom_left = (x + right) * half, (x + below) * half
    bottom_right = (bottom_left + rounded_apart(xp, lax, (right + below_right) * half)) * half
    top = xp.stack([x, top_right], axis=3).reshape(n, h, 2 * w, depth)
    bottom = xp.stack([bottom_left, bottom_right], axis=3).reshape(n, h, 2 * w, depth)
    return xp.stack([top, bottom], axis=2).reshape(n, 2 * h, 2 * w, depth)


def _bilinear_uint8(ctx: OpContext, x: Any, out_h: int, out_w: int) -> Any:
    """The official optimized uint8 kernel (``ResizeBilinearGenericSmallChannel``): the four
    products with float32 weights summed left to right in float32, plus 0.5, truncated.
    (Its 8x half-pixel fast path computes the same values exactly in 8.8 fixed point.)"""
    xp, o = ctx.xp, ctx.options
    y0, y1, fy = bilinear_taps(x.shape[1], out_h, o.align_corners, o.half_pixel_centers)
    x0, x1, fx = bilinear_taps(x.shape[2], out_w, o.align_corners, o.half_pixel_centers)
    one = np.float32(1)
    wy = [(one - fy).reshape(1, -1, 1, 1), fy.reshape(1, -1, 1, 1)]
    wx = [(one - fx).reshape(1, 1, -1, 1), fx.reshape(1, 1, -1, 1)]
    wide = x.astype(xp.float64)
    rows = [xp.take(wide, y0, axis=1), xp.take(wide, y1, axis=1)]
    total = None
    for r, c in ((0, 0), (0, 1), (1, 0), (1, 1)):  # the kernel's order: y0x0, y0x1, y1x0, y1x1
        weight = (wy[r] * wx[c]).astype(np.float32).astype(np.float64)
        term = float32_steps(ctx.lax, xp.take(rows[r], (x0, x1)[c], axis=2) * weight)
        total = term if total is None else float32_steps(ctx.lax, total + term)
    total = float32_steps(ctx.lax, total + 0.5)
    return xp.clip(xp.trunc(total), 0, 255).astype(x.dtype)


def _integer_taps(in_size: int, out_size: int, align_corners: bool,
                  half_pixel_centers: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``ComputeInterpolationValuesInteger``: positions in 1/1024ths of a pixel from a rounded
    10-bit scale, bounds by C (truncating) division; returns (lower, upper, 1024 * fraction)."""
    if align_corners and out_size > 1:
        scale = ((1 << 10) * (in_size - 1) + (out_size - 1) // 2) // (out_size - 1)
    else:
        scale = ((1 << 10) * in_size + out_size // 2) // out_size
    pos = np.arange(out_size, dtype=np.int64) * scale
    if half_pixel_centers:
        pos = pos + scale // 2 - (1 << 9)
    lower = np.maximum(fp.truncating_divide(np, pos, 1 << 10), 0)
    upper = np.minimum(fp.truncating_divide(np, pos + (1 << 10) - 1, 1 << 10), in_size - 1)
    return lower, upper, pos - (1 << 10) * lower


def _bilinear_integer(ctx: OpContext, x: Any, out_h: int, out_w: int) -> Any:
    """``reference_ops::ResizeBilinearInteger`` (int8 and int16): 10-bit weights, a 20-bit
    fraction in int64, rounded half away from zero."""
    xp, o = ctx.xp, ctx.options
    y0, y1, fy = _integer_taps(x.shape[1], out_h, o.align_corners, o.half_pixel_centers)
    x0, x1, fx = _integer_taps(x.shape[2], out_w, o.align_corners, o.half_pixel_centers)
    wy = [((1 << 10) - fy).reshape(1, -1, 1, 1), fy.reshape(1, -1, 1, 1)]
    wx = [((1 << 10) - fx).reshape(1, 1, -1, 1), fx.reshape(1, 1, -1, 1)]
    wide = x.astype(xp.int64)
    rows = [xp.take(wide, y0, axis=1), xp.take(wide, y1, axis=1)]
    total = sum(xp.take(rows[r], (x0, x1)[c], axis=2) * wy[r] * wx[c] for r in (0, 1) for c in (0, 1))
    rounded = total + xp.where(total > 0, 1 << 19, -(1 << 19))
    magnitude = xp.abs(rounded) >> 20
    return xp.where(rounded < 0, -magnitude, magnitude).astype(x.dtype)


@register("RESIZE_NEAREST_NEIGHBOR")
class ResizeNearestNeighbor(Op):
    dtypes = ("float32", "float16", "int8", "uint8", "int16", "int32", "bool")

    def compute(self, ctx: OpContext, x: Any, size: Any) -> Any:
        out_h, out_w = _resize_size(ctx, x, size)
        o = ctx.options
        index = nearest_index
        if np.dtype(x.dtype).itemsize == 1 and not o.align_corners and not o.half_pixel_centers:
            index = _nearest_index_16_16
        rows = index(x.shape[1], out_h, o.align_corners, o.half_pixel_centers)
        cols = index(x.shape[2], out_w, o.align_corners, o.half_pixel_centers)
        return ctx.xp.take(ctx.xp.take(x, rows, axis=1), cols, axis=2)


def _nearest_index_16_16(in_size: int, out_size: int, *_: Any) -> np.ndarray:
    """The official optimized kernel, which every 8-bit type takes without align_corners or
    half_pixel_centers: a 16.16 fixed-point scale (in << 16) / out + 1, which can pick a
    different pixel than the float scale does."""
    scale = (in_size << 16) // out_size + 1
    return np.minimum((np.arange(out_size, dtype=np.int64) * scale) >> 16, in_size - 1)


def _block_size(ctx: OpContext) -> int:
    block = int(ctx.options.block_size)
    if block < 1:
        raise ModelExecutionError(f"{ctx.op}: block_size must be positive, got {block}")
    return block


@register("DEPTH_TO_SPACE")
class DepthToSpace(Op):
    dtypes = BLOCK_DTYPES

    def compute(self, ctx: OpContext, x: Any) -> Any:
        _require_rank(ctx, x, 4)
        bs = _block_size(ctx)
        n, h, w, c = x.shape
        if c % (bs * bs):
            raise ModelExecutionError(f"{ctx.op}: depth {c} is not a multiple of block_size^2 = {bs * bs}")
        depth = c // (bs * bs)
        # channel (dy * bs + dx) * depth + k goes to pixel (h * bs + dy, w * bs + dx), channel k
        y = x.reshape(n, h, w, bs, bs, depth).transpose(0, 1, 3, 2, 4, 5)
        return y.reshape(n, h * bs, w * bs, depth)


@register("SPACE_TO_DEPTH")
class SpaceToDepth(Op):
    dtypes = BLOCK_DTYPES

    def compute(self, ctx: OpContext, x: Any) -> Any:
        _require_rank(ctx, x, 4)
        bs = _block_size(ctx)
        n, h, w, c = x.shape
        if h % bs or w % bs:
            raise ModelExecutionError(f"{ctx.op}: height {h} and width {w} must be multiples of block_size {bs}")
        y = x.reshape(n, h // bs, bs, w // bs, bs, c).transpose(0, 1, 3, 2, 4, 5)
        return y.reshape(n, h // bs, w // bs, bs * bs * c)


def _block_shape_and_pairs(ctx: OpContext, x: Any, block: Any, pairs: Any, what: str) -> tuple[list, np.ndarray]:
    block = [int(b) for b in ctx.static(block).reshape(-1)]
    pairs = ctx.static(pairs).astype(np.int64)
    m = len(block)
    if x.ndim < m + 1 or pairs.shape != (m, 2) or min(block, default=1) < 1 or (pairs < 0).any():
        raise ModelExecutionError(f"{ctx.op}: input {tuple(x.shape)} needs a positive block_shape of at most "
                                  f"rank-1 values and non-negative {what} of shape [{m}, 2]; got {block} "
                                  f"and {pairs.tolist()}")
    return block, pairs


def _require_unchanged_quantization(ctx: OpContext) -> None:
    """The official SPACE_TO_BATCH_ND / BATCH_TO_SPACE_ND Prepare: quantized input and
    output share scale and zero point, and int16 is symmetric."""
    require_same_quantization(ctx, dtypes=QUANTIZED_DTYPES)
    require_int16_zero_points(ctx, [ctx.input(0), ctx.output(0)])


@register("SPACE_TO_BATCH_ND")
class SpaceToBatchND(Op):
    dtypes = ANY_DTYPE

    def compute(self, ctx: OpContext, x: Any, block_shape: Any, paddings: Any) -> Any:
        block, pads = _block_shape_and_pairs(ctx, x, block_shape, paddings, "paddings")
        _require_unchanged_quantization(ctx)
        m, n = len(block), x.shape[0]
        rest = tuple(x.shape[1 + m:])
        # quantized tensors pad with the output's zero point (the quantized 0.0)
        pad_value = np.asarray(legacy_quant_params(ctx.output(0))[1]).astype(x.dtype)
        x = ctx.xp.pad(x, [(0, 0)] + [tuple(p) for p in pads.tolist()] + [(0, 0)] * len(rest),
                       constant_values=pad_value)
        spatial = x.shape[1:1 + m]
        if any(s % b for s, b in zip(spatial, block)):
            raise ModelExecutionError(f"{ctx.op}: padded spatial dims {tuple(spatial)} are not multiples of "
                                      f"block_shape {block}")
        split = [n] + [d for s, b in zip(spatial, block) for d in (s // b, b)] + list(rest)
        # block offsets become the outer part of the new batch: [b1..bm, N, s1/b1..sm/bm, rest]
        order = [2 + 2 * i for i in range(m)] + [0] + [1 + 2 * i for i in range(m)] + \
            list(range(1 + 2 * m, 1 + 2 * m + len(rest)))
        y = x.reshape(split).transpose(order)
        return y.reshape((n * math.prod(block), *(s // b for s, b in zip(spatial, block)), *rest))


@register("BATCH_TO_SPACE_ND")
class BatchToSpaceND(Op):
    dtypes = ANY_DTYPE

    def compute(self, ctx: OpContext, x: Any, block_shape: Any, crops: Any) -> Any:
        block, crops = _block_shape_and_pairs(ctx, x, block_shape, crops, "crops")
        _require_unchanged_quantization(ctx)
        m, blocks = len(block), math.prod(block)
        if x.shape[0] % blocks:
            raise ModelExecutionError(f"{ctx.op}: batch {x.shape[0]} is not a multiple of the block size "
                                      f"{blocks} (block_shape {block})")
        n = x.shape[0] // blocks
        spatial, rest = tuple(x.shape[1:1 + m]), tuple(x.shape[1 + m:])
        y = x.reshape((*block, n, *spatial, *rest))
        # [N, s1, b1, ..., sm, bm, rest]
        order = [m] + [d for i in range(m) for d in (m + 1 + i, i)] + list(range(2 * m + 1, 2 * m + 1 + len(rest)))
        y = y.transpose(order).reshape((n, *(s * b for s, b in zip(spatial, block)), *rest))
        full = [s * b for s, b in zip(spatial, block)]
        if any(lo + hi > f for (lo, hi), f in zip(crops.tolist(), full)):
            raise ModelExecutionError(f"{ctx.op}: crops {crops.tolist()} exceed the spatial dims {full}")
        index = (slice(None),) + tuple(slice(lo, f - hi) for (lo, hi), f in zip(crops.tolist(), full))
        return y[index]
