"""``litegpu dump``: every table of the FlatBuffer as indented text.

Byte vectors (weights, custom options) print as where they lie in the file,
their size and a short preview, so a 10 MB model dumps to a readable page.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ..format import RawModel, decode_model
from .common import hex_preview

MAX_INLINE_ITEMS = 16
INDENT = "  "


class _Dumper:
    def __init__(self, raw: RawModel):
        self.raw = raw
        self.base = np.frombuffer(raw.buffer, np.uint8).ctypes.data if raw.size else 0
        self.lines: list[str] = []

    def emit(self, depth: int, text: str) -> None:
        self.lines.append(INDENT * depth + text)

    def location(self, array: np.ndarray) -> str:
        return f"bytes {array.ctypes.data - self.base}..{array.ctypes.data - self.base + array.nbytes}"

    def scalar_vector(self, array: np.ndarray) -> str:
        if array.dtype == np.uint8 and array.size:
            return f"<{array.size} bytes at {self.location(array)}: {hex_preview(array)}>"
        items = array[:MAX_INLINE_ITEMS].tolist()
        text = "[" + ", ".join(map(str, items))
        if array.size > MAX_INLINE_ITEMS:
            return text + f", ...] ({array.size} items)"
        return text + "]"

    def after_flatbuffer(self, offset: int, size: int) -> str:
        block = np.frombuffer(self.raw.buffer, np.uint8, min(size, max(self.raw.size - offset, 0)), offset)
        return f"<{size} bytes after the FlatBuffer at bytes {offset}..{offset + size}: {hex_preview(block)}>"

    def table(self, depth: int, value: dict) -> None:
        for key, item in value.items():
            if item is None:
                continue  # absent from the file
            self.field(depth, key, item)
        offset, size = int(value.get("offset") or 0), int(value.get("size") or 0)
        if offset > 1 and "data" in value:  # a Buffer whose bytes live after the FlatBuffer
            self.emit(depth, "stored: " + self.after_flatbuffer(offset, size))
        offset = int(value.get("large_custom_options_offset") or 0)
        if offset > 1:
            size = int(value.get("large_custom_options_size") or 0)
            self.emit(depth, "large_custom_options: " + self.after_flatbuffer(offset, size))

    def field(self, depth: int, key: str, item: Any) -> None:
        if isinstance(item, dict):
            self.emit(depth, f"{key}:")
            self.table(depth + 1, item)
        elif isinstance(item, list):
            self.emit(depth, f"{key}: ({len(item)} items)" if item else f"{key}: []")
            for i, element in enumerate(item):
                if isinstance(element, dict) and key == "operator_codes":
                    self.operator_code(depth + 1, i, element)
                elif isinstance(element, dict):
                    self.emit(depth + 1, f"[{i}]:")
                    self.table(depth + 2, element)
                else:
                    self.emit(depth + 1, f"[{i}]: {json.dumps(element)}")
        elif isinstance(item, np.ndarray):
            self.emit(depth, f"{key}: {self.scalar_vector(item)}")
        elif isinstance(item, str):
            self.emit(depth, f"{key}: {json.dumps(item)}")
        else:
            self.emit(depth, f"{key}: {item}")


    def operator_code(self, depth: int, i: int, value: dict) -> None:
        """An OperatorCode, headed by the op it means: its two code fields named, and the one that is not the
        op's said so (a file of older writers leaves ``builtin_code`` at its default, 0, which reads "ADD")."""
        from ..format import CIRCLE
        from ..ir.load import CUSTOM_CODE, operator_code

        names = self.raw.schema.enums["BuiltinOperator"].names
        code = operator_code(value, self.raw.file_format is CIRCLE)
        op = value.get("custom_code") if code == CUSTOM_CODE and value.get("custom_code") else \
            names.get(code, f"UNKNOWN_BUILTIN_{code}")
        self.emit(depth, f"[{i}]: {op}")
        for key, item in value.items():
            if item is None:
                continue
            if key == "deprecated_builtin_code":
                item = int(item)
                note = "" if item == code else ", not the op's code"
                self.emit(depth + 1, f"{key}: {item} ({names.get(item, 'unknown')}{note})")
            elif key == "builtin_code":
                number = self.raw.schema.enums["BuiltinOperator"].values.get(item, item) if isinstance(item, str) \
                    else int(item)
                note = "" if number == code else (", the field's default where a writer left it out: not the "
                                                  "op's code" if number == 0 else ", not the op's code")
                self.emit(depth + 1, f"{key}: {number} ({names.get(number, 'unknown')}{note})")
            else:
                self.field(depth + 1, key, item)


def dump_lines(path: str | Path) -> list[str]:
    raw = decode_model(path)
    dumper = _Dumper(raw)
    dumper.emit(0, f"# {raw.where}: {raw.file_format.name} ({raw.file_format.identifier.decode()}), {raw.size} bytes, "
                   f"FlatBuffer part ends at byte {raw.flatbuffer_end}")
    dumper.emit(0, "Model:")
    dumper.table(1, raw.root)
    return dumper.lines


def run(args: Any) -> int:
    lines = dump_lines(args.file)
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("dump", help="print every table of the model's FlatBuffer")
    p.add_argument("file", metavar="FILE", type=Path, help="the .tflite or .circle model")
    p.set_defaults(handler=run)
