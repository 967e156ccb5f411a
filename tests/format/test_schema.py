"""Our schema bindings against the official package's generated ones.

``ai_edge_litert.schema_py_generated`` is flatc's output for the same schema:
every accessor reads ``self._tab.Offset(N)`` with N = 4 + 2 * slot, so the
vtable slot of each of our fields must produce exactly that N, and every
accessor there must have a field here.
"""

from __future__ import annotations

import inspect
import math
import re

import pytest

from litegpu.format import load_schema
from litegpu.ir.opcodes import builtin_codes, builtin_names, options_table_for

generated = pytest.importorskip("ai_edge_litert.schema_py_generated")

SCHEMA = load_schema()
_OFFSET = re.compile(r"self\._tab\.Offset\((\d+)\)")
_RETURN = re.compile(r"\n\s+return (.+)\s*$")


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def _accessors(cls: type) -> dict[str, tuple[int, str]]:
    """accessor name -> (vtable offset it reads, source) for one generated table class."""
    found = {}
    for name, fn in vars(cls).items():
        if not callable(fn) or name.startswith("_") or name in ("Init", "GetRootAs"):
            continue
        source = inspect.getsource(fn)
        m = _OFFSET.search(source)
        if m:
            found[name] = (int(m.group(1)), source)
    return found


def _generated_class(name: str) -> type:
    cls = getattr(generated, name, None)
    assert cls is not None, f"the official bindings have no table {name}"
    return cls


def test_schema_has_the_official_tables_enums_and_unions():
    official = {n for n, c in vars(generated).items()
                if inspect.isclass(c) and c.__module__ == generated.__name__ and hasattr(c, "Init")
                and not n.endswith("T")}
    assert set(SCHEMA.tables) == official
    assert "Model" == SCHEMA.root_type and SCHEMA.file_identifier == b"TFL3"


def test_builtin_operators_are_codes_0_to_209_and_circles_below_zero():
    names = builtin_names()
    assert sorted(SCHEMA.enums["BuiltinOperator"].names) == list(range(210))
    assert sorted(names) == list(range(-9, -1)) + list(range(210))  # the IR knows circle's ops too
    assert names[0] == "ADD" and names[3] == "CONV_2D" and names[32] == "CUSTOM"
    assert names[209] == "STABLEHLO_CASE" == _official_name(generated.BuiltinOperator, 209)
    assert builtin_codes()["STABLEHLO_COMPOSITE"] == generated.BuiltinOperator.STABLEHLO_COMPOSITE


def _official_name(cls: type, value: int) -> str:
    return next(k for k, v in vars(cls).items() if v == value and not k.startswith("_"))


@pytest.mark.parametrize("enum_name", sorted(SCHEMA.enums))
def test_enum_values_match_official(enum_name):
    cls = _generated_class(enum_name)
    official = {k: v for k, v in vars(cls).items() if not k.startswith("_") and isinstance(v, int)}
    assert SCHEMA.enums[enum_name].values == official


@pytest.mark.parametrize("union_name", sorted(SCHEMA.unions))
def test_union_members_match_official(union_name):
    cls = _generated_class(union_name)
    official = {k: v for k, v in vars(cls).items() if not k.startswith("_") and isinstance(v, int)}
    union = SCHEMA.unions[union_name]
    ours = {"NONE": 0, **{m: union.code(m) for m in union.members}}
    assert ours == official


def test_tensor_types_include_sub_byte_and_float8():
    values = SCHEMA.enums["TensorType"].values
    for name in ("INT4", "INT2", "UINT4", "FLOAT8_E4M3FN", "FLOAT8_E5M2", "BFLOAT16"):
        assert name in values


def _scalar_default_matches(field, enum_values, returned: str) -> bool:
    ours = field.default
    if isinstance(ours, str):  # an enum default, stored by name
        ours = enum_values[ours]
    if returned in ("True", "False"):
        return ours is (returned == "True")
    theirs = float(returned) if returned not in ("float('inf')", "float('-inf')", "float('nan')") else eval(returned)
    return (math.isnan(theirs) and math.isnan(float(ours))) if theirs != theirs else float(ours) == theirs


@pytest.mark.parametrize("table_name", sorted(SCHEMA.tables))
def test_field_slots_and_defaults_match_official(table_name):
    table = SCHEMA.tables[table_name]
    accessors = _accessors(_generated_class(table_name))
    expected_names = set()
    for field in table.fields:
        name = _camel(field.name)
        if field.deprecated:
            assert name not in accessors, f"{table_name}.{field.name} is deprecated but official reads it"
            continue
        expected_names.add(name)
        assert name in accessors, f"official {table_name} has no accessor {name}"
        offset, source = accessors[name]
        assert offset == 4 + 2 * field.slot, f"{table_name}.{field.name}: slot {field.slot}, official offset {offset}"
        kind = SCHEMA.kind(field.type)
        if kind == "union":
            type_offset, _ = accessors[name + "Type"]
            expected_names.add(name + "Type")
            assert type_offset == 4 + 2 * (field.slot - 1)
        elif kind in ("scalar", "enum") and not field.is_vector:
            returned = _RETURN.search(source).group(1).strip()
            values = SCHEMA.enums[field.type].values if kind == "enum" else {}
            assert _scalar_default_matches(field, values, returned), \
                f"{table_name}.{field.name}: default {field.default!r}, official {returned}"
    # Every official field is one of ours (vectors add *Length / *AsNumpy / *IsNone helpers).
    for name in accessors:
        base = re.sub(r"(AsNumpy|Length|IsNone)$", "", name)
        assert base in expected_names or name in expected_names, f"{table_name}: we lack official field {name}"


def test_every_options_member_is_reachable_from_an_op():
    """Each options table belongs to at least one builtin op (catches renamed op/option pairs)."""
    members = set(SCHEMA.unions["BuiltinOptions"].members) | set(SCHEMA.unions["BuiltinOptions2"].members)
    used = {options_table_for(name) for name in builtin_names().values()}
    # Options tables only referenced by deprecated or never-shipped ops.
    unused = members - used
    assert len(unused) <= 12, sorted(unused)
    for op, table in (("CONV_2D", "Conv2DOptions"), ("MEAN", "ReducerOptions"), ("MAX_POOL_2D", "Pool2DOptions"),
                      ("STABLEHLO_COMPOSITE", "StableHLOCompositeOptions"), ("ADD", "AddOptions")):
        assert options_table_for(op) == table
