"""SOFTMAX, LOG_SOFTMAX, L2_NORMALIZATION, LOCAL_RESPONSE_NORMALIZATION (float32).

All normalise along the last axis, as the official kernels do for any rank.
SOFTMAX scales the max-shifted logits by ``beta`` before exponentiating;
L2_NORMALIZATION divides by max(||x||, 1e-6) (so a zero vector stays zero);
LOCAL_RESPONSE_NORMALIZATION sums squares over ``radius`` channels on each
side (clipped at the edges) and takes 4-D input only.
"""

from __future__ import annotations

from typing import Any

from ..errors import ModelExecutionError
from .registry import Op, OpContext, register

L2_NORM_EPSILON = 1e-6


def _require_rank(ctx: OpContext, x: Any, low: int, high: int) -> None:
    if not low <= x.ndim <= high:
        raise ModelExecutionError(f"{ctx.op}: input must have rank {low}..{high}, got shape {tuple(x.shape)}")


@register("SOFTMAX")
class Softmax(Op):
    dtypes = ("float32",)

    def compute(self, ctx: OpContext, x: Any) -> Any:
        xp = ctx.xp
        _require_rank(ctx, x, 1, 8)
        shifted = (x - xp.max(x, axis=-1, keepdims=True)) * xp.asarray(ctx.options.beta, x.dtype)
        e = xp.exp(shifted)
        return e / xp.sum(e, axis=-1, keepdims=True)


@register("LOG_SOFTMAX")
class LogSoftmax(Op):
    dtypes = ("float32",)

    def compute(self, ctx: OpContext, x: Any) -> Any:
        xp = ctx.xp
        _require_rank(ctx, x, 1, 8)
        shifted = x - xp.max(x, axis=-1, keepdims=True)
        return shifted - xp.log(xp.sum(xp.exp(shifted), axis=-1, keepdims=True))


@register("L2_NORMALIZATION")
class L2Normalization(Op):
    dtypes = ("float32",)

    def unsupported_reason(self, op, subgraph, target):
        reason = super().unsupported_reason(op, subgraph, target)
        activation = op.options.get("fused_activation_function", "NONE")
        if reason is None and activation != "NONE":  # the official Prepare rejects these too
            reason = f"fused activation {activation} (the official kernel takes only NONE)"
        return reason

    def compute(self, ctx: OpContext, x: Any) -> Any:
        xp = ctx.xp
        _require_rank(ctx, x, 1, 8)
        norm = xp.sqrt(xp.sum(x * x, axis=-1, keepdims=True))
        return x / xp.maximum(norm, xp.asarray(L2_NORM_EPSILON, x.dtype))


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
