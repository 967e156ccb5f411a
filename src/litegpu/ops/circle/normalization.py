"""Circle's normalisations: INSTANCE_NORM (code -2) and RMS_NORM (code -6), float32.

Semantics from ONE's kernels (luci-interpreter ``InstanceNorm.cpp`` / ``RmsNorm.cpp``, onert's
``cker::InstanceNorm`` / ``cker::RmsNorm``), which accumulate in double and round once at the end:

- INSTANCE_NORM(x, gamma, beta): rank 4 is NHWC, each (batch, channel) normalised over H and W;
  rank 3 is [N, C, D], each (n, c) over D.  ``y = gamma * (x - mean) / sqrt(var + epsilon) + beta``
  with the population variance, gamma and beta per channel or single values, then the fused
  activation as a clamp (``calculateActivationRange``).
- RMS_NORM(x, gamma[, beta]): every vector along the last axis, ``y = gamma * x / sqrt(mean(x^2) +
  epsilon) (+ beta)``; gamma (and luci's optional beta) per last-axis element or single values.
  onert takes rank 3 and 4 only; any rank >= 1 is the same computation, so litegpu takes them all.

The numpy reference accumulates in float64 as ONE does; the XLA lowering in float32 (its sums are
within a few float32 ulps of the double ones).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import ModelExecutionError
from .._common import fused_activation
from ..registry import Op, OpContext, register


def _per_channel(ctx: OpContext, values: Any, channels: int, what: str) -> Any:
    """gamma / beta as ONE reads them: one value per channel, or one value for all."""
    if values.ndim != 1 or values.shape[0] not in (1, channels):
        raise ModelExecutionError(f"{ctx.op}: {what} must have shape [{channels}] or [1], got {tuple(values.shape)}")
    return values


def _wide(ctx: OpContext, x: Any) -> Any:
    """The accumulation type: double in the numpy reference (as ONE's kernels), float32 under XLA."""
    return x.astype(ctx.xp.float64) if ctx.lax is None else x


@register("INSTANCE_NORM")
class InstanceNorm(Op):
    dtypes = ("float32",)

    def unsupported_reason(self, op, subgraph, target):
        reason = super().unsupported_reason(op, subgraph, target)
        rank = len(subgraph.tensors[op.inputs[0]].shape)
        if reason is None and rank not in (3, 4):
            reason = f"rank {rank} input (ONE's kernels take rank 3 [N, C, D] and rank 4 NHWC)"
        return reason

    def builtin_lowering(self, op, subgraph, g) -> bool:
        """mean and variance by MEAN over the normalised axes (two passes in float32, where ONE takes
        E[x^2] - E[x]^2 in double), RSQRT, gamma and beta reshaped to the channel axis, the activation fused
        into the last ADD (ADD takes the same activations)."""
        x, gamma, beta = op.inputs[:3]
        shape = g.shape(x)
        axes, channel_shape = ((1, 2), (1, 1, 1, -1)) if len(shape) == 4 else ((2,), (1, -1, 1))
        reduced = tuple(1 if a in axes else d for a, d in enumerate(shape))
        over = g.constant(np.array(axes, np.int32))
        mean = g.op("MEAN", [x, over], reduced, keep_dims=True)
        centred = g.op("SUB", [x, mean], shape)
        var = g.op("MEAN", [g.op("MUL", [centred, centred], shape), over], reduced, keep_dims=True)
        inv = g.op("RSQRT", [g.op("ADD", [var, g.constant(np.float32(op.options.epsilon))], reduced)], reduced)

        def per_channel(t: int) -> int:  # [C] or [1] -> broadcastable along the channel axis
            target = tuple(g.shape(t)[0] if d == -1 else d for d in channel_shape)
            return g.op("RESHAPE", [t, g.constant(np.array(target, np.int32))], target)

        scaled = g.op("MUL", [g.op("MUL", [centred, inv], shape), per_channel(gamma)], shape)
        g.op("ADD", [scaled, per_channel(beta)], shape, output=op.outputs[0],
             fused_activation_function=op.options.get("fused_activation_function", "NONE"))
        return True

    def compute(self, ctx: OpContext, x: Any, gamma: Any, beta: Any) -> Any:
        xp = ctx.xp
        if x.ndim == 4:
            axes, channel_shape = (1, 2), (1, 1, 1, -1)   # NHWC: over H, W; channels last
        elif x.ndim == 3:
            axes, channel_shape = (2,), (1, -1, 1)         # [N, C, D]: over D; channels second
        else:
            raise ModelExecutionError(f"{ctx.op}: input must have rank 3 or 4, got shape {tuple(x.shape)}")
        channels = x.shape[-1] if x.ndim == 4 else x.shape[1]
        gamma = _wide(ctx, _per_channel(ctx, gamma, channels, "gamma")).reshape(channel_shape)
        beta = _wide(ctx, _per_channel(ctx, beta, channels, "beta")).reshape(channel_shape)
        wide = _wide(ctx, x)
        mean = xp.mean(wide, axis=axes, keepdims=True)
        var = xp.mean(wide * wide, axis=axes, keepdims=True) - mean * mean  # as ONE: E[x^2] - E[x]^2
        scale = gamma / xp.sqrt(var + ctx.options.epsilon)
        y = (wide * scale + (beta - mean * scale)).astype(x.dtype)
        return fused_activation(xp, y, ctx.options.fused_activation_function)


@register("RMS_NORM")
class RmsNorm(Op):
    dtypes = ("float32",)

    def unsupported_reason(self, op, subgraph, target):
        reason = super().unsupported_reason(op, subgraph, target)
        if reason is None and not subgraph.tensors[op.inputs[0]].shape:
            reason = "scalar input (RMS_NORM normalises along the last axis)"
        return reason

    def builtin_lowering(self, op, subgraph, g) -> bool:
        """x * RSQRT(MEAN(x * x) + epsilon) * gamma (+ beta), in float32 (ONE accumulates in double)."""
        x, gamma = op.inputs[:2]
        beta = op.inputs[2] if len(op.inputs) > 2 and op.inputs[2] >= 0 else None
        shape = g.shape(x)
        reduced = shape[:-1] + (1,)
        square = g.op("MUL", [x, x], shape)
        mean = g.op("MEAN", [square, g.constant(np.array([len(shape) - 1], np.int32))], reduced, keep_dims=True)
        inv = g.op("RSQRT", [g.op("ADD", [mean, g.constant(np.float32(op.options.epsilon))], reduced)], reduced)
        normed = g.op("MUL", [x, inv], shape)
        if beta is None:
            g.op("MUL", [normed, gamma], shape, output=op.outputs[0])
        else:
            g.op("ADD", [g.op("MUL", [normed, gamma], shape), beta], shape, output=op.outputs[0])
        return True

    def compute(self, ctx: OpContext, x: Any, gamma: Any, beta: Any = None) -> Any:
        xp = ctx.xp
        if x.ndim < 1:
            raise ModelExecutionError(f"{ctx.op}: input must have rank >= 1, got a scalar")
        width = x.shape[-1]
        wide = _wide(ctx, x)
        rms = xp.sqrt(xp.mean(wide * wide, axis=-1, keepdims=True) + ctx.options.epsilon)
        y = _wide(ctx, _per_channel(ctx, gamma, width, "gamma")) * (wide / rms)
        if beta is not None:
            y = y + _wide(ctx, _per_channel(ctx, beta, width, "beta"))
        return y.astype(x.dtype)
