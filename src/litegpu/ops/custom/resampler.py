"""The ``Resampler`` custom op (TensorFlow Addons' resampler, run by the TFLite GPU delegate).

Bilinear sampling of ``data`` [N, H, W, C] at ``warp`` [N, ..., 2] holding (x, y)
pixel coordinates; the result is [N, ..., C].  Each of the four neighbouring
pixels that lies outside the image contributes zero, so points more than a pixel
outside sample zero and points near the border fade towards it.
"""

from __future__ import annotations

from typing import Any

from ...errors import ModelExecutionError
from ..registry import Op, OpContext, register


def _check_shapes(ctx: OpContext, data: Any, warp: Any) -> None:
    if len(data.shape) != 4:
        raise ModelExecutionError(f"{ctx.op}: data must be 4-D [batch, height, width, channels], got {data.shape}")
    if len(warp.shape) < 2 or warp.shape[-1] != 2 or warp.shape[0] != data.shape[0]:
        raise ModelExecutionError(f"{ctx.op}: warp must be [batch, ..., 2] with the data's batch "
                                  f"{data.shape[0]}, got {warp.shape}")


@register("Resampler", custom=True)
class Resampler(Op):
    def compute(self, ctx: OpContext, data: Any, warp: Any) -> Any:
        xp = ctx.xp
        _check_shapes(ctx, data, warp)
        batch, height, width, channels = data.shape
        points = xp.reshape(warp, (batch, -1, 2))
        x, y = points[..., 0], points[..., 1]
        x0, y0 = xp.floor(x), xp.floor(y)
        batch_index = xp.arange(batch)[:, None]

        def corner(cx: Any, cy: Any) -> Any:
            inside = (cx >= 0) & (cx <= width - 1) & (cy >= 0) & (cy <= height - 1)
            ix = xp.clip(cx, 0, width - 1).astype("int32")
            iy = xp.clip(cy, 0, height - 1).astype("int32")
            return xp.where(inside[..., None], data[batch_index, iy, ix], 0)

        # weights as in the official kernel: (x1 - x) for the left column, (x - x0) for the right
        wx1, wy1 = (x - x0)[..., None], (y - y0)[..., None]
        wx0, wy0 = 1 - wx1, 1 - wy1
        top = wx0 * corner(x0, y0) + wx1 * corner(x0 + 1, y0)
        bottom = wx0 * corner(x0, y0 + 1) + wx1 * corner(x0 + 1, y0 + 1)
        out = wy0 * top + wy1 * bottom
        return xp.reshape(out.astype(data.dtype), tuple(warp.shape[:-1]) + (channels,))
