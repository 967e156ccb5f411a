"""The planner's memo of timed engine choices: which of two engines runs a scope of a model (the whole model, a
partition, any model of the same ops) faster, kept in the model's compile cache so that a warm start does not
time the engines again.

Any two engines: the verdict is keyed by both engines' names and versions, the scope, the thread count and the
CPU (a verdict holds for one kind of CPU), and the model's cache key (without the model's own token for a scope
that names any model of the same ops, ``compile.choices``).  The timing itself is the first engine's answer to
``Engine.faster_than``; an engine with no opinion (None) leaves the other engine the scope.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..backends.engine import Engine, cpu_name, physical_cores
from ..ir import Model


class TimingMemo:
    """Verdicts between ``first`` (the engine timed against the other: the official interpreter) and ``other``,
    in the compile cache ``first`` holds (``Engine.compile_cache``)."""

    def __init__(self, first: Engine, other: Engine):
        self.first, self.other = first, other
        self.cache, self.cache_key = first.compile_cache()

    def _key(self, scope: str, any_model: bool = False) -> str | None:
        if self.cache is None:
            return None
        from ..backends.cache import make_key

        first, other = self.first, self.other
        # ``any_model``: a verdict that ``scope`` names without the model (the planner's verdicts by op structure,
        # ``compile.choices``), found from another model's start
        base = {k: v for k, v in self.cache_key.items() if k != "model_token"} if any_model else self.cache_key
        # the engines' versions as their package metadata says: a warm start reads the verdict without importing
        # them (OpenVINO: ``openvino_package_version``)
        threads = first.settings.num_threads if first.settings.num_threads > 0 else physical_cores()
        return make_key({**base, "choice": [first.name, other.name], "scope": scope,
                         first.name: first.version(), other.name: other.version(), "threads": threads,
                         "cpu": cpu_name()})

    def cached(self, model: Model, scope: str, any_model: bool = False) -> str | None:
        """The verdict of an earlier timing of the same scope, versions and CPU, if kept."""
        key = self._key(scope, any_model)
        stored = self.cache.load(key) if key is not None else None
        if stored in (self.first.name.encode(), self.other.name.encode()):
            return stored.decode()
        if stored is not None:
            self.cache.discard(key, "not an engine name")
        return None

    def remember(self, model: Model, scope: str, winner: str, any_model: bool = False) -> None:
        """Keep a verdict in the compile cache (when there is one), for ``cached`` to find."""
        key = self._key(scope, any_model)
        if key is not None:
            what = "engine choice for any model of the same ops" if any_model else "engine choice"
            self.cache.store(key, winner.encode(), {"engine": self.first.name, "what": what, "source": model.source,
                                                    "scope": scope})

    def faster(self, model: Model, op_ranges: Sequence[Any], scope: str) -> str:
        """The name of the engine that runs these partitions (``scope`` names them) faster: kept, else timed by
        ``first`` (``Engine.faster_than``) and kept; processes starting together time it once."""
        from ..backends.cache import found_or_made

        return found_or_made(self.cache, self._key(scope), lambda: self.cached(model, scope),
                             lambda: self._timed(model, op_ranges, scope))

    def _timed(self, model: Model, op_ranges: Sequence[Any], scope: str) -> str:
        winner = self.first.faster_than(model, op_ranges, self.other, scope) or self.other.name
        self.remember(model, scope, winner)
        return winner


__all__ = ["TimingMemo"]
