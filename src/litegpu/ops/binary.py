"""Elementwise binary arithmetic with broadcasting and fused activations."""

from __future__ import annotations

from typing import Any

from .common import fused_activation
from .registry import Op, OpContext, register

FLOAT_AND_INT = ("float32", "float16", "int32", "int64")


class _Binary(Op):
    dtypes = FLOAT_AND_INT

    def apply(self, xp: Any, x: Any, y: Any) -> Any:
        raise NotImplementedError

    def compute(self, ctx: OpContext, x: Any, y: Any) -> Any:
        activation = ctx.options.get("fused_activation_function", "NONE")
        return fused_activation(ctx.xp, self.apply(ctx.xp, x, y), activation)


@register("ADD")
class Add(_Binary):
    def apply(self, xp, x, y):
        return x + y


@register("SUB")
class Sub(_Binary):
    def apply(self, xp, x, y):
        return x - y


@register("MUL")
class Mul(_Binary):
    def apply(self, xp, x, y):
        return x * y
