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
from .graph import GraphRunner


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
