"""Circle-only ops rewritten as TFLite builtin ops, for the CPU engines that read TFLite only.

The official interpreter (XNNPACK) and OpenVINO read TFLite: a circle model reaches them written as TFLite,
and an op TFLite lacks (RMS_NORM, INSTANCE_NORM, ROPE, ...) kept them off the whole model, which then ran
on XLA, whose CPU call costs about 40 us before any work (BENCHMARKS.md: a 3-op RMSNorm block 4x slower than
onert).  Splitting the model around the op does not help such models: the XLA partition still costs that
call, plus the partition edges.  So the fast CPU planner hands those engines the model with each circle-only
op that has a lowering (``Op.builtin_lowering``, defined in the op's own module) replaced by the builtin ops
that compute it in float32 (ONE's kernels accumulate some of them in double: a few float32 ulps apart), and
keeps that version only where one of them runs part of it (``plan``); where XLA runs it whole, the exact op
stays.  A TFLite op on a circle-only weight type is lowered the same way where its op module maps the weights
exactly onto TFLite's (FULLY_CONNECTED on ggml q4_0 / q8_0 weights: blockwise int4 / per-channel int8, which
XNNPACK multiplies; ``ops/_block_weights.py``), the weights' unread ggml tensor emptied.  Ops without a lowering
(GRU, ATTENTION, RUN_MODEL, other circle weights) are left as they are and go to XLA, the rest of the model
around them to the fast engines where the planner finds that worthwhile.

Tensors keep their indices (new ones are appended) so signatures and subgraph inputs / outputs line up with
the original model; ops are renumbered.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..ir import Buffer, Model, Operator, Quantization, Subgraph, Tensor
from ..ir.dtypes import SUB_BYTE_BITS, from_numpy, pack_sub_byte
from ..ir.load import freeze
from ..ir.save import constant_bytes, op_format_refusal
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

    def _new(self, shape: Sequence[int], dtype: str, buffer: int = 0, raw: np.ndarray | None = None,
             quantization: Quantization | None = None) -> int:
        index = len(self._tensors)
        self._tensors.append(Tensor(index=index, name=f"{self._base}/lowered_{index}",
                                    shape=tuple(int(d) for d in shape), dtype=dtype, buffer=buffer, raw=raw,
                                    quantization=quantization))
        return index

    def constant(self, values: Any, dtype: str | None = None, quantization: Quantization | None = None) -> int:
        """A constant of ``values``, stored as ``dtype`` (default: the array's; int4 values are packed)."""
        array = np.ascontiguousarray(values)
        dtype = dtype or from_numpy(array.dtype)
        raw = pack_sub_byte(array, dtype) if dtype in SUB_BYTE_BITS else array.reshape(-1).view(np.uint8)
        self._buffers.append(Buffer(raw if raw.size else None))
        return self._new(array.shape, dtype, len(self._buffers) - 1, raw if raw.size else None, quantization)

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
    """The circle-only ops of ``model`` (sorted names) that ``lower_circle_ops`` would rewrite; a TFLite op that
    reads a circle-only weight type is named with it ("FULLY_CONNECTED of ggml_q4_0")."""
    circle = circle_only_ops()
    found = set()
    for sg, candidates in zip(model.subgraphs, _candidates(model)):
        for op, candidate in zip(sg.operators, candidates):
            if candidate and _lowering(model, sg, op, list(sg.tensors), list(model.buffers)):
                circle_op = op.opcode_name in circle
                found.add(op.opcode_name if circle_op else f"{op.opcode_name} of {_circle_types(sg, op)}")
    return sorted(found)


def _candidates(model: Model) -> list[list[bool]]:
    """Per subgraph, per op: whether ``lower_circle_ops`` tries to lower it.  TFLite cannot hold it: a circle-only
    op, or a TFLite op on a circle-only weight type (ggml), the latter only in a model whose rewritten weights (up
    to twice ggml's bytes) the engine that runs TFLite files whole would take (the official interpreter's
    ``Engine.max_model_bytes``): past that the rewrite would cost time and memory for nothing."""
    circle = circle_only_ops()
    weights_too = 2 * constant_bytes(model) <= _whole_file_engines_max_bytes()
    return [[op.opcode_name in circle or (weights_too and op_format_refusal(sg, op) is not None)
             for op in sg.operators] for sg in model.subgraphs]


def _whole_file_engines_max_bytes() -> float:
    """The largest model that an engine taking whole models on the fast CPU path runs (no bound: infinity)."""
    from ..backends import registry

    bounds = [registry.engine_class(name).max_model_bytes() for name, info in registry.ENGINES.items()
              if info.fast_cpu == "whole"]
    return max((float("inf") if b is None else b for b in bounds), default=0)


def _circle_types(sg: Subgraph, op: Operator) -> str:
    """The circle-only types ``op`` reads."""
    return ", ".join(sorted({d for d in (sg.tensors[t].dtype for t in op.inputs if t >= 0) if _circle_only_type(d)}))


def _circle_only_type(dtype: str) -> bool:
    from ..format import TFLITE
    from ..ir.dtypes import to_tflite

    return to_tflite(dtype) not in TFLITE.schema.enums["TensorType"].values


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
    none has (which ops it tries: ``_candidates``)."""
    buffers = list(model.buffers)
    subgraphs = []
    for sg, circle_ops in zip(model.subgraphs, _candidates(model)):
        if not any(circle_ops):
            subgraphs.append(sg)
            continue
        tensors = list(sg.tensors)
        ops: list[Operator] = []
        for op, circle_op in zip(sg.operators, circle_ops):
            lowered = _lowering(model, sg, op, tensors, buffers) if circle_op else None
            ops.extend(lowered if lowered is not None else [op])
        if len(tensors) == len(sg.tensors) and len(ops) == len(sg.operators):
            subgraphs.append(sg)
            continue
        ops = [dataclasses.replace(op, index=k) for k, op in enumerate(ops)]
        subgraphs.append(dataclasses.replace(sg, tensors=tuple(_unread_circle_weights_emptied(tensors, ops)),
                                             operators=tuple(ops)))
    if all(new is old for new, old in zip(subgraphs, model.subgraphs)):
        return model
    still_read = {t.buffer for sg in subgraphs for t in sg.tensors}
    orphaned = {t.buffer for sg in model.subgraphs for t in sg.tensors} - still_read
    buffers = [Buffer() if k in orphaned else b for k, b in enumerate(buffers)]
    return dataclasses.replace(model, subgraphs=tuple(subgraphs), buffers=tuple(buffers))


def _unread_circle_weights_emptied(tensors: list[Tensor], ops: list[Operator]) -> list[Tensor]:
    """Constants of circle-only types (ggml weights) that no op reads any more, as empty int8 tensors: TFLite
    has no place for their type, and their bytes would be held twice (``lower_circle_ops`` drops the buffer)."""
    read = {t for op in ops for t in op.inputs}
    return [dataclasses.replace(t, dtype="int8", shape=(0,), buffer=0, raw=None, quantization=None)
            if t.index not in read and t.raw is not None and _circle_only_type(t.dtype) else t for t in tensors]


__all__ = ["BuiltinEmitter", "lower_circle_ops", "lowerable"]
