"""The tracer: a subgraph's ops walked with their XLA lowerings into one function that ``jax.jit`` compiles.

Weights that the program converts (float16 -> float32 DEQUANTIZE, int8 widened by a hybrid
FULLY_CONNECTED, int4 unpacked) are converted where they are used, not at the program's start:
ops that read only weights are traced when an op with a run-time input consumes their result,
and the weights they read are tied to that input (``ops._common.tie_to``).  Otherwise XLA,
seeing values that depend only on parameters, schedules every conversion first and holds all the
converted weights at once (2x a float16 model's file, 8x an int4 one's).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import InvalidArgumentError, ModelExecutionError
from ...ir import Model, Operator, Subgraph, Tensor, called_subgraphs
from ...ir.dtypes import SUB_BYTE_BITS
from ...ops import Target
from ...ops._common import opaque_zero, rounded_apart, tie_to
from ...ops.slicing import clamped_update_starts
from ..graph import STATEFUL_OPS, GraphRunner
from .state import INTEGER_DTYPES, XlaState, _in_place_updates, _unpack_sub_byte

# (storage, compute) dtype of float32 tensors per precision name; ``litegpu.compile.precision``
# documents and validates the names (it sits above this module, so it is not imported here).
_PRECISION_DTYPES = {
    "fp32": (np.dtype(np.float32), np.dtype(np.float32)),
    "fp16": (np.dtype(np.float16), np.dtype(np.float16)),
    "fp16_fp32_accum": (np.dtype(np.float16), np.dtype(np.float32)),
}


class _Precision:
    def __init__(self, precision: Any):
        self.name = str(getattr(precision, "name", precision or "fp32")).lower()
        if self.name not in _PRECISION_DTYPES:
            raise InvalidArgumentError(f"unknown precision {self.name!r}; expected one of "
                                       f"{', '.join(_PRECISION_DTYPES)}")
        self.storage_dtype, self.compute_dtype = _PRECISION_DTYPES[self.name]
        self.is_reduced = self.name != "fp32"


class _PolicyRunner(GraphRunner):
    """Holds float32 tensors in the policy's storage type and computes ops in its compute type."""

    def __init__(self, *args: Any, storage: np.dtype, compute: np.dtype, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.storage, self.compute = storage, compute

    def _value(self, sg: Subgraph, values: dict, index: int) -> Any:
        value = super()._value(sg, values, index)
        if (index >= 0 and self.compute != self.storage and sg.tensors[index].dtype == "float32"
                and getattr(value, "dtype", None) == self.storage):
            return value.astype(self.compute)
        return value

    def _as_output(self, t: Tensor, value: Any, target: Target) -> Any:  # type: ignore[override]
        value = GraphRunner._as_output(t, value, target)
        if t.dtype == "float32" and self.storage != np.float32:
            return value.astype(self.storage)
        return value


class _Deferred:
    """The output of an op that reads only weights: traced where an op consumes it (see _XlaRunner)."""

    __slots__ = ("op_index",)

    def __init__(self, op_index: int):
        self.op_index = op_index


def _zero_after(anchors: Sequence[Any]) -> Any:
    """``ops._common.opaque_zero`` of the first numeric run-time value (None when there is none).
    (``lax.optimization_barrier`` was measured not to keep XLA CPU from converting early.)"""
    import jax.numpy as jnp
    from jax import lax

    for a in anchors:
        dtype = getattr(a, "dtype", None)
        if dtype is not None and getattr(a, "size", 0) and (
                jnp.issubdtype(dtype, jnp.number) or jnp.issubdtype(dtype, jnp.bool_)):
            return opaque_zero(jnp, lax, a)
    return None


class _XlaRunner(_PolicyRunner):
    """Traces a subgraph for XLA with the weights as program parameters, converted where used.

    An op whose inputs are weights (parameters, their folded results, other such ops' outputs)
    and static values, with no run-time input, is not traced when the walk reaches it: its outputs
    are ``_Deferred`` and each op with run-time inputs that consumes them traces them again from
    the parameters, tied to its own run-time inputs.  Parameters that such an op reads directly
    are tied too when the op receives them converted (unpacked int4, the precision policy) or as
    integers (which its kernel widens).  Float parameters read as they are stay untied: there is
    nothing for XLA to convert early, and tying would copy them.
    """

    def __init__(self, model: Model, target: Target, *, params: dict, state: XlaState, **kwargs: Any):
        super().__init__(model, target, precomputed={where: params[key] for where, key in state.folded.items()},
                         **kwargs)
        self.params, self.state = params, state
        self._zero: Any = None       # see _zero_after: from the run-time inputs of the op being traced
        self._tie_all = False        # while tracing a deferred op for its consumer
        self._memo: dict[int, Any] = {}
        self._block_weights: dict[int, Any] = {}  # inside a scanned block: template tensor -> this block's slice
        self.given_stacks: dict = {}   # template tensor -> per-block inputs already stacked (``trace_stacked``)
        self.final_stacks: dict | None = None  # filled with the stacks as the blocks left them
        self.row_plan: Any = None      # ``kv_rows.RowPlan``: the caches' attention traced for their first rows

    @property
    def official_float_order(self) -> bool:
        """Read by the ops (``OpContext.official_float_order``)."""
        return self.state.official_float_order

    def _as_output(self, t: Tensor, value: Any, target: Target) -> Any:  # type: ignore[override]
        value = super()._as_output(t, value, target)
        if self.state.official_float_order and target is not Target.REFERENCE and t.dtype == "float32":
            # The builtin kernels store every op's output, rounded: XLA CPU would otherwise contract a multiply
            # at the end of one op into an add at the start of the next (a hybrid FULLY_CONNECTED's scaling
            # into the residual ADD after it: an ulp, which the next layer's int8 row quantization can turn
            # into a quantization step).
            if getattr(value, "dtype", None) == np.float32:
                value = rounded_apart(self._xp, self._lax, value)
        return value

    def _param(self, sg: Subgraph, index: int) -> Any:
        if index in self._block_weights:
            return self._block_weights[index]
        key = self.state.param_key.get((sg.index, index))
        if key is None:
            member = self.state.stack_slice.get((sg.index, index))
            return None if member is None else self.params[member[0]][member[1]]
        return self.params.get(key)

    def run_subgraph(self, index: int, inputs: Sequence[Any]) -> list[Any]:
        region = self.state.regions.get(index)
        if region is None:
            return super().run_subgraph(index, inputs)
        sg = self.model.subgraphs[index]
        if len(inputs) != len(sg.inputs):
            raise ModelExecutionError(f"subgraph {index} takes {len(sg.inputs)} inputs, got {len(inputs)}")
        values: dict[int, Any] = dict(zip(sg.inputs, inputs))
        for op_index in region.before:
            self._run_op(sg, op_index, values)
        self._scan_blocks(sg, region, values)
        for op_index in region.after:
            self._run_op(sg, op_index, values)
        return [self._value(sg, values, t) for t in sg.outputs]

    def _scan_blocks(self, sg: Subgraph, region: Any, values: dict) -> None:
        """The repeated blocks as one ``lax.scan``: the first block's ops traced once, each step reading one
        block's weights (slices of the stacked parameters), carrying the hidden state; what later ops read comes
        out as the last carry or stacked per block (``layer_scan``).

        Per-block subgraph inputs (a KV cache per layer) are stacked once and carried whole: each step reads its
        layer's slice, and where an op of the block makes that layer's new value from it the value is written
        back into the carried stack, in place.  (Passed as scanned inputs and outputs instead, every step would
        copy the whole stack: 2x the caches in temporaries.)  Where that op is a DYNAMIC_UPDATE_SLICE (a cache
        taking the new position's keys or values) the update goes straight into the stack and the block reads
        its layer's slice of the updated stack: made as the slice updated, then written back, XLA copied each
        layer's cache out and in again every step (4 MB a layer and token for a 2048-wide cache of 256
        positions, ``bench/gpu/gpu_compile.py``)."""
        xp, lax = self._xp, self._lax
        template = region.blocks[0]
        made = lambda j, o: sg.operators[template[j]].outputs[o]  # noqa: E731
        initial = [self._value(sg, values, init) for _, init, _ in region.carried]
        # each slot's stack and the block of it where this run starts (a longer stack shared with another loop)
        weights = {t0: (self.params[self.state.stacked_key[(sg.index, t0)]], self.state.stacked_offset[(sg.index, t0)])
                   for t0, _ in region.stacked if (sg.index, t0) in self.state.stacked_key}
        # per-block subgraph inputs (KV caches) and small float constants that are no parameters (a norm's scale)
        stacks = {t0: self.given_stacks[t0] if t0 in self.given_stacks else
                  xp.stack([xp.asarray(self._value(sg, values, t)) for t in per_block])
                  for t0, per_block in region.stacked if t0 not in weights}
        updated = {made_by: t0 for made_by, t0 in _in_place_updates(sg, region).items() if t0 in stacks}
        scanned_out = [(made_by, per_block) for made_by, per_block in region.collected if made_by not in updated]
        into_stack = {template[j]: t0 for (j, o), t0 in updated.items()
                      if sg.operators[template[j]].opcode_name == "DYNAMIC_UPDATE_SLICE" and o == 0}

        def body(carry: tuple, _: Any) -> tuple:
            index, state, stacked = carry
            block_weights = {t0: lax.dynamic_index_in_dim(stack, index + offset, keepdims=False)
                             for t0, (stack, offset) in weights.items()}
            local = dict(values)  # what the blocks share: made before the run, the subgraph's inputs
            local.update((t0, c) for (t0, _, _), c in zip(region.carried, state))
            local.update((t0, lax.dynamic_index_in_dim(stack, index, keepdims=False)) for t0, stack in stacked.items())
            # What leaves the step is read while this block's weights are in place, with a memo of its own: a value
            # made from weights alone (the next block's filter, DEQUANTIZE'd at the end of this one) is deferred
            # until read, and read after them it was traced from the template's weights, the same in every step
            # (MediaPipe's palm detector: thousands off).
            saved = self._block_weights, self._memo
            self._block_weights, self._memo = dict(block_weights), {}
            stacked = dict(stacked)
            try:
                for op_index in template:
                    if op_index in into_stack:
                        self._update_into_stack(sg, sg.operators[op_index], local, stacked, into_stack[op_index],
                                                index)
                    else:
                        self._run_op(sg, op_index, local)
                nxt = [self._value(sg, local, made(j, o)).astype(c.dtype)
                       for (_, _, (j, o)), c in zip(region.carried, state)]
                for made_by, t0 in updated.items():
                    if template[made_by[0]] in into_stack:
                        continue
                    new = self._value(sg, local, made(*made_by)).astype(stacked[t0].dtype)
                    stacked[t0] = lax.dynamic_update_index_in_dim(stacked[t0], new, index, 0)
                out = [self._value(sg, local, made(j, o)) for (j, o), _ in scanned_out]
            finally:
                self._block_weights, self._memo = saved
            return (index + 1, nxt, stacked), out

        (_, carry, stacks), collected = lax.scan(body, (xp.int32(0), initial, stacks), None, length=region.count)
        for (_, per_block), stacked in zip(scanned_out, collected):
            for k, t in enumerate(per_block):
                values[t] = stacked[k]
        for made_by, t0 in updated.items():
            per_block = dict(region.collected)[made_by]
            for k, t in enumerate(per_block):
                values[t] = stacks[t0][k]
        by_maker = {made_by: c for (_, _, made_by), c in zip(region.carried, carry)}
        for made_by, t in region.last:
            values[t] = by_maker[made_by]
        if self.final_stacks is not None:
            self.final_stacks.update((t0, stacks[t0]) for t0 in updated.values())

    def _update_into_stack(self, sg: Subgraph, op: Operator, local: dict, stacked: dict, t0: int, index: Any) -> None:
        """A block's DYNAMIC_UPDATE_SLICE of its layer's slice of stack ``t0``, done on the stack itself (the
        layer index a leading start index; the official clamping of the others): the op's output is the layer's
        slice of the updated stack."""
        lax = self._lax
        stack = stacked[t0]
        update = self._value(sg, local, op.inputs[1])
        starts = self._value(sg, local, op.inputs[2])
        layer_shape = tuple(stack.shape[1:])
        if update.ndim != len(layer_shape) or tuple(starts.shape) != (len(layer_shape),) \
                or any(u > d for u, d in zip(update.shape, layer_shape)):
            raise ModelExecutionError(f"{op}: update {tuple(update.shape)} and start indices {tuple(starts.shape)} "
                                      f"do not fit operand {layer_shape}")
        begin = clamped_update_starts(self._xp, layer_shape, tuple(update.shape), starts.astype(np.int32))
        stacked[t0] = lax.dynamic_update_slice(stack, update.astype(stack.dtype)[None],
                                               [self._xp.asarray(index, np.int32), *begin])
        local[op.outputs[0]] = lax.dynamic_index_in_dim(stacked[t0], index, keepdims=False)

    def _is_weight(self, sg: Subgraph, values: dict, index: int) -> bool:
        value = values.get(index)
        if isinstance(value, _Deferred) or (sg.index, index) in self.precomputed:
            return True
        return value is None and self._param(sg, index) is not None

    def _defers(self, sg: Subgraph, op: Operator, values: dict) -> bool:
        if op.opcode_name in STATEFUL_OPS or called_subgraphs(op) or not op.outputs:
            return False
        if any((sg.index, t) in self.precomputed for t in op.outputs if t >= 0):
            return False
        inputs = [i for i in op.inputs if i >= 0]
        weights = [i for i in inputs if self._is_weight(sg, values, i)]
        if not weights:
            return False
        # every other input must be static: a numpy value, or a constant that is not a parameter
        return all(isinstance(values.get(i), np.ndarray) or (i not in values and sg.tensors[i].has_data)
                   for i in inputs if i not in weights)

    def _run_op(self, sg: Subgraph, op_index: int, values: dict) -> None:
        rewrites = self.row_plan.rewrites.get((sg.index, op_index)) if self.row_plan is not None else None
        if not rewrites:
            return self._run_op_as_given(sg, op_index, values)
        # the op reads some inputs cut to the plan's rows (a cache, the mask) or a shape re-derived for them
        op, rows = sg.operators[op_index], self.row_plan.rows
        scratch = dict(values)
        for rewrite in rewrites:
            t = op.inputs[rewrite.position]
            scratch[t] = rewrite.shape if rewrite.shape is not None else self._lax.slice_in_dim(
                self._value(sg, values, t), 0, rows, axis=rewrite.axis)
        self._run_op_as_given(sg, op_index, scratch)
        values.update((t, scratch[t]) for t in op.outputs if t >= 0 and t in scratch)

    def _run_op_as_given(self, sg: Subgraph, op_index: int, values: dict) -> None:
        op = sg.operators[op_index]
        if self._defers(sg, op, values):
            for t in op.outputs:
                if t >= 0:
                    values[t] = _Deferred(op_index)
            return
        runtime = [values[i] for i in op.inputs if i >= 0 and i in values and not self._is_weight(sg, values, i)
                   and not isinstance(values[i], np.ndarray)]
        saved = self._zero, self._tie_all, self._memo
        # XLA GPU fuses a weight's conversion into the kernel that reads it, where a tie (an add on the
        # weight) would stop that fusion and copy the weight every call (``bench/gpu/gpu_compile.py``): the
        # ties are for XLA CPU, which would convert every weight at the program's start.
        self._zero = None if self.target is Target.XLA_GPU else _zero_after(runtime)
        self._tie_all, self._memo = False, {}
        try:
            super()._run_op(sg, op_index, values)
        finally:
            self._zero, self._tie_all, self._memo = saved

    def _value(self, sg: Subgraph, values: dict, index: int) -> Any:
        if index >= 0:
            value = values.get(index)
            if isinstance(value, _Deferred):
                return self._materialize(sg, index, values)
            if value is None:
                param = self._param(sg, index)
                if param is not None:
                    return self._read_param(sg.tensors[index], param)
        return super()._value(sg, values, index)

    def _materialize(self, sg: Subgraph, index: int, values: dict) -> Any:
        """Trace the deferred op that writes ``index`` (and the deferred ops it reads) for the
        consumer being traced, every parameter tied to that consumer's run-time inputs."""
        if index in self._memo:
            return self._memo[index]
        op_index = values[index].op_index
        op = sg.operators[op_index]
        scratch = {i: values[i] for i in op.inputs if i >= 0 and i in values}
        tie_all = self._tie_all
        self._tie_all = True
        try:
            for i in op.inputs:
                if i >= 0 and isinstance(scratch.get(i), _Deferred):
                    scratch[i] = self._materialize(sg, i, values)
            GraphRunner._run_op(self, sg, op_index, scratch)
        finally:
            self._tie_all = tie_all
        for t in op.outputs:
            if t >= 0:
                self._memo[t] = scratch[t]
        return scratch[index]

    def _read_param(self, t: Tensor, param: Any) -> Any:
        converts = (t.dtype in SUB_BYTE_BITS or t.dtype in INTEGER_DTYPES
                    or (t.dtype == "float32" and self.compute != self.storage))
        if self._tie_all or converts:
            param = tie_to(self._xp, self._lax, param, self._zero)
        if t.dtype in SUB_BYTE_BITS:
            param = _unpack_sub_byte(self._xp, param, t) if param.dtype == np.uint8 else \
                param.astype(self._xp.int8 if t.dtype == "int4" else self._xp.uint8)
        if t.dtype == "float32" and self.compute != self.storage and param.dtype == self.storage:
            param = param.astype(self.compute)
        return param

    def stored_weight(self, sg: Subgraph, index: int) -> Any:
        """The device parameter of a weight as stored (``ops._common.stored_weight``); None when ``index`` is
        no parameter, or the weights are split over devices (a loop over a split axis would gather it)."""
        return None if self.state.mesh is not None else self._param(sg, index)

    def read_constant(self, sg: Subgraph, index: int) -> Any:
        """A constant that an op reads outside its inputs (``ops._common.constant_tensor``)."""
        param = self._param(sg, index)
        return sg.tensors[index].data if param is None else self._read_param(sg.tensors[index], param)

    @functools.cached_property
    def _xp(self) -> Any:
        import jax.numpy as jnp

        return jnp

    @functools.cached_property
    def _lax(self) -> Any:
        from jax import lax

        return lax
