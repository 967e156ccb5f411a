"""Joining and splitting tensors along an axis: CONCATENATION, PACK, UNPACK, SPLIT, SPLIT_V.

Quantized inputs are copied unchanged when their quantization equals the
output's.  Where the official kernel accepts a different quantization
(uint8 CONCATENATION), the values are requantized the way it does:
``round(q * s_in / s_out - zp_in * s_in / s_out) + zp_out`` in float32.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ModelExecutionError, UnsupportedOpError
from .registry import Op, OpContext, register
from .shape import ANY_DTYPE, normalize_axis, static_ints


def _quant_params(t) -> tuple[float, int] | None:
    q = t.quantization
    if q is None or not q.is_affine:
        return None
    return float(q.scale[0]), int(q.zero_point[0]) if q.zero_point else 0


def _requantize_to_output(ctx: OpContext, values: list[Any]) -> list[Any]:
    """Bring quantized inputs to the output's scale (integer outputs only)."""
    out_q = _quant_params(ctx.output(0))
    dtype = ctx.output(0).dtype
    if out_q is None or dtype not in ("uint8", "int8", "int16"):
        return values
    xp = ctx.xp
    info = np.iinfo(dtype)
    out_scale, out_zp = out_q
    result = []
    for i, v in enumerate(values):
        in_q = _quant_params(ctx.input(i))
        if in_q is None or in_q == out_q:
            result.append(v)
            continue
        if dtype != "uint8":
            raise ModelExecutionError(f"{ctx.op}: {dtype} inputs must have the output's quantization "
                                      f"(input {i} has scale/zero point {in_q}, output {out_q})")
        scale = np.float32(in_q[0]) * (np.float32(1.0) / np.float32(out_scale))
        bias = np.float32(-in_q[1]) * scale
        real = v.astype(np.float32) * scale + bias
        q = xp.sign(real) * xp.floor(xp.abs(real) + np.float32(0.5))  # std::round: halves away from zero
        result.append(xp.clip(q.astype(np.int32) + out_zp, info.min, info.max).astype(v.dtype))
    return result


@register("CONCATENATION")
class Concatenation(Op):
    dtypes = ANY_DTYPE

    def compute(self, ctx: OpContext, *values: Any) -> Any:
        activation = ctx.options.get("fused_activation_function", "NONE")
        if activation not in (None, "NONE"):
            # The official kernel refuses a fused activation on CONCATENATION.
            raise UnsupportedOpError(f"{ctx.op}: a fused activation ({activation}) is not supported")
        first = values[0]
        if first.ndim == 0:  # scalars concatenate into a vector
            return ctx.xp.stack(_requantize_to_output(ctx, [ctx.xp.reshape(v, ()) for v in values]))
        axis = normalize_axis(ctx, int(ctx.options.get("axis", 0)), first.ndim)
        for i, v in enumerate(values):
            if v.ndim != first.ndim or any(a != b for d, (a, b) in enumerate(zip(v.shape, first.shape)) if d != axis):
                raise ModelExecutionError(f"{ctx.op}: input {i} of shape {tuple(v.shape)} does not match "
                                          f"input 0 of shape {tuple(first.shape)} outside axis {axis}")
        return ctx.xp.concatenate(_requantize_to_output(ctx, list(values)), axis=axis)


@register("PACK")
class Pack(Op):
    dtypes = ("float32", "int8", "uint8", "int16", "int32", "int64")  # the official PACK's types

    def compute(self, ctx: OpContext, *values: Any) -> Any:
        shape = tuple(values[0].shape)
        if any(tuple(v.shape) != shape for v in values):
            raise ModelExecutionError(f"{ctx.op}: all inputs need shape {shape}, got "
                                      f"{[tuple(v.shape) for v in values]}")
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
        return [ctx.xp.take(x, i, axis=axis) for i in range(num)]


@register("SPLIT")
class Split(Op):
    dtypes = ANY_DTYPE

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
    dtypes = ANY_DTYPE

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
