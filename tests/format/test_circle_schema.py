"""The circle schema (``circle.fbs`` laid over TFLite's) against ONE's generated bindings.

The ``circle-schema`` package is flatc's Python output for circle 0.10: every accessor reads
``self._tab.Offset(N)`` with N = 4 + 2 * slot, and every enum and union is a class of constants, so
each table, field slot, default, enum value and union code of ours must match it exactly.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import pytest

from litegpu.format import load_circle_schema, load_schema

circle_pkg = pytest.importorskip("circle_schema.v0_10.circle", reason="needs circle-schema (pip install circle-schema)")

SCHEMA = load_circle_schema()
_OFFSET = re.compile(r"self\._tab\.Offset\((\d+)\)")
_RETURN = re.compile(r"\n\s+return (.+)\s*$")
# Fields whose TFLite name we keep (the IR reads them by that name); circle spells them otherwise.
_CIRCLE_SPELLING = {("BatchMatMulOptions", "adj_x"): "AdjointLhs", ("BatchMatMulOptions", "adj_y"): "AdjointRhs"}


def _generated() -> dict[str, type]:
    found = {}
    for info in pkgutil.iter_modules(circle_pkg.__path__):
        module = importlib.import_module(f"{circle_pkg.__name__}.{info.name}")
        cls = getattr(module, info.name, None)
        if inspect.isclass(cls):
            found[info.name] = cls
    return found


GENERATED = _generated()


def _constants(cls: type) -> dict[str, int]:
    return {k: v for k, v in vars(cls).items() if not k.startswith("_") and isinstance(v, int)}


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def _accessors(cls: type) -> dict[str, tuple[int, str]]:
    found = {}
    for name, fn in vars(cls).items():
        if not callable(fn) or name.startswith("_") or name in ("Init", "GetRootAs"):
            continue
        source = inspect.getsource(fn)
        m = _OFFSET.search(source)
        if m:
            found[name] = (int(m.group(1)), source)
    return found


def _reachable_tables() -> set[str]:
    """The tables a circle file can hold: those reachable from the root type."""
    seen, todo = set(), [SCHEMA.root_type]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for f in SCHEMA.tables[name].fields:
            kind = SCHEMA.kind(f.type)
            if kind == "table":
                todo.append(f.type)
            elif kind == "union":
                todo.extend(SCHEMA.unions[f.type].members)
    return seen


def test_identifier_and_root():
    assert SCHEMA.file_identifier == b"CIR0" and SCHEMA.root_type == "Model"
    assert load_schema().file_identifier == b"TFL3"  # the overlay left TFLite's schema alone


def test_reachable_tables_are_circles():
    generated_tables = {n for n, c in GENERATED.items() if hasattr(c, "Init")}
    assert _reachable_tables() == generated_tables


@pytest.mark.parametrize("name", sorted(n for n, c in GENERATED.items() if not hasattr(c, "Init")))
def test_enums_and_unions_match(name):
    official = _constants(GENERATED[name])
    if name in SCHEMA.unions:
        union = SCHEMA.unions[name]
        assert {"NONE": 0, **{m: union.code(m) for m in union.members}} == official
    else:
        assert SCHEMA.enums[name].values == official


def _default_matches(field, returned: str) -> bool:
    ours = field.default
    if isinstance(ours, str):  # an enum default, stored by name
        ours = SCHEMA.enums[field.type].values[ours]
    if returned in ("True", "False"):
        return ours is (returned == "True")
    return float(ours) == float(returned)


@pytest.mark.parametrize("table_name", sorted(_reachable_tables()))
def test_field_slots_and_defaults_match(table_name):
    table = SCHEMA.tables[table_name]
    accessors = _accessors(GENERATED[table_name])
    expected = set()
    for field in table.fields:
        name = _CIRCLE_SPELLING.get((table_name, field.name), _camel(field.name))
        if field.deprecated:
            assert name not in accessors, f"{table_name}.{field.name} is deprecated but circle reads it"
            continue
        expected.add(name)
        assert name in accessors, f"circle's {table_name} has no accessor {name}"
        offset, source = accessors[name]
        assert offset == 4 + 2 * field.slot, f"{table_name}.{field.name}: slot {field.slot}, circle offset {offset}"
        kind = SCHEMA.kind(field.type)
        if kind == "union":
            expected.add(name + "Type")
            assert accessors[name + "Type"][0] == 4 + 2 * (field.slot - 1)
        elif kind in ("scalar", "enum") and not field.is_vector:
            returned = _RETURN.search(source).group(1).strip()
            assert _default_matches(field, returned), f"{table_name}.{field.name}: {field.default!r} vs {returned}"
    for name in accessors:
        base = re.sub(r"(AsNumpy|Length|IsNone)$", "", name)
        assert base in expected or name in expected, f"{table_name}: we lack circle's field {name}"


def test_circle_only_definitions_leave_tflite_unchanged():
    tflite = load_schema()
    assert "RMS_NORM" not in tflite.enums["BuiltinOperator"].values
    assert tflite.unions["QuantizationDetails"].code("BlockwiseQuantization") == 2
    assert SCHEMA.unions["QuantizationDetails"].code("BlockwiseQuantization") == 3
    assert tflite.tables["Tensor"].by_name["external_buffer"].slot == 10
    assert SCHEMA.tables["Tensor"].by_name["compression_type"].slot == 10
