"""Joining and splitting tensors along an axis: CONCATENATION, PACK, UNPACK, SPLIT, SPLIT_V.

Quantized values are copied unchanged; the official kernels refuse a
quantization that differs from the output's (PACK, UNPACK, int8
CONCATENATION) or ignore it (int16 CONCATENATION, SPLIT), except uint8
CONCATENATION, which requantizes each input the way it does:
``round(q * s_in / s_out - zp_in * s_in / s_out) + zp_out`` in float32.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ModelExecutionError, UnsupportedOpError
from . import _fixedpoint as fp
from ._common import float32_steps
from .registry import Op, OpContext, register
from .shape import (
    ANY_DTYPE,
    legacy_quant_params,
    normalize_axis,
    require_int16_zero_points,
    require_same_quantization,
    static_ints,
)


def _requantize_uint8(ctx: OpContext, v: Any, in_q: tuple[float, int], out_q: tuple[float, int]) -> Any:
    """One input of ``ConcatenationWithScaling``: round(q * scale + bias) + zp_out in float32,
    with scale = s_in * (1 / s_out) and bias = -zp_in * scale, rounded half away from zero."""
    xp = ctx.xp
    scale = np.float32(in_q[0]) * (np.float32(1.0) / np.float32(out_q[0]))
    bias = np.float32(np.float32(-in_q[1]) * scale)
    product = float32_steps(ctx.lax, v.astype(xp.float64) * np.float64(scale))
    real = float32_steps(ctx.lax, product + np.float64(bias))
    q = fp.float_to_int32_like_x86(xp, fp.round_half_away_from_zero(xp, real)) + out_q[1]
    return xp.clip(q, 0, 255).astype(v.dtype)


def _concatenation_inputs(ctx: OpContext, values: list[Any]) -> list[Any]:
    """What the official kernel concatenates: uint8 inputs requantized to the output's
    scale; int8 inputs must already have it; int16 ones must be symmetric (then copied,
    whatever their scales)."""
    dtype = ctx.output(0).dtype
    if dtype == "int8":
        require_same_quantization(ctx, inputs=range(len(values)))
    elif dtype == "int16":
        require_int16_zero_points(ctx, [ctx.input(i) for i in range(len(values))] + [ctx.output(0)])
    elif dtype == "uint8":
        out_q = legacy_quant_params(ctx.output(0))
        return [v if legacy_quant_params(ctx.input(i)) == out_q else
                _requantize_uint8(ctx, v, legacy_quant_params(ctx.input(i)), out_q)
                for i, v in enumerate(values)]
    return values


@register("CONCATENATION")
class Concatenation(Op):
    dtypes = ANY_DTYPE

    def compute(self, ctx: OpContext, *values: Any) -> Any:
        activation = ctx.options.get("fused_activation_function", "NONE")
        if activation not in (None, "NONE"):
            # The official kernel refuses a fused activation on CONCATENATION.
            raise UnsupportedOpError(f"{ctx.op}: a fused activation ({activation}) is not supported")
        first = values[0]
        if first.ndim == 0:
            # Constant scalars: the official Prepare copies their bytes, never requantizing.
            return ctx.xp.stack([ctx.xp.reshape(v, ()) for v in values])
        axis = normalize_axis(ctx, int(ctx.options.get("axis", 0)), first.ndim)
        for i, v in enumerate(values):
            if v.ndim != first.ndim or any(a != b for d, (a, b) in enumerate(zip(v.shape, first.shape)) if d != axis):
                raise ModelExecutionError(f"{ctx.op}: input {i} of shape {tuple(v.shape)} does not match "
                                          f"input 0 of shape {tuple(first.shape)} outside axis {axis}")
        return ctx.xp.concatenate(_concatenation_inputs(ctx, list(values)), axis=axis)


@register("PACK")
class Pack(Op):
    dtypes = ("float32", "int8", "uint8", "int16", "int32", "int64")  # the official PACK's types

    def compute(self, ctx: OpContext, *values: Any) -> Any:
        shape = tuple(values[0].shape)
        if any(tuple(v.shape) != shape for v in values):
            raise ModelExecutionError(f"{ctx.op}: all inputs need shape {shape}, got "
                                      f"{[tuple(v.shape) for v in values]}")
        require_same_quantization(ctx, inputs=range(len(values)))
        axis = normalize_axis(ctx, int(ctx.options.get("axis", 0)), len(shape) + 1)
        return ctx.xp.stack(list(values), axis=axis)


def _split_along(xp: Any, x: Any, axis: int, sizes: list[int]) -> list[Any]:
    bounds = np.cumsum([0] + sizes)
    return [x[(slice(None),) * axis + (slice(int(a), int(b)),)] for a, b in zip(bounds[:-1], bounds[1:])]


@register("UNPACK")
class Unpack(Op):
    dtypes = ("float32", "float16", "int8", "uint8", "int16", "int32", "bool")  # the official UNPACK's types

    def compute(self, ctx: OpContext, x: Any) -> Any:
        axis = normalize_axis(ctx, int(ctx.options.get("axis", 0)), x.ndim)
        num = int(ctx.options.get("num", 0)) or x.shape[axis]
        if num != x.shape[axis]:
            raise ModelExecutionError(f"{ctx.op}: num={num} but axis {axis} of {tuple(x.shape)} has "
                                      f"{x.shape[axis]} entries")
        require_same_quantization(ctx, outputs=range(num))
        return [ctx.xp.take(x, i, axis=axis) for i in range(num)]


SPLITTABLE = ("float32", "int8", "uint8", "int16", "int32", "int64")  # the official SPLIT / SPLIT_V's types


@register("SPLIT")
class Split(Op):
    dtypes = SPLITTABLE

    def input_dtype(self, op, subgraph):
        return subgraph.tensors[op.inputs[1]].dtype

    def compute(self, ctx: OpContext, axis: Any, x: Any) -> Any:
        a = static_ints(ctx, axis, "the axis")
        if len(a) != 1:
            raise ModelExecutionError(f"{ctx.op}: axis must hold one value, got {a}")
        a = normalize_axis(ctx, a[0], x.ndim)
        n = int(ctx.options.get("num_splits", 0)) or len(ctx.op.outputs)
        if n <= 0 or x.shape[a] % n:
            raise ModelExecutionError(f"{ctx.op}: axis {a} of size {x.shape[a]} does not split into {n} parts")
        return _split_along(ctx.xp, x, a, [x.shape[a] // n] * n)


@register("SPLIT_V")
class SplitV(Op):
    dtypes = SPLITTABLE

    def compute(self, ctx: OpContext, x: Any, size_splits: Any, axis: Any) -> Any:
        a = static_ints(ctx, axis, "the axis")
        if len(a) != 1:
            raise ModelExecutionError(f"{ctx.op}: axis must hold one value, got {a}")
        a = normalize_axis(ctx, a[0], x.ndim)
        sizes = static_ints(ctx, size_splits, "size_splits")
        dim = x.shape[a]
        if sizes.count(-1) > 1 or any(s < -1 for s in sizes):
            raise ModelExecutionError(f"{ctx.op}: size_splits {sizes} may hold one -1 and no other negatives")
        if -1 in sizes:
            sizes[sizes.index(-1)] = dim - sum(s for s in sizes if s != -1)
        if sum(sizes) != dim or any(s < 0 for s in sizes):
            raise ModelExecutionError(f"{ctx.op}: size_splits {sizes} do not add up to axis {a}'s size {dim}")
        return _split_along(ctx.xp, x, a, sizes)
