"""Reading a custom op's option bytes: raw C structs (MediaPipe) or FlexBuffer maps.

MediaPipe's older GPU-delegate ops (Convolution2DTransposeBias,
MaxPoolingWithArgmax2D, MaxUnpooling2D) store a TFLite C params struct
verbatim, so the bytes are a run of native-endian int32 fields; everything
else (MediaPipe's newer ops, TFLite_Detection_PostProcess) stores a
FlexBuffer map.  Both parsers cache by content: an op's bytes never change,
and the reference backend asks for them on every run.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence
from typing import Any

from ..errors import ModelFormatError
from ..ir import Operator

# TfLitePadding: the value MediaPipe's structs hold in their `padding` field.
TFLITE_PADDING = {0: "UNKNOWN", 1: "SAME", 2: "VALID"}
# TfLiteFusedActivation, for the structs' `activation` field.
TFLITE_ACTIVATION = {0: "NONE", 1: "RELU", 2: "RELU_N1_TO_1", 3: "RELU6", 4: "TANH", 5: "SIGN_BIT", 6: "SIGMOID"}


def struct_options(op: Operator, struct_name: str, fields: Sequence[str]) -> dict[str, int]:
    """The leading int32 ``fields`` of a raw C struct stored as ``op.custom_options``.

    Trailing bytes are allowed: newer TFLite versions appended fields to these
    structs, and MediaPipe models carry whichever size their converter knew.
    """
    data = op.custom_options
    need = 4 * len(fields)
    if data is None or len(data) < need:
        size = "no custom options" if data is None else f"{len(data)} bytes of custom options"
        raise ModelFormatError(f"{op}: has {size}, expected a {struct_name} struct of at least {need} bytes "
                               f"({', '.join(fields)} as int32)")
    return dict(zip(fields, _unpack_int32(bytes(data[:need]))))


@functools.lru_cache(maxsize=256)
def _unpack_int32(data: bytes) -> tuple[int, ...]:
    return struct.unpack(f"<{len(data) // 4}i", data)


def flex_options(op: Operator) -> dict[str, Any]:
    """The FlexBuffer map stored as ``op.custom_options`` (a fresh dict)."""
    data = op.custom_options
    if data is None or len(data) == 0:
        raise ModelFormatError(f"{op}: has no custom options, expected a FlexBuffer map")
    return dict(_load_flex(op, bytes(data)))


def _load_flex(op: Operator, data: bytes) -> dict[str, Any]:
    try:
        value = _cached_flex(data)
    except Exception as e:  # the flexbuffers reader raises anything on bad bytes
        raise ModelFormatError(f"{op}: custom options are not a valid FlexBuffer ({type(e).__name__}: {e})") from None
    if not isinstance(value, dict):
        raise ModelFormatError(f"{op}: custom options hold a FlexBuffer {type(value).__name__}, expected a map")
    return value


@functools.lru_cache(maxsize=256)
def _cached_flex(data: bytes) -> Any:
    from flatbuffers import flexbuffers

    return flexbuffers.Loads(data)


def require(op: Operator, options: dict[str, Any], key: str, kind: type) -> Any:
    """``options[key]`` converted to ``kind`` (int, float or bool), or a ModelFormatError."""
    if key not in options or options[key] is None:
        raise ModelFormatError(f"{op}: custom options lack {key!r}")
    return convert(op, key, options[key], kind)


def optional(op: Operator, options: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    value = options.get(key)
    return default if value is None else convert(op, key, value, kind)


def convert(op: Operator, key: str, value: Any, kind: type) -> Any:
    # FlexBuffers' AsFloat/AsInt32 accept any numeric type; so do we.
    if isinstance(value, (bool, int, float)):
        return kind(value)
    raise ModelFormatError(f"{op}: custom option {key!r} is {value!r}, expected a {kind.__name__}")


def int_list(op: Operator, options: dict[str, Any], key: str) -> list[int]:
    value = options.get(key)
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, (int, float)) for v in value):
        raise ModelFormatError(f"{op}: custom option {key!r} is {value!r}, expected a vector of ints")
    return [int(v) for v in value]
