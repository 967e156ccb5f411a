"""``litegpu bench --profile`` on the XLA engine: each op of a subgraph timed alone as its own ``jax.jit`` program,
on the engine's device, over the model's weights as the engine holds them (``XlaEngine.profile_ops``).

What this measures: one op's kernel with its real input values and shapes, dispatched alone, its outputs waited
for (not copied to the host).  What it does not: the whole program fuses neighbouring ops (elementwise work after
a convolution is often free there), and every op timed alone pays one dispatch (``dispatch_overhead_ms``), so the
per-op sum is an upper bound of sorts, not a decomposition of the model's latency.  Ops whose inputs are all
constants are folded while tracing and cost nothing at run time; stateful ops (variables) run eagerly and are not
timed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...ir import Model
from ...ops import Target
from ..graph import STATEFUL_OPS
from .tracer import _PolicyRunner

# the compute dtype of each precision: float32 sums for "fp16_fp32_accum"
COMPUTE_DTYPES = {"fp32": np.float32, "fp16": np.float16, "fp16_fp32_accum": np.float32}


def median_seconds(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


class OpProfiler(_PolicyRunner):
    """Runs a subgraph op by op, timing each op of ``main_subgraph`` as its own program (``records``)."""

    def __init__(self, *args: Any, main_subgraph: int, repeats: int, jax: Any, on_op: Callable[[], None],
                 official_float_order: bool = False, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.main_subgraph, self.repeats, self.jax, self.on_op = main_subgraph, repeats, jax, on_op
        # the ops read it (OpContext.official_float_order): BUILTIN mode's kernels are other kernels
        self.official_float_order = official_float_order
        self.records: list[dict[str, Any]] = []
        self._inside_op = False

    def _run_op(self, sg: Any, op_index: int, values: dict) -> None:
        if self._inside_op or sg.index != self.main_subgraph:  # bodies of control flow / CALL_ONCE
            return super()._run_op(sg, op_index, values)
        op = sg.operators[op_index]
        self._checked_impl(sg, op_index)
        inputs = [t for t in dict.fromkeys(op.inputs) if t >= 0]
        args = {t: self._value(sg, values, t) for t in inputs}
        dynamic = [t for t, a in args.items() if not isinstance(a, np.ndarray)]
        kind = ("folded" if not dynamic else "stateful" if op.opcode_name in STATEFUL_OPS else "timed")
        record = {"index": op.index, "op": op.opcode_name, "kind": kind, "ms": 0.0,
                  "output_shapes": [list(sg.tensors[t].shape) for t in op.outputs if t >= 0]}
        if kind != "timed":
            super()._run_op(sg, op_index, values)
        else:
            program = self.jax.jit(self._one_op(sg, op_index, values, dynamic))
            dyn_values = [args[t] for t in dynamic]
            produced = self.jax.block_until_ready(program(*dyn_values))  # compile, and the values
            record["ms"] = 1e3 * median_seconds(lambda: self.jax.block_until_ready(program(*dyn_values)), self.repeats)
            for t, v in zip([t for t in op.outputs if t >= 0], produced):
                if v is not None:
                    values[t] = v
        self.records.append(record)
        self.on_op()

    def _one_op(self, sg: Any, op_index: int, values: dict, dynamic: list[int]) -> Callable:
        def kernel(*dyn: Any) -> list[Any]:
            local = dict(values)
            local.update(zip(dynamic, dyn))
            self._inside_op = True  # a control-flow op's bodies run inside this trace, untimed
            try:
                _PolicyRunner._run_op(self, sg, op_index, local)
            finally:
                self._inside_op = False
            op = sg.operators[op_index]
            return [local.get(t) for t in op.outputs if t >= 0]

        return kernel


def dispatch_overhead_ms(jax: Any, device: Any, repeats: int = 50) -> float:
    """What one jitted call on a tiny array costs here: the floor under every per-op time."""
    x = jax.device_put(np.zeros((1,), np.float32), device)
    f = jax.jit(lambda v: v + 1)
    jax.block_until_ready(f(x))
    return 1e3 * median_seconds(lambda: jax.block_until_ready(f(x)), repeats)


def profile_ops(state: Any, device: Any, model: Model, subgraph: int, inputs: Sequence[np.ndarray], rules: Target,
                precision: str, official_float_order: bool, repeats: int, on_op: Callable[[], None]
                ) -> tuple[list[dict[str, Any]], float]:
    """(a record per op of ``subgraph``, the dispatch overhead in ms), over the weights of ``state``
    (``state.XlaState``) on ``device``; ``inputs``: the subgraph's, in its order, on the host."""
    from ..device_arrays import jax_module

    jax = jax_module()
    storage = state.storage

    def constant(sg_index: int, t: Any) -> Any:
        value = state.params.get(f"{sg_index}:{t.index}")
        if value is not None:
            return value
        return t.data.astype(storage) if t.dtype == "float32" and storage != np.float32 else t.data

    sg = model.subgraphs[subgraph]
    placed = [jax.device_put(x.astype(storage) if sg.tensors[t].dtype == "float32" and storage != np.float32 else x,
                             device) for t, x in zip(sg.inputs, inputs)]
    profiler = OpProfiler(model, rules, constant=constant, storage=np.dtype(storage),
                          compute=np.dtype(COMPUTE_DTYPES[precision]), main_subgraph=subgraph, repeats=repeats,
                          jax=jax, on_op=on_op, official_float_order=official_float_order)
    profiler.run_subgraph(subgraph, placed)
    return profiler.records, dispatch_overhead_ms(jax, device)
