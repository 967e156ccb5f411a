"""``litegpu cache ls | clear | verify [DIR]``: look after a compile-cache directory."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

from ..backends.cache import CompileCache
from .common import console, human_bytes


def run(args: Any) -> int:
    if not args.directory.is_dir():
        console().print(f"{args.directory}: no cache directory there")
        return 2
    cache = CompileCache(args.directory)
    out = console()
    if args.action == "ls":
        entries = sorted(cache.entries(), key=lambda e: e.last_used, reverse=True)
        for e in entries:
            used = datetime.datetime.fromtimestamp(e.last_used).isoformat(timespec="seconds")
            what = ", ".join(f"{k}={e.meta[k]}" for k in ("model", "subgraph", "platform", "inputs") if k in e.meta)
            out.print(f"{e.key}  {human_bytes(e.size):>10}  last used {used}  {what}")
        out.print(f"{len(entries)} entries, {human_bytes(sum(e.size for e in entries))} in {args.directory}")
    elif args.action == "clear":
        out.print(f"removed {cache.clear()} entries from {args.directory}")
    else:
        problems = cache.verify()
        for key, problem in problems:
            out.print(f"{key}: {problem} (removed)")
        out.print(f"{len(problems)} bad entries removed" if problems else "all entries are intact")
        return 1 if problems else 0
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("cache", help="list, clear or verify a compile-cache directory (Options.serialization_dir)")
    p.add_argument("action", choices=["ls", "clear", "verify"])
    p.add_argument("directory", metavar="DIR", type=Path, nargs="?", default=Path.home() / ".cache" / "litegpu",
                   help="the serialization dir (default ~/.cache/litegpu)")
    p.set_defaults(handler=run)
