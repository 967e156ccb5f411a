"""The TFLite file format: schema, checked FlatBuffers codec, file access.

This layer knows bytes and schema tables, nothing about what a model means;
``litegpu.ir`` turns its tables into the model IR.
"""

from .codec import Decoder, Encoder
from .file import FILE_IDENTIFIER, RawModel, atomic_write, decode_model, encode_model, open_source
from .schema import Schema, load_schema

__all__ = [
    "FILE_IDENTIFIER", "Decoder", "Encoder", "RawModel", "Schema", "atomic_write",
    "decode_model", "encode_model", "load_schema", "open_source",
]
