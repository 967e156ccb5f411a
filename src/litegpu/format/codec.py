"""Schema-driven FlatBuffers codec: a bounds-checked decoder and an encoder.

The decoder *is* the structural verifier: every offset, vtable, string and
vector is checked against the buffer's length before it is read, so a hostile
file raises :class:`ModelFormatError` naming the table path and byte position,
and never reads out of bounds or loops.  Tables decode to plain dicts keyed by
the schema's field names; a union field ``x`` decodes to ``x_type`` (member
name or None) and ``x`` (the member's dict).  Scalar vectors are returned as
numpy views into the original buffer, so a memory-mapped file is never copied.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

import flatbuffers
import numpy as np

from ..errors import ModelFormatError
from .schema import SCALARS, Schema, Table, load_schema

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")

_PREPEND_SLOT = {
    "bool": "PrependBoolSlot", "byte": "PrependInt8Slot", "ubyte": "PrependUint8Slot",
    "short": "PrependInt16Slot", "ushort": "PrependUint16Slot", "int": "PrependInt32Slot",
    "uint": "PrependUint32Slot", "long": "PrependInt64Slot", "ulong": "PrependUint64Slot",
    "float": "PrependFloat32Slot", "double": "PrependFloat64Slot",
}


class Decoder:
    """Reads tables out of one FlatBuffer with every access bounds-checked."""

    def __init__(self, buf: Any, where: str = "<buffer>", schema: Schema | None = None,
                 limit: int | None = None):
        self.buf = buf
        self.size = len(buf) if limit is None else limit
        self.where = where
        self.schema = schema or load_schema()
        # Tables reachable through shared offsets could otherwise make decoding
        # exponential; a legitimate table occupies at least 4 bytes of its own.
        self.table_budget = self.size // 4 + 64
        self._plans: dict[str, list] = {}

    def fail(self, path: str, message: str) -> ModelFormatError:
        return ModelFormatError(f"{self.where}: {path}: {message}")

    def _check(self, pos: int, length: int, path: str, what: str) -> None:
        if pos < 0 or length < 0 or pos + length > self.size:
            raise self.fail(path, f"{what} at byte {pos} (length {length}) lies outside the "
                                  f"{self.size}-byte FlatBuffer")

    def u16(self, pos: int, path: str) -> int:
        self._check(pos, 2, path, "a 16-bit value")
        return _U16.unpack_from(self.buf, pos)[0]

    def u32(self, pos: int, path: str) -> int:
        self._check(pos, 4, path, "a 32-bit value")
        return _U32.unpack_from(self.buf, pos)[0]

    def scalar(self, type_name: str, pos: int, path: str) -> Any:
        fmt, size, _ = SCALARS[type_name]
        self._check(pos, size, path, type_name)
        return struct.unpack_from("<" + fmt, self.buf, pos)[0]

    def follow(self, pos: int, path: str) -> int:
        """The target of the uoffset stored at ``pos``."""
        return pos + self.u32(pos, path)

    def root(self, root_type: str | None = None, identifier: bytes | None = None) -> dict:
        if self.size < 8:
            raise self.fail("header", f"file is {self.size} bytes, too short to hold a FlatBuffer")
        if identifier is not None:
            found = bytes(self.buf[4:8])
            if found != identifier:
                raise self.fail("header", f"file identifier is {found!r}, expected {identifier!r}")
        return self.table(self.follow(0, "root"), root_type or self.schema.root_type,
                          root_type or self.schema.root_type)

    def table(self, pos: int, table_name: str, path: str) -> dict:
        self.table_budget -= 1
        if self.table_budget < 0:
            raise self.fail(path, "too many tables for the file size (shared or looping offsets)")
        table = self.schema.tables[table_name]
        self._check(pos, 4, path, "a table")
        vtable = pos - _I32.unpack_from(self.buf, pos)[0]
        vt_len = self.u16(vtable, path + " vtable")
        obj_len = self.u16(vtable + 2, path + " vtable")
        if vt_len < 4 or vt_len % 2:
            raise self.fail(path, f"vtable at byte {vtable} has invalid length {vt_len}")
        self._check(vtable, vt_len, path, "vtable")
        if obj_len < 4:
            raise self.fail(path, f"table at byte {pos} has invalid size {obj_len}")
        self._check(pos, obj_len, path, "table")
        out: dict[str, Any] = {}
        for f, kind in self._fields(table_name):
            fpath = f"{path}.{f.name}"
            fpos = self._field_pos(pos, vtable, vt_len, obj_len, f.slot, fpath)
            if kind == "union":
                tpos = self._field_pos(pos, vtable, vt_len, obj_len, f.slot - 1, fpath + "_type")
                code = self.scalar("ubyte", tpos, fpath + "_type") if tpos is not None else 0
                member = self.schema.unions[f.type].member(code)
                if code and member is None:
                    raise self.fail(fpath, f"union type code {code} is not a member of {f.type}")
                out[f.name + "_type"] = member
                out[f.name] = (self.table(self.follow(fpos, fpath), member, fpath)
                               if member is not None and fpos is not None else None)
            elif fpos is None:
                out[f.name] = None if f.is_vector or kind in ("string", "table") else f.default
            elif f.is_vector:
                out[f.name] = self.vector(self.follow(fpos, fpath), f.type, fpath)
            elif kind == "string":
                out[f.name] = self.string(self.follow(fpos, fpath), fpath)
            elif kind == "table":
                out[f.name] = self.table(self.follow(fpos, fpath), f.type, fpath)
            elif kind == "enum":
                enum = self.schema.enums[f.type]
                raw = self.scalar(enum.underlying, fpos, fpath)
                out[f.name] = enum.names.get(raw, raw)
            elif kind == "scalar":
                out[f.name] = self.scalar(f.type, fpos, fpath)
            else:
                raise self.fail(fpath, f"struct fields ({f.type}) are not used by the TFLite or circle schemas")
        return out

    def _fields(self, table_name: str) -> list[tuple[Any, str]]:
        """A table's fields that are not deprecated, each with its kind (``Schema.kind``), worked out once per
        table and decoder rather than once per field read."""
        found = self._plans.get(table_name)
        if found is None:
            found = self._plans[table_name] = [(f, self.schema.kind(f.type))
                                               for f in self.schema.tables[table_name].fields if not f.deprecated]
        return found

    def _field_pos(self, pos: int, vtable: int, vt_len: int, obj_len: int, slot: int,
                   path: str) -> int | None:
        entry = 4 + 2 * slot
        if entry + 2 > vt_len:
            return None
        offset = _U16.unpack_from(self.buf, vtable + entry)[0]
        if offset == 0:
            return None
        if offset + 1 > obj_len:
            raise self.fail(path, f"field offset {offset} lies outside its {obj_len}-byte table")
        return pos + offset

    def string(self, pos: int, path: str) -> str:
        length = self.u32(pos, path)
        self._check(pos + 4, length, path, "string")
        return bytes(self.buf[pos + 4:pos + 4 + length]).decode("utf-8", errors="replace")

    def vector(self, pos: int, type_name: str, path: str) -> Any:
        count = self.u32(pos, path)
        kind = self.schema.kind(type_name)
        if kind in ("scalar", "enum"):
            scalar = self.schema.enums[type_name].underlying if kind == "enum" else type_name
            _, size, dtype = SCALARS[scalar]
            self._check(pos + 4, count * size, path, f"vector of {count} {scalar}")
            return np.frombuffer(self.buf, dtype=np.dtype(dtype).newbyteorder("<"),
                                 count=count, offset=pos + 4)
        self._check(pos + 4, count * 4, path, f"vector of {count} offsets")
        items = []
        for i in range(count):
            epos = pos + 4 + 4 * i
            epath = f"{path}[{i}]"
            target = self.follow(epos, epath)
            items.append(self.string(target, epath) if kind == "string"
                         else self.table(target, type_name, epath))
        return items


class Encoder:
    """Builds a FlatBuffer from dicts shaped like the decoder's output."""

    def __init__(self, schema: Schema | None = None, initial_size: int = 1 << 16):
        self.schema = schema or load_schema()
        self.builder = flatbuffers.Builder(initial_size)

    def finish(self, table_name: str, value: Mapping, identifier: bytes | None = None) -> bytearray:
        root = self.table(table_name, value)
        self.builder.Finish(root, file_identifier=identifier)
        return self.builder.Output()

    def table(self, table_name: str, value: Mapping) -> int:
        table: Table = self.schema.tables[table_name]
        offsets: dict[str, int] = {}
        for f in table.fields:
            v = value.get(f.name)
            if f.deprecated or v is None:
                continue
            kind = self.schema.kind(f.type)
            if f.is_vector:
                offsets[f.name] = self.vector(f.type, v, f.force_align)
            elif kind == "string":
                offsets[f.name] = self.builder.CreateString(str(v))
            elif kind == "table":
                offsets[f.name] = self.table(f.type, v)
            elif kind == "union":
                member = value.get(f.name + "_type")
                if member is not None:
                    offsets[f.name] = self.table(member, v)
        b = self.builder
        b.StartObject(table.num_slots)
        for f in table.fields:
            if f.deprecated:
                continue
            kind = self.schema.kind(f.type)
            if f.name in offsets:
                if kind == "union":
                    code = self.schema.unions[f.type].code(value[f.name + "_type"])
                    b.PrependUint8Slot(f.slot - 1, code, 0)
                b.PrependUOffsetTRelativeSlot(f.slot, offsets[f.name], 0)
            elif kind == "scalar" and not f.is_vector and value.get(f.name) is not None:
                getattr(b, _PREPEND_SLOT[f.type])(f.slot, value[f.name], f.default)
            elif kind == "enum" and not f.is_vector and value.get(f.name) is not None:
                enum = self.schema.enums[f.type]
                raw, default = value[f.name], f.default
                raw = enum.values[raw] if isinstance(raw, str) else int(raw)
                default = enum.values[default] if isinstance(default, str) else int(default or 0)
                getattr(b, _PREPEND_SLOT[enum.underlying])(f.slot, raw, default)
        return b.EndObject()

    def vector(self, type_name: str, items: Any, force_align: int | None = None) -> int:
        b = self.builder
        kind = self.schema.kind(type_name)
        if kind in ("scalar", "enum"):
            scalar = self.schema.enums[type_name].underlying if kind == "enum" else type_name
            _, size, dtype = SCALARS[scalar]
            if kind == "enum" and not isinstance(items, np.ndarray):  # names, as scalar enum fields accept
                values = self.schema.enums[type_name].values
                items = [values[i] if isinstance(i, str) else i for i in items]
            array = np.ascontiguousarray(np.asarray(items, dtype=np.dtype(dtype).newbyteorder("<")))
            data = array.reshape(-1).view(np.uint8)
            b.StartVector(size, array.size, max(size, force_align or 1))
            b.head -= data.size
            b.Bytes[b.head:b.head + data.size] = data.tobytes()
            return b.EndVector()
        if kind == "string":
            offsets = [b.CreateString(str(s)) for s in items]
        else:
            offsets = [self.table(type_name, item) for item in items]
        b.StartVector(4, len(offsets), 4)
        for off in reversed(offsets):
            b.PrependUOffsetTRelative(off)
        return b.EndVector()
