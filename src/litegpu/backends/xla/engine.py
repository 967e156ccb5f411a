"""The XLA engine behind the engine interface (``backends.engine``): the exact TFLite kernels traced into XLA
programs (``backend.XlaBackend``), and the GPUs JAX sees for ``litegpu doctor``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...ir import Model
from ..engine import Engine, EngineContext, EngineSettings, Executable, op_reasons
from ..graph import OpRange
from ...ops import Target
from .backend import XlaBackend
from .state import XlaState
from .device import available_platforms, device_for, jax_module


class XlaCpuEngine(Engine):
    """Exact TFLite kernels (integers bit for bit) traced into XLA programs on the host."""

    name, target = "xla", Target.XLA_CPU

    @classmethod
    def create(cls, settings: EngineSettings | None, context: EngineContext) -> "XlaCpuEngine":
        return cls()

    @classmethod
    def device_rows(cls, earlier: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """The GPUs JAX sees (CUDA, ROCm), or a row saying how to add one."""
        try:
            gpus = [d for d in jax_module().devices() if d.platform != "cpu"]
        except Exception:  # noqa: BLE001  (JAX missing or broken: no GPU through it)
            gpus = []
        if not gpus:
            return [{"device": "GPU", "detail": "none visible to JAX", "engines": "-",
                     "install": 'NVIDIA: pip install "litegpu[cuda12]" (or [cuda13], matching the driver); '
                                'AMD: pip install "jax[rocm]" (JAX\'s ROCm build); any GPU with a Vulkan driver: '
                                'IREE (see the Vulkan rows)'}]
        return [{"device": f"GPU {d.id}", "detail": f"{d.platform}: {getattr(d, 'device_kind', d)}", "engines": "xla"}
                for d in gpus]

    @classmethod
    def gpu_plan_line(cls, devices: Sequence[dict[str, Any]]) -> str | None:
        return "GPU plans run on XLA (the GPU JAX sees)" if any(r["device"].startswith("GPU ") for r in devices) \
            else None

    def available(self) -> bool:
        try:
            return "cpu" in available_platforms()
        except ImportError:
            return False

    def unsupported(self, model: Model, subgraph: int, op_indices: Sequence[int]) -> dict[int, str]:
        return op_reasons(model, subgraph, op_indices, self.target)

    def compile(self, model: Model, op_range: OpRange, settings: EngineSettings, cache: Any = None,
                cache_key: dict | None = None, state: Any = None) -> Executable:
        """An ``XlaBackend`` over ``op_range`` (one program per input shape).  ``state`` holds the device
        weights and variables; partitions of one model pass the same one so that weights are placed once."""
        if state is None:
            state = XlaState(model, device_for("cpu"), XlaBackend.storage_dtype(settings.precision))
        return XlaBackend(model, op_range.subgraph, "cpu", precision=settings.precision, state=state, cache=cache,
                          cache_key=cache_key, op_range=op_range)

    def describe(self) -> str:
        import jax
        import jaxlib

        return f"jax {jax.__version__} / jaxlib {jaxlib.__version__}; devices: " + ", ".join(
            sorted({d.platform for d in jax.devices()}))
