"""The TFLite and circle file formats: schemas, checked FlatBuffers codec, file access.

This layer knows bytes and schema tables, nothing about what a model means;
``litegpu.ir`` turns its tables into the model IR.
"""

from .codec import Decoder, Encoder
from .file import (CIRCLE, FILE_IDENTIFIER, FORMATS, TFLITE, FileFormat, RawModel, atomic_write, decode_model,
                   encode_model, file_format, format_for_path, open_source)
from .schema import Schema, load_circle_schema, load_schema

__all__ = [
    "CIRCLE", "FILE_IDENTIFIER", "FORMATS", "TFLITE", "Decoder", "Encoder", "FileFormat", "RawModel", "Schema",
    "atomic_write", "decode_model", "encode_model", "file_format", "format_for_path", "load_circle_schema",
    "load_schema", "open_source",
]
