"""``litegpu doctor``: which engines and devices this machine has, what each would run, how to add the rest."""

from __future__ import annotations

import json
from typing import Any

from .common import console, titled_table

# What each engine runs in litegpu, and how to get it when it is missing.
ENGINE_ROLES = {
    "litert": ("CPU: whole small and integer models, where XNNPACK is the fastest engine (the default fast path)",
               'pip install ai-edge-litert'),
    "openvino": ("CPU: the float ops OpenVINO converts (the default fast path)", 'pip install openvino'),
    "xla": ("GPU (CUDA, ROCm) and CPU: every op, exact TFLite integer kernels, state, control flow",
            'pip install jax  (GPU: pip install "litegpu[cuda12]" or "litegpu[cuda13]" for NVIDIA, '
            'jax[rocm] for AMD)'),
    "reference": ("CPU: numpy interpreter, exact and slow; ops no other engine runs", "numpy (always present)"),
}


def engine_report() -> list[dict[str, Any]]:
    from ..backends.engine import ENGINES, engine

    rows = []
    for name in ENGINES:
        role, install = ENGINE_ROLES[name]
        row: dict[str, Any] = {"engine": name, "role": role}
        try:
            found = engine(name)
            row["available"] = bool(found.available())
            row["detail"] = found.describe() if row["available"] else "installed, but it cannot run here"
        except Exception as e:  # not installed, or broken: say how to fix it
            row["available"] = False
            row["detail"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:120]}" if str(e) else type(e).__name__
        if not row["available"]:
            row["install"] = install
        rows.append(row)
    return rows


def device_report() -> list[dict[str, Any]]:
    from ..backends.engine import cpu_name

    rows = [{"device": "CPU", "detail": cpu_name(), "engines": "litert, openvino, xla, reference"}]
    try:
        import jax

        gpus = [d for d in jax.devices() if d.platform != "cpu"]
    except Exception:
        gpus = []
    for d in gpus:
        rows.append({"device": f"GPU {d.id}", "detail": f"{d.platform}: {getattr(d, 'device_kind', d)}",
                     "engines": "xla"})
    if not gpus:
        rows.append({"device": "GPU", "detail": "none visible to JAX", "engines": "-",
                     "install": 'NVIDIA: pip install "litegpu[cuda12]" (or [cuda13], matching the driver); '
                                'AMD: pip install "jax[rocm]" (JAX\'s ROCm build); Intel GPUs are not supported yet'})
    return rows


def run(args: Any) -> int:
    info = {"engines": engine_report(), "devices": device_report()}
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    from rich.markup import escape

    out = console()
    table = titled_table("Engines")
    for col in ("engine", "available", "what it runs", "detail / how to add it"):
        table.add_column(col, overflow="fold")
    for r in info["engines"]:
        table.add_row(r["engine"], "yes" if r["available"] else "[red]no[/red]", escape(r["role"]),
                      escape(r["detail"] if r["available"] else f"{r['detail']}\n{r['install']}"))
    out.print(table)
    table = titled_table("Devices")
    for col in ("device", "detail", "engines", "how to add it"):
        table.add_column(col, overflow="fold")
    for r in info["devices"]:
        table.add_row(r["device"], escape(r["detail"]), r["engines"], escape(r.get("install", "")))
    out.print(table)
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("doctor", help="which engines and devices this machine has, and how to add a missing one")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(handler=run)
