"""The XLA backend: a subgraph traced once into one ``jax.jit`` program.

Large float constants (weights) are passed to the program as device-resident
parameters rather than embedded in it: compiling stays fast, and weights are
transferred to the accelerator once.  Small and integer constants stay numpy
values so that shapes, axes and paddings are static for XLA.
Resource variables are threaded through the program as inputs and outputs.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import AcceleratorUnavailableError
from ..ir import Model, Tensor
from ..ops import Target
from .graph import GraphRunner

# Float constants with more elements than this become program parameters.
PARAM_MIN_ELEMENTS = 256


@functools.lru_cache(maxsize=1)
def jax_module() -> Any:
    import jax

    # TFLite has int64 and float64 tensors; without x64 jax would silently narrow them.
    jax.config.update("jax_enable_x64", True)
    return jax


def available_platforms() -> set[str]:
    jax = jax_module()
    found = set()
    for platform in ("cpu", "gpu"):
        try:
            if jax.devices(platform):
                found.add(platform)
        except RuntimeError:
            pass
    return found


def device_for(platform: str) -> Any:
    jax = jax_module()
    try:
        return jax.devices(platform)[0]
    except RuntimeError:
        raise AcceleratorUnavailableError(f"no {platform.upper()} device is visible to JAX on this machine") from None


def _is_param(t: Tensor) -> bool:
    return (t.data is not None and t.dtype in ("float32", "float16", "bfloat16", "float64")
            and t.num_elements > PARAM_MIN_ELEMENTS)


class XlaBackend:
    """One model's subgraph compiled by XLA for one device; recompiled per input shape."""

    def __init__(self, model: Model, subgraph_index: int = 0, platform: str = "cpu", dtype_policy: Any = None):
        self.jax = jax_module()
        self.model = model
        self.subgraph_index = subgraph_index
        self.platform = platform
        self.device = device_for(platform)
        self.target = Target.XLA_GPU if platform == "gpu" else Target.XLA_CPU
        self.dtype_policy = dtype_policy
        self.params = self._device_params()
        self.variables: dict = {}
        self._program = self.jax.jit(self._trace)

    def _device_params(self) -> dict[str, Any]:
        params = {}
        for sg in self.model.subgraphs:
            for t in sg.tensors:
                if _is_param(t):
                    value = np.ascontiguousarray(t.data)
                    params[f"{sg.index}:{t.index}"] = self.jax.device_put(value, self.device)
        return params

    def _trace(self, params: dict, variables: dict, inputs: list) -> tuple[list, dict]:
        def constant(sg: int, t: Tensor) -> Any:
            return params.get(f"{sg}:{t.index}", t.data)

        runner = GraphRunner(self.model, self.target, constant=constant, variables=dict(variables))
        outputs = runner.run_subgraph(self.subgraph_index, inputs)
        return outputs, runner.variables

    def run(self, inputs: Sequence[Any]) -> list[Any]:
        """Run on device arrays or numpy; returns device arrays (dispatch is asynchronous)."""
        args = [self.jax.device_put(x, self.device) for x in inputs]
        outputs, self.variables = self._program(self.params, self.variables, args)
        return outputs

    def reset_variables(self) -> None:
        self.variables = {}
