"""Walking a subgraph op by op: shared by the reference and XLA backends.

The same walk either runs numpy kernels (reference) or traces jax kernels
(XLA, inside ``jax.jit``).  While tracing, an op whose inputs are all known
numpy values (shape arithmetic, constant weights) is evaluated right away
with its reference kernel, so shapes stay static for XLA.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import LiteGpuError, ModelExecutionError, UnsupportedOpError
from .. import ir
from ..ir import Model, Subgraph, Tensor, numpy_dtype
from ..ops import OpContext, Target, lookup
from .op_range import OpRange

# Ops that must never be evaluated ahead of time: they read or write state.
STATEFUL_OPS = frozenset({
    "VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE", "CALL_ONCE", "RANDOM_UNIFORM",
    "RANDOM_STANDARD_NORMAL", "MULTINOMIAL", "HASHTABLE", "HASHTABLE_FIND", "HASHTABLE_IMPORT",
    "HASHTABLE_SIZE", "STABLEHLO_RNG_BIT_GENERATOR",
})
# Folding a constant op bigger than this into the trace would bloat the program.
FOLD_LIMIT_ELEMENTS = 1 << 16


def tensor_dtype(t: Tensor) -> np.dtype:
    return numpy_dtype(t.dtype)


def split_ops(sg: Subgraph, order: Sequence[int], part_ops: int, tensor_bytes: Callable[[Tensor], int]
              ) -> list[OpRange]:
    """``order`` (a subgraph's ops in execution order) cut into runs of about ``part_ops`` ops, each cut
    placed, within a quarter of ``part_ops`` of its target, where the tensors crossing it take the fewest
    bytes (between two layers of a decoder: its hidden state, not a converted weight)."""
    produced_at: dict[int, int] = {}
    for k, op in enumerate(order):
        for t in sg.operators[op].outputs:
            if t >= 0:
                produced_at[t] = k
    last_read: dict[int, int] = {}
    for k, op in enumerate(order):
        for t in sg.operators[op].inputs:
            if t in produced_at:
                last_read[t] = max(last_read.get(t, k), k)
    # crossing[p]: bytes of the tensors made before position p and read at or after it
    delta = [0] * (len(order) + 2)
    for t, start in produced_at.items():
        stop = last_read.get(t, start)
        if stop > start:
            delta[start + 1] += tensor_bytes(sg.tensors[t])
            delta[stop + 1] -= tensor_bytes(sg.tensors[t])
    crossing, running = [], 0
    for p in range(len(order) + 1):
        running += delta[p]
        crossing.append(running)
    cuts, start, slack = [0], 0, max(1, part_ops // 4)
    while len(order) - start > part_ops + slack:
        window = range(start + part_ops - slack, start + part_ops + slack + 1)
        start = min(window, key=lambda p: (crossing[p], abs(p - start - part_ops)))
        cuts.append(start)
    cuts.append(len(order))
    runs = [list(order[a:b]) for a, b in zip(cuts, cuts[1:])]
    return _with_edges(sg, runs)


def _with_edges(sg: Subgraph, runs: list[list[int]]) -> list[OpRange]:
    """OpRanges for consecutive runs of ops: inputs are the tensors a run reads that the subgraph takes
    or an earlier run made (not constants, not variables); outputs what later runs or the subgraph read."""
    made_in: dict[int, int] = {}
    for k, ops in enumerate(runs):
        for op in ops:
            made_in.update((t, k) for t in sg.operators[op].outputs if t >= 0)
    read_in: dict[int, set[int]] = {}
    for k, ops in enumerate(runs):
        for op in ops:
            for t in sg.operators[op].inputs:
                if t >= 0:
                    read_in.setdefault(t, set()).add(k)
    ranges = []
    for k, ops in enumerate(runs):
        reads = {t for op in ops for t in sg.operators[op].inputs if t >= 0}
        # made by an earlier run, or taken by the subgraph (constants are neither: and ``Tensor.data``,
        # which would say so too, unpacks int4 weights and keeps the copy)
        inputs = sorted(t for t in reads if (made_in.get(t, k) < k or t in sg.inputs)
                        and not sg.tensors[t].is_variable)
        outputs = sorted(t for t, m in made_in.items()
                         if m == k and (t in sg.outputs or any(r > k for r in read_in.get(t, ()))))
        ranges.append(OpRange(sg.index, tuple(ops), tuple(inputs), tuple(outputs)))
    return ranges


class GraphRunner:
    """Runs subgraphs of one model for one target; holds that model's variables.

    ``constant`` resolves a constant tensor (the XLA backend passes weights as
    traced parameters instead of embedding them).  ``observe`` sees every
    tensor value as it is produced (``experimental_preserve_all_tensors``).
    """

    def __init__(self, model: Model, target: Target, *,
                 constant: Callable[[int, Tensor], Any] | None = None,
                 variables: dict | None = None,
                 observe: Callable[[int, int, Any], None] | None = None,
                 precomputed: dict[tuple[int, int], Any] | None = None):
        self.model = model
        # (subgraph, tensor) -> value of op outputs computed before the run (constant folding at load)
        self.precomputed = precomputed or {}
        self.target = target
        self.variables: dict = variables if variables is not None else {}
        self._constant = constant or (lambda sg, t: t.data)
        self._observe = observe
        self._orders: dict[int, tuple[int, ...]] = {}
        self._checked: dict[tuple[int, int], Any] = {}
        self._model_runners: dict[int, GraphRunner] = {}  # id(model) -> its runner (``run_model``)

    def order(self, sg: Subgraph) -> tuple[int, ...]:
        if sg.index not in self._orders:
            # ir.execution_order, looked up here: its module brings the file decoder, which a warm start skips
            self._orders[sg.index] = ir.execution_order(sg, self.model.source)
        return self._orders[sg.index]

    def run_subgraph(self, index: int, inputs: Sequence[Any]) -> list[Any]:
        sg = self.model.subgraphs[index]
        if len(inputs) != len(sg.inputs):
            raise ModelExecutionError(f"subgraph {index} takes {len(sg.inputs)} inputs, got {len(inputs)}")
        return self._walk(sg, self.order(sg), sg.inputs, inputs, sg.outputs)

    def run_model(self, model: Model, index: int, inputs: Sequence[Any]) -> list[Any]:
        """Subgraph ``index`` of another model (circle's RUN_MODEL), run by a runner of that model for this
        runner's target; its weights are that model's constants (under XLA, in the caller's program)."""
        runner = self._model_runners.get(id(model))
        if runner is None or runner.model is not model:
            runner = self._model_runners[id(model)] = GraphRunner(model, self.target)
        return runner.run_subgraph(index, inputs)

    def run_ops(self, op_range: OpRange, inputs: Sequence[Any]) -> list[Any]:
        """Run part of a subgraph: ``op_range.op_indices`` in that order, starting from the values of
        ``op_range.inputs``; returns the values of ``op_range.outputs`` (a delegation partition)."""
        if len(inputs) != len(op_range.inputs):
            raise ModelExecutionError(f"{op_range} takes {len(op_range.inputs)} boundary tensors, got {len(inputs)}")
        sg = self.model.subgraphs[op_range.subgraph]
        return self._walk(sg, op_range.op_indices, op_range.inputs, inputs, op_range.outputs)

    def _walk(self, sg: Subgraph, op_indices: Sequence[int], given: Sequence[int], inputs: Sequence[Any],
              wanted: Sequence[int]) -> list[Any]:
        values: dict[int, Any] = {}
        for t, v in zip(given, inputs):
            values[t] = v
            if self._observe:
                self._observe(sg.index, t, v)
        for op_index in op_indices:
            self._run_op(sg, op_index, values)
        return [self._value(sg, values, t) for t in wanted]

    def _value(self, sg: Subgraph, values: dict[int, Any], index: int) -> Any:
        if index < 0:
            return None
        if index in values:
            return values[index]
        t = sg.tensors[index]
        if t.data is not None:
            value = self._constant(sg.index, t)
            values[index] = value
            return value
        if t.num_elements == 0 and t.dtype not in ("resource", "variant", "string"):
            # An empty constant has no bytes to store, so files give it no data.
            return np.zeros(t.shape, tensor_dtype(t))
        if t.is_variable:
            key = ("tensor", sg.index, index)
            if key not in self.variables:
                self.variables[key] = _initial_variable(t)
            return self.variables[key]
        raise ModelExecutionError(f"{self.model.source}: subgraph {sg.index} tensor {index} ({t.name!r}) "
                                  "is read before anything writes it")

    def _checked_impl(self, sg: Subgraph, op_index: int) -> Any:
        """The op's kernel, once we know this op instance is one it implements.

        Without this check a kernel would run on a dtype it was never written
        for (an int8 CONV_2D through the float kernel) and return garbage.
        """
        key = (sg.index, op_index)
        if key not in self._checked:
            op = sg.operators[op_index]
            impl = lookup(op)
            reason = impl.unsupported_reason(op, sg, self.target)
            if reason is not None:
                raise UnsupportedOpError(f"{self.model.source}: subgraph {sg.index} op {op} cannot run on "
                                         f"{self.target.value}: {reason}")
            self._checked[key] = impl
        return self._checked[key]

    def _run_op(self, sg: Subgraph, op_index: int, values: dict[int, Any]) -> None:
        op = sg.operators[op_index]
        if self.precomputed and self._take_precomputed(sg, op.outputs, values):
            return
        impl = self._checked_impl(sg, op_index)
        args = [self._value(sg, values, i) for i in op.inputs]
        fold = (self.target.is_xla and op.opcode_name not in STATEFUL_OPS
                and all(a is None or isinstance(a, np.ndarray) for a in args)
                and all(t < 0 or sg.tensors[t].num_elements <= FOLD_LIMIT_ELEMENTS for t in op.outputs))
        target = Target.REFERENCE if fold else self.target
        ctx = OpContext(op, sg, self.model, self, target)
        try:
            result = impl.reference(ctx, *args) if target is Target.REFERENCE else impl.lower(ctx, *args)
        except LiteGpuError:
            raise
        except Exception as e:  # a kernel bug or an input the op cannot take: say where
            raise ModelExecutionError(f"{self.model.source}: subgraph {sg.index} op {op}: "
                                      f"{type(e).__name__}: {e}") from e
        results = result if isinstance(result, (tuple, list)) else (result,)
        outputs = [t for t in op.outputs]
        if len(results) < len([t for t in outputs if t >= 0]):
            raise ModelExecutionError(f"subgraph {sg.index} op {op}: kernel returned {len(results)} "
                                      f"values for {len(outputs)} outputs")
        for t, value in zip(outputs, results):
            if t < 0 or value is None:
                continue
            value = self._as_output(sg.tensors[t], value, target)
            values[t] = value
            if self._observe:
                self._observe(sg.index, t, value)

    def _take_precomputed(self, sg: Subgraph, outputs: Sequence[int], values: dict[int, Any]) -> bool:
        found = [(t, self.precomputed.get((sg.index, t))) for t in outputs if t >= 0]
        if not found or any(v is None for _, v in found):
            return False
        for t, value in found:
            values[t] = value
            if self._observe:
                self._observe(sg.index, t, value)
        return True

    @staticmethod
    def _as_output(t: Tensor, value: Any, target: Target) -> Any:
        if t.dtype in ("resource", "variant", "string"):
            return value
        dtype = tensor_dtype(t)
        if target is Target.REFERENCE:
            value = np.asarray(value)
            return value if value.dtype == dtype else value.astype(dtype)
        return value if value.dtype == dtype else value.astype(dtype)


def _initial_variable(t: Tensor) -> np.ndarray:
    """A variable tensor's value before anything writes it: ``ResetVariableTensor`` memsets it to 0,
    except int8 ones, to their zero point (a quantized real 0: the full-integer LSTM's output state)."""
    value = np.zeros(t.shape, tensor_dtype(t))
    if t.dtype == "int8" and t.quantization is not None and t.quantization.zero_point:
        value[...] = t.quantization.zero_point[0]
    return value
