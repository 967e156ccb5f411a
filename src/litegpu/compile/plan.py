"""The static delegation plan: which accelerator runs which op, decided from the IR alone.

This first version keeps a model whole: it runs entirely on the preferred
accelerator when every op of every subgraph is supported there, and entirely
on the CPU otherwise (with a warning naming each op that forced the move).
Splitting a model into GPU and CPU partitions is the delegation issue's work;
``Partition`` already has the shape that needs.

Accelerators are the flag values of ``HardwareAccelerator`` (CPU=1, GPU=2,
NPU=4); this module takes plain ints so that it does not reach up into runtime.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

from ..errors import AcceleratorUnavailableError, InvalidArgumentError, UnsupportedOpError
from ..ir import Model
from ..ops import Target, lookup

CPU, GPU, NPU = 1, 2, 4
_NAMES = {CPU: "CPU", GPU: "GPU", NPU: "NPU"}


@dataclass(frozen=True)
class UnsupportedOp:
    subgraph: int
    op_index: int
    opcode: str
    reason: str

    def __str__(self) -> str:
        where = f"#{self.op_index}" if self.subgraph == 0 else f"#{self.op_index} of subgraph {self.subgraph}"
        return f"{self.opcode} ({where}): {self.reason}"


@dataclass(frozen=True)
class Partition:
    """A run of ops of one subgraph executed by one backend on one accelerator."""

    accelerator: str            # "GPU" or "CPU"
    target: Target              # XLA_GPU, XLA_CPU or REFERENCE
    subgraph: int
    op_indices: tuple[int, ...]


@dataclass(frozen=True)
class DelegationPlan:
    requested: int                                   # the accelerator flags asked for
    accelerator: str                                 # where the model runs: "GPU" or "CPU"
    target: Target
    partitions: tuple[Partition, ...]
    unsupported: tuple[UnsupportedOp, ...] = ()      # ops the preferred accelerator refused
    num_ops: int = 0
    notes: tuple[str, ...] = field(default=())

    @property
    def fully_accelerated(self) -> bool:
        """True when the model runs entirely on the preferred accelerator (the official meaning)."""
        return not self.unsupported and self.target is not Target.REFERENCE

    def ops_on(self, accelerator: str) -> int:
        return sum(len(p.op_indices) for p in self.partitions if p.accelerator == accelerator)

    def summary(self) -> str:
        gpu, cpu = self.ops_on("GPU"), self.ops_on("CPU")
        return f"{gpu} operations will run on the GPU, and the remaining {cpu} on the CPU"


def _accelerator_name(flags: int) -> str:
    return " | ".join(n for bit, n in _NAMES.items() if flags & bit) or "none"


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


def _whole_model(model: Model, accelerator: str, target: Target) -> tuple[Partition, ...]:
    return tuple(Partition(accelerator, target, sg.index, tuple(op.index for op in sg.operators))
                 for sg in model.subgraphs)


def _refusal_message(model: Model, accelerator: str, refused: list[UnsupportedOp]) -> str:
    lines = "\n".join(f"  {r}" for r in refused)
    return f"{model.source}: {len(refused)} op(s) cannot run on the {accelerator}:\n{lines}"


def plan(model: Model, accelerators: int = CPU, *, warn: bool = True) -> DelegationPlan:
    """Decide where ``model`` runs for the requested accelerator flags, without touching a device.

    Raises ``UnsupportedOpError`` when no allowed accelerator can run the model,
    and ``AcceleratorUnavailableError`` for NPU-only requests (litegpu has no NPU backend).
    """
    flags = int(accelerators)
    if flags & ~(CPU | GPU | NPU) or flags == 0:
        raise InvalidArgumentError(f"unknown hardware accelerator flags {flags!r} (use CPU=1, GPU=2, NPU=4)")
    if flags & NPU and not flags & (CPU | GPU):
        raise AcceleratorUnavailableError("litegpu has no NPU backend; ask for GPU and/or CPU "
                                          "(HardwareAccelerator.NPU | HardwareAccelerator.CPU falls back to CPU)")
    num_ops = sum(len(sg.operators) for sg in model.subgraphs)
    gpu_refused: list[UnsupportedOp] = []
    if flags & GPU:
        gpu_refused = _refusals(model, Target.XLA_GPU)
        if not gpu_refused:
            return DelegationPlan(flags, "GPU", Target.XLA_GPU, _whole_model(model, "GPU", Target.XLA_GPU),
                                  num_ops=num_ops)
        if not flags & CPU:
            raise UnsupportedOpError(_refusal_message(model, "GPU", gpu_refused)
                                     + "\nadd HardwareAccelerator.CPU to run the model on the CPU instead")
    cpu_refused = _refusals(model, Target.XLA_CPU)
    target = Target.XLA_CPU
    notes = []
    if cpu_refused:
        reference_refused = _refusals(model, Target.REFERENCE)
        if reference_refused:
            raise UnsupportedOpError(_refusal_message(model, "CPU", reference_refused))
        target = Target.REFERENCE
        notes.append(_refusal_message(model, "XLA CPU backend", cpu_refused)
                     + "\nthe model runs op by op on the numpy reference backend (slow)")
    partitions = _whole_model(model, "CPU", target)
    result = DelegationPlan(flags, "CPU", target, partitions, tuple(gpu_refused), num_ops, tuple(notes))
    if warn and gpu_refused:
        could = num_ops - len(gpu_refused)
        warnings.warn(f"{_refusal_message(model, 'GPU', gpu_refused)}\n{result.summary()} "
                      f"({could} of them could run on the GPU, but this version keeps a model whole)",
                      stacklevel=3)
    if warn and notes:
        warnings.warn(notes[0], stacklevel=3)
    return result
