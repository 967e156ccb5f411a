"""Padding: PAD (zeros, or the zero point of a quantized output), PADV2 (a given value), MIRROR_PAD."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ModelExecutionError
from .registry import Op, OpContext, register
from .shape import (
    ANY_DTYPE,
    QUANTIZED_DTYPES,
    require_int16_zero_points,
    require_same_quantization,
)


def static_paddings(ctx: OpContext, paddings: Any, rank: int) -> list[tuple[int, int]]:
    array = ctx.static(paddings)
    if array.dtype.kind not in "iu" or array.shape != (rank, 2):
        raise ModelExecutionError(f"{ctx.op}: paddings must be integers of shape ({rank}, 2), "
                                  f"got {array.dtype} {array.shape}")
    pads = [(int(a), int(b)) for a, b in array]
    if any(a < 0 or b < 0 for a, b in pads):
        raise ModelExecutionError(f"{ctx.op}: paddings {pads} must be non-negative")
    return pads


def zero_value(ctx: OpContext) -> int:
    """What 'zero' is in the output: its zero point when quantized."""
    q = ctx.output(0).quantization
    return int(q.zero_point[0]) if q is not None and q.zero_point else 0


@register("PAD")
class Pad(Op):
    dtypes = ANY_DTYPE

    def compute(self, ctx: OpContext, x: Any, paddings: Any) -> Any:
        pads = static_paddings(ctx, paddings, x.ndim)
        return ctx.xp.pad(x, pads, constant_values=np.asarray(zero_value(ctx)).astype(x.dtype))


@register("PADV2")
class PadV2(Op):
    dtypes = ANY_DTYPE

    def compute(self, ctx: OpContext, x: Any, paddings: Any, value: Any = None) -> Any:
        pads = static_paddings(ctx, paddings, x.ndim)
        if value is None:
            return ctx.xp.pad(x, pads, constant_values=np.asarray(zero_value(ctx)).astype(x.dtype))
        if np.size(value) != 1:
            raise ModelExecutionError(f"{ctx.op}: the constant value must be a single element, got "
                                      f"shape {np.shape(value)}")
        value = ctx.xp.reshape(value, ()).astype(x.dtype)
        if ctx.target.is_xla:
            # jnp.pad wants a static pad value; lax.pad takes a traced one.
            return ctx.lax.pad(x, value, [(a, b, 0) for a, b in pads])
        return np.pad(x, pads, constant_values=value)


@register("MIRROR_PAD")
class MirrorPad(Op):
    dtypes = ANY_DTYPE

    def compute(self, ctx: OpContext, x: Any, paddings: Any) -> Any:
        pads = static_paddings(ctx, paddings, x.ndim)
        # the official Prepare: quantized values are copied, never requantized
        require_same_quantization(ctx, dtypes=QUANTIZED_DTYPES)
        require_int16_zero_points(ctx, [ctx.input(0), ctx.output(0)])
        mode = ctx.options.get("mode", "REFLECT")
        # REFLECT mirrors around the edge element, SYMMETRIC repeats it.
        limit_offset = 1 if mode == "REFLECT" else 0
        for axis, ((a, b), dim) in enumerate(zip(pads, x.shape)):
            if max(a, b) > dim - limit_offset:
                raise ModelExecutionError(f"{ctx.op}: {mode} padding {(a, b)} is too large for axis {axis} "
                                          f"of size {dim}")
        return ctx.xp.pad(x, pads, mode="reflect" if mode == "REFLECT" else "symmetric")
