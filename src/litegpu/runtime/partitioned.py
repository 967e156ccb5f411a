"""Running a split delegation plan: each partition on its own backend, boundary tensors moved once.

A partition on an XLA target is one ``jax.jit`` program over its op range
(``XlaBackend`` with ``op_range``), compiled per input shape like a whole
model; an OPENVINO partition is a sub-model compiled by OpenVINO
(``backends.openvino``); a LITERT partition is run by the official interpreter
(``backends.litert``: an entry subgraph, or a part of one as a sub-model); an IREE partition is compiled by IREE for a
Vulkan or Metal GPU (``backends.iree``; the same lowering as XLA's GPU partitions, over the host weights of the
CPU state, uploaded once); a REFERENCE partition runs its ops with the numpy kernels.  Between
partitions, a tensor is placed on the next partition's device (``device_put``,
or a host copy for numpy) the first time a partition there needs it, and that
placed copy is reused by every later partition on the same device in the run.

XLA dispatch is asynchronous, so GPU partitions queue up without waiting; a
CPU partition that needs a GPU tensor waits for it there (the host copy is a
synchronisation point, as in any GPU/CPU split).

``platforms`` maps an accelerator to the JAX platform that executes its
partitions: ``{GPU: "gpu", CPU: "cpu"}`` normally; tests pass ``{GPU: "cpu"}``
to run the GPU partitions (traced with the GPU's rules) on the XLA CPU backend.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .. import ir
from ..compile import CPU, GPU, DelegationPlan, Partition
from ..errors import EngineCompileError, ModelExecutionError
from ..ops import Target
from .tensor_buffer import _is_device_array

DEFAULT_PLATFORMS = {GPU: "gpu", CPU: "cpu"}
HOST = "host"
IREE = "iree"  # where IREE partitions run: its device, which IREE's executables place data on themselves


class _ReferenceUnit:
    where = HOST

    def __init__(self, runner: Any, partition: Partition):
        self.runner, self.op_range = runner, partition.op_range()

    def run(self, inputs: Sequence[Any]) -> list[Any]:
        return self.runner.run_ops(self.op_range, [np.asarray(x) for x in inputs])


class _XlaUnit:
    def __init__(self, backend: Any):
        self.backend = backend
        self.where = backend.platform
        self.op_range = backend.op_range

    def run(self, inputs: Sequence[Any]) -> list[Any]:
        return self.backend.run(inputs)


class _OpenVinoUnit:
    """An OpenVINO partition that hands itself to the exact kernels, with a warning, the first time OpenVINO
    cannot compile it (its shape inference refuses some graphs TFLite accepts, or a new input shape).  IREE's
    partitions do the same (``_IreeUnit``): an op IREE cannot compile sends its partition to the CPU."""

    where = HOST
    name = "openvino"
    instead = "the exact kernels"

    def __init__(self, executable: Any, exact: Callable[[], Any]):
        self.executable, self._exact = executable, exact
        self.op_range = executable.op_range
        self.fallback: Any = None

    @property
    def engine(self) -> str:
        return self.name if self.fallback is None else getattr(self.fallback, "engine", "xla")

    def fall_back(self, error: Exception) -> None:
        warnings.warn(f"{error}; this partition runs on {self.instead} instead", RuntimeWarning, stacklevel=3)
        self.fallback = self._exact()

    def run(self, inputs: Sequence[Any]) -> list[Any]:
        if self.fallback is None:
            try:
                return self.executable.run(inputs)
            except EngineCompileError as e:
                self.fall_back(e)
        return self.fallback.run(inputs)

    def output_shapes(self, input_shapes: Any) -> Any:
        if self.fallback is None:
            try:
                return self.executable.output_shapes(input_shapes)
            except EngineCompileError as e:
                self.fall_back(e)
        return None


class _IreeUnit(_OpenVinoUnit):
    """An IREE partition on a Vulkan or Metal GPU; one that IREE cannot compile runs on the CPU instead, with a
    warning naming IREE's error (the planner refuses what is known not to compile; this catches the rest)."""

    where = IREE
    name = "iree"
    instead = "the CPU"


class _LiteRtUnit:
    """A partition on the official interpreter.  Output shapes for new input shapes come from the
    interpreter itself for a model without signatures, else from tracing the subgraph under XLA (no compile,
    no run): a signature runner resizes its inputs only while it runs."""

    where = HOST

    def __init__(self, executable: Any, traced: Callable[[], Any], model: ir.Model):
        self.executable, self.op_range, self._traced, self.model = executable, executable.op_range, traced, model
        self.run = executable.run  # a call of a model that runs in microseconds: no layer of our own
        self.run_arrays = executable.run_arrays

    def output_shapes(self, input_shapes: Sequence[Sequence[int]]) -> list[tuple[tuple[int, ...], Any]]:
        found = self.executable.output_shapes(input_shapes)
        if found is not None:
            return found
        sg = self.model.subgraphs[self.op_range.subgraph]
        return self._traced().output_shapes([(tuple(shape), ir.numpy_dtype(sg.tensors[t].dtype))
                                             for shape, t in zip(input_shapes, self.op_range.inputs)])


class PartitionedModel:
    """The backends of one model under a split plan: weights per device and the compiled partitions,
    shared by all signatures (as ``XlaState`` is for a whole model)."""

    def __init__(self, model: ir.Model, plan: DelegationPlan, *, platforms: Mapping[int, str] | None = None,
                 precision: Any = None, device: Callable[[str], Any] | None = None, cache: Any = None,
                 cache_key: dict | None = None, engine_settings: Any = None, engines: dict | None = None,
                 devices: Mapping[str, Any] | None = None):
        from ..backends.engine import EngineSettings

        self.model, self.plan = model, plan
        self.engine_settings = engine_settings or EngineSettings()
        # the engines the plan asked: OpenVINO hands back the partitions it compiled while planning
        self.engines = dict(engines or {})
        self.platforms = {int(k): v for k, v in {**DEFAULT_PLATFORMS, **(platforms or {})}.items()}
        self.precision = precision
        self._device = device
        self.cache, self.cache_key = cache, dict(cache_key or {})
        self._states: dict[str, Any] = {}
        # platform -> the devices its weights are split over (the accelerator's; CPU partitions stay on the host)
        self._devices = dict(devices or {})
        self._reference: Any = None
        self._signatures: dict[int, PartitionedSignature] = {}

    def placement_report(self, platform: str) -> Any:
        """How the accelerator's weights sit on its device: IREE's uploads where IREE runs the GPU partitions
        (``backends.iree.IreeState``), else the XLA state's of ``platform``."""
        engine = self.engines.get("iree") if any(p.target is Target.IREE for p in self.plan.partitions) else None
        if engine is not None:
            from ..backends.sharding import PlacementReport

            reports = [state.placement_report() for state in engine.states()]
            return PlacementReport(1, [w for r in reports for w in r.weights],
                                   [sum(sum(r.measured_bytes_per_device or [0]) for r in reports)])
        return self.state(platform).placement_report()

    def state(self, platform: str) -> Any:
        """Device weights and variables for one JAX platform (created on first use)."""
        if platform not in self._states:
            from ..backends.xla import XlaBackend, XlaState, device_for

            device = (self._device or device_for)(platform)
            self._states[platform] = XlaState(self.model, device, XlaBackend.storage_dtype(self.precision),
                                              devices=self._devices.get(platform), platform=platform)
        return self._states[platform]

    @property
    def reference(self) -> Any:
        if self._reference is None:
            from ..backends.graph import GraphRunner

            self._reference = GraphRunner(self.model, Target.REFERENCE)
        return self._reference

    def unit(self, partition: Partition) -> Any:
        if partition.target is Target.REFERENCE:
            return _ReferenceUnit(self.reference, partition)
        if partition.target is Target.OPENVINO:
            return self._openvino_unit(partition)
        if partition.target is Target.LITERT:
            return self._litert_unit(partition)
        if partition.target is Target.IREE:
            return self._iree_unit(partition)
        from ..backends.xla import XlaBackend

        platform = self.platforms[int(partition.accelerator)]
        backend = XlaBackend(self.model, partition.subgraph_index, platform, precision=self.precision,
                             state=self.state(platform), cache=self.cache, cache_key=self.cache_key,
                             op_range=partition.op_range())
        # The partition's target picks the kernels' rules (GPU), the platform only where they execute.
        backend.target = partition.target
        return _XlaUnit(backend)

    def _openvino_unit(self, partition: Partition) -> Any:
        """The partition compiled by OpenVINO for its declared shapes; if OpenVINO converts its ops but cannot
        compile them together (its shape inference refuses a graph TFLite accepts), the exact kernels run it
        and a warning says so."""
        from ..backends.openvino import OpenVinoEngine

        engine = self.engines.get("openvino") or OpenVinoEngine()
        executable = engine.compile(self.model, partition.op_range(), self.engine_settings, self.cache,
                                              self.cache_key)
        unit = _OpenVinoUnit(executable, lambda: self._exact_unit(partition))
        try:
            executable.prepare()
        except EngineCompileError as e:
            unit.fall_back(e)
        return unit

    def _iree_unit(self, partition: Partition) -> Any:
        """The partition on IREE's GPU, traced over the host weights of the CPU state (shared with the CPU's XLA
        partitions; IREE uploads them to its device once).  Compiled at its first run, once per input shapes."""
        from ..backends.iree import IreeEngine

        engine = self.engines.get("iree") or self.engines.setdefault(
            "iree", IreeEngine(dataclasses.replace(self.engine_settings, precision=self.precision or "fp32")))
        executable = engine.compile(self.model, partition.op_range(), engine.settings, self.cache, self.cache_key,
                                    host_state=self.state("cpu"))
        return _IreeUnit(executable, lambda: self._gpu_ops_on_the_cpu(partition))

    def _gpu_ops_on_the_cpu(self, partition: Partition) -> Any:
        """What runs a GPU partition that IREE cannot compile: the same program (the GPU's op rules) on XLA's
        CPU."""
        return self.unit(dataclasses.replace(partition, accelerator=CPU, target=Target.XLA_GPU))

    def _litert_unit(self, partition: Partition) -> Any:
        """The partition on the official interpreter: an entry subgraph on the model's one interpreter, a part of
        one (a split plan) as a sub-model."""
        from ..backends.litert import LiteRtEngine

        engine = self.engines.get("litert") or self.engines.setdefault("litert", LiteRtEngine(self.engine_settings))
        executable = engine.compile(self.model, partition.op_range(), self.engine_settings)
        return _LiteRtUnit(executable, lambda: self.unit(dataclasses.replace(partition, target=Target.XLA_CPU)).backend,
                           self.model)

    def _exact_unit(self, partition: Partition) -> Any:
        """What runs an OpenVINO partition that OpenVINO cannot compile: XLA, or numpy where XLA refuses an op."""
        from ..backends.registry import engine

        op_range = partition.op_range()
        if engine("xla").unsupported(self.model, partition.subgraph_index, op_range.op_indices):
            return _ReferenceUnit(self.reference, partition)
        return self.unit(dataclasses.replace(partition, target=Target.XLA_CPU))

    def signature(self, subgraph: int) -> "PartitionedSignature":
        if subgraph not in self._signatures:
            self._signatures[subgraph] = PartitionedSignature(self, subgraph)
        return self._signatures[subgraph]

    def run(self, inputs: Sequence[Any], subgraph: int = 0) -> list[Any]:
        return self.signature(subgraph).run(inputs)

    @property
    def variables(self) -> dict:
        return {}

    @variables.setter
    def variables(self, value: dict) -> None:
        """Assigning resets every backend's variables (``CompiledModel.reset_all_variables``)."""
        for state in self._states.values():
            state.variables = dict(value)
        if "litert" in self.engines:
            self.engines["litert"].reset_variables()
        if "iree" in self.engines:
            self.engines["iree"].reset_variables()
        if self._reference is not None:
            self._reference.variables.clear()


class PartitionedSignature:
    """One subgraph under a split plan, with the interface of ``XlaBackend`` (run, output_shapes)."""

    def __init__(self, owner: PartitionedModel, subgraph: int):
        self.owner = owner
        self.subgraph_index = subgraph
        self.subgraph = owner.model.subgraphs[subgraph]
        parts = owner.plan.partitions_of(subgraph)
        if not parts and self.subgraph.operators:
            raise ModelExecutionError(f"{owner.model.source}: the delegation plan has no partition for "
                                      f"subgraph {subgraph}")
        self.units = [owner.unit(p) for p in parts]
        self.transfers = 0  # tensors the last run moved between host and devices
        self._direct = self._direct_positions()

    def _direct_positions(self) -> tuple[list[int] | None, list[int] | None] | None:
        """For one host unit running the whole subgraph: where its inputs sit among the subgraph's and where
        the subgraph's outputs sit among its outputs (a run then skips the per-tensor bookkeeping, which is
        most of a call on a model that runs in microseconds); None otherwise."""
        if len(self.units) != 1 or self.units[0].where != HOST:
            return None
        op_range, sg = self.units[0].op_range, self.subgraph
        if set(op_range.inputs) != set(sg.inputs) or not set(sg.outputs) <= set(op_range.outputs):
            return None
        taken = [list(sg.inputs).index(t) for t in op_range.inputs]
        given = [list(op_range.outputs).index(t) for t in sg.outputs]
        # None: already in order (the usual case), no reordering per call
        return (None if taken == list(range(len(sg.inputs))) else taken,
                None if given == list(range(len(op_range.outputs))) else given)

    def whole_executable(self) -> Any:
        """The engine's executable when one host unit runs the whole subgraph, inputs and outputs in the
        subgraph's order (what ``straight_run`` calls); None otherwise."""
        if self._direct != (None, None):
            return None
        return getattr(self.units[0], "executable", None)

    def straight_run(self) -> Callable[[Sequence[np.ndarray]], list[np.ndarray]] | None:
        """What ``run`` comes down to when one host unit that takes numpy arrays as they are
        (``run_arrays``: the official interpreter) runs the whole subgraph, inputs and outputs in the
        subgraph's order: that unit's own call, for a caller that has checked the inputs' dtypes and shapes
        (``CompiledModel``'s straight path; ``transfers`` counts the runs through ``run`` only).  None
        otherwise."""
        if self._direct != (None, None):
            return None
        return getattr(self.units[0], "run_arrays", None)

    def run(self, inputs: Sequence[Any]) -> list[Any]:
        sg = self.subgraph
        if len(inputs) != len(sg.inputs):
            raise ModelExecutionError(f"subgraph {sg.index} takes {len(sg.inputs)} inputs, got {len(inputs)}")
        if self._direct is not None:
            taken, given = self._direct
            args = list(inputs) if taken is None else [inputs[k] for k in taken]
            if all(type(x) is np.ndarray for x in args):
                self.transfers = 0
            else:
                self.transfers = sum(map(_is_device_array, args))
                args = [np.asarray(x) for x in args]
            results = self.units[0].run(args)
            return results if given is None else [results[k] for k in given]
        values: dict[int, Any] = dict(zip(sg.inputs, inputs))
        placed: dict[tuple[int, str], Any] = {}
        self.transfers = 0
        for unit in self.units:
            args = [self._placed(values, placed, t, unit.where) for t in unit.op_range.inputs]
            values.update(zip(unit.op_range.outputs, unit.run(args)))
        return [self._result(values, t) for t in sg.outputs]

    def _placed(self, values: dict[int, Any], placed: dict[tuple[int, str], Any], t: int, where: str) -> Any:
        """Tensor ``t`` on device ``where``, moved there at most once per run."""
        key = (t, where)
        if key not in placed:
            value = values[t]
            if where == HOST:
                self.transfers += _on_a_device(value)
                placed[key] = np.asarray(value)
            elif where == IREE:  # IREE's executable keeps its own arrays on its device and uploads the rest
                self.transfers += not _is_iree_array(value)
                placed[key] = value if _is_iree_array(value) else np.asarray(value)
            else:
                from ..backends.xla import jax_module

                device = self.owner.state(where).device
                if not (_is_device_array(value) and device in value.devices()):
                    self.transfers += 1
                    value = jax_module().device_put(value if _is_device_array(value) else np.asarray(value), device)
                placed[key] = value
        return placed[key]

    def _result(self, values: dict[int, Any], t: int) -> Any:
        if t in values:
            return values[t]
        tensor = self.subgraph.tensors[t]
        if tensor.data is not None:
            return tensor.data
        return np.zeros(tensor.shape, ir.numpy_dtype(tensor.dtype))

    def output_shapes(self, input_shapes: Any) -> list[tuple[tuple[int, ...], Any]] | None:
        """Output (shape, dtype) for these input (shape, dtype) when one unit runs the whole subgraph and can
        tell; None means the declared shapes (data-dependent partitions cannot be traced ahead of a run)."""
        if len(self.units) != 1 or not hasattr(self.units[0], "output_shapes"):
            return None
        unit, sg = self.units[0], self.subgraph
        if set(unit.op_range.inputs) != set(sg.inputs) or not set(sg.outputs) <= set(unit.op_range.outputs):
            return None
        given = dict(zip(sg.inputs, input_shapes))
        shapes = unit.output_shapes([given[t][0] for t in unit.op_range.inputs])
        if shapes is None:
            return None
        produced = dict(zip(unit.op_range.outputs, shapes))
        return [produced[t] for t in sg.outputs]

    def reset_variables(self) -> None:
        self.owner.variables = {}


def _is_iree_array(value: Any) -> bool:
    """A result left on IREE's device (``backends.iree.IreeArray``), without importing IREE when nobody has."""
    return type(value).__name__ == "IreeArray" and type(value).__module__.endswith("backends.iree")


def _on_a_device(value: Any) -> bool:
    return _is_device_array(value) or _is_iree_array(value)
