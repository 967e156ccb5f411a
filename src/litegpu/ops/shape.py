"""Ops that change a tensor's shape or make tensors from shapes.

Shapes, permutations and multiples are static values: they come from
constants or from shape arithmetic that the graph runner folds with numpy.
SHAPE and RANK therefore return numpy arrays even inside an XLA trace (a jax
array's shape is static), so that the shape computations downstream fold.
None of these ops does arithmetic on the data, so quantized tensors pass
through with their values unchanged (the official kernels require equal
input and output quantization or simply copy bytes).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import ModelExecutionError
from ..ir import numpy_dtype
from .registry import Op, OpContext, register

# Types the official data-movement kernels copy without looking at the values.
ANY_DTYPE = ("float32", "float16", "int8", "uint8", "int16", "int32", "int64", "bool")


def static_ints(ctx: OpContext, value: Any, what: str) -> list[int]:
    """A static integer vector (or scalar) input, as python ints."""
    array = ctx.static(value)
    if array.dtype.kind not in "iu":
        raise ModelExecutionError(f"{ctx.op}: {what} must be integers, got {array.dtype}")
    return [int(v) for v in array.reshape(-1)]


QUANTIZED_DTYPES = ("int8", "uint8", "int16")


def legacy_quant_params(t: Any) -> tuple[float, int]:
    """The (scale, zero point) the official kernels compare: ``TfLiteTensor::params``,
    set only for a per-tensor quantization and (0, 0) otherwise; the scale as float32."""
    q = None if t is None else t.quantization
    if q is None or len(q.scale) != 1:
        return 0.0, 0
    return float(np.float32(q.scale[0])), int(q.zero_point[0]) if q.zero_point else 0


def require_same_quantization(ctx: OpContext, inputs: Any = (0,), outputs: Any = (0,),
                              dtypes: Any = None) -> None:
    """Refuse what the official Prepare refuses: a data-movement op whose inputs and
    outputs carry different scales or zero points (only for ``dtypes`` when given)."""
    first = ctx.input(inputs[0]) if inputs else None
    if dtypes is not None and (first is None or first.dtype not in dtypes):
        return
    tensors = [("input", i, ctx.input(i)) for i in inputs] + [("output", i, ctx.output(i)) for i in outputs]
    expected = legacy_quant_params(ctx.output(outputs[0]))
    for kind, i, t in tensors:
        if t is not None and legacy_quant_params(t) != expected:
            raise ModelExecutionError(f"{ctx.op}: {kind} {i} has scale/zero point {legacy_quant_params(t)} but "
                                      f"output {outputs[0]} has {expected}; this op cannot requantize")


def require_int16_zero_points(ctx: OpContext, tensors: Any) -> None:
    """The official int16 kernels take symmetric quantization only."""
    for t in tensors:
        if t is not None and t.dtype == "int16" and legacy_quant_params(t)[1] != 0:
            raise ModelExecutionError(f"{ctx.op}: int16 tensor {t.name!r} must have a zero point of 0, "
                                      f"has {legacy_quant_params(t)[1]}")


def normalize_axis(ctx: OpContext, axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < rank:
        raise ModelExecutionError(f"{ctx.op}: {what} {axis} is out of range for a rank-{rank} tensor "
                                  f"(expected [{-rank}, {rank - 1}])")
    return axis + rank if axis < 0 else axis


def output_dtype(ctx: OpContext, i: int = 0) -> np.dtype:
    return numpy_dtype(ctx.output(i).dtype)


def reshape_target(ctx: OpContext, num_elements: int, requested: list[int]) -> tuple[int, ...]:
    """Resolve one -1 the way the official kernel does; the element counts must then match."""
    if requested.count(-1) > 1:
        raise ModelExecutionError(f"{ctx.op}: new shape {requested} has more than one -1")
    known = math.prod(d for d in requested if d != -1)
    shape = list(requested)
    if -1 in shape:
        if known == 0:
            raise ModelExecutionError(f"{ctx.op}: cannot infer the -1 in {requested}: other dims multiply to 0")
        shape[shape.index(-1)] = num_elements // known
    if any(d < 0 for d in shape) or math.prod(shape) != num_elements:
        raise ModelExecutionError(f"{ctx.op}: cannot reshape {num_elements} elements into {requested}")
    return tuple(shape)


@register("RESHAPE")
class Reshape(Op):
    dtypes = ANY_DTYPE

    def _requested_shape(self, ctx: OpContext, shape: Any) -> list[int]:
        # The official kernel uses the shape input only if it is an int32 vector;
        # otherwise the options' new_shape, where the legacy [0] means a scalar.
        shape_tensor = ctx.input(1)
        if shape_tensor is not None and len(shape_tensor.shape) == 1 and shape_tensor.dtype == "int32":
            return static_ints(ctx, shape, "the new shape")
        new_shape = [int(d) for d in np.asarray(ctx.options.get("new_shape", ()) or ()).reshape(-1)]
        return [] if new_shape == [0] else new_shape

    def compute(self, ctx: OpContext, x: Any, shape: Any = None) -> Any:
        target = reshape_target(ctx, math.prod(x.shape), self._requested_shape(ctx, shape))
        return ctx.xp.reshape(x, target)


@register("SQUEEZE")
class Squeeze(Op):
    dtypes = ANY_DTYPE

    def compute(self, ctx: OpContext, x: Any) -> Any:
        dims = [int(d) for d in np.asarray(ctx.options.get("squeeze_dims", ()) or ()).reshape(-1)]
        if not dims:
            axes = tuple(i for i, d in enumerate(x.shape) if d == 1)
        else:
            axes = tuple(sorted({normalize_axis(ctx, d, x.ndim, "squeeze dim") for d in dims}))
            bad = [a for a in axes if x.shape[a] != 1]
            if bad:
                raise ModelExecutionError(f"{ctx.op}: cannot squeeze dims {bad} of shape {tuple(x.shape)}: "
                                          "they are not 1")
        return ctx.xp.reshape(x, tuple(d for i, d in enumerate(x.shape) if i not in axes))


@register("EXPAND_DIMS")
class ExpandDims(Op):
    dtypes = ANY_DTYPE

    def compute(self, ctx: OpContext, x: Any, axis: Any) -> Any:
        values = static_ints(ctx, axis, "the axis")
        if len(values) != 1:
            raise ModelExecutionError(f"{ctx.op}: axis must hold one value, got {values}")
        a = normalize_axis(ctx, values[0], x.ndim + 1)
        # the official Prepare (unlike RESHAPE's and SQUEEZE's) insists on one quantization
        require_same_quantization(ctx)
        require_int16_zero_points(ctx, [ctx.input(0)])
        return ctx.xp.reshape(x, tuple(x.shape[:a]) + (1,) + tuple(x.shape[a:]))


@register("TRANSPOSE")
class Transpose(Op):
    dtypes = ANY_DTYPE

    def compute(self, ctx: OpContext, x: Any, perm: Any) -> Any:
        values = static_ints(ctx, perm, "the permutation")
        if x.ndim > 6:
            raise ModelExecutionError(f"{ctx.op}: transposes tensors of rank at most 6, got rank {x.ndim}")
        if sorted(values) != list(range(x.ndim)):
            raise ModelExecutionError(f"{ctx.op}: {values} is not a permutation of the {x.ndim} axes")
        return ctx.xp.transpose(x, values)


@register("SHAPE")
class Shape(Op):
    dtypes = ANY_DTYPE

    def compute(self, ctx: OpContext, x: Any) -> Any:
        return np.asarray(x.shape, output_dtype(ctx)).reshape(len(x.shape))


@register("RANK")
class Rank(Op):
    dtypes = ANY_DTYPE

    def compute(self, ctx: OpContext, x: Any) -> Any:
        return np.asarray(np.ndim(x), output_dtype(ctx))


def broadcast_shapes(ctx: OpContext, a: list[int], b: list[int]) -> tuple[int, ...]:
    rank = max(len(a), len(b))
    a = [1] * (rank - len(a)) + list(a)
    b = [1] * (rank - len(b)) + list(b)
    out = []
    for da, db in zip(a, b):
        if da != db and 1 not in (da, db):
            raise ModelExecutionError(f"{ctx.op}: shapes {a} and {b} cannot be broadcast together")
        out.append(db if da == 1 else da)
    return tuple(out)


@register("BROADCAST_TO")
class BroadcastTo(Op):
    dtypes = ANY_DTYPE

    def compute(self, ctx: OpContext, x: Any, shape: Any) -> Any:
        target = tuple(static_ints(ctx, shape, "the shape"))
        if len(target) > 8 or x.ndim > len(target):
            raise ModelExecutionError(f"{ctx.op}: cannot broadcast rank {x.ndim} to shape {target} (at most rank 8)")
        if broadcast_shapes(ctx, list(x.shape), list(target)) != target:
            raise ModelExecutionError(f"{ctx.op}: shape {tuple(x.shape)} does not broadcast to {target}")
        return ctx.xp.broadcast_to(x, target)


@register("BROADCAST_ARGS")
class BroadcastArgs(Op):
    dtypes = ("int32", "int64")

    def compute(self, ctx: OpContext, a: Any, b: Any) -> Any:
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
            return self._traced(ctx, a, b)
        shape = broadcast_shapes(ctx, static_ints(ctx, a, "shape"), static_ints(ctx, b, "shape"))
        return np.asarray(shape, output_dtype(ctx)).reshape(len(shape))

    @staticmethod
    def _traced(ctx: OpContext, a: Any, b: Any) -> Any:
        """Shapes known only at run time: the broadcast rule as array ops (incompatible shapes go unchecked)."""
        xp = ctx.xp
        rank = max(a.shape[0], b.shape[0])
        a = xp.concatenate([xp.ones(rank - a.shape[0], a.dtype), a])
        b = xp.concatenate([xp.ones(rank - b.shape[0], b.dtype), b.astype(a.dtype)])
        return xp.where(a == 1, b, a)


@register("TILE")
class Tile(Op):
    dtypes = ANY_DTYPE

    def compute(self, ctx: OpContext, x: Any, multiples: Any) -> Any:
        reps = static_ints(ctx, multiples, "multiples")
        if len(reps) != x.ndim or any(r < 0 for r in reps):
            raise ModelExecutionError(f"{ctx.op}: expected {x.ndim} non-negative multiples, got {reps}")
        return ctx.xp.tile(x, reps)


@register("FILL")
class Fill(Op):
    dtypes = ("int32", "int64")  # the dims input's type; the value's type is checked below
    value_dtypes = ("float32", "float16", "int8", "int16", "int32", "int64", "bool")

    def unsupported_reason(self, op, subgraph, target):
        value = subgraph.tensors[op.inputs[1]] if len(op.inputs) > 1 and op.inputs[1] >= 0 else None
        if value is not None and value.dtype not in self.value_dtypes:
            return f"value type {value.dtype} is not supported (supported: {', '.join(self.value_dtypes)})"
        return super().unsupported_reason(op, subgraph, target)

    def compute(self, ctx: OpContext, dims: Any, value: Any) -> Any:
        shape = tuple(static_ints(ctx, dims, "dims"))
        if any(d < 0 for d in shape):
            raise ModelExecutionError(f"{ctx.op}: dims {shape} must be non-negative")
        if np.ndim(value) != 0:
            raise ModelExecutionError(f"{ctx.op}: the value must be a scalar, got shape {np.shape(value)}")
        return ctx.xp.full(shape, value, dtype=value.dtype)


@register("RANGE")
class Range(Op):
    dtypes = ("int32", "int64", "float32")

    def compute(self, ctx: OpContext, start: Any, limit: Any, delta: Any) -> Any:
        start, limit, delta = (ctx.static(v) for v in (start, limit, delta))
        if any(np.ndim(v) != 0 for v in (start, limit, delta)):
            raise ModelExecutionError(f"{ctx.op}: start, limit and delta must be scalars")
        s, lim, d = start.item(), limit.item(), delta.item()
        if d == 0 or not ((s >= lim and d < 0) or (s <= lim and d > 0)):
            raise ModelExecutionError(f"{ctx.op}: cannot go from {s} to {lim} in steps of {d}")
        dtype = start.dtype
        if dtype.kind in "iu":
            size = (abs(lim - s) + abs(d) - 1) // abs(d)
            return (s + np.arange(size, dtype=np.int64) * d).astype(dtype)
        # The official kernel accumulates (value += delta) in the tensor's float type.
        size = int(np.ceil(np.abs(dtype.type(lim - s) / dtype.type(d))))
        steps = np.full(size, d, dtype)
        if size:
            steps[0] = s
        return np.cumsum(steps, dtype=dtype)
