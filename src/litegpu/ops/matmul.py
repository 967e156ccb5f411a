"""FULLY_CONNECTED and BATCH_MATMUL (float32).

FULLY_CONNECTED flattens its input to [-1, in] (``in`` = weights.shape[1]),
multiplies by the [out, in] weights, adds the optional bias and applies the
fused activation; ``keep_num_dims`` keeps the input's leading dims instead
of collapsing them into one batch dim.  Weights may be a non-constant input.
BATCH_MATMUL broadcasts the batch dims and transposes the last two dims of an
operand when ``adj_x`` / ``adj_y`` say so.  XLA matmuls use precision HIGHEST
so that they match fp32 on GPUs that would otherwise use TF32.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import ModelExecutionError
from .common import fused_activation
from .registry import Op, OpContext, register


# what the official kernel's Prepare accepts
FC_ACTIVATIONS = ("NONE", "RELU", "RELU_N1_TO_1", "RELU6")


def _hybrid_reason(op: Any, subgraph: Any, index: int) -> str | None:
    """Float input with integer weights is the hybrid (dynamic-range) kernel: not here yet."""
    if index < len(op.inputs) and op.inputs[index] >= 0:
        dtype = subgraph.tensors[op.inputs[index]].dtype
        if dtype != "float32":
            return f"{dtype} weights with float input (hybrid quantization) are not supported"
    return None


def _fc_output_shape(ctx: OpContext, x_shape: tuple, w_shape: tuple) -> tuple[int, tuple]:
    """(rows of the flattened input, output shape)."""
    if len(w_shape) != 2:
        raise ModelExecutionError(f"{ctx.op}: weights must be [out, in], got shape {tuple(w_shape)}")
    units, depth = w_shape
    size = math.prod(x_shape)
    if depth == 0 or size % depth:
        raise ModelExecutionError(f"{ctx.op}: input of shape {tuple(x_shape)} cannot be flattened into rows "
                                  f"of {depth} (weights {tuple(w_shape)})")
    rows = size // depth
    if ctx.options.keep_num_dims:
        if not x_shape or x_shape[-1] != depth:
            raise ModelExecutionError(f"{ctx.op}: keep_num_dims needs the input's last dim ({tuple(x_shape)}) "
                                      f"to equal the weights' {depth}")
        return rows, tuple(x_shape[:-1]) + (units,)
    return rows, (rows, units)


@register("FULLY_CONNECTED")
class FullyConnected(Op):
    dtypes = ("float32",)

    def unsupported_reason(self, op, subgraph, target):
        reason = super().unsupported_reason(op, subgraph, target) or _hybrid_reason(op, subgraph, 1)
        if reason is None and op.options.get("weights_format", "DEFAULT") != "DEFAULT":
            reason = f"weights_format {op.options.weights_format} (shuffled uint8 weights) is not supported"
        activation = op.options.get("fused_activation_function", "NONE")
        if reason is None and activation not in FC_ACTIVATIONS:
            reason = f"fused activation {activation} (the official kernel takes only {', '.join(FC_ACTIVATIONS)})"
        return reason

    def reference(self, ctx: OpContext, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
        rows, out_shape = _fc_output_shape(ctx, x.shape, w.shape)
        y = x.astype(np.float32).reshape(rows, w.shape[1]) @ w.astype(np.float32).T
        return self._finish(ctx, np, y, bias, out_shape)

    def lower(self, ctx: OpContext, x: Any, w: Any, bias: Any = None) -> Any:
        jnp, lax = ctx.xp, ctx.lax
        rows, out_shape = _fc_output_shape(ctx, x.shape, w.shape)
        y = lax.dot_general(x.reshape(rows, w.shape[1]), w, (((1,), (1,)), ((), ())),
                            precision=lax.Precision.HIGHEST)
        return self._finish(ctx, jnp, y, bias, out_shape)

    @staticmethod
    def _finish(ctx: OpContext, xp: Any, y: Any, bias: Any, out_shape: tuple) -> Any:
        if bias is not None:
            y = y + bias
        return fused_activation(xp, y, ctx.options.fused_activation_function).reshape(out_shape)


def _batch_matmul_operands(ctx: OpContext, x: Any, y: Any) -> tuple[Any, Any]:
    if x.ndim < 2 or y.ndim < 2:
        raise ModelExecutionError(f"{ctx.op}: operands must have rank >= 2, got {tuple(x.shape)} and {tuple(y.shape)}")
    if ctx.options.adj_x:
        x = x.swapaxes(-1, -2)
    if ctx.options.adj_y:
        y = y.swapaxes(-1, -2)
    if x.shape[-1] != y.shape[-2]:
        raise ModelExecutionError(f"{ctx.op}: contracted dims differ: lhs {tuple(x.shape)} (adj_x="
                                  f"{ctx.options.adj_x}) and rhs {tuple(y.shape)} (adj_y={ctx.options.adj_y})")
    try:
        np.broadcast_shapes(x.shape[:-2], y.shape[:-2])
    except ValueError:
        raise ModelExecutionError(f"{ctx.op}: batch dims {tuple(x.shape[:-2])} and {tuple(y.shape[:-2])} "
                                  "do not broadcast") from None
    return x, y


@register("BATCH_MATMUL")
class BatchMatMul(Op):
    dtypes = ("float32",)

    def unsupported_reason(self, op, subgraph, target):
        return super().unsupported_reason(op, subgraph, target) or _hybrid_reason(op, subgraph, 1)

    def reference(self, ctx: OpContext, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        x, y = _batch_matmul_operands(ctx, x.astype(np.float32), y.astype(np.float32))
        return np.matmul(x, y)

    def lower(self, ctx: OpContext, x: Any, y: Any) -> Any:
        x, y = _batch_matmul_operands(ctx, x, y)
        return ctx.xp.matmul(x, y, precision=ctx.lax.Precision.HIGHEST)
