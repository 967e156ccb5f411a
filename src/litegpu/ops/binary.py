"""Elementwise binary arithmetic with broadcasting and fused activations.

Semantics follow the official kernels, including two details that are easy to
miss:

* ADD, SUB, MUL, DIV and ADD_N clamp float results to the activation range,
  and with no activation that range is [-FLT_MAX, FLT_MAX]: an overflow gives
  +-FLT_MAX, never inf (NaN stays NaN).  Ops without a fused activation
  (SQUARED_DIFFERENCE, POW, ...) do produce inf.
* Integer DIV truncates toward zero (C semantics); FLOOR_DIV / FLOOR_MOD round
  toward -inf.  A zero divisor is an error for integer DIV / FLOOR_DIV /
  FLOOR_MOD and for float FLOOR_DIV (float DIV and FLOOR_MOD give inf / NaN).
  The reference backend raises on those; XLA cannot fail at run time and
  returns XLA's values instead.
* Integer POW is computed in double precision, as ``std::pow`` does; results
  out of the type's range become INT_MIN (what x86 makes of them).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ModelExecutionError
from . import _quantized as qz
from . import fixedpoint as fp
from ._quantized import QUANTIZED_8BIT
from .common import fused_activation
from .registry import Op, OpContext, register

FLOAT_AND_INT = ("float32", "float16", "int32", "int64")


def broadcast_shape(ctx: OpContext, *values: Any) -> tuple[int, ...]:
    """The numpy-style broadcast of the inputs' shapes, or an error naming the op."""
    shapes = [tuple(np.shape(v)) for v in values]
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ModelExecutionError(f"{ctx.op}: input shapes {' and '.join(map(str, shapes))} "
                                  "do not broadcast") from None


def check_same_dtype(ctx: OpContext, *values: Any) -> None:
    dtypes = {np.dtype(v.dtype) for v in values}
    if len(dtypes) > 1:
        raise ModelExecutionError(f"{ctx.op}: inputs must have one type, got {', '.join(map(str, dtypes))}")


def is_float(x: Any) -> bool:
    return np.issubdtype(np.dtype(x.dtype), np.floating)


def is_traced(x: Any) -> bool:
    return not isinstance(x, (np.ndarray, np.generic))


def clamp_to_activation_range(xp: Any, x: Any, activation: str | None) -> Any:
    """The official ``ActivationFunctionWithMinMax``: float results never leave the finite range."""
    x = fused_activation(xp, x, activation)
    if is_float(x):
        limit = np.finfo(np.dtype(x.dtype)).max
        x = xp.clip(x, -limit, limit)
    return x


def raise_on_zero_divisor(ctx: OpContext, y: Any) -> None:
    """The official kernel fails on a zero divisor; only a concrete (reference) value can be checked."""
    if not is_traced(y) and np.any(np.asarray(y) == 0):
        raise ModelExecutionError(f"{ctx.op}: division by 0")


class _Binary(Op):
    """Two same-typed inputs, broadcast; subclasses define ``apply``."""

    dtypes = FLOAT_AND_INT
    # Whether the official kernel passes the result through its activation range.
    clamps_result = False

    def apply(self, xp: Any, x: Any, y: Any) -> Any:
        raise NotImplementedError

    def validate(self, ctx: OpContext, x: Any, y: Any) -> None:
        """Data checks the official kernel makes (reference backend only)."""

    # The affine-quantized int8/uint8 kernel, for ops that have one (ADD, MUL). Others that accept
    # int8 (FLOOR_DIV, MAXIMUM, ...) compute on the raw integers, as the official kernels do.
    quantized: Any = None

    def compute(self, ctx: OpContext, x: Any, y: Any) -> Any:
        check_same_dtype(ctx, x, y)
        broadcast_shape(ctx, x, y)
        if self.quantized is not None and ctx.input(0).dtype in QUANTIZED_8BIT:
            return self.quantized(ctx, x, y)
        self.validate(ctx, x, y)
        with np.errstate(all="ignore"):
            result = self.apply(ctx.xp, x, y)
            if self.clamps_result:
                activation = ctx.options.get("fused_activation_function", "NONE")
                result = clamp_to_activation_range(ctx.xp, result, activation)
        return result


@register("ADD")
class Add(_Binary):
    dtypes = FLOAT_AND_INT + QUANTIZED_8BIT
    clamps_result = True

    def quantized(self, ctx, x, y):
        return _quantized_add(ctx, ctx.xp, x, y)

    def apply(self, xp, x, y):
        return x + y


@register("SUB")
class Sub(_Binary):
    clamps_result = True

    def apply(self, xp, x, y):
        return x - y


@register("MUL")
class Mul(_Binary):
    dtypes = FLOAT_AND_INT + QUANTIZED_8BIT
    clamps_result = True

    def quantized(self, ctx, x, y):
        return _quantized_mul(ctx, ctx.xp, x, y)

    def apply(self, xp, x, y):
        return x * y


# --- quantized (int8 / uint8) ADD and MUL: the official integer kernels ----------------

# ADD moves both inputs to a common scale 2^20 times finer than twice the larger input
# scale (add.cc, 8-bit): enough headroom that the rescaled sum stays exact in int32.
_ADD_LEFT_SHIFT = 20


def _quantized_add(ctx: OpContext, xp: Any, x: Any, y: Any) -> Any:
    s1, z1 = qz.scale_and_zero_point(ctx, ctx.input(0), "first input")
    s2, z2 = qz.scale_and_zero_point(ctx, ctx.input(1), "second input")
    so, zo = qz.scale_and_zero_point(ctx, ctx.output(0), "output")
    twice_max = 2.0 * max(s1, s2)
    m1, e1 = fp.quantize_multiplier(s1 / twice_max)
    m2, e2 = fp.quantize_multiplier(s2 / twice_max)
    mo, eo = fp.quantize_multiplier(twice_max / float(np.float32((1 << _ADD_LEFT_SHIFT) * np.float32(so))))
    a = fp.multiply_by_quantized_multiplier(xp, (x.astype(xp.int64) - z1) << _ADD_LEFT_SHIFT, m1, e1)
    b = fp.multiply_by_quantized_multiplier(xp, (y.astype(xp.int64) - z2) << _ADD_LEFT_SHIFT, m2, e2)
    out = fp.multiply_by_quantized_multiplier(xp, fp.wrap_int32(xp, a + b), mo, eo) + zo
    low, high = qz.activation_range(ctx.options.get("fused_activation_function", "NONE"), so, zo,
                                    ctx.output(0).dtype)
    return xp.clip(out, low, high)


def _quantized_mul(ctx: OpContext, xp: Any, x: Any, y: Any) -> Any:
    s1, z1 = qz.scale_and_zero_point(ctx, ctx.input(0), "first input")
    s2, z2 = qz.scale_and_zero_point(ctx, ctx.input(1), "second input")
    so, zo = qz.scale_and_zero_point(ctx, ctx.output(0), "output")
    multiplier, shift = fp.quantize_multiplier(s1 * s2 / so)
    product = (x.astype(xp.int64) - z1) * (y.astype(xp.int64) - z2)
    out = fp.multiply_by_quantized_multiplier(xp, product, multiplier, shift) + zo
    low, high = qz.activation_range(ctx.options.get("fused_activation_function", "NONE"), so, zo,
                                    ctx.output(0).dtype)
    return xp.clip(out, low, high)


@register("DIV")
class Div(_Binary):
    dtypes = ("float32", "float16", "int32")
    clamps_result = True

    def validate(self, ctx, x, y):
        if not is_float(y):
            raise_on_zero_divisor(ctx, y)

    def apply(self, xp, x, y):
        if is_float(x):
            return x / y
        return _truncating_int_div(xp, x, y)


def _truncating_int_div(xp: Any, x: Any, y: Any) -> Any:
    # Floor division rounds toward -inf; C rounds toward zero, which differs when
    # the signs differ and the division is inexact.
    q = x // y
    inexact_negative = (q * y != x) & ((x < 0) != (y < 0))
    return xp.where(inexact_negative, q + 1, q)


@register("FLOOR_DIV")
class FloorDiv(_Binary):
    dtypes = ("float32", "float16", "int32", "int16", "int8")

    def validate(self, ctx, x, y):
        raise_on_zero_divisor(ctx, y)

    def apply(self, xp, x, y):
        return xp.floor(x / y) if is_float(x) else xp.floor_divide(x, y)


@register("FLOOR_MOD")
class FloorMod(_Binary):
    dtypes = ("float32", "float16", "int32", "int64", "int16", "int8")

    def validate(self, ctx, x, y):
        if not is_float(y):
            raise_on_zero_divisor(ctx, y)

    def apply(self, xp, x, y):
        # The official kernel's formula: the truncated remainder, moved into y's sign.
        trunc_mod = xp.fmod(x, y)
        wrong_sign = (trunc_mod != 0) & ((y < 0) != (trunc_mod < 0))
        return xp.where(wrong_sign, trunc_mod + y, trunc_mod)


@register("POW")
class Pow(_Binary):
    dtypes = ("float32", "float16", "int32")

    def validate(self, ctx, x, y):
        if not is_float(y) and not is_traced(y) and np.any(np.asarray(y) < 0):
            raise ModelExecutionError(f"{ctx.op}: integer POW does not support negative exponents")

    def apply(self, xp, x, y):
        if is_float(x):
            return xp.power(x, y)
        return _int_from_double(xp, xp.power(x.astype(np.float64), y.astype(np.float64)), x.dtype)


def _int_from_double(xp: Any, value: Any, dtype: Any) -> Any:
    # The official int POW is std::pow on doubles converted back to int; on x86 an
    # out-of-range conversion yields the "integer indefinite" value, INT_MIN.
    info = np.iinfo(dtype)
    in_range = (value >= info.min) & (value <= info.max)
    return xp.where(in_range, xp.where(in_range, value, 0).astype(dtype), np.asarray(info.min, dtype))


@register("MAXIMUM")
class Maximum(_Binary):
    dtypes = ("float32", "float16", "int32", "int64", "int16")

    def apply(self, xp, x, y):
        # Not xp.maximum: the official `a > b ? a : b` returns b when a is NaN.
        return xp.where(x > y, x, y)


@register("MINIMUM")
class Minimum(_Binary):
    dtypes = ("float32", "float16", "int32", "int64", "int16")

    def apply(self, xp, x, y):
        return xp.where(x < y, x, y)


@register("SQUARED_DIFFERENCE")
class SquaredDifference(_Binary):
    dtypes = ("float32", "float16", "int32")

    def apply(self, xp, x, y):
        d = x - y
        return d * d


@register("ATAN2")
class Atan2(_Binary):
    """atan2(input 0, input 1); the official kernel does not broadcast."""

    dtypes = ("float32", "float16", "float64")

    def validate(self, ctx, y, x):
        if np.shape(y) != np.shape(x):
            raise ModelExecutionError(f"{ctx.op}: inputs must have one shape, got {np.shape(y)} and {np.shape(x)}")

    def apply(self, xp, y, x):
        return xp.arctan2(y, x)


@register("ADD_N")
class AddN(Op):
    dtypes = ("float32", "float16", "int32")

    def compute(self, ctx: OpContext, *inputs: Any) -> Any:
        if len(inputs) < 2:
            raise ModelExecutionError(f"{ctx.op}: needs at least two inputs, got {len(inputs)}")
        check_same_dtype(ctx, *inputs)
        shapes = {tuple(np.shape(v)) for v in inputs}
        if len(shapes) > 1:
            raise ModelExecutionError(f"{ctx.op}: all inputs must have one shape, got {sorted(shapes)}")
        with np.errstate(all="ignore"):
            total = inputs[0]
            for v in inputs[1:]:
                total = total + v
            return clamp_to_activation_range(ctx.xp, total, "NONE")
