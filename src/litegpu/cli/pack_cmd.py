"""``litegpu pack``: rewrite a model, inline or with its weights after the FlatBuffer, as .tflite or
.circle (what ONE's tflite2circle does, and back where the model holds nothing circle-only)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import WriteError
from ..ir import read_model
from ..ir.save import INLINE_LIMIT, constant_bytes, write_model
from .common import console, human_bytes


def pack(src: Path, dst: Path, extended: bool | None, threshold: int, show_progress: bool = True,
         file_format: str | None = None) -> dict:
    import sys

    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

    model = read_model(src)
    if dst.exists() and dst.resolve() == Path(src).resolve():
        raise WriteError(f"{dst}: output is the input file; write to another path")
    total = constant_bytes(model)
    # on stderr, and only on a terminal: elsewhere a transient bar leaves a blank line in the output
    with Progress(TextColumn("writing constants"), BarColumn(), DownloadColumn(), console=Console(file=sys.stderr),
                  disable=not (show_progress and sys.stderr.isatty()), transient=True) as progress:
        task = progress.add_task("write", total=max(total, 1))
        write_model(model, dst, extended_buffers=extended, threshold=threshold, file_format=file_format,
                    progress=lambda n: progress.advance(task, n))
        progress.update(task, completed=max(total, 1))
    # What we wrote must read back as the same model.
    written = read_model(dst)
    if written != model:
        raise WriteError(f"{dst}: the written model does not read back equal to {src}")
    return {"in_bytes": os.path.getsize(src), "out_bytes": os.path.getsize(dst), "constant_bytes": total,
            "in_format": model.file_format, "out_format": written.file_format}


def run(args: Any) -> int:
    extended = True if args.extended_buffers else False if args.inline else None
    info = pack(args.input, args.output, extended, args.threshold, file_format=args.format)
    console().print(f"wrote {args.output} ({info['out_format']}): {info['out_bytes']} bytes (from {info['in_bytes']}, "
                    f"{info['in_format']}), {human_bytes(info['constant_bytes'])} of constants, verified by reading "
                    "it back")
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("pack", help="rewrite a model with inline weights or weights after the FlatBuffer, "
                                     "as .tflite or .circle")
    p.add_argument("input", metavar="IN", type=Path, help="the .tflite or .circle model to read")
    p.add_argument("output", metavar="OUT", type=Path,
                   help="where to write the new model (OUT.circle writes circle, OUT.tflite TFLite)")
    p.add_argument("--format", choices=("tflite", "circle"), default=None,
                   help="the format to write (default: what OUT's suffix says, else the input's format)")
    layout = p.add_mutually_exclusive_group()
    layout.add_argument("--extended-buffers", action="store_true",
                        help="store weights after the FlatBuffer (Buffer.offset/size)")
    layout.add_argument("--inline", action="store_true", help="store weights inside the FlatBuffer")
    p.add_argument("--threshold", type=int, default=INLINE_LIMIT, metavar="BYTES",
                   help="without a layout flag, use the extended layout past this many bytes of constants "
                        f"(default {INLINE_LIMIT})")
    p.set_defaults(handler=run)
