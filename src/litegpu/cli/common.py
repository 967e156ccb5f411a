"""Helpers shared by the subcommands: byte previews, JSON-safe values, consoles."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

PREVIEW_BYTES = 16
# --kernel-mode of run / bench / inspect: CpuOptions.kernel_mode's names
KERNEL_MODES = ("fast", "builtin", "reference")


def cpu_kernel_mode(name: str) -> Any:
    """``--kernel-mode NAME`` as ``CpuOptions(kernel_mode=...)`` takes it (None: the default fast path)."""
    import litegpu

    return {"fast": None, "builtin": litegpu.CpuKernelMode.BUILTIN, "reference": litegpu.CpuKernelMode.REFERENCE}[name]


def console() -> Any:
    """A rich console bound to the current stdout (tests swap stdout per test)."""
    from rich.console import Console

    return Console(file=sys.stdout, highlight=False, soft_wrap=False)


def human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # unreachable; keeps type checkers quiet


def hex_preview(data: Any, limit: int = PREVIEW_BYTES) -> str:
    raw = bytes(memoryview(np.asarray(data, dtype=np.uint8)).cast("B")[:limit])
    text = raw.hex(" ")
    return text + (" ..." if len(data) > limit else "")


def jsonable(value: Any) -> Any:
    """Decoded FlexBuffers / option values -> something json.dumps accepts."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"bytes": len(value), "preview": hex_preview(np.frombuffer(bytes(value), np.uint8))}
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and value != value:
        return "nan"
    return value


def titled_table(title: str) -> Any:
    """A rich table whose title is a caption above it, not wrapped to the table's width."""
    from rich.table import Table

    return Table(title=title, title_justify="left", min_width=min(len(title), 100), title_style="bold")
