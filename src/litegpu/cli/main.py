"""Entry point of the ``litegpu`` command.

Every failure a user can cause (a missing or broken file, a bad argument)
ends in one line on stderr naming the file and the problem, and exit code 2;
never a traceback.  ``LITEGPU_DEBUG=1`` shows tracebacks of internal errors, and the official
interpreter's INFO log lines that litegpu otherwise keeps off stderr (``backends.litert``).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence

from ..errors import LiteGpuError
from . import (batch_cmd, bench_cmd, cache_cmd, doctor_cmd, dump_cmd, explore_cmd, inspect_cmd, llm_cmd, ops_cmd,
               pack_cmd, run_cmd, serve_cmd)

USAGE_ERROR = 2


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line (``litegpu inspect: the following arguments ...``)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: {message} (see {self.prog} --help)\n")
        raise SystemExit(USAGE_ERROR)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="litegpu", description="Run and examine LiteRT / TensorFlow Lite models.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for module in (run_cmd, inspect_cmd, dump_cmd, ops_cmd, pack_cmd, cache_cmd, bench_cmd, doctor_cmd, batch_cmd,
                   llm_cmd, serve_cmd, explore_cmd):
        module.add_parser(sub)
    return parser


def _one_line(message: str) -> str:
    return " ".join(str(message).split())


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings (e.g. "no GPU, running on the CPU") as one line, without our source lines."""
    sys.stderr.write(f"litegpu: warning: {_one_line(str(message))}\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2, already printed)
        return e.code if isinstance(e.code, int) else USAGE_ERROR
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            return args.handler(args)
    except LiteGpuError as e:
        sys.stderr.write(f"litegpu {args.command}: {_one_line(str(e))}\n")
        return USAGE_ERROR
    except KeyboardInterrupt:
        sys.stderr.write(f"litegpu {args.command}: interrupted\n")
        return 130
    except BrokenPipeError:  # `litegpu dump x | head`
        return 0
    except Exception as e:  # a bug in litegpu: still one line, unless asked for the traceback
        if os.environ.get("LITEGPU_DEBUG"):
            raise
        sys.stderr.write(f"litegpu {args.command}: internal error: {type(e).__name__}: {_one_line(str(e))} "
                         "(set LITEGPU_DEBUG=1 for the traceback)\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
