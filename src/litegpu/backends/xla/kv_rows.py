"""Attention over the filled part of a KV cache: a decode step traced for the cache's first ``rows`` positions.

A litert-torch decoder attends over its whole KV buffer at every decode step, the rows past the current position
masked: with a 4096-row cache the first tokens read as many cache bytes as the last (LiteRT-LM#2568).  The token
at position p reads no row past p, so a decode step whose positions are all below ``rows`` gives the same tokens
when its attention reads only the first ``rows`` rows of each cache and the first ``rows`` columns of the mask:
the rows left out had weight exp(-inf) = 0 (the sums over the rest are made in another order: float rounding).

``RowPlan.of`` finds how to trace that from the graph itself: each cache a DYNAMIC_UPDATE_SLICE updates gives the
positions axis (where the update is one row), the ops that read the updated cache read it cut to ``rows``, and the
cut axis is followed through the ops after them (composites' decompositions included) until a matrix product
contracts it away: shape constants of RESHAPE and BROADCAST_TO are re-derived for the shorter axis, and an
operand of an elementwise op that still has the full length (the mask) is cut as well.  The whole cache, updated in
place, stays the step's state.  Where an op would need more than that (it merges the positions with another axis,
slices or gathers along them), no plan is made and the reason says which op: the decode loop then reads the full
cache (``generate.DecodeLoop.full_cache_reason``).

``row_buckets`` are the lengths compiled: 256, 384, 512, 768, ... up to the capacity (two a doubling, so a step reads
at most 1.5x the rows it needs, where powers of two alone read up to 2x: 4096 rows at position 2048 of a 16-token
chunk).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from ...ir import Model, Subgraph, called_subgraphs, execution_order

SMALLEST_ROWS = 256         # the shortest bucket: below it a decode step's cache reads are small beside its weights
ROWS_ENV = "LITEGPU_KV_BUCKETS"  # "0" / "off": always the full cache; a number: the shortest bucket

_UNARY = frozenset({"CAST", "SOFTMAX", "LOGISTIC", "EXP", "NEG", "TANH", "ABS", "SQRT", "RSQRT"})
_BROADCASTING = frozenset({"ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM", "SELECT_V2"})


def smallest_rows_setting() -> int | None:
    """The shortest bucket ``LITEGPU_KV_BUCKETS`` asks for (default 256); None where it turns buckets off."""
    value = os.environ.get(ROWS_ENV, "").strip().lower()
    if not value:
        return SMALLEST_ROWS
    if value in ("0", "off", "false", "no"):
        return None
    try:
        rows = int(value)
    except ValueError:
        from ...errors import InvalidArgumentError

        raise InvalidArgumentError(f"${ROWS_ENV}={value!r}: expected 0/off or the shortest bucket's rows") from None
    return rows if rows > 0 else None


def row_buckets(capacity: int, smallest: int | None = SMALLEST_ROWS) -> tuple[int, ...]:
    """The cache lengths decode programs are compiled for: 2^k and 3 * 2^(k-1) from ``smallest`` up, below
    ``capacity``, then ``capacity``; only ``capacity`` where ``smallest`` is None."""
    if smallest is None or smallest >= capacity:
        return (capacity,)
    sizes = {size for k in range(1, capacity.bit_length() + 1) for size in (1 << k, 3 << (k - 1))
             if smallest <= size < capacity}
    return tuple(sorted(sizes)) + (capacity,)


def rows_for(needed: int, buckets: Sequence[int]) -> int:
    """The shortest of ``buckets`` holding ``needed`` rows (the longest where none does)."""
    return next((b for b in buckets if b >= needed), buckets[-1])


@dataclass(frozen=True)
class Rewrite:
    """How an op reads input ``position``: cut to the plan's rows along ``axis``, or as constant ``shape``."""

    position: int
    axis: int | None = None
    shape: np.ndarray | None = None


class NotDerivable(Exception):
    """The graph bakes the cache's length in where the plan would need it shorter (the message says where)."""


@dataclass
class RowPlan:
    """How to trace subgraph ``subgraph`` of a model (and what it calls) with its caches cut to ``rows``:
    ``rewrites[(subgraph, op)]`` are the inputs that op reads otherwise than the graph says."""

    rows: int
    subgraph: int
    rewrites: dict[tuple[int, int], tuple[Rewrite, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, model: Model, subgraph: int, cache_inputs: Sequence[int], rows: int) -> "RowPlan":
        """The plan for the caches at positions ``cache_inputs`` of the subgraph's inputs; raises
        ``NotDerivable`` where the graph bakes their length in."""
        plan = cls(rows, subgraph)
        sg = model.subgraphs[subgraph]
        cut_reads = _updated_caches(sg, [sg.inputs[p] for p in cache_inputs])
        if not cut_reads:
            raise NotDerivable(f"subgraph {subgraph} updates no cache with DYNAMIC_UPDATE_SLICE")
        outputs = _Walk(model, plan).subgraph(sg, {}, cut_reads)
        if outputs:
            raise NotDerivable(f"subgraph {subgraph} returns a value cut with the cache: tensor {min(outputs)}")
        return plan

    def add(self, where: tuple[int, int], rewrite: Rewrite) -> None:
        known = self.rewrites.get(where, ())
        for other in known:
            if other.position == rewrite.position:
                same = other.axis == rewrite.axis and np.array_equal(
                    np.asarray(other.shape if other.shape is not None else []),
                    np.asarray(rewrite.shape if rewrite.shape is not None else []))
                if not same:
                    raise NotDerivable(f"subgraph {where[0]} op {where[1]} is reached with two cuts of input "
                                       f"{rewrite.position} (a subgraph called from two places)")
                return
        self.rewrites[where] = known + (rewrite,)


def cache_rows(model: Model, subgraph: int, cache_inputs: Sequence[int]) -> int | None:
    """The caches' length along the positions axis that their DYNAMIC_UPDATE_SLICE names (whatever the layout);
    None where no cache is updated so."""
    sg = model.subgraphs[subgraph]
    caches = [sg.inputs[p] for p in cache_inputs]
    try:
        updated = _updated_caches(sg, caches)
    except NotDerivable:
        return None
    by_update = {op.outputs[0]: op.inputs[0] for op in sg.operators if op.opcode_name == "DYNAMIC_UPDATE_SLICE"}
    lengths = {sg.tensors[by_update[t]].shape[axis] for t, axis in updated.items()}
    return int(lengths.pop()) if len(lengths) == 1 else None


def _updated_caches(sg: Subgraph, caches: Sequence[int]) -> dict[int, int]:
    """Tensor -> positions axis of each cache as a DYNAMIC_UPDATE_SLICE leaves it (the axis where its update
    is shorter), for the caches among ``caches`` updated so."""
    found: dict[int, int] = {}
    for op in sg.operators:
        if op.opcode_name != "DYNAMIC_UPDATE_SLICE" or op.inputs[0] not in caches:
            continue
        full, update = sg.tensors[op.inputs[0]].shape, sg.tensors[op.inputs[1]].shape
        shorter = [a for a, (f, u) in enumerate(zip(full, update)) if u < f]
        if len(shorter) != 1:
            raise NotDerivable(f"subgraph {sg.index} op {op}: the cache update {tuple(update)} into "
                               f"{tuple(full)} does not name one positions axis")
        found[op.outputs[0]] = shorter[0]
    return found


class _Walk:
    """Follows the cut axis through a subgraph's ops, recording the plan's rewrites."""

    def __init__(self, model: Model, plan: RowPlan):
        self.model, self.plan = model, plan

    def subgraph(self, sg: Subgraph, cut: Mapping[int, int],
                 cut_reads: Mapping[int, int] | None = None) -> dict[int, int]:
        """Walk ``sg`` with tensors ``cut`` (tensor -> axis) already cut and ``cut_reads`` cut where read; returns
        the subgraph outputs that come out cut (tensor -> axis)."""
        cut, cut_reads = dict(cut), cut_reads or {}
        for op_index in execution_order(sg, self.model.source):
            op = sg.operators[op_index]
            read: dict[int, int] = {}
            for k, t in enumerate(op.inputs):
                if t in cut:
                    read[k] = cut[t]
                elif t in cut_reads and op.opcode_name != "DYNAMIC_UPDATE_SLICE":
                    read[k] = cut_reads[t]
                    self.plan.add((sg.index, op_index), Rewrite(k, axis=cut_reads[t]))
            if read:
                cut.update(self._op(sg, op_index, read))
        return {t: cut[t] for t in sg.outputs if t in cut}

    def _op(self, sg: Subgraph, op_index: int, read: dict[int, int]) -> dict[int, int]:
        """The outputs of op ``op_index`` cut (tensor -> axis) when it reads inputs ``read`` (position -> axis)."""
        op = sg.operators[op_index]
        name = op.opcode_name
        shape = lambda k: tuple(sg.tensors[op.inputs[k]].shape)  # noqa: E731
        out = tuple(sg.tensors[op.outputs[0]].shape) if op.outputs else ()
        where = f"subgraph {sg.index} op {op}"
        if name in _UNARY and set(read) == {0}:
            return {op.outputs[0]: read[0]}
        if name in _BROADCASTING:
            return {op.outputs[0]: self._broadcast(sg, op_index, read, out, where)}
        if name == "TRANSPOSE" and set(read) == {0} and sg.tensors[op.inputs[1]].has_data:
            return {op.outputs[0]: [int(p) for p in sg.tensors[op.inputs[1]].data.reshape(-1)].index(read[0])}
        if name in ("RESHAPE", "BROADCAST_TO") and set(read) == {0}:
            return {op.outputs[0]: self._new_shape(sg, op_index, read[0], shape(0), out, where)}
        if name == "BATCH_MATMUL":
            return self._matmul(sg, op_index, read, where)
        if name == "STABLEHLO_COMPOSITE" or (called_subgraphs(op) and name == "CALL"):
            (index,) = called_subgraphs(op)
            called = self.model.subgraphs[index]
            inner = self.subgraph(called, {called.inputs[k]: axis for k, axis in read.items()})
            return {op.outputs[k]: inner[t] for k, t in enumerate(called.outputs) if t in inner}
        raise NotDerivable(f"{where} reads the cache's positions axis (axis {sorted(read.values())}) "
                           "in a way that needs its full length")

    def _broadcast(self, sg: Subgraph, op_index: int, read: dict[int, int], out: tuple, where: str) -> int:
        """The cut output axis of an elementwise op; an operand at full length on that axis (the mask) is cut."""
        op = sg.operators[op_index]
        k0 = next(iter(read))
        ranks = {k: len(sg.tensors[t].shape) for k, t in enumerate(op.inputs) if t >= 0}
        axis = read[k0] + len(out) - ranks[k0]
        full = sg.tensors[op.inputs[k0]].shape[read[k0]]
        for k, t in enumerate(op.inputs):
            if t < 0:
                continue
            own = axis - (len(out) - ranks[k])
            if k in read:
                if own != read[k]:
                    raise NotDerivable(f"{where}: its inputs are cut along different axes")
                continue
            size = sg.tensors[t].shape[own] if own >= 0 else 1
            if size == full:
                self.plan.add((sg.index, op_index), Rewrite(k, axis=own))
            elif size != 1:
                raise NotDerivable(f"{where}: input {k} has {size} rows where the cache has {full}")
        return axis

    def _new_shape(self, sg: Subgraph, op_index: int, axis: int, before: tuple, after: tuple, where: str) -> int:
        """The cut axis after a RESHAPE or BROADCAST_TO, its shape input re-derived for the plan's rows."""
        op = sg.operators[op_index]
        given = sg.tensors[op.inputs[1]] if len(op.inputs) > 1 and op.inputs[1] >= 0 else None
        if given is None or not given.has_data:
            raise NotDerivable(f"{where}: its shape is no constant input")
        if op.opcode_name == "BROADCAST_TO":
            new = axis + len(after) - len(before)
        else:  # the axis survives where the elements before it are as many before and after
            prefix = math.prod(before[:axis])
            new = next((e for e in range(len(after))
                        if math.prod(after[:e]) == prefix and after[e] == before[axis]), None)
            if new is None:
                raise NotDerivable(f"{where}: it merges or splits the cache's positions axis "
                                   f"({tuple(before)} -> {tuple(after)})")
        shape = np.array(after, dtype=given.data.dtype)
        shape[new] = self.plan.rows
        self.plan.add((sg.index, op_index), Rewrite(1, shape=shape))
        return new

    def _matmul(self, sg: Subgraph, op_index: int, read: dict[int, int], where: str) -> dict[int, int]:
        """BATCH_MATMUL: a cut contraction axis must be cut on both sides (the other side is cut where it has
        the full length); a cut row or column axis comes out cut."""
        op = sg.operators[op_index]
        x, y = (tuple(sg.tensors[t].shape) for t in op.inputs[:2])
        adj_x, adj_y = bool(op.options.get("adj_x", False)), bool(op.options.get("adj_y", False))
        contracted = (len(x) - 2 if adj_x else len(x) - 1, len(y) - 1 if adj_y else len(y) - 2)
        rank = max(len(x), len(y))
        roles = {}
        for k, axis in read.items():
            rank_k = (len(x), len(y))[k]
            if axis == contracted[k]:
                roles[k] = "contracted"
            elif axis >= rank_k - 2:
                roles[k] = "free"
            else:
                raise NotDerivable(f"{where}: the cache's positions are a batch axis of the product")
        if "contracted" in roles.values():
            if set(roles.values()) != {"contracted"}:
                raise NotDerivable(f"{where}: both a contracted and a free axis are cut")
            for k in (0, 1):
                if k not in read:
                    size, full = (x, y)[k][contracted[k]], (x, y)[1 - k][contracted[1 - k]]
                    if size != full:
                        raise NotDerivable(f"{where}: contracted lengths differ")
                    self.plan.add((sg.index, op_index), Rewrite(k, axis=contracted[k]))
            return {}
        if len(read) != 1:
            raise NotDerivable(f"{where}: both factors' free axes are cut")
        return {op.outputs[0]: rank - 2 if 0 in read else rank - 1}


def plan_or_reason(model: Model, subgraph: int, cache_inputs: Sequence[int], rows: int) -> tuple[RowPlan | None, str]:
    """``RowPlan.of``, or (None, why the caches cannot be cut)."""
    try:
        return RowPlan.of(model, subgraph, cache_inputs, rows), ""
    except NotDerivable as e:
        return None, str(e)


__all__ = ["ROWS_ENV", "SMALLEST_ROWS", "NotDerivable", "Rewrite", "RowPlan", "cache_rows", "plan_or_reason",
           "row_buckets", "rows_for", "smallest_rows_setting"]
