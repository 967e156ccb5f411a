"""``litegpu generate FILE.litertlm --prompt TEXT`` and ``litegpu chat FILE.litertlm``: text in, text out,
streamed as the tokens come (see ``runtime.litertlm``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ..errors import InvalidArgumentError
from .common import ACCELERATOR_HELP, accelerator_flags, count, step


def _bundle(args: Any) -> Any:
    """The bundle, its model compiled for ``--accelerator``."""
    from ..runtime.litertlm import LitertLmBundle

    path = args.file
    if not path.is_file():
        raise InvalidArgumentError(f"{path}: no such file")
    bundle = LitertLmBundle.open(path)
    with step(f"loading {path.name}"):
        bundle.compiled_model(hardware_accel=accelerator_flags(args.accelerator))
    return bundle


def _answer(bundle: Any, text: str, args: Any) -> None:
    for piece in bundle.chat_stream(text, args.max_tokens, temperature=args.temperature, seed=args.seed):
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")


def run_generate(args: Any) -> int:
    _answer(_bundle(args), args.prompt, args)
    return 0


def run_chat(args: Any) -> int:
    """One answer per line of input, until end of input (or "/exit")."""
    bundle = _bundle(args)
    interactive = sys.stdin.isatty()
    while True:
        if interactive:
            sys.stdout.write("> ")
            sys.stdout.flush()
        line = sys.stdin.readline()
        if not line or line.strip() == "/exit":
            return 0
        if line.strip():
            _answer(bundle, line.strip(), args)


def _common(p: Any) -> None:
    p.add_argument("file", metavar="FILE", type=Path, help="a .litertlm bundle (model, tokenizer, LLM metadata)")
    p.add_argument("--max-tokens", type=count(1), default=64, help="new tokens at most (default 64)")
    p.add_argument("--accelerator", default="cpu", metavar="cpu|gpu|gpu,cpu", help=ACCELERATOR_HELP)
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy (default)")
    p.add_argument("--seed", type=int, default=None, help="sampling seed")


def add_parser(sub: Any) -> None:
    p = sub.add_parser("generate", help="answer one prompt with a .litertlm model, streamed")
    _common(p)
    p.add_argument("--prompt", required=True, help="the user's text")
    p.set_defaults(handler=run_generate)
    p = sub.add_parser("chat", help="answer each line of input with a .litertlm model, streamed")
    _common(p)
    p.set_defaults(handler=run_chat)
