"""SELECT and SELECT_V2: pick x where the condition holds, else y.

SELECT (v1) takes a condition of the inputs' shape, a scalar, or a vector
matching their first dimension (a whole row per element); SELECT_V2
broadcasts all three inputs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ModelExecutionError
from .binary import broadcast_shape, check_same_dtype
from .registry import Op, OpContext, register

SELECTABLE = ("float32", "float16", "int8", "uint8", "int16", "int32", "int64", "bool")


class _SelectBase(Op):
    dtypes = SELECTABLE

    def input_dtype(self, op, subgraph):
        # The condition is always bool; what the op moves is the type of x.
        return subgraph.tensors[op.inputs[1]].dtype if len(op.inputs) > 1 else None

    def check_inputs(self, ctx: OpContext, cond: Any, x: Any, y: Any) -> None:
        if np.dtype(cond.dtype) != np.bool_:
            raise ModelExecutionError(f"{ctx.op}: the condition must be bool, got {cond.dtype}")
        check_same_dtype(ctx, x, y)


@register("SELECT")
class Select(_SelectBase):
    def compute(self, ctx: OpContext, cond: Any, x: Any, y: Any) -> Any:
        self.check_inputs(ctx, cond, x, y)
        if x.shape != y.shape:
            raise ModelExecutionError(f"{ctx.op}: x and y must have one shape, got {x.shape} and {y.shape}")
        if cond.shape != x.shape:
            cond = _rows_condition(ctx, cond, x.shape)
        return ctx.xp.where(cond, x, y)


def _rows_condition(ctx: OpContext, cond: Any, shape: tuple) -> Any:
    """A scalar, or a vector choosing whole rows along the first dimension, shaped to broadcast."""
    if cond.ndim == 0:
        return cond
    if cond.ndim == 1 and len(shape) >= 1 and cond.shape[0] == shape[0]:
        return cond.reshape((shape[0],) + (1,) * (len(shape) - 1))
    raise ModelExecutionError(f"{ctx.op}: the condition must have the inputs' shape {shape}, be a scalar, "
                              f"or a vector of their first dimension; got {cond.shape}")


@register("SELECT_V2")
class SelectV2(_SelectBase):
    def compute(self, ctx: OpContext, cond: Any, x: Any, y: Any) -> Any:
        self.check_inputs(ctx, cond, x, y)
        broadcast_shape(ctx, cond, x, y)
        return ctx.xp.where(cond, x, y)
