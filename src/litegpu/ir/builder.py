"""Making models in code: the tests' one-op models, generators in bench/.

    b = ModelBuilder()
    x = b.input("x", (1, 8, 8, 3))
    w = b.constant("w", np.ones((4, 3, 3, 3), np.float32))
    y = b.tensor("y", (1, 8, 8, 4))
    b.op("CONV_2D", [x, w, -1], [y], padding="SAME", stride_w=1, stride_h=1)
    b.output(y)
    model = b.build()        # an ir.Model; write it with ir.write_model
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .dtypes import SUB_BYTE_BITS, from_numpy, pack_sub_byte
from .load import freeze
from .model import Buffer, Metadata, Model, Operator, Options, Quantization, Signature, SignatureTensor, Subgraph, Tensor
from .opcodes import builtin_codes, option_defaults, options_table_for


def quantization(scale: float | Sequence[float], zero_point: int | Sequence[int] = 0, axis: int = 0) -> Quantization:
    # Files store scales as float32: keep exactly what a read-back will hold.
    scales = tuple(float(s) for s in np.atleast_1d(np.asarray(scale, np.float32)))
    zps = tuple(int(z) for z in np.atleast_1d(zero_point))
    if len(zps) == 1 and len(scales) > 1:
        zps = zps * len(scales)
    return Quantization(scale=scales, zero_point=zps, quantized_dimension=axis)


class SubgraphBuilder:
    def __init__(self, model: "ModelBuilder", index: int, name: str):
        self.model, self.index, self.name = model, index, name
        self.tensors: list[Tensor] = []
        self.operators: list[Operator] = []
        self.inputs: list[int] = []
        self.outputs: list[int] = []

    def tensor(self, name: str, shape: Sequence[int], dtype: str = "float32", *,
               quantization: Quantization | None = None, shape_signature: Sequence[int] | None = None,
               is_variable: bool = False, buffer: int = 0, raw: np.ndarray | None = None) -> int:
        index = len(self.tensors)
        self.tensors.append(Tensor(
            index=index, name=name, shape=tuple(int(d) for d in shape), dtype=dtype, buffer=buffer,
            shape_signature=tuple(shape_signature) if shape_signature is not None else None,
            quantization=quantization, is_variable=is_variable, raw=raw))
        return index

    def input(self, name: str, shape: Sequence[int], dtype: str = "float32", **kwargs: Any) -> int:
        index = self.tensor(name, shape, dtype, **kwargs)
        self.inputs.append(index)
        return index

    def constant(self, name: str, value: Any, dtype: str | None = None, *,
                 quantization: Quantization | None = None) -> int:
        """A constant tensor; ``dtype`` int4/uint4/int2 packs the values."""
        array = np.asarray(value)
        dtype = dtype or from_numpy(array.dtype)
        if dtype in SUB_BYTE_BITS:
            raw = pack_sub_byte(array, dtype)
        else:
            from .dtypes import numpy_dtype
            raw = np.ascontiguousarray(array.astype(numpy_dtype(dtype))).reshape(-1).view(np.uint8)
        buffer = self.model.add_buffer(raw)
        return self.tensor(name, array.shape, dtype, quantization=quantization, buffer=buffer,
                           raw=raw if raw.size else None)

    def op(self, name: str, inputs: Sequence[int], outputs: Sequence[int], /, *,
           custom_options: bytes | None = None, version: int = 1, options_type: str | None = None,
           intermediates: Sequence[int] = (), **options: Any) -> int:
        """Add an op; ``options`` override the defaults of the op's options table.  ``intermediates``:
        the operator's intermediate tensors (the full-integer LSTM reads its gate scales from them)."""
        code = builtin_codes().get(name)
        table = options_type or (options_table_for(name) if code is not None else None)
        values: dict[str, Any] = {}
        if table is not None:
            values = dict(option_defaults(table))
            unknown = set(options) - set(values)
            if unknown:
                raise ValueError(f"{name}: {table} has no field(s) {sorted(unknown)}")
            values.update(options)
        elif options:
            raise ValueError(f"{name} takes no options, got {sorted(options)}")
        index = len(self.operators)
        self.operators.append(Operator(
            index=index, opcode_name=name, builtin_code=code, version=version,
            inputs=tuple(int(i) for i in inputs), outputs=tuple(int(o) for o in outputs),
            intermediates=tuple(int(t) for t in intermediates),
            options=freeze({k: (np.asarray(v) if isinstance(v, (list, tuple)) else v) for k, v in values.items()})
            if values else Options(),
            options_type=table, custom_options=custom_options))
        return index

    def output(self, *indices: int) -> None:
        self.outputs.extend(indices)

    def build(self) -> Subgraph:
        return Subgraph(index=self.index, name=self.name, tensors=tuple(self.tensors), inputs=tuple(self.inputs),
                        outputs=tuple(self.outputs), operators=tuple(self.operators))


class ModelBuilder(SubgraphBuilder):
    """Builds a model; the builder itself is subgraph 0, ``subgraph()`` adds more."""

    def __init__(self, description: str = "litegpu"):
        self.buffers: list[Buffer] = [Buffer()]
        self.subgraphs: list[SubgraphBuilder] = []
        self.signatures: list[Signature] = []
        self.metadata: list[Metadata] = []
        self.description = description
        super().__init__(self, 0, "main")
        self.subgraphs.append(self)

    def add_buffer(self, raw: np.ndarray | bytes) -> int:
        data = np.frombuffer(raw, np.uint8) if isinstance(raw, (bytes, bytearray)) else raw
        self.buffers.append(Buffer(data if data.size else None))
        return len(self.buffers) - 1

    def subgraph(self, name: str = "") -> SubgraphBuilder:
        sg = SubgraphBuilder(self, len(self.subgraphs), name)
        self.subgraphs.append(sg)
        return sg

    def signature(self, key: str, subgraph: SubgraphBuilder | None = None, *,
                  inputs: Mapping[str, int] | None = None, outputs: Mapping[str, int] | None = None) -> None:
        sg = subgraph or self
        ins = inputs if inputs is not None else {sg.tensors[i].name: i for i in sg.inputs}
        outs = outputs if outputs is not None else {sg.tensors[i].name: i for i in sg.outputs}
        self.signatures.append(Signature(
            key=key, subgraph_index=sg.index,
            inputs=tuple(SignatureTensor(n, i) for n, i in ins.items()),
            outputs=tuple(SignatureTensor(n, i) for n, i in outs.items())))

    def add_metadata(self, name: str, data: bytes) -> None:
        self.metadata.append(Metadata(name, self.add_buffer(data)))

    def build(self) -> Model:  # type: ignore[override]
        subgraphs = tuple(SubgraphBuilder.build(sg) for sg in self.subgraphs)
        model = Model(subgraphs=subgraphs, buffers=tuple(self.buffers), signatures=tuple(self.signatures),
                      metadata=tuple(self.metadata), description=self.description)
        # Round-trip checks (indices, cycles) apply to models made in code too.
        from .load import check_subgraph_calls, execution_order
        check_subgraph_calls(model)
        for sg in subgraphs:
            execution_order(sg)
        return model
