"""Segment reductions, diagonal matrices, REVERSE_SEQUENCE, SPARSE_TO_DENSE and BUCKETIZE.

Output sizes that the official runtime takes from input values (the number of
segments, a dense shape) must be known before running: they are read from the
model's constants when the inputs are constants, else from ``ctx.static``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ModelExecutionError
from .registry import Op, OpContext, register

NUMERIC = ("float32", "int32", "int64")


def _static_input(ctx: OpContext, i: int, value: Any) -> np.ndarray:
    constant = ctx.constant(i)
    return constant if constant is not None else ctx.static(value)


def _segment_reduce(ctx: OpContext, kind: str, data: Any, ids: Any, num_segments: int) -> Any:
    """Reduce the rows of ``data`` into ``num_segments`` rows; negative ids are dropped and
    empty segments hold the reduction's identity (the type's lowest/highest value for max/min)."""
    xp = ctx.xp
    if tuple(data.shape[:len(ids.shape)]) != tuple(ids.shape):
        raise ModelExecutionError(f"{ctx.op}: segment ids of shape {ids.shape} must be a prefix of the data "
                                  f"shape {data.shape}")
    dtype = np.dtype(str(data.dtype))
    info = np.finfo(dtype) if dtype.kind == "f" else np.iinfo(dtype)
    initial = {"sum": 0, "prod": 1, "max": info.min, "min": info.max}[kind]
    rows = xp.reshape(data, (-1,) + tuple(data.shape[len(ids.shape):]))
    flat_ids = xp.reshape(ids, (-1,)).astype("int32")
    out = xp.full((num_segments,) + tuple(rows.shape[1:]), initial, dtype=dtype)
    if ctx.lax is None:
        valid = (flat_ids >= 0) & (flat_ids < num_segments)
        ufunc = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}[kind]
        ufunc.at(out, flat_ids[valid], rows[valid])
        return out
    # negative ids would wrap around in jax indexing: send them out of range to be dropped
    safe_ids = xp.where(flat_ids < 0, num_segments, flat_ids)
    at = out.at[safe_ids]
    return {"sum": at.add, "prod": at.multiply, "max": at.max, "min": at.min}[kind](rows, mode="drop")


@register("SEGMENT_SUM")
class SegmentSum(Op):
    """Sums runs of rows with the same id; there are last id + 1 output rows."""

    dtypes = ("float32", "int32")
    data_dependent_shape = True

    def compute(self, ctx: OpContext, data: Any, ids: Any) -> Any:
        static_ids = _static_input(ctx, 1, ids)
        if static_ids.ndim != 1 or static_ids.shape[0] != data.shape[0]:
            raise ModelExecutionError(f"{ctx.op}: segment ids must be 1-D with one id per row of the data "
                                      f"{data.shape}, got shape {static_ids.shape}")
        # as the official kernel: ids start at 0 and each step adds 0 or 1 (no empty segments)
        steps = np.diff(static_ids)
        if static_ids.size and (static_ids[0] != 0 or np.any((steps != 0) & (steps != 1))):
            raise ModelExecutionError(f"{ctx.op}: segment ids must start at 0 and increase by 0 or 1, "
                                      f"got {static_ids.tolist()}")
        num_segments = int(static_ids.max()) + 1 if static_ids.size else 0
        return _segment_reduce(ctx, "sum", data, ids, num_segments)


class _UnsortedSegment(Op):
    kind = ""
    dtypes = NUMERIC

    def compute(self, ctx: OpContext, data: Any, ids: Any, num_segments: Any) -> Any:
        count = _static_input(ctx, 2, num_segments)
        if count.size != 1:
            raise ModelExecutionError(f"{ctx.op}: num_segments must be a single value, got shape {count.shape}")
        num = int(count.reshape(-1)[0])
        if isinstance(ids, np.ndarray) and ids.size and ids.max() >= num:
            raise ModelExecutionError(f"{ctx.op}: segment id {ids.max()} is not below num_segments {num}")
        return _segment_reduce(ctx, self.kind, data, ids, num)


@register("UNSORTED_SEGMENT_SUM")
class UnsortedSegmentSum(_UnsortedSegment):
    kind = "sum"


@register("UNSORTED_SEGMENT_PROD")
class UnsortedSegmentProd(_UnsortedSegment):
    kind = "prod"


@register("UNSORTED_SEGMENT_MAX")
class UnsortedSegmentMax(_UnsortedSegment):
    kind = "max"


@register("UNSORTED_SEGMENT_MIN")
class UnsortedSegmentMin(_UnsortedSegment):
    kind = "min"


def _diagonal_mask(xp: Any, rows: int, cols: int) -> Any:
    return xp.arange(rows)[:, None] == xp.arange(cols)[None, :]


@register("MATRIX_DIAG")
class MatrixDiag(Op):
    """[..., N] -> [..., N, N] with the values on the main diagonal."""

    # the official kernels give wrong results for bool (the data is not laid out as a diagonal)
    dtypes = ("float32", "int32", "int64", "uint8", "int8")

    def compute(self, ctx: OpContext, diagonal: Any) -> Any:
        xp = ctx.xp
        if len(diagonal.shape) < 1:
            raise ModelExecutionError(f"{ctx.op}: the diagonal must have at least one dimension")
        n = diagonal.shape[-1]
        return xp.where(_diagonal_mask(xp, n, n), diagonal[..., None, :], xp.zeros((), diagonal.dtype))


@register("MATRIX_SET_DIAG")
class MatrixSetDiag(Op):
    """Replaces the main diagonal of [..., M, N] matrices with [..., min(M, N)] values."""

    # the official kernels give wrong results for bool (the data is not laid out as a diagonal)
    dtypes = ("float32", "int32", "int64", "uint8", "int8")

    def compute(self, ctx: OpContext, x: Any, diagonal: Any) -> Any:
        xp = ctx.xp
        if len(x.shape) < 2:
            raise ModelExecutionError(f"{ctx.op}: the input must have at least two dimensions, got {x.shape}")
        m, n = x.shape[-2:]
        if tuple(diagonal.shape) != tuple(x.shape[:-2]) + (min(m, n),):
            raise ModelExecutionError(f"{ctx.op}: the diagonal must have shape {tuple(x.shape[:-2]) + (min(m, n),)}"
                                      f", got {diagonal.shape}")
        # spread the diagonal over the columns; only its entries on the diagonal are selected
        padded = xp.zeros(tuple(x.shape[:-2]) + (n,), x.dtype)
        padded = xp.concatenate([diagonal, padded[..., min(m, n):]], axis=-1)
        return xp.where(_diagonal_mask(xp, m, n), padded[..., None, :], x)


@register("REVERSE_SEQUENCE")
class ReverseSequence(Op):
    """Reverses the first seq_lengths[b] entries along seq_dim of each slice b along batch_dim."""

    dtypes = ("float32", "int32", "int64", "uint8", "int16")  # the official kernel refuses int8 and bool

    def compute(self, ctx: OpContext, x: Any, lengths: Any) -> Any:
        xp = ctx.xp
        rank = len(x.shape)
        seq_dim, batch_dim = int(ctx.options.seq_dim), int(ctx.options.batch_dim)
        if not (0 <= seq_dim < rank and 0 <= batch_dim < rank) or seq_dim == batch_dim:
            raise ModelExecutionError(f"{ctx.op}: seq_dim {seq_dim} and batch_dim {batch_dim} must be distinct "
                                      f"axes of the rank-{rank} input")
        if tuple(lengths.shape) != (x.shape[batch_dim],):
            raise ModelExecutionError(f"{ctx.op}: seq_lengths must have shape ({x.shape[batch_dim]},), "
                                      f"got {lengths.shape}")
        steps = xp.arange(x.shape[seq_dim])[None, :]
        n = lengths.astype("int32")[:, None]
        source = xp.where(steps < n, n - 1 - steps, steps)  # [batch, time]
        shape = [1] * rank
        shape[batch_dim], shape[seq_dim] = x.shape[batch_dim], x.shape[seq_dim]
        if batch_dim > seq_dim:
            source = source.T
        source = xp.broadcast_to(xp.reshape(source, shape), x.shape)
        return xp.take_along_axis(x, source, axis=seq_dim)


@register("SPARSE_TO_DENSE")
class SparseToDense(Op):
    """Scatters values (or one scalar) at indices [N, rank] / [N] / scalar into a default-filled array."""

    dtypes = ("int32", "int64")  # of the indices; values may be float32, int32, int64, int8, uint8

    def compute(self, ctx: OpContext, indices: Any, output_shape: Any, values: Any, default: Any) -> Any:
        xp = ctx.xp
        shape = tuple(int(d) for d in np.reshape(_static_input(ctx, 1, output_shape), (-1,)))
        idx = xp.reshape(indices, (-1, len(shape)) if len(indices.shape) == 2 else (-1, 1)).astype("int32")
        if idx.shape[1] != len(shape):
            raise ModelExecutionError(f"{ctx.op}: indices of shape {indices.shape} do not address an array "
                                      f"of shape {shape}")
        count = idx.shape[0]
        vals = xp.broadcast_to(xp.reshape(values, (-1,)), (count,)) if values.size == 1 else xp.reshape(values, (-1,))
        if vals.shape[0] != count:
            raise ModelExecutionError(f"{ctx.op}: {vals.shape[0]} values for {count} indices")
        out = xp.full(shape, xp.reshape(default, ()), dtype=values.dtype)
        where = tuple(idx[:, d] for d in range(len(shape)))
        if ctx.lax is None:
            out[where] = vals
            return out
        return out.at[where].set(vals, mode="drop")


@register("BUCKETIZE")
class Bucketize(Op):
    """The index of each value's bucket: how many boundaries are <= the value."""

    dtypes = ("float32", "int32", "int64")

    def compute(self, ctx: OpContext, x: Any) -> Any:
        xp = ctx.xp
        boundaries = np.asarray(ctx.options.boundaries, np.float32).reshape(-1)
        if np.any(np.diff(boundaries) < 0):
            raise ModelExecutionError(f"{ctx.op}: boundaries must be sorted, got {boundaries.tolist()}")
        return xp.searchsorted(xp.asarray(boundaries), x, side="right").astype("int32")
