"""Elementwise comparisons with broadcasting; the outputs are bool.

Quantized int8/uint8 inputs are compared the official way (``ComparisonWithScaling``):
each input, zero-point centred and shifted left by 8 bits, is rescaled by its own scale
in fixed point, so inputs of different scales compare by real value (up to that
rounding).  The official kernel aborts on int8/uint8 inputs without quantization; here
those compare as raw integers.
"""

from __future__ import annotations

from typing import Any

from . import _quantized as qz
from . import _fixedpoint as fp
from .binary import broadcast_shape, check_same_dtype
from .registry import Op, OpContext, register

ORDERED = ("float32", "float16", "int32", "int64", "int16", "int8", "uint8")

# comparisons.cc: the headroom of the rescaled inputs
_COMPARISON_LEFT_SHIFT = 8


def _rescaled_for_comparison(ctx: OpContext, x: Any, y: Any) -> tuple[Any, Any]:
    xp = ctx.xp
    tensors = (ctx.input(0), ctx.input(1))
    if not all(qz.is_quantized(t) for t in tensors):
        return x, y
    values = []
    for i, (t, v) in enumerate(zip(tensors, (x, y))):
        scale, zero_point = qz.scale_and_zero_point(ctx, t, ("first", "second")[i] + " input")
        multiplier, shift = fp.quantize_multiplier(scale)
        shifted = (v.astype(xp.int64) - zero_point) << _COMPARISON_LEFT_SHIFT
        values.append(fp.multiply_by_quantized_multiplier(xp, shifted, multiplier, shift))
    return values[0], values[1]


class _Comparison(Op):
    dtypes = ORDERED

    def unsupported_reason(self, op, subgraph, target):
        reason = super().unsupported_reason(op, subgraph, target)
        if reason is None:
            for i in op.inputs[:2]:
                t = subgraph.tensors[i] if i >= 0 else None
                if t is not None and t.dtype in qz.QUANTIZED_8BIT and qz.is_quantized(t) and \
                        max(t.quantization.scale) >= 1:
                    # the official rescale (a "smaller than one" multiplier) shifts by a
                    # negative amount there: undefined behaviour
                    return f"quantized input scale {max(t.quantization.scale)} >= 1 is not supported"
        return reason

    def apply(self, x: Any, y: Any) -> Any:
        raise NotImplementedError

    def compute(self, ctx: OpContext, x: Any, y: Any) -> Any:
        check_same_dtype(ctx, x, y)
        broadcast_shape(ctx, x, y)
        if ctx.input(0).dtype in qz.QUANTIZED_8BIT:
            x, y = _rescaled_for_comparison(ctx, x, y)
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
    dtypes = ("float32", "float16", "int32", "int64", "int8", "uint8", "bool")

    def apply(self, x, y):
        return x != y
