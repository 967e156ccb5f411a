"""Logical ops on bool tensors and bitwise ops on integers, with broadcasting."""

from __future__ import annotations

from typing import Any

import numpy as np

from .binary import broadcast_shape, check_same_dtype
from .registry import Op, OpContext, register

BITWISE_TYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32")


class _LogicalBinary(Op):
    dtypes = ("bool",)

    def apply(self, xp: Any, x: Any, y: Any) -> Any:
        raise NotImplementedError

    def compute(self, ctx: OpContext, x: Any, y: Any) -> Any:
        check_same_dtype(ctx, x, y)
        broadcast_shape(ctx, x, y)
        return self.apply(ctx.xp, x, y)


@register("LOGICAL_AND")
class LogicalAnd(_LogicalBinary):
    def apply(self, xp, x, y):
        return xp.logical_and(x, y)


@register("LOGICAL_OR")
class LogicalOr(_LogicalBinary):
    def apply(self, xp, x, y):
        return xp.logical_or(x, y)


@register("LOGICAL_NOT")
class LogicalNot(Op):
    dtypes = ("bool",)

    def compute(self, ctx, x):
        return ctx.xp.logical_not(x)


@register("BITWISE_XOR")
class BitwiseXor(_LogicalBinary):
    dtypes = BITWISE_TYPES

    def apply(self, xp, x, y):
        return xp.bitwise_xor(x, y)


@register("RIGHT_SHIFT")
class RightShift(_LogicalBinary):
    """Arithmetic shift for signed types; the official kernel clamps the shift to [0, bits - 1]."""

    dtypes = BITWISE_TYPES

    def apply(self, xp, x, y):
        max_shift = np.dtype(x.dtype).itemsize * 8 - 1
        return xp.right_shift(x, xp.clip(y, 0, max_shift).astype(x.dtype))
