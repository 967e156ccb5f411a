"""From the IR back to a .tflite file, inline or with buffers after the FlatBuffer.

FlatBuffers address at most 2 GB, so a large model keeps its weights after
the FlatBuffer (``Buffer.offset/size``, from the start of the file, each block
16-byte aligned).  Writing that layout is two-phase: the FlatBuffer is built
once with placeholder offsets to learn its size (a scalar's value never
changes the layout), then again with the real offsets, and the deduplicated
buffers are streamed after it.  Everything goes through a temp file and a
rename, so a failure never leaves a broken model behind.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, BinaryIO

import numpy as np
import xxhash

from ..format import atomic_write, encode_model
from ..format.schema import load_schema
from .dtypes import to_tflite
from .model import Buffer, Model, Operator, Options, Quantization, Tensor
from .opcodes import builtin_codes, options_union_for

# Past this many bytes of constants (with room for the FlatBuffer itself) the
# inline layout cannot be addressed, so the extended layout is chosen.
INLINE_LIMIT = (1 << 31) - (64 << 20)
# Buffers after the FlatBuffer start on 64-byte boundaries: the format asks for 16, and 64 lets XLA on the
# CPU use the memory-mapped weights in place instead of copying them (measured: a 2.55 GB float32 model peaks
# at 1.16x its file size with 64, 3.26x with 16; see BENCHMARKS.md).
ALIGNMENT = 64
CUSTOM_CODE = 32


def thaw(value: Any) -> Any:
    """IR option values -> what the encoder takes."""
    if isinstance(value, Options):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, bytes):
        return np.frombuffer(value, np.uint8)
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


def _quantization(q: Quantization | None) -> dict | None:
    if q is None:
        return None
    out: dict[str, Any] = {"quantized_dimension": q.quantized_dimension}
    for key in ("scale", "min", "max"):
        if getattr(q, key):
            out[key] = np.asarray(getattr(q, key), np.float32)
    if q.zero_point:
        out["zero_point"] = np.asarray(q.zero_point, np.int64)
    if q.details is not None:
        details = dict(thaw(q.details))
        out["details_type"] = details.pop("type")
        out["details"] = details
    return out


def _tensor(t: Tensor) -> dict:
    return {
        "shape": np.asarray(t.shape, np.int32), "type": to_tflite(t.dtype), "buffer": t.buffer, "name": t.name,
        "quantization": _quantization(t.quantization), "is_variable": t.is_variable,
        "sparsity": thaw(t.sparsity) if t.sparsity is not None else None,
        "shape_signature": np.asarray(t.shape_signature, np.int32) if t.shape_signature is not None else None,
        "has_rank": t.has_rank,
    }


def _operator(op: Operator, opcode_index: int) -> dict:
    out: dict[str, Any] = {
        "opcode_index": opcode_index,
        "inputs": np.asarray(op.inputs, np.int32), "outputs": np.asarray(op.outputs, np.int32),
        "custom_options_format": op.custom_options_format,
    }
    if op.intermediates:
        out["intermediates"] = np.asarray(op.intermediates, np.int32)
    if op.mutating_variable_inputs:
        out["mutating_variable_inputs"] = np.asarray(op.mutating_variable_inputs, np.bool_)
    if op.custom_options is not None:
        out["custom_options"] = np.frombuffer(op.custom_options, np.uint8)
    if op.options_type is not None:
        key = "builtin_options" if options_union_for(op.options_type) == "BuiltinOptions" else "builtin_options_2"
        out[key + "_type"] = op.options_type
        out[key] = thaw(op.options)
    return out


def _opcode(op: Operator) -> dict:
    if op.is_custom:
        return {"deprecated_builtin_code": CUSTOM_CODE, "builtin_code": "CUSTOM",
                "custom_code": op.opcode_name, "version": op.version}
    code = op.builtin_code if op.builtin_code is not None else builtin_codes()[op.opcode_name]
    # Readers older than schema 3a only know the deprecated (int8) field.
    return {"deprecated_builtin_code": min(code, 127), "builtin_code": code, "version": op.version}


def model_to_tables(model: Model, buffer_tables: list[dict]) -> dict:
    opcode_keys: dict[tuple, int] = {}
    opcodes: list[dict] = []
    subgraphs = []
    for sg in model.subgraphs:
        ops = []
        for op in sg.operators:
            key = (op.opcode_name, op.is_custom, op.version)
            if key not in opcode_keys:
                opcode_keys[key] = len(opcodes)
                opcodes.append(_opcode(op))
            ops.append(_operator(op, opcode_keys[key]))
        subgraphs.append({"tensors": [_tensor(t) for t in sg.tensors],
                          "inputs": np.asarray(sg.inputs, np.int32), "outputs": np.asarray(sg.outputs, np.int32),
                          "operators": ops, "name": sg.name or None})
    return {
        "version": model.version, "operator_codes": opcodes, "subgraphs": subgraphs,
        "description": model.description or None, "buffers": buffer_tables,
        "metadata": [{"name": m.name, "buffer": m.buffer} for m in model.metadata] or None,
        "signature_defs": [{
            "inputs": [{"name": t.name, "tensor_index": t.tensor_index} for t in s.inputs],
            "outputs": [{"name": t.name, "tensor_index": t.tensor_index} for t in s.outputs],
            "signature_key": s.key, "subgraph_index": s.subgraph_index} for s in model.signatures] or None,
    }


def _align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def constant_bytes(model: Model) -> int:
    return sum(b.size for b in model.buffers)


def to_bytes(model: Model) -> bytes:
    """The inline layout (weights inside the FlatBuffer); for models under 2 GB."""
    return bytes(encode_model(model_to_tables(model, [{"data": b.data} for b in model.buffers]),
                              size_hint=constant_bytes(model)))


def _extended_layout(model: Model) -> tuple[bytearray, list[tuple[int, np.ndarray]]]:
    """The FlatBuffer with real offsets, and (offset, data) blocks to append after it."""
    unique: dict[tuple[int, bytes], int] = {}   # (size, digest) -> slot in `blocks`
    slots: list[int | None] = []
    blocks: list[np.ndarray] = []
    for b in model.buffers:
        if b.size == 0:
            slots.append(None)
            continue
        key = (b.size, xxhash.xxh3_128_digest(b.data))
        if key not in unique:
            unique[key] = len(blocks)
            blocks.append(b.data)
        slots.append(unique[key])

    def tables(offsets: list[int]) -> list[dict]:
        return [{} if s is None else {"offset": offsets[s], "size": int(blocks[s].size)} for s in slots]

    # Phase 1: placeholders (non-zero, so the fields are stored) give the size.
    size = len(encode_model(model_to_tables(model, tables([1] * len(blocks)))))
    offsets, pos = [], _align(size)
    for block in blocks:
        offsets.append(pos)
        pos = _align(pos + block.size)
    # Phase 2: the same layout with the real offsets.
    flatbuffer = encode_model(model_to_tables(model, tables(offsets)))
    assert len(flatbuffer) == size, "FlatBuffer layout changed between the two phases"
    return flatbuffer, list(zip(offsets, blocks))


def write_extended(model: Model, out: BinaryIO, progress: Callable[[int], None] | None = None) -> None:
    flatbuffer, blocks = _extended_layout(model)
    out.write(flatbuffer)
    pos = len(flatbuffer)
    for offset, data in blocks:
        out.write(b"\0" * (offset - pos))
        out.write(memoryview(np.ascontiguousarray(data)))
        pos = offset + data.size
        if progress is not None:
            progress(int(data.size))
    out.write(b"\0" * (_align(pos) - pos))


def write_model(model: Model, path: str | os.PathLike, *, extended_buffers: bool | None = None,
                threshold: int = INLINE_LIMIT, progress: Callable[[int], None] | None = None) -> None:
    """Write ``model`` to ``path`` atomically.

    ``extended_buffers``: True forces buffers after the FlatBuffer, False forces
    the inline layout, None (default) picks extended when the constants pass
    ``threshold`` bytes.
    """
    extended = extended_buffers if extended_buffers is not None else constant_bytes(model) > threshold
    if extended:
        atomic_write(path, lambda f: write_extended(model, f, progress))
    else:
        data = to_bytes(model)
        atomic_write(path, lambda f: f.write(data))


__all__ = ["write_model", "to_bytes", "write_extended", "constant_bytes", "INLINE_LIMIT", "Buffer", "Mapping"]
