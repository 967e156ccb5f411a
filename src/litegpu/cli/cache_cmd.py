"""``litegpu cache ls | prune | clear | verify [DIR]``: look after the compile cache (default: the one models use)."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

from ..backends.cache import CACHE_DIR_VARIABLE, CompileCache, default_cache_dir, parse_size
from ..errors import InvalidArgumentError
from .common import human_bytes


def _directory(args: Any) -> Path | None:
    if args.directory is not None:
        return args.directory
    return default_cache_dir()


def _describe(entry: Any) -> str:
    """What an entry is, from what its writer recorded: engine, what it holds, source file."""
    what = ", ".join(part for part in (entry.engine, entry.what) if part) or "-"
    return f"{what}  {entry.source or '-'}"


def run(args: Any) -> int:
    if args.max_size is not None and args.action != "prune":
        raise InvalidArgumentError(f"--max-size goes with prune, not {args.action}")
    directory = _directory(args)  # plain print below: a listing must not wrap at the terminal's width
    if directory is None:
        print(f"the compile cache is off ({CACHE_DIR_VARIABLE} is set to an empty string); name a DIR to look "
              "at one")
        return 0 if args.action == "ls" else 2
    if not directory.is_dir():
        if args.directory is not None:
            raise InvalidArgumentError(f"{directory}: no cache directory there")
        print(f"{directory}: nothing cached yet")
        return 0
    cache = CompileCache(directory)
    if args.action == "ls":
        entries = sorted(cache.entries(), key=lambda e: e.last_used, reverse=True)
        for e in entries:
            used = datetime.datetime.fromtimestamp(e.last_used).isoformat(sep=" ", timespec="seconds")
            print(f"{e.key[:12]}  {human_bytes(e.size):>10}  last used {used}  {_describe(e)}")
        total = sum(e.size for e in entries)
        print(f"{len(entries)} entries, {human_bytes(total)} in {directory} (bound {human_bytes(cache.max_bytes)}, "
              "least recently used evicted past it)")
    elif args.action == "prune":
        bound = cache.max_bytes if args.max_size is None else _size(args.max_size)
        removed = cache.evict(bound)
        print(f"removed {len(removed)} least recently used entries ({human_bytes(sum(e.size for e in removed))}); "
              f"{human_bytes(cache.size())} left in {directory}")
    elif args.action == "clear":
        print(f"removed {cache.clear()} entries from {directory}")
    else:
        problems = cache.verify()
        for key, problem in problems:
            print(f"{key}: {problem} (removed)")
        print(f"{len(problems)} bad entries removed" if problems else "all entries are intact")
        return 1 if problems else 0
    return 0


def _size(text: str) -> int:
    from ..errors import CacheError

    try:
        return parse_size(text)
    except CacheError as e:
        raise InvalidArgumentError(f"--max-size: {e}") from None


def add_parser(sub: Any) -> None:
    p = sub.add_parser("cache", help="list, prune, clear or verify the compile cache",
                       description="The compile cache keeps what a later start of the same model can skip "
                                   "(compiled programs, engine choices). It is on by default in "
                                   f"${CACHE_DIR_VARIABLE}, else the user cache directory (~/.cache/litegpu on "
                                   f"Linux); {CACHE_DIR_VARIABLE}=\"\" turns it off.")
    p.add_argument("action", choices=["ls", "prune", "clear", "verify"],
                   help="ls: entries, most recently used first (engine, what, source file, size, last use); prune: "
                        "evict the least recently used down to --max-size; clear: remove every entry; verify: "
                        "check every entry's checksum, removing bad ones")
    p.add_argument("directory", metavar="DIR", type=Path, nargs="?", default=None,
                   help="the cache directory (default: the one models use, see above)")
    p.add_argument("--max-size", metavar="SIZE", default=None,
                   help="prune: keep at most this much (4G, 500M; default: the cache's bound, "
                        "$LITEGPU_CACHE_MAX_SIZE or 4G)")
    p.set_defaults(handler=run)
