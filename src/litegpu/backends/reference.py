"""The reference backend: numpy kernels, op by op, with TFLite's exact semantics.

Slow by design; it is the oracle our own tests compare the XLA backend with,
and the CPU fallback for ops XLA cannot express (data-dependent shapes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..ir import Model
from ..ops import Target
from .engine import Engine, EngineContext, EngineSettings, Executable, SubgraphProgram, op_reasons
from .graph import GraphRunner
from .op_range import OpRange


class ReferenceBackend(Executable, SubgraphProgram):
    """Runs a model with numpy kernels, a whole subgraph (``run(inputs, subgraph_index)``) or one partition of a
    plan (``op_range``); keeps resource variables across calls.  Partitions and signatures of one model share one
    runner (``runner``): its variables are the model's."""

    def __init__(self, model: Model, preserve_all_tensors: bool = False, *, runner: GraphRunner | None = None,
                 op_range: OpRange | None = None, subgraph: int = 0):
        self.model = model
        self.preserve_all_tensors = preserve_all_tensors
        self.tensors: dict[tuple[int, int], np.ndarray] = {}
        self.runner = runner if runner is not None else GraphRunner(
            model, Target.REFERENCE, observe=self._observe if preserve_all_tensors else None)
        self.op_range, self.subgraph_index = op_range, subgraph  # type: ignore[assignment]

    def _observe(self, sg: int, t: int, value: Any) -> None:
        self.tensors[(sg, t)] = value

    @property
    def variables(self) -> dict:
        return self.runner.variables

    def reset_variables(self) -> None:
        self.runner.variables.clear()

    def run(self, inputs: Sequence[Any], subgraph_index: int | None = None) -> list[np.ndarray]:
        arrays = [np.asarray(x) for x in inputs]
        if self.op_range is not None:
            return self.runner.run_ops(self.op_range, arrays)
        return self.runner.run_subgraph(self.subgraph_index if subgraph_index is None else subgraph_index, arrays)


class ReferenceEngine(Engine):
    """The numpy interpreter: exact and slow; runs what nothing else can.  Every partition and subgraph of one
    model it compiles runs on one numpy runner of that model (the model's resource variables, kept once)."""

    name, target = "reference", Target.REFERENCE

    def __init__(self, observe: Callable[[int, int, Any], None] | None = None):
        self._observe = observe
        self._runners: dict[int, tuple[Model, GraphRunner]] = {}

    @classmethod
    def create(cls, settings: EngineSettings | None, context: EngineContext) -> "ReferenceEngine":
        return cls(context.observe)

    def available(self) -> bool:
        return True

    def unsupported(self, model: Model, subgraph: int, op_indices: Sequence[int]) -> dict[int, str]:
        return op_reasons(model, subgraph, op_indices, self.target)

    def runner(self, model: Model) -> GraphRunner:
        """The numpy runner of ``model`` (made on first use)."""
        found = self._runners.get(id(model))
        if found is None or found[0] is not model:
            found = self._runners[id(model)] = (model, GraphRunner(model, Target.REFERENCE, observe=self._observe))
        return found[1]

    def compile(self, model: Model, op_range: OpRange, settings: EngineSettings, cache: Any = None,
                cache_key: dict | None = None) -> Executable:
        return ReferenceBackend(model, runner=self.runner(model), op_range=op_range, subgraph=op_range.subgraph)

    def compile_subgraph(self, model: Model, subgraph: int, settings: EngineSettings, cache: Any = None,
                         cache_key: dict | None = None) -> ReferenceBackend:
        return ReferenceBackend(model, runner=self.runner(model), subgraph=subgraph)

    def reset_variables(self) -> None:
        for _, runner in self._runners.values():
            runner.variables.clear()

    def describe(self) -> str:
        import numpy

        return f"numpy {numpy.__version__}"
