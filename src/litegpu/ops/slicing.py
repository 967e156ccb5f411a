"""Ops that select, scatter or reorder elements: slices, gathers, scatters.

Index math follows the official kernels (strided_slice.cc and its reference
header, gather.cc, gather_nd.cc, scatter_nd.cc, dynamic_update_slice.cc).
Indices that the official runtime rejects when out of range (GATHER,
GATHER_ND, SCATTER_ND, EMBEDDING_LOOKUP) raise in the reference backend; under
XLA a data-dependent error cannot be raised, so out-of-range reads there are
clamped (jax's gather semantics) and out-of-range scatters are dropped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ModelExecutionError, UnsupportedOpError
from . import _block_weights as bw
from ._common import constant_tensor
from .registry import Op, OpContext, register
from .shape import ANY_DTYPE, normalize_axis, static_ints

INDEX_DTYPES = ("int32", "int64")
HYBRID_TABLES = ("int8", "uint8", "int4")  # EMBEDDING_LOOKUP tables that dequantize to a float32 output


def _is_static(value: Any) -> bool:
    return isinstance(value, np.ndarray)


@register("SLICE")
class Slice(Op):
    dtypes = ANY_DTYPE

    def compute(self, ctx: OpContext, x: Any, begin: Any, size: Any) -> Any:
        if ctx.target.is_xla and not _is_static(begin):
            return self._dynamic_begin_slice(ctx, x, begin, size)
        begins = static_ints(ctx, begin, "begin")
        sizes = static_ints(ctx, size, "size")
        if len(begins) != x.ndim or len(sizes) != x.ndim:
            raise ModelExecutionError(f"{ctx.op}: begin {begins} and size {sizes} need {x.ndim} values each")
        index = []
        for axis, (b, s, dim) in enumerate(zip(begins, sizes, x.shape)):
            end = dim if s == -1 else b + s
            if not (0 <= b <= dim and b <= end <= dim):
                raise ModelExecutionError(f"{ctx.op}: slice [{b}, {b}+{s}) is outside axis {axis} of size {dim}")
            index.append(slice(b, end))
        return x[tuple(index)]

    def _dynamic_begin_slice(self, ctx: OpContext, x: Any, begin: Any, size: Any) -> Any:
        """A begin computed while running (a WHILE loop's counter) with static sizes: ``lax.dynamic_slice``.

        In-range begins give exactly the official result. The official kernel fails on a begin
        that puts the slice outside the tensor; XLA cannot fail at run time, so such a slice is
        moved back inside the tensor (begin clamped to [0, dim - size], dynamic_slice's rule).
        """
        sizes = static_ints(ctx, size, "size")
        if len(sizes) != x.ndim or tuple(np.shape(begin)) != (x.ndim,):
            raise ModelExecutionError(f"{ctx.op}: begin {tuple(np.shape(begin))} and size {sizes} need "
                                      f"{x.ndim} values each")
        if any(s < 0 for s in sizes):
            raise UnsupportedOpError(f"{ctx.op}: size -1 with a begin computed while running gives an output "
                                     "shape known only at run time")
        if any(s > d for s, d in zip(sizes, x.shape)):
            raise ModelExecutionError(f"{ctx.op}: size {sizes} is larger than the input shape {tuple(x.shape)}")
        return ctx.lax.dynamic_slice(x, [begin[i] for i in range(x.ndim)], sizes)


# ---- STRIDED_SLICE -------------------------------------------------------------------------------

@dataclass
class _AxisSlice:
    start: int
    stop: int   # may be -1 for a backward slice that runs to the first element
    stride: int
    shrink: bool

    @property
    def length(self) -> int:
        return len(range(self.start, self.stop, self.stride))

    def as_slice(self) -> slice:
        if self.length == 0:
            return slice(0, 0)
        return slice(self.start, None if self.stop < 0 else self.stop, self.stride)


def _bit(mask: int, i: int) -> bool:
    return bool(mask & (1 << i))


def _effective_params(ctx: OpContext, rank: int, begin: list[int], end: list[int], strides: list[int]):
    """The official BuildStridedSliceParams: expand the ellipsis and new axes.

    Returns the effective input shape's source (input axis or None for a new
    axis) and per effective axis (begin, end, stride, begin_mask, end_mask, shrink).
    """
    o = ctx.options
    ellipsis_mask, new_axis_mask = int(o.get("ellipsis_mask", 0)), int(o.get("new_axis_mask", 0))
    begin_mask, end_mask = int(o.get("begin_mask", 0)), int(o.get("end_mask", 0))
    shrink_mask = int(o.get("shrink_axis_mask", 0))
    count = len(begin)
    num_add_axis = sum(1 for i in range(count) if not _bit(ellipsis_mask, i) and _bit(new_axis_mask, i))
    dims = rank + num_add_axis

    eff_ellipsis, eff_new = set(), set()
    ellipsis_start, expanded = dims, 0
    i = 0
    while i < dims:
        if _bit(ellipsis_mask, i):
            ellipsis_start = i
            ellipsis_end = max(i + 1, min(i + 1 + num_add_axis + rank - count, dims))
            expanded = ellipsis_end - ellipsis_start - 1
            eff_ellipsis.update(range(i, ellipsis_end))
            i = ellipsis_end
            continue
        if _bit(new_axis_mask, i - expanded):
            eff_new.add(i)
        i += 1

    axes = []  # (input axis or None, begin, end, stride, begin_masked, end_masked, shrink)
    added_ellipsis = added_axes = 0
    for i in range(dims):
        if i in eff_ellipsis:
            added_ellipsis = max(0, i - ellipsis_start)
            axes.append((i - added_axes, 0, 0, 1, True, True, False))
        elif i in eff_new:
            axes.append((None, 0, 1, 1, False, False, False))
            added_axes += 1
        elif i >= count + expanded:
            axes.append((i - added_axes, 0, 0, 1, True, True, False))
        else:
            j = i - added_ellipsis
            axes.append((i - added_axes, begin[j], end[j], strides[j], _bit(begin_mask, j), _bit(end_mask, j),
                         _bit(shrink_mask, j)))
    return axes


def _clamp(v: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, v))


def _resolve_axis(size: int, b: int, e: int, stride: int, begin_masked: bool, end_masked: bool,
                  shrink: bool, offset: bool) -> _AxisSlice:
    """StartForAxis / EndForAxis of the official reference kernel."""
    start = b + size if b < 0 else b
    start = _clamp(start, 0, size) if stride > 0 else _clamp(start, -1, size - 1)
    if begin_masked:
        start = 0 if stride > 0 else size - 1
    if shrink:
        return _AxisSlice(start, start if start >= size else start + 1, 1, True)
    stop = e + start if offset else e
    if stop < 0:
        stop += size
    stop = _clamp(stop, 0, size) if stride > 0 else _clamp(stop, -1, size - 1)
    if end_masked:
        stop = size if stride > 0 else -1
    return _AxisSlice(start, stop, stride, False)


@register("STRIDED_SLICE")
class StridedSlice(Op):
    dtypes = ANY_DTYPE

    def _plan(self, ctx: OpContext, shape: tuple, begin: Any, end: Any, strides: Any):
        begins = static_ints(ctx, begin, "begin")
        ends = static_ints(ctx, end, "end")
        steps = static_ints(ctx, strides, "strides")
        if not (len(begins) == len(ends) == len(steps)) or len(begins) > 31:
            raise ModelExecutionError(f"{ctx.op}: begin, end and strides need the same length (at most 31), "
                                      f"got {len(begins)}, {len(ends)}, {len(steps)}")
        if 0 in steps:
            raise ModelExecutionError(f"{ctx.op}: strides {steps} must be non-zero")
        offset = bool(ctx.options.get("offset", False))
        effective_shape, plan = [], []
        for src, b, e, s, bm, em, shrink in _effective_params(ctx, len(shape), begins, ends, steps):
            size = 1 if src is None else int(shape[src])
            effective_shape.append(size)
            axis = _resolve_axis(size, b, e, s, bm, em, shrink, offset)
            if shrink and axis.length == 0:
                raise ModelExecutionError(f"{ctx.op}: shrink index {b} is out of range for an axis of size {size}")
            plan.append(axis)
        return effective_shape, plan

    def compute(self, ctx: OpContext, x: Any, begin: Any, end: Any, strides: Any) -> Any:
        if ctx.target.is_xla and not _is_static(begin) and ctx.options.get("offset", False):
            return self._dynamic_offset_slice(ctx, x, begin, end, strides)
        if ctx.target.is_xla and not (_is_static(begin) and _is_static(end)):
            return self._dynamic_index_slice(ctx, x, begin, end, strides)
        effective_shape, plan = self._plan(ctx, tuple(x.shape), begin, end, strides)
        y = ctx.xp.reshape(x, tuple(effective_shape))[tuple(a.as_slice() for a in plan)]
        return ctx.xp.reshape(y, tuple(a.length for a in plan if not a.shrink))

    def _dynamic_offset_slice(self, ctx: OpContext, x: Any, begin: Any, end: Any, strides: Any) -> Any:
        """With ``offset`` the sizes are static while the begin may be computed: a dynamic slice.

        Only the plain form is lowered (no masks but shrink, positive strides,
        one begin per axis); begins are wrapped like negative indices, and the
        slice is kept inside the tensor as ``lax.dynamic_slice`` does.
        """
        o = ctx.options
        sizes, steps = static_ints(ctx, end, "end"), static_ints(ctx, strides, "strides")
        shrink = int(o.get("shrink_axis_mask", 0))
        if (o.get("begin_mask", 0) or o.get("end_mask", 0) or o.get("ellipsis_mask", 0)
                or o.get("new_axis_mask", 0) or len(sizes) != x.ndim or any(s <= 0 for s in steps)):
            raise UnsupportedOpError(f"{ctx.op}: a computed begin is supported only with offset, positive "
                                     "strides, one begin per axis and no masks other than shrink_axis_mask")
        jnp, lax = ctx.xp, ctx.lax
        sizes = [1 if _bit(shrink, i) else min(max(s, 0), d) for i, (s, d) in enumerate(zip(sizes, x.shape))]
        starts = [jnp.where(begin[i] < 0, begin[i] + x.shape[i], begin[i]) for i in range(x.ndim)]
        starts = [jnp.clip(s, 0, d - n) for s, d, n in zip(starts, x.shape, sizes)]
        y = lax.dynamic_slice(x, starts, sizes)
        y = y[tuple(slice(None, None, s) for s in steps)]
        return jnp.reshape(y, tuple(d for i, d in enumerate(y.shape) if not _bit(shrink, i)))

    def _dynamic_index_slice(self, ctx: OpContext, x: Any, begin: Any, end: Any, strides: Any) -> Any:
        """A computed begin / end without ``offset``: only ``x[i]``-like slices have a static shape.

        Each axis must either shrink (one element at the computed begin; end is ignored) or take
        the whole axis (begin and end masked). A negative begin counts from the end as in the
        official kernel; an out-of-range one, an error there, is clamped into the axis here.
        """
        o = ctx.options
        rank, steps = x.ndim, static_ints(ctx, strides, "strides")
        shrink, begin_mask, end_mask = (int(o.get(k, 0)) for k in ("shrink_axis_mask", "begin_mask", "end_mask"))
        shrunk = [_bit(shrink, i) for i in range(rank)]
        whole = [_bit(begin_mask, i) and _bit(end_mask, i) for i in range(rank)]
        if (o.get("ellipsis_mask", 0) or o.get("new_axis_mask", 0) or len(steps) != rank
                or tuple(np.shape(begin)) != (rank,) or not all(shrunk[i] or whole[i] for i in range(rank))):
            raise UnsupportedOpError(f"{ctx.op}: a begin or end computed while running is supported only when "
                                     "every axis either shrinks or is taken whole (begin and end masked)")
        if 0 in steps:
            raise ModelExecutionError(f"{ctx.op}: strides {steps} must be non-zero")
        jnp = ctx.xp

        def start(i: int) -> Any:  # a shrunk axis with its begin masked takes element 0, as StartForAxis does
            if not shrunk[i] or _bit(begin_mask, i):
                return 0
            return jnp.where(begin[i] < 0, begin[i] + x.shape[i], begin[i])

        sizes = [1 if shrunk[i] else x.shape[i] for i in range(rank)]
        starts = [jnp.asarray(start(i)).astype(begin.dtype) for i in range(rank)]  # dynamic_slice wants one type
        y = ctx.lax.dynamic_slice(x, starts, sizes)
        y = y[tuple(slice(None) if shrunk[i] else slice(None, None, steps[i]) for i in range(rank))]
        return jnp.reshape(y, tuple(d for i, d in enumerate(y.shape) if not shrunk[i]))


# ---- gathers and scatters ------------------------------------------------------------------------

def _check_indices(ctx: OpContext, indices: Any, limits: Any, what: str) -> None:
    """Reference-only range check (a traced value cannot raise)."""
    if not _is_static(indices) or indices.size == 0:
        return
    bad = (indices < 0) | (indices >= np.asarray(limits))
    if bad.any():
        raise ModelExecutionError(f"{ctx.op}: {what} {indices[bad].reshape(-1)[0]} is out of range "
                                  f"(valid: 0 <= index < {np.asarray(limits).tolist()})")


def _circle_table(dtype: str) -> bool:
    return bw.is_block_weight(dtype) or dtype in bw.MX_TYPES or dtype == "uint4"


def _circle_table_reason(op: Any, subgraph: Any) -> str | None:
    """A table of circle's own weight types is dequantized by the gather (``_block_weights``): rows of a
    [units, depth] constant picked along axis 0, as onert's ``ggml_get_rows``."""
    table, indices = subgraph.tensors[op.inputs[0]], subgraph.tensors[op.inputs[1]]
    out = subgraph.tensors[op.outputs[0]]
    if table.dtype in bw.MX_TYPES:
        return f"{table.dtype} params: {bw.MX_REFUSAL}"
    if out.dtype != "float32":
        return f"{table.dtype} params are dequantized: the output must be float32, not {out.dtype}"
    if len(table.shape) != 2 or op.options.get("batch_dims", 0) != 0 or op.options.get("axis", 0) not in (0, -2):
        return (f"{table.dtype} params are gathered by rows: a [units, depth] table, axis 0 and no batch dims "
                f"(got shape {list(table.shape)}, axis {op.options.get('axis', 0)}, batch_dims "
                f"{op.options.get('batch_dims', 0)})")
    if indices.dtype not in ("int32", "int64"):
        return f"indices of type {indices.dtype} are not supported"
    return bw.block_reason(table, "params") if bw.is_block_weight(table.dtype) else bw.uint4_reason(table, "params")


@register("GATHER")
class Gather(Op):
    dtypes = ANY_DTYPE

    def unsupported_reason(self, op, subgraph, target):
        if _circle_table(subgraph.tensors[op.inputs[0]].dtype):
            return _circle_table_reason(op, subgraph)
        return super().unsupported_reason(op, subgraph, target)

    def builtin_lowering(self, op, subgraph, g) -> bool:
        """A q4_0 / q8_0 table as its ggml bytes (uint8 rows), the rows picked gathered and decoded by builtin
        ops: the float16 scales bitcast out of the blocks, the quants sliced (q4_0's nibbles split by FLOOR of a
        16th), times the scale: ``ggml_get_rows`` exactly, where XLA's call cost more than the work (a
        gather of 16 rows: 0.3 ms against onert's 0.02)."""
        table = subgraph.tensors[op.inputs[0]]
        if table.dtype not in ("ggml_q4_0", "ggml_q8_0") or _circle_table_reason(op, subgraph) is not None:
            return False
        units, depth = table.shape
        layout, blocks = bw.GGML[table.dtype], depth // bw.BLOCK
        picked_shape = g.shape(op.inputs[1])
        rows = math.prod(picked_shape)

        def sliced(x: int, begin: int, width: int) -> int:
            return g.op("SLICE", [x, g.constant(np.array([0, 0, begin], np.int32)),
                                  g.constant(np.array([rows, blocks, width], np.int32))], (rows, blocks, width),
                        dtype="uint8")

        raw = g.constant(table.raw.reshape(units, blocks * layout.block_bytes))
        picked = g.op("GATHER", [raw, op.inputs[1]], (*picked_shape, blocks * layout.block_bytes), dtype="uint8",
                      axis=0)
        picked = g.op("RESHAPE", [picked, g.constant(np.array([rows, blocks, layout.block_bytes], np.int32))],
                      (rows, blocks, layout.block_bytes), dtype="uint8")
        halves = g.op("BITCAST", [sliced(picked, 0, 2)], (rows, blocks), dtype="float16")
        scale = g.op("RESHAPE", [g.op("DEQUANTIZE", [halves], (rows, blocks)),
                                 g.constant(np.array([rows, blocks, 1], np.int32))], (rows, blocks, 1))
        stored = sliced(picked, 2, layout.block_bytes - 2)
        if layout.bits == 8:
            quants = g.op("CAST", [g.op("BITCAST", [stored], (rows, blocks, bw.BLOCK), dtype="int8")],
                          (rows, blocks, bw.BLOCK))
        else:  # element j is the low nibble of byte j, element j + 16 its high nibble; in float32, exactly
            # (FLOOR_MOD / FLOOR_DIV by a scalar take the official kernels' slow broadcast: 0.6 ms for 16 rows)
            half = (rows, blocks, bw.BLOCK // 2)
            both = g.op("CAST", [stored], half)
            high = g.op("FLOOR", [g.op("MUL", [both, g.constant(np.array(1 / 16, np.float32))], half)], half)
            low = g.op("SUB", [both, g.op("MUL", [high, g.constant(np.array(16, np.float32))], half)], half)
            quants = g.op("SUB", [g.op("CONCATENATION", [low, high], (rows, blocks, bw.BLOCK), axis=2),
                                  g.constant(np.array(layout.centre, np.float32))], (rows, blocks, bw.BLOCK))
        values = g.op("MUL", [quants, scale], (rows, blocks, bw.BLOCK))
        g.op("RESHAPE", [values, g.constant(np.array(g.shape(op.outputs[0]), np.int32))], g.shape(op.outputs[0]),
             output=op.outputs[0])
        return True

    def compute(self, ctx: OpContext, x: Any, indices: Any) -> Any:
        if _circle_table(ctx.input(0).dtype):
            _check_indices(ctx, indices, ctx.input(0).shape[0], "index")
            return bw.gather_rows(ctx, x, indices)
        if x.ndim == 0:
            raise ModelExecutionError(f"{ctx.op}: cannot gather from a scalar")
        axis = normalize_axis(ctx, int(ctx.options.get("axis", 0)), x.ndim)
        batch_dims = int(ctx.options.get("batch_dims", 0))
        if batch_dims < 0:
            batch_dims += indices.ndim
        if not (0 <= batch_dims <= axis and batch_dims <= indices.ndim) \
                or tuple(x.shape[:batch_dims]) != tuple(indices.shape[:batch_dims]):
            raise ModelExecutionError(f"{ctx.op}: batch_dims {batch_dims} does not fit params {tuple(x.shape)}, "
                                      f"indices {tuple(indices.shape)} and axis {axis}")
        _check_indices(ctx, indices, x.shape[axis], "index")
        xp = ctx.xp
        batch = math.prod(x.shape[:batch_dims])
        outer = math.prod(x.shape[batch_dims:axis])
        inner = math.prod(x.shape[axis + 1:])
        # asarray: a constant table (numpy) indexed by run-time indices must become a jax array first
        xr = xp.reshape(xp.asarray(x), (batch, outer, x.shape[axis], inner))
        ir = xp.reshape(indices, (batch, math.prod(indices.shape[batch_dims:])))
        b = np.arange(batch).reshape(batch, 1, 1)
        m = np.arange(outer).reshape(1, outer, 1)
        y = xr[b, m, ir[:, None, :]]  # (batch, outer, k, inner)
        return xp.reshape(y, tuple(x.shape[:axis]) + tuple(indices.shape[batch_dims:]) + tuple(x.shape[axis + 1:]))


@register("GATHER_ND")
class GatherNd(Op):
    dtypes = ANY_DTYPE

    def compute(self, ctx: OpContext, x: Any, indices: Any) -> Any:
        if indices.ndim == 0 or indices.shape[-1] > x.ndim:
            raise ModelExecutionError(f"{ctx.op}: indices {tuple(indices.shape)} must end in at most "
                                      f"{x.ndim} (the params' rank)")
        k = indices.shape[-1]
        _check_indices(ctx, indices, np.asarray(x.shape[:k]), "index")
        return ctx.xp.asarray(x)[tuple(indices[..., i] for i in range(k))]  # a constant table: see GATHER


@register("SCATTER_ND")
class ScatterNd(Op):
    dtypes = ANY_DTYPE

    def input_dtype(self, op, subgraph):
        return subgraph.tensors[op.inputs[1]].dtype

    def compute(self, ctx: OpContext, indices: Any, updates: Any, shape: Any) -> Any:
        out_shape = tuple(static_ints(ctx, shape, "shape"))
        k = indices.shape[-1] if indices.ndim else 0
        if (indices.ndim == 0 or k > len(out_shape)
                or tuple(updates.shape) != tuple(indices.shape[:-1]) + out_shape[k:]):
            raise ModelExecutionError(f"{ctx.op}: indices {tuple(indices.shape)} and updates "
                                      f"{tuple(updates.shape)} do not fit shape {out_shape}")
        _check_indices(ctx, indices, np.asarray(out_shape[:k]), "index")
        where = tuple(indices[..., i] for i in range(k))
        if ctx.target.is_xla:
            zeros = ctx.xp.zeros(out_shape, updates.dtype)
            if updates.dtype == bool:  # duplicates are or-ed: the official kernel adds into a bool
                return zeros.at[where].max(updates, mode="drop")
            return zeros.at[where].add(updates, mode="drop")
        out = np.zeros(out_shape, updates.dtype)
        if updates.dtype == bool:
            np.logical_or.at(out, where, updates)
        else:
            np.add.at(out, where, updates)
        return out


def clamped_update_starts(xp: Any, operand_shape: tuple, update_shape: tuple, starts: Any) -> list:
    """DYNAMIC_UPDATE_SLICE's start indices as the official kernel takes them: each clamped so that the update
    fits (never wrapped as Python wraps negative indices).  The XLA backend's decode loop writes a layer's
    update into its stacked KV cache with these too."""
    return [xp.clip(starts[i], 0, operand_shape[i] - update_shape[i]) for i in range(len(operand_shape))]


@register("DYNAMIC_UPDATE_SLICE")
class DynamicUpdateSlice(Op):
    dtypes = ANY_DTYPE

    def _check(self, ctx: OpContext, x: Any, update: Any, starts: Any) -> None:
        if update.ndim != x.ndim or any(u > d for u, d in zip(update.shape, x.shape)) \
                or tuple(starts.shape) != (x.ndim,):
            raise ModelExecutionError(f"{ctx.op}: update {tuple(update.shape)} and start indices "
                                      f"{tuple(starts.shape)} do not fit operand {tuple(x.shape)}")

    def reference(self, ctx: OpContext, x: np.ndarray, update: np.ndarray, starts: np.ndarray) -> np.ndarray:
        self._check(ctx, x, update, starts)
        begin = clamped_update_starts(np, x.shape, update.shape, starts.astype(np.int64))
        out = np.array(x, copy=True)
        out[tuple(slice(int(b), int(b) + u) for b, u in zip(begin, update.shape))] = update
        return out

    def lower(self, ctx: OpContext, x: Any, update: Any, starts: Any) -> Any:
        self._check(ctx, x, update, starts)
        # Clamp here: lax would first wrap negative starts like Python indices.
        begin = clamped_update_starts(ctx.xp, x.shape, update.shape, starts)
        return ctx.lax.dynamic_update_slice(x, update.astype(x.dtype), begin)


@register("REVERSE_V2")
class ReverseV2(Op):
    dtypes = ANY_DTYPE

    def compute(self, ctx: OpContext, x: Any, axis: Any) -> Any:
        axes = {normalize_axis(ctx, a, x.ndim) for a in static_ints(ctx, axis, "axis")}
        return ctx.xp.flip(x, tuple(sorted(axes))) if axes else x


@register("EMBEDDING_LOOKUP")
class EmbeddingLookup(Op):
    """Rows of a table.  As the official kernel: a table whose type is the output's (float32, any integer
    type, bool; quantized or not) is copied row by row.  An int8 / uint8 / int4 table with a float32
    output is the hybrid kernel: the rows come out as ``value * scale`` (the row's own scale when there is
    one per row); it reads uint8 bytes as int8, and the official Prepare refuses a non-zero zero point."""

    dtypes = ANY_DTYPE + ("int4",)

    def input_dtype(self, op, subgraph):
        return subgraph.tensors[op.inputs[1]].dtype

    def unsupported_reason(self, op, subgraph, target):
        reason = super().unsupported_reason(op, subgraph, target)
        table, out = subgraph.tensors[op.inputs[1]], subgraph.tensors[op.outputs[0]]
        if reason is not None or (table.dtype == out.dtype and table.dtype != "int4"):
            return reason
        if table.dtype not in HYBRID_TABLES or out.dtype != "float32":
            return f"a {table.dtype} table with a {out.dtype} output is not supported (the output takes the " \
                   f"table's type, or float32 for an int8 / uint8 / int4 table)"
        if _blockwise_table(table):
            details = table.quantization.details
            if int(details.get("zero_points", -1)) >= 0:
                return "a blockwise table with zero points is not supported (the converter writes none)"
            return None
        if table.quantization is None or not table.quantization.is_affine:
            return f"a {table.dtype} table with float32 output needs a quantization scale"
        if any(int(z) != 0 for z in table.quantization.zero_point or ()):
            return f"a {table.dtype} table with float32 output needs zero points 0 (the official kernel's check)"
        return None

    def compute(self, ctx: OpContext, ids: Any, table: Any) -> Any:
        if ids.ndim != 1 or table.ndim < 2:
            raise ModelExecutionError(f"{ctx.op}: expected 1-D ids and a table of rank >= 2, got "
                                      f"{tuple(ids.shape)} and {tuple(table.shape)}")
        _check_indices(ctx, ids, table.shape[0], "id")
        rows = ctx.xp.asarray(table)[ids]  # a numpy table cannot be indexed by traced ids
        if ctx.output(0).dtype == ctx.input(1).dtype:
            return rows
        xp = ctx.xp
        if _blockwise_table(ctx.input(1)):
            return _blockwise_rows(ctx, xp, ids, rows, table.shape)
        scales = np.asarray(ctx.input(1).quantization.scale, np.float32)
        if scales.size > 1:
            if scales.size != table.shape[0]:
                raise ModelExecutionError(f"{ctx.op}: table has {scales.size} scales for {table.shape[0]} rows")
            scale = xp.asarray(scales)[ids].reshape((-1,) + (1,) * (table.ndim - 1))
        else:
            scale = scales[0]
        return rows.astype(xp.int8).astype(xp.float32) * scale


def _blockwise_table(t: Any) -> bool:
    """An int4 table quantized in blocks along its rows (litert-torch's ``dynamic_int4_block32`` LLMs)."""
    details = t.quantization.details if t.quantization is not None else None
    return details is not None and details.get("type") == "BlockwiseQuantization"


def _blockwise_rows(ctx: OpContext, xp: Any, ids: Any, rows: Any, table_shape: tuple) -> Any:
    """Rows of a blockwise table as float32: each block of ``block_size`` values times its own float16 scale
    (the scales tensor is [rows, dim / block_size]; checked against the official kernel on a converter model)."""
    details = ctx.input(1).quantization.details
    block = int(details.block_size)
    dim = int(np.prod(table_shape[1:]))
    if block <= 0 or dim % block:
        raise ModelExecutionError(f"{ctx.op}: block size {block} does not divide the row length {dim}")
    scales = constant_tensor(ctx, int(details.scales)).astype(np.float32).reshape(table_shape[0], dim // block)
    picked = xp.asarray(scales)[ids]
    values = rows.astype(xp.float32).reshape(-1, dim // block, block) * picked[:, :, None]
    return values.reshape((-1,) + tuple(table_shape[1:]))


@register("ONE_HOT")
class OneHot(Op):
    dtypes = INDEX_DTYPES

    def compute(self, ctx: OpContext, indices: Any, depth: Any, on_value: Any, off_value: Any) -> Any:
        d = static_ints(ctx, depth, "depth")
        if len(d) != 1 or d[0] < 0:
            raise ModelExecutionError(f"{ctx.op}: depth must be one non-negative value, got {d}")
        axis = int(ctx.options.get("axis", -1))
        rank = indices.ndim + 1
        if axis == -1:
            axis = rank - 1
        if not 0 <= axis < rank:
            raise ModelExecutionError(f"{ctx.op}: axis {axis} is out of range for output rank {rank}")
        xp = ctx.xp
        classes = xp.reshape(xp.arange(d[0], dtype=indices.dtype), (d[0],) + (1,) * (indices.ndim - axis))
        hot = xp.expand_dims(indices, axis) == classes
        return xp.where(hot, on_value, off_value)
