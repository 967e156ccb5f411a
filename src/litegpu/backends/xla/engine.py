"""The XLA engine behind the engine interface (``backends.engine``): the exact TFLite kernels traced into XLA
programs (``backend.XlaBackend``), and the GPUs JAX sees for ``litegpu doctor``.

The engine owns what its programs of one model share: the model's weights and variables on each device
(``state.XlaState``, one per JAX platform, made on first use; split over several devices where the runtime asks),
so that the partitions and signatures of a model place its weights once.  A whole-model plan runs each subgraph as
one program (``compile_subgraph``: parts, donation of the inputs a run may consume, the generation loop's device
program); a plan in parts runs each partition as a program over the same weights (``compile``), placed on the
device where the plan puts it and traced with its op rules (``placed``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...ir import Model, numpy_dtype
from ..engine import Engine, EngineContext, EngineSettings, Executable, op_reasons
from ..graph import OpRange
from ...ops import Target
from ..decoding import DecodeSignature, Sampling
from .backend import XlaBackend
from .generate import DecodeLoop, StepLayout
from .state import XlaState
from ..device_arrays import available_platforms, device_for, is_device_array, jax_module


class XlaEngine(Engine):
    """Exact TFLite kernels (integers bit for bit) traced into XLA programs, on the host or a GPU JAX sees."""

    name, target = "xla", Target.XLA_CPU

    def __init__(self, settings: EngineSettings | None = None, context: EngineContext | None = None,
                 platform: str = "cpu", rules: Target | None = None, states: dict | None = None):
        self.settings = settings or EngineSettings()
        self.context = context or EngineContext()
        self.platform = platform
        self.rules = rules or (Target.XLA_GPU if platform == "gpu" else Target.XLA_CPU)
        # (model, platform) -> (the model, its weights there), shared by every engine ``placed`` from this one
        self._states: dict[tuple[int, str], tuple[Model, XlaState]] = {} if states is None else states

    @classmethod
    def create(cls, settings: EngineSettings | None, context: EngineContext) -> "XlaEngine":
        return cls(settings, context)

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

    def placed(self, platform: str, target: Target) -> "XlaEngine":
        if (platform, target) == (self.platform, self.rules):
            return self
        placed = XlaEngine(self.settings, self.context, platform, target, self._states)
        placed.info = self.info
        return placed

    def weights(self, model: Model, platform: str) -> XlaState:
        """The weights and variables of ``model`` on ``platform``'s device (split over the context's devices for
        that platform, where it names several), held in the storage dtype of the engine's precision."""
        key = (id(model), platform)
        found = self._states.get(key)
        if found is None or found[0] is not model:
            device = (self.context.device or device_for)(platform)
            found = self._states[key] = (model, XlaState(
                model, device, XlaBackend.storage_dtype(self.settings.precision),
                devices=(self.context.devices or {}).get(platform), platform=platform,
                official_float_order=self.context.official_float_order))
        return found[1]

    def compile(self, model: Model, op_range: OpRange, settings: EngineSettings, cache: Any = None,
                cache_key: dict | None = None) -> "XlaPartition":
        """One program over ``op_range`` (compiled per input shape) over the model's weights on the engine's
        platform.  The precision is the engine's own (``settings`` of the runtime's CPU engines may differ): the
        model's weights on one device are held once, in one storage dtype, for all its partitions."""
        backend = XlaBackend(model, op_range.subgraph, self.platform, precision=self.settings.precision,
                             state=self.weights(model, self.platform), cache=cache, cache_key=cache_key,
                             op_range=op_range)
        backend.target = self.rules  # the partition's rules; the platform only says where they execute
        return XlaPartition(backend)

    def compile_subgraph(self, model: Model, subgraph: int, settings: EngineSettings, cache: Any = None,
                         cache_key: dict | None = None) -> "XlaProgram":
        """The whole subgraph as one program (in parts for a big one), over the model's weights on the engine's
        platform; programs in the builtin kernels' float order are other programs, cached apart."""
        key = dict(cache_key or {})
        if self.context.official_float_order and key:
            key["float_order"] = "builtin kernels"
        return XlaProgram(model, subgraph, self.platform, precision=self.settings.precision,
                          state=self.weights(model, self.platform), cache=cache, cache_key=key)

    def reset_variables(self) -> None:
        for _, state in self._states.values():
            state.variables = {}

    def placement_report(self) -> Any:
        """How the weights it holds on a GPU sit there; None where it holds them on the host only (the runtime
        reports those itself, ``weights``)."""
        on_gpu = [state for (_, platform), (_, state) in self._states.items() if platform != "cpu"]
        return on_gpu[0].placement_report() if on_gpu else None

    def profile_ops(self, model: Model, subgraph: int, inputs: Sequence[Any], repeats: int,
                    on_op: Any) -> tuple[list[dict[str, Any]], float]:
        """Each op as its own program on the engine's platform, over the model's weights there
        (``op_profile``)."""
        from .op_profile import profile_ops

        device = (self.context.device or device_for)(self.platform)
        return profile_ops(self.weights(model, self.platform), device, model, subgraph, inputs, self.rules,
                           self.settings.precision, self.context.official_float_order, repeats, on_op)

    def describe(self) -> str:
        import jax
        import jaxlib

        return f"jax {jax.__version__} / jaxlib {jaxlib.__version__}; devices: " + ", ".join(
            sorted({d.platform for d in jax.devices()}))


XlaCpuEngine = XlaEngine  # its earlier name


class XlaProgram(XlaBackend):
    """A whole subgraph as the engine runs it (``compile_subgraph``), with the device decode capabilities of the
    engine interface (``backends.decoding``): the generation loop and the batched decode, over this program where it
    is a device program (``device_program``).  They live here, above ``generate`` and ``batched_decode``, which build
    on ``XlaBackend``."""

    def decode_loop(self, signature: DecodeSignature, chunk: int, sampling: Sampling, stop_tokens: tuple[int, ...],
                    seed: int | None) -> DecodeLoop | None:
        if self.device_program() is None:
            return None
        return DecodeLoop(self, self._step_layout(signature), chunk, sampling, stop_tokens, seed)

    def batched_decode(self, signature: DecodeSignature, steps_per_launch: int) -> Any:
        if self.device_program() is None:
            return None
        from .batched_decode import BatchedDecode

        return BatchedDecode(self, self._step_layout(signature), steps_per_launch)

    def _step_layout(self, signature: DecodeSignature) -> StepLayout:
        s = signature
        return StepLayout.of(self.model, s.key, s.tokens, s.position, s.logits, s.mask, list(s.caches), s.max_len)


class XlaPartition(Executable):
    """One partition of a plan as an XLA program on one device (``XlaBackend`` with an op range): its inputs go
    to its device, its outputs stay there."""

    def __init__(self, backend: XlaBackend):
        self.backend = backend
        self.op_range = backend.op_range
        self.where = backend.platform
        self.run = backend.run  # type: ignore[method-assign]  (no layer of ours per call)

    def run(self, inputs: Sequence[Any]) -> list[Any]:  # replaced per instance in __init__
        return self.backend.run(inputs)

    def output_shapes(self, input_shapes: Sequence[Sequence[int]]) -> list[tuple[tuple[int, ...], Any]]:
        """By tracing the partition's ops (no compile, no run)."""
        tensors = self.backend.model.subgraphs[self.op_range.subgraph].tensors
        return self.backend.output_shapes([(tuple(shape), numpy_dtype(tensors[t].dtype))
                                           for shape, t in zip(input_shapes, self.op_range.inputs)])

    def place(self, value: Any) -> tuple[Any, bool]:
        """``value`` as this partition's program takes it, and whether it crosses to its device.  Host values
        (and arrays on a CPU device, read in place) go to the program as numpy: the call copies all of them to
        the device in one batched transfer (``XlaBackend._place``) where a ``device_put`` each cost a crossing
        each (150-250 us on an H200, BENCHMARKS.md).  Arrays on another accelerator are moved here."""
        device = self.backend.state.device
        if not is_device_array(value):
            return np.asarray(value), True
        if device in value.devices():
            return value, False
        if all(d.platform == "cpu" for d in value.devices()):
            return np.asarray(value), True
        return jax_module().device_put(value, device), True
