"""Imports every op module of this package once, so that each registers its ops.

A new op module needs no entry anywhere: dropping it into ``ops/`` is enough.
"""

import importlib
import pkgutil

from . import __path__ as _ops_path

_SKIP = {"registry", "common", "_catalog"}

for _info in sorted(pkgutil.iter_modules(_ops_path), key=lambda m: m.name):
    if _info.name not in _SKIP and not _info.name.startswith("_"):
        importlib.import_module(f"{__package__}.{_info.name}")
