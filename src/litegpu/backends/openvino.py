"""The OpenVINO engine: CPU speed for the float ops it can convert.

OpenVINO reads ``.tflite`` files itself and, measured here, runs float models faster than XNNPACK
(BENCHMARKS.md).  It refuses much of what litegpu runs (MediaPipe custom ops, resource variables,
DYNAMIC_UPDATE_SLICE, NMS, fused LSTM) and has no LiteRT API, so litegpu hands it *partitions*:

- **Support** is OpenVINO's own answer: the ops of a subgraph are cut out as a sub-model by
  litegpu's writer (``ir.extract``) and given to the TFLite frontend's ``convert_partially``, which
  leaves every op it cannot convert as a framework node; those ops go to another engine.  Before
  asking, a policy keeps some ops off OpenVINO that it would convert with different numbers:
  integer-quantized and hybrid (dynamic-range) ops, whose TFLite arithmetic XLA reproduces bit for
  bit while OpenVINO's int8 MobileNetV3 is up to 21 units off the builtin kernels (XNNPACK 5); ops
  calling subgraphs; state (variables, random); strings and resources.
- **Compile** writes the partition as a ``.tflite`` sub-model to a private temp file, reads it with
  ``Core.read_model``, reshapes it to the run's input shapes and compiles it for the CPU with
  ``INFERENCE_PRECISION_HINT=f32`` (OpenVINO silently computes in bf16 on AMX CPUs otherwise) and
  the thread count asked for.  With a compile cache the compiled blob (``export_model``) is stored
  under a key of the model token, partition, shapes, settings and versions, checksummed like the
  XLA entries, and imported by a later process instead of converting and compiling again.
- **Run** feeds numpy inputs to one infer request and copies the outputs out of OpenVINO's buffers
  (the next run would overwrite them), in the dtypes the model declares.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import logging
import os
import tempfile
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import EngineCompileError, LiteGpuError, ModelExecutionError
from ..ir.dtypes import numpy_dtype
from ..ops import Target
from .engine import (Engine, EngineContext, EngineSettings, Executable, installed_version, integer_arithmetic,
                     physical_cores)
from .op_range import OpRange

if TYPE_CHECKING:  # annotations only: a warm start imports neither the IR's classes nor the file writer
    from ..ir import Model, Operator, Subgraph

log = logging.getLogger(__name__)

_OPAQUE_DTYPES = ("resource", "variant", "string")
_STATEFUL = frozenset({"VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE", "CALL_ONCE", "RANDOM_UNIFORM",
                       "RANDOM_STANDARD_NORMAL", "MULTINOMIAL", "HASHTABLE", "HASHTABLE_FIND",
                       "HASHTABLE_IMPORT", "HASHTABLE_SIZE", "STABLEHLO_RNG_BIT_GENERATOR"})
# Models with more constant bytes than this stay on XLA: OpenVINO copies a model's weights into its
# compiled model, where XLA maps them in place from the file (big models keep their 1.3x memory goal).
MAX_OPENVINO_WEIGHT_BYTES = 1 << 30
_PRECISION_HINTS = {"fp32": "f32", "bf16": "bf16", "fp16": "f16"}


@functools.lru_cache(maxsize=1)
def _openvino() -> Any:
    _keep_telemetry_off()
    import sys

    if "openvino" in sys.modules:
        import openvino

        return openvino
    # openvino/__init__ imports its model converter (``openvino.tools.ovc``, 60 ms of a 0.4 s warm start), which
    # litegpu never calls (it reads TFLite through the frontend): skipped while the package loads (the package
    # tolerates its absence), and ``openvino.convert_model`` imports it on first use instead.
    sys.modules["openvino.tools.ovc"] = None  # type: ignore[assignment]  # import raises ImportError
    try:
        import openvino
    finally:
        del sys.modules["openvino.tools.ovc"]
    if not hasattr(openvino, "convert_model"):
        def convert_model(*args: Any, **kwargs: Any) -> Any:
            from openvino.tools.ovc import convert_model as convert

            return convert(*args, **kwargs)

        openvino.convert_model = convert_model
    return openvino


def _keep_telemetry_off() -> None:
    """OpenVINO's frontends import its converter package, which sends usage events to an analytics
    service from a forked process (``openvino_telemetry``) unless a consent file says no.  A runtime
    library must not phone home, nor fork inside a multithreaded (JAX) process: while litegpu loads
    OpenVINO, the telemetry package is made unimportable, so OpenVINO falls back to its own no-op
    stub.  ``LITEGPU_OPENVINO_TELEMETRY=1`` leaves it alone; a process that already imported it keeps it."""
    import sys

    if os.environ.get("LITEGPU_OPENVINO_TELEMETRY") == "1" or "openvino_telemetry" in sys.modules:
        return
    sys.modules["openvino_telemetry"] = None  # type: ignore[assignment]  # import raises ImportError


@functools.lru_cache(maxsize=1)
def _core() -> Any:
    return _openvino().Core()


@functools.lru_cache(maxsize=1)
def _frontend() -> Any:
    _openvino()  # telemetry off first
    from openvino.frontend import FrontEndManager

    return FrontEndManager().load_by_framework("tflite")


def openvino_version() -> str:
    return _openvino().get_version()


def openvino_package_version() -> str:
    """The installed package's version, read without importing OpenVINO (a warm start's cache keys)."""
    return installed_version("openvino", "openvino")


class OpenVinoEngine(Engine):
    """``cache``/``cache_key``: a compile cache where OpenVINO's verdict on a model's ops is kept, so that a
    warm start does not convert the model again to learn what it supports."""

    name, target = "openvino", Target.OPENVINO
    # OpenVINO's shape inference refuses some graphs TFLite accepts, or a new input shape
    fallback, fallback_words = Target.XLA_CPU, "the exact kernels"

    def __init__(self, cache: Any = None, cache_key: dict | None = None, settings: EngineSettings | None = None,
                 file: str | None = None):
        self.cache, self.cache_key = cache, dict(cache_key or {})
        self.settings = settings or EngineSettings()
        # A file holding exactly the model the engine is asked about: a partition that is all of its only
        # subgraph is read from it instead of being written out again (a 100 MB model: 0.3 s saved twice).
        self.file = file
        # partitions compiled while planning (``compile_error``), handed out again by ``compile``
        self._executables: dict[tuple, OpenVinoExecutable] = {}

    @classmethod
    def create(cls, settings: EngineSettings | None, context: EngineContext) -> "OpenVinoEngine":
        return cls(cache=context.cache, cache_key=context.cache_key, settings=settings,
                   file=context.file if context.whole_file else None)

    @classmethod
    def device_rows(cls, earlier: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """The Intel GPU: what OpenVINO's GPU plugin (or IREE, through Vulkan) would make of it."""
        try:
            report = intel_gpu_report()
        except Exception as e:  # noqa: BLE001  (OpenVINO missing or broken: say so)
            return [{"device": "Intel GPU", "detail": f"{type(e).__name__}: {e}", "engines": "-"}]
        engines = "openvino GPU plugin" if report.openvino else ("iree (Vulkan)" if report.hardware else "-")
        return [{"device": "Intel GPU", "detail": report.explain(), "engines": engines}]

    def available(self) -> bool:
        try:
            return "CPU" in _core().available_devices
        except Exception:  # not installed, or its plugin cannot start here
            return False

    def installed(self) -> bool:
        import importlib.util

        return importlib.util.find_spec("openvino") is not None

    def version(self) -> str:
        return openvino_package_version()

    def describe(self) -> str:
        core = _core()
        return f"openvino {openvino_version()}; CPU: {core.get_property('CPU', 'FULL_DEVICE_NAME')} (" + \
            ", ".join(core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")) + ")"

    # ---- support ----------------------------------------------------------------------------
    def unsupported(self, model: Model, subgraph: int, op_indices: Sequence[int]) -> dict[int, str]:
        if _constant_bytes(model) > MAX_OPENVINO_WEIGHT_BYTES:
            reason = (f"the model's weights pass {MAX_OPENVINO_WEIGHT_BYTES >> 30} GiB: XLA maps them in place, "
                      "OpenVINO would copy them")
            return {i: reason for i in op_indices}
        refused = self.policy_refusals(model, subgraph, op_indices)
        candidates = [i for i in op_indices if i not in refused]
        refused.update(self._cached_conversion_refusals(model, subgraph, candidates))
        return refused

    def policy_refusals(self, model: Model, subgraph: int, op_indices: Sequence[int]) -> dict[int, str]:
        """The ops ``policy_reason`` keeps off OpenVINO under the engine's settings (no OpenVINO loaded)."""
        sg = model.subgraphs[subgraph]
        found = {i: policy_reason(model, sg, sg.operators[i], self.settings.approximate_integers) for i in op_indices}
        return {i: reason for i, reason in found.items() if reason is not None}

    def _cached_conversion_refusals(self, model: Model, subgraph: int, candidates: list[int]) -> dict[int, str]:
        if self.cache is None or not candidates:
            return _conversion_refusals(model, subgraph, candidates, self.file)
        import json

        from .cache import found_or_made, make_key

        key = make_key({**self.cache_key, "engine": "openvino", "openvino": openvino_version(),
                        "support": subgraph, "candidates": candidates,
                        "approximate_integers": self.settings.approximate_integers})

        def converted() -> dict[int, str]:
            found = _conversion_refusals(model, subgraph, candidates, self.file)
            self.cache.store(key, json.dumps(found).encode(), {"engine": "openvino", "what": "op support",
                                                               "source": model.source})
            return found

        return found_or_made(self.cache, key, lambda: self._stored_refusals(key), converted)

    def _stored_refusals(self, key: str) -> dict[int, str] | None:
        import json

        stored = self.cache.load(key)
        if stored is not None:
            try:
                return {int(i): str(why) for i, why in json.loads(stored).items()}
            except (ValueError, AttributeError):
                self.cache.discard(key, "not a support list")
        return None

    # ---- compile ----------------------------------------------------------------------------
    def compile(self, model: Model, op_range: OpRange, settings: EngineSettings, cache: Any = None,
                cache_key: dict | None = None) -> "OpenVinoExecutable":
        key = (id(model), op_range, settings)
        if key not in self._executables:
            self._executables[key] = OpenVinoExecutable(model, op_range, settings, cache, cache_key, self.file)
        return self._executables[key]

    def forget(self, model: Model) -> None:
        self._executables = {k: v for k, v in self._executables.items() if k[0] != id(model)}

    def file_record(self, executable: Any, file: str) -> dict | None:
        """The settings and ports of an executable over ``file`` as it is (its only subgraph whole, read by
        OpenVINO from the file itself) whose compiled blob the compile cache keeps: a later start imports the blob
        under the same key without reading the model into the IR."""
        if not isinstance(executable, OpenVinoExecutable) or executable.file is None or executable.cache is None \
                or os.path.abspath(executable.file) != os.path.abspath(file):
            return None
        r = executable.op_range
        return {"settings": dataclasses.asdict(executable.settings), "subgraph": r.subgraph,
                "ops": len(r.op_indices), "inputs": list(r.inputs), "outputs": list(r.outputs)}

    def from_file_record(self, file: str, model: Any, record: dict, subgraph: int) -> "OpenVinoExecutable":
        """The executable ``file_record`` described, its blob imported from the compile cache (compiled from the
        file again, and stored, where the cache no longer holds it)."""
        if int(record["subgraph"]) != subgraph:
            raise ValueError(f"recorded for subgraph {record['subgraph']}, not {subgraph}")
        sg = model.subgraphs[subgraph]  # the ports in the subgraph's order (OpenVINO's are matched by name)
        if sorted(sg.inputs) != sorted(record["inputs"]) or sorted(sg.outputs) != sorted(record["outputs"]):
            raise ValueError("the recorded ports are not the subgraph's")
        op_range = OpRange(subgraph, tuple(range(int(record["ops"]))), tuple(sg.inputs), tuple(sg.outputs))
        settings = EngineSettings(**record["settings"])
        key = (id(model), op_range, settings)
        if key not in self._executables:
            executable = OpenVinoExecutable(model, op_range, settings, self.cache, self.cache_key, file,
                                            whole_file=True)
            executable.prepare()  # the blob imported now, as a first start's plan compiles it
            self._executables[key] = executable
        return self._executables[key]

    def compile_error(self, model: Model, op_range: OpRange) -> str | None:
        """None when OpenVINO compiles ``op_range`` for its declared shapes (the executable is kept for
        ``compile``), else why not: its frontend converts some graphs that its shape inference refuses."""
        executable = self.compile(model, op_range, self.settings, self.cache, self.cache_key)
        try:
            executable.prepare()
        except EngineCompileError as e:
            return str(e)
        return None


def policy_reason(model: Model, sg: Subgraph, op: Operator, approximate_integers: bool = False) -> str | None:
    """Why an op is kept off OpenVINO before asking it (None: ask OpenVINO).  ``approximate_integers``
    (``CpuOptions(quantized_execution="fast")``) lets integer and hybrid ops go to OpenVINO too."""
    if op.opcode_name in _STATEFUL:
        return "reads or writes state: kept where the model's state lives"
    from ..ir.save import op_format_refusal

    tflite_refusal = op_format_refusal(sg, op)
    if tflite_refusal is not None:
        return f"OpenVINO reads TFLite only: {tflite_refusal}"
    if any(k == "subgraph" or k.endswith("subgraph_index") for k in op.options):
        return "calls a subgraph"
    tensors = [sg.tensors[t] for t in (*op.inputs, *op.outputs) if t >= 0]
    if any(t.dtype in _OPAQUE_DTYPES for t in tensors):
        return "string, resource or variant tensors"
    if any(t.is_variable for t in tensors):
        return "reads a variable tensor"
    if op.is_custom:
        from ..ops.custom.python_ops import PythonCustomOp
        from ..ops.registry import find

        if isinstance(find(op.opcode_name, custom=True), PythonCustomOp):
            return "a custom op registered from Python"
    if not approximate_integers and integer_arithmetic(sg, op):
        return ("quantized integer arithmetic: kept on the exact TFLite kernels (OpenVINO's int8 results differ "
                "from the builtin kernels by more than XNNPACK's)")
    return None


def _constant_bytes(model: Model) -> int:
    return sum(b.size for b in model.buffers)


def _partition_edges(sg: Subgraph, ops: Sequence[int]) -> tuple[list[int], list[int]]:
    """Tensors a run of ops reads from outside (non-constant) and every tensor it produces."""
    produced = [t for i in ops for t in sg.operators[i].outputs if t >= 0]
    made = set(produced)
    reads: dict[int, None] = {}
    for i in ops:
        for t in sg.operators[i].inputs:
            if t >= 0 and t not in made and sg.tensors[t].data is None:
                reads.setdefault(t, None)
    return list(reads), produced


def _conversion_refusals(model: Model, subgraph: int, candidates: list[int], file: str | None = None
                         ) -> dict[int, str]:
    """OpenVINO's own verdict on ``candidates``: the ops its TFLite frontend leaves as framework nodes."""
    from ..ir.extract import extract_ops

    if not candidates:
        return {}
    sg = model.subgraphs[subgraph]
    inputs, outputs = _partition_edges(sg, candidates)
    whole = _whole_file(model, subgraph, candidates, inputs, sg.outputs, file)
    try:
        if whole is not None:
            frontend = _frontend()
            converted = frontend.convert_partially(frontend.load(whole))  # op friendly names: their indices
        else:
            converted = _convert_partially(extract_ops(model, subgraph, candidates, inputs, outputs))
    except Exception as e:  # the frontend refused the sub-model as a whole: ask op by op
        log.debug("OpenVINO refused %d ops at once (%s); asking op by op", len(candidates), e)
        return _refusals_one_by_one(model, subgraph, candidates)
    refused = {}
    for node in converted.get_ordered_ops():
        if "FrameworkNode" in node.get_type_name():
            position = _framework_node_position(node)
            if position is not None and 0 <= position < len(candidates):
                refused[candidates[position]] = "OpenVINO's TFLite frontend cannot convert it"
    return refused


def _whole_file(model: Model, subgraph: int, ops: Sequence[int], inputs: Sequence[int], outputs: Sequence[int],
                file: str | None) -> str | None:
    """``file`` when ``ops`` are every op of the model's only subgraph, in file order, reading its inputs and
    producing its outputs: then the file itself is the partition (ports named as in the file)."""
    if file is None or len(model.subgraphs) != 1 or subgraph != 0:
        return None
    sg = model.subgraphs[0]
    if list(ops) != list(range(len(sg.operators))) or set(inputs) != set(sg.inputs) \
            or not set(outputs) <= set(sg.outputs):
        return None
    names = [sg.tensors[t].name for t in (*sg.inputs, *sg.outputs)]
    return file if len(set(names)) == len(names) and all(names) else None


def _framework_node_position(node: Any) -> int | None:
    """The sub-model op a framework node stands for: its friendly name is the op's position."""
    name = node.get_friendly_name()
    return int(name) if name.isdigit() else None


def _refusals_one_by_one(model: Model, subgraph: int, candidates: list[int]) -> dict[int, str]:
    from ..ir.extract import extract_ops

    sg = model.subgraphs[subgraph]
    refused = {}
    for i in candidates:
        inputs, outputs = _partition_edges(sg, [i])
        try:
            converted = _convert_partially(extract_ops(model, subgraph, [i], inputs, outputs))
        except Exception as e:
            refused[i] = f"OpenVINO's TFLite frontend refuses it: {str(e).strip().splitlines()[-1][:200]}"
            continue
        if any("FrameworkNode" in n.get_type_name() for n in converted.get_ordered_ops()):
            refused[i] = "OpenVINO's TFLite frontend cannot convert it"
    return refused


def _convert_partially(sub: Model) -> Any:
    with _written(sub) as path:
        frontend = _frontend()
        return frontend.convert_partially(frontend.load(path))


class _written:
    """A sub-model written to a private temp file for as long as the ``with`` block lasts."""

    def __init__(self, model: Model):
        self.model = model

    def __enter__(self) -> str:
        from ..ir.save import write_model

        fd, self.path = tempfile.mkstemp(prefix="litegpu-part-", suffix=".tflite")
        os.close(fd)
        write_model(self.model, self.path)
        return self.path

    def __exit__(self, *exc: Any) -> None:
        try:
            os.unlink(self.path)
        except OSError:
            pass


class OpenVinoExecutable(Executable):
    """One partition compiled by OpenVINO for the CPU, recompiled (and cached) per input shapes."""

    def __init__(self, model: Model, op_range: OpRange, settings: EngineSettings, cache: Any = None,
                 cache_key: dict | None = None, file: str | None = None, whole_file: bool = False):
        """``whole_file``: ``file`` is known to be the partition (a warm start's record says so; ``model`` then
        describes the subgraph's ports only, ``runtime.warm_start.ModelSpec``)."""
        self.model, self.op_range, self.settings = model, op_range, settings
        self.file = file if whole_file else _whole_file(model, op_range.subgraph, op_range.op_indices,
                                                        op_range.inputs, op_range.outputs, file)
        sg_ = model.subgraphs[op_range.subgraph]
        # how OpenVINO will name the ports: our t<index> names in a sub-model, the file's own names otherwise
        self._port_names = {sg_.tensors[t].name: t for t in (*op_range.inputs, *op_range.outputs)} \
            if self.file is not None else None
        self.cache, self.cache_key = cache, dict(cache_key or {})
        self.where = "host"
        sg = model.subgraphs[op_range.subgraph]
        self._output_dtypes = [np.dtype(numpy_dtype(sg.tensors[t].dtype)) for t in op_range.outputs]
        self._declared = [tuple(int(d) for d in sg.tensors[t].shape) for t in op_range.inputs]
        self._compiled: dict[tuple, _Compiled] = {}
        self._lock = threading.Lock()
        self.loaded_from_cache = False

    def _config(self) -> dict[str, Any]:
        hint = _PRECISION_HINTS.get(self.settings.precision)
        if hint is None:
            raise ModelExecutionError(f"OpenVINO has no precision {self.settings.precision!r}; use fp32 or bf16")
        # Latency (one stream), threads not pinned to cores: pinning made every model slower here (a 2-core
        # VM: 0.062 -> 0.042 ms on a tiny model, 1.30 -> 1.13 ms on MobileNetV3; BENCHMARKS.md).
        config: dict[str, Any] = {"INFERENCE_PRECISION_HINT": hint, "PERFORMANCE_HINT": "LATENCY",
                                  "ENABLE_CPU_PINNING": False}
        # the physical cores by default, as the other engines: OpenVINO's own default is the same count on most
        # machines, but named here it follows the process's affinity mask and is part of the cache key
        config["INFERENCE_NUM_THREADS"] = int(self.settings.num_threads or physical_cores())
        return config

    def _key(self, shapes: tuple) -> str:
        from .cache import make_key

        return make_key({**self.cache_key, "engine": "openvino", "openvino": openvino_version(),
                         "subgraph": self.op_range.subgraph, "ops": list(self.op_range.op_indices),
                         # sorted: the ports are matched by name, so their order makes no other program
                         "inputs": sorted(self.op_range.inputs), "outputs": sorted(self.op_range.outputs),
                         "shapes": [list(s) for s in shapes], "config": self._config()})

    def compiled_for(self, shapes: tuple) -> "_Compiled":
        with self._lock:
            if shapes not in self._compiled:
                self._compiled[shapes] = self._compile(shapes)
            return self._compiled[shapes]

    def _compile(self, shapes: tuple) -> "_Compiled":
        from .cache import found_or_made

        key = self._key(shapes) if self.cache is not None else None
        return found_or_made(self.cache, key, lambda: self._cached(key), lambda: self._compiled_now(shapes, key))

    def _cached(self, key: str | None) -> "_Compiled | None":
        """The blob stored under ``key`` imported, or None (none there, or one this OpenVINO cannot read)."""
        blob = self.cache.load(key) if key is not None else None
        if blob is None:
            return None
        try:
            compiled = _core().import_model(io.BytesIO(blob), "CPU", self._config())
        except Exception as e:  # a blob this OpenVINO cannot read: rebuild it, never trust it
            self.cache.discard(key, f"OpenVINO could not import it ({type(e).__name__})")
            return None
        self.loaded_from_cache = True
        return _Compiled(compiled, self.op_range, self._port_names)

    def _compiled_now(self, shapes: tuple, key: str | None) -> "_Compiled":
        core, config = _core(), self._config()
        try:
            with self._source() as path:
                ov_model = core.read_model(path)
                if list(shapes) != self._declared:
                    ov_model.reshape({port: list(shape) for port, shape in zip(_ports_in_order(
                        ov_model.inputs, self.op_range.inputs, self._port_names), shapes)})
                compiled = core.compile_model(ov_model, "CPU", config)
        except LiteGpuError:
            raise
        except Exception as e:
            raise EngineCompileError(f"{self.model.source}: OpenVINO could not compile {self.op_range} for input "
                                      f"shapes {[list(s) for s in shapes]}: {str(e).strip()[:400]} (CpuOptions("
                                      "kernel_mode=CpuKernelMode.BUILTIN) runs the model on XLA instead)") from e
        if key is not None:
            stream = io.BytesIO()
            compiled.export_model(stream)
            self.cache.store(key, stream.getvalue(), {"engine": "openvino", "what": "compiled program",
                                                      "source": self.model.source, "partition": str(self.op_range)})
        return _Compiled(compiled, self.op_range, self._port_names)

    def _source(self) -> Any:
        """A context giving the path OpenVINO reads: the model's own file, or the partition written out."""
        if self.file is not None:
            return contextlib.nullcontext(self.file)
        from ..ir.extract import extract_ops

        return _written(extract_ops(self.model, self.op_range.subgraph, self.op_range.op_indices,
                                    self.op_range.inputs, self.op_range.outputs))

    def prepare(self) -> None:
        """Compile for the declared input shapes now (ModelExecutionError if OpenVINO cannot)."""
        self.compiled_for(tuple(self._declared))

    def output_shapes(self, input_shapes: Sequence[Sequence[int]]) -> list[tuple[tuple[int, ...], np.dtype]]:
        """(shape, dtype) of each output for these input shapes (compiling for them if needed)."""
        compiled = self.compiled_for(tuple(tuple(int(d) for d in s) for s in input_shapes))
        return [(tuple(int(d) for d in port.get_shape()), dtype)
                for port, dtype in zip(compiled.outputs, self._output_dtypes)]

    def run(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        arrays = [np.ascontiguousarray(np.asarray(x)) for x in inputs]
        compiled = self.compiled_for(tuple(tuple(int(d) for d in a.shape) for a in arrays))
        try:
            results = compiled.infer(arrays)
        except Exception as e:  # OpenVINO reports a failed allocation as a RuntimeError (std::bad_alloc)
            from .memory import is_out_of_memory, out_of_memory

            if is_out_of_memory(e):
                raise out_of_memory(e, f"{self.model.source}: {self.op_range} on OpenVINO", "running") from e
            raise
        return [r if r.dtype == dtype else r.astype(dtype) for r, dtype in zip(results, self._output_dtypes)]


def _ports_in_order(ports: Sequence[Any], tensors: Sequence[int], names: dict[str, int] | None = None
                    ) -> list[Any]:
    """OpenVINO's ports sorted as ``tensors`` (the partition's order), matched by the names we gave them
    (``t<index>``), or by the file's own tensor names (``names``: name -> tensor index)."""
    from ..ir.extract import port_tensor_index

    by_tensor = {}
    for port in ports:
        for name in port.get_names():
            index = port_tensor_index(name) if names is None else names.get(name)
            if index is not None:
                by_tensor[index] = port
    missing = [t for t in tensors if t not in by_tensor]
    if missing:
        raise ModelExecutionError(f"OpenVINO's compiled partition lacks ports for tensors {missing}")
    return [by_tensor[t] for t in tensors]


class _Compiled:
    """A compiled model, its ports in partition order and one infer request (runs are serialised)."""

    def __init__(self, compiled: Any, op_range: OpRange, names: dict[str, int] | None = None):
        self.compiled = compiled
        self.inputs = _ports_in_order(compiled.inputs, op_range.inputs, names)
        self.outputs = _ports_in_order(compiled.outputs, op_range.outputs, names)
        self.request = compiled.create_infer_request()
        self.lock = threading.Lock()

    def infer(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        with self.lock:
            self.request.infer({port: a for port, a in zip(self.inputs, arrays)}, share_inputs=True)
            return [np.array(self.request.get_tensor(port).data, copy=True) for port in self.outputs]


# ---- Intel GPUs -------------------------------------------------------------------------------------------
# OpenVINO's wheel carries a GPU plugin for Intel GPUs; it runs where Intel's OpenCL runtime (the "compute
# runtime", Debian/Ubuntu package intel-opencl-icd) is installed.  litegpu does not run it yet: ``litegpu
# doctor`` says whether this machine has an Intel GPU, whether OpenVINO sees it, and what is missing.

INTEL_PCI_VENDOR = 0x8086
PCI_DEVICES = "/sys/bus/pci/devices"


@dataclasses.dataclass(frozen=True)
class IntelGpuReport:
    """The Intel GPUs of this machine as the PCI bus and Vulkan list them, and those OpenVINO's GPU plugin sees."""

    hardware: tuple[str, ...]
    openvino: tuple[str, ...]

    def explain(self) -> str:
        if not self.hardware and not self.openvino:
            return "no Intel GPU on this machine: OpenVINO's GPU plugin has nothing to run on"
        if self.openvino:
            return f"OpenVINO's GPU plugin sees {', '.join(self.openvino)} (not used by litegpu's plans yet)"
        return (f"Intel GPU found ({', '.join(self.hardware)}), but OpenVINO's GPU plugin does not see it: it needs "
                "Intel's OpenCL runtime (Debian/Ubuntu: apt-get install intel-opencl-icd; or Intel's compute-runtime "
                "release) and read access to /dev/dri")


def intel_gpus_on_pci(root: str = PCI_DEVICES) -> list[str]:
    """Intel display controllers on the PCI bus (Linux sysfs): "0000:00:02.0 (device 0x46a6)"."""
    found = []
    try:
        entries = sorted(os.listdir(root))
    except OSError:  # not Linux, or no sysfs
        return []
    for entry in entries:
        vendor, device, kind = (_read_hex(os.path.join(root, entry, name)) for name in ("vendor", "device", "class"))
        if vendor == INTEL_PCI_VENDOR and kind is not None and kind >> 16 == 0x03:  # PCI class 0x03: display
            found.append(f"{entry} (device 0x{device or 0:04x})")
    return found


def _read_hex(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip(), 16)
    except (OSError, ValueError):
        return None


def openvino_gpu_devices() -> list[str]:
    """OpenVINO's GPU devices with their names ("GPU.0: Intel(R) Arc(TM) A770 Graphics")."""
    try:
        core = _core()
        return [f"{d}: {core.get_property(d, 'FULL_DEVICE_NAME')}" for d in core.available_devices
                if d.startswith("GPU")]
    except Exception:  # noqa: BLE001  (no OpenVINO, or its GPU plugin cannot start: it sees no GPU)
        return []


def intel_gpu_report(pci_root: str = PCI_DEVICES) -> IntelGpuReport:
    from .iree.vulkan import INTEL_VENDOR_ID, vulkan_devices

    hardware = intel_gpus_on_pci(pci_root) or [d.name for d in vulkan_devices() if d.vendor_id == INTEL_VENDOR_ID]
    return IntelGpuReport(tuple(hardware), tuple(openvino_gpu_devices()))


__all__ = ["IntelGpuReport", "MAX_OPENVINO_WEIGHT_BYTES", "OpenVinoEngine", "OpenVinoExecutable", "intel_gpu_report",
           "intel_gpus_on_pci", "openvino_gpu_devices", "openvino_version", "policy_reason"]
