"""``litegpu doctor``: which engines and devices this machine has, what each would run, how to add the rest."""

from __future__ import annotations

import json
from typing import Any

from ..backends import registry
from .common import console, titled_table


def engine_report() -> list[dict[str, Any]]:
    """A row per registered engine: what it runs, whether it is available here, and how to add it."""
    rows = []
    for name, info in registry.ENGINES.items():
        row: dict[str, Any] = {"engine": name, "role": info.role}
        try:
            found = registry.engine(name)
            row["available"] = bool(found.available())
            row["detail"] = found.describe() if row["available"] else found.unavailable_reason()
        except Exception as e:  # not installed, or broken: say how to fix it
            row["available"] = False
            row["detail"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:120]}" if str(e) else type(e).__name__
        if not row["available"]:
            if info.no_device is not None and _installed(name):
                row["status"], row["install"] = info.no_device
            else:
                row["install"] = info.install
        row.setdefault("status", "yes" if row["available"] else "no")
        rows.append(row)
    return rows


def _installed(name: str) -> bool:
    try:
        return bool(registry.engine(name).installed())
    except Exception:  # noqa: BLE001  (broken: not installed as far as the user can tell)
        return False


def device_report() -> list[dict[str, Any]]:
    """The CPU, with the engines that run there, then each engine's own devices (``Engine.device_rows``)."""
    from ..backends.engine import cpu_name

    rows = [{"device": "CPU", "detail": cpu_name(), "engines": ", ".join(registry.named(device="CPU"))}]
    for _, engine_class in registry.doctor_devices():
        rows.extend(engine_class.device_rows(rows))
    return rows


def gpu_plan_summary(devices: list[dict[str, Any]]) -> str:
    """Where ``HardwareAccelerator.GPU`` runs on this machine: on the first GPU engine that says it runs it."""
    for _, engine_class in registry.doctor_devices():
        line = engine_class.gpu_plan_line(devices)
        if line is not None:
            return line
    return "no GPU: GPU | CPU plans run on the CPU (with a warning), GPU alone is an error"


def run(args: Any) -> int:
    devices = device_report()
    info = {"engines": engine_report(), "devices": devices, "gpu": gpu_plan_summary(devices)}
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    from rich.markup import escape

    out = console()
    table = titled_table("Engines")
    for col in ("engine", "available", "what it runs", "detail / how to add it"):
        table.add_column(col, overflow="fold", max_width=12 if col == "available" else None)
    for r in info["engines"]:
        status = "yes" if r["available"] else "[red]no[/red]" if r["status"] == "no" else escape(r["status"])
        table.add_row(r["engine"], status, escape(r["role"]),
                      escape(r["detail"] if r["available"] else f"{r['detail']}\n{r['install']}"))
    out.print(table)
    table = titled_table("Devices")
    for col in ("device", "detail", "engines", "how to add it"):
        table.add_column(col, overflow="fold")
    for r in info["devices"]:
        table.add_row(r["device"], escape(r["detail"]), escape(r["engines"]), escape(r.get("install", "")))
    out.print(table)
    out.print(escape(info["gpu"]))
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("doctor", help="which engines and devices this machine has, and how to add a missing one")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(handler=run)
