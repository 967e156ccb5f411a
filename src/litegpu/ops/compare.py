"""Elementwise comparisons with broadcasting; the outputs are bool.

Quantized int8/uint8 inputs are compared after rescaling by the official
kernel; that path is not implemented here yet, so those types are not claimed.
"""

from __future__ import annotations

from typing import Any

from .binary import broadcast_shape, check_same_dtype
from .registry import Op, OpContext, register

ORDERED = ("float32", "float16", "int32", "int64", "int16")


class _Comparison(Op):
    dtypes = ORDERED

    def apply(self, x: Any, y: Any) -> Any:
        raise NotImplementedError

    def compute(self, ctx: OpContext, x: Any, y: Any) -> Any:
        check_same_dtype(ctx, x, y)
        broadcast_shape(ctx, x, y)
        return self.apply(x, y)


@register("LESS")
class Less(_Comparison):
    def apply(self, x, y):
        return x < y


@register("LESS_EQUAL")
class LessEqual(_Comparison):
    def apply(self, x, y):
        return x <= y


@register("GREATER")
class Greater(_Comparison):
    def apply(self, x, y):
        return x > y


@register("GREATER_EQUAL")
class GreaterEqual(_Comparison):
    def apply(self, x, y):
        return x >= y


@register("EQUAL")
class Equal(_Comparison):
    dtypes = ORDERED + ("bool",)

    def apply(self, x, y):
        return x == y


@register("NOT_EQUAL")
class NotEqual(_Comparison):
    # The official int16 NOT_EQUAL answers true everywhere (2.3.0), so int16 is not claimed.
    dtypes = ("float32", "float16", "int32", "int64", "bool")

    def apply(self, x, y):
        return x != y
