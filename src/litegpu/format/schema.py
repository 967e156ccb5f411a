"""The TFLite and circle schemas, read from ``schema.fbs`` / ``circle.fbs`` into plain descriptors.

Our FlatBuffers bindings are schema-driven rather than generated: the codec in
``codec.py`` walks these descriptors, so every table, union and enum of the
current schema (all 210 builtin ops, both options unions, INT4/INT2/FLOAT8,
blockwise quantization, ``Buffer.offset/size``) is covered by construction, and
a schema update is a one-file change.

Samsung ONE's circle schema is the TFLite schema with its own identifier and
extensions; ``circle.fbs`` holds only what circle changes (its own tensor types,
quantization details, tensor and subgraph tables, negative op codes and their
options), and :func:`load_circle_schema` lays it over the TFLite schema: a
definition there replaces TFLite's, except an enum or union marked
``(extends_tflite)``, whose members are added to TFLite's.

Only the subset of the FlatBuffers IDL that the two files use is parsed:
namespaces, file identifiers, enums, unions (with explicit type codes),
tables, structs, attributes and default values.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

SCHEMA_PATH = Path(__file__).with_name("schema.fbs")
CIRCLE_SCHEMA_PATH = Path(__file__).with_name("circle.fbs")

# Scalar type name -> (struct format, size in bytes, numpy dtype).
SCALARS: dict[str, tuple[str, int, str]] = {
    "bool": ("?", 1, "bool"),
    "byte": ("b", 1, "int8"),
    "ubyte": ("B", 1, "uint8"),
    "short": ("h", 2, "int16"),
    "ushort": ("H", 2, "uint16"),
    "int": ("i", 4, "int32"),
    "uint": ("I", 4, "uint32"),
    "long": ("q", 8, "int64"),
    "ulong": ("Q", 8, "uint64"),
    "float": ("f", 4, "float32"),
    "double": ("d", 8, "float64"),
}
_ALIASES = {
    "int8": "byte", "uint8": "ubyte", "int16": "short", "uint16": "ushort",
    "int32": "int", "uint32": "uint", "int64": "long", "uint64": "ulong",
    "float32": "float", "float64": "double",
}


@dataclass(frozen=True)
class Enum:
    name: str
    underlying: str  # a key of SCALARS
    values: dict[str, int]

    @functools.cached_property
    def names(self) -> dict[int, str]:
        return {v: k for k, v in self.values.items()}


@dataclass(frozen=True)
class Union:
    name: str
    members: tuple[str, ...]
    # members[i]'s type code; code 0 is NONE.  Codes follow the members (1, 2, ...) unless the schema
    # gives one: circle puts its own options at 247..254, far past TFLite's.
    codes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not self.codes:
            object.__setattr__(self, "codes", tuple(range(1, len(self.members) + 1)))

    @functools.cached_property
    def _by_code(self) -> dict[int, str]:
        return dict(zip(self.codes, self.members))

    @functools.cached_property
    def _by_member(self) -> dict[str, int]:
        return dict(zip(self.members, self.codes))

    def member(self, code: int) -> str | None:
        return self._by_code.get(code)

    def code(self, member: str) -> int:
        return self._by_member[member]


@dataclass(frozen=True)
class Field:
    name: str
    type: str            # scalar name, "string", an enum, table, struct or union name
    is_vector: bool
    default: object      # python value for scalars / enums, None otherwise
    slot: int            # vtable slot (a union value's slot; its type is slot - 1)
    deprecated: bool = False
    force_align: int | None = None


@dataclass(frozen=True)
class Table:
    name: str
    fields: tuple[Field, ...]
    is_struct: bool = False

    @functools.cached_property
    def by_name(self) -> dict[str, Field]:
        return {f.name: f for f in self.fields}

    @property
    def num_slots(self) -> int:
        return max((f.slot for f in self.fields), default=-1) + 1


@dataclass
class Schema:
    enums: dict[str, Enum] = field(default_factory=dict)
    unions: dict[str, Union] = field(default_factory=dict)
    tables: dict[str, Table] = field(default_factory=dict)
    file_identifier: bytes = b""
    root_type: str = ""

    def kind(self, type_name: str) -> str:
        """One of scalar, string, enum, union, table, struct."""
        if type_name in SCALARS:
            return "scalar"
        if type_name == "string":
            return "string"
        if type_name in self.enums:
            return "enum"
        if type_name in self.unions:
            return "union"
        table = self.tables.get(type_name)
        if table is None:
            raise KeyError(f"schema has no type {type_name!r}")
        return "struct" if table.is_struct else "table"

    def defaults(self, table_name: str) -> dict[str, object]:
        """The value every field of a table has when the file omits it."""
        out: dict[str, object] = {}
        for f in self.tables[table_name].fields:
            if f.deprecated:
                continue
            out[f.name] = () if f.is_vector else f.default
        return out


# A comment, a token (string, number, identifier, punctuation), or anything else: an error.
_TOKEN = re.compile(
    r"""(//[^\n]*)
      | ("[^"]*"
         | [-+]?(?:0x[0-9a-fA-F]+|\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+)
         | [A-Za-z_][A-Za-z0-9_.]*
         | [{}()\[\]:;,=])
      | (\S)""",
    re.VERBOSE,
)


def _tokenize(text: str) -> list[str]:
    tokens = []
    for found in _TOKEN.finditer(text):  # one pass in C over the file (every start parses it once)
        _, token, bad = found.groups()
        if token:
            tokens.append(token)
        elif bad:
            raise ValueError(f"schema.fbs: cannot parse near {text[found.start():found.start() + 40]!r}")
    return tokens


class _Parser:
    def __init__(self, tokens: list[str], base: Schema | None = None):
        self.tokens, self.i = tokens, 0
        self.schema = Schema()
        if base is not None:  # an overlay: start from a copy of the base schema's definitions
            self.schema = Schema(dict(base.enums), dict(base.unions), dict(base.tables),
                                 base.file_identifier, base.root_type)

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.tokens[self.i]
        if expected is not None and tok != expected:
            raise ValueError(f"schema.fbs: expected {expected!r}, got {tok!r}")
        self.i += 1
        return tok

    def parse(self) -> Schema:
        while self.peek() is not None:
            keyword = self.take()
            if keyword in ("namespace", "include", "attribute", "file_extension"):
                while self.take() != ";":
                    pass
            elif keyword == "file_identifier":
                self.schema.file_identifier = self.take().strip('"').encode()
                self.take(";")
            elif keyword == "root_type":
                self.schema.root_type = self.take()
                self.take(";")
            elif keyword == "enum":
                self._enum()
            elif keyword == "union":
                self._union()
            elif keyword in ("table", "struct"):
                self._table(is_struct=keyword == "struct")
            else:
                raise ValueError(f"schema.fbs: unexpected {keyword!r}")
        return self.schema

    def _attributes(self) -> dict[str, str | None]:
        attrs: dict[str, str | None] = {}
        if self.peek() != "(":
            return attrs
        self.take("(")
        while self.peek() != ")":
            key = self.take()
            value = None
            if self.peek() == ":":
                self.take(":")
                value = self.take()
            attrs[key] = value
            if self.peek() == ",":
                self.take(",")
        self.take(")")
        return attrs

    def _enum(self) -> None:
        name = self.take()
        self.take(":")
        underlying = _ALIASES.get(self.peek(), self.peek())
        self.take()
        extends = "extends_tflite" in self._attributes()
        self.take("{")
        values: dict[str, int] = dict(self.schema.enums[name].values) if extends else {}
        nxt = 0
        while self.peek() != "}":
            member = self.take()
            if self.peek() == "=":
                self.take("=")
                nxt = int(self.take(), 0)
            self._attributes()
            values[member] = nxt
            nxt += 1
            if self.peek() == ",":
                self.take(",")
        self.take("}")
        self.schema.enums[name] = Enum(name, underlying, values)

    def _union(self) -> None:
        name = self.take()
        extends = "extends_tflite" in self._attributes()
        self.take("{")
        members, codes = [], []
        if extends:
            members, codes = list(self.schema.unions[name].members), list(self.schema.unions[name].codes)
        nxt = codes[-1] + 1 if codes else 1
        while self.peek() != "}":
            members.append(self.take())
            if self.peek() == "=":
                self.take("=")
                nxt = int(self.take(), 0)
            codes.append(nxt)
            nxt += 1
            self._attributes()  # e.g. `ReduceWindowOptions (deprecated)` keeps its type code
            if self.peek() == ",":
                self.take(",")
        self.take("}")
        self.schema.unions[name] = Union(name, tuple(members), tuple(codes))

    def _table(self, is_struct: bool) -> None:
        name = self.take()
        self._attributes()
        self.take("{")
        fields, slot = [], 0
        while self.peek() != "}":
            fname = self.take()
            self.take(":")
            is_vector = self.peek() == "["
            if is_vector:
                self.take("[")
            ftype = self.take()
            ftype = _ALIASES.get(ftype, ftype)
            if is_vector:
                self.take("]")
            default = None
            if self.peek() == "=":
                self.take("=")
                default = self.take()
            attrs = self._attributes()
            self.take(";")
            is_union = ftype in self.schema.unions
            if is_union:
                slot += 1  # the hidden `<name>_type` field comes first
            fields.append(Field(
                name=fname, type=ftype, is_vector=is_vector, default=default, slot=slot,
                deprecated="deprecated" in attrs,
                force_align=int(attrs["force_align"]) if attrs.get("force_align") else None,
            ))
            slot += 1
        self.take("}")
        self.schema.tables[name] = Table(name, tuple(fields), is_struct)


def _resolve_defaults(schema: Schema, base: Schema | None = None) -> None:
    """Turn default tokens into python values now that every enum is known (in the tables this
    file defined: a base schema's tables are resolved already)."""
    for tname, table in list(schema.tables.items()):
        if base is not None and base.tables.get(tname) is table:
            continue
        resolved = []
        for f in table.fields:
            value: object = None
            if not f.is_vector:
                if f.type in SCALARS:
                    value = _scalar_default(f.type, f.default)
                elif f.type in schema.enums:
                    enum = schema.enums[f.type]
                    if f.default is None:
                        value = enum.names.get(0, 0)
                    elif f.default in enum.values:
                        value = f.default
                    else:
                        value = enum.names.get(int(f.default, 0), int(f.default, 0))
            resolved.append(Field(f.name, f.type, f.is_vector, value, f.slot, f.deprecated, f.force_align))
        schema.tables[tname] = Table(tname, tuple(resolved), table.is_struct)


def _scalar_default(type_name: str, token: str | None) -> object:
    if type_name == "bool":
        return token == "true"
    if type_name in ("float", "double"):
        if token in (None,):
            return 0.0
        return {"inf": float("inf"), "-inf": float("-inf"), "nan": float("nan")}.get(token) or float(token)
    return int(token, 0) if token is not None else 0


def _parse(path: Path, base: Schema | None = None) -> Schema:
    schema = _Parser(_tokenize(path.read_text(encoding="utf-8")), base).parse()
    _resolve_defaults(schema, base)
    return schema


@functools.lru_cache(maxsize=1)
def load_schema(path: Path = SCHEMA_PATH) -> Schema:
    """The TFLite schema."""
    return _parse(path)


@functools.lru_cache(maxsize=1)
def load_circle_schema(path: Path = CIRCLE_SCHEMA_PATH) -> Schema:
    """The circle schema: ``circle.fbs`` laid over the TFLite schema."""
    return _parse(path, base=load_schema())
