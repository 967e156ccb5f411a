"""Names of a package imported on first use (PEP 562): ``import litegpu`` and a warm start import only what they use."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def lazy_names(package: str, where: Mapping[str, str], public: list[str]) -> tuple[Callable, Callable]:
    """A package's ``__getattr__`` and ``__dir__``: ``where`` maps each lazy name to the module that defines it (relative
    to ``package``); a name, once imported, is kept in the package's namespace."""
    def __getattr__(name: str):
        if name in where:
            value = getattr(importlib.import_module(where[name], package), name)
            setattr(sys.modules[package], name, value)
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *public})

    return __getattr__, __dir__


class LazyLogger:
    """``logging.getLogger(name)``, the ``logging`` package imported at the first message (a warm start logs
    none, and the import is 3-4 ms of it); configuring the logger by name beforehand works as ever."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attribute: str):
        import logging

        return getattr(logging.getLogger(self._name), attribute)
