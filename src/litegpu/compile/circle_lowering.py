"""Circle-only ops rewritten as TFLite builtin ops, for the CPU engines that read TFLite only.

The official interpreter (XNNPACK) and OpenVINO read TFLite: a circle model reaches them written as TFLite,
and an op TFLite lacks (RMS_NORM, INSTANCE_NORM, ROPE, ...) kept them off the whole model, which then ran
on XLA, whose CPU call costs about 40 us before any work (BENCHMARKS.md: a 3-op RMSNorm block 4x slower than
onert).  Splitting the model around the op does not help such models: the XLA partition still costs that
call, plus the partition edges.  So the fast CPU planner hands those engines the model with each circle-only
op that has a lowering (``Op.builtin_lowering``, defined in the op's own module) replaced by the builtin ops
that compute it in float32 (ONE's kernels accumulate some of them in double: a few float32 ulps apart), and
keeps that version only where one of them runs part of it (``plan``); where XLA runs it whole, the exact op
stays.  Ops without a lowering (GRU, ATTENTION, RUN_MODEL, circle weight types) are left as they are and go
to XLA, the rest of the model around them to the fast engines where the planner finds that worthwhile.

Tensors keep their indices (new ones are appended) so signatures and subgraph inputs / outputs line up with
the original model; ops are renumbered.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..ir import Buffer, Model, Operator, Subgraph, Tensor
from ..ir.dtypes import from_numpy
from ..ir.load import freeze
from ..ir.model import Options
from ..ir.opcodes import builtin_codes, circle_only_ops, option_defaults, options_table_for
from ..ops import Target, lookup


class BuiltinEmitter:
    """What an op's ``builtin_lowering`` writes through: new tensors, constants and builtin ops, gathered for
    one op and committed only when the lowering succeeds."""

    def __init__(self, sg: Subgraph, tensors: list[Tensor], buffers: list[Buffer], op: Operator):
        self.sg, self._tensors, self._buffers, self._op = sg, tensors, buffers, op
        self.ops: list[Operator] = []
        self._base = sg.tensors[op.outputs[0]].name if op.outputs and op.outputs[0] >= 0 else str(op)

    def shape(self, index: int) -> tuple[int, ...]:
        return self._tensors[index].shape

    def _new(self, shape: Sequence[int], dtype: str, buffer: int = 0, raw: np.ndarray | None = None) -> int:
        index = len(self._tensors)
        self._tensors.append(Tensor(index=index, name=f"{self._base}/lowered_{index}",
                                    shape=tuple(int(d) for d in shape), dtype=dtype, buffer=buffer, raw=raw))
        return index

    def constant(self, values: Any) -> int:
        array = np.ascontiguousarray(values)
        raw = array.reshape(-1).view(np.uint8)
        self._buffers.append(Buffer(raw if raw.size else None))
        return self._new(array.shape, from_numpy(array.dtype), len(self._buffers) - 1, raw if raw.size else None)

    def op(self, name: str, inputs: Sequence[int], shape: Sequence[int], *, dtype: str = "float32",
           output: int | None = None, **options: Any) -> int:
        """A builtin op writing a new tensor of ``shape`` (or ``output``, an existing one); returns it."""
        table = options_table_for(name)
        values = dict(option_defaults(table)) if table else {}
        unknown = set(options) - set(values)
        if unknown:
            raise ValueError(f"{name}: {table} has no field(s) {sorted(unknown)}")
        values.update(options)
        out = self._new(shape, dtype) if output is None else output
        self.ops.append(Operator(
            index=0, opcode_name=name, builtin_code=builtin_codes()[name], inputs=tuple(int(i) for i in inputs),
            outputs=(out,), options=freeze({k: (np.asarray(v) if isinstance(v, (list, tuple)) else v)
                                            for k, v in values.items()}) if values else Options(),
            options_type=table))
        return out


def lowerable(model: Model) -> list[str]:
    """The circle-only ops of ``model`` (sorted names) that ``lower_circle_ops`` would rewrite."""
    circle = circle_only_ops()
    found = set()
    for sg in model.subgraphs:
        for op in sg.operators:
            if op.opcode_name in circle and _lowering(model, sg, op, list(sg.tensors), list(model.buffers)):
                found.add(op.opcode_name)
    return sorted(found)


def _lowering(model: Model, sg: Subgraph, op: Operator, tensors: list[Tensor], buffers: list[Buffer]
              ) -> list[Operator] | None:
    """The builtin ops replacing ``op`` (appending their tensors and buffers), or None."""
    try:
        impl = lookup(op)
    except Exception:  # noqa: BLE001  (refused or unknown ops are simply not lowered)
        return None
    if impl.unsupported_reason(op, sg, Target.REFERENCE) is not None:
        return None
    emitter = BuiltinEmitter(sg, list(tensors), list(buffers), op)
    if not impl.builtin_lowering(op, sg, emitter):
        return None
    tensors[:] = emitter._tensors
    buffers[:] = emitter._buffers
    return emitter.ops


def lower_circle_ops(model: Model) -> Model:
    """``model`` with every circle-only op that has a builtin lowering replaced by it; the model itself when
    none has."""
    circle = circle_only_ops()
    buffers = list(model.buffers)
    subgraphs = []
    for sg in model.subgraphs:
        if not any(op.opcode_name in circle for op in sg.operators):
            subgraphs.append(sg)
            continue
        tensors = list(sg.tensors)
        ops: list[Operator] = []
        for op in sg.operators:
            lowered = _lowering(model, sg, op, tensors, buffers) if op.opcode_name in circle else None
            ops.extend(lowered if lowered is not None else [op])
        if len(tensors) == len(sg.tensors) and len(ops) == len(sg.operators):
            subgraphs.append(sg)
            continue
        ops = [dataclasses.replace(op, index=k) for k, op in enumerate(ops)]
        subgraphs.append(dataclasses.replace(sg, tensors=tuple(tensors), operators=tuple(ops)))
    if all(new is old for new, old in zip(subgraphs, model.subgraphs)):
        return model
    return dataclasses.replace(model, subgraphs=tuple(subgraphs), buffers=tuple(buffers))


__all__ = ["BuiltinEmitter", "lower_circle_ops", "lowerable"]
