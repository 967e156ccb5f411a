"""CompiledModel: the main API, following ``ai_edge_litert.compiled_model`` name for name.

    model = CompiledModel.from_file("m.tflite", hardware_accel=HardwareAccelerator.GPU | HardwareAccelerator.CPU)
    inputs, outputs = model.create_input_buffers(0), model.create_output_buffers(0)
    inputs[0].write(x)
    model.run_by_index(0, inputs, outputs)          # or: event = model.run_async(0, inputs, outputs)
    y = outputs[0].read()
    y = model(x)                                    # quick form: numpy (or torch, cupy, jax) in, numpy out

Each signature is lowered to one ``jax.jit`` program when it first runs and
compiled again, and cached, for each new input shape.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import math
import os
import threading
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import ir
from ..backends import registry
from ..errors import (AcceleratorUnavailableError, ClosedError, InvalidArgumentError, SignatureError,
                      TensorBufferError)
from ..ir import numpy_dtype
from ..ops import Target
from .environment import Environment
from .event import Event
from .model import Model, SignatureInfo, read, signatures_of
from .options import HardwareAccelerator, Options, resolve_options
from .tensor_buffer import TensorBuffer, as_array
from . import warm_start
from .._lazy import LazyLogger
from .engine_choice import CountedBackend, DeferredChoice, uncounted

logger = LazyLogger(__name__)

if TYPE_CHECKING:
    from ..compile import DelegationPlan

HOST_MEMORY_BUFFER_TYPE = 1  # kLiteRtTensorBufferTypeHostMemory, what the official requirements report


def _dtype_name(t: ir.Tensor) -> str:
    return _numpy_name(t.dtype)


@functools.lru_cache(maxsize=None)
def _numpy_name(dtype: str) -> str:
    """numpy's name of an IR dtype, once per dtype: the tensor details a generate call reads cost a
    millisecond when each asked numpy again."""
    try:
        return np.dtype(numpy_dtype(dtype)).name
    except Exception:
        return dtype


class _StraightPath:
    """A signature that one host engine runs whole, taking numpy arrays as they are (the official interpreter,
    on the models that run in microseconds): the call checks each input's type, dtype and shape and hands the
    arrays straight to the engine, in two or three Python frames instead of a dozen (issue 26: litegpu's call
    within 3 us of the official interpreter's own; ``bench/cpu/call_cost.py``).  Anything else (another dtype or
    shape, a TensorBuffer a run has yet to fill, a device array) takes the general path, which converts,
    checks in detail and says what is wrong.  ``shapes`` is the model's live list of the signature's input
    shapes, so a resize is seen at once."""

    __slots__ = ("run", "dtypes", "shapes", "input_names", "output_names", "output_dtypes")

    def __init__(self, run: Any, dtypes: Sequence[np.dtype], shapes: list, input_names: Sequence[str],
                 output_names: Sequence[str], output_dtypes: Sequence[np.dtype]):
        self.run, self.dtypes, self.shapes = run, tuple(dtypes), shapes
        self.input_names, self.output_names = tuple(input_names), tuple(output_names)
        self.output_dtypes = tuple(output_dtypes)

    def takes(self, arrays: Sequence[Any]) -> bool:
        """Whether ``arrays`` (signature order) are numpy arrays of the inputs' dtypes and current shapes."""
        if len(arrays) != len(self.dtypes):
            return False
        for x, dtype, shape in zip(arrays, self.dtypes, self.shapes):
            if type(x) is not np.ndarray or x.dtype != dtype or x.shape != shape:
                return False
        return True

    def arrays_of(self, buffers: Sequence[Any], outputs: Sequence[Any]) -> list[np.ndarray] | None:
        """The host arrays of input ``buffers`` when each holds one ready to read as it is, and the output
        buffers are TensorBuffers of the outputs' dtypes that the results may replace; else None."""
        if type(buffers) is not list and type(buffers) is not tuple or len(buffers) != len(self.dtypes):
            return None
        if type(outputs) is not list and type(outputs) is not tuple or len(outputs) != len(self.output_dtypes):
            return None
        for b, dtype in zip(outputs, self.output_dtypes):
            if type(b) is not TensorBuffer or b._dtype != dtype or not b._owns_host_memory:
                return None
        arrays = []
        for b, dtype, shape in zip(buffers, self.dtypes, self.shapes):
            # host data no run still has to deliver (no event, nothing pending), read in place: a method call
            # per input would be a tenth of a microsecond each here
            if type(b) is not TensorBuffer or b.event is not None or b._pending is not None or b._closed:
                return None
            array = b._array
            if type(array) is not np.ndarray or array.dtype != dtype or array.shape != shape:
                return None
            arrays.append(array)
        return arrays


def _in_signature_order(by_name: Mapping[str, Any], names: Sequence[str], what: str) -> list[Any]:
    """A name -> value map as a list in signature order; unknown or missing names are an error."""
    unknown = [k for k in by_name if k not in names]
    missing = [n for n in names if n not in by_name]
    if unknown or missing:
        problems = ([f"unknown: {unknown}"] if unknown else []) + ([f"missing: {missing}"] if missing else [])
        raise SignatureError(f"{what} {list(names)}; {'; '.join(problems)}")
    return [by_name[n] for n in names]


def litegpu_version() -> str:
    """The package's ``__version__`` (pyproject's version; a test keeps them equal), read without
    ``importlib.metadata``, whose import and scan of the installed packages cost a warm start 10-40 ms."""
    from ..version import __version__

    return __version__


@functools.lru_cache(maxsize=1)
def litegpu_code_fingerprint(package_dir: str | None = None) -> str:
    """A hash of the path, size and modification time of every source file of the package: a source checkout
    (an editable install) changes its code without changing its version, and a program cached by other code
    must not be run.  Stat calls only (``os.scandir``, under a millisecond for the whole package; xxh3, whose
    module the cache has imported, rather than ``hashlib``'s, whose import alone cost a warm start 3 ms), once per
    process."""
    import xxhash

    root = package_dir or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parts: list[str] = []

    def visit(folder: str, relative: str) -> None:
        with os.scandir(folder) as found:
            for entry in sorted(found, key=lambda e: e.name):
                if entry.is_dir(follow_symlinks=False):
                    if entry.name != "__pycache__":
                        visit(entry.path, f"{relative}{entry.name}/")
                elif entry.name.endswith((".py", ".fbs")):
                    info = entry.stat()
                    parts.append(f"{relative}{entry.name}:{info.st_size}:{info.st_mtime_ns};")

    visit(root, "")
    return xxhash.xxh3_64_hexdigest("".join(parts).encode())


def _model_fingerprint(model: ir.Model) -> str:
    """The default model token: a hash of the file's bytes (streamed over a memory map)."""
    from ..backends.cache import fingerprint

    if model.source and os.path.isfile(model.source):
        return warm_start.file_fingerprint(model.source)
    from ..format import file_format
    from ..ir.save import to_bytes

    return fingerprint(to_bytes(model, file_format(model.file_format)))


def _same_partitions(a: DelegationPlan, b: DelegationPlan) -> bool:
    """Whether two plans run the same ops on the same engines."""
    return [(p.subgraph_index, p.op_indices, p.engine) for p in a.partitions] == \
        [(p.subgraph_index, p.op_indices, p.engine) for p in b.partitions]


def open_cache(options: Options) -> Any:
    """The compile cache ``options`` ask for: the directory they name, else the default one
    (``backends.cache.default_cache_dir``); None where it is off."""
    if not options.compile_cache:
        return None
    from ..backends.cache import CompileCache, open_default_cache

    named = options.cache_dir
    return CompileCache(named) if named else open_default_cache()


def model_cache_key(model: ir.Model, token: str | None = None) -> dict:
    """What every cache entry of ``model`` is keyed by: its token (default: its bytes' fingerprint), litegpu's
    version and its code's fingerprint."""
    return {"model_token": token or _model_fingerprint(model), "litegpu": litegpu_version(),
            "litegpu_code": litegpu_code_fingerprint()}


class CompiledModel:
    """A model compiled for one accelerator, with one program per signature.

    Thread safety: one CompiledModel may be run from several threads.  What is
    shared: the weights on the device, the resource variables (all signatures
    of one model share them, as in TFLite), the compile cache and the resized
    input shapes.  One lock serialises the part of a run that touches them
    (checking inputs, compiling on a new shape, dispatching the program and
    storing the new variables); the computation itself runs outside the lock,
    asynchronously.  Runs that update variables therefore see each other's
    updates in the order they took the lock.  TensorBuffers are not copied:
    do not write a buffer from one thread while another run reads it.
    """

    # A warm start (``runtime.warm_start``) has no IR or plan until something asks for them: read then.
    _warm: warm_start.WarmRecord | None = None
    # where a first start of the plain kind records itself for the next, and the model key that record is for
    _warm_key: tuple[str, dict] | None = None
    # the engines' timing still to come (``runtime.engine_choice``): None once the choice is made, or where there
    # was none to make; and the key of the warm-start record of the plan before it (replaced once it is made)
    _deferred: Any = None
    _pending_record_key: str | None = None

    @functools.cached_property
    def _ir(self) -> ir.Model:
        return self._warm.model()

    @functools.cached_property
    def _plan(self) -> DelegationPlan:
        return self._warm.plan(self._xla_ir, self._ir)

    @functools.cached_property
    def _io_subgraphs(self) -> Any:
        """The subgraphs as far as the signatures' tensors go: the IR's, or a warm start's record of them."""
        return self._warm.spec.subgraphs if self._warm is not None else self._ir.subgraphs

    def __init__(self, model: ir.Model | Model, options: Options | None = None,
                 environment: Environment | None = None, *, model_digest: str | None = None):
        self._ir = model.ir if isinstance(model, Model) else model
        self._options = options or Options()
        self._environment = environment or Environment.create()
        self._signatures = signatures_of(self._ir)
        self._lock = threading.RLock()
        self._closed = False
        self._fell_back = False
        self._cache, self._cache_key = self._open_compile_cache(model_digest)
        engine_choice = self._options.resolved_engine_choice
        self._platform, self._plan = self._choose_accelerator(int(self._options.hardware_accelerators),
                                                              engine_choice)
        pending = self._pending_choices()
        if engine_choice == "deferred" and pending is not None:
            self._deferred = DeferredChoice(settle=self._settle_engine_choice, **pending)
        self._devices = self._sharding_devices()
        if self._platform == "gpu" and self._cache is not None:
            # the float view and the integer kernels are different programs
            self._cache_key["quantized_execution"] = self._options.gpu_options.quantized_execution
        self._backends: dict[int, Any] = {}
        # a whole-model plan: the engine that runs each subgraph as one program, and the weights it holds on the
        # device; a plan in parts: the partitions' engines (``partitioned.PartitionedModel``)
        self._whole_engine: Any = None
        self._state: Any = None
        self._input_shapes = [[self._tensor(s, t).shape for _, t in s.inputs] for s in self._signatures]
        self._signature_positions: dict[int, tuple[list[int], list[int]]] = {}
        # signature index and key -> its straight path, once its first run made the backend (``_StraightPath``)
        self._straight: dict[int | str, _StraightPath] = {}

    # ---- creation ---------------------------------------------------------------------------
    @classmethod
    def from_file(cls, model_path: Any, hardware_accel: HardwareAccelerator | int | None = None,
                  environment: Environment | None = None, options: Options | None = None) -> "CompiledModel":
        """Load, verify and prepare a model file; compilation happens on each signature's first run."""
        resolved = resolve_options(options, hardware_accel)
        model_keys: list[dict] = []

        def model_key(token: str) -> dict:
            model_keys.append(model_cache_key(None, token))
            return model_keys[-1]

        record, key = warm_start.find(model_path, resolved, open_cache(resolved) if warm_start.eligible_options(
            resolved) else None, model_key)
        if record is not None:
            return cls._started_warm(record, key, resolved, environment)
        model = cls(read(model_path), resolved, environment)
        model._warm_key = (key, model_keys[-1]) if key is not None else None
        return model

    @classmethod
    def _started_warm(cls, record: warm_start.WarmRecord, key: str, options: Options,
                      environment: Environment | None) -> "CompiledModel":
        """A model started from its warm-start record: what ``__init__`` sets, without the IR or the plan."""
        from .model import SignatureInfo

        self = cls.__new__(cls)
        self._warm, self._options = record, options
        self._environment = environment or Environment.create()
        self._signatures = tuple(SignatureInfo(i, key, sg, inputs, outputs,
                                               warm_start.input_dtypes(record.spec, sg, inputs))
                                 for i, (key, sg, inputs, outputs) in enumerate(record.signatures))
        self._lock = threading.RLock()
        self._closed = self._fell_back = False
        self._cache, self._cache_key = record.cache, record.model_key
        self._platform, self._devices, self._gpu_engine = "cpu", None, None
        self._backends, self._whole_engine = {}, None
        self._state = warm_start.WarmState(record, self)
        self._input_shapes = [[self._tensor(s, t).shape for _, t in s.inputs] for s in self._signatures]
        self._signature_positions, self._straight = {}, {}
        record.executable(self._signatures[0].subgraph)  # the interpreter loads the file now, as a first start's
        if record.choice_pending is not None:
            self._pending_record_key = key
            if options.resolved_engine_choice == "deferred":
                self._deferred = DeferredChoice(settle=self._settle_engine_choice, **record.choice_pending)
        return self

    @classmethod
    def from_buffer(cls, model_data: bytes, hardware_accel: HardwareAccelerator | int | None = None,
                    environment: Environment | None = None, options: Options | None = None) -> "CompiledModel":
        resolved = resolve_options(options, hardware_accel)
        if not isinstance(model_data, (bytes, bytearray, memoryview)):
            raise InvalidArgumentError(f"from_buffer takes the model's bytes, not {type(model_data).__name__}")
        # the cache key from the bytes given: the model written out again would be a second copy of them
        from ..backends.cache import fingerprint

        digest = fingerprint(model_data) if resolved.compile_cache else None
        return cls(read(model_data), resolved, environment, model_digest=digest)

    @classmethod
    def from_model(cls, model: Model | ir.Model, hardware_accel: HardwareAccelerator | int | None = None,
                   environment: Environment | None = None, options: Options | None = None) -> "CompiledModel":
        return cls(model, resolve_options(options, hardware_accel), environment)

    def _choose_accelerator(self, flags: int, engine_choice: str) -> tuple[str, DelegationPlan]:
        from ..compile import CPU, GPU, LOWERED_CACHE_KEY, NPU, plan_model
        from ..compile.choices import AT_LOAD

        if flags & NPU and not flags & (CPU | GPU):
            raise AcceleratorUnavailableError("litegpu has no NPU backend; use HardwareAccelerator.GPU and/or "
                                              "HardwareAccelerator.CPU")
        wanted = flags & (CPU | GPU)
        reasons = ["litegpu has no NPU backend"] if flags & NPU else []
        self._gpu_engine = None
        if wanted & GPU:
            self._gpu_engine, missing = self._find_gpu_engine()
            if missing is not None:
                if not wanted & CPU:
                    raise AcceleratorUnavailableError(
                        f"{self._ir.source}: HardwareAccelerator.GPU was requested, but {missing} "
                        f"(JAX platforms: {', '.join(sorted(self._environment.platforms()))}); use "
                        "HardwareAccelerator.GPU | HardwareAccelerator.CPU to fall back to the CPU")
                wanted = CPU
                reasons.append(missing)
        # One warning for a fallback: what the CPU plan has to say joins it.
        # Planned on what XLA will compile: a rewrite may turn ops XLA refuses into ones it takes.
        self._cpu_engines = self._engines(untimed=engine_choice != AT_LOAD)
        planned = plan_model(self._gpu_planned_ir(), wanted, warn=not reasons,
                             cpu_kernels=self._cpu_kernels(wanted), engines=self._cpu_engines,
                             gpu_engine=self._gpu_engine,
                             lowered_engines=lambda: self._engines({**self._cache_key, **LOWERED_CACHE_KEY}),
                             engine_choice=engine_choice)
        if self._gpu_engine is not None and planned.plan.engine != self._gpu_engine.name:
            # kept on the CPU after all (refused ops in a model with variables): the CPU's exact kernels, not the
            # GPU's float view, which the plan was made on
            self._gpu_engine = None
            self._cpu_engines = self._engines(untimed=engine_choice != AT_LOAD)
            planned = self._cpu_planned(self._cpu_engines, engine_choice)
        chosen, self._planned_ir, self._cpu_engines = planned.plan, planned.model, planned.engines
        if planned.lowered and self._cache is not None:  # its partitions index the lowered model's ops
            self._cache_key = {**self._cache_key, **LOWERED_CACHE_KEY}
        if reasons:
            self._fell_back = True
            notes = "".join(f"; {n}" for n in chosen.notes)
            warnings.warn(f"{self._ir.source}: {'; '.join(reasons)}: the model runs on the CPU{notes}", stacklevel=4)
        # the file's ops are what node data names (``DelegationPlan.node_data``)
        return ("gpu" if chosen.accelerator == "GPU" else "cpu"), \
            dataclasses.replace(chosen, file_model=self._ir)

    def _cpu_planned(self, engines: dict, engine_choice: str) -> Any:
        """The model planned on the CPU alone with ``engines`` (``compile.plan_model``)."""
        from ..compile import CPU, LOWERED_CACHE_KEY, plan_model

        return plan_model(self._xla_ir, CPU, warn=False, cpu_kernels=self._cpu_kernels(CPU), engines=engines,
                          lowered_engines=lambda: self._engines({**self._cache_key, **LOWERED_CACHE_KEY}),
                          engine_choice=engine_choice)

    # ---- the deferred engine choice (runtime.engine_choice) ---------------------------------------
    @property
    def engine_choice_settled(self) -> bool:
        """Whether the plan is final for this process: False while the model runs on the official interpreter
        until its engines are timed (``Options.engine_choice="deferred"``, the default, for a model whose engine
        is not known without timing); ``plan.choice`` says how and when the choice was made.  A benchmark of the
        steady state measures once this is True (``settle_engine_choice`` gets it there at once)."""
        return self._deferred is None

    def settle_engine_choice(self) -> None:
        """Time the engines now where the choice is still to be made (the plan may change engine); else nothing."""
        self._settle_engine_choice()

    def _settle_engine_choice(self) -> None:
        """The deferred timing, between two calls under the model's lock: the engines planned and timed as a
        load-time timing would (the verdict kept in the compile cache; a process timing the same model waits for
        it and reads it), and the model moved to the plan that comes out where it differs."""
        with self._lock:
            deferred, self._deferred = self._deferred, None
            if deferred is None or self._closed:
                return
            from ..compile.choices import AT_LOAD, TIMED
            from ..errors import LiteGpuError

            old = self._plan  # a warm start reads the IR and its plan here
            self._replace_pending_record()
            try:
                planned = self._cpu_planned(self._engines(), AT_LOAD)
            except LiteGpuError as e:  # the official interpreter, which ran every call so far, keeps the model
                logger.warning("%s: the engines could not be timed (%s): the official interpreter keeps it",
                               self._ir.source, e)
                self._plan = dataclasses.replace(old, choice=f"the official interpreter: the timing {deferred.when()} "
                                                 f"failed ({e})", choice_settled=True)
                self._stop_counting()
                return
            new = planned.plan
            if deferred.engines:
                choice = f"timed {deferred.when()}" if new.choice == TIMED else f"{new.choice} (found {deferred.when()})"
            else:
                choice = f"{new.choice}; its thread count timed {deferred.when()}"
            logger.info("%s: engine choice %s: %s", self._ir.source, choice, new.engine_summary())
            if not planned.lowered and _same_partitions(old, new) and not deferred.threads:
                self._plan = dataclasses.replace(old, choice=choice, choice_settled=True)
                self._stop_counting()
                return
            self._plan = dataclasses.replace(new, file_model=self._ir, choice=choice, requested=old.requested,
                                             unsupported=old.unsupported,
                                             notes=old.notes + tuple(n for n in new.notes if n not in old.notes))
            self._planned_ir, self._cpu_engines = planned.model, planned.engines
            if planned.lowered and self._cache is not None:
                from ..compile import LOWERED_CACHE_KEY

                self._cache_key = {**self._cache_key, **LOWERED_CACHE_KEY}
            # the next call makes the new plan's programs (and records the start for the next); a call running on
            # the old ones (a straight path runs outside the lock) finishes on them
            self._warm = None
            self._straight.clear()
            self._backends.clear()
            self._state = self._whole_engine = None

    def _pending_choices(self) -> dict | None:
        """What is still to be timed (``DeferredChoice``'s arguments): the engines against each other (the plan's
        choice not settled), an engine's own choice (``Engine.choice_pending``); None: nothing."""
        engines = not self._plan.choice_settled
        threads = any(e.choice_pending for e in (getattr(self, "_cpu_engines", None) or {}).values())
        if not engines and not threads:
            return None
        from ..ir.macs import model_macs

        return {"macs": model_macs(self._planned_ir), "engines": engines, "threads": threads}

    def _replace_pending_record(self) -> None:
        """The warm-start record of the plan before the choice, dropped: the next start that is not warm finds
        the kept verdict, and this model records its plan in its place where it can."""
        key, self._pending_record_key = self._pending_record_key, None
        if key is not None and self._cache is not None:
            self._cache.remove(key)
            self._warm_key = (key, self._cache_key)

    def _stop_counting(self) -> None:
        """The model's backends as they are, no longer counted, their straight paths opened again; the choice
        made, the start is recorded for the next."""
        self._straight.clear()
        for s in self._signatures:
            backend = self._backends.get(s.index)
            if backend is not None:
                self._backends[s.index] = backend = uncounted(backend)
                self._open_straight_path(s, backend)
        first = next(iter(self._backends.values()), None)
        if first is not None and self._warm_key is not None:
            self._remember_warm_start(first)

    def _find_gpu_engine(self) -> tuple[Any, str | None]:
        """(the GPU's engine: None for XLA, else an engine of the registry's, such as IREE's; why there is no GPU,
        or None).  XLA where JAX sees a GPU (CUDA, ROCm), else the next registered GPU engine that has a device
        here (IREE: a Vulkan or Metal GPU); ``GpuOptions.engine`` names one (one named may take a software
        device, as IREE takes a software Vulkan device)."""
        asked = self._options.gpu_options.engine
        jax_gpu = "gpu" in self._environment.platforms()
        xla, *others = registry.named(device="GPU")  # XLA first: the GPU JAX sees
        if asked == xla or (asked is None and jax_gpu):
            return None, None if jax_gpu else "JAX sees no GPU on this machine"
        why = "JAX sees no GPU on this machine"
        for name in [asked] if asked is not None else others:
            engine = registry.engine(name, self._gpu_engine_settings(), allow_software=asked == name,
                                     cache=self._cache, cache_key=self._cache_key)
            if engine.available():
                return engine, None
            missing = f"{registry.title(name)} has no GPU to run on ({engine.unavailable_reason()})"
            why = missing if asked is not None else f"{why} and {missing}"
        return None, why

    def _gpu_engine_settings(self) -> Any:
        from ..backends.engine import EngineSettings

        return EngineSettings(precision=self._options.precision)

    def _gpu_planned_ir(self) -> ir.Model:
        """The model the plan is made on: on IREE's GPU the model as it runs there (a quantized model's float
        view, ``GpuOptions.quantized_execution``), else what XLA compiles.  (A plan that then stays on the CPU is
        made and run on ``_xla_ir``.)"""
        if self._gpu_engine is None:
            return self._xla_ir
        return self._as_run_on("gpu")

    def _cpu_kernels(self, wanted: int) -> str:
        """The CPU kernel mode; weights split over several CPU devices take XLA's kernels (OpenVINO runs
        on one device)."""
        from ..compile import GPU

        kernels = self._options.cpu_options.kernels
        if self._options.devices is not None and not wanted & GPU and kernels == "fast":
            return "builtin"
        return kernels

    def _sharding_devices(self) -> list[Any] | None:
        """The devices the weights are split over (Options.devices), or None for one device."""
        if self._options.devices is None:
            return self._devices_for_big_weights()
        from .batched import resolve_devices

        devices = resolve_devices(self._options.devices, self._platform)
        if devices is not None and len(devices) > 1 and not registry.info(self._plan.engine).many_devices:
            raise InvalidArgumentError(f"{self._ir.source}: devices={self._options.devices!r}: "
                                       f"{registry.title(self._plan.engine)} runs on one CPU; use "
                                       "CpuOptions(kernel_mode=CpuKernelMode.BUILTIN) to split the weights "
                                       "over several devices with XLA")
        return devices if devices is not None and len(devices) > 1 else None

    def _devices_for_big_weights(self) -> list[Any] | None:
        """Weights bigger than one GPU: split over all the GPUs, with a warning saying so."""
        if self._platform != "gpu":
            return None
        from ..backends.sharding import devices_for_weights, estimate
        from ..backends.device_arrays import jax_module

        try:
            gpus = jax_module().devices("gpu")
        except RuntimeError:  # an environment that stands a CPU device in for the GPU (tests)
            return None
        if len(gpus) < 2:
            return None
        weights = estimate(self._ir, 1).replicated_bytes
        devices = devices_for_weights(weights, gpus)
        if devices is not None:
            warnings.warn(f"{self._ir.source}: its weights ({weights / 2**30:.1f} GiB) do not fit one GPU: they are "
                          f"split over {len(devices)} GPUs (Options(devices=...) chooses)", stacklevel=4)
        return devices

    def weight_placement(self) -> Any:
        """How the weights sit on the devices (``backends.sharding.PlacementReport``): what is split along
        which axis, what is replicated, the estimated and the measured bytes per device."""
        with self._lock:
            self._check_open()
            self._backend(self._signatures[0])  # creates the weights on the devices
            if self._whole_engine is None:  # a split plan, or IREE's GPU: the accelerator's weights
                return self._state.placement_report(self._platform)
            return self._state.placement_report() if self._state is not None else None  # the engine's weights

    # ---- properties -------------------------------------------------------------------------
    @property
    def environment(self) -> Environment:
        return self._environment

    @property
    def options(self) -> Options:
        return self._options

    @property
    def model(self) -> ir.Model:
        """The model's IR."""
        return self._ir

    @property
    def plan(self) -> DelegationPlan:
        return self._plan

    @property
    def accelerator(self) -> str:
        """Where the model runs: "GPU" or "CPU"."""
        return self._plan.accelerator

    def is_fully_accelerated(self) -> bool:
        """True when every op runs on the first accelerator asked for (no fallback of any kind)."""
        self._check_open()
        return self._plan.fully_accelerated and not self._fell_back

    # ---- lifetime ---------------------------------------------------------------------------
    def close(self) -> None:
        """Release the compiled programs, weights and variables; later calls raise ClosedError."""
        with self._lock:
            self._closed = True
            self._straight.clear()
            self._backends.clear()
            self._state = self._whole_engine = None

    def __enter__(self) -> "CompiledModel":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"{self._ir.source}: this CompiledModel was closed")

    # ---- signatures -------------------------------------------------------------------------
    def _signature(self, signature: int | str) -> SignatureInfo:
        self._check_open()
        if isinstance(signature, str):
            for s in self._signatures:
                if s.key == signature:
                    return s
            raise SignatureError(f"{self._ir.source}: no signature {signature!r}; the model has "
                                 f"{[s.key for s in self._signatures]}")
        if isinstance(signature, (int, np.integer)) and not isinstance(signature, bool):
            if 0 <= int(signature) < len(self._signatures):
                return self._signatures[int(signature)]
            raise SignatureError(f"{self._ir.source}: signature index {signature} is out of range: the model has "
                                 f"{len(self._signatures)} signature(s) (0..{len(self._signatures) - 1})")
        raise SignatureError(f"a signature is an index or a key, not {type(signature).__name__}")

    def _tensor(self, sig: SignatureInfo, index: int) -> ir.Tensor:
        return self._io_subgraphs[sig.subgraph].tensors[index]

    def get_signature_list(self) -> dict[str, dict[str, list[str]]]:
        self._check_open()
        return {s.key: {"inputs": s.input_names, "outputs": s.output_names} for s in self._signatures}

    def get_signature_by_index(self, index: int) -> dict[str, Any]:
        s = self._signature(index)
        return {"key": s.key, "inputs": s.input_names, "outputs": s.output_names}

    def get_num_signatures(self) -> int:
        self._check_open()
        return len(self._signatures)

    def get_signature_index(self, key: str) -> int:
        """The signature's index, or -1 when there is none with this key (the official behaviour)."""
        self._check_open()
        return next((s.index for s in self._signatures if s.key == key), -1)

    def get_input_tensor_details(self, signature_key: str | int) -> dict[str, dict[str, Any]]:
        s = self._signature(signature_key)
        return {name: self._details(self._tensor(s, t), shape)
                for (name, t), shape in zip(s.inputs, self._input_shapes[s.index])}

    def get_output_tensor_details(self, signature_key: str | int) -> dict[str, dict[str, Any]]:
        s = self._signature(signature_key)
        return {name: self._details(self._tensor(s, t), shape)
                for (name, t), (shape, _) in zip(s.outputs, self._output_specs(s))}

    @staticmethod
    def _details(t: ir.Tensor, shape: Sequence[int]) -> dict[str, Any]:
        return {"name": t.name, "index": t.index, "dtype": _dtype_name(t), "shape": [int(d) for d in shape]}

    def _requirements(self, t: ir.Tensor, shape: Sequence[int]) -> dict[str, Any]:
        return {"buffer_size": math.prod(shape) * np.dtype(numpy_dtype(t.dtype)).itemsize,
                "supported_types": [HOST_MEMORY_BUFFER_TYPE]}

    def get_input_buffer_requirements(self, input_index: int, signature_index: int = 0) -> dict[str, Any]:
        s = self._signature(signature_index)
        i = self._position(s, input_index, "input")
        return self._requirements(self._tensor(s, s.inputs[i][1]), self._input_shapes[s.index][i])

    def get_output_buffer_requirements(self, output_index: int, signature_index: int = 0) -> dict[str, Any]:
        s = self._signature(signature_index)
        i = self._position(s, output_index, "output")
        return self._requirements(self._tensor(s, s.outputs[i][1]), self._output_specs(s)[i][0])

    def _position(self, s: SignatureInfo, index: int, kind: str) -> int:
        items = s.inputs if kind == "input" else s.outputs
        if isinstance(index, (int, np.integer)) and not isinstance(index, bool) and 0 <= int(index) < len(items):
            return int(index)
        raise SignatureError(f"signature {s.key!r} has {len(items)} {kind}(s) ({[n for n, _ in items]}); "
                             f"{kind} index {index!r} is out of range")

    def _named(self, s: SignatureInfo, name: str, kind: str) -> int:
        names = s.input_names if kind == "input" else s.output_names
        if name not in names:
            raise SignatureError(f"signature {s.key!r} has no {kind} {name!r}; its {kind}s are {names}")
        return names.index(name)

    # ---- shapes -----------------------------------------------------------------------------
    def _output_specs(self, s: SignatureInfo) -> list[tuple[tuple[int, ...], np.dtype]]:
        outputs = [self._tensor(s, t) for _, t in s.outputs]
        current = self._input_shapes[s.index]
        declared = [self._tensor(s, t).shape for _, t in s.inputs]
        if list(current) != list(declared):
            sg = self._io_subgraphs[s.subgraph]
            by_tensor = {t: shape for shape, (_, t) in zip(current, s.inputs)}
            inferred = self._backend(s).output_shapes(
                [(by_tensor.get(t, sg.tensors[t].shape), numpy_dtype(sg.tensors[t].dtype)) for t in sg.inputs])
            if inferred is not None:
                produced = dict(zip(sg.outputs, inferred))
                return [produced[t] for _, t in s.outputs]
        return [(t.shape, np.dtype(numpy_dtype(t.dtype))) for t in outputs]

    def resize_input_tensor(self, input_index: int, dims: Sequence[int], signature_index: int | str = 0,
                            strict: bool = True) -> None:
        """Give an input a new shape; the signature compiles again for it (cached per shape).

        ``strict`` (the default, as in the official package) only changes dimensions that are -1 in the
        model's ``shape_signature``; ``strict=False`` accepts any shape, a change of rank included.
        """
        s = self._signature(signature_index)
        i = self._position(s, input_index, "input")
        t = self._tensor(s, s.inputs[i][1])
        dims = self._check_dims(dims, t)
        if strict:
            signature = t.shape_signature if t.shape_signature is not None else t.shape
            if len(dims) != len(signature) or any(sd >= 0 and d != sd for d, sd in zip(dims, signature)):
                raise InvalidArgumentError(
                    f"input {s.inputs[i][0]!r} of signature {s.key!r} has shape signature {list(signature)}: a strict "
                    f"resize may change only the -1 dimensions, so {dims} is refused (pass strict=False to force it)")
        with self._lock:
            self._input_shapes[s.index][i] = tuple(dims)

    def resize_input_tensor_by_name(self, signature_key: str, input_name: str, dims: Sequence[int],
                                    strict: bool = True) -> None:
        s = self._signature(signature_key)
        self.resize_input_tensor(self._named(s, input_name, "input"), dims, s.index, strict)

    @staticmethod
    def _check_dims(dims: Sequence[int], t: ir.Tensor) -> list[int]:
        try:
            values = [int(d) for d in dims]
            if any(v != d for v, d in zip(values, dims)):
                raise ValueError
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"a shape for tensor {t.name!r} is a sequence of ints, got {dims!r}") from None
        if any(d < 0 for d in values):
            raise InvalidArgumentError(f"a shape for tensor {t.name!r} cannot have negative dimensions: {values}")
        return values

    # ---- buffers ----------------------------------------------------------------------------
    def _new_buffer(self, t: ir.Tensor, shape: Sequence[int], name: str) -> TensorBuffer:
        return TensorBuffer(np.zeros(tuple(shape), numpy_dtype(t.dtype)), name=name)

    def create_input_buffers(self, signature_index: int | str = 0) -> list[TensorBuffer]:
        s = self._signature(signature_index)
        return [self._new_buffer(self._tensor(s, t), shape, name)
                for (name, t), shape in zip(s.inputs, self._input_shapes[s.index])]

    def create_output_buffers(self, signature_index: int | str = 0) -> list[TensorBuffer]:
        s = self._signature(signature_index)
        return [self._new_buffer(self._tensor(s, t), shape, name)
                for (name, t), (shape, _) in zip(s.outputs, self._output_specs(s))]

    def create_input_buffer_by_name(self, signature_key: str, input_name: str) -> TensorBuffer:
        s = self._signature(signature_key)
        i = self._named(s, input_name, "input")  # only this one made: a KV cache is megabytes per input
        return self._new_buffer(self._tensor(s, s.inputs[i][1]), self._input_shapes[s.index][i], input_name)

    def create_output_buffer_by_name(self, signature_key: str, output_name: str) -> TensorBuffer:
        s = self._signature(signature_key)
        i = self._named(s, output_name, "output")
        return self._new_buffer(self._tensor(s, s.outputs[i][1]), self._output_specs(s)[i][0], output_name)

    # ---- backends ---------------------------------------------------------------------------
    def _backend(self, s: SignatureInfo) -> Any:
        with self._lock:
            self._check_open()
            backend = self._backends.get(s.index)
            if backend is None:
                backend = self._make_backend(s.subgraph)
                if self._deferred is not None:
                    backend = CountedBackend(backend, self._deferred)
                self._backends[s.index] = backend
                self._open_straight_path(s, backend)
                if self._warm_key is not None:
                    self._remember_warm_start(backend)
            return backend

    def _open_straight_path(self, s: SignatureInfo, backend: Any) -> None:
        """A straight path for signature ``s`` where its backend offers one (``straight_run``) and the
        signature lists the subgraph's inputs and outputs in the subgraph's order (the usual case)."""
        offer = getattr(backend, "straight_run", None)
        run = offer() if offer is not None else None
        if run is None:
            return
        sg = self._io_subgraphs[s.subgraph]
        if [t for _, t in s.inputs] != list(sg.inputs) or [t for _, t in s.outputs] != list(sg.outputs):
            return
        output_dtypes = [np.dtype(numpy_dtype(self._tensor(s, t).dtype)) for _, t in s.outputs]
        path = _StraightPath(run, s.input_dtypes, self._input_shapes[s.index], s.input_names, s.output_names,
                             output_dtypes)
        self._straight[s.index] = self._straight[s.key] = path

    def _open_compile_cache(self, digest: str | None = None) -> tuple[Any, dict]:
        """The compile cache (on by default, ``Options``) and this model's key in it; ``digest``: the model's
        bytes' fingerprint where the caller has it.  JAX's persistent cache is not turned on here: its directory
        is process-wide, so it would outlive this model and catch every later model's programs
        (``EnvironmentOptions.compile_cache_dir`` turns it on deliberately)."""
        cache = open_cache(self._options)
        if cache is None:
            return None, {}
        return cache, model_cache_key(self._ir, self._options.cache_token or digest)

    def _engines(self, cache_key: dict | None = None, untimed: bool = False) -> dict[str, Any]:
        """The CPU engines the planner may ask, holding this model's compile cache (OpenVINO's answer on
        which ops it converts, and which engine ran the model faster, are cached there too); ``cache_key``
        overrides the model's (a rewritten model's entries kept apart); ``untimed``: ``Engine.untimed``."""
        if self._options.cpu_options.kernels != "fast":
            return {}
        from ..backends.registry import fast_cpu_engines

        key = self._cache_key if cache_key is None else cache_key
        # the whole file only where the partitions run the file as it is (not IREE's float view of it)
        whole_file = self._xla_ir is self._ir and cache_key is None and getattr(self, "_gpu_engine", None) is None
        found = fast_cpu_engines(self._engine_settings(), self._ir.tflite_file, self._cache, key,
                                 whole_file=whole_file)
        allowed = self._options.cpu_options.engines
        for engine in found.values():
            engine.untimed = untimed
        return found if allowed is None else {name: e for name, e in found.items() if name in allowed}

    def _engine_settings(self) -> Any:
        from ..backends.engine import EngineSettings

        cpu = self._options.cpu_options
        settings = EngineSettings(num_threads=cpu.num_threads, precision=cpu.precision,
                                  approximate_integers=cpu.quantized_execution == "fast",
                                  exact_integers=cpu.quantized_execution == "exact")
        if cpu.quantized_execution is None and self._hybrid_verdict(settings).openvino_allowed:
            settings = dataclasses.replace(settings, approximate_integers=True)
        return settings

    def _hybrid_verdict(self, settings: Any) -> Any:
        """For a dynamic-range model on the default fast path: whether OpenVINO may run its hybrid ops, measured
        against XNNPACK's distance from the builtin kernels (``backends.fidelity``); measured once."""
        if self.__dict__.get("_hybrid") is None:
            from ..backends import fidelity

            allowed = self._options.cpu_options.engines
            if self._options.cpu_options.kernels != "fast" or (allowed is not None
                                                                and fidelity.HYBRID_ENGINE not in allowed):
                self._hybrid = fidelity.HybridVerdict(False, "not a dynamic-range model on the fast path")
            else:  # a small model: the official interpreter runs it untimed (compile.choices)
                from ..compile.choices import obvious_by_size

                self._hybrid = fidelity.fast_path_verdict(self._ir, lambda: obvious_by_size(self._ir), settings,
                                                          self._cache, self._cache_key)
        return self._hybrid

    def _remember_warm_start(self, backend: Any) -> None:
        """After a first start's first backend: its warm-start record, where the plan is of the plain kind."""
        (key, model_key), self._warm_key = self._warm_key, None
        # the key the record was looked up under describes this model: the same bytes (a file replaced between the
        # lookup and the read is not recorded), the same code, no key of a rewritten model's entries
        if not self._fell_back and self._devices is None and self._cache_key == model_key:
            pending = self._pending_choices()
            if warm_start.remember(self._cache, key, self._ir, self._plan, self._signatures, backend, pending) \
                    and pending is not None:
                self._pending_record_key = key

    def _make_backend(self, subgraph: int) -> Any:
        """The program of one subgraph: the whole-model engine's own where it runs whole subgraphs (XLA, the
        numpy reference: ``Engine.compile_subgraph``), else the plan's partitions, each compiled by its engine."""
        if self._warm is not None:
            return warm_start.WarmSignature(self._warm.executable(subgraph), self._warm.engine, subgraph)
        if not self._plan.is_split:
            engine = self._whole_model_engine()
            # the numpy kernels run the file's model as it is; XLA what it traces (rewritten, a GPU's float view)
            model = self._ir if self._plan.target is Target.REFERENCE else self._xla_model
            program = engine.compile_subgraph(model, subgraph, self._engine_settings(), self._cache, self._cache_key)
            if program is not None:
                self._whole_engine = engine
                self._state = engine.weights(model, self._platform)
                return program
        return self._partitioned().signature(subgraph)

    def _whole_model_engine(self) -> Any:
        """The engine of a whole-model plan, placed on the model's device with the plan's op rules: the one the plan
        asked where it did, else a new one holding the model's weights on the devices chosen for them."""
        if self._whole_engine is not None:
            return self._whole_engine
        name = self._plan.engine
        asked = {**self._cpu_engines, **({self._gpu_engine.name: self._gpu_engine} if self._gpu_engine else {})}
        if name in asked:
            return asked[name]
        from ..backends.engine import EngineSettings

        engine = registry.engine(name, EngineSettings(precision=self._options.precision or "fp32"),
                                 device=self._environment.device,
                                 devices={self._platform: self._devices} if self._devices else None,
                                 official_float_order=self._official_float_order)
        return engine.placed(self._platform, self._plan.target)

    @property
    def _official_float_order(self) -> bool:
        """XLA on the CPU computes float ops in the builtin kernels' order where those kernels were asked for
        (``CpuKernelMode.BUILTIN``), bit for bit as the official interpreter's, at some cost in speed."""
        return self._platform == "cpu" and self._options.cpu_options.kernels == "builtin"

    @functools.cached_property
    def _xla_model(self) -> ir.Model:
        """What XLA compiles: on the GPU a quantized model runs as its float view (GpuOptions.quantized_execution)."""
        return self._as_run_on(self._platform)

    def _as_run_on(self, platform: str) -> ir.Model:
        """The model as XLA or IREE run it on ``platform``: on the GPU a quantized model's float view, unless its
        exact integer kernels were asked for (``GpuOptions.quantized_execution``, checked where it was given).
        Decided here, so that the options stay in the runtime: the compile layer gets a model to view."""
        if platform == "gpu" and self._options.gpu_options.quantized_execution == "float":
            from ..compile.float_view import float_view

            return float_view(self._xla_ir)
        return self._xla_ir

    @functools.cached_property
    def _xla_ir(self) -> ir.Model:
        """The model as the XLA backends and the plan see it (the reference backend runs ``_ir`` as it is)."""
        from ..compile.rewrites import rewrite_for_xla

        return rewrite_for_xla(self._ir)

    def _partitioned(self) -> Any:
        """The per-device backends of a plan split between GPU and CPU (kept in ``_state``)."""
        if self._state is None:
            from .partitioned import PartitionedModel

            engines = dict(self._cpu_engines)
            if self._gpu_engine is not None:
                engines[self._gpu_engine.name] = self._gpu_engine
            self._state = PartitionedModel(self._planned_ir, self._plan, precision=self._options.precision,
                                           device=self._environment.device, cache=self._cache,
                                           cache_key=self._cache_key, engine_settings=self._engine_settings(),
                                           engines=engines,
                                           devices={self._platform: self._devices} if self._devices else None)
        return self._state

    def reset_all_variables(self) -> None:
        """Resource variables (and variable tensors) go back to their initial values; CALL_ONCE runs again."""
        with self._lock:
            self._check_open()
            if self._whole_engine is not None:
                self._whole_engine.reset_variables()
            elif self._state is not None:
                self._state.variables = {}

    # ---- running ----------------------------------------------------------------------------
    def _input_value(self, s: SignatureInfo, i: int, value: Any) -> tuple[Any, Any]:
        """(data for the backend, the buffer's event) after checking dtype and shape."""
        name, t_index = s.inputs[i]
        t = self._tensor(s, t_index)
        expected_dtype = np.dtype(numpy_dtype(t.dtype))
        expected_shape = tuple(self._input_shapes[s.index][i])
        event = None
        value = as_array(value, f"input {name!r} of signature {s.key!r}")
        if isinstance(value, TensorBuffer):
            event = value.event
            data = value._data()
        elif hasattr(value, "dtype") and hasattr(value, "shape"):
            data = value
        else:
            data = np.asarray(value, dtype=expected_dtype)
        dtype, shape = np.dtype(data.dtype), tuple(int(d) for d in data.shape)
        if dtype != expected_dtype:
            raise TensorBufferError(f"input {name!r} of signature {s.key!r} is {expected_dtype.name} "
                                    f"{list(expected_shape)}; got {dtype.name} data")
        if shape != expected_shape:
            raise TensorBufferError(f"input {name!r} of signature {s.key!r} has shape {list(expected_shape)}; got "
                                    f"{list(shape)} (call resize_input_tensor first to run another shape)")
        return data, event

    def _gather(self, s: SignatureInfo, inputs: Sequence[Any] | Mapping[str, Any]) -> tuple[list[Any], list[Any]]:
        if isinstance(inputs, Mapping):
            inputs = _in_signature_order(inputs, s.input_names, f"signature {s.key!r} takes inputs")
        if isinstance(inputs, (TensorBuffer, np.ndarray)) or not isinstance(inputs, Sequence):
            raise InvalidArgumentError(f"inputs of signature {s.key!r} are a list (or a name -> buffer dict), "
                                       f"not {type(inputs).__name__}")
        if len(inputs) != len(s.inputs):
            raise SignatureError(f"signature {s.key!r} takes {len(s.inputs)} input(s) {s.input_names}; "
                                 f"got {len(inputs)}")
        pairs = [self._input_value(s, i, v) for i, v in enumerate(inputs)]
        return [d for d, _ in pairs], [e for _, e in pairs]

    def _output_list(self, s: SignatureInfo, outputs: Sequence[TensorBuffer] | Mapping[str, TensorBuffer]
                     ) -> list[TensorBuffer]:
        if isinstance(outputs, Mapping):
            outputs = _in_signature_order(outputs, s.output_names, f"signature {s.key!r} has outputs")
        if len(outputs) != len(s.outputs) or not all(isinstance(b, TensorBuffer) for b in outputs):
            raise SignatureError(f"signature {s.key!r} has {len(s.outputs)} output(s) {s.output_names}; "
                                 f"pass one TensorBuffer for each (got {len(outputs)})")
        for (name, t), b in zip(s.outputs, outputs):
            expected = np.dtype(numpy_dtype(self._tensor(s, t).dtype))
            if b.dtype != expected:
                raise TensorBufferError(f"output {name!r} of signature {s.key!r} is {expected.name}; the buffer "
                                        f"given for it holds {b.dtype.name}")
        return list(outputs)

    def _execute(self, s: SignatureInfo, data: list[Any], consumable: Sequence[int] = ()) -> list[Any]:
        """Run with inputs in signature order; results in signature order (a SignatureDef may order its
        inputs and outputs differently from the subgraph).  ``consumable``: positions (signature order) of
        inputs whose memory the run may reuse for its outputs (``_consumable_inputs``)."""
        inputs_at, outputs_at = self._positions(s)
        backend = self._backends.get(s.index) or self._backend(s)  # made once; the lock only to make it
        ordered = [data[k] for k in inputs_at]
        if consumable and getattr(backend, "consumes_inputs", False):
            consumed = {s.inputs[i][1] for i in consumable}
            sg = self._ir.subgraphs[s.subgraph]
            results = backend.run(ordered, consumable=[i for i, t in enumerate(sg.inputs) if t in consumed])
        else:
            results = backend.run(ordered)
        return [results[k] for k in outputs_at]

    def _positions(self, s: SignatureInfo) -> tuple[list[int], list[int]]:
        """Where each subgraph input sits among the signature's inputs, and each signature output among the
        subgraph's outputs (a SignatureDef may order them differently); computed once per signature."""
        found = self._signature_positions.get(s.index)
        if found is None:
            sg = self._io_subgraphs[s.subgraph]
            given = [t for _, t in s.inputs]
            missing = [t for t in sg.inputs if t not in given]
            if missing:
                raise SignatureError(f"signature {s.key!r} does not name subgraph {s.subgraph}'s input tensor(s) "
                                     f"{missing}")
            found = ([given.index(t) for t in sg.inputs], [list(sg.outputs).index(t) for _, t in s.outputs])
            self._signature_positions[s.index] = found
        return found

    def _dispatch(self, s: SignatureInfo, inputs: Sequence[Any] | Mapping[str, Any],
                  outputs: Sequence[TensorBuffer] = ()) -> list[Any]:
        values = list(inputs.values()) if isinstance(inputs, Mapping) else (
            list(inputs) if isinstance(inputs, Sequence) else [])
        for value in values:
            event = getattr(value, "event", None) if isinstance(value, TensorBuffer) else None
            # A run's outputs are ordered by JAX itself; only host-side producers need a wait, outside the lock.
            if event is not None and event.is_host:
                event.wait()
        with self._lock:
            self._check_open()
            data, _ = self._gather(s, inputs)
            return self._execute(s, data, self._consumable_inputs(s, inputs, outputs))

    @staticmethod
    def _consumable_inputs(s: SignatureInfo, inputs: Sequence[Any] | Mapping[str, Any],
                           outputs: Sequence[TensorBuffer]) -> list[int]:
        """Positions of the input buffers that this run also writes as outputs (a KV cache passed in and out,
        as ``generate`` and LiteRT-LM do) and whose data an earlier run made: their old data is replaced
        anyway, so the run may compute the new data in its memory instead of holding both."""
        if not outputs:
            return []
        if isinstance(inputs, Mapping):
            inputs = [inputs.get(n) for n in s.input_names]
        written = {id(b) for b in outputs}
        if not any(id(b) in written for b in inputs):  # the usual run: nothing more to check per call
            return []
        once = collections.Counter(id(b) for b in inputs)
        return [i for i, b in enumerate(inputs) if isinstance(b, TensorBuffer) and id(b) in written
                and once[id(b)] == 1 and b._consumable()]

    def _run(self, signature: int | str, inputs: Any, outputs: Any, asynchronous: bool) -> Event | None:
        s = self._signature(signature)
        buffers = self._output_list(s, outputs) if outputs is not None else None
        results = self._dispatch(s, inputs, buffers or ())
        event = Event(results, on_complete=(lambda: [b._flush() for b in buffers]) if buffers else None)
        if buffers is not None:
            for b, value in zip(buffers, results):
                b._set_result(value, event if asynchronous else None)
        if asynchronous:
            return event
        event.wait()
        return None

    def run_by_index(self, signature_index: int, input_buffers: Sequence[TensorBuffer],
                     output_buffers: Sequence[TensorBuffer]) -> None:
        """Run a signature; when this returns, the outputs hold the results."""
        straight = self._straight.get(signature_index) if type(signature_index) is int else None
        arrays = straight.arrays_of(input_buffers, output_buffers) if straight is not None else None
        if arrays is not None:
            for buffer, result in zip(output_buffers, straight.run(arrays)):
                buffer._set_result(result)
            return
        self._run(signature_index, input_buffers, output_buffers, asynchronous=False)

    def run_by_name(self, signature_key: str, input_map: Mapping[str, TensorBuffer],
                    output_map: Mapping[str, TensorBuffer]) -> None:
        """Run a signature with buffers by name; unknown or missing names raise SignatureError."""
        straight = self._straight.get(signature_key) if type(signature_key) is str else None
        if straight is not None and type(input_map) is dict and type(output_map) is dict:
            inputs = list(map(input_map.get, straight.input_names)) if len(input_map) == len(
                straight.input_names) else None
            outputs = list(map(output_map.get, straight.output_names)) if len(output_map) == len(
                straight.output_names) else None
            arrays = straight.arrays_of(inputs, outputs) if inputs is not None and outputs is not None else None
            if arrays is not None:
                for buffer, result in zip(outputs, straight.run(arrays)):
                    buffer._set_result(result)
                return
        if not isinstance(input_map, Mapping) or not isinstance(output_map, Mapping):
            raise InvalidArgumentError("run_by_name takes name -> TensorBuffer dicts for inputs and outputs")
        self._run(signature_key, input_map, output_map, asynchronous=False)

    def run_async(self, signature: int | str, input_buffers: Sequence[TensorBuffer] | Mapping[str, TensorBuffer],
                  output_buffers: Sequence[TensorBuffer] | Mapping[str, TensorBuffer]) -> Event:
        """Dispatch a run and return at once; the Event completes when the outputs are computed.

        The output buffers hold the (future) device arrays right away, so they can be passed to the next
        run without waiting (JAX orders the work); ``read()`` on them waits.  Buffers that wrap the
        caller's host memory receive the results when the event is waited on or the buffer is read.
        """
        event = self._run(signature, input_buffers, output_buffers, asynchronous=True)
        assert event is not None
        return event

    # ---- quick API --------------------------------------------------------------------------
    def run(self, inputs: Mapping[str, Any] | Sequence[Any], signature_key: str | int = 0) -> dict[str, np.ndarray]:
        """numpy in, numpy out: ``model.run({"x": x}) -> {"y": y}``.  Inputs may also be TensorBuffers or
        any DLPack array (torch, cupy, jax): read where they are, a GPU tensor without a trip through the host.

        Dimensions that are -1 in the model's shape signature may take any size (compiled per shape);
        dtypes and the other dimensions must match.
        """
        straight = self._straight.get(signature_key) if type(signature_key) is not bool else None
        if straight is not None:
            arrays = list(map(inputs.get, straight.input_names)) if type(inputs) is dict and len(inputs) == len(
                straight.input_names) else inputs if type(inputs) is list else None
            if arrays is not None and straight.takes(arrays):
                return dict(zip(straight.output_names, straight.run(arrays)))
        s = self._signature(signature_key)
        if type(inputs) is dict or isinstance(inputs, Mapping):  # a dict skips the slower ABC check
            if len(inputs) != len(s.input_names) or not all(n in inputs for n in s.input_names):
                raise SignatureError(f"signature {s.key!r} takes inputs {s.input_names}; got {list(inputs)}")
            inputs = [inputs[n] for n in s.input_names]
        if not (type(inputs) is list or isinstance(inputs, Sequence)) or len(inputs) != len(s.inputs):
            raise SignatureError(f"signature {s.key!r} takes {len(s.inputs)} input(s) {s.input_names}")
        arrays = [self._quick_input(s, i, x) for i, x in enumerate(inputs)]
        with self._lock:
            self._check_open()
            results = self._execute(s, arrays)
        return {name: r if type(r) is np.ndarray else np.asarray(r) for name, r in zip(s.output_names, results)}

    def _quick_input(self, s: SignatureInfo, i: int, x: Any) -> Any:
        # the usual call, a numpy array of the expected dtype and current shape, costs two comparisons: on a
        # model that runs in microseconds (XNNPACK) the checks below would be a third of the time
        if type(x) is np.ndarray and x.dtype == s.input_dtypes[i] and x.shape == self._input_shapes[s.index][i]:
            return x
        name, t_index = s.inputs[i]
        t = self._tensor(s, t_index)
        dtype = np.dtype(numpy_dtype(t.dtype))
        x = as_array(x, f"input {name!r} of signature {s.key!r}")
        if isinstance(x, TensorBuffer):
            x = x._data()
        elif not (hasattr(x, "dtype") and hasattr(x, "shape")):
            x = np.asarray(x, dtype=dtype)
        if np.dtype(x.dtype) != dtype:
            raise TensorBufferError(f"input {name!r} of signature {s.key!r} is {dtype.name}; got {np.dtype(x.dtype).name}")
        current = tuple(self._input_shapes[s.index][i])
        flexible = t.shape_signature if t.shape_signature is not None else current
        shape = tuple(int(d) for d in x.shape)
        if shape != current and (len(shape) != len(current) or any(
                d != c and not (len(flexible) == len(current) and flexible[k] < 0)
                for k, (d, c) in enumerate(zip(shape, current)))):
            raise TensorBufferError(f"input {name!r} of signature {s.key!r} has shape {list(current)} (shape "
                                    f"signature {list(flexible)}); got {list(shape)} (resize_input_tensor with "
                                    "strict=False forces another shape)")
        return x

    def batched(self, devices: Any = None) -> Any:
        """A view of this model that runs N examples per call as one program (``runtime.batched``):
        ``model.batched()(images)`` with ``images`` of shape ``[N, ...]`` for a batch-1 input.  ``devices``
        ("all", a count, indices or JAX devices) splits the examples across several devices (data parallel)."""
        self._check_open()
        from .batched import BatchedModel

        return BatchedModel(self, devices)

    def __call__(self, *inputs: Any, signature_key: str | int = 0, **named: Any) -> Any:
        """``y = model(x)``: positional or keyword numpy inputs; one output comes back as an array,
        several as a tuple in the signature's output order."""
        straight = self._straight.get(signature_key) if not named and type(signature_key) is not bool else None
        if straight is not None and straight.takes(inputs):
            results = straight.run(inputs)
            return results[0] if len(results) == 1 else tuple(results)
        if inputs and named:
            raise InvalidArgumentError("pass the inputs either by position or by name, not both")
        result = self.run(named if named else list(inputs), signature_key)
        values = tuple(result.values())
        return values[0] if len(values) == 1 else values

    def __repr__(self) -> str:
        state = "closed" if self._closed else self.accelerator
        return f"CompiledModel({self._ir.source!r}, {state}, signatures={[s.key for s in self._signatures]})"
