"""Activation functions (float; the quantized int8/uint8/int16 kernels are not implemented yet)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import ModelExecutionError
from .binary import broadcast_shape
from .registry import Op, OpContext, register

FLOATS = ("float32", "float16")


class _Activation(Op):
    dtypes = FLOATS

    def apply(self, ctx: OpContext, xp: Any, x: Any) -> Any:
        raise NotImplementedError

    def compute(self, ctx: OpContext, x: Any) -> Any:
        with np.errstate(all="ignore"):
            return self.apply(ctx, ctx.xp, x)


def _clip(xp: Any, x: Any, low: float, high: float) -> Any:
    return xp.clip(x, low, high).astype(x.dtype)


@register("RELU")
class Relu(_Activation):
    def apply(self, ctx, xp, x):
        return xp.maximum(x, 0).astype(x.dtype)


@register("RELU6")
class Relu6(_Activation):
    def apply(self, ctx, xp, x):
        return _clip(xp, x, 0, 6)


@register("RELU_N1_TO_1")
class ReluN1To1(_Activation):
    def apply(self, ctx, xp, x):
        return _clip(xp, x, -1, 1)


@register("RELU_0_TO_1")
class Relu0To1(_Activation):
    def apply(self, ctx, xp, x):
        return _clip(xp, x, 0, 1)


@register("LOGISTIC")
class Logistic(_Activation):
    def reference(self, ctx, x):
        with np.errstate(all="ignore"):
            return (1 / (1 + np.exp(-x.astype(np.float64)))).astype(x.dtype)

    def lower(self, ctx, x):
        return ctx.lax.logistic(x)


@register("TANH")
class Tanh(_Activation):
    def apply(self, ctx, xp, x):
        return xp.tanh(x)


@register("LEAKY_RELU")
class LeakyRelu(_Activation):
    def apply(self, ctx, xp, x):
        alpha = np.asarray(ctx.options.get("alpha", 0.0), dtype=x.dtype)
        return xp.where(x > 0, x, x * alpha)


@register("ELU")
class Elu(_Activation):
    def apply(self, ctx, xp, x):
        return xp.where(x < 0, xp.expm1(x), x)


@register("HARD_SWISH")
class HardSwish(_Activation):
    def apply(self, ctx, xp, x):
        return x * _clip(xp, x + 3, 0, 6) / np.asarray(6, x.dtype)


_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


@register("GELU")
class Gelu(_Activation):
    """0.5 x (1 + erf(x / sqrt 2)); with ``approximate`` the tanh form of the official kernel."""

    def reference(self, ctx, x):
        wide = x.astype(np.float64)
        with np.errstate(all="ignore"):  # -inf gives NaN, as in the official kernel
            if ctx.options.get("approximate", False):
                y = _gelu_tanh(np, wide)
            else:
                erfc = np.vectorize(math.erfc, otypes=[np.float64])
                y = 0.5 * wide * erfc(-wide / math.sqrt(2)) if wide.size else wide
        return np.asarray(y).astype(x.dtype)

    def lower(self, ctx, x):
        if ctx.options.get("approximate", False):
            return _gelu_tanh(ctx.xp, x)
        return 0.5 * x * ctx.lax.erfc(-x * np.asarray(1 / math.sqrt(2), x.dtype))


def _gelu_tanh(xp: Any, x: Any) -> Any:
    return 0.5 * x * (1 + xp.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))


@register("PRELU")
class Prelu(Op):
    """x where x >= 0, else alpha * x; alpha broadcasts to x's shape (usually per channel)."""

    dtypes = FLOATS

    def compute(self, ctx: OpContext, x: Any, alpha: Any) -> Any:
        if np.dtype(x.dtype) != np.dtype(alpha.dtype):
            raise ModelExecutionError(f"{ctx.op}: alpha must have the input's type {x.dtype}, got {alpha.dtype}")
        if broadcast_shape(ctx, x, alpha) != tuple(x.shape):
            raise ModelExecutionError(f"{ctx.op}: alpha {tuple(alpha.shape)} must broadcast to the input's "
                                      f"shape {tuple(x.shape)}")
        return ctx.xp.where(x >= 0, x, x * alpha)
