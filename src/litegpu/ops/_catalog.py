"""Imports every op module of this package once, sub-packages included, so that each registers its ops.

A new op module needs no entry anywhere: dropping it into ``ops/`` (or one of its sub-packages: ``circle/`` for
the ops only circle files have, ``custom/`` for custom ops) is enough.  One naming rule tells the two kinds of
module apart: a helper module's name starts with an underscore (``_common``, ``_fixedpoint``...) and registers
nothing, so it is not imported here; every other module is an op family (``registry``, the ops' own registry, is
imported already).
"""

import importlib
import pkgutil

from . import __path__ as _ops_path

for _info in sorted(pkgutil.walk_packages(_ops_path, prefix=f"{__package__}."), key=lambda m: m.name):
    if not any(part.startswith("_") for part in _info.name.split(".")[2:]):
        importlib.import_module(_info.name)
