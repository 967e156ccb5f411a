"""The engines litegpu has, by name: the one module that knows them all, and that no engine imports.

Each engine lives in a module of its own behind the interface of ``engine.py``; this registry names them,
fastest first within a device kind, and makes them on demand (an engine's module, and the package behind it,
is imported only when that engine is asked for: ``import litegpu`` loads no JAX, OpenVINO or interpreter).
A new engine is one module and one line in ``ENGINES``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .engine import Engine, EngineSettings


def _litert(settings: EngineSettings | None = None) -> Engine:
    from .litert import LiteRtEngine

    return LiteRtEngine(settings)


def _openvino(settings: EngineSettings | None = None) -> Engine:
    from .openvino import OpenVinoEngine

    return OpenVinoEngine(settings=settings)


def _xla(settings: EngineSettings | None = None) -> Engine:
    from .xla import XlaCpuEngine

    return XlaCpuEngine()


def _iree(settings: EngineSettings | None = None) -> Engine:
    from .iree import IreeEngine

    return IreeEngine(settings)


def _reference(settings: EngineSettings | None = None) -> Engine:
    from .reference import ReferenceEngine

    return ReferenceEngine()


ENGINES: dict[str, Callable[..., Engine]] = {
    "litert": _litert, "openvino": _openvino, "xla": _xla, "iree": _iree, "reference": _reference}


def engine(name: str, settings: EngineSettings | None = None) -> Engine:
    """The engine called ``name`` ("litert", "openvino", "xla", "iree", "reference"), a new one."""
    if name not in ENGINES:
        from ..errors import InvalidArgumentError

        raise InvalidArgumentError(f"unknown engine {name!r}; litegpu has {', '.join(ENGINES)}")
    return ENGINES[name](settings)


def fast_cpu_engines(settings: EngineSettings, file: str | None = None, cache: Any = None,
                     cache_key: dict | None = None, whole_file: bool = True) -> dict[str, Engine]:
    """The engines the fast CPU path plans with (``CpuKernelMode.FAST``), those this machine has installed
    (``Engine.installed``: the planner asks ``available`` before it uses one): the official interpreter and
    OpenVINO, holding the model's compile cache.  ``file`` is the model's
    file; ``whole_file`` says the model planned is that file as it is (OpenVINO then reads a whole-model
    partition from it; the official interpreter always runs the file, a rewrite changes nothing it sees)."""
    from .litert import LiteRtEngine
    from .openvino import OpenVinoEngine

    found: dict[str, Engine] = {}
    for candidate in (LiteRtEngine(settings, file=file, cache=cache, cache_key=cache_key),
                      OpenVinoEngine(cache=cache, cache_key=cache_key, settings=settings,
                                     file=file if whole_file else None)):
        if candidate.installed():
            found[candidate.name] = candidate
    return found


__all__ = ["ENGINES", "engine", "fast_cpu_engines"]
