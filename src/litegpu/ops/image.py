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
from .registry import Op, OpContext, register

# Pure data movement: exact for every element type.
MOVEMENT_DTYPES = ("float32", "int32", "int64")


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
    dtypes = ("float32",)

    def compute(self, ctx: OpContext, x: Any, size: Any) -> Any:
        xp = ctx.xp
        out_h, out_w = _resize_size(ctx, x, size)
        o = ctx.options
        y0, y1, fy = bilinear_taps(x.shape[1], out_h, o.align_corners, o.half_pixel_centers)
        x0, x1, fx = bilinear_taps(x.shape[2], out_w, o.align_corners, o.half_pixel_centers)
        fy = fy.reshape(1, -1, 1, 1)
        fx = fx.reshape(1, 1, -1, 1)
        top, bottom = xp.take(x, y0, axis=1), xp.take(x, y1, axis=1)
        # the kernel's sum, term by term
        return (xp.take(top, x0, axis=2) * (1 - fy) * (1 - fx) + xp.take(bottom, x0, axis=2) * fy * (1 - fx)
                + xp.take(top, x1, axis=2) * (1 - fy) * fx + xp.take(bottom, x1, axis=2) * fy * fx)


@register("RESIZE_NEAREST_NEIGHBOR")
class ResizeNearestNeighbor(Op):
    dtypes = MOVEMENT_DTYPES

    def compute(self, ctx: OpContext, x: Any, size: Any) -> Any:
        out_h, out_w = _resize_size(ctx, x, size)
        o = ctx.options
        rows = nearest_index(x.shape[1], out_h, o.align_corners, o.half_pixel_centers)
        cols = nearest_index(x.shape[2], out_w, o.align_corners, o.half_pixel_centers)
        return ctx.xp.take(ctx.xp.take(x, rows, axis=1), cols, axis=2)


def _block_size(ctx: OpContext) -> int:
    block = int(ctx.options.block_size)
    if block < 1:
        raise ModelExecutionError(f"{ctx.op}: block_size must be positive, got {block}")
    return block


@register("DEPTH_TO_SPACE")
class DepthToSpace(Op):
    dtypes = MOVEMENT_DTYPES

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
    dtypes = MOVEMENT_DTYPES

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


@register("SPACE_TO_BATCH_ND")
class SpaceToBatchND(Op):
    dtypes = MOVEMENT_DTYPES

    def compute(self, ctx: OpContext, x: Any, block_shape: Any, paddings: Any) -> Any:
        block, pads = _block_shape_and_pairs(ctx, x, block_shape, paddings, "paddings")
        m, n = len(block), x.shape[0]
        rest = tuple(x.shape[1 + m:])
        x = ctx.xp.pad(x, [(0, 0)] + [tuple(p) for p in pads.tolist()] + [(0, 0)] * len(rest))
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
    dtypes = MOVEMENT_DTYPES

    def compute(self, ctx: OpContext, x: Any, block_shape: Any, crops: Any) -> Any:
        block, crops = _block_shape_and_pairs(ctx, x, block_shape, crops, "crops")
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
