"""How far each op's output lies from the builtin kernels' (or the official interpreter's) on the same inputs.

The model runs as its plan runs it -- each partition on its own engine (OpenVINO, the official interpreter's
XNNPACK, XLA, IREE, numpy), a quantized model on the GPU as its float view -- except that every tensor an op of
the file writes is made an output of its partition, so that its value comes back.  The same inputs go through
the builtin kernels: litegpu's own (``Interpreter`` with ``experimental_preserve_all_tensors``: the numpy
reference kernels, TFLite's semantics) or the official interpreter's (its builtin op resolver without
delegates).  Each op's distance is the worst over its outputs:

- float tensors: the largest absolute difference over the largest magnitude of the builtin kernels' tensor
  (relative; the absolute difference where that tensor is all zeros);
- quantized integer tensors: the same in real terms, the largest difference in units over the largest
  magnitude of the builtin kernels' values around their zero point (``units`` keeps the difference in units);
- other integer and boolean tensors: the share of elements that differ;
- 1 where the shapes differ or a NaN or infinity stands where the other has a number.

Each op's output is the one the run computed from its inputs as the run computed them, so the distance
accumulates along the graph: an op that adds drift shows as a step up from its inputs' distance.

What it cannot see: an engine that fuses across a tensor computes it once as the fused op's output, so making
that tensor an output may keep the fusion from happening (OpenVINO, XNNPACK); the numbers are the engine's own
kernels, but not always its fused ones.  Where an engine cannot return the intermediate tensors at all (it fails
to compile the partition with them), only the partitions' own outputs are compared, and ``note`` says so.  What it
costs: a second compile of every partition, a run of the builtin kernels (litegpu's are numpy's, slow on big
models), and every intermediate tensor of the subgraph held twice at once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .. import ir
from ..compile import DelegationPlan, Partition
from ..compile.node_data import DISTANCE_THRESHOLDS, NodeData, values_node_data
from ..errors import InvalidArgumentError, LiteGpuError, ModelExecutionError
from ..ops import Target
from .model import SignatureInfo, signatures_of

COMPARE_WITH = ("builtin", "official")
_OPAQUE = ("string", "resource", "variant")


@dataclasses.dataclass(frozen=True)
class OpDistance:
    subgraph: int
    op_index: int
    opcode: str
    distance: float          # see the module's docstring; 0: the same numbers
    units: int | None        # quantized outputs: the largest difference in units
    tensor: str              # the output that is farthest


@dataclasses.dataclass(frozen=True)
class OpDistances:
    """Each op's distance (``ops``, keyed (subgraph, op index in the file)) in one signature's subgraph."""

    model: ir.Model          # the model as read from its file
    subgraph: int
    against: str             # "builtin" or "official"
    ops: dict[tuple[int, int], OpDistance]
    note: str | None = None

    def node_data(self) -> NodeData:
        """A Model Explorer overlay of the distances, coloured by decade (``DISTANCE_THRESHOLDS``)."""
        values = {k: float(f"{d.distance:.3g}") for k, d in self.ops.items()}
        return values_node_data(f"distance from {self.against}", values, self.model, thresholds=DISTANCE_THRESHOLDS)


def tensor_distance(got: Any, want: np.ndarray, tensor: ir.Tensor) -> tuple[float, int | None]:
    """(distance, difference in units for a quantized tensor) of ``got`` from ``want``."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return 1.0, None
    if want.size == 0:
        return 0.0, None
    if want.dtype.kind == "f" or got.dtype.kind == "f":
        return _float_distance(got.astype(np.float64), want.astype(np.float64)), None
    q = tensor.quantization
    if want.dtype.kind in "iu" and q is not None and q.is_affine:
        diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
        zero = np.asarray(q.zero_point or (0,), np.int64)
        axis = q.quantized_dimension if zero.size > 1 else None
        if axis is not None:
            zero = zero.reshape([-1 if d == axis else 1 for d in range(want.ndim)])
        span = np.abs(want.astype(np.int64) - zero).max()
        units = int(diff.max())
        return float(units / span if span else units > 0), units
    return float(np.count_nonzero(got != want) / want.size), None


def _float_distance(got: np.ndarray, want: np.ndarray) -> float:
    finite = np.isfinite(want)
    if not np.array_equal(finite, np.isfinite(got)) or not np.array_equal(got[~finite], want[~finite],
                                                                           equal_nan=True):
        return 1.0
    if not finite.any():
        return 0.0
    diff = np.abs(got[finite] - want[finite]).max()
    scale = np.abs(want[finite]).max()
    return float(diff / scale if scale > 0 else diff)


def op_distances(model: Any, inputs: Mapping[str, Any], *, signature: str | None = None,
                 compare_with: str = "builtin") -> OpDistances:
    """Each op's distance in ``signature``'s subgraph (default: the first) for ``inputs`` (name -> array, the
    signature's input names) as ``model`` (a ``CompiledModel``) runs it, from the builtin kernels'
    (``compare_with`` "builtin": litegpu's; "official": the official interpreter's)."""
    if compare_with not in COMPARE_WITH:
        raise InvalidArgumentError(f"compare_with={compare_with!r}: expected one of {', '.join(COMPARE_WITH)}")
    file_model = model.model
    sig = _signature(file_model, signature)
    by_tensor = _inputs_by_tensor(sig, inputs, file_model)
    probe_model, probe_plan, official_order = _executed(model)
    ours, note = _probe_values(model, probe_model, probe_plan, official_order, sig.subgraph, file_model, by_tensor)
    theirs = _reference_values(file_model, sig, by_tensor, compare_with)
    sg = file_model.subgraphs[sig.subgraph]
    found: dict[tuple[int, int], OpDistance] = {}
    for op in sg.operators:
        worst: OpDistance | None = None
        for t in op.outputs:
            if t < 0 or t not in ours:
                continue
            want = theirs(t)
            if want is None:
                continue
            distance, units = tensor_distance(ours[t], want, sg.tensors[t])
            if worst is None or distance > worst.distance:
                worst = OpDistance(sg.index, op.index, op.opcode_name, distance, units, sg.tensors[t].name)
        if worst is not None:
            found[(sg.index, op.index)] = worst
    return OpDistances(file_model, sg.index, compare_with, found, note)


def _signature(model: ir.Model, key: str | None) -> SignatureInfo:
    signatures = signatures_of(model)
    if key is None:
        return signatures[0]
    for s in signatures:
        if s.key == key:
            return s
    raise InvalidArgumentError(f"{model.source}: no signature {key!r} (has: {', '.join(s.key for s in signatures)})")


def _inputs_by_tensor(sig: SignatureInfo, inputs: Mapping[str, Any], model: ir.Model) -> dict[int, np.ndarray]:
    missing = [n for n in sig.input_names if n not in inputs]
    if missing:
        raise InvalidArgumentError(f"{model.source}: signature {sig.key!r} needs inputs {', '.join(missing)}")
    found = {}
    for (name, t), dtype in zip(sig.inputs, sig.input_dtypes):
        value = np.asarray(inputs[name])
        if value.dtype != dtype:
            raise InvalidArgumentError(f"{model.source}: input {name!r} is {value.dtype}, the model takes {dtype}")
        found[t] = value
    return found


# ---- the model as the plan runs it --------------------------------------------------------------

def _executed(model: Any) -> tuple[ir.Model, DelegationPlan, bool]:
    """(the model the plan's engines run, the plan over it, XLA in the builtin kernels' float order): a whole
    model on XLA's GPU runs its float view (``CompiledModel._xla_model``), everything else the planned model."""
    plan = model.plan
    if plan.is_split or plan.target is not Target.XLA_GPU:
        return plan.model, plan, bool(model._official_float_order)
    executed = model._xla_model
    whole = tuple(Partition(p.accelerator, p.target, p.subgraph_index,
                            ir.execution_order(executed.subgraphs[p.subgraph_index], executed.source), (),
                            executed.subgraphs[p.subgraph_index].inputs, executed.subgraphs[p.subgraph_index].outputs,
                            p.engine)
                  for p in plan.partitions)
    return executed, dataclasses.replace(plan, partitions=whole, model=executed), False


def _probe_values(model: Any, executed: ir.Model, plan: DelegationPlan, official_order: bool, subgraph: int,
                  file_model: ir.Model, by_tensor: dict[int, np.ndarray]) -> tuple[dict[int, Any], str | None]:
    """Tensor -> value of every tensor of ``subgraph`` the file's ops write, as the plan's engines compute it; the
    partitions' own outputs only (and a note) where an engine cannot return the others."""
    known = len(file_model.subgraphs[subgraph].tensors)
    try:
        return _run_probe(model, executed, plan, official_order, subgraph, known, by_tensor, every=True), None
    except LiteGpuError as e:
        values = _run_probe(model, executed, plan, official_order, subgraph, known, by_tensor, every=False)
        return values, f"an engine could not return the intermediate tensors ({e}): only the partitions' outputs " \
                       "are compared"


def _run_probe(model: Any, executed: ir.Model, plan: DelegationPlan, official_order: bool, subgraph: int,
               known: int, by_tensor: dict[int, np.ndarray], every: bool) -> dict[int, Any]:
    from .partitioned import PartitionedModel

    sg = executed.subgraphs[subgraph]
    parts = [p for p in plan.partitions if p.subgraph_index == subgraph]
    if every:
        parts = [dataclasses.replace(p, outputs=tuple(dict.fromkeys((*p.outputs, *_probed(sg, p, known)))))
                 for p in parts]
    probed = tuple(dict.fromkeys(t for p in parts for t in p.outputs if t < known))
    sgs = list(executed.subgraphs)
    sgs[subgraph] = dataclasses.replace(sg, outputs=tuple(dict.fromkeys((*sg.outputs, *probed))))
    probe_model = dataclasses.replace(executed, subgraphs=tuple(sgs))
    others = [p for p in plan.partitions if p.subgraph_index != subgraph]
    probe_plan = dataclasses.replace(plan, partitions=tuple(parts + others), model=probe_model)
    runner = PartitionedModel(probe_model, probe_plan, precision=model.options.precision,
                              device=model.environment.device, engine_settings=model._engine_settings(),
                              official_float_order=official_order)
    try:
        values = runner.run([by_tensor[t] for t in sg.inputs], subgraph)
    except LiteGpuError:
        raise
    except Exception as e:  # noqa: BLE001  (an engine's own error, as the runtime would meet it)
        raise ModelExecutionError(f"{executed.source}: {type(e).__name__}: {e}") from e
    outputs = probe_model.subgraphs[subgraph].outputs
    return {t: np.asarray(v) for t, v in zip(outputs, values) if t < known}


def _probed(sg: ir.Subgraph, partition: Partition, known: int) -> list[int]:
    """The tensors of the file that the partition's ops write and an engine can return: not constants, weights
    being dequantized (XNNPACK folds them), variables or opaque types."""
    from ..backends.engine import is_weight_dequantize

    found = []
    for i in partition.op_indices:
        op = sg.operators[i]
        if is_weight_dequantize(sg, op):
            continue
        for t in op.outputs:
            tensor = sg.tensors[t] if 0 <= t < known else None
            if tensor is not None and not tensor.has_data and not tensor.is_variable and tensor.dtype not in _OPAQUE:
                found.append(t)
    return found


# ---- the builtin kernels ------------------------------------------------------------------------

def _reference_values(model: ir.Model, sig: SignatureInfo, by_tensor: dict[int, np.ndarray],
                      compare_with: str) -> Callable[[int], np.ndarray | None]:
    """A reader of every tensor of ``sig``'s subgraph after a run of the builtin kernels on ``by_tensor``."""
    interpreter = _official(model) if compare_with == "official" else _builtin(model)
    try:
        if model.signatures:
            interpreter.get_signature_runner(sig.key)(**{n: by_tensor[t] for n, t in sig.inputs})
        else:
            interpreter.allocate_tensors()
            for t, value in by_tensor.items():
                interpreter.set_tensor(t, value)
            interpreter.invoke()
    except LiteGpuError:
        raise
    except Exception as e:  # noqa: BLE001  (the official interpreter's RuntimeError / ValueError)
        raise ModelExecutionError(f"{model.source}: the {compare_with} kernels cannot run it: {e}") from e

    def read(t: int) -> np.ndarray | None:
        try:
            return np.asarray(interpreter.get_tensor(t, sig.subgraph))
        except (LiteGpuError, ValueError, RuntimeError):
            return None

    return read


def _builtin(model: ir.Model) -> Any:
    from .interpreter import Interpreter

    return Interpreter(**_source(model), experimental_preserve_all_tensors=True)


def _official(model: ir.Model) -> Any:
    try:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType
    except ImportError:
        raise InvalidArgumentError("comparing with the official interpreter needs ai-edge-litert "
                                   "(pip install ai-edge-litert)") from None
    source = _source(model) if model.file_format == "tflite" else {"model_content": _tflite_form(model)}
    try:
        return Interpreter(**source, experimental_preserve_all_tensors=True,
                           experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    except Exception as e:  # noqa: BLE001  (the official interpreter's own errors)
        raise ModelExecutionError(f"{model.source}: the official interpreter cannot load it: {e}") from e


def _tflite_form(model: ir.Model) -> bytes:
    """A circle model written as TFLite (same subgraphs, ops and tensors), which the official interpreter reads."""
    from ..errors import FormatConversionError
    from ..format.file import file_format
    from ..ir.save import to_bytes

    try:
        return to_bytes(model, file_format("tflite"))
    except FormatConversionError as e:
        raise InvalidArgumentError(f"{model.source}: the official interpreter reads .tflite only, and this model "
                                   f"cannot be written as .tflite ({e}): compare with the builtin kernels") from None


def _source(model: ir.Model) -> dict[str, Any]:
    """How an interpreter reads the model: its file, or its bytes where it was made in memory."""
    import os

    if os.path.isfile(model.source):
        return {"model_path": model.source}
    from ..format.file import file_format
    from ..ir.save import to_bytes

    return {"model_content": to_bytes(model, file_format(model.file_format))}


__all__ = ["COMPARE_WITH", "OpDistance", "OpDistances", "op_distances", "tensor_distance"]
