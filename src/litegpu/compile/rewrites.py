"""IR-to-IR rewrites that make models traceable by XLA without changing what they compute.

The TensorFlow converter lowers ``TensorListSetItem`` (a Keras 3 LSTM / GRU writing
step ``i`` of its output sequence inside a WHILE body) to

    before = SLICE(x, [0, 0, ..], [i, -1, ..])          # steps 0 .. i-1
    after  = SLICE(x, [i + 1, 0, ..], [-1, -1, ..])     # steps i+1 .. T-1
    y      = CONCATENATION([before, step, after], axis)  # step has size 1 along axis

Both slices have run-time shapes, which XLA cannot trace, although ``y`` has the
static shape of ``x``.  The three ops are one ``DYNAMIC_UPDATE_SLICE(x, step, start)``
with ``start = [0, .., i, .., 0] = begin(after) - one_hot(axis)``: that is what
this module writes instead.  ``y``'s static shape (that of ``x``) only holds for
``0 <= i < T``, so the model itself guarantees the range in which the two forms agree
(DYNAMIC_UPDATE_SLICE would clamp outside it, where the original form fails).

The match is strict: same source tensor, a zero ``begin`` before, a ``size`` whose
axis entry is the run-time value ``i`` and a ``begin`` after whose axis entry is
``i + 1`` with ``i`` traced back to the same tensor (through RESHAPE / CONCATENATION /
PACK and ADD / SUB of constants), full extents everywhere else, identical dtypes
and quantization, slices used only by the concatenation.  Anything else is kept.

Tensors keep their indices (new ones are appended) so signatures and subgraph
inputs / outputs line up with the original model; ops are renumbered.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

import numpy as np

from ..ir import Buffer, Model, Operator, Subgraph, Tensor
from .float_view import _new_operator

_INDEX_DTYPES = ("int32", "int64")


@dataclass(frozen=True)
class _RunTime:
    """A scalar known only at run time: the value of tensor ``base`` plus ``offset``."""

    base: int
    offset: int = 0

    def plus(self, k: int) -> _RunTime:
        return _RunTime(self.base, self.offset + k)


_Element = int | _RunTime


@dataclass(frozen=True)
class _StepWrite:
    """One matched SLICE / SLICE / CONCATENATION triple."""

    concat: int                 # op index
    slices: tuple[int, int]     # op indices of the slices before and after
    source: int                 # tensor x
    step: int                   # tensor written at i
    begin_after: int            # tensor [.., i + 1, ..]: the start, once the one-hot is taken off
    axis: int
    helpers: frozenset[int]     # ops that computed the slices' begin / size (dead once the slices go)


def rewrite_for_xla(model: Model) -> Model:
    """All the rewrites XLA needs; the model itself when none applies."""
    return dynamic_update_slices(model)


def dynamic_update_slices(model: Model) -> Model:
    """Each exact SLICE / SLICE / CONCATENATION step write replaced by one DYNAMIC_UPDATE_SLICE."""
    buffers = list(model.buffers)
    subgraphs = tuple(_rewrite_subgraph(sg, buffers) for sg in model.subgraphs)
    if all(new is old for new, old in zip(subgraphs, model.subgraphs)):
        return model
    return replace(model, subgraphs=subgraphs, buffers=tuple(buffers))


# ---- matching -----------------------------------------------------------------------------------

class _Matcher:
    def __init__(self, sg: Subgraph):
        self.sg = sg
        self.producer = {t: op for op in sg.operators for t in op.outputs if t >= 0}
        self.uses = Counter(t for op in sg.operators for t in op.inputs if t >= 0)

    def tensor(self, index: int) -> Tensor:
        return self.sg.tensors[index]

    def static(self, index: int) -> bool:
        t = self.tensor(index)
        return t.has_rank and not t.is_dynamic and all(d >= 0 for d in t.shape)

    # -- the symbolic values of small integer tensors (begin / size vectors and the counter) --
    def scalar(self, index: int, helpers: set[int]) -> _Element | None:
        t = self.tensor(index)
        if t.dtype not in _INDEX_DTYPES or t.num_elements != 1 or t.sparsity is not None:
            return None
        if t.is_constant:
            return int(np.asarray(t.data).reshape(-1)[0])
        op = self.producer.get(index)
        if op is None or len(op.outputs) != 1:
            return _RunTime(index)
        if op.opcode_name in ("RESHAPE", "SQUEEZE", "EXPAND_DIMS"):
            inner = self.scalar(op.inputs[0], helpers)
            if inner is not None:
                helpers.add(op.index)
            return inner if inner is not None else _RunTime(index)
        if op.opcode_name in ("ADD", "SUB") and op.options.get("fused_activation_function", "NONE") == "NONE" \
                and all(self.tensor(i).dtype == t.dtype and self.tensor(i).quantization is None for i in op.inputs):
            left, right = (self.scalar(i, set()) for i in op.inputs)
            sign = 1 if op.opcode_name == "ADD" else -1
            if isinstance(left, _RunTime) and isinstance(right, int):
                return left.plus(sign * right)
            if op.opcode_name == "ADD" and isinstance(left, int) and isinstance(right, _RunTime):
                return right.plus(left)
        return _RunTime(index)

    def vector(self, index: int, helpers: set[int]) -> list[_Element] | None:
        t = self.tensor(index)
        if t.dtype not in _INDEX_DTYPES or len(t.shape) != 1 or not self.static(index) or t.sparsity is not None:
            return None
        if t.is_constant:
            return [int(v) for v in np.asarray(t.data).reshape(-1)]
        op = self.producer.get(index)
        if op is None or len(op.outputs) != 1 or -1 in op.inputs:
            return None
        found: list[_Element] | None = None
        if op.opcode_name == "CONCATENATION" and op.options.get("axis") in (0, -1) \
                and op.options.get("fused_activation_function", "NONE") == "NONE":
            parts = [self.vector(i, helpers) for i in op.inputs]
            found = None if any(p is None for p in parts) else [e for p in parts for e in p]
        elif op.opcode_name == "PACK" and op.options.get("axis", 0) in (0, -1) \
                and all(self.tensor(i).shape == () for i in op.inputs):
            parts = [self.scalar(i, helpers) for i in op.inputs]
            found = None if any(p is None for p in parts) else parts
        elif op.opcode_name in ("RESHAPE", "EXPAND_DIMS") and t.shape == (1,):
            scalar = self.scalar(op.inputs[0], helpers)
            found = None if scalar is None else [scalar]
        if found is None or len(found) != t.shape[0]:
            return None
        helpers.add(op.index)
        return found

    # -- the pattern --
    def step_write(self, concat: Operator) -> _StepWrite | None:
        if concat.opcode_name != "CONCATENATION" or len(concat.inputs) != 3 or len(concat.outputs) != 1 \
                or concat.options.get("fused_activation_function", "NONE") != "NONE":
            return None
        before, step, after = concat.inputs
        if min(before, step, after) < 0 or len({before, step, after}) != 3:
            return None
        slices = [self.producer.get(before), self.producer.get(after)]
        if any(s is None or s.opcode_name != "SLICE" or len(s.inputs) != 3 or len(s.outputs) != 1 for s in slices):
            return None
        source = slices[0].inputs[0]
        if slices[1].inputs[0] != source or source < 0:
            return None
        out = concat.outputs[0]
        x = self.tensor(source)
        rank = len(x.shape)
        if rank == 0 or not (self.static(source) and self.static(out) and self.static(step)):
            return None
        axis = concat.options.get("axis", 0)
        axis = axis + rank if isinstance(axis, int) and -rank <= axis < 0 else axis
        if not isinstance(axis, int) or not 0 <= axis < rank:
            return None
        if not self._same_kind(source, step, out, before, after):
            return None
        y, u = self.tensor(out), self.tensor(step)
        if y.shape != x.shape or len(u.shape) != rank or u.shape[axis] != 1 \
                or any(u.shape[j] != x.shape[j] for j in range(rank) if j != axis):
            return None
        if any(self.uses[t] != 1 or t in self.sg.outputs for t in (before, after)):
            return None
        helpers: set[int] = set()
        begin_b, size_b = (self.vector(i, helpers) for i in slices[0].inputs[1:])
        begin_a, size_a = (self.vector(i, helpers) for i in slices[1].inputs[1:])
        if any(v is None or len(v) != rank for v in (begin_b, size_b, begin_a, size_a)):
            return None
        counter = size_b[axis]
        if not isinstance(counter, _RunTime) or begin_a[axis] != counter.plus(1) or size_a[axis] != -1:
            return None
        for j in range(rank):
            whole = (-1, x.shape[j])
            if begin_b[j] != 0 or size_b[j] not in ((counter,) if j == axis else whole):
                return None
            if j != axis and (begin_a[j] != 0 or size_a[j] not in whole):
                return None
        return _StepWrite(concat.index, (slices[0].index, slices[1].index), source, step,
                          slices[1].inputs[1], axis, frozenset(helpers))

    def _same_kind(self, *indices: int) -> bool:
        tensors = [self.tensor(i) for i in indices]
        return len({(t.dtype, t.quantization) for t in tensors}) == 1 and all(t.sparsity is None for t in tensors)


# ---- rewriting ----------------------------------------------------------------------------------

def _rewrite_subgraph(sg: Subgraph, buffers: list[Buffer]) -> Subgraph:
    matcher = _Matcher(sg)
    writes = {}
    for op in sg.operators:
        found = matcher.step_write(op)
        if found is not None and not any(s in writes or s in w.slices for w in writes.values() for s in found.slices):
            writes[op.index] = found
    if not writes:
        return sg
    tensors = list(sg.tensors)
    removed = {s for w in writes.values() for s in w.slices}
    ops: list[Operator] = []
    for op in sg.operators:
        if op.index in removed:
            continue
        if op.index not in writes:
            ops.append(op)
            continue
        w = writes[op.index]
        start = _start_indices(tensors, buffers, w, sg.tensors[op.outputs[0]])
        # index -1 until the ops are renumbered: never mistaken for an original op
        ops.append(replace(_new_operator("SUB"), index=-1, inputs=(w.begin_after, start[0]), outputs=(start[1],)))
        ops.append(replace(_new_operator("DYNAMIC_UPDATE_SLICE"), index=-1, inputs=(w.source, w.step, start[1]),
                           outputs=op.outputs))
    helpers = frozenset().union(*(w.helpers for w in writes.values()))
    ops = _without_dead_helpers(ops, helpers, sg.outputs)
    return replace(sg, tensors=tuple(tensors),
                   operators=tuple(replace(op, index=k) for k, op in enumerate(ops)))


def _start_indices(tensors: list[Tensor], buffers: list[Buffer], w: _StepWrite, out: Tensor) -> tuple[int, int]:
    """(the one-hot constant, the start tensor [.., i, ..]) appended to ``tensors``."""
    like = tensors[w.begin_after]
    one_hot = np.zeros(like.shape, np.dtype(like.dtype))
    one_hot[w.axis] = 1
    raw = one_hot.reshape(-1).view(np.uint8)
    buffers.append(Buffer(raw))
    plain = {"quantization": None, "is_variable": False, "sparsity": None, "shape_signature": None}
    tensors.append(replace(like, index=len(tensors), name=f"{out.name}/step_axis", buffer=len(buffers) - 1,
                           raw=raw, **plain))
    tensors.append(replace(like, index=len(tensors), name=f"{out.name}/step_start", buffer=0, raw=None, **plain))
    return len(tensors) - 2, len(tensors) - 1


def _without_dead_helpers(ops: list[Operator], helpers: frozenset[int], outputs: tuple[int, ...]) -> list[Operator]:
    """Drops the begin / size computations nothing reads any more (only those: other ops may have effects)."""
    while True:
        read = Counter(t for op in ops for t in op.inputs if t >= 0)
        dead = {op.index for op in ops if op.index in helpers
                and not any(read[t] or t in outputs for t in op.outputs if t >= 0)}
        if not dead:
            return ops
        ops = [op for op in ops if op.index not in dead]


__all__ = ["dynamic_update_slices", "rewrite_for_xla"]
