"""The interface every engine implements, as ONNX Runtime's execution providers do.

An engine answers three questions and keeps one promise:

- ``available()``: can it run on this machine at all (its package installed, its device present)?
- ``unsupported(model, subgraph, op_indices)``: which of these ops it cannot run, and why
  (op index -> reason); the planner gives each partition to the fastest engine that takes all its ops;
- ``compile(model, op_range, settings, cache)``: an :class:`Executable` for a run of ops, read from the
  compile cache when an entry for the same model, partition, shapes, settings and versions is there;
- an executable's ``run(inputs)`` returns the partition's outputs, numpy or device arrays, and says where they
  live (``where``: the host, or a device of the engine's own, with ``place`` to put an input there);
- an engine names the kernels that take over a partition it turns out unable to compile (``fallback``).

An engine describes itself in one :class:`EngineInfo` line of the registry (``registry.py``): its name, title,
role, install hint, devices, its part in the fast CPU path; the planner (``compile.plan``), the runtime
(``runtime``) and the command line read every table of engines from there, and make engines there by name.
Engines that run partitions the planner gives them in pieces (``fast_cpu="ops"``) may also say, while planning,
which would fail to compile (``compile_error``).

This module imports no engine: each engine is a module (or a package: ``xla/``, ``iree/``) of its own that
subclasses :class:`Engine` here, and the registry names them all; a new engine is one module and one line there.
Every partition runs through ``compile`` and its executable, the XLA engine's and the numpy reference's too; an
engine that also runs a whole subgraph as one program (its variables, its control flow: XLA, the reference) says so
with ``compile_subgraph``, and keeps what its programs share (XLA: the model's weights on each device, donation,
the generation loop's programs; the reference: the model's numpy runner).  What only some engines can do is asked
through optional capabilities that answer None where an engine lacks them (``Engine.weights``,
``Engine.placed``, ``Engine.profile_ops``, ``SubgraphProgram.device_program``, ``decode_loop`` and
``batched_decode``: ``decoding.py``), never by the engine's class or name.  Timing engines against each other is
``timing.py``'s.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..ops import Target
from .op_range import OpRange

if TYPE_CHECKING:  # annotations only: a warm start does not load the IR's classes
    from ..ir import Model, Operator, Subgraph

if TYPE_CHECKING:
    from .decoding import DecodeSignature, Sampling


@dataclasses.dataclass(frozen=True)
class EngineSettings:
    """What a compiled partition depends on besides the model: part of its cache key."""

    num_threads: int = 0            # 0: the engine's default (the physical cores, ``physical_cores``)
    precision: str = "fp32"         # "fp32", or a reduced precision the user asked for ("bf16", "fp16")
    approximate_integers: bool = False  # integer / hybrid ops may run with an engine's own int8 arithmetic
    exact_integers: bool = False        # integer / hybrid ops only on the exact TFLite kernels (not XNNPACK's)


# Where an executable takes its inputs and leaves its outputs when they are numpy arrays in host memory.
HOST = "host"


class Executable(abc.ABC):
    """A compiled partition (``XlaBackend`` has the same ``run``), as the runtime runs it
    (``runtime.partitioned``): its inputs are placed where ``where`` says, its outputs stay there."""

    op_range: OpRange
    # HOST, or a device of the engine's own that keeps its outputs (IREE's Vulkan or Metal memory): ``place``
    # puts an input there
    where: str = HOST

    @abc.abstractmethod
    def run(self, inputs: Sequence[Any]) -> list[Any]:
        """Outputs of the partition (``op_range.outputs`` order) for inputs in ``op_range.inputs`` order."""

    def prepare(self) -> None:
        """Compile for the declared input shapes now, where that may fail (``EngineCompileError``): the runtime
        then falls back before the first run (``Engine.fallback``).  Nothing by default: compiled at first run."""

    def output_shapes(self, input_shapes: Sequence[Sequence[int]]) -> list[tuple[tuple[int, ...], Any]] | None:
        """(shape, dtype) of each output for inputs of these shapes; None where the engine cannot tell (the
        runtime then traces the ops under XLA, without compiling them)."""
        return None

    def place(self, value: Any) -> tuple[Any, bool]:
        """``value`` where ``run`` takes it when ``where`` is not HOST, and whether that moved it between
        devices (a transfer).  The runtime places host inputs itself."""
        return value, False


class SubgraphProgram(abc.ABC):
    """A whole subgraph as one engine runs it (``Engine.compile_subgraph``) or as the runtime runs a plan in
    parts: what ``CompiledModel`` calls for a signature."""

    @abc.abstractmethod
    def run(self, inputs: Sequence[Any]) -> list[Any]:
        """The subgraph's outputs for its inputs, in the subgraph's order."""

    def output_shapes(self, input_shapes: Sequence[tuple[Sequence[int], Any]]
                      ) -> list[tuple[tuple[int, ...], Any]] | None:
        """(shape, dtype) of each output for inputs of these (shape, dtype); None: the declared shapes."""
        return None

    def reset_variables(self) -> None:
        """Resource variables back to their initial values."""

    # ---- optional capabilities of a program that runs the whole subgraph on one device (``decoding``) --------
    def device_program(self) -> Any:
        """This program where one device program runs all of the subgraph over weights on one device, with no
        resource variables (what ``decode_loop`` and ``batched_decode`` need); None elsewhere (another engine, a
        plan in parts)."""
        return None

    def decode_loop(self, signature: "DecodeSignature", chunk: int, sampling: "Sampling",
                    stop_tokens: tuple[int, ...], seed: int | None) -> Any:
        """Where this program is the decode signature run whole on a device: a loop making ``chunk`` tokens per
        launch there, each picked and fed back on the device (``litegpu.generate``).  It offers ``chunk``,
        ``stop_tokens``, ``device`` (where its caches live), ``carried(caches)`` (the per-layer caches as it
        carries them), ``run(carried, token, position, step, valid, stopped)`` (a chunk dispatched: tokens, the
        carried caches, the last token, whether a stop came; tokens past a stop are ``decoding.MASKED``) and
        ``per_layer(carried)``.  None: no such loop (a host engine, a plan in parts, resource variables)."""
        return None

    def batched_decode(self, signature: "DecodeSignature", steps_per_launch: int) -> Any:
        """Where this program is the decode signature run whole on a device: decode steps of many sequences in one
        program (``ContinuousBatcher``), ``steps_per_launch`` per launch, with slot counts of
        ``decoding.slot_buckets``.  It offers ``steps``, ``device``, ``empty(slots)``, ``stacked(caches)``,
        ``insert(state, slot, stacked, token)``, ``resize(state, sources)``, ``program(slots, sampled)`` and
        ``step(state, fed, floats, sampled)`` (``fed`` / ``floats``: [rows, slots] of ``decoding``'s rows).
        None: no such program."""
        return None


@dataclasses.dataclass(frozen=True)
class EngineInfo:
    """What an engine says of itself: every table of engines (the planner's names and titles, ``doctor``'s roles and
    install hints, the options' engine names, ``inspect``'s choices) is derived from these, through the registry
    (``registry.py``), without importing the engine's module (that is left for when the engine is asked for)."""

    name: str                     # its registered name, as plans, options and reports name it
    title: str                    # how a report names it: "LiteRT (XNNPACK)"
    role: str                     # what it runs in litegpu, for ``litegpu doctor``
    install: str                  # how to get it where it is missing
    # its class, or where to import it from: "package.module:Class" (".module:Class": relative to ``backends``)
    make: Any
    targets: tuple[Target, ...]   # the op rules its partitions carry in plans (``Partition.target``), its own first
    devices: tuple[str, ...] = ("CPU",)  # where its partitions run: "CPU", "GPU"
    # a candidate of the fast CPU path (``CpuOptions.engines``): "ops" takes the ops it converts as partitions
    # (OpenVINO: the planner asks ``unsupported`` and ``compile_error``), "whole" takes whole models where it is
    # timed faster (the official interpreter: the planner also asks ``model_refusal``, ``settings_refusal`` and
    # ``faster_than``, and keeps the verdicts in its own memo, ``compile.timing_memo``); None: not one
    fast_cpu: str | None = None
    # ``Options.devices`` may name several devices: XLA splits the weights over them; the numpy reference runs on
    # the host whatever they name.  Others run on one device, and a plan of theirs refuses several.
    many_devices: bool = False
    # it holds the model's weights for every device in one state each, stored in the model's precision (XLA): its
    # CPU partitions are made with the GPU's settings (the precision asked for), not the CPU engines' fp32
    one_weight_precision: bool = False
    # its partitions run litegpu's own op kernels (``ops/``: XLA's traced, the reference's numpy), which a profile
    # can time op by op; others run a partition as one program of their own
    own_kernels: bool = False
    # ``doctor``'s "available" column and what to add where the engine is installed but has no device here
    no_device: tuple[str, str] | None = None
    # Model Explorer overlay of its ops, per device: (label, colour)
    overlay: tuple[tuple[str, str, str], ...] = ()   # (device, label, colour)


@dataclasses.dataclass(frozen=True)
class EngineContext:
    """What an engine is made with besides its settings: the model's file (``file``; ``whole_file``: the model
    planned is that file as it is), its compile cache and key, and whether a software device may be used."""

    file: str | None = None
    whole_file: bool = True
    cache: Any = None
    cache_key: dict | None = None
    allow_software: bool = False
    # where the engine keeps the model's weights, for an engine that keeps them on a device (XLA): ``device``, a
    # function of a JAX platform ("cpu", "gpu") giving its device; ``devices``, platform -> the devices its
    # weights are split over; ``official_float_order``: float ops in the builtin kernels' order
    device: Any = None
    devices: Any = None
    official_float_order: bool = False
    # called with (subgraph, tensor, value) for every tensor a run computes, by an engine that can (the numpy
    # reference: the Interpreter's ``experimental_preserve_all_tensors``)
    observe: Any = None


class Engine(abc.ABC):
    name: str = ""
    target: Target
    settings: EngineSettings = EngineSettings()  # what it was made with (an engine sets its own)
    info: EngineInfo | None = None  # set by the registry on the engines it makes
    # The kernels that run a partition this engine turns out unable to compile (a graph its shape inference
    # refuses, an op its compiler fails on), on the CPU, with a warning naming its error: XLA with the op rules of
    # this target (numpy where XLA refuses an op); None: no fallback, the error reaches the caller.
    fallback: Target | None = None
    fallback_words = ""  # how the warning names them: "the exact kernels", "the CPU"
    # Its ``compile`` takes ``host_state``: the model's weights and variables as the runtime holds them on the
    # host (``backends.xla.state.XlaState``), shared with the model's CPU partitions (IREE uploads its GPU's from
    # there).
    shares_host_state = False
    # ``untimed``: the choices the engine would time while loading (the official interpreter's thread count) are
    # left to their default unless kept in the compile cache (``Options.engine_choice``: timed later, or never);
    # ``choice_pending``: one was left so, for this engine's models
    untimed = False
    choice_pending = False

    @classmethod
    def create(cls, settings: EngineSettings | None, context: EngineContext) -> "Engine":
        """A new engine for one model (``context``): what the registry calls.  By default made from its settings."""
        return cls(settings)  # type: ignore[call-arg]

    @classmethod
    def device_rows(cls, earlier: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """``litegpu doctor``'s rows for the devices this engine has of its own (``earlier``: the rows of the
        engines before it): each a dict of "device", "detail", "engines" and optionally "install".  None here."""
        return []

    @classmethod
    def max_model_bytes(cls) -> int | None:
        """The largest model, in weight bytes, it runs (past that it refuses the model); None: no bound of its own."""
        return None

    @classmethod
    def gpu_plan_line(cls, devices: Sequence[dict[str, Any]]) -> str | None:
        """Where ``doctor`` says GPU plans run, when this engine runs them here (``devices``: every device row)."""
        return None

    @abc.abstractmethod
    def available(self) -> bool:
        """Whether this machine can run the engine (its package imports, its device exists)."""

    def installed(self) -> bool:
        """Whether the engine may be available, asked without loading it: an engine whose ``available`` is
        costly (OpenVINO: importing it and starting its CPU plugin, 0.1-0.2 s) answers from its package being
        installed, and the planner asks ``available`` only once it needs the engine, so that a warm start
        the compile cache has decided does not load it."""
        return self.available()

    @abc.abstractmethod
    def unsupported(self, model: Model, subgraph: int, op_indices: Sequence[int]) -> dict[int, str]:
        """Op index -> why this engine cannot run it; ops not named are supported."""

    @abc.abstractmethod
    def compile(self, model: Model, op_range: OpRange, settings: EngineSettings, cache: Any = None,
                cache_key: dict | None = None) -> Executable:
        """An executable for ``op_range`` of ``model``."""

    def compile_subgraph(self, model: Model, subgraph: int, settings: EngineSettings, cache: Any = None,
                         cache_key: dict | None = None) -> "SubgraphProgram | None":
        """A program for the whole of ``subgraph`` (its variables, control flow and calls included), as a plan that
        gives this engine the whole model runs it; None: the engine runs plans by partitions (``compile``)."""
        return None

    def placed(self, platform: str, target: Target) -> "Engine":
        """This engine compiling for the JAX platform ``platform`` ("cpu", "gpu") with the op rules of ``target``
        (a GPU partition that falls back to the CPU keeps the GPU's rules), sharing what this one holds; itself
        where the engine has one device and its own rules."""
        return self

    def weights(self, model: Model, platform: str) -> Any:
        """``model``'s weights and variables as this engine holds them for ``platform`` (XLA's device state,
        ``backends.xla.state.XlaState``), made on first use: what an engine that ``shares_host_state`` reads, and
        what ``CompiledModel.weight_placement`` reports; None where it keeps none of its own."""
        return None

    # ---- the planner's questions: every engine is asked them; the defaults have no opinion -----------------
    def model_refusal(self, model: Model) -> str | None:
        """Why the engine would not run ``model`` whole (a fast CPU path engine of the "whole" role, asked before
        the planner times it), or None: no objection."""
        return None

    def settings_refusal(self, model: Model) -> str | None:
        """Why the engine may not run ``model`` or a part of it under its settings, known before loading it;
        None: no objection."""
        return None

    def faster_than(self, model: Model, op_ranges: Sequence[OpRange], other: "Engine", scope: str) -> str | None:
        """The name of the engine, this one or ``other``, that runs these partitions of ``model`` faster, timed
        now (``scope`` names them: the whole model, or one partition); None: no opinion (the planner then keeps
        ``other``).  The planner keeps the verdicts (``compile.timing_memo``)."""
        return None

    def compile_cache(self) -> tuple[Any, dict]:
        """The compile cache and the model's key in it that the engine was made with, where the planner keeps its
        verdicts on the engine; (None, {}) where it holds none."""
        return None, {}

    def policy_refusals(self, model: Model, subgraph: int, op_indices: Sequence[int]) -> dict[int, str]:
        """Op index -> why the engine's own policy keeps it off, known without loading the engine or converting
        the model (OpenVINO: state, integer arithmetic...); the ops not named may still be refused when asked
        ``unsupported``.  {}: no policy of its own."""
        return {}

    def compile_error(self, model: Model, op_range: OpRange) -> str | None:
        """Why ``op_range`` would fail to compile, found while planning (the planner then gives it to another
        engine), or None: it compiles, or the engine finds out only at run time."""
        return None

    def version(self) -> str:
        """The engine's version for cache keys, read without loading the engine where that is costly."""
        return ""

    def describe(self) -> str:
        """One line for ``litegpu doctor``: version and devices, or why it is missing."""
        return self.name

    def unavailable_reason(self) -> str:
        """Why ``available()`` is False here, for ``litegpu doctor``."""
        return "installed, but it cannot run here"

    def forget(self, model: Model) -> None:
        """Drop what was compiled for ``model`` while planning, when the plan gave it to another engine."""

    def reset_variables(self) -> None:
        """Resource variables of the models it runs back to their initial values (``reset_all_variables``)."""

    def profile_ops(self, model: Model, subgraph: int, inputs: Sequence[Any], repeats: int,
                    on_op: Any) -> "tuple[list[dict[str, Any]], float] | None":
        """``litegpu bench --profile``: each op of ``subgraph`` timed alone on the engine's device for ``inputs``
        (host arrays, the subgraph's order), ``on_op()`` called after each: (a record per op -- "index", "op",
        "kind" ("timed", "folded", "stateful"), "ms", "output_shapes" --, one dispatch's overhead in ms); None
        where the engine cannot time its ops one by one (it runs a partition as one program of its own)."""
        return None

    def placement_report(self) -> Any:
        """How the weights it keeps on an accelerator sit there (``backends.sharding.PlacementReport``); None
        where it keeps none there (the runtime then reports the weights its exact kernels hold, ``weights``)."""
        return None

    def file_record(self, executable: Any, file: str) -> dict | None:
        """What a later start needs, beside the model's ``file``, to make ``executable`` (one of this engine's,
        running a whole entry subgraph of that file as it is) again without reading the model into the IR
        (``runtime.warm_start``): JSON data, or None where the engine cannot."""
        return None

    def from_file_record(self, file: str, model: Any, record: dict, subgraph: int) -> "Executable":
        """The executable ``file_record`` described, from the file alone; ``model`` describes the subgraphs'
        inputs and outputs only (``runtime.warm_start.ModelSpec``)."""
        raise NotImplementedError(f"{self.name} keeps no file record")


def op_reasons(model: Model, subgraph: int, op_indices: Sequence[int], target: Target) -> dict[int, str]:
    from ..errors import UnsupportedOpError
    from ..ops import lookup

    sg = model.subgraphs[subgraph]
    found = {}
    for i in op_indices:
        op = sg.operators[i]
        try:
            reason = lookup(op).unsupported_reason(op, sg, target)
        except UnsupportedOpError as e:
            reason = str(e)
        if reason is not None:
            found[i] = reason
    return found


# Tensor dtypes that mean TFLite integer arithmetic when they carry a quantization (or always, for sub-byte weights).
SUB_BYTE_DTYPES = ("int4", "int2", "uint4")
QUANTIZED_DTYPES = ("int8", "uint8", "int16", *SUB_BYTE_DTYPES)


def integer_arithmetic(sg: Subgraph, op: Operator) -> bool:
    """Whether ``op`` computes with TFLite's integer (or hybrid, dynamic-range) arithmetic, where engines differ
    from the builtin kernels by a few units; DEQUANTIZE of a constant (weight-only quantization, float16
    weights) is exact in any engine."""
    tensors = [sg.tensors[t] for t in (*op.inputs, *op.outputs) if t >= 0]
    quantized = any(t.dtype in QUANTIZED_DTYPES and (
        t.dtype in SUB_BYTE_DTYPES or t.quantization is not None and t.quantization.is_affine)
        for t in tensors)
    return quantized and not is_weight_dequantize(sg, op)


def is_weight_dequantize(sg: Subgraph, op: Operator) -> bool:
    """A DEQUANTIZE of a constant: float16 or weight-only quantized weights made float."""
    return op.opcode_name == "DEQUANTIZE" and bool(op.inputs) and sg.tensors[op.inputs[0]].has_data \
        and sg.tensors[op.outputs[0]].dtype == "float32"


def cpu_name() -> str:
    """The CPU's model name (a timing verdict holds for one kind of CPU)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform  # only here: its import compiles a dozen regular expressions (a warm start's milliseconds)

    return platform.processor() or platform.machine()


@functools.lru_cache(maxsize=1)
def physical_cores() -> int:
    """The physical cores this process may run on: the default thread count of every engine, as ONNX Runtime,
    OpenVINO and PyTorch choose theirs (a second hardware thread of a core adds little to dense kernels and
    contends with the first).  Read from the kernel's CPU topology over the CPUs of the process's affinity mask;
    where there is no topology to read, every CPU the process may use."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        allowed = list(range(os.cpu_count() or 1))
    cores = set()
    for cpu in allowed:
        topology = f"/sys/devices/system/cpu/cpu{cpu}/topology"
        try:
            with open(f"{topology}/physical_package_id") as package, open(f"{topology}/core_id") as core:
                cores.add((package.read().strip(), core.read().strip()))
        except OSError:
            return max(1, len(allowed))
    return max(1, len(cores))


@functools.lru_cache(maxsize=None)
def installed_version(module: str, distribution: str) -> str:
    """The version of an installed package, read without importing it (a warm start's cache keys name the
    engines' versions, and importing one costs 60-200 ms): from the name of its ``<distribution>-<version>
    .dist-info`` directory beside the package, what ``importlib.metadata`` reads too, without its import and scan
    of every installed package (10-60 ms); ``importlib.metadata`` where the package is laid out otherwise.
    "not installed" where the module is missing."""
    import importlib.util

    spec = importlib.util.find_spec(module)
    if spec is None:
        return "not installed"
    prefix = distribution.replace("-", "_") + "-"
    for package in spec.submodule_search_locations or ():
        site = os.path.dirname(package)
        found = [n for n in os.listdir(site) if n.startswith(prefix) and n.endswith(".dist-info")]
        if len(found) == 1:
            return found[0][len(prefix):-len(".dist-info")]
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return "unknown"


__all__ = ["HOST", "Engine", "EngineContext", "EngineInfo", "EngineSettings", "Executable", "SubgraphProgram",
           "QUANTIZED_DTYPES", "SUB_BYTE_DTYPES", "cpu_name",
           "installed_version",
           "integer_arithmetic", "is_weight_dequantize", "op_reasons", "physical_cores"]
