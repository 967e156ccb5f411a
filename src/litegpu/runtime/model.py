"""A loaded model before compilation: its IR, its signatures and its static delegation plan."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import ir
from ..errors import InvalidArgumentError

if TYPE_CHECKING:
    from ..compile import DelegationPlan

PLACEHOLDER_SIGNATURE = "<placeholder signature>"


@dataclass(frozen=True)
class SignatureInfo:
    """One signature: its key, subgraph, and (name, tensor index) of inputs and outputs in order."""

    index: int
    key: str
    subgraph: int
    inputs: tuple[tuple[str, int], ...]
    outputs: tuple[tuple[str, int], ...]
    input_dtypes: tuple[np.dtype, ...] = ()   # numpy dtype of each input, in ``inputs`` order

    @functools.cached_property
    def input_names(self) -> list[str]:
        return [n for n, _ in self.inputs]

    @functools.cached_property
    def output_names(self) -> list[str]:
        return [n for n, _ in self.outputs]


def _in_subgraph_order(tensors: Any, order: tuple[int, ...]) -> tuple[tuple[str, int], ...]:
    """The official CompiledModel lists a signature's tensors in the subgraph's order, not the SignatureDef's."""
    position = {t: k for k, t in enumerate(order)}
    ranked = sorted(tensors, key=lambda t: position.get(t.tensor_index, len(order)))
    return tuple((t.name, t.tensor_index) for t in ranked)


def signatures_of(model: ir.Model) -> tuple[SignatureInfo, ...]:
    """The model's SignatureDefs; without any, one placeholder signature over subgraph 0 named by tensor names
    (what the official CompiledModel does)."""
    def info(index: int, key: str, subgraph: int, inputs: tuple, outputs: tuple) -> SignatureInfo:
        tensors = model.subgraphs[subgraph].tensors
        dtypes = tuple(np.dtype(ir.numpy_dtype(tensors[t].dtype)) for _, t in inputs)
        return SignatureInfo(index, key, subgraph, inputs, outputs, dtypes)

    if model.signatures:
        return tuple(info(i, s.key, s.subgraph_index,
                          _in_subgraph_order(s.inputs, model.subgraphs[s.subgraph_index].inputs),
                          _in_subgraph_order(s.outputs, model.subgraphs[s.subgraph_index].outputs))
                     for i, s in enumerate(model.signatures))
    sg = model.subgraphs[0]
    return (info(0, PLACEHOLDER_SIGNATURE, 0, tuple((sg.tensors[t].name, t) for t in sg.inputs),
                 tuple((sg.tensors[t].name, t) for t in sg.outputs)),)


def read(source: Any) -> ir.Model:
    if isinstance(source, ir.Model):
        return source
    if isinstance(source, (bytes, bytearray, memoryview)):
        return ir.read_model(bytes(source) if not isinstance(source, bytes) else source)
    if isinstance(source, (str, os.PathLike)):
        return ir.read_model(os.fspath(source))
    raise InvalidArgumentError(f"a model is a path, bytes or litegpu.Model, not {type(source).__name__}")


class Model:
    """A verified model: ``Model.from_file(path).ir`` is the IR, ``.plan(accelerators)`` where it would run."""

    def __init__(self, model: ir.Model):
        self.ir = model
        self.signatures = signatures_of(model)

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> "Model":
        return cls(read(os.fspath(path)))

    @classmethod
    def from_buffer(cls, data: bytes) -> "Model":
        return cls(read(data))

    def plan(self, accelerators: int = 1, *, warn: bool = False) -> DelegationPlan:
        """The static delegation plan for these HardwareAccelerator flags (no device needed)."""
        from ..compile import plan

        return plan(self.ir, int(accelerators), warn=warn)

    def op_histogram(self, subgraph_index: int = 0) -> dict[str, int]:
        return self.ir.op_histogram(subgraph_index)

    def __repr__(self) -> str:
        ops = sum(len(sg.operators) for sg in self.ir.subgraphs)
        return (f"Model({self.ir.source!r}, {len(self.ir.subgraphs)} subgraph(s), {ops} ops, "
                f"signatures={[s.key for s in self.signatures]})")
