"""Running a split delegation plan: each partition on its own engine, boundary tensors moved once.

Every partition is compiled by the engine the plan names (XLA, the numpy reference, the official interpreter,
OpenVINO, IREE...: ``backends.registry``) through the engine interface (``backends.engine``): its executable runs,
says where its outputs live (``where``), places inputs on its own device, and the engine names the kernels that
take over a partition it turns out unable to compile (``Engine.fallback``); the runtime names no engine.  The
engines hold what the partitions of the model share: XLA the model's weights on each device (one state per
platform, ``Engine.weights``), which IREE reads its GPU's weights from; the reference the model's numpy runner.
Between partitions, a tensor is placed on the next partition's device (``device_put``, a host copy for numpy, an
engine's own upload) the first time a partition there needs it, and that placed copy is reused by every later
partition on the same device in the run.

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
from ..backends.engine import HOST, SubgraphProgram
from ..errors import EngineCompileError, ModelExecutionError
from ..ops import Target
from .tensor_buffer import _is_device_array, _is_engine_device_array

DEFAULT_PLATFORMS = {GPU: "gpu", CPU: "cpu"}


class _EngineUnit:
    """A partition compiled by an engine through the engine interface (``backends.engine``): XLA, the numpy
    reference, the official interpreter, OpenVINO, IREE, or whichever engine the registry names.  An engine with a
    ``fallback`` hands the partition to those kernels, with a warning, the first time it cannot compile it
    (``prepare``, a run, or a new input shape); one without runs as its executable does, with no layer of our own
    (a call of a model that runs in microseconds).  Output shapes the executable cannot tell come from tracing the
    ops under XLA (no compile, no run)."""

    def __init__(self, executable: Any, engine: Any, fallback: Callable[[], Any] | None,
                 traced: Callable[[], Any]):
        self.executable, self.op_range, self.where = executable, executable.op_range, executable.where
        self.name, self.instead = engine.name, engine.fallback_words
        self._fallback_unit, self._traced = fallback, traced
        self.fallback: Any = None
        if fallback is None:
            self.run = executable.run
            self.run_arrays = getattr(executable, "run_arrays", None)  # numpy arrays as they are: the straight path

    @property
    def engine(self) -> str:
        return self.name if self.fallback is None else self.fallback.engine

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
        traced = self._traced()
        return None if traced is None else traced.output_shapes(input_shapes)


class PartitionedModel:
    """The engines of one model under a split plan and its compiled partitions, shared by all signatures (the
    engines hold the weights per device)."""

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
        self.cache, self.cache_key = cache, dict(cache_key or {})
        # what the engines that keep the weights on a device are made with: the device of a platform, the devices
        # its weights are split over (the accelerator's; CPU partitions stay on the host), the float order
        self._context = {"device": device, "devices": dict(devices or {}),
                         "official_float_order": official_float_order}
        self._signatures: dict[int, PartitionedSignature] = {}

    def placement_report(self, platform: str) -> Any:
        """How the accelerator's weights sit on its device: the uploads of an engine of the plan that keeps
        weights on a device of its own (IREE's GPU partitions), else the exact kernels' weights on ``platform``."""
        for name in dict.fromkeys(p.engine for p in self.plan.partitions):
            report = self.engines[name].placement_report() if name in self.engines else None
            if report is not None:
                return report
        return self.weights(platform).placement_report()

    def weights(self, platform: str) -> Any:
        """The model's weights and variables on ``platform`` as the exact kernels' engine holds them (made on first
        use): the CPU's XLA partitions run over them, and IREE uploads its GPU's from the host's."""
        return self._engine_named(registry.name_of(Target.XLA_CPU)).weights(self.model, platform)

    def unit(self, partition: Partition) -> Any:
        """What runs ``partition``: the executable of the engine that the plan names, placed on the partition's
        device with its op rules."""
        engine = self.engine(partition)
        platform = self.platforms[int(partition.accelerator)]
        settings = engine.settings if partition.accelerator == GPU else self.engine_settings
        extra = {"host_state": self.weights("cpu")} if engine.shares_host_state else {}
        executable = engine.placed(platform, partition.target).compile(
            self.model, partition.op_range(), settings, self.cache, self.cache_key, **extra)
        fallback = None if engine.fallback is None else (lambda: self._fallback_unit(partition, engine.fallback))
        unit = _EngineUnit(executable, engine, fallback, lambda: self._traced(partition))
        if fallback is not None:
            try:
                executable.prepare()
            except EngineCompileError as e:
                unit.fall_back(e)
        return unit

    def _traced(self, partition: Partition) -> Any:
        """The partition's ops traced by the exact kernels on the CPU: the output shapes an engine cannot tell;
        None where those kernels refuse one of its ops (the declared shapes then)."""
        from ..backends.engine import op_reasons

        if op_reasons(self.model, partition.subgraph_index, partition.op_indices, Target.XLA_CPU):
            return None
        moved = dataclasses.replace(partition, accelerator=CPU, target=Target.XLA_CPU, engine="")
        return self.engine(moved).placed("cpu", Target.XLA_CPU).compile(
            self.model, moved.op_range(), self.engine_settings, self.cache, self.cache_key)

    def engine(self, partition: Partition) -> Any:
        """The engine of ``partition``: the one the plan asked (it holds what it compiled while planning), else
        a new one from the registry, made with the settings of the partition's device."""
        return self._engine_named(partition.engine, partition.accelerator == GPU)

    def _engine_named(self, name: str, gpu: bool = False) -> Any:
        if name not in self.engines:
            self.engines[name] = registry.engine(name, self._gpu_settings() if gpu else self._cpu_settings(name),
                                                 **self._context)
        return self.engines[name]

    def _gpu_settings(self) -> Any:
        return dataclasses.replace(self.engine_settings, precision=self.precision or "fp32")

    def _cpu_settings(self, name: str) -> Any:
        """A CPU engine's settings: the model's CPU settings, with the model's precision for an engine that holds
        the weights of every device in one state (``EngineInfo.one_weight_precision``: XLA's weights are stored
        once, in the model's precision)."""
        return self._gpu_settings() if registry.info(name).one_weight_precision else self.engine_settings

    def _fallback_unit(self, partition: Partition, target: Target) -> Any:
        """What runs a partition that its engine cannot compile: the same ops on the CPU, by XLA with the op
        rules of ``target`` (the exact kernels; a GPU partition keeps the GPU's), or numpy where XLA refuses one."""
        from ..backends.engine import op_reasons

        if op_reasons(self.model, partition.subgraph_index, partition.op_indices, target):
            target = Target.REFERENCE
        return self.unit(dataclasses.replace(partition, accelerator=CPU, target=target, engine=""))

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
        """Assigning resets every engine's variables (``CompiledModel.reset_all_variables``)."""
        for engine in self.engines.values():
            engine.reset_variables()


class PartitionedSignature(SubgraphProgram):
    """One subgraph under a split plan, as a program of the whole subgraph (``SubgraphProgram``)."""

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

    def whole_executable(self, any_order: bool = False) -> Any:
        """The engine's executable when one host unit runs the whole subgraph, inputs and outputs in the
        subgraph's order (what ``straight_run`` calls; ``any_order``: or in another order); None otherwise."""
        if self._direct is None or (not any_order and self._direct != (None, None)):
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
