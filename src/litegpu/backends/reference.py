"""The reference backend: numpy kernels, op by op, with TFLite's exact semantics.

Slow by design; it is the oracle our own tests compare the XLA backend with,
and the CPU fallback for ops XLA cannot express (data-dependent shapes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..ir import Model
from ..ops import Target
from .engine import Engine, EngineContext, EngineSettings, Executable, op_reasons
from .graph import GraphRunner, OpRange


class ReferenceBackend:
    """Runs a model with numpy kernels; keeps resource variables across calls."""

    def __init__(self, model: Model, preserve_all_tensors: bool = False):
        self.model = model
        self.preserve_all_tensors = preserve_all_tensors
        self.tensors: dict[tuple[int, int], np.ndarray] = {}
        self.runner = GraphRunner(model, Target.REFERENCE, observe=self._observe if preserve_all_tensors else None)

    def _observe(self, sg: int, t: int, value: Any) -> None:
        self.tensors[(sg, t)] = value

    @property
    def variables(self) -> dict:
        return self.runner.variables

    def reset_variables(self) -> None:
        self.runner.variables.clear()

    def run(self, inputs: Sequence[np.ndarray], subgraph_index: int = 0) -> list[np.ndarray]:
        return self.runner.run_subgraph(subgraph_index, [np.asarray(x) for x in inputs])


class ReferenceEngine(Engine):
    """The numpy interpreter: exact and slow; runs what nothing else can."""

    name, target = "reference", Target.REFERENCE

    @classmethod
    def create(cls, settings: EngineSettings | None, context: EngineContext) -> "ReferenceEngine":
        return cls()

    def available(self) -> bool:
        return True

    def unsupported(self, model: Model, subgraph: int, op_indices: Sequence[int]) -> dict[int, str]:
        return op_reasons(model, subgraph, op_indices, self.target)

    def compile(self, model: Model, op_range: OpRange, settings: EngineSettings, cache: Any = None,
                cache_key: dict | None = None) -> Executable:
        return _ReferenceExecutable(GraphRunner(model, Target.REFERENCE), op_range)

    def describe(self) -> str:
        import numpy

        return f"numpy {numpy.__version__}"


class _ReferenceExecutable(Executable):
    def __init__(self, runner: Any, op_range: OpRange):
        self.runner, self.op_range = runner, op_range

    def run(self, inputs: Sequence[Any]) -> list[Any]:
        return self.runner.run_ops(self.op_range, [np.asarray(x) for x in inputs])
