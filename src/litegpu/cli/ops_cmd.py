"""``litegpu ops``: which ops litegpu implements, on which targets, for which types."""

from __future__ import annotations

import json
from typing import Any

from ..ir.opcodes import builtin_names, circle_only_ops
from ..ops import Op, builtin_ops, custom_ops
from ..ops.registry import refusal
from .common import console, titled_table

# Schema entries that are not ops one can implement.
_NOT_OPS = {"CUSTOM", "PLACEHOLDER_FOR_GREATER_OP_CODES"}


def _overrides(op: Op, method: str) -> bool:
    return getattr(type(op), method) is not getattr(Op, method)


def support(op: Op) -> dict:
    """cpu: a reference kernel and an XLA lowering; gpu: XLA can run it without data-dependent shapes."""
    has_reference = _overrides(op, "reference") or _overrides(op, "compute")
    has_lowering = bool(op.xla) and (_overrides(op, "lower") or _overrides(op, "compute"))
    return {"cpu": has_reference and has_lowering,
            "gpu": has_lowering and not op.data_dependent_shape and bool(op.dtypes),
            "dtypes": list(op.dtypes)}


def support_table() -> dict:
    """Every builtin op of either format (circle's own ops marked by their ``formats``) and every custom op."""
    builtin = {name: support(op) for name, op in builtin_ops().items()}
    for name in builtin_names().values():
        if name not in builtin and name not in _NOT_OPS:
            builtin[name] = {"cpu": False, "gpu": False, "dtypes": []}
            why = refusal(name)
            if why:
                builtin[name]["refused"] = why
    circle_only = circle_only_ops()
    for name, entry in builtin.items():
        entry["formats"] = ["circle"] if name in circle_only else ["tflite", "circle"]
    return {"builtin": dict(sorted(builtin.items())),
            "custom": {name: support(op) for name, op in sorted(custom_ops().items())}}


def render(table: dict) -> None:

    out = console()
    for kind in ("builtin", "custom"):
        entries = table[kind]
        done = sum(1 for e in entries.values() if e["cpu"] or e["gpu"])
        t = titled_table(f"{kind} ops: {done} of {len(entries)} supported")
        for col in ("op", "cpu", "gpu", "dtypes", "files"):
            t.add_column(col)
        for name, e in entries.items():
            mark = {True: "yes", False: "-"}
            files = "circle only" if e.get("formats") == ["circle"] else ""
            dtypes = ", ".join(e["dtypes"]) or ("refused (see --json)" if e.get("refused") else "unsupported")
            t.add_row(name, mark[e["cpu"]], mark[e["gpu"]], dtypes, files)
        out.print(t)


def run(args: Any) -> int:
    table = support_table()
    if args.json:
        print(json.dumps(table, indent=2))
    else:
        render(table)
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("ops", help="list the ops litegpu supports on CPU and GPU")
    p.add_argument("--json", action="store_true", help="print the table as JSON")
    p.set_defaults(handler=run)
