"""Helpers shared by the subcommands: byte previews, JSON-safe values, consoles, progress, argument types."""

from __future__ import annotations

import argparse
import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

PREVIEW_BYTES = 16
# --kernel-mode of run / bench / inspect: CpuOptions.kernel_mode's names
KERNEL_MODES = ("fast", "builtin", "reference")


def accelerator_flags(spec: str) -> Any:
    """``--accelerator cpu|gpu|gpu,cpu`` as ``HardwareAccelerator`` flags."""
    import litegpu

    from ..errors import InvalidArgumentError

    names = [p.strip().upper() for p in spec.split(",") if p.strip()]
    if not names or any(n not in ("CPU", "GPU") for n in names):
        raise InvalidArgumentError(f"--accelerator {spec!r}: expected cpu, gpu or gpu,cpu")
    value = litegpu.HardwareAccelerator[names[0]]
    for n in names[1:]:
        value = value | litegpu.HardwareAccelerator[n]
    return value


# ``Options.engine_choice``: when the fast CPU path times the official interpreter against OpenVINO
ENGINE_CHOICES = ("deferred", "load", "never")
ENGINE_CHOICE_HELP = ("when to time the official interpreter against OpenVINO for a model whose faster engine is not "
                      "known (Options.engine_choice): deferred (start on the official interpreter, time once the "
                      "calls have taken as long as the timing), load (while loading) or never")
ACCELERATOR_HELP = "where to run: cpu (the default), gpu, or gpu,cpu (the GPU, else the CPU with a warning)"


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


# ---- what the command line says -----------------------------------------------------------------

# The Python API's spelling in messages, and the command line's (longest first: one may hold another).
_CLI_WORDS = (
    (" (CpuOptions(kernel_mode=CpuKernelMode.BUILTIN))", ""),
    ("CpuOptions(kernel_mode=CpuKernelMode.BUILTIN)", "--kernel-mode builtin"),
    ("HardwareAccelerator.GPU | HardwareAccelerator.CPU", "--accelerator gpu,cpu"),
    ("HardwareAccelerator.GPU was requested", "--accelerator gpu was asked for"),
    ("add HardwareAccelerator.CPU", "use --accelerator gpu,cpu"),
)


def in_cli_words(message: str) -> str:
    """A message from the library with its API spellings (``HardwareAccelerator.GPU | HardwareAccelerator.CPU``)
    replaced by the command line's (``--accelerator gpu,cpu``)."""
    for api, cli in _CLI_WORDS:
        message = message.replace(api, cli)
    return message


def signature_label(key: str) -> str:
    """How a signature is named to users: the official placeholder key of a model without SignatureDefs
    (``<placeholder signature>``) is not a name anyone can type."""
    from ..runtime.model import PLACEHOLDER_SIGNATURE

    return "(no signatures: inputs and outputs by tensor name)" if key == PLACEHOLDER_SIGNATURE else f"signature {key!r}"


def count(minimum: int) -> Any:
    """An argparse type: an integer of at least ``minimum`` (``--runs -3`` is a usage error)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is less than {minimum}")
        return value

    parse.__name__ = "count"  # argparse names the type in its messages
    return parse


# ---- progress -----------------------------------------------------------------------------------

# A step that takes longer than this says so on stderr when stderr is not a terminal (a log, CI).
QUIET_STEP_S = 2.0


@contextlib.contextmanager
def step(description: str) -> Iterator[None]:
    """Say on stderr what a long step is doing: a spinner while it runs on a terminal (gone when it ends), one
    line once it has taken ``QUIET_STEP_S`` otherwise; stdout stays what the command prints."""
    if sys.stderr.isatty():
        from rich.console import Console

        with Console(file=sys.stderr).status(description):
            yield
        return
    timer = threading.Timer(QUIET_STEP_S, lambda: print(f"litegpu: {description} ...", file=sys.stderr, flush=True))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
