"""Running a split delegation plan: each partition on its own backend, boundary tensors moved once.

The runtime keeps the model's own kernels: a partition on an XLA target is one ``jax.jit`` program over its op
range (``XlaBackend`` with ``op_range``) over the model's device weights (one ``XlaState`` per platform), compiled
per input shape like a whole model; a REFERENCE partition runs its ops with the numpy kernels.  Any other partition
is compiled by the engine the plan names (the official interpreter, OpenVINO, IREE...: ``backends.registry``)
through the engine interface (``backends.engine``): its executable runs, says where its outputs live (``where``),
places inputs on its own device, and the engine names the kernels that take over a partition it turns out unable
to compile (``Engine.fallback``); the runtime names no engine.  Between partitions, a tensor is placed on the next
partition's device (``device_put``, a host copy for numpy, an engine's own upload) the first time a partition
there needs it, and that placed copy is reused by every later partition on the same device in the run.

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
from ..backends import registry
from ..compile import CPU, GPU, DelegationPlan, Partition
from ..backends.engine import HOST
from ..errors import EngineCompileError, ModelExecutionError
from ..ops import Target
from .tensor_buffer import _is_device_array, _is_engine_device_array

DEFAULT_PLATFORMS = {GPU: "gpu", CPU: "cpu"}


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

    def place(self, value: Any) -> tuple[Any, bool]:
        """``value`` as this partition's program takes it, and whether it crosses to its device.  Host values
        (and arrays on a CPU device, read in place) go to the program as numpy: the call copies all of them to
        the device in one batched transfer (``XlaBackend._place``) where a ``device_put`` each cost a crossing
        each (150-250 us on an H200, BENCHMARKS.md).  Arrays on another accelerator are moved here."""
        device = self.backend.state.device
        if not _is_device_array(value):
            return np.asarray(value), True
        if device in value.devices():
            return value, False
        if all(d.platform == "cpu" for d in value.devices()):
            return np.asarray(value), True
        from ..backends.xla.device import jax_module

        return jax_module().device_put(value, device), True


class _EngineUnit:
    """A partition compiled by an engine through the engine interface (``backends.engine``): the official
    interpreter, OpenVINO, IREE, or whichever engine the registry names.  An engine with a ``fallback`` hands
    the partition to those kernels, with a warning, the first time it cannot compile it (``prepare``, a run, or
    a new input shape); one without runs as its executable does, with no layer of our own (a call of a model
    that runs in microseconds).  Output shapes the executable cannot tell come from tracing the ops under XLA
    (no compile, no run)."""

    def __init__(self, executable: Any, engine: Any, fallback: Callable[[], Any] | None,
                 traced: Callable[[], Any], model: ir.Model):
        self.executable, self.op_range, self.where = executable, executable.op_range, executable.where
        self.name, self.instead = engine.name, engine.fallback_words
        self._fallback_unit, self._traced, self.model = fallback, traced, model
        self.fallback: Any = None
        if fallback is None:
            self.run = executable.run
            self.run_arrays = getattr(executable, "run_arrays", None)  # numpy arrays as they are: the straight path

    @property
    def engine(self) -> str:
        return self.name if self.fallback is None else getattr(self.fallback, "engine", "xla")

    def fall_back(self, error: Exception) -> None:
        warnings.warn(f"{error}; this partition runs on {self.instead} instead", RuntimeWarning, stacklevel=3)
        self.fallback = self._fallback_unit()

    def run(self, inputs: Sequence[Any]) -> list[Any]:
        if self.fallback is None:
            try:
                return self.executable.run(inputs)
            except EngineCompileError as e:
                self.fall_back(e)
        return self.fallback.run(inputs)

    def place(self, value: Any) -> tuple[Any, bool]:
        return self.executable.place(value)

    def output_shapes(self, input_shapes: Sequence[Sequence[int]]) -> list[tuple[tuple[int, ...], Any]] | None:
        if self.fallback is not None:
            return None
        try:
            found = self.executable.output_shapes(input_shapes)
        except EngineCompileError as e:
            if self._fallback_unit is None:
                raise
            self.fall_back(e)
            return None
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
                 devices: Mapping[str, Any] | None = None, official_float_order: bool = False):
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
        self.official_float_order = official_float_order  # XLA's float ops in the builtin kernels' order
        self._reference: Any = None
        self._signatures: dict[int, PartitionedSignature] = {}

    def placement_report(self, platform: str) -> Any:
        """How the accelerator's weights sit on its device: the uploads of an engine of the plan that keeps
        weights on a device of its own (IREE's GPU partitions), else the XLA state's of ``platform``."""
        for name in dict.fromkeys(p.engine for p in self.plan.partitions):
            report = self.engines[name].placement_report() if name in self.engines else None
            if report is not None:
                return report
        return self.state(platform).placement_report()

    def state(self, platform: str) -> Any:
        """Device weights and variables for one JAX platform (created on first use)."""
        if platform not in self._states:
            from ..backends.xla.backend import XlaBackend
            from ..backends.xla.state import XlaState
            from ..backends.xla.device import device_for

            device = (self._device or device_for)(platform)
            self._states[platform] = XlaState(self.model, device, XlaBackend.storage_dtype(self.precision),
                                              devices=self._devices.get(platform), platform=platform,
                                              official_float_order=self.official_float_order)
        return self._states[platform]

    @property
    def reference(self) -> Any:
        if self._reference is None:
            from ..backends.graph import GraphRunner

            self._reference = GraphRunner(self.model, Target.REFERENCE)
        return self._reference

    def unit(self, partition: Partition) -> Any:
        """What runs ``partition``: the runtime's own numpy runner or XLA program over the model's device weights,
        or the executable of the engine that the plan names."""
        if not registry.info(partition.engine).runtime_owned:
            return self._engine_unit(partition)
        if partition.target is Target.REFERENCE:
            return _ReferenceUnit(self.reference, partition)
        return _XlaUnit(self._xla_backend(partition))

    def _xla_backend(self, partition: Partition) -> Any:
        from ..backends.xla.backend import XlaBackend

        platform = self.platforms[int(partition.accelerator)]
        backend = XlaBackend(self.model, partition.subgraph_index, platform, precision=self.precision,
                             state=self.state(platform), cache=self.cache, cache_key=self.cache_key,
                             op_range=partition.op_range())
        # The partition's target picks the kernels' rules (GPU), the platform only where they execute.
        backend.target = partition.target
        return backend

    def engine(self, partition: Partition) -> Any:
        """The engine of ``partition``: the one the plan asked (it holds what it compiled while planning), else
        a new one from the registry, made with the settings of the partition's device."""
        name = partition.engine
        if name not in self.engines:
            self.engines[name] = registry.engine(name, self._gpu_settings() if partition.accelerator == GPU
                                                 else self.engine_settings)
        return self.engines[name]

    def _gpu_settings(self) -> Any:
        return dataclasses.replace(self.engine_settings, precision=self.precision or "fp32")

    def _engine_unit(self, partition: Partition) -> Any:
        """The partition compiled by its engine: a GPU engine with its own settings, a CPU one with the model's
        CPU settings; an engine that uploads the host weights itself (IREE) reads them from the model's CPU state,
        shared with the CPU's XLA partitions."""
        engine = self.engine(partition)
        settings = engine.settings if partition.accelerator == GPU else self.engine_settings
        extra = {"host_state": self.state("cpu")} if engine.shares_host_state else {}
        executable = engine.compile(self.model, partition.op_range(), settings, self.cache, self.cache_key, **extra)
        fallback = None if engine.fallback is None else (lambda: self._fallback_unit(partition, engine.fallback))
        unit = _EngineUnit(executable, engine, fallback, lambda: self._xla_backend(dataclasses.replace(
            partition, accelerator=CPU, target=Target.XLA_CPU, engine="")), self.model)
        if fallback is not None:
            try:
                executable.prepare()
            except EngineCompileError as e:
                unit.fall_back(e)
        return unit

    def _fallback_unit(self, partition: Partition, target: Target) -> Any:
        """What runs a partition that its engine cannot compile: the same ops on the CPU, by XLA with the op
        rules of ``target`` (the exact kernels; a GPU partition keeps the GPU's), or numpy where XLA refuses one."""
        from ..backends.engine import op_reasons

        moved = dataclasses.replace(partition, accelerator=CPU, target=target, engine="")
        if op_reasons(self.model, partition.subgraph_index, partition.op_indices, target):
            return _ReferenceUnit(self.reference, moved)
        return self.unit(moved)

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
        for engine in self.engines.values():
            engine.reset_variables()
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
            args = [self._placed(values, placed, t, unit) for t in unit.op_range.inputs]
            values.update(zip(unit.op_range.outputs, unit.run(args)))
        return [self._result(values, t) for t in sg.outputs]

    def _placed(self, values: dict[int, Any], placed: dict[tuple[int, str], Any], t: int, unit: Any) -> Any:
        """Tensor ``t`` where ``unit`` takes it (``unit.where``), moved there at most once per run: on the host a
        numpy array; elsewhere as the unit places it (a JAX device, an engine's own device)."""
        key = (t, unit.where)
        if key not in placed:
            value = values[t]
            if unit.where == HOST:
                self.transfers += _on_a_device(value)
                placed[key] = np.asarray(value)
            else:
                placed[key], moved = unit.place(value)
                self.transfers += moved
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


def _on_a_device(value: Any) -> bool:
    return _is_device_array(value) or _is_engine_device_array(value)
