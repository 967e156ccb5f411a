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

from ..errors import FormatConversionError
from ..format import TFLITE, FileFormat, atomic_write, encode_model, file_format, format_for_path
from ..format.schema import Schema
from .dtypes import to_tflite
from .model import Buffer, Model, Operator, Options, Quantization, Subgraph, Tensor
from .opcodes import builtin_codes, option_defaults, options_union_for

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


def _fitted(schema: Schema, fmt: FileFormat, table: str, values: Mapping, where: str) -> dict:
    """``values`` (an IR options or details table, frozen) as ``fmt``'s table of that name holds it,
    thawed for the encoder.  A field the format's table lacks may only be dropped while it holds the
    IR default (circle's FullyConnectedOptions has no quant_spec, its blockwise details no block_shape)."""
    if table not in schema.tables:
        raise FormatConversionError(f"{where}: {table} has no place in a .{fmt.name} file")
    fields = schema.tables[table].by_name
    defaults = option_defaults(table)
    for key, value in values.items():
        if key not in fields and not _is_default(value, defaults.get(key)):
            raise FormatConversionError(f"{where}: {table}.{key} = {value!r} cannot be written to a .{fmt.name} "
                                        "file (its schema has no such field)")
    return {k: thaw(v) for k, v in values.items() if k in fields}


def _is_default(value: Any, default: Any) -> bool:
    empty = ((), b"", None)
    return value == default or (value in empty and default in empty)


def _quantization(q: Quantization | None, schema: Schema, fmt: FileFormat, where: str) -> dict | None:
    if q is None:
        return None
    out: dict[str, Any] = {"quantized_dimension": q.quantized_dimension}
    for key in ("scale", "min", "max"):
        if getattr(q, key):
            out[key] = np.asarray(getattr(q, key), np.float32)
    if q.zero_point:
        out["zero_point"] = np.asarray(q.zero_point, np.int64)
    if q.details is not None:
        details = dict(q.details)
        kind = details.pop("type")
        if kind not in schema.unions["QuantizationDetails"].members:
            raise FormatConversionError(f"{where}: {kind} quantization cannot be written to a .{fmt.name} file")
        out["details_type"] = kind
        out["details"] = _fitted(schema, fmt, kind, details, where)
    return out


def _tensor(t: Tensor, sg: int, schema: Schema, fmt: FileFormat) -> dict:
    where = f"subgraph {sg} tensor {t.index} ({t.name!r})"
    type_name = to_tflite(t.dtype)
    if type_name not in schema.enums["TensorType"].values:
        raise FormatConversionError(f"{where}: tensor type {t.dtype} has no place in a .{fmt.name} file")
    return {
        "shape": np.asarray(t.shape, np.int32), "type": type_name, "buffer": t.buffer, "name": t.name,
        "quantization": _quantization(t.quantization, schema, fmt, where), "is_variable": t.is_variable,
        "sparsity": thaw(t.sparsity) if t.sparsity is not None else None,
        "shape_signature": np.asarray(t.shape_signature, np.int32) if t.shape_signature is not None else None,
        "has_rank": t.has_rank,
    }


def _operator(op: Operator, opcode_index: int, sg: int, schema: Schema, fmt: FileFormat) -> dict:
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
        where = f"subgraph {sg} op {op}"
        if op.options_type not in schema.unions[_UNION_OF_KEY[key]].members:
            raise FormatConversionError(f"{where}: {op.options_type} cannot be written to a .{fmt.name} file")
        out[key + "_type"] = op.options_type
        out[key] = _fitted(schema, fmt, op.options_type, op.options, where)
    return out


_UNION_OF_KEY = {"builtin_options": "BuiltinOptions", "builtin_options_2": "BuiltinOptions2"}


def _opcode(op: Operator, schema: Schema, fmt: FileFormat) -> dict:
    if op.is_custom:
        return {"deprecated_builtin_code": CUSTOM_CODE, "builtin_code": "CUSTOM",
                "custom_code": op.opcode_name, "version": op.version}
    code = op.builtin_code if op.builtin_code is not None else builtin_codes()[op.opcode_name]
    if code not in schema.enums["BuiltinOperator"].names:
        raise FormatConversionError(f"op {op.opcode_name} (code {code}) has no place in a .{fmt.name} file")
    # Readers older than schema 3a only know the deprecated (int8) field; circle keeps its negative
    # codes there too (min leaves them as they are).
    return {"deprecated_builtin_code": min(code, 127), "builtin_code": code, "version": op.version}


def model_to_tables(model: Model, buffer_tables: list[dict], fmt: FileFormat = TFLITE) -> dict:
    """The Model table of ``fmt``'s schema; FormatConversionError for what ``fmt`` cannot hold."""
    schema = fmt.schema
    opcode_keys: dict[tuple, int] = {}
    opcodes: list[dict] = []
    subgraphs = []
    for sg in model.subgraphs:
        ops = []
        for op in sg.operators:
            key = (op.opcode_name, op.is_custom, op.version)
            if key not in opcode_keys:
                opcode_keys[key] = len(opcodes)
                opcodes.append(_opcode(op, schema, fmt))
            ops.append(_operator(op, opcode_keys[key], sg.index, schema, fmt))
        subgraphs.append({"tensors": [_tensor(t, sg.index, schema, fmt) for t in sg.tensors],
                          "inputs": np.asarray(sg.inputs, np.int32), "outputs": np.asarray(sg.outputs, np.int32),
                          "operators": ops, "name": sg.name or None})
    # A model converted to another format takes that format's schema version.
    version = model.version if fmt.name == model.file_format else fmt.schema_version
    return {
        "version": version, "operator_codes": opcodes, "subgraphs": subgraphs,
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


def format_refusal(model: Model, fmt: FileFormat = TFLITE) -> str | None:
    """Why ``model`` cannot be written as ``fmt`` (a circle-only op or type as .tflite), or None."""
    try:
        model_to_tables(model, [{} for _ in model.buffers], fmt)
    except FormatConversionError as e:
        return str(e)
    return None


def op_format_refusal(sg: Subgraph, op: Operator, fmt: FileFormat = TFLITE) -> str | None:
    """Why one op cannot be written as ``fmt`` (its code, or a tensor type or quantization of its
    inputs and outputs), or None: what engines that read TFLite ask before taking an op."""
    schema = fmt.schema
    if not op.is_custom and op.builtin_code not in schema.enums["BuiltinOperator"].names:
        return f"{op.opcode_name} is not a {fmt.name} op"
    for t in (sg.tensors[i] for i in (*op.inputs, *op.outputs) if i >= 0):
        if to_tflite(t.dtype) not in schema.enums["TensorType"].values:
            return f"tensor {t.name!r} is {t.dtype}, not a {fmt.name} type"
        details = t.quantization.details if t.quantization is not None else None
        if details is not None and details["type"] not in schema.unions["QuantizationDetails"].members:
            return f"tensor {t.name!r} has {details['type']}, not a {fmt.name} quantization"
    return None


def to_bytes(model: Model, fmt: FileFormat = TFLITE) -> bytes:
    """The inline layout (weights inside the FlatBuffer); for models under 2 GB.  TFLite unless ``fmt``
    says otherwise (the engines that read these bytes know TFLite only)."""
    return bytes(encode_model(model_to_tables(model, [{"data": b.data} for b in model.buffers], fmt),
                              size_hint=constant_bytes(model), fmt=fmt))


def _extended_layout(model: Model, fmt: FileFormat) -> tuple[bytearray, list[tuple[int, np.ndarray]]]:
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
    size = len(encode_model(model_to_tables(model, tables([1] * len(blocks)), fmt), fmt=fmt))
    offsets, pos = [], _align(size)
    for block in blocks:
        offsets.append(pos)
        pos = _align(pos + block.size)
    # Phase 2: the same layout with the real offsets.
    flatbuffer = encode_model(model_to_tables(model, tables(offsets), fmt), fmt=fmt)
    assert len(flatbuffer) == size, "FlatBuffer layout changed between the two phases"
    return flatbuffer, list(zip(offsets, blocks))


def write_extended(model: Model, out: BinaryIO, progress: Callable[[int], None] | None = None,
                   fmt: FileFormat = TFLITE) -> None:
    flatbuffer, blocks = _extended_layout(model, fmt)
    out.write(flatbuffer)
    pos = len(flatbuffer)
    for offset, data in blocks:
        out.write(b"\0" * (offset - pos))
        out.write(memoryview(np.ascontiguousarray(data)))
        pos = offset + data.size
        if progress is not None:
            progress(int(data.size))
    out.write(b"\0" * (_align(pos) - pos))


def output_format(path: str | os.PathLike, model: Model, name: str | None = None) -> FileFormat:
    """The format a model is written in: ``name`` when given, else what the file name says
    (``.circle`` / ``.tflite``), else the format the model was read from."""
    if name is not None:
        return file_format(name)
    suffix = os.path.splitext(str(path))[1].lower()
    return format_for_path(path) if suffix in (".circle", ".tflite") else file_format(model.file_format)


def write_model(model: Model, path: str | os.PathLike, *, extended_buffers: bool | None = None,
                threshold: int = INLINE_LIMIT, progress: Callable[[int], None] | None = None,
                file_format: str | None = None) -> None:
    """Write ``model`` to ``path`` atomically.

    ``extended_buffers``: True forces buffers after the FlatBuffer, False forces
    the inline layout, None (default) picks extended when the constants pass
    ``threshold`` bytes.  ``file_format`` ("tflite" or "circle"): see ``output_format``.
    Nothing is written when the format cannot hold the model (FormatConversionError).
    """
    fmt = output_format(path, model, file_format)
    extended = extended_buffers if extended_buffers is not None else constant_bytes(model) > threshold
    if extended:
        atomic_write(path, lambda f: write_extended(model, f, progress, fmt))
    else:
        data = to_bytes(model, fmt)
        atomic_write(path, lambda f: f.write(data))


__all__ = ["write_model", "to_bytes", "write_extended", "constant_bytes", "format_refusal", "op_format_refusal",
           "output_format",
           "INLINE_LIMIT", "Buffer", "Mapping"]
