"""DENSIFY (sparse constant -> dense) and UNIQUE (data-dependent output length)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import ModelExecutionError, ModelFormatError, UnsupportedOpError
from ..ir import Operator, Subgraph, numpy_dtype
from .registry import Op, OpContext, Target, register


# --------------------------------------------------------------------------- DENSIFY

def _index_vector(meta: Mapping, key: str) -> np.ndarray:
    vector = meta.get(key)
    if vector is None or vector.get("values") is None:
        return np.zeros(0, np.int64)
    values = vector["values"]
    if isinstance(values, bytes):  # a Uint8Vector: the IR keeps byte vectors as bytes
        return np.frombuffer(values, np.uint8).astype(np.int64)
    return np.asarray(values, np.int64)


def densify(values: np.ndarray, dense_shape: tuple[int, ...], sparsity: Mapping, where: str) -> np.ndarray:
    """TFLite's FormatConverter::SparseToDense: walk the traversal order, CSR levels and blocks.

    ``values`` are the stored non-zeros in traversal order; blocked dimensions
    (``block_map``) add inner levels whose index is combined with the block's.
    """
    order = [int(d) for d in (sparsity.get("traversal_order") or ())]
    block_map = [int(d) for d in (sparsity.get("block_map") or ())]
    levels = list(sparsity.get("dim_metadata") or ())
    rank = len(dense_shape)
    if len(order) != rank + len(block_map) or len(levels) != len(order) or sorted(order) != list(range(len(order))):
        raise ModelFormatError(f"{where}: sparsity has traversal_order {order}, block_map {block_map} and "
                               f"{len(levels)} dim_metadata entries for a rank-{rank} tensor")
    block_size = [int(levels[order.index(rank + j)].get("dense_size") or 0) for j in range(len(block_map))]
    dense = np.zeros(int(np.prod(dense_shape)), values.dtype)
    strides = np.array([int(np.prod(dense_shape[i + 1:])) for i in range(rank)], np.int64)
    formats = [lv.get("format") for lv in levels]
    segments = [_index_vector(lv, "array_segments") for lv in levels]
    indices_of = [_index_vector(lv, "array_indices") for lv in levels]
    cursor = 0

    def place(indices: list[int]) -> None:
        nonlocal cursor
        original = [0] * rank
        for i in range(rank):
            original[order[i]] = indices[i]
        for i in range(rank, len(order)):
            block = order[i] - rank
            dim = block_map[block]
            original[dim] = original[dim] * block_size[block] + indices[i]
        if cursor >= values.size:
            raise ModelFormatError(f"{where}: sparsity metadata address more values than the {values.size} stored")
        flat = int(np.dot(original, strides))
        if not 0 <= flat < dense.size:
            raise ModelFormatError(f"{where}: sparsity metadata address element {original} outside {list(dense_shape)}")
        dense[flat] = values[cursor]
        cursor += 1

    def walk(indices: list[int], level: int, previous: int) -> None:
        if level == len(levels):
            place(indices)
            return
        if formats[level] in ("DENSE", 0):
            size = int(levels[level].get("dense_size") or 0)
            for i in range(size):
                indices[level] = i
                walk(indices, level + 1, previous * size + i)
        elif previous + 1 < segments[level].size:
            seg, idx = segments[level], indices_of[level]
            for i in range(int(seg[previous]), int(seg[previous + 1])):
                if i < idx.size:
                    indices[level] = int(idx[i])
                    walk(indices, level + 1, i)

    walk([0] * len(levels), 0, 0)
    return dense.reshape(dense_shape)


@register("DENSIFY")
class Densify(Op):
    """Expands a sparse constant weight (TACO format) to its dense tensor; folded before running."""

    dtypes = ("float32", "float16", "int8")

    def reference(self, ctx: OpContext, _values: Any = None) -> np.ndarray:
        source = ctx.input(0)
        if source is None or source.sparsity is None or source.raw is None:
            raise ModelExecutionError(f"{ctx.op}: input must be a sparse constant tensor")
        # The stored bytes are the non-zeros only, not the dense shape.
        stored = source.raw.view(numpy_dtype(source.dtype))
        return densify(stored, tuple(ctx.output(0).shape or source.shape), source.sparsity, str(ctx.op))

    def lower(self, ctx: OpContext, _values: Any = None) -> Any:
        return ctx.xp.asarray(self.reference(ctx, _values))


# --------------------------------------------------------------------------- UNIQUE

@register("UNIQUE")
class Unique(Op):
    """y: the distinct values in order of first appearance; idx: where each input went (int32/int64)."""

    dtypes = ("float32", "int8", "int16", "uint8", "int32", "int64")
    data_dependent_shape = True

    def unsupported_reason(self, op: Operator, subgraph: Subgraph, target: Target) -> str | None:
        reason = super().unsupported_reason(op, subgraph, target)
        if reason is None and target.is_xla:
            return "output shape depends on data"
        return reason

    def reference(self, ctx: OpContext, x: Any) -> tuple[np.ndarray, np.ndarray]:
        x = np.asarray(x)
        if x.ndim != 1:
            raise ModelExecutionError(f"{ctx.op}: input must be 1-D, got shape {x.shape}")
        distinct, first, inverse = np.unique(x, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        idx_dtype = numpy_dtype(ctx.output(1).dtype)
        return distinct[order], rank[inverse.reshape(-1)].astype(idx_dtype)

    def lower(self, ctx: OpContext, *inputs: Any) -> Any:
        raise UnsupportedOpError(f"{ctx.op}: output shape depends on data; run it on the CPU reference")
