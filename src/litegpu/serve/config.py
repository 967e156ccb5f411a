"""What ``litegpu serve`` is started with: the models (each under a name), where it listens, its limits.

Only the models named here are ever served: a request names a model by the name given at start, and no
path from a request reaches the file system.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InvalidArgumentError

MODEL_SUFFIXES = (".tflite", ".circle", ".litertlm")
API_KEY_ENV = "LITEGPU_API_KEY"
# a name is one URL path segment of the protocols' routes (/v2/models/{name}/..., "model" in OpenAI's requests)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")


@dataclass(frozen=True)
class Limits:
    """What one request may ask for; past each, a 4xx that names the limit."""

    max_body_bytes: int = 64 << 20       # a request body (413)
    max_tensor_bytes: int = 64 << 20     # one input tensor of the v2 protocol (413)
    max_prompt_tokens: int | None = None  # None: what the model's KV cache holds
    max_tokens: int = 4096               # new tokens one completion may ask for

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_tensor_bytes", "max_tokens"):
            if getattr(self, name) <= 0:
                raise InvalidArgumentError(f"{name} must be positive, got {getattr(self, name)}")
        if self.max_prompt_tokens is not None and self.max_prompt_tokens <= 0:
            raise InvalidArgumentError(f"max_prompt_tokens must be positive, got {self.max_prompt_tokens}")


@dataclass(frozen=True)
class ModelSpec:
    """One model to serve: its name and file; ``tokenizer`` makes a litert-torch export an OpenAI model."""

    name: str
    path: Path
    tokenizer: Path | None = None

    @property
    def is_bundle(self) -> bool:
        return self.path.suffix == ".litertlm"


@dataclass(frozen=True)
class ServeConfig:
    """The server's settings (``litegpu serve``'s options)."""

    models: tuple[ModelSpec, ...]
    host: str = "127.0.0.1"
    port: int = 8000
    accelerator: str = "gpu,cpu"
    api_key: str | None = None
    max_batch: int = 32
    max_delay_ms: float = 2.0
    batching: str = "auto"               # "auto": measured on the CPU, always on a GPU; "on"; "off"
    max_sequences: int = 32               # LLM sequences decoded together
    grace_s: float = 30.0                 # how long a shutdown waits for requests in flight
    cache_dir: str | None = None          # the compile cache (Options.serialization_dir): faster restarts, and
                                          # replicas share compiled programs and engine verdicts
    limits: Limits = field(default_factory=Limits)

    def __post_init__(self) -> None:
        if not self.models:
            raise InvalidArgumentError("litegpu serve needs at least one model")
        if len({m.name for m in self.models}) != len(self.models):
            raise InvalidArgumentError(f"two models share a name: {[m.name for m in self.models]}")
        if self.batching not in ("auto", "on", "off"):
            raise InvalidArgumentError(f"batching must be auto, on or off, not {self.batching!r}")
        if not 1 <= self.max_batch <= 1024:
            raise InvalidArgumentError(f"max_batch must be 1..1024, got {self.max_batch}")
        if not 0 <= self.max_delay_ms <= 10_000:
            raise InvalidArgumentError(f"max_delay_ms must be 0..10000, got {self.max_delay_ms}")
        if not 1 <= self.max_sequences <= 1024:
            raise InvalidArgumentError(f"max_sequences must be 1..1024, got {self.max_sequences}")
        if not 0 <= self.port <= 65535:
            raise InvalidArgumentError(f"port must be 0..65535, got {self.port}")


def api_key_from(option: str | None) -> str | None:
    """``--api-key``, else ``$LITEGPU_API_KEY``; an empty key is refused rather than silently open."""
    key = option if option is not None else os.environ.get(API_KEY_ENV)
    if key is not None and not key.strip():
        raise InvalidArgumentError(f"the API key (--api-key or ${API_KEY_ENV}) is empty")
    return key


def model_specs(arguments: list[str], tokenizers: list[str] = ()) -> tuple[ModelSpec, ...]:
    """``PATH``, ``NAME=PATH`` or a folder (each model file in it) as ModelSpecs; ``tokenizers``: ``NAME=FILE``
    (a SentencePiece model for a litert-torch export served through the OpenAI API)."""
    specs: list[ModelSpec] = []
    for argument in arguments:
        name, path = _named(argument)
        if path.is_dir():
            if name is not None:
                raise InvalidArgumentError(f"{argument}: a folder's models are named by their files; drop '{name}='")
            found = sorted(p for p in path.iterdir() if p.suffix in MODEL_SUFFIXES and p.is_file())
            if not found:
                raise InvalidArgumentError(f"{path}: no {', '.join(MODEL_SUFFIXES)} file in this folder")
            specs.extend(ModelSpec(_checked_name(p.stem, p), p) for p in found)
        elif path.is_file():
            if path.suffix not in MODEL_SUFFIXES:
                raise InvalidArgumentError(f"{path}: serve takes {', '.join(MODEL_SUFFIXES)} files")
            specs.append(ModelSpec(_checked_name(name or path.stem, path), path))
        else:
            raise InvalidArgumentError(f"{path}: no such file or folder")
    names = [s.name for s in specs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InvalidArgumentError(f"two models are named {twice}: give one another name with NAME=PATH")
    by_name = {s.name: s for s in specs}
    for argument in tokenizers:
        name, path = _named(argument)
        if name is None or name not in by_name:
            raise InvalidArgumentError(f"--tokenizer {argument}: write MODEL_NAME=FILE with one of the models "
                                       f"served ({sorted(by_name)})")
        if not path.is_file():
            raise InvalidArgumentError(f"--tokenizer {argument}: {path}: no such file")
        if by_name[name].is_bundle:
            raise InvalidArgumentError(f"--tokenizer {argument}: {name} is a .litertlm bundle, which has its own")
        by_name[name] = ModelSpec(name, by_name[name].path, path)
    return tuple(by_name[s.name] for s in specs)


def _named(argument: str) -> tuple[str | None, Path]:
    name, sep, path = argument.partition("=")
    if sep and name and not os.path.exists(argument):
        return name, Path(path).expanduser()
    return None, Path(argument).expanduser()


def _checked_name(name: str, path: Path) -> str:
    if not _NAME.fullmatch(name):
        raise InvalidArgumentError(f"{path}: {name!r} cannot name a model (letters, digits, '_', '.', '-'; up to "
                                   "128): give it one with NAME=PATH")
    return name


__all__ = ["API_KEY_ENV", "Limits", "ModelSpec", "ServeConfig", "api_key_from", "model_specs"]
