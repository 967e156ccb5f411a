"""Cutting a run of ops out of a model as a model of its own (what another engine is handed).

The sub-model has one subgraph: the ops in the order given, the tensors they
touch, and only the buffers those tensors need (views into the original
model, not copies).  Tensor names are replaced by ``t<original index>`` so
that an engine's ports map back to the original tensors without ambiguity
(converters reuse names freely).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ..errors import InvalidArgumentError
from .model import Buffer, Model, Operator, Options, Quantization, Subgraph, Tensor


def tensor_port_name(index: int) -> str:
    """The name a tensor of the original subgraph carries in an extracted sub-model."""
    return f"t{index}"


def port_tensor_index(name: str) -> int | None:
    """The original tensor index behind a port name (``tensor_port_name``), or None."""
    if name.startswith("t") and name[1:].isdigit():
        return int(name[1:])
    return None


def extract_ops(model: Model, subgraph_index: int, op_indices: Sequence[int], inputs: Sequence[int],
                outputs: Sequence[int]) -> Model:
    """A model running ops ``op_indices`` of subgraph ``subgraph_index``, reading ``inputs`` (tensor
    indices of that subgraph) and returning ``outputs``.  Ops that call subgraphs cannot be cut out."""
    sg = model.subgraphs[subgraph_index]
    ops = [sg.operators[i] for i in op_indices]
    for op in ops:
        if any((k == "subgraph" or k.endswith("subgraph_index")) for k in op.options):
            raise InvalidArgumentError(f"{model.source}: op {op} calls another subgraph; it cannot be cut out "
                                       "into a sub-model")
    used = _tensors_used(ops, inputs, outputs)
    # blockwise scales and zero points, which ops read through the weights' quantization details
    for t in list(used):
        for detail in sg.tensors[t].detail_tensors:
            if detail not in used:
                used.append(detail)
    new_index = {t: k for k, t in enumerate(used)}
    buffers: list[Buffer] = [Buffer()]
    buffer_index: dict[int, int] = {}

    def tensor(t: Tensor) -> Tensor:
        buffer = 0
        if t.buffer > 0 and t.index not in inputs:
            if t.buffer not in buffer_index:
                buffer_index[t.buffer] = len(buffers)
                buffers.append(model.buffers[t.buffer])
            buffer = buffer_index[t.buffer]
        return dataclasses.replace(t, index=new_index[t.index], name=tensor_port_name(t.index), buffer=buffer,
                                   raw=t.raw if buffer else None, is_variable=False,
                                   quantization=_renumbered_details(t.quantization, new_index))

    def remap(indices: Sequence[int]) -> tuple[int, ...]:
        return tuple(new_index[i] if i >= 0 else -1 for i in indices)

    tensors = tuple(tensor(sg.tensors[t]) for t in used)
    operators = tuple(dataclasses.replace(op, index=k, inputs=remap(op.inputs), outputs=remap(op.outputs),
                                          intermediates=remap(op.intermediates), options=_portable_options(op))
                      for k, op in enumerate(ops))
    sub = Subgraph(0, f"{sg.name or 'subgraph'}_{subgraph_index}_part", tensors, remap(inputs), remap(outputs),
                   operators)
    return Model((sub,), tuple(buffers), description="litegpu partition", source=model.source)


def _renumbered_details(q: Quantization | None, new_index: dict[int, int]) -> Quantization | None:
    """``q`` with the tensors its details name (blockwise scales, zero points) given their sub-model indices."""
    if q is None or q.details is None:
        return q
    renamed = {name: new_index[int(value)] for name, value in q.details.items()
               if name in ("scales", "zero_points") and int(value) >= 0}
    if not renamed:
        return q
    return dataclasses.replace(q, details=Options({**q.details, **renamed}))


def _portable_options(op: Operator) -> Options:
    """Options as a reader other than TFLite's expects them.  An empty ``new_shape`` of a RESHAPE that
    takes its shape as an input means "use the input" to TFLite; OpenVINO's frontend takes any stored
    ``new_shape`` as the shape, so the empty vector is left out."""
    if op.opcode_name == "RESHAPE" and len(op.inputs) > 1 and op.inputs[1] >= 0 and not op.options.get("new_shape"):
        return Options({k: v for k, v in op.options.items() if k != "new_shape"})
    return op.options


def _tensors_used(ops: Sequence[Operator], inputs: Sequence[int], outputs: Sequence[int]) -> list[int]:
    seen: dict[int, None] = {}
    for t in (*inputs, *(i for op in ops for i in (*op.inputs, *op.outputs, *op.intermediates)), *outputs):
        if t >= 0:
            seen.setdefault(t, None)
    return list(seen)


__all__ = ["extract_ops", "port_tensor_index", "tensor_port_name"]
