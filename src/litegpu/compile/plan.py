"""The static delegation plan: which accelerator runs which op, decided from the IR alone.

With GPU (and CPU) requested, every op the GPU can run stays on the GPU and the
rest fall back to the CPU op by op: each op's ``unsupported_reason`` decides,
the ops are scheduled so that runs of the same accelerator stay together (a
topological order that switches accelerator only when nothing else is ready),
and each run becomes a :class:`Partition`.  Tensors that cross from one
partition to another are listed as :class:`Boundary` entries; the executor
(``litegpu.runtime.partitioned``) moves each of them once per destination.

A CPU-only plan in the exact modes keeps the model whole: XLA on the CPU when it
can run every op, the numpy reference backend otherwise.  The fast mode gives
OpenVINO the float ops it converts, XLA the rest, and then the whole model to
the official interpreter (XNNPACK) where that is faster (``_litert_is_faster``).
Models with resource variables are kept whole, because their state would
otherwise be split across backends.

Accelerators are the flag values of ``HardwareAccelerator`` (CPU=1, GPU=2,
NPU=4); :class:`Accelerator` mirrors them so that this module does not reach
up into runtime, and compares equal to ``HardwareAccelerator`` members.
"""

from __future__ import annotations

import enum
import heapq
import logging
import math
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..errors import AcceleratorUnavailableError, InvalidArgumentError, UnsupportedOpError
from ..ir import Model, Operator, Subgraph, entry_subgraphs, execution_order, numpy_dtype
from ..ir.macs import model_macs, ops_macs
from .choices import AT_LOAD, DEFERRED, ENGINE_CHOICES, SAME_OPS, TIMED, WHOLE, known_whole_choice, remember_timed
from .timing_memo import TimingMemo, kept
from .float_view import DATA_MOVEMENT_OPS
from ..backends import registry
from ..ops import Target, lookup

logger = logging.getLogger(__name__)
# A library must not print through logging's last-resort handler: the warnings module already tells the user.
logger.addHandler(logging.NullHandler())


class Accelerator(enum.IntFlag):
    """The HardwareAccelerator flag values, for the layers below runtime."""

    CPU = 1
    GPU = 2
    NPU = 4


CPU, GPU, NPU = Accelerator.CPU, Accelerator.GPU, Accelerator.NPU
_NAMES = {CPU: "CPU", GPU: "GPU", NPU: "NPU"}
# Ops that read or write resource variables: their state lives in one backend, so such models stay whole.
_VARIABLE_OPS = frozenset({"VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE"})
_STATEFUL_OPS = _VARIABLE_OPS | {"CALL_ONCE", "RANDOM_UNIFORM", "RANDOM_STANDARD_NORMAL", "MULTINOMIAL",
                                 "HASHTABLE", "HASHTABLE_FIND", "HASHTABLE_IMPORT", "HASHTABLE_SIZE"}


class PartialDelegationWarning(UserWarning):
    """Some ops of a model cannot run on the accelerator asked for and fall back to the CPU."""


@dataclass(frozen=True)
class UnsupportedOp:
    subgraph: int
    op_index: int
    opcode: str
    reason: str

    def __str__(self) -> str:
        where = f"#{self.op_index}" if self.subgraph == 0 else f"#{self.op_index} of subgraph {self.subgraph}"
        return f"{self.opcode} ({where}): {self.reason}"

    def message(self, accelerator: str = "GPU") -> str:
        """The LiteRT GPU delegate's wording: ``op NAME (#12) cannot be handled by the GPU: why``."""
        where = f"#{self.op_index}" if self.subgraph == 0 else f"#{self.op_index} of subgraph {self.subgraph}"
        return f"op {self.opcode} ({where}) cannot be handled by the {accelerator}: {self.reason}"


@dataclass(frozen=True)
class Partition:
    """A run of ops of one subgraph executed by one backend on one accelerator.

    ``inputs`` are the tensors it reads that something before it produced (the
    subgraph's inputs or another partition's outputs); ``outputs`` the tensors
    it produces that a later partition reads or that the subgraph returns.
    ``reasons`` says, for each of its ops that the preferred accelerator refused, why.
    """

    accelerator: Accelerator
    target: Target              # the op rules it was planned with (XLA_GPU, XLA_CPU, REFERENCE), or its engine's own
    subgraph_index: int
    op_indices: tuple[int, ...]
    reasons: tuple[UnsupportedOp, ...] = ()
    inputs: tuple[int, ...] = ()
    outputs: tuple[int, ...] = ()
    # The registered name of the engine that runs it (``backends.registry``): by default the engine whose
    # partitions carry ``target``.
    engine: str = ""

    def __post_init__(self) -> None:
        if not self.engine:
            object.__setattr__(self, "engine", registry.name_of(self.target))

    @property
    def subgraph(self) -> int:
        return self.subgraph_index

    @property
    def device(self) -> str:
        """"GPU" or "CPU"."""
        return _NAMES[Accelerator(self.accelerator)]

    def op_range(self):  # -> backends.graph.OpRange (imported lazily: compile sits above backends)
        from ..backends.graph import OpRange

        return OpRange(self.subgraph_index, self.op_indices, self.inputs, self.outputs)


@dataclass(frozen=True)
class Boundary:
    """A tensor produced by one partition and read by later ones: one transfer per destination device."""

    subgraph: int
    tensor: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    dynamic: bool                   # its shape signature has -1: the size is the declared shape's
    producer: int                   # index into DelegationPlan.partitions
    consumers: tuple[int, ...]

    def crosses_devices(self, plan: "DelegationPlan") -> bool:
        source = plan.partitions[self.producer].device
        return any(plan.partitions[c].device != source for c in self.consumers)


@dataclass(frozen=True)
class DelegationPlan:
    requested: int                                   # the accelerator flags asked for
    accelerator: str                                 # the preferred accelerator that runs the model: "GPU" or "CPU"
    target: Target                                   # that accelerator's backend
    partitions: tuple[Partition, ...]
    unsupported: tuple[UnsupportedOp, ...] = ()      # ops the preferred accelerator refused
    num_ops: int = 0
    notes: tuple[str, ...] = field(default=())
    boundaries: tuple[Boundary, ...] = ()
    # Whose numbers the model's integer and hybrid ops give, where that is not the builtin kernels' (the fast
    # CPU engines); ``litegpu run`` and ``bench`` print it, as the official default does not say it.
    numerics: str | None = None
    # The model its partitions index (set by ``plan``), and the model as read from its file where a rewrite
    # renumbered the ops (float view, XLA's rewrites, circle lowering): what ``node_data`` shows the plan on.
    model: Model | None = field(default=None, compare=False, repr=False)
    file_model: Model | None = field(default=None, compare=False, repr=False)
    engine: str = ""                                 # the main engine's registered name (by default: ``target``'s)
    # How the fast CPU path chose between the official interpreter and OpenVINO (``compile.choices``): known
    # without timing and how, or timed and when ("" where no such choice was made).  ``choice_settled`` False:
    # the official interpreter runs the model until the engines are timed (``Options.engine_choice``), or for
    # good where timing was turned off.
    choice: str = ""
    choice_settled: bool = True

    def __post_init__(self) -> None:
        if not self.engine:
            object.__setattr__(self, "engine", registry.name_of(self.target))

    def node_data(self) -> dict[str, Any]:
        """Model Explorer overlays of this plan, by name ("engine", "partition", "fallback"): each a
        ``compile.node_data.NodeData`` keyed by the file's graph and node ids (``.save(path)`` writes its JSON)."""
        from .node_data import plan_node_data  # its own module: the plan stays what decides

        if self.model is None:
            raise InvalidArgumentError("this plan was made without its model (compile.plan sets it)")
        return plan_node_data(self, self.model, self.file_model or self.model)

    @property
    def fully_accelerated(self) -> bool:
        """True when the model runs entirely on the preferred accelerator (the official meaning)."""
        return not self.unsupported and self.target is not Target.REFERENCE

    @property
    def is_split(self) -> bool:
        """More than one backend runs this model (GPU and CPU, or XLA and numpy)."""
        return len({(p.device, p.target) for p in self.partitions}) > 1

    def ops_on(self, accelerator: str | int) -> int:
        name = accelerator if isinstance(accelerator, str) else _NAMES[Accelerator(accelerator)]
        return sum(len(p.op_indices) for p in self.partitions if p.device == name)

    def partitions_of(self, subgraph: int) -> list[Partition]:
        return [p for p in self.partitions if p.subgraph_index == subgraph]

    def summary(self) -> str:
        """The LiteRT delegate's line, with the engines that run the CPU's share, and the GPU's where it is not
        XLA ("on the GPU (IREE)")."""
        gpu, cpu = self.ops_on("GPU"), self.ops_on("CPU")
        engines = self.ops_per_engine("CPU")
        detail = f" ({', '.join(f'{n} on {registry.title(e)}' for e, n in engines.items())})" if cpu else ""
        default_gpu = registry.named(device="GPU")[:1]  # "the GPU" alone: the GPU's first engine (XLA)
        gpu_engines = [registry.title(e) for e in self.ops_per_engine("GPU") if e not in default_gpu]
        where = f"the GPU ({', '.join(gpu_engines)})" if gpu_engines else "the GPU"
        return f"{gpu} operations will run on {where}, and the remaining {cpu} on the CPU{detail}"

    def ops_per_engine(self, device: str | None = None) -> dict[str, int]:
        """Engine name -> how many ops it runs (on ``device`` only, when given)."""
        counts: dict[str, int] = {}
        for p in self.partitions:
            if device is None or p.device == device:
                counts[p.engine] = counts.get(p.engine, 0) + len(p.op_indices)
        return counts

    def engine_summary(self) -> str:
        """``"150 ops on OpenVINO, 3 on XLA in 3 partitions"``: what runs where on the CPU."""
        counts = self.ops_per_engine()
        parts = ", ".join(f"{n} op{'s' if n != 1 else ''} on {registry.title(e)}" for e, n in counts.items())
        return f"{parts} in {len(self.partitions)} partition{'s' if len(self.partitions) != 1 else ''}"

    def transfer_bytes(self) -> int:
        """Bytes moved between devices per run (declared shapes), each tensor once per destination device."""
        total = 0
        for b in self.boundaries:
            source = self.partitions[b.producer].device
            total += b.nbytes * len({self.partitions[c].device for c in b.consumers} - {source})
        return total


# ---- support --------------------------------------------------------------------------------

def _accelerator_name(flags: int) -> str:
    return " | ".join(n for bit, n in _NAMES.items() if flags & bit) or "none"


def called_subgraphs(model: Model, op: Operator) -> list[int]:
    """Subgraphs an op runs (WHILE bodies, IF branches, CALL, composites, reducers)."""
    return [int(v) for k, v in op.options.items()
            if (k == "subgraph" or k.endswith("subgraph_index")) and isinstance(v, int) and 0 <= v < len(model.subgraphs)]


class _Support:
    """Why an op cannot run on a target, looking inside the subgraphs it calls; memoised."""

    def __init__(self, model: Model):
        self.model = model
        self._subgraphs: dict[tuple[int, Target], str | None] = {}

    def op_reason(self, sg: Subgraph, op: Operator, target: Target) -> str | None:
        try:
            reason = lookup(op).unsupported_reason(op, sg, target)
        except UnsupportedOpError as e:
            reason = str(e)
        if reason is not None:
            return reason
        for index in called_subgraphs(self.model, op):
            inner = self.subgraph_reason(index, target)
            if inner is not None:
                return f"calls subgraph {index}, where {inner}"
        return None

    def subgraph_reason(self, index: int, target: Target) -> str | None:
        key = (index, target)
        if key not in self._subgraphs:
            self._subgraphs[key] = None  # a recursive call sees "supported" rather than looping
            sg = self.model.subgraphs[index]
            for op in sg.operators:
                reason = self.op_reason(sg, op, target)
                if reason is not None:
                    self._subgraphs[key] = f"{op} {reason}"
                    break
        return self._subgraphs[key]


def _refusals(model: Model, target: Target) -> list[UnsupportedOp]:
    found = []
    for sg in model.subgraphs:
        for op in sg.operators:
            try:
                reason = lookup(op).unsupported_reason(op, sg, target)
            except UnsupportedOpError as e:
                reason = str(e)
            if reason is not None:
                found.append(UnsupportedOp(sg.index, op.index, op.opcode_name, reason))
    return found


def _refusal_message(model: Model, accelerator: str, refused: list[UnsupportedOp]) -> str:
    lines = "\n".join(f"  {r}" for r in refused)
    return f"{model.source}: {len(refused)} op(s) cannot run on the {accelerator}:\n{lines}"


# ---- partitioning ---------------------------------------------------------------------------

def _dependencies(sg: Subgraph, order: tuple[int, ...]) -> dict[int, set[int]]:
    """Op -> ops it must run after: its inputs' producers, and for stateful ops the previous stateful op."""
    producer = sg.producers()
    deps = {i: {producer[t] for t in sg.operators[i].inputs if t >= 0 and t in producer} for i in order}
    previous = None
    for i in order:
        if sg.operators[i].opcode_name in _STATEFUL_OPS:
            if previous is not None:
                deps[i].add(previous)
            previous = i
    return deps


def _schedule(sg: Subgraph, order: tuple[int, ...], side: dict[int, object]) -> list[int]:
    """A topological order that stays on one side (accelerator or engine) as long as any op for it is ready.

    Switching only when forced keeps independent ops of the same kind in one partition
    (a GPU op stored after a CPU op it does not depend on joins the GPU run before it).
    """
    position = {op: k for k, op in enumerate(order)}
    deps = _dependencies(sg, order)
    users: dict[int, list[int]] = {}
    waiting = {i: len(d) for i, d in deps.items()}
    for i, d in deps.items():
        for p in d:
            users.setdefault(p, []).append(i)
    ready: dict[object, list[tuple[int, int]]] = {k: [] for k in side.values()}
    for i in order:
        if waiting[i] == 0:
            heapq.heappush(ready[side[i]], (position[i], i))
    scheduled: list[int] = []
    current = side[order[0]] if order else None
    while any(ready.values()):
        if not ready.get(current):
            # the side whose next ready op comes first in the model's order
            current = min((k for k in ready if ready[k]), key=lambda k: ready[k][0])
        _, op = heapq.heappop(ready[current])
        scheduled.append(op)
        for u in users.get(op, ()):
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready[side[u]], (position[u], u))
    return scheduled


def _runs(items: Iterable[int], key) -> list[list[int]]:
    runs: list[list[int]] = []
    for i in items:
        if runs and key(runs[-1][-1]) == key(i):
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def _cpu_targets(run: list[int], cpu_ok: dict[int, set[Target]], whole_reference: bool = True
                 ) -> list[tuple[Target, list[int]]]:
    """One backend for a CPU run when one can take all of it (XLA first; numpy only with
    ``whole_reference``); split by op otherwise."""
    for target in (Target.XLA_CPU, Target.REFERENCE) if whole_reference else (Target.XLA_CPU,):
        if all(target in cpu_ok[i] for i in run):
            return [(target, run)]
    pick = {i: Target.XLA_CPU if Target.XLA_CPU in cpu_ok[i] else Target.REFERENCE for i in run}
    return [(pick[r[0]], r) for r in _runs(run, pick.__getitem__)]


def _with_edges(sg: Subgraph, parts: list[tuple[Accelerator, Target, list[int], tuple[UnsupportedOp, ...], str]]
                ) -> list[Partition]:
    """The partitions of ``parts`` (accelerator, target, ops, reasons, engine name: "" for the target's)."""
    producer_part: dict[int, int] = {}
    for k, (_, _, ops, _, _) in enumerate(parts):
        for i in ops:
            for t in sg.operators[i].outputs:
                if t >= 0:
                    producer_part[t] = k
    read_by: dict[int, set[int]] = {}
    for k, (_, _, ops, _, _) in enumerate(parts):
        for i in ops:
            for t in sg.operators[i].inputs:
                if t >= 0:
                    read_by.setdefault(t, set()).add(k)
    subgraph_inputs = set(sg.inputs)
    result = []
    for k, (acc, target, ops, reasons, engine) in enumerate(parts):
        inputs = sorted({t for t in _reads(sg, ops)
                         if (t in subgraph_inputs or producer_part.get(t, k) != k) and sg.tensors[t].data is None
                         and not sg.tensors[t].is_variable})
        outputs = sorted({t for t, p in producer_part.items()
                          if p == k and (t in sg.outputs or any(c != k for c in read_by.get(t, ())))})
        result.append(Partition(acc, target, sg.index, tuple(ops), reasons, tuple(inputs), tuple(outputs), engine))
    return result


def _reads(sg: Subgraph, ops: list[int]) -> list[int]:
    return [t for i in ops for t in sg.operators[i].inputs if t >= 0]


def _boundaries(model: Model, partitions: list[Partition]) -> list[Boundary]:
    found = []
    for k, p in enumerate(partitions):
        sg = model.subgraphs[p.subgraph_index]
        for t in p.outputs:
            consumers = tuple(c for c, q in enumerate(partitions)
                              if c != k and q.subgraph_index == p.subgraph_index and t in q.inputs)
            if not consumers:
                continue
            tensor = sg.tensors[t]
            itemsize = 0 if tensor.dtype == "string" else np.dtype(numpy_dtype(tensor.dtype)).itemsize
            found.append(Boundary(sg.index, t, tensor.name, tensor.shape, tensor.dtype,
                                  math.prod(tensor.shape) * itemsize, tensor.is_dynamic, k, consumers))
    return found


def _uses_variables(model: Model) -> bool:
    return any(op.opcode_name in _VARIABLE_OPS for sg in model.subgraphs for op in sg.operators) or any(
        t.is_variable for sg in model.subgraphs for t in sg.tensors)


def _split(model: Model, flags: int, gpu_engine: object | None = None) -> DelegationPlan:
    """GPU where each op allows it, CPU for the rest; raises if an op runs nowhere."""
    support = _Support(model)
    gpu_target, gpu_name = _gpu_target(gpu_engine), _gpu_name(gpu_engine)
    partitions: list[Partition] = []
    refused: list[UnsupportedOp] = []
    nowhere: list[UnsupportedOp] = []
    num_ops = 0
    for index in entry_subgraphs(model):
        sg = model.subgraphs[index]
        order = execution_order(sg, model.source)
        num_ops += len(order)
        side: dict[int, Accelerator] = {}
        cpu_ok: dict[int, set[Target]] = {}
        why: dict[int, UnsupportedOp] = {}
        engine_refused = gpu_engine.unsupported(model, index, order) if gpu_engine is not None else {}
        for i in order:
            op = sg.operators[i]
            reason = support.op_reason(sg, op, Target.XLA_GPU) or engine_refused.get(i)
            if reason is None:
                side[i] = GPU
                continue
            why[i] = UnsupportedOp(index, i, op.opcode_name, reason)
            refused.append(why[i])
            side[i] = CPU
            cpu_ok[i] = {t for t in (Target.XLA_CPU, Target.REFERENCE) if support.op_reason(sg, op, t) is None}
            if not cpu_ok[i]:
                nowhere.append(UnsupportedOp(index, i, op.opcode_name,
                                             support.op_reason(sg, op, Target.REFERENCE) or reason))
        parts = []
        for run in _runs(_schedule(sg, order, side), side.__getitem__):
            if side[run[0]] == GPU:
                parts.append((GPU, gpu_target, run, (), gpu_name))
                continue
            for target, ops in _cpu_targets(run, cpu_ok) if not nowhere else [(Target.REFERENCE, run)]:
                parts.append((CPU, target, ops, tuple(why[i] for i in ops), ""))
        partitions.extend(_with_edges(sg, parts))
    if nowhere:
        raise UnsupportedOpError(_refusal_message(model, "CPU", nowhere))
    return DelegationPlan(flags, "GPU", gpu_target, tuple(partitions), tuple(refused), num_ops,
                          boundaries=tuple(_boundaries(model, partitions)), engine=gpu_name)


def _gpu_target(gpu_engine: object | None) -> Target:
    """The target of GPU partitions: XLA's, or the GPU engine's (``backends.iree``)."""
    return Target.XLA_GPU if gpu_engine is None else gpu_engine.target


def _gpu_name(gpu_engine: object | None) -> str:
    """The registered name of the GPU partitions' engine ("": XLA's, named by its target)."""
    return "" if gpu_engine is None else gpu_engine.name


def _gpu_refusals(model: Model, gpu_engine: object | None) -> list[UnsupportedOp]:
    """The ops the GPU refuses: XLA's GPU rules, and the GPU engine's own where the GPU is not XLA's."""
    found = _refusals(model, Target.XLA_GPU)
    if gpu_engine is None:
        return found
    known = {(u.subgraph, u.op_index) for u in found}
    for sg in model.subgraphs:
        for i, reason in sorted(gpu_engine.unsupported(model, sg.index, range(len(sg.operators))).items()):
            if (sg.index, i) not in known:
                found.append(UnsupportedOp(sg.index, i, sg.operators[i].opcode_name, reason))
    return found


def _whole_model(model: Model, accelerator: Accelerator, target: Target, engine: str = "") -> tuple[Partition, ...]:
    parts = []
    for index in entry_subgraphs(model):
        sg = model.subgraphs[index]
        ops = tuple(execution_order(sg, model.source))
        parts.append(Partition(accelerator, target, index, ops, (), tuple(sg.inputs), tuple(sg.outputs), engine))
    return tuple(parts)


def _count(model: Model) -> int:
    return sum(len(model.subgraphs[i].operators) for i in entry_subgraphs(model))


# ---- warnings -------------------------------------------------------------------------------

def _warn(message: str, stacklevel: int) -> None:
    logger.warning(message)
    warnings.warn(message, PartialDelegationWarning, stacklevel=stacklevel + 1)


def warn_fallbacks(plan: DelegationPlan, stacklevel: int = 2) -> None:
    """As the LiteRT GPU delegate reports it: one line per op kind the GPU refused, then the op counts."""
    first: dict[str, UnsupportedOp] = {}
    count: dict[str, int] = {}
    for u in plan.unsupported:
        first.setdefault(u.opcode, u)
        count[u.opcode] = count.get(u.opcode, 0) + 1
    for opcode, u in first.items():
        more = count[opcode] - 1
        _warn(u.message("GPU") + (f" (and {more} more {opcode} op{'s' if more > 1 else ''})" if more else ""),
              stacklevel + 1)
    _warn(plan.summary(), stacklevel + 1)


# ---- the plan -------------------------------------------------------------------------------

def plan(model: Model, accelerators: int = CPU, *, warn: bool = True, cpu_kernels: str = "fast",
         engines: dict | None = None, gpu_engine: object | None = None, stacklevel: int = 2,
         engine_choice: str = AT_LOAD) -> DelegationPlan:
    """Decide where ``model`` runs for the requested accelerator flags, without touching a device.

    ``cpu_kernels`` picks the CPU engines (``CpuOptions.kernel_mode``): "fast" gives each op OpenVINO
    where it converts it and the policy allows (``backends.openvino``), XLA otherwise; "builtin" keeps
    the exact TFLite kernels on XLA (integers bit for bit); "reference" runs the numpy interpreter.
    With "fast", a whole model goes to the official interpreter (``backends.litert``) where that is faster
    (``_litert_is_faster``).  ``engines`` passes the engine objects to use by name (holding the model's
    compile cache; ``backends.registry.fast_cpu_engines``); None: OpenVINO if installed, not the official
    interpreter (planning then times nothing).  ``gpu_engine``: the engine of the GPU partitions when it is
    not XLA (``backends.iree.engine.IreeEngine``: Vulkan and Metal GPUs); the ops it refuses fall back to the CPU.
    ``engine_choice`` (``compile.choices``): where the fast CPU path's choice between the official interpreter
    and OpenVINO is not known without timing, time them now ("load"), or plan the official interpreter with
    ``choice_settled`` False ("deferred": the runtime times them later; "never").

    Raises ``UnsupportedOpError`` when no allowed accelerator can run the model,
    and ``AcceleratorUnavailableError`` for NPU-only requests (litegpu has no NPU backend).
    """
    return replace(_decide(model, accelerators, warn=warn, cpu_kernels=cpu_kernels, engines=engines,
                           gpu_engine=gpu_engine, stacklevel=stacklevel + 1, engine_choice=engine_choice), model=model)


def _decide(model: Model, accelerators: int, *, warn: bool, cpu_kernels: str, engines: dict | None,
            gpu_engine: object | None, stacklevel: int, engine_choice: str = AT_LOAD) -> DelegationPlan:
    if cpu_kernels not in CPU_KERNELS:
        raise InvalidArgumentError(f"unknown CPU kernels {cpu_kernels!r}; use one of {', '.join(CPU_KERNELS)}")
    if engine_choice not in ENGINE_CHOICES:
        raise InvalidArgumentError(f"unknown engine choice {engine_choice!r}; use one of {', '.join(ENGINE_CHOICES)}")
    flags = int(accelerators)
    if flags & ~(CPU | GPU | NPU) or flags == 0:
        raise InvalidArgumentError(f"unknown hardware accelerator flags {flags!r} (use CPU=1, GPU=2, NPU=4)")
    if flags & NPU and not flags & (CPU | GPU):
        raise AcceleratorUnavailableError("litegpu has no NPU backend; ask for GPU and/or CPU "
                                          "(HardwareAccelerator.NPU | HardwareAccelerator.CPU falls back to CPU)")
    notes: list[str] = []
    if flags & GPU:
        gpu_target, gpu_name = _gpu_target(gpu_engine), _gpu_name(gpu_engine)
        gpu_refused = _gpu_refusals(model, gpu_engine)
        if not gpu_refused:
            return DelegationPlan(flags, "GPU", gpu_target, _whole_model(model, GPU, gpu_target, gpu_name),
                                  num_ops=_count(model), engine=gpu_name)
        if not flags & CPU:
            raise UnsupportedOpError(_refusal_message(model, "GPU", gpu_refused)
                                     + "\nadd HardwareAccelerator.CPU to run the model on the CPU instead")
        if not _uses_variables(model):
            split = _split(model, flags, gpu_engine)
            if split.unsupported:
                if warn:
                    warn_fallbacks(split, stacklevel=stacklevel)
                return split
            return DelegationPlan(flags, "GPU", gpu_target, _whole_model(model, GPU, gpu_target, gpu_name),
                                  num_ops=split.num_ops, engine=gpu_name)
        notes.append(f"{_refusal_message(model, 'GPU', gpu_refused)}\nthe model has resource variables, so it is "
                     "kept whole on the CPU rather than split between GPU and CPU")
    whole = _cpu_plan(model, flags, cpu_kernels, engines, engine_choice)
    result = DelegationPlan(whole.requested, whole.accelerator, whole.target, whole.partitions,
                            tuple(_gpu_refusals(model, gpu_engine)) if flags & GPU else (), whole.num_ops,
                            tuple(notes) + whole.notes, numerics=_numerics(model, whole.partitions), engine=whole.engine,
                            choice=whole.choice, choice_settled=whole.choice_settled)
    if warn:
        for note in result.notes:
            _warn(note, stacklevel=stacklevel)
    return result


@dataclass(frozen=True)
class PlannedModel:
    """A plan with the model its partitions index: the model asked about, or that model with its circle-only
    ops lowered to TFLite builtin ops (``lowered``) for the engines that read TFLite only."""

    plan: DelegationPlan
    model: Model
    engines: dict | None     # the engines that planned it (they hold what they compiled for ``model``)
    lowered: bool = False


# What a compile cache keeps apart for a model whose circle-only ops were lowered: the rewrite keeps the model's
# token but renumbers its ops, and partitions are cached by op indices.
# (The value names what the lowering rewrites: a lowering that rewrites more renumbers other ops, issue 38's ggml
# weights.)
LOWERED_CACHE_KEY = {"circle_ops": "lowered to TFLite builtins (compile.circle_lowering), ggml weights too"}


def plan_model(model: Model, accelerators: int = CPU, *, warn: bool = True, cpu_kernels: str = "fast",
               engines: dict | None = None, lowered_engines: Any = None,
               gpu_engine: object | None = None, engine_choice: str = AT_LOAD) -> PlannedModel:
    """``plan``, and on the fast CPU path for a model with circle-only ops that have builtin lowerings
    (``compile.circle_lowering``): the lowered model planned too, kept where the official interpreter or OpenVINO
    then runs any of it (else XLA runs the original, exact ops whole, as before).  ``lowered_engines()`` makes the
    engines for the lowered model, their cache entries kept apart (``LOWERED_CACHE_KEY``); None: ``engines``."""
    from .circle_lowering import lower_circle_ops

    flags = int(accelerators)
    if cpu_kernels == "fast" and not flags & GPU and engines:  # a GPU plan runs circle-only ops on the GPU
        lowered = lower_circle_ops(model)
        if lowered is not model:
            twin = lowered_engines() if lowered_engines is not None else engines
            candidate = plan(lowered, flags, warn=False, cpu_kernels=cpu_kernels, engines=twin,
                             engine_choice=engine_choice)
            if any(_on_fast_engine(p) for p in candidate.partitions) \
                    and _lowered_is_faster(model, candidate, lowered, twin, engines):
                logger.info("%s: circle-only ops lowered to TFLite builtin ops: %s", model.source,
                            candidate.engine_summary())
                if warn:
                    for note in candidate.notes:
                        _warn(note, stacklevel=2)  # plan_model's caller
                return PlannedModel(candidate, lowered, twin, lowered=True)
            for engine in twin.values():
                engine.forget(lowered)
    # warnings name plan_model's caller, as plan's name its own
    return PlannedModel(plan(model, flags, warn=warn, cpu_kernels=cpu_kernels, engines=engines,
                             gpu_engine=gpu_engine, stacklevel=3, engine_choice=engine_choice), model, engines)


def _on_fast_engine(p: Partition) -> bool:
    """Whether a fast CPU engine runs ``p`` (``CpuOptions.engines``'s candidates: not XLA or numpy)."""
    return p.engine in registry.named(fast_cpu=True)


def _lowered_is_faster(model: Model, candidate: DelegationPlan, lowered: Model, engines: dict,
                       original_engines: dict) -> bool:
    """Whether the lowered model on the fast engines (``candidate``) runs faster than XLA runs the original
    whole, timed alternately on sample inputs where the fast engines take all of it and it is small enough to
    time (``LITERT_MEASURE_MAX_MACS``).  A plan that keeps XLA partitions (ops without a lowering) is not timed:
    its fast-engine runs already hold real work (``MIN_OPENVINO_RUN_MACS``), which XLA's kernels run slower
    (BENCHMARKS.md); nor is a bigger model, for the same reason.  A tiny model is where the answer varies:
    XNNPACK's call costs about 4 us where XLA's costs 40, but a small decoder of 124 builtin ops ran 0.087 ms
    on XNNPACK (2 threads) against 0.068 on XLA (BENCHMARKS.md, circle models)."""
    from ..backends.timing import fastest, sample_inputs
    from ..errors import LiteGpuError

    if not all(_on_fast_engine(p) for p in candidate.partitions) \
            or model_macs(lowered) > LITERT_MEASURE_MAX_MACS:
        return True
    fast = []
    for p in candidate.partitions:
        engine = engines[p.engine]
        try:
            fast.append((engine.compile(lowered, p.op_range(), engine.settings, getattr(engine, "cache", None),
                                        getattr(engine, "cache_key", None)), sample_inputs(lowered, p.op_range())))
        except LiteGpuError as e:  # it would fail at run time too: XLA runs the original
            logger.info("%s: %s", model.source, e)
            return False
    # XLA's program for the original, in the original's compile cache entries: a warm start does not compile it
    reference = next(iter(original_engines.values()))
    exact_kernels = registry.name_of(Target.XLA_CPU)
    xla, settings = registry.engine(exact_kernels), reference.settings
    exact = []
    for p in _whole_model(model, CPU, Target.XLA_CPU):
        exact.append((xla.compile(model, p.op_range(), settings, getattr(reference, "cache", None),
                                  getattr(reference, "cache_key", None)), sample_inputs(model, p.op_range())))
    # Blocks of calls: one call each in turn times a multi-threaded XNNPACK waking its idle threads after every XLA
    # call (a 0.006 ms model timed at 0.033 ms), not the back-to-back calls a model serves.
    winner, medians = fastest({"lowered": fast * TIMED_BLOCK_CALLS, exact_kernels: exact * TIMED_BLOCK_CALLS})
    logger.info("%s: circle-only ops lowered (%s) against XLA: %s", model.source, candidate.engine_summary(),
                ", ".join(f"{n} {t / TIMED_BLOCK_CALLS * 1e3:.4f} ms" for n, t in medians.items()))
    return winner == "lowered"


def _cpu_plan(model: Model, flags: int, cpu_kernels: str = "builtin", engines: dict | None = None,
              engine_choice: str = AT_LOAD) -> DelegationPlan:
    if cpu_kernels == "reference":
        reference_refused = _refusals(model, Target.REFERENCE)
        if reference_refused:
            raise UnsupportedOpError(_refusal_message(model, "numpy reference backend", reference_refused))
        return DelegationPlan(flags, "CPU", Target.REFERENCE, _whole_model(model, CPU, Target.REFERENCE),
                              num_ops=_count(model))
    if cpu_kernels != "fast":
        return _exact_cpu_plan(model, flags)
    # engines given are the ones to use (CpuOptions.engines); without any, OpenVINO where it is installed
    # the candidates by role (``backends.registry``): one that takes the ops it converts, one that takes whole models
    ops_engine = registry.fast_cpu_role(engines, "ops") if engines is not None else _installed_ops_engine()
    whole_engine = registry.fast_cpu_role(engines or {}, "whole")
    # what is known without timing (compile.choices): a verdict kept by an earlier start, the op mix, the size
    known = known_whole_choice(model, whole_engine, ops_engine) if whole_engine is not None and ops_engine is not None else None
    if known is not None and known[0] == whole_engine.name and whole_engine.model_refusal(model) is None:
        logger.info("%s: the official interpreter runs it whole: %s", model.source, known[1])
        return replace(_litert_whole(model, flags, whole_engine, ops_engine, remember=known[1] == SAME_OPS),
                       choice=known[1])
    if known is None and engine_choice != AT_LOAD and _would_time(model, whole_engine, ops_engine):
        logger.info("%s: the official interpreter runs it whole; the engines are %s", model.source,
                    "timed later" if engine_choice == DEFERRED else "not timed")
        return replace(_litert_plan(model, flags, whole_engine), choice_settled=False,
                       choice="the official interpreter until the engines are timed (after as much time in calls "
                              "as the timing costs)" if engine_choice == DEFERRED else
                              "the official interpreter, the engines not timed (engine_choice='never')")

    def takes_whole() -> bool:
        """Whether the official interpreter loads the model, asked where it matters (it loads the model to answer,
        and packs its weights): a verdict for OpenVINO was reached where it did, and is not asked again."""
        return whole_engine is not None and ((known is not None and known[0] != whole_engine.name)
                                       or whole_engine.model_refusal(model) is None)

    if ops_engine is None and takes_whole():
        return _litert_plan(model, flags, whole_engine)  # no other fast engine: XLA's exact kernels would only be slower
    if ops_engine is not None and not ops_engine.available():  # installed (fast_cpu_engines), but cannot start here
        logger.info("OpenVINO is installed but cannot run here: the fast CPU path goes without it")
        ops_engine = None
    try:
        chosen = _fast_cpu_plan(model, flags, ops_engine) or _exact_cpu_plan(model, flags)
    except UnsupportedOpError:
        if not takes_whole():
            raise
        return _litert_whole(model, flags, whole_engine, ops_engine)  # ops litegpu lacks, which the interpreter has
    if whole_engine is None:
        return chosen
    faster, keep = _litert_is_faster(model, chosen, whole_engine, ops_engine, known)
    how = known[1] if known is not None else _how_chosen(model, chosen, ops_engine)
    if faster and takes_whole():
        return replace(_litert_whole(model, flags, whole_engine, ops_engine, remember=keep), choice=how)
    whole_engine.forget(model)  # the interpreter made to time it
    if chosen.is_split and ops_engine is not None and whole_engine.settings_refusal(model) is None:
        mixed = _litert_partitions(model, chosen, whole_engine, ops_engine)
        if ops_engine.name not in {p.engine for p in mixed.partitions} and takes_whole():
            # OpenVINO kept nothing: the ops it refused run on the interpreter's own kernels too, instead of
            # XLA partitions with a boundary each side (selfie segmentation: 0.81 -> 1.0x XNNPACK)
            for p in mixed.partitions:
                whole_engine.forget(model, p.op_range())
            ops_engine.forget(model)
            # a warm start plans it without OpenVINO
            TimingMemo(whole_engine, ops_engine).remember(model, WHOLE, whole_engine.name)
            return replace(_litert_plan(model, flags, whole_engine), choice=how)
        return replace(mixed, choice=how)
    return replace(chosen, choice=how) if ops_engine is not None else chosen


def _how_chosen(model: Model, chosen: DelegationPlan, ops_engine: Any) -> str:
    """How ``_litert_is_faster`` and ``_litert_partitions`` chose where nothing was known (``DelegationPlan.choice``):
    by timing, unless OpenVINO had no part to be timed on or the model is past the size that is timed."""
    if ops_engine is None or ops_engine.name not in {p.engine for p in chosen.partitions}:
        return "the official interpreter against litegpu's exact kernels alone: untimed (it is faster on all but big float models)"
    if model_macs(model) > LITERT_MEASURE_MAX_MACS and {p.engine for p in chosen.partitions} == {ops_engine.name}:
        return f"a big model (past {LITERT_MEASURE_MAX_MACS / 1e9:.0f} G multiply-accumulates a run): OpenVINO, untimed"
    return TIMED


def _would_time(model: Model, whole_engine: Any, ops_engine: Any) -> bool:
    """Whether planning ``model`` would time the official interpreter against OpenVINO (or convert it for
    OpenVINO to find out whether it may): both engines here, the interpreter able to run it whole, no resource
    variables (their state lives in one engine: the interpreter keeps such a model untimed), and not so big that
    OpenVINO takes it untimed (``LITERT_MEASURE_MAX_MACS``)."""
    return whole_engine is not None and ops_engine is not None and not _uses_variables(model) \
        and model_macs(model) <= LITERT_MEASURE_MAX_MACS and whole_engine.model_refusal(model) is None


# Integer ops whose results no engine computes otherwise: they move stored values (the float view's list), look up
# rows of a table, or dequantize a value exactly.
_SAME_IN_EVERY_ENGINE = DATA_MOVEMENT_OPS | {"EMBEDDING_LOOKUP", "DEQUANTIZE"}


def _numerics(model: Model, partitions: Iterable[Partition]) -> str | None:
    """What ``DelegationPlan.numerics`` says: which fast engines run integer or hybrid (dynamic-range, int4) ops,
    whose numbers then differ from the builtin kernels' (None: none do)."""
    from ..backends.engine import integer_arithmetic

    hybrid, integer = set(), set()
    for p in partitions:
        if not _on_fast_engine(p):
            continue
        sg = model.subgraphs[p.subgraph_index]
        for i in p.op_indices:
            op = sg.operators[i]
            if integer_arithmetic(sg, op) and op.opcode_name not in _SAME_IN_EVERY_ENGINE:
                out = sg.tensors[op.outputs[0]] if op.outputs and op.outputs[0] >= 0 else None
                (hybrid if out is not None and out.dtype == "float32" else integer).add(registry.title(p.engine))
    if not hybrid and not integer:
        return None
    said = []
    if hybrid:
        said.append(f"dynamic-range (hybrid) ops on {' and '.join(sorted(hybrid))}, as the official default runs "
                    "them: an ulp of difference in a layer's input can move its int8 quantization by a step, so on "
                    "deep models with sharp weights the outputs can be far from the builtin kernels' (a decode step of "
                    "litert-torch's dynamic_int8 SmolLM export: 6 % of the largest logit)")
    if integer:
        said.append(f"integer ops on {' and '.join(sorted(integer))}'s int8 kernels: a few units from the builtin "
                    "kernels'")
    return "; ".join(said) + ". The builtin kernels' numbers: --kernel-mode builtin " \
        "(CpuOptions(kernel_mode=CpuKernelMode.BUILTIN))"


def _exact_cpu_plan(model: Model, flags: int) -> DelegationPlan:
    """The whole model on the exact kernels: XLA, or numpy when XLA refuses an op."""
    target = Target.XLA_CPU
    notes = []
    cpu_refused = _refusals(model, Target.XLA_CPU)
    if cpu_refused:
        reference_refused = _refusals(model, Target.REFERENCE)
        if reference_refused:
            raise UnsupportedOpError(_refusal_message(model, "CPU", reference_refused))
        target = Target.REFERENCE
        notes.append(_refusal_message(model, "XLA CPU backend", cpu_refused)
                     + "\nthe model runs op by op on the numpy reference backend (slow)")
    return DelegationPlan(flags, "CPU", target, _whole_model(model, CPU, target), num_ops=_count(model),
                          notes=tuple(notes))


def _litert_whole(model: Model, flags: int, whole_engine: object, ops_engine: object | None, remember: bool = True
                  ) -> DelegationPlan:
    """The whole model on the official interpreter, decided by timing or without it (XLA alone would run it
    slower, or lacks an op): the verdict is kept in the compile cache (``remember``: unless it was read from there
    or a rule gave it, ``compile.choices``), so that a warm start plans the model without loading OpenVINO and
    without asking which ops XLA supports."""
    if ops_engine is not None:
        ops_engine.forget(model)  # the partitions compiled to plan and time it
        if remember:
            TimingMemo(whole_engine, ops_engine).remember(model, WHOLE, whole_engine.name)
    return _litert_plan(model, flags, whole_engine)


def _litert_plan(model: Model, flags: int, whole_engine: Any) -> DelegationPlan:
    """The whole model on ``whole_engine`` (the official interpreter)."""
    target, name = whole_engine.target, whole_engine.name
    return DelegationPlan(flags, "CPU", target, _whole_model(model, CPU, target, name), num_ops=_count(model),
                          engine=name)


def _litert_is_faster(model: Model, chosen: DelegationPlan, whole_engine: object, ops_engine: object | None,
                      known: tuple[str, str] | None = None) -> tuple[bool, bool]:
    """Whether the official interpreter (XNNPACK) should run the whole model instead of ``chosen``, and whether
    that answer is to be kept in the compile cache (not where a timing could not tell: ``compile.choices.kept``).

    - Against XLA (and numpy) alone -- integer models, resource variables, ops OpenVINO refuses --
      yes without measuring: XLA's exact kernels ran slower than XNNPACK on 32 of the 36 models measured
      (BENCHMARKS.md, "exact" column), and faster only on big float models, which OpenVINO takes.
    - Against a model split between OpenVINO and XLA: not here; ``_litert_partitions`` times OpenVINO's
      partitions against the interpreter, and the whole model goes to it when OpenVINO keeps none.
    - Against OpenVINO alone: the verdict ``known`` without timing (``compile.choices``), else measured on
      models of at most ``LITERT_MEASURE_MAX_MACS``; which is faster depends on the CPU and the model
      (BENCHMARKS.md: OpenVINO wins on big CNNs, XNNPACK on small mobile CNNs, and on transformers on one
      machine but not the other); OpenVINO ran faster on every bigger model.
    """
    used = {p.engine for p in chosen.partitions}
    if ops_engine is None or ops_engine.name not in used:
        return True, True
    if used != {ops_engine.name}:
        return False, True
    if known is not None:
        if known[1] == SAME_OPS:  # this model's own from now on
            TimingMemo(whole_engine, ops_engine).remember(model, WHOLE, known[0])
        return known[0] == whole_engine.name, True
    if model_macs(model) > LITERT_MEASURE_MAX_MACS:
        return False, True
    winner = TimingMemo(whole_engine, ops_engine).faster(model, [p.op_range() for p in chosen.partitions], WHOLE)
    remember_timed(model, whole_engine, ops_engine, winner)
    return winner == whole_engine.name, kept(winner)


def _litert_partitions(model: Model, chosen: DelegationPlan, whole_engine: object, ops_engine: object) -> DelegationPlan:
    """A model split between OpenVINO and XLA: each OpenVINO partition timed against the official interpreter
    running the same ops as a sub-model, and given to the faster."""
    partitions, memo = [], TimingMemo(whole_engine, ops_engine)
    for p in chosen.partitions:
        if p.engine == ops_engine.name \
                and ops_macs(model.subgraphs[p.subgraph_index], p.op_indices) <= LITERT_MEASURE_MAX_MACS \
                and memo.faster(model, [p.op_range()], str(p.op_range())) == whole_engine.name:
            p = replace(p, target=whole_engine.target, engine=whole_engine.name)
        partitions.append(p)
    used = {p.engine for p in partitions}
    # the plan's target is its main engine (as in _fast_cpu_plan): OpenVINO while it keeps a partition
    main = next((e for e in (ops_engine, whole_engine) if e.name in used), None)
    return replace(chosen, partitions=tuple(partitions)) if main is None else \
        replace(chosen, target=main.target, engine=main.name, partitions=tuple(partitions))


# ---- CPU engines ----------------------------------------------------------------------------

CPU_KERNELS = ("fast", "builtin", "reference")
# Models OpenVINO takes whole are timed against the official interpreter up to this many multiply-accumulates
# per run (about 0.2 s of XNNPACK on the 2-core development machine, so the timing costs a first start at most
# about 1.5 s; the verdict is kept in the compile cache).  Above it OpenVINO runs them: it was faster than
# XNNPACK on every such model measured (batch 8 of ResNet50, Inception, ConvNeXt, VGG16, DenseNet).
LITERT_MEASURE_MAX_MACS = 20_000_000_000
# Calls per timed round when a lowered circle model is timed against XLA (``_lowered_is_faster``).
TIMED_BLOCK_CALLS = 20
# An OpenVINO run of ops inside a model split between engines is worth its partition (host copies of
# its edges, one more dispatch each side: about 0.1 ms) only when it holds real work: at least this
# many multiply-accumulates in its matrix products and convolutions (about 1 ms of XLA CPU work).  At
# 2 M, a small litert-torch decoder (KV cache writes OpenVINO refuses) split into 17 partitions and
# ran its prefill 2.8x slower than on XLA alone.  A model OpenVINO takes whole has no such edges and
# goes to OpenVINO whatever its size.
MIN_OPENVINO_RUN_MACS = 20_000_000
# Partitions OpenVINO converts but cannot compile are given back to XLA; after this many rounds the
# model runs on XLA alone.
MAX_PLAN_ROUNDS = 4
# The two sides of a fast CPU plan's ops: the engine that converts ops itself (OpenVINO), and litegpu's kernels
CONVERTER, KERNELS = "converter", "kernels"


def _installed_ops_engine() -> object | None:
    """Without engines given: the first fast CPU engine that takes the ops it converts (OpenVINO) and runs here."""
    for name in registry.named(fast_cpu=True):
        if registry.info(name).fast_cpu == "ops":
            candidate = registry.engine(name)
            if candidate.available():
                return candidate
            logger.info("%s is not available: the CPU runs XLA only (%s)", registry.title(name),
                        registry.info(name).install)
    return None


def _fast_cpu_plan(model: Model, flags: int, ops_engine: object | None) -> DelegationPlan | None:
    """OpenVINO for the ops it converts (and compiles), XLA (or numpy) for the rest; None when one engine
    takes the whole model (or OpenVINO is not given, or the model has resource variables: their state
    lives in one engine)."""
    if _uses_variables(model) or ops_engine is None:
        return None
    support = _Support(model)
    partitions: list[Partition] = []
    num_ops = 0
    for index in entry_subgraphs(model):
        sg = model.subgraphs[index]
        order = execution_order(sg, model.source)
        num_ops += len(order)
        why = dict(ops_engine.unsupported(model, index, order))  # op -> why it is not on OpenVINO (node data)
        side = {i: KERNELS if i in why else CONVERTER for i in order}
        _weights_follow_their_users(sg, order, side)
        for _ in range(MAX_PLAN_ROUNDS):
            _keep_worthwhile_openvino_runs(sg, order, side, why)
            parts = _engine_parts(model, sg, order, side, support, why, ops_engine)
            failed = {p: error for p in _with_edges(sg, parts) if p.engine == ops_engine.name
                      and (error := ops_engine.compile_error(model, p.op_range())) is not None}
            if not failed:
                break
            for p, error in failed.items():
                side.update({i: KERNELS for i in p.op_indices})
                why.update({i: f"OpenVINO could not compile its partition: {error}" for i in p.op_indices})
        else:
            side = {i: KERNELS for i in order}
            why = {i: why.get(i, f"OpenVINO failed to compile {MAX_PLAN_ROUNDS} times") for i in order}
            parts = _engine_parts(model, sg, order, side, support, why, ops_engine)
        partitions.extend(_with_edges(sg, parts))
    kernels = [p for p in partitions if p.engine != ops_engine.name]  # litegpu's own: XLA's and numpy's
    targets = {p.target for p in kernels}
    notes = ()
    if Target.REFERENCE in targets:
        refused = [u for u in _refusals(model, Target.XLA_CPU)
                   if any(p.target is Target.REFERENCE and p.subgraph_index == u.subgraph
                          and u.op_index in p.op_indices for p in kernels)]
        notes = (_refusal_message(model, "XLA CPU backend", refused)
                 + "\nthose ops run on the numpy reference backend (slow)",)
    main_engine = ""
    if ops_engine.name in {p.engine for p in partitions}:
        main, main_engine = ops_engine.target, ops_engine.name
    elif targets == {Target.XLA_CPU, Target.REFERENCE}:
        main = Target.XLA_CPU  # only the ops XLA refuses run in numpy, not the whole model
    else:
        return None  # one engine takes it all: the whole-model plan
    # The plan's target is its main engine; ``partitions`` say which ops the others run.
    return DelegationPlan(flags, "CPU", main, tuple(partitions), num_ops=num_ops, notes=notes,
                          boundaries=tuple(_boundaries(model, partitions)), engine=main_engine)


def _engine_parts(model: Model, sg: Subgraph, order: tuple[int, ...], side: dict[int, str], support: _Support,
                  why: dict[int, str], ops_engine: Any) -> list[tuple[Accelerator, Target, list[int], tuple, str]]:
    """The runs of ``side`` as partitions; those off OpenVINO say why for each op (``why``; XLA's refusal too
    for numpy's)."""
    parts: list[tuple[Accelerator, Target, list[int], tuple, str]] = []
    for run in _runs(_schedule(sg, order, side), side.__getitem__):
        if side[run[0]] == CONVERTER:
            parts.append((CPU, ops_engine.target, run, (), ops_engine.name))
            continue
        cpu_ok = {i: {t for t in (Target.XLA_CPU, Target.REFERENCE)
                      if support.op_reason(sg, sg.operators[i], t) is None} for i in run}
        nowhere = [i for i in run if not cpu_ok[i]]
        if nowhere:
            raise UnsupportedOpError(_refusal_message(model, "CPU", [
                UnsupportedOp(sg.index, i, sg.operators[i].opcode_name,
                              support.op_reason(sg, sg.operators[i], Target.REFERENCE) or "unsupported")
                for i in nowhere]))
        for target, ops in _cpu_targets(run, cpu_ok, whole_reference=False):
            reasons = [why.get(i, "a weight's DEQUANTIZE, beside the ops that read it") if target is Target.XLA_CPU
                       else f"{why.get(i, 'not on OpenVINO')}; XLA: "
                            f"{support.op_reason(sg, sg.operators[i], Target.XLA_CPU)}"
                       for i in ops]
            parts.append((CPU, target, ops, tuple(UnsupportedOp(sg.index, i, sg.operators[i].opcode_name, r)
                                                  for i, r in zip(ops, reasons)), ""))
    return parts


def _weights_follow_their_users(sg: Subgraph, order: tuple[int, ...], side: dict[int, str]) -> None:
    """A DEQUANTIZE of a constant (float16 or weight-only int8 weights) runs beside the ops that read it: else a
    partition would hand the dequantized weights over to the next one on every run (and XNNPACK cannot return a
    weight it folded as a sub-model's output)."""
    from ..backends.engine import is_weight_dequantize

    users: dict[int, set[str]] = {}
    for i in order:
        for t in sg.operators[i].inputs:
            if t >= 0:
                users.setdefault(t, set()).add(side[i])
    for i in order:
        op = sg.operators[i]
        if is_weight_dequantize(sg, op):
            sides = set().union(*(users.get(t, set()) for t in op.outputs if t >= 0))
            if len(sides) == 1:
                side[i] = sides.pop()


def _keep_worthwhile_openvino_runs(sg: Subgraph, order: tuple[int, ...], side: dict[int, str],
                                   why: dict[int, str]) -> None:
    """Give back to XLA the OpenVINO runs too small to pay for their partition edges."""
    if all(v == CONVERTER for v in side.values()):
        return
    for run in _runs(_schedule(sg, order, side), side.__getitem__):
        if side[run[0]] == CONVERTER and (macs := ops_macs(sg, run)) < MIN_OPENVINO_RUN_MACS:
            for i in run:
                side[i] = KERNELS
                why[i] = (f"OpenVINO would run it in a run of {len(run)} op(s) with {macs:,} multiply-accumulates: "
                          f"too little work to pay for a partition of its own (under {MIN_OPENVINO_RUN_MACS:,})")
