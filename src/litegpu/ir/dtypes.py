"""TFLite tensor types and their numpy counterparts.

IR dtypes are lower-case strings (``"float32"``, ``"int8"``, ``"int4"``) so
they print well and compare cheaply; ``numpy_dtype`` maps them to numpy.
Sub-byte types (int4, uint4, int2) are stored packed in files, element 2i in
the low nibble, and are unpacked to int8/uint8 arrays when read.
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np

from ..errors import ModelFormatError

# TFLite TensorType name -> IR dtype name
_FROM_TFLITE = {
    "FLOAT32": "float32", "FLOAT16": "float16", "INT32": "int32", "UINT8": "uint8",
    "INT64": "int64", "STRING": "string", "BOOL": "bool", "INT16": "int16",
    "COMPLEX64": "complex64", "INT8": "int8", "FLOAT64": "float64", "COMPLEX128": "complex128",
    "UINT64": "uint64", "RESOURCE": "resource", "VARIANT": "variant", "UINT32": "uint32",
    "UINT16": "uint16", "INT4": "int4", "BFLOAT16": "bfloat16", "INT2": "int2", "UINT4": "uint4",
    "FLOAT8_E4M3FN": "float8_e4m3fn", "FLOAT8_E5M2": "float8_e5m2",
    # circle's own weight types (negative codes in its schema)
    "GGML_Q4_0": "ggml_q4_0", "GGML_Q4_1": "ggml_q4_1", "GGML_Q8_0": "ggml_q8_0", "GGML_Q8_1": "ggml_q8_1",
    "MXFP4": "mxfp4", "MXINT8": "mxint8",
}
_TO_TFLITE = {v: k for k, v in _FROM_TFLITE.items()}

_NUMPY = {
    "float32": np.float32, "float16": np.float16, "int32": np.int32, "uint8": np.uint8,
    "int64": np.int64, "bool": np.bool_, "int16": np.int16, "complex64": np.complex64,
    "int8": np.int8, "float64": np.float64, "complex128": np.complex128, "uint64": np.uint64,
    "uint32": np.uint32, "uint16": np.uint16, "bfloat16": ml_dtypes.bfloat16,
    "float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2,
    # Stored packed; the unpacked values live in the next wider type.
    "int4": np.int8, "uint4": np.uint8, "int2": np.int8,
    # Opaque handles and strings are carried as raw bytes / object ids.
    "string": np.object_, "resource": np.int32, "variant": np.int32,
    # Block-quantized weights are carried as their file bytes (see BLOCK_LAYOUTS).
    "ggml_q4_0": np.uint8, "ggml_q4_1": np.uint8, "ggml_q8_0": np.uint8, "ggml_q8_1": np.uint8,
    "mxfp4": np.uint8, "mxint8": np.uint8,
}

# Block-quantized weight types: (elements per block, bytes per block).  ggml's blocks of 32 run along
# a weight's last axis with their float16 scales inside (q4_0: scale + 16 bytes of nibbles; q4_1: scale,
# minimum + nibbles; q8_0: scale + 32 int8; q8_1: scale, sum + 32 int8); MX types store the elements
# alone (fp4 two a byte, int8 one), their shared exponents described by MXQuantization.
BLOCK_LAYOUTS = {"ggml_q4_0": (32, 18), "ggml_q4_1": (32, 20), "ggml_q8_0": (32, 34), "ggml_q8_1": (32, 36),
                 "mxfp4": (2, 1), "mxint8": (1, 1)}

SUB_BYTE_BITS = {"int4": 4, "uint4": 4, "int2": 2}
FLOAT_DTYPES = frozenset({"float32", "float16", "float64", "bfloat16", "float8_e4m3fn", "float8_e5m2"})
QUANTIZABLE_DTYPES = frozenset({"int8", "uint8", "int16", "int32", "int4", "uint4", "int2"})


def from_tflite(type_name: str | int, where: str) -> str:
    dtype = _FROM_TFLITE.get(type_name) if isinstance(type_name, str) else None
    if dtype is None:
        raise ModelFormatError(f"{where}: unknown tensor type {type_name!r}")
    return dtype


def to_tflite(dtype: str) -> str:
    return _TO_TFLITE[dtype]


def numpy_dtype(dtype: str) -> np.dtype:
    return np.dtype(_NUMPY[dtype])


def from_numpy(dtype: np.dtype | type) -> str:
    dtype = np.dtype(dtype)
    for name, np_type in _NUMPY.items():
        if name not in SUB_BYTE_BITS and name not in BLOCK_LAYOUTS and np.dtype(np_type) == dtype \
                and name not in ("resource", "variant"):
            return name
    raise ValueError(f"no TFLite type for numpy dtype {dtype}")


def storage_bytes(dtype: str, num_elements: int) -> int:
    """Bytes a tensor of ``num_elements`` takes in a file."""
    if dtype in BLOCK_LAYOUTS:
        per_block, block_bytes = BLOCK_LAYOUTS[dtype]
        return -(-num_elements // per_block) * block_bytes
    bits = SUB_BYTE_BITS.get(dtype)
    if bits is not None:
        return (num_elements * bits + 7) // 8
    return num_elements * numpy_dtype(dtype).itemsize


@functools.lru_cache(maxsize=None)
def _sub_byte_table(dtype: str, out: str | None = None) -> np.ndarray:
    """[256, values per byte]: the values each byte holds, low bits first (one gather unpacks a buffer), as
    int8 / uint8 or as ``ml_dtypes`` type ``out`` (e.g. int4, which XLA packs two to a byte on a device)."""
    bits = SUB_BYTE_BITS[dtype]
    shifts = np.arange(8 // bits, dtype=np.uint8) * bits
    values = (np.arange(256, dtype=np.uint8)[:, None] >> shifts[None, :]) & np.uint8((1 << bits) - 1)
    if dtype != "uint4":
        signed = values.astype(np.int8)
        values = np.where(signed >= (1 << (bits - 1)), signed - (1 << bits), signed).astype(np.int8)
    return values if out is None else values.astype(getattr(ml_dtypes, out))


def unpack_sub_byte(raw: np.ndarray, dtype: str, num_elements: int, out: str | None = None) -> np.ndarray:
    """Unpack int4/uint4/int2 data (element i in the low bits first) into one value a byte: int8 / uint8, or
    ``ml_dtypes`` type ``out``."""
    raw = np.asarray(raw, dtype=np.uint8).reshape(-1)
    per_byte = 8 // SUB_BYTE_BITS[dtype]
    return _sub_byte_table(dtype, out)[raw[:-(-num_elements // per_byte)]].reshape(-1)[:num_elements]


def pack_sub_byte(values: np.ndarray, dtype: str) -> np.ndarray:
    bits = SUB_BYTE_BITS[dtype]
    per_byte = 8 // bits
    flat = np.asarray(values).reshape(-1).astype(np.int16) & ((1 << bits) - 1)
    pad = (-flat.size) % per_byte
    flat = np.concatenate([flat, np.zeros(pad, np.int16)]).reshape(-1, per_byte)
    shifts = np.arange(per_byte) * bits
    return (flat << shifts).sum(axis=1).astype(np.uint8)
