"""Elementwise unary math.

Float results follow the C library of the official kernels (inf, NaN and all):
LOG of a negative is NaN, RSQRT(0) is inf.  ROUND rounds half to even.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .registry import Op, OpContext, register

FLOATS = ("float32", "float16")


class _Unary(Op):
    dtypes = FLOATS

    def apply(self, xp: Any, x: Any) -> Any:
        raise NotImplementedError

    def compute(self, ctx: OpContext, x: Any) -> Any:
        with np.errstate(all="ignore"):  # inf / NaN results are the official semantics
            return self.apply(ctx.xp, x)


@register("ABS")
class Abs(_Unary):
    dtypes = FLOATS + ("int32",)

    def apply(self, xp, x):
        return xp.abs(x)


@register("NEG")
class Neg(_Unary):
    dtypes = FLOATS + ("int32", "int64")

    def apply(self, xp, x):
        return -x


@register("EXP")
class Exp(_Unary):
    def apply(self, xp, x):
        return xp.exp(x)


@register("LOG")
class Log(_Unary):
    def apply(self, xp, x):
        return xp.log(x)


@register("SQRT")
class Sqrt(_Unary):
    def apply(self, xp, x):
        return xp.sqrt(x)


@register("RSQRT")
class Rsqrt(_Unary):
    def reference(self, ctx, x):
        with np.errstate(all="ignore"):
            return (1 / np.sqrt(x)).astype(x.dtype)

    def lower(self, ctx, x):
        return ctx.lax.rsqrt(x)


@register("SQUARE")
class Square(_Unary):
    def apply(self, xp, x):
        return x * x


@register("SIN")
class Sin(_Unary):
    def apply(self, xp, x):
        return xp.sin(x)


@register("COS")
class Cos(_Unary):
    def apply(self, xp, x):
        return xp.cos(x)


@register("FLOOR")
class Floor(_Unary):
    def apply(self, xp, x):
        return xp.floor(x)


@register("CEIL")
class Ceil(_Unary):
    def apply(self, xp, x):
        return xp.ceil(x)


@register("ROUND")
class Round(_Unary):
    def apply(self, xp, x):
        return xp.round(x)  # half to even in numpy and jax, as in the official kernel


@register("SIGN")
class Sign(_Unary):
    dtypes = FLOATS + ("float64", "int32")

    def apply(self, xp, x):
        return xp.sign(x)


@register("ZEROS_LIKE")
class ZerosLike(_Unary):
    dtypes = ("float32", "float16", "int32", "int64")

    def apply(self, xp, x):
        return xp.zeros_like(x)
