"""The model IR: plain, immutable dataclasses named after the schema.

Constant data are numpy views into the model's bytes (a memory map for files),
never copies; ``Buffer`` compares by content so that two models read from
different files compare equal when they mean the same thing.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .dtypes import BLOCK_LAYOUTS, SUB_BYTE_BITS, numpy_dtype, unpack_sub_byte


class Options(Mapping):
    """An op's parsed options: a read-only mapping that also allows ``opts.stride_w``."""

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, Any] | None = None):
        object.__setattr__(self, "_values", dict(values or {}))

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __getattr__(self, key: str) -> Any:
        try:
            return self._values[key]
        except KeyError:
            raise AttributeError(key) from None

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError("Options are read-only")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and _comparable(self) == _comparable(other)

    def __hash__(self) -> int:
        return hash(tuple(sorted((k, repr(v)) for k, v in _comparable(self).items())))

    def __repr__(self) -> str:
        return f"Options({self._values!r})"


def _comparable(values: Mapping) -> dict:
    """Options as they compare: an absent vector field (None) equals an empty one, as a format that lacks
    the field reads it (circle has no FullyConnectedOptions.quant_spec) and a writer may store it."""
    return {k: None if isinstance(v, (tuple, bytes)) and len(v) == 0 else v for k, v in values.items()}


@dataclass(frozen=True, eq=False)
class Buffer:
    """Bytes of one model buffer (a view, not a copy); equal when the bytes are."""

    data: np.ndarray | None = None  # uint8, 1-D

    @property
    def size(self) -> int:
        return 0 if self.data is None else int(self.data.size)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Buffer):
            return NotImplemented
        if self.size != other.size:
            return False
        return self.size == 0 or bool(np.array_equal(self.data, other.data))

    def __hash__(self) -> int:
        return hash(self.size)


@dataclass(frozen=True)
class Quantization:
    """Affine quantization: real = scale * (q - zero_point), per tensor or per axis."""

    scale: tuple[float, ...] = ()
    zero_point: tuple[int, ...] = ()
    quantized_dimension: int = 0
    min: tuple[float, ...] = ()
    max: tuple[float, ...] = ()
    # Blockwise / multi-axis / custom details: {"type": member name, ...fields}
    details: Options | None = None

    @property
    def is_per_axis(self) -> bool:
        return len(self.scale) > 1

    @property
    def is_affine(self) -> bool:
        return len(self.scale) > 0


@dataclass(frozen=True)
class Tensor:
    index: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    buffer: int = 0
    shape_signature: tuple[int, ...] | None = None
    quantization: Quantization | None = None
    is_variable: bool = False
    has_rank: bool = True
    sparsity: Options | None = None
    # Raw bytes of the constant, if any (compared through Model.buffers).
    raw: np.ndarray | None = field(default=None, compare=False, repr=False)

    @property
    def is_constant(self) -> bool:
        return self.raw is not None and self.raw.size > 0 and self.sparsity is None

    @property
    def has_data(self) -> bool:
        """Whether ``data`` is not None, asked without decoding it: ``data`` unpacks sub-byte weights into a
        byte per value and keeps that copy (a 3.4 GB int4 decoder's 6.8 GB, unpacked only to ask this)."""
        return self.raw is not None and self.raw.size > 0

    @property
    def num_elements(self) -> int:
        return math.prod(self.shape)

    @property
    def detail_tensors(self) -> tuple[int, ...]:
        """Tensors that this tensor's quantization details name (blockwise scales and zero points): ops read them
        through this tensor, without taking them as inputs."""
        details = self.quantization.details if self.quantization is not None else None
        if details is None:
            return ()
        found = []
        for name in ("scales", "zero_points"):
            try:
                index = int(details.get(name, -1))
            except (TypeError, ValueError):
                continue
            if index >= 0:
                found.append(index)
        return tuple(found)

    @property
    def is_dynamic(self) -> bool:
        return self.shape_signature is not None and any(d < 0 for d in self.shape_signature)

    @functools.cached_property
    def data(self) -> np.ndarray | None:
        """The constant's values with the tensor's shape (a view where possible)."""
        if self.raw is None or self.raw.size == 0:
            return None
        if self.dtype in SUB_BYTE_BITS:
            return unpack_sub_byte(self.raw, self.dtype, self.num_elements).reshape(self.shape)
        if self.dtype in ("string", "resource", "variant") or self.dtype in BLOCK_LAYOUTS:
            return self.raw  # block-quantized weights: the file's bytes, decoded by the op that reads them
        values = self.raw.view(numpy_dtype(self.dtype))
        # A sparse constant stores only its non-zero values; DENSIFY rebuilds the dense shape.
        return values if self.sparsity is not None else values.reshape(self.shape)


@dataclass(frozen=True)
class Operator:
    index: int
    opcode_name: str                 # builtin name (e.g. "CONV_2D") or the custom code
    inputs: tuple[int, ...]          # tensor indices; -1 marks an omitted optional input
    outputs: tuple[int, ...]
    options: Options = field(default_factory=Options)
    options_type: str | None = None  # the options table's name, e.g. "Conv2DOptions"
    version: int = 1
    builtin_code: int | None = None  # None for custom ops
    custom_options: bytes | None = None
    custom_options_format: str = "FLEXBUFFERS"
    intermediates: tuple[int, ...] = ()
    mutating_variable_inputs: tuple[bool, ...] = ()

    @property
    def is_custom(self) -> bool:
        return self.builtin_code is None

    def __str__(self) -> str:
        return f"{self.opcode_name} (#{self.index})"


@dataclass(frozen=True)
class Subgraph:
    index: int
    name: str
    tensors: tuple[Tensor, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    operators: tuple[Operator, ...]

    def producers(self) -> dict[int, int]:
        """tensor index -> index of the op that writes it."""
        return {t: op.index for op in self.operators for t in op.outputs if t >= 0}


@dataclass(frozen=True)
class SignatureTensor:
    name: str
    tensor_index: int


@dataclass(frozen=True)
class Signature:
    key: str
    subgraph_index: int
    inputs: tuple[SignatureTensor, ...]
    outputs: tuple[SignatureTensor, ...]


@dataclass(frozen=True)
class Metadata:
    name: str
    buffer: int


@dataclass(frozen=True)
class Model:
    subgraphs: tuple[Subgraph, ...]
    buffers: tuple[Buffer, ...] = (Buffer(),)
    signatures: tuple[Signature, ...] = ()
    metadata: tuple[Metadata, ...] = ()
    description: str = ""
    # The schema version the file holds (TFLite 3, circle 0): the format's business, not part of equality.
    version: int = field(default=3, compare=False)
    # Where the model came from, for messages; not part of equality.
    source: str = field(default="<memory>", compare=False)
    # The format it was read from ("tflite" or "circle"), which a writer keeps unless told otherwise;
    # not part of equality: a model means the same in either.
    file_format: str = field(default="tflite", compare=False)

    @property
    def main(self) -> Subgraph:
        return self.subgraphs[0]

    @property
    def tflite_file(self) -> str | None:
        """The .tflite file the model was read from, for engines that read the file itself (the official
        interpreter, OpenVINO); None for models in memory and for circle files, which they cannot read."""
        import os

        return self.source if self.file_format == "tflite" and os.path.isfile(self.source) else None

    def metadata_bytes(self, name: str) -> bytes | None:
        for m in self.metadata:
            if m.name == name and 0 <= m.buffer < len(self.buffers):
                data = self.buffers[m.buffer].data
                return b"" if data is None else data.tobytes()
        return None

    def op_histogram(self, subgraph_index: int = 0) -> dict[str, int]:
        counts: dict[str, int] = {}
        for op in self.subgraphs[subgraph_index].operators:
            counts[op.opcode_name] = counts.get(op.opcode_name, 0) + 1
        return counts
