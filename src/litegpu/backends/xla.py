"""The XLA backend: a subgraph traced into one ``jax.jit`` program, compiled once per input shape.

Large constants (weights: float ones, and the quantized integer ones of big models, int4 still packed)
are passed to the program as device-resident parameters rather than embedded in it: compiling
stays fast, weights are transferred to the accelerator once, and on the CPU they stay pages of
the memory-mapped file.  Small constants stay numpy values so that shapes, axes and paddings are
static for XLA.  Resource variables are threaded through the program as inputs and outputs.

Weights that the program converts (float16 -> float32 DEQUANTIZE, int8 widened by a hybrid
FULLY_CONNECTED, int4 unpacked) are converted where they are used, not at the program's start:
ops that read only weights are traced when an op with a run-time input consumes their result,
and the weights they read are tied to that input (``ops.common.tie_to``).  Otherwise XLA,
seeing values that depend only on parameters, schedules every conversion first and holds all the
converted weights at once (2x a float16 model's file, 8x an int4 one's).

Weights and variables live in an :class:`XlaState` that all signatures of one
compiled model share (TFLite shares resource variables between subgraphs, and
sharing the weights keeps one copy on the device).

Runs return device arrays without waiting (JAX dispatches asynchronously), so
a GPU run's outputs stay on the GPU and feed the next run without a host copy.
"""

from __future__ import annotations

import collections
import functools
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import AcceleratorUnavailableError, InvalidArgumentError, ModelExecutionError
from ..format.file import release_file_pages
from ..ir import Model, Operator, Subgraph, Tensor, called_subgraphs, numpy_dtype
from ..ir.dtypes import BLOCK_LAYOUTS, SUB_BYTE_BITS, unpack_sub_byte as unpack_host_sub_byte
from ..ops import Target
from ..ops.common import opaque_zero, rounded_apart, tie_to, unpack_sub_byte
from ..ops.fixedpoint import exact_divisions
from ..ops.slicing import clamped_update_starts
from .engine import Engine, EngineSettings, Executable, op_reasons
from .graph import STATEFUL_OPS, GraphRunner, OpRange, split_ops
from .memory import check_fits, device_available_bytes, is_out_of_memory, needed_bytes, out_of_memory

# Float constants with more elements than this become program parameters.
PARAM_MIN_ELEMENTS = 256
# Quantized integer constants (weights) become program parameters when the model's quantized weights
# take at least INT_PARAMS_MODEL_BYTES, those of at least INT_PARAM_MIN_BYTES each.  In smaller models
# they stay in the program, where XLA folds the arithmetic on them (widening, zero points) at compile
# time: mobilenet_v3_small_int8 ran 3 times slower with its weights as parameters.  In big ones they
# would make the program, its compile time and memory grow with them: a 100 MB int8 decoder's HLO held
# 377 MB of int32 constants and took 4.7 GB to compile.
INT_PARAMS_MODEL_BYTES = 16 << 20
INT_PARAM_MIN_BYTES = 64 << 10
# Ops on constants only (DEQUANTIZE of float16 weights, DENSIFY of sparse ones) run once at load,
# so that runs read their results instead of recomputing them.  Results no bigger than their inputs
# are folded up to FOLD_BUDGET_BYTES.  Results bigger than their inputs (float16 -> float32 doubles,
# int8 -> float32 quadruples) are folded only when all of them fit in FOLD_GROWTH_BUDGET_BYTES: in a
# bigger model (a multi-GB float16 LLM) they stay in the program, converted where used, and host
# memory holds the weights once, in their stored dtype.  Mobile float16 models (a few MB to tens of
# MB) fold entirely.  (Converting in every run costs time on a CPU: see BENCHMARKS.md, issue 9.)  On a
# GPU the weights stay as the file holds them, whatever their size (FOLD_GROWTH_DEVICE_SHARE of the device's
# free memory is the budget there, 0 by default): a GPU converts a float16, int8 or int4 weight inside the
# kernel that reads it (XLA fuses the conversion into the matrix product: ``bench/gpu_compile.py``), so a
# wider copy would only cost memory and, for a memory-bound decode step, time.  (Folding float16 to float32
# on the H200 was 1.77 against 2.27 ms per token while the conversion was not fused, BENCHMARKS.md "GPU".)
FOLD_BUDGET_BYTES = 512 << 20
FOLD_GROWTH_BUDGET_BYTES = 64 << 20
FOLD_GROWTH_DEVICE_SHARE = 0.0
# Options of every XLA CPU compile.  XLA's newer fusion emitters needed twice the compile memory of its
# classic ones and kept executables 25 to 35 % bigger (decoder layers of width 4096: 85 against 175 MiB
# to compile a 2-layer decode step, 42 against 56 MiB kept), and did not run faster here (see BENCHMARKS.md).
CPU_COMPILER_OPTIONS: dict[str, Any] = {"xla_cpu_use_fusion_emitters": False}
# ... except for the builtin kernels' float order (``CpuKernelMode.BUILTIN``) on models up to this many weight
# bytes: its depth-ordered sums are loops over the output, which the classic emitters ran 3.6 to 6.8x slower
# than the fusion emitters (a 1x1 convolution of 12544 x 32 -> 64: 4.66 against 0.79 ms; MobileNetV1 whole in
# BUILTIN mode: 104 ms; BENCHMARKS.md, "BUILTIN mode's convolutions").  Bigger models keep the classic emitters
# for their compile memory.
BUILTIN_ORDER_FUSION_EMITTERS_MAX_BYTES = 256 << 20
# Options of every XLA GPU compile.  XLA GPU merges matrix products that share an operand (q, k and v of one
# input) into one product over the concatenated weights, which copies the weights every call and, with
# weights converted from int8 or float16, materializes them as float32 (a 2-layer int8 decoder's prefill:
# 22.7 MB of temporaries, 0.98 MB without the merge; bench/gpu_compile.py); without it each product fuses the
# conversion of its own weight.
GPU_COMPILER_OPTIONS: dict[str, Any] = {"xla_gpu_dot_merger_threshold_mb": 0}
# Runs of programs that allocate at least this much (XLA's temporaries and outputs) first give the C heap's
# free pages back (``_release_freed_memory``): glibc keeps what earlier runs freed (a 3 GB float16 decoder's
# heap grew by 0.24 GiB over 4 decode steps, its peak), and trimming costs far less than such a run.
TRIM_BEFORE_RUN_BYTES = 64 << 20
# Big models compile their big subgraphs in parts of about PART_OPS ops (``split_ops``: cut where the
# fewest bytes cross), each part its own program: XLA's compile memory grows with a program's size and
# comes on top of the weights and of the programs already compiled (a 26-layer int4 decoder's decode step
# took about 1.4 GiB to compile whole).  Only models whose weights take SPLIT_MODEL_BYTES or more, and
# subgraphs without state (variables, calls to other subgraphs), are split.
SPLIT_MODEL_BYTES = 1 << 30
PART_OPS = 256
# A subgraph whose ops hold this many alike blocks in a row (an LLM's layers: ``layer_scan``) is traced with one
# block inside ``lax.scan`` over the blocks' weights, which the state holds stacked: XLA compiles one layer, so
# the compile time and the program no longer grow with the depth.  0 turns it off.
SCAN_MIN_BLOCKS = 3
FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")
# (circle's block types, ggml's and MX, are quantized weights held as their file bytes)
INTEGER_DTYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", *SUB_BYTE_BITS,
                  *BLOCK_LAYOUTS)


@functools.lru_cache(maxsize=1)
def jax_module() -> Any:
    import jax

    # TFLite has int64 and float64 tensors; without x64 jax would silently narrow them.
    jax.config.update("jax_enable_x64", True)
    return jax


def available_platforms() -> set[str]:
    jax = jax_module()
    found = set()
    for platform in ("cpu", "gpu"):
        try:
            if jax.devices(platform):
                found.add(platform)
        except RuntimeError:
            pass
    return found


def _jaxlib_version() -> str:
    import jaxlib

    return getattr(jaxlib, "__version__", "unknown")


def device_for(platform: str) -> Any:
    jax = jax_module()
    try:
        return jax.devices(platform)[0]
    except RuntimeError:
        raise AcceleratorUnavailableError(f"no {platform.upper()} device is visible to JAX on this machine") from None


def is_device_array(value: Any) -> bool:
    """A jax array (without importing jax when nobody has)."""
    return type(value).__module__.startswith("jax") and hasattr(value, "block_until_ready")


def _is_param(t: Tensor, quantized_params: bool, on_accelerator: bool = False) -> bool:
    if not t.has_data or t.sparsity is not None and t.dtype not in FLOAT_DTYPES:
        return False
    if t.dtype in FLOAT_DTYPES:
        return t.num_elements > PARAM_MIN_ELEMENTS
    # Only quantized weights: other integer constants (shapes, axes, index tables) stay static.  On an
    # accelerator every quantized weight is a parameter, as small as a float one: there XLA would fold the
    # conversion of an in-program constant into a float32 constant (4x an int8 weight, 8x an int4 one,
    # compiled into the program), and the program converts parameters inside the kernels that read them.
    if not (quantized_params and t.dtype in INTEGER_DTYPES and _is_quantized(t)):
        return False
    return t.num_elements > PARAM_MIN_ELEMENTS if on_accelerator else t.raw.nbytes >= INT_PARAM_MIN_BYTES


def _quantized_weight_bytes(model: Model) -> int:
    seen: dict[int, int] = {}
    for sg in model.subgraphs:
        for t in sg.tensors:
            if t.has_data and t.dtype in INTEGER_DTYPES and _is_quantized(t):
                seen[t.buffer if t.buffer > 0 else -id(t)] = t.raw.nbytes
    return sum(seen.values())


def _is_quantized(t: Tensor) -> bool:
    q = t.quantization
    packed = t.dtype in SUB_BYTE_BITS or t.dtype in BLOCK_LAYOUTS
    return packed or q is not None and (q.is_affine or q.details is not None)


# Sub-byte weights an accelerator holds in XLA's own 4-bit types (two to a byte on the device, converted inside
# the kernels that read them): packed bytes unpacked by shifts in the program are fused into a matrix-vector
# product but not into a matrix product's kernel, which then reads an int8 copy (``bench/gpu_compile.py``:
# a decoder's prefill).
NATIVE_SUB_BYTE = {"int4": "int4", "uint4": "uint4"}


def _param_array(t: Tensor, native_sub_byte: bool = False) -> np.ndarray:
    """What the device holds for a weight: its values, or for int4 / int2 the packed bytes (unpacked in the
    program, see ``_unpack_sub_byte``), so the memory map is not copied; with ``native_sub_byte`` int4 / uint4 as
    ``ml_dtypes`` values (one byte each on the host, transiently; packed by the device)."""
    if t.dtype in SUB_BYTE_BITS:
        if native_sub_byte and t.dtype in NATIVE_SUB_BYTE:
            # unpacked straight into ml_dtypes' type, and not kept: ``t.data`` would keep an int8 copy
            return unpack_host_sub_byte(t.raw, t.dtype, t.num_elements, NATIVE_SUB_BYTE[t.dtype]).reshape(t.shape)
        return np.ascontiguousarray(t.raw.reshape(-1).view(np.uint8))
    return np.ascontiguousarray(t.data)


def _param_shape_dtype(t: Tensor, storage: np.dtype, native_sub_byte: bool) -> tuple[tuple[int, ...], Any]:
    """(shape, dtype) of what ``_param_array`` gives (after the storage conversion), without reading the data."""
    if t.dtype in SUB_BYTE_BITS:
        if native_sub_byte and t.dtype in NATIVE_SUB_BYTE:
            import ml_dtypes

            return tuple(t.shape), np.dtype(getattr(ml_dtypes, NATIVE_SUB_BYTE[t.dtype]))
        return (t.raw.size,), np.dtype(np.uint8)
    if t.dtype in BLOCK_LAYOUTS:  # the file's bytes (``Tensor.data`` of a block type)
        return (t.raw.size,), np.dtype(np.uint8)
    dtype = np.dtype(numpy_dtype(t.dtype))
    return tuple(t.shape), storage if t.dtype == "float32" and storage != np.float32 else dtype


def _placed_weight(jax: Any, source: np.ndarray, value: np.ndarray, device: Any) -> Any:
    """``value`` (``source``, or its storage-dtype copy) on ``device``.  Where the device array is a
    copy (any GPU; on the CPU a buffer not 64-byte aligned, as the TF converter writes them), the
    file pages that ``source`` was read from are released once the copy is done: without that a
    converter-written 2.55 GiB model peaked at 2.24x its size (copies + resident file pages)."""
    placed = jax.device_put(value, device)
    try:
        aliased = placed.unsafe_buffer_pointer() == source.ctypes.data
    except Exception:  # not a single-device array with a pointer: treat it as a copy
        aliased = False
    if not aliased:
        placed.block_until_ready()
        release_file_pages(source)
    return placed


def _unpack_sub_byte(jnp: Any, packed: Any, t: Tensor) -> Any:
    """``ir.dtypes.unpack_sub_byte`` in the program: element i in the low bits first."""
    values = unpack_sub_byte(jnp, packed, SUB_BYTE_BITS[t.dtype], signed=not t.dtype.startswith("uint"))
    return values.reshape(-1)[:t.num_elements].reshape(t.shape)


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
    """``ops.common.opaque_zero`` of the first numeric run-time value (None when there is none).
    (``lax.optimization_barrier`` was measured not to keep XLA CPU from converting early.)"""
    import jax.numpy as jnp
    from jax import lax

    for a in anchors:
        dtype = getattr(a, "dtype", None)
        if dtype is not None and getattr(a, "size", 0) and (
                jnp.issubdtype(dtype, jnp.number) or jnp.issubdtype(dtype, jnp.bool_)):
            return opaque_zero(jnp, lax, a)
    return None


class _FoldRunner(GraphRunner):
    """The reference kernels folding constant ops at load, for a program in the builtin kernels' order or not:
    where those kernels depart from the reference ones (``OpContext.builtin_kernels``), the folded weights follow
    the program's choice."""

    def __init__(self, model: Model, official_float_order: bool):
        super().__init__(model, Target.REFERENCE)
        self.official_float_order = official_float_order


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
        positions, ``bench/gpu_compile.py``)."""
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
        # weight) would stop that fusion and copy the weight every call (``bench/gpu_compile.py``): the
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
        """The device parameter of a weight as stored (``ops.common.stored_weight``); None when ``index`` is
        no parameter, or the weights are split over devices (a loop over a split axis would gather it)."""
        return None if self.state.mesh is not None else self._param(sg, index)

    def read_constant(self, sg: Subgraph, index: int) -> Any:
        """A constant that an op reads outside its inputs (``ops.common.constant_tensor``)."""
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


class XlaState:
    """Device-resident weights and resource variables of one model on one device."""

    def __init__(self, model: Model, device: Any, storage: np.dtype = np.dtype(np.float32),
                 devices: Sequence[Any] | None = None, platform: str | None = None,
                 official_float_order: bool = False):
        # float kernels in the builtin kernels' order, bit for bit (``OpContext.official_float_order``): where
        # the CPU's builtin kernels were asked for, at some cost in speed
        self.official_float_order = official_float_order
        # With several devices the big matrix weights are split over them (see backends.sharding).
        self.mesh = None
        self.placements: dict[str, Any] = {}  # params key -> sharding.Placement (several devices only)
        if devices is not None and len(devices) > 1:
            from .sharding import check_devices, make_mesh, weight_axes

            check_devices(devices)
            self.mesh = make_mesh(devices)
            self._axes = weight_axes(model, len(devices))
            device = devices[0]
        self.device = device
        # The GPU's rules for weights (as the file holds them, converted where used) follow the platform asked
        # for, also where the CPU stands in for a GPU (tests): ``platform`` names it, else the device's.
        self.on_accelerator = (platform or getattr(device, "platform", "cpu")) != "cpu"
        self.storage = np.dtype(storage)
        self.param_key: dict[tuple[int, int], str] = {}  # (subgraph, tensor) -> params key
        self.folded: dict[tuple[int, int], str] = {}      # (subgraph, tensor) -> params key of a folded op output
        self.stacked_key: dict[tuple[int, int], str] = {}  # (subgraph, template tensor) -> params key of a stack
        self.regions = self._repeated_blocks(model)        # subgraph -> layer_scan.RepeatedBlocks
        # weights held in a stack, read elsewhere on their own (a layer that one signature loops over and another
        # traces by itself): (subgraph, tensor) -> (stack key, block), so that the device holds them once
        self.stack_slice: dict[tuple[int, int], tuple[str, int]] = {}
        self.stacked_offset: dict[tuple[int, int], int] = {}  # (subgraph, template tensor) -> its first block's
        self._stacks = self._plan_stacks(model)             # key -> the tensors stacked, block by block
        self._stack_members = {(t.buffer, t.dtype, tuple(t.shape)): (key, k) for key, tensors in self._stacks.items()
                               for k, t in enumerate(tensors) if t.buffer > 0}
        try:  # weights that do not fit on the device (or in the host, where they are copied) fail here
            self.params = self._device_params(model)
            self._stack_block_weights(model)
            self._fold_constant_ops(model)
            self._drop_unread_params(model)
        except Exception as e:
            if is_out_of_memory(e):
                raise out_of_memory(e, f"{model.source}: the weights on {device}", "loading") from e
            raise
        self.variables: dict = {}

    def _device_params(self, model: Model) -> dict[str, Any]:
        """One device array per weight buffer: tensors of several subgraphs (a ``prefill`` and a
        ``decode`` signature) that share a buffer share the array.  On the CPU a 64-byte aligned
        buffer of the memory map becomes the device array without a copy."""
        jax = jax_module()
        params: dict[str, Any] = {}
        # split over several devices, quantized weights must be parameters too: constants are in every copy
        on_accelerator = self.on_accelerator
        # 4-bit types where the device packs them (a GPU; XLA CPU holds them a byte each, and the AOT-compiled
        # program then asks for another layout than ``device_put`` gives: the CPU standing in keeps them packed)
        native_sub_byte = getattr(self.device, "platform", "cpu") != "cpu"
        quantized_params = self._quantized_params(model)
        for sg in model.subgraphs:
            for t in sg.tensors:
                if not _is_param(t, quantized_params, on_accelerator) or self._in_stack(sg, t):
                    continue
                member = self._stack_members.get((t.buffer, t.dtype, tuple(t.shape))) if t.buffer > 0 else None
                if member is not None and t.sparsity is None:  # read from its stack: the device holds it once
                    self.stack_slice[(sg.index, t.index)] = member
                    continue
                shared = t.buffer > 0 and t.sparsity is None
                key = f"buffer {t.buffer} {t.dtype}{list(t.shape)}" if shared else f"{sg.index}:{t.index}"
                self.param_key[(sg.index, t.index)] = key
                if key not in params:
                    if self.deviceless:  # compiled for, never run: the weight's shape and stored dtype only
                        params[key] = self._spec(*_param_shape_dtype(t, self.storage, native_sub_byte))
                        continue
                    source = _param_array(t, native_sub_byte=native_sub_byte)
                    converts = t.dtype == "float32" and self.storage != np.float32
                    value = source.astype(self.storage) if converts else source
                    if self.mesh is None:
                        params[key] = _placed_weight(jax, source, value, self.device)
                    else:
                        params[key] = self._sharded(key, sg, t, value)
        return params

    def _quantized_params(self, model: Model) -> bool:
        return self.mesh is not None or self.on_accelerator or _quantized_weight_bytes(model) >= INT_PARAMS_MODEL_BYTES

    def _repeated_blocks(self, model: Model) -> dict[int, Any]:
        """The subgraphs traced with one block in a loop (``SCAN_MIN_BLOCKS``); not with weights split over
        devices (their placement is per weight)."""
        if self.mesh is not None or SCAN_MIN_BLOCKS <= 0:
            return {}
        from .layer_scan import find_blocks

        quantized = self._quantized_params(model)
        found = {}
        for sg in model.subgraphs:
            blocks = find_blocks(sg, model.source, min_blocks=SCAN_MIN_BLOCKS, model=model,
                                 is_weight=lambda t: _is_param(t, quantized, self.on_accelerator))
            if blocks is not None:
                found[sg.index] = blocks
        return found

    @staticmethod
    def _stack_key(index: int, tensors: Sequence[Tensor]) -> str:
        return f"stack {tensors[0].dtype}{list(tensors[0].shape)} buffers " + ",".join(
            str(t.buffer) if t.buffer > 0 else f"{index}:{t.index}" for t in tensors)

    def _plan_stacks(self, model: Model) -> dict[str, list[Tensor]]:
        """The stacks to hold: one per stacked weight slot, except that a slot whose weights are consecutive blocks
        of a longer stack reads that one at an offset (``prefill`` may loop over fewer layers than ``decode``, the
        first layer making what the others share): each weight is held once.  Longest slots first."""
        slots = []
        for index, region in self.regions.items():
            sg = model.subgraphs[index]
            for t0, per_block in region.stacked:
                tensors = [sg.tensors[t] for t in per_block]
                if tensors[0].has_data:  # not a subgraph input per block (a KV cache): stacked in the program
                    slots.append((index, t0, tensors))
        stacks: dict[str, list[Tensor]] = {}
        where: dict[tuple, tuple[str, int]] = {}  # (buffer, dtype, shape) -> (stack key, block)
        for index, t0, tensors in sorted(slots, key=lambda slot: -len(slot[2])):
            first = where.get((tensors[0].buffer, tensors[0].dtype, tuple(tensors[0].shape)))
            if first is not None and all(t.buffer > 0 for t in tensors) and all(
                    where.get((t.buffer, t.dtype, tuple(t.shape))) == (first[0], first[1] + k)
                    for k, t in enumerate(tensors)):
                self.stacked_key[(index, t0)], self.stacked_offset[(index, t0)] = first
                continue
            key = self._stack_key(index, tensors)
            stacks.setdefault(key, tensors)
            self.stacked_key[(index, t0)], self.stacked_offset[(index, t0)] = key, 0
            for k, t in enumerate(tensors):
                if t.buffer > 0:
                    where.setdefault((t.buffer, t.dtype, tuple(t.shape)), (key, k))
        return stacks

    def _in_stack(self, sg: Subgraph, t: Tensor) -> bool:
        """Whether ``t`` is a block's weight of this subgraph's loop (read as a slice of its stack there)."""
        region = self.regions.get(sg.index)
        return region is not None and t.index in region.stacked_tensors()

    def _stack_block_weights(self, model: Model) -> None:
        """The planned stacks (``_plan_stacks``) as parameters: the blocks' weights along a new first axis, which
        the loop over the blocks indexes (the ``prefill`` and ``decode`` of one decoder share them)."""
        jax = jax_module()
        native_sub_byte = getattr(self.device, "platform", "cpu") != "cpu"
        for key, tensors in self._stacks.items():
            shape, dtype = _param_shape_dtype(tensors[0], self.storage, native_sub_byte)
            if self.deviceless:
                self.params[key] = self._spec((len(tensors), *shape), dtype)
                continue
            stack = np.empty((len(tensors), *shape), dtype)
            for k, t in enumerate(tensors):  # one weight at a time: the host holds the stack once
                stack[k] = _param_array(t, native_sub_byte=native_sub_byte).astype(dtype, copy=False)
                release_file_pages(t.raw)
            self.params[key] = jax.device_put(stack, self.device)
            del stack

    @property
    def deviceless(self) -> bool:
        """True for a GPU described to the compiler but absent (``backends.deviceless``): programs are compiled
        for it and never run, so weights are shapes (``jax.ShapeDtypeStruct``), not device arrays."""
        return bool(getattr(self.device, "deviceless", False))

    @property
    def sharding(self) -> Any:
        """Where every argument and result of a one-device program lives."""
        if self.deviceless:
            return self.device.sharding
        return jax_module().sharding.SingleDeviceSharding(self.device)

    def _spec(self, shape: Sequence[int], dtype: Any) -> Any:
        return jax_module().ShapeDtypeStruct(tuple(shape), np.dtype(dtype), sharding=self.device.sharding)

    def weight_bytes(self) -> int:
        """Bytes of the weights as this state holds them (on the device, or as shapes for a deviceless target)."""
        return sum(array_bytes(v) for v in self.params.values())

    def _sharded(self, key: str, sg: Subgraph, t: Tensor, value: np.ndarray) -> Any:
        """``value`` over the mesh: split along its tensor's output axis, or a copy on each device."""
        from .sharding import named_sharding, placement_for

        placement = placement_for(t, value.nbytes, self._axes, (sg.index, t.index), len(self.mesh.devices.flat))
        self.placements[key] = placement
        return jax_module().device_put(value, named_sharding(self.mesh, value.ndim, placement.axis))

    def placement_report(self) -> Any:
        """How the weights sit on the devices (one device: every weight whole on it), measured."""
        from .sharding import Placement, PlacementReport

        devices = 1 if self.mesh is None else len(self.mesh.devices.flat)
        weights = [self.placements.get(key) or Placement(key, tuple(np.shape(v)), str(v.dtype), array_bytes(v), None,
                                                         "one device" if devices == 1 else "folded at load")
                   for key, v in self.params.items()]
        measured: dict[Any, int] = {}
        for v in self.params.values():
            for shard in getattr(v, "addressable_shards", ()):
                measured[shard.device] = measured.get(shard.device, 0) + array_bytes(shard.data)
        order = list(self.mesh.devices.flat) if self.mesh is not None else [self.device]
        return PlacementReport(devices, weights, [measured.get(d, 0) for d in order])

    def _fold_constant_ops(self, model: Model) -> None:
        """Run, once and with the reference kernels, ops whose inputs are all constants and whose
        outputs are big enough to be parameters (within the budgets above); their outputs become
        device parameters, so the program reads float32 weights instead of dequantizing float16 (or
        densifying sparse) weights every run.  Signatures that fold the same op on the same buffers
        (``prefill`` and ``decode``) share one result."""
        jax = jax_module()
        runner = _FoldRunner(model, self.official_float_order)
        spent = {False: 0, True: 0}  # output bytes folded, by "the op grows its inputs"
        # Growing folds are all or nothing: in a model past the budget they would buy a few percent
        # of speed for as many percent of memory.
        growth = _growth_to_fold(model, self._block_ops)
        on_accelerator = self.mesh is None and self.on_accelerator
        budget = {False: FOLD_BUDGET_BYTES, True: self._growth_budget(growth, on_accelerator)}
        for sg in model.subgraphs:
            known: dict[int, Any] = {}
            fold_keys: dict[int, str] = {}  # tensor -> the key its folded value has in params
            in_blocks = self._block_ops(sg.index)
            for op in sg.operators:
                outs = _foldable_outputs(sg, op, known) if op.index not in in_blocks else []
                if not outs:
                    continue
                size = sum(_tensor_bytes(t) for t in outs)
                grows = _grows(sg, op, size)
                keys = [self._fold_key(sg, op, t, fold_keys) for t in outs]
                if all(k in self.params for k in keys):  # another signature folded the same op
                    for t, key in zip(outs, keys):
                        self._take_folded(sg, t, key, fold_keys, known)
                    continue
                if spent[grows] + size > budget[grows]:
                    continue
                if self.deviceless:  # the same choice, without computing what would be folded
                    spent[grows] += size
                    for t, key in zip(outs, keys):
                        converts = t.dtype == "float32" and self.storage != np.float32
                        self.params[key] = self._spec(t.shape, self.storage if converts else numpy_dtype(t.dtype))
                        self._take_folded(sg, t, key, fold_keys, known)
                    continue
                try:
                    runner._run_op(sg, op.index, known)
                except Exception:  # not foldable here (the op will report it when the program runs)
                    continue
                spent[grows] += size
                for t, key in zip(outs, keys):
                    value = np.asarray(known[t.index])
                    if t.dtype == "float32" and self.storage != np.float32:
                        value = value.astype(self.storage)
                    self.params[key] = (jax.device_put(value, self.device) if self.mesh is None
                                        else self._sharded(key, sg, t, value))
                    if grows and on_accelerator:  # the host keeps the weights once: later folds read the device's
                        known[t.index] = self.params[key]
                    self._take_folded(sg, t, key, fold_keys, known)

    def _block_ops(self, index: int) -> set[int]:
        """Ops of subgraph ``index`` inside repeated blocks: traced in a loop, never folded at load (a folded
        value is one block's, the loop body is every block's)."""
        region = self.regions.get(index)
        return set() if region is None else {op for ops in region.blocks for op in ops}

    def _growth_budget(self, growth: int, on_accelerator: bool) -> int:
        """Bytes that folds growing their inputs may add: all of ``growth`` or nothing (-1)."""
        limit = FOLD_GROWTH_BUDGET_BYTES
        if on_accelerator:
            free = device_available_bytes(self.device)
            limit = int(free[0] * FOLD_GROWTH_DEVICE_SHARE) if free is not None else 0
        return limit if growth <= limit else -1

    def _take_folded(self, sg: Subgraph, t: Tensor, key: str, fold_keys: dict[int, str], known: dict) -> None:
        self.folded[(sg.index, t.index)] = key
        fold_keys[t.index] = key
        if t.index not in known:  # later folds in this subgraph may read it
            known[t.index] = self.params[key] if self.deviceless else np.asarray(self.params[key])

    def _fold_key(self, sg: Subgraph, op: Operator, out: Tensor, fold_keys: dict[int, str]) -> str:
        """Names an op's folded output by what it is computed from: the op, its options, its inputs'
        buffers (or folded keys) with their types and quantization, and the output's type."""
        def source(i: int) -> str:
            if i < 0:
                return "-"
            t = sg.tensors[i]
            where = fold_keys.get(i) or (f"buffer {t.buffer}" if t.buffer > 0 and t.sparsity is None
                                         else f"{sg.index}:{i}")
            return f"({where} {t.dtype}{list(t.shape)} {t.quantization!r})"

        inputs = " ".join(source(i) for i in op.inputs)
        return (f"fold {op.opcode_name} {op.options!r} [{inputs}] -> {op.outputs.index(out.index)} "
                f"{out.dtype}{list(out.shape)} {out.quantization!r}")

    def _drop_unread_params(self, model: Model) -> None:
        """Weights that only folded ops read (the float16 originals) need not stay on the device."""
        still_read: set[str] = set(self.folded.values()) | set(self.stacked_key.values())
        for sg in model.subgraphs:
            read = set(sg.outputs)
            for op in sg.operators:
                if not op.outputs or not all(t < 0 or (sg.index, t) in self.folded for t in op.outputs):
                    read.update(op.inputs)
                    for i in op.inputs:  # blockwise scales: read by the op through its weights' quantization
                        read.update(sg.tensors[i].detail_tensors if i >= 0 else ())
            still_read.update(self.param_key[(sg.index, t)] for t in read if (sg.index, t) in self.param_key)
        for key in [k for k in self.params if k not in still_read]:
            del self.params[key]
            self.placements.pop(key, None)
        self.param_key = {where: key for where, key in self.param_key.items() if key in self.params}


# Ops that cost nothing in a program (a new shape for the same bytes) are not folded at load: the folded copy
# would only change the parameter's shape, and XLA GPU fuses a weight's vector of scales broadcast in the program
# into the product that reads the weight, not a [C, 1] parameter (``compile.float_view``).
_FREE_IN_THE_PROGRAM = frozenset({"RESHAPE", "SQUEEZE", "EXPAND_DIMS"})


def _foldable_outputs(sg: Subgraph, op: Operator, known: Any) -> list[Tensor]:
    """The outputs of ``op`` if it can be folded at load (inputs all constants or ``known``
    folded values, float outputs big enough to be parameters), else []."""
    if op.opcode_name in STATEFUL_OPS or op.opcode_name in _FREE_IN_THE_PROGRAM or not op.outputs \
            or called_subgraphs(op) or not all(i < 0 or i in known or sg.tensors[i].has_data for i in op.inputs):
        return []
    outs = [sg.tensors[t] for t in op.outputs if t >= 0]
    if any(t.dtype not in FLOAT_DTYPES or t.num_elements <= PARAM_MIN_ELEMENTS for t in outs):
        return []
    return outs


def _grows(sg: Subgraph, op: Operator, size: int) -> bool:
    return size > sum(_tensor_bytes(sg.tensors[i]) for i in op.inputs if i >= 0)


def _growth_to_fold(model: Model, block_ops: Any = lambda index: ()) -> int:
    """Output bytes of the growing ops that folding everything would fold (shared buffers once)."""
    total: dict[tuple, int] = {}
    for sg in model.subgraphs:
        known: set[int] = set()
        skipped = block_ops(sg.index)
        for op in sg.operators:
            outs = _foldable_outputs(sg, op, known) if op.index not in skipped else []
            known.update(t.index for t in outs)
            size = sum(_tensor_bytes(t) for t in outs)
            if outs and _grows(sg, op, size):
                sources = tuple(sg.tensors[i].buffer if i >= 0 and sg.tensors[i].buffer > 0 else (sg.index, i)
                                for i in op.inputs)
                total[(op.opcode_name, sources)] = size
    return sum(total.values())


def _tensor_bytes(t: Tensor) -> int:
    if t.dtype in ("resource", "variant", "string"):
        return 0
    if t.dtype in SUB_BYTE_BITS:
        return (t.num_elements * SUB_BYTE_BITS[t.dtype] + 7) // 8
    return t.num_elements * np.dtype(numpy_dtype(t.dtype)).itemsize


def _in_place_updates(sg: Subgraph, region: Any) -> dict:
    """Collected slots of repeated blocks that are a new value of a per-block input: made by an op of the block
    whose first input is that input, of the same shape and type (a layer's KV cache and its DYNAMIC_UPDATE_SLICE);
    slot -> the template input."""
    template = region.blocks[0]
    per_block_inputs = {t0 for t0, per_block in region.stacked if not sg.tensors[per_block[0]].has_data}
    found: dict = {}
    for made_by, _ in region.collected:
        op = sg.operators[template[made_by[0]]]
        source = op.inputs[0] if op.inputs else -1
        out = sg.tensors[op.outputs[made_by[1]]]
        if source in per_block_inputs and source not in found.values():
            t = sg.tensors[source]
            if tuple(t.shape) == tuple(out.shape) and t.dtype == out.dtype:
                found[made_by] = source
    return found


def _in_place_sources(sg: Subgraph, region: Any) -> list[int]:
    return list(_in_place_updates(sg, region).values())


def array_bytes(value: Any) -> int:
    """Bytes of an array, a device array or a ``jax.ShapeDtypeStruct`` (4-bit types: two elements a byte, as
    devices hold them)."""
    count = int(np.prod(np.shape(value), dtype=np.int64))
    if np.dtype(value.dtype).name in NATIVE_SUB_BYTE.values():
        return (count + 1) // 2
    return count * np.dtype(value.dtype).itemsize


def _release_freed_memory() -> None:
    """Give the C heap's free pages back to the system around a compile.  XLA's compiler frees most of
    what it allocates, and runs free their buffers, but glibc keeps the pages (0.3 GiB after compiling
    a 3 GB decoder's prefill), and the next compile, whose allocations do not reuse them, peaks on
    top of them."""
    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def _split_donated(args: Sequence[Any], donated: tuple[int, ...]) -> tuple[list, list]:
    """(the arguments with None where donated, the donated ones): ``XlaBackend._trace_consuming``'s inputs."""
    return [None if i in donated else a for i, a in enumerate(args)], [args[i] for i in donated]


def _shape_key(arrays: Sequence[Any]) -> tuple:
    # dtype objects, not their names: str(dtype) is python code in numpy, measurable per run on tiny models
    return tuple((tuple(np.shape(a)), a.dtype) for a in arrays)


class XlaBackend:
    """One subgraph of a model compiled by XLA for one device; compiled once per input shape.

    ``precision`` is "fp32" (default), "fp16" or "fp16_fp32_accum" (see
    ``litegpu.compile.precision``).  Pass ``state`` to share weights and
    variables with the other signatures of the same model.
    """

    def __init__(self, model: Model, subgraph_index: int = 0, platform: str = "cpu", dtype_policy: Any = None, *,
                 precision: Any = None, state: XlaState | None = None, cache: Any = None,
                 cache_key: dict | None = None, op_range: OpRange | None = None):
        self.jax = jax_module()
        self.model = model
        self.subgraph_index = subgraph_index
        # With an op range, the program runs only those ops (one partition of a delegation plan).
        self.op_range = op_range
        self.platform = platform
        self.policy = _Precision(precision if precision is not None else dtype_policy)
        self.device = state.device if state is not None else device_for(platform)
        self.target = Target.XLA_GPU if platform == "gpu" else Target.XLA_CPU
        self.state = state if state is not None else XlaState(model, self.device, self.policy.storage_dtype)
        self._shapes: dict[tuple, list[tuple[tuple[int, ...], np.dtype]]] = {}
        # Every argument placed on the device: without shardings, jit compiles again when a run's
        # inputs are committed device arrays (the previous run's outputs: a KV cache) where the first
        # run's were host arrays (measured: a 3 GB decoder compiled its prefill twice, 13 s each).
        if self.state.mesh is None:
            on_device = self.state.sharding
            self._jit_options: dict[str, Any] = {"in_shardings": on_device, "out_shardings": on_device}
        else:  # weights split over several devices: XLA propagates their shardings through the program
            from .sharding import cache_axes

            self._cache_in, self._cache_out = cache_axes(model, subgraph_index, len(self.state.mesh.devices.flat))
            self._jit_options = {}
        self._program = self.jax.jit(self._trace, **self._jit_options)
        # With a compile cache, compiled executables are serialized to disk and a later process
        # loads them instead of tracing and compiling (see litegpu.backends.cache).
        self.cache = cache
        self.cache_key = dict(cache_key or {})
        self._executables: dict[str, Any] = {}
        self._by_shape: dict[tuple, Any] = {}  # input and variable shapes -> compiled executable
        self._parts = self._split_parts(cache, cache_key) if op_range is None else []
        self._big_runs: set[tuple] = set()     # shapes whose runs trim the C heap first (TRIM_BEFORE_RUN_BYTES)

    def _split_parts(self, cache: Any, cache_key: dict | None) -> list["XlaBackend"]:
        """Backends for the parts of a big subgraph (see PART_OPS), or [] to compile it whole."""
        sg = self.subgraph
        if self.subgraph_index in self.state.regions:  # one block traced in a loop: a small program already
            return []
        if len(sg.operators) <= 2 * PART_OPS or any(
                op.opcode_name in STATEFUL_OPS or called_subgraphs(op) for op in sg.operators):
            return []
        if self.state.weight_bytes() < SPLIT_MODEL_BYTES:
            return []
        from ..ir import execution_order

        ranges = split_ops(sg, execution_order(sg, self.model.source), PART_OPS, _tensor_bytes)
        return [XlaBackend(self.model, self.subgraph_index, self.platform, precision=self.policy.name,
                           state=self.state, cache=cache, cache_key=cache_key, op_range=r) for r in ranges]

    def _run_parts(self, inputs: Sequence[Any], consumable: Sequence[int] = ()) -> list[Any]:
        values = dict(zip(self.subgraph.inputs, inputs))
        free = {self.subgraph.inputs[i] for i in consumable} | self._part_results
        for part, last_reads in zip(self._parts, self._last_reads):
            ins = part.op_range.inputs
            mine = [k for k, t in enumerate(ins) if t in free and t in last_reads]
            values.update(zip(part.op_range.outputs, part.run([values[t] for t in ins], consumable=mine)))
        return [values[t] for t in self.subgraph.outputs]

    @functools.cached_property
    def _part_results(self) -> set[int]:
        """Tensors one part makes for later parts only (not the subgraph's outputs): each may be consumed
        by the last part that reads it."""
        made = {t for part in self._parts for t in part.op_range.outputs}
        return made - set(self.subgraph.outputs) - set(self.subgraph.inputs)

    @functools.cached_property
    def _last_reads(self) -> list[set[int]]:
        """Per part, the tensors that no later part reads (nor the subgraph returns).  A part's inputs are
        distinct tensors (``graph.split_ops``)."""
        last: dict[int, int] = {}
        for j, part in enumerate(self._parts):
            for t in part.op_range.inputs:
                last[t] = j
        outputs = set(self.subgraph.outputs)
        return [{t for t in part.op_range.inputs if last[t] == j and t not in outputs}
                for j, part in enumerate(self._parts)]

    @property
    def compiled_shapes(self) -> set[tuple]:
        """The argument shapes (and variable shapes) compiled so far: one executable each."""
        return set(self._by_shape)

    @staticmethod
    def storage_dtype(precision: Any) -> np.dtype:
        """How float32 weights are held under ``precision``."""
        return _Precision(precision).storage_dtype

    @property
    def subgraph(self) -> Subgraph:
        return self.model.subgraphs[self.subgraph_index]

    @property
    def params(self) -> dict[str, Any]:
        return self.state.params

    @property
    def variables(self) -> dict:
        return self.state.variables

    @variables.setter
    def variables(self, value: dict) -> None:
        self.state.variables = value

    def _to_storage(self, x: Any, t: Tensor) -> Any:
        return x.astype(self.policy.storage_dtype) if t.dtype == "float32" and self.policy.is_reduced else x

    def _to_boundary(self, y: Any, t: Tensor) -> Any:
        if t.dtype in ("resource", "variant", "string"):
            return y
        dtype = numpy_dtype(t.dtype)
        return y if y.dtype == dtype else y.astype(dtype)

    def _trace_consuming(self, params: dict, variables: dict, kept: list, consumed: list) -> tuple[list, dict]:
        """``_trace`` with the inputs in two lists: ``consumed`` (donated to XLA, whose memory the outputs
        may take) fills the places that are None in ``kept``."""
        taken = iter(consumed)
        return self._trace(params, variables, [next(taken) if x is None else x for x in kept])

    @functools.cached_property
    def _consuming_program(self) -> Any:
        return self.jax.jit(self._trace_consuming, donate_argnums=(3,), **self._jit_options)

    def trace(self, params: dict, variables: dict, inputs: list) -> tuple[list, dict]:
        """The subgraph (or partition) as a function of JAX values: (outputs, variables), for programs that
        contain it (``xla_generate``'s decode loop).  The inputs are in the subgraph's order."""
        return self._trace(params, variables, inputs)

    def trace_stacked(self, params: dict, variables: dict, inputs: list, stacks: dict) -> tuple[list, dict, dict]:
        """``trace`` where the per-block inputs of the subgraph's repeated blocks (``stacked_inputs``) come stacked,
        as ``stacks`` (template tensor -> [blocks, ...]), their own places in ``inputs`` None; also returns the
        stacks as the blocks left them (a KV cache updated in place).  The decode loop carries its caches so: one
        stack for the whole generation, never copied per step."""
        runner_stacks: dict = {}
        outputs, variables = self._trace(params, variables, inputs, given_stacks=stacks, final_stacks=runner_stacks)
        return outputs, variables, runner_stacks

    def stacked_inputs(self) -> dict[int, tuple[int, ...]]:
        """Template tensor -> the subgraph input positions, block by block, of the per-block subgraph inputs that its
        repeated blocks update in place (the KV caches of a decoder's layers); {} without repeated blocks."""
        region = self.state.regions.get(self.subgraph_index)
        if region is None or self.op_range is not None:
            return {}
        sg = self.subgraph
        updated = {source for source in _in_place_sources(sg, region)}
        return {t0: tuple(list(sg.inputs).index(t) for t in per_block) for t0, per_block in region.stacked
                if t0 in updated and all(t in sg.inputs for t in per_block)}

    def _trace(self, params: dict, variables: dict, inputs: list, *, given_stacks: dict | None = None,
               final_stacks: dict | None = None) -> tuple[list, dict]:
        # on the CPU the quantization steps divide as the builtin kernels' C does (ops.fixedpoint)
        with exact_divisions(self.target is Target.XLA_CPU):
            return self._trace_ops(params, variables, inputs, given_stacks=given_stacks, final_stacks=final_stacks)

    def _trace_ops(self, params: dict, variables: dict, inputs: list, *, given_stacks: dict | None = None,
                   final_stacks: dict | None = None) -> tuple[list, dict]:
        sg = self.subgraph
        runner = _XlaRunner(self.model, self.target, params=params, state=self.state,
                            constant=lambda sg_index, t: self._to_storage(t.data, t), variables=dict(variables),
                            storage=self.policy.storage_dtype, compute=self.policy.compute_dtype)
        runner.given_stacks, runner.final_stacks = given_stacks or {}, final_stacks
        edge_in, edge_out = (sg.inputs, sg.outputs) if self.op_range is None else (
            self.op_range.inputs, self.op_range.outputs)
        inputs = [None if x is None else self._to_storage(x, sg.tensors[t]) for x, t in zip(inputs, edge_in)]
        if self.state.mesh is not None:
            inputs = [self._by_head(x, self._cache_in.get(t)) for x, t in zip(inputs, edge_in)]
        if self.op_range is None:
            outputs = runner.run_subgraph(self.subgraph_index, inputs)
        else:
            outputs = runner.run_ops(self.op_range, inputs)
        outputs = [self._to_boundary(y, sg.tensors[t]) for y, t in zip(outputs, edge_out)]
        if self.state.mesh is not None:
            outputs = [self._by_head(y, self._cache_out.get(t)) for y, t in zip(outputs, edge_out)]
        return outputs, runner.variables

    def _by_head(self, x: Any, axis: int | None) -> Any:
        """A KV cache kept split by head over the devices (the attention of a head stays on its device)."""
        if axis is None:
            return x
        from .sharding import named_sharding

        return self.jax.lax.with_sharding_constraint(x, named_sharding(self.state.mesh, x.ndim, axis))

    def _place(self, inputs: Sequence[Any]) -> list[Any]:
        """Host arrays go to the program as they are: jit copies them to the device in one C++
        call, which is much cheaper per run than a ``device_put`` per input.  Device arrays on
        another device (a GPU output fed to a CPU program, say) are moved explicitly."""
        if self.state.mesh is not None:
            return self._place_on_mesh(inputs)
        placed = []
        for x in inputs:
            if is_device_array(x):
                placed.append(x if self.device in x.devices() else self.jax.device_put(x, self.device))
            else:
                placed.append(np.asarray(x))
        return placed

    def _place_on_mesh(self, inputs: Sequence[Any]) -> list[Any]:
        """Device arrays already over the model's devices (the previous step's KV cache) stay where they
        are; others are copied to every device (one program's committed arguments share one device set)."""
        from .sharding import named_sharding

        mesh = set(self.state.mesh.devices.flat)
        replicated = [None if not is_device_array(x) or x.devices() == mesh
                      else named_sharding(self.state.mesh, x.ndim, None) for x in inputs]
        return [np.asarray(x) if not is_device_array(x) else x if where is None else self.jax.device_put(x, where)
                for x, where in zip(inputs, replicated)]

    @property
    def where(self) -> str:
        """The model, signature and partition this program runs, for error messages."""
        names = [s.key for s in self.model.signatures if s.subgraph_index == self.subgraph_index]
        part = f"subgraph {self.subgraph_index}" if self.op_range is None else str(self.op_range)
        return f"{self.model.source}: " + (f"signature {names[0]!r} ({part})" if names else part) + \
            f" on XLA {self.platform.upper()}"

    # CompiledModel tells backends with this attribute which inputs a run may consume (``run(consumable=)``).
    consumes_inputs = True

    def run(self, inputs: Sequence[Any], consumable: Sequence[int] = ()) -> list[Any]:
        """Run on device arrays or numpy; returns device arrays (dispatch is asynchronous, except for
        the first run of each compiled program, which is checked by the memory guard and waited for).
        ``consumable``: positions of inputs the caller will not read again (a KV cache whose buffer
        receives the new one): device arrays there are donated to XLA, which computes an output of the
        same shape in their memory instead of holding both (they are deleted)."""
        if self._parts:
            return self._run_parts(inputs, consumable)
        args = self._place(inputs)
        # variables too: a stateful program's first run gets none and compiles again for the next
        shapes = _shape_key(args) + tuple((k, np.shape(v), getattr(v, "dtype", None))
                                          for k, v in self.variables.items())
        compiled = self._by_shape.get(shapes)
        if compiled is None:
            consumed = self._donated_positions(args, consumable)
            return self._first_run(shapes, self._to_donate(args, inputs, consumed, consumable), consumed)
        executable, consumed = compiled
        if shapes in self._big_runs:
            _release_freed_memory()
        try:
            outputs, self.variables = self._call(executable, self._to_donate(args, inputs, consumed, consumable),
                                                 consumed)
        except Exception as e:
            raise (out_of_memory(e, self.where, "running") if is_out_of_memory(e) else e) from e
        return outputs

    def _donated_positions(self, args: Sequence[Any], consumable: Sequence[int]) -> tuple[int, ...]:
        """The inputs that the program compiled for these arguments takes as donated (fixed with it: one
        executable per shape, whatever later runs allow): the consumable ones, each held at one position.
        Not with weights split over devices (their placement is XLA's to choose)."""
        if not consumable or self.state.mesh is not None:
            return ()
        ids = collections.Counter(id(a) for a in args)
        return tuple(i for i in sorted(set(consumable)) if 0 <= i < len(args) and ids[id(args[i])] == 1)

    def _to_donate(self, args: list[Any], inputs: Sequence[Any], donated: tuple[int, ...],
                   consumable: Sequence[int]) -> list[Any]:
        """``args`` with each donated position holding an array XLA may take: the caller's device array
        where the caller gave it up (``consumable``), else a device copy of the value (a host array, or one
        the caller still holds), so that no array of the caller's is ever deleted or written."""
        if not donated:
            return args
        ids = collections.Counter(id(a) for a in args)
        out = list(args)
        for i in donated:
            x = args[i]
            if is_device_array(x) and ids[id(x)] == 1 and (i in consumable or x is not inputs[i]):
                continue  # given up by the caller, or already our copy (``_place`` moved it here)
            out[i] = x.copy() if is_device_array(x) else self.jax.device_put(np.array(x, copy=True), self.device)
        return out

    def _call(self, executable: Any, args: list[Any], consumed: tuple[int, ...]) -> tuple[list, dict]:
        if not consumed:
            return executable(self.params, self.variables, args)
        return executable(self.params, self.variables, *_split_donated(args, consumed))

    def _first_run(self, shapes: tuple, args: list[Any], consumed: tuple[int, ...] = ()) -> list[Any]:
        """Compile, check that a run fits in memory (``backends.memory``), run and wait: an allocation
        failure of a run surfaces only when it is waited on, so the first one is waited on here."""
        _release_freed_memory()  # the buffers of earlier runs, freed but kept by the C heap, would add to its peak
        doing = "compiling"
        try:
            executable = (self._compile(args, consumed) if self.cache is None
                          else self._cached_executable(args, consumed))
            _release_freed_memory()
            check_fits(executable, self.device, args, self.where)
            doing = "running"
            outputs, variables = self._call(executable, args, consumed)
            for y in outputs:
                if hasattr(y, "block_until_ready"):
                    y.block_until_ready()
        except Exception as e:
            raise (out_of_memory(e, self.where, doing) if is_out_of_memory(e) else e) from e
        self.variables = variables
        self._by_shape[shapes] = (executable, consumed)
        if (needed_bytes(executable) or 0) >= TRIM_BEFORE_RUN_BYTES:
            self._big_runs.add(shapes)
        _release_freed_memory()
        return outputs

    def _compile(self, args: Sequence[Any], consumed: tuple[int, ...] = ()) -> Any:
        """The program compiled for these arguments, with ``CPU_COMPILER_OPTIONS`` on the CPU (a jaxlib
        that does not know one of them compiles without them)."""
        if consumed:
            with warnings.catch_warnings():  # a donated input no output can take (another shape) is just kept
                warnings.filterwarnings("ignore", message="Some donated buffers were not usable")
                lowered = self._consuming_program.lower(self.params, self.variables, *_split_donated(args, consumed))
        else:
            lowered = self._program.lower(self.params, self.variables, args)
        return self._compile_lowered(lowered)

    @property
    def compiler_options(self) -> dict[str, Any]:
        """XLA options for the device this program is compiled for (a GPU's, the host's)."""
        if getattr(self.device, "platform", "cpu") == "gpu":
            return dict(GPU_COMPILER_OPTIONS)
        if self.platform != "cpu":
            return {}
        if self.state.official_float_order and self._weight_bytes <= BUILTIN_ORDER_FUSION_EMITTERS_MAX_BYTES:
            return {}
        return dict(CPU_COMPILER_OPTIONS)

    @functools.cached_property
    def _weight_bytes(self) -> int:
        from ..ir.save import constant_bytes

        return constant_bytes(self.model)

    def compile_program(self, jitted: Any, args: Sequence[Any], what: dict) -> Any:
        """``jitted`` (a ``jax.jit`` of a function of this backend's ``params`` and ``args``, placed with
        ``state.sharding``) compiled with this backend's options: through the compile cache when there is one,
        ``what`` telling it apart from the subgraph's own programs (``xla_generate``'s decode loop).  The result
        is called as ``compiled(params, *args)``."""
        from .cache import found_or_made, make_key

        key = None
        if self.cache is not None:
            key = make_key({**self.cache_key, "program": what, "subgraph": self.subgraph_index,
                            "platform": self.platform, "device_kind": getattr(self.device, "device_kind", self.platform),
                            "precision": repr(self.policy.storage_dtype) + repr(self.policy.compute_dtype),
                            "inputs": [(tuple(np.shape(a)), str(a.dtype)) for a in self.jax.tree_util.tree_leaves(args)],
                            "jax": self.jax.__version__, "jaxlib": _jaxlib_version(),
                            "compiler_options": sorted(self.compiler_options.items())})

        def compiled() -> Any:
            _release_freed_memory()
            executable = self._compile_lowered(jitted.lower(self.params, *args))
            _release_freed_memory()
            if key is not None:
                self._store_executable(key, executable, self.jax.tree_util.tree_leaves(args))
            return executable

        executable = found_or_made(self.cache, key, lambda: None if key is None else (
            self._executables.get(key) or self._load_executable(key)), compiled)
        if key is not None:
            self._executables[key] = executable
        return executable

    def _compile_lowered(self, lowered: Any) -> Any:
        options = self.compiler_options
        if options:
            try:
                return lowered.compile(compiler_options=options)
            except Exception as e:  # an option this XLA does not have: compile with its defaults
                if "option" not in str(e).lower() and "flag" not in str(e).lower():
                    raise
        return lowered.compile()

    def _executable_key(self, args: Sequence[Any], consumed: tuple[int, ...] = ()) -> str:
        from .cache import make_key

        def layout(values: Any) -> list:
            return [(tuple(v.shape), str(v.dtype)) for v in values]

        variables = sorted((repr(k), tuple(np.shape(v)), str(v.dtype)) for k, v in self.variables.items())
        return make_key({**self.cache_key, "subgraph": self.subgraph_index, "platform": self.platform,
                         "device_kind": getattr(self.device, "device_kind", self.platform),
                         **({"devices": len(self.state.mesh.devices.flat)} if self.state.mesh is not None else {}),
                         "precision": repr(self.policy.storage_dtype) + repr(self.policy.compute_dtype),
                         "inputs": layout(args), "variables": variables,
                         "jax": self.jax.__version__, "jaxlib": _jaxlib_version(),
                         "compiler_options": sorted(self.compiler_options.items()),
                         **({"ops": list(self.op_range.op_indices)} if self.op_range is not None else {}),
                         **({"consumed": list(consumed)} if consumed else {})})

    def _cached_executable(self, args: Sequence[Any], consumed: tuple[int, ...] = ()) -> Any:
        from .cache import found_or_made

        def compiled() -> Any:
            executable = self._compile(args, consumed)
            self._store_executable(key, executable, args)
            return executable

        key = self._executable_key(args, consumed)
        executable = found_or_made(self.cache, key, lambda: self._executables.get(key) or self._load_executable(key),
                                   compiled)
        self._executables[key] = executable
        return executable

    def _load_executable(self, key: str) -> Any:
        import pickle

        from jax.experimental import serialize_executable

        blob = self.cache.load(key)
        if blob is None:
            return None
        try:
            payload, in_tree, out_tree = pickle.loads(blob)
            return serialize_executable.deserialize_and_load(payload, in_tree, out_tree)
        except Exception as e:  # checksummed, yet not loadable here (e.g. a changed runtime): rebuild it
            self.cache.discard(key, f"cannot be loaded ({type(e).__name__}: {e})")
            return None

    def _store_executable(self, key: str, executable: Any, args: Sequence[Any]) -> None:
        import pickle

        from jax.experimental import serialize_executable

        try:
            payload, in_tree, out_tree = serialize_executable.serialize(executable)
        except Exception:  # some platforms cannot serialize; the in-memory executable still runs
            return
        self.cache.store(key, pickle.dumps((payload, in_tree, out_tree)),
                         {"engine": "xla", "what": "compiled program", "source": self.model.source,
                          "model": self.cache_key.get("model_token"), "subgraph": self.subgraph_index,
                          "platform": self.platform, "inputs": [tuple(a.shape) for a in args]})

    def lower(self, args: Sequence[Any]) -> Any:
        """The whole subgraph's (or partition's) program for these arguments (arrays, or ``jax.ShapeDtypeStruct``
        placed with ``state.sharding``) lowered, not compiled: ``.compile()`` compiles it, for a deviceless target
        (``backends.deviceless``) the only thing such a program can do.  ``parts`` are lowered separately."""
        return self._program.lower(self.params, self.variables, list(args))

    @property
    def parts(self) -> list["XlaBackend"]:
        """The backends of the parts a big subgraph is compiled in (``PART_OPS``), [] when it is compiled whole."""
        return list(self._parts)

    def output_shapes(self, input_shapes: Sequence[tuple[tuple[int, ...], Any]]) -> list[tuple[tuple[int, ...], np.dtype]]:
        """Output (shape, dtype) for inputs of these (shape, dtype), by tracing only (no compile, no run)."""
        key = tuple((tuple(int(d) for d in s), str(np.dtype(d))) for s, d in input_shapes)
        if self._parts and key not in self._shapes:
            known = dict(zip(self.subgraph.inputs, key))
            for part in self._parts:
                known.update(zip(part.op_range.outputs, part.output_shapes([known[t] for t in part.op_range.inputs])))
            self._shapes[key] = [(tuple(known[t][0]), np.dtype(known[t][1])) for t in self.subgraph.outputs]
        if key not in self._shapes:
            specs = [self.jax.ShapeDtypeStruct(s, np.dtype(d)) for s, d in key]
            try:
                outputs, _ = self.jax.eval_shape(self._trace, self.params, self.variables, specs)
            except ModelExecutionError:
                raise
            except Exception as e:
                raise ModelExecutionError(f"{self.model.source}: subgraph {self.subgraph_index} cannot take inputs "
                                          f"of shapes {[s for s, _ in key]}: {type(e).__name__}: {e}") from e
            self._shapes[key] = [(tuple(o.shape), np.dtype(o.dtype)) for o in outputs]
        return list(self._shapes[key])

    def reset_variables(self) -> None:
        self.variables = {}


def export_program(backend: XlaBackend, params: dict, variables: dict, inputs: Sequence[Any]) -> Any:
    """The program of ``backend`` as versioned StableHLO (``jax.export``), for engines that compile StableHLO
    themselves (``backends.iree``).  ``params``, ``variables`` and ``inputs`` give the shapes and dtypes
    (``jax.ShapeDtypeStruct``) of its three arguments, the weights and variables included as arguments rather
    than constants; ``Exported.in_tree`` and ``module_kept_var_idx`` say which flattened arguments the module
    takes.  Lowered with the CPU's lowering rules (portable StableHLO, no CUDA custom calls); the op rules are
    the backend's own (``backend.target``)."""
    jax = backend.jax
    return jax.export.export(jax.jit(backend._trace), platforms=["cpu"])(params, variables, list(inputs))


class XlaCpuEngine(Engine):
    """Exact TFLite kernels (integers bit for bit) traced into XLA programs on the host."""

    name, target = "xla", Target.XLA_CPU

    def available(self) -> bool:
        try:
            return "cpu" in available_platforms()
        except ImportError:
            return False

    def unsupported(self, model: Model, subgraph: int, op_indices: Sequence[int]) -> dict[int, str]:
        return op_reasons(model, subgraph, op_indices, self.target)

    def compile(self, model: Model, op_range: OpRange, settings: EngineSettings, cache: Any = None,
                cache_key: dict | None = None, state: Any = None) -> Executable:
        """An ``XlaBackend`` over ``op_range`` (one program per input shape).  ``state`` holds the device
        weights and variables; partitions of one model pass the same one so that weights are placed once."""
        if state is None:
            state = XlaState(model, device_for("cpu"), XlaBackend.storage_dtype(settings.precision))
        return XlaBackend(model, op_range.subgraph, "cpu", precision=settings.precision, state=state, cache=cache,
                          cache_key=cache_key, op_range=op_range)

    def describe(self) -> str:
        import jax
        import jaxlib

        return f"jax {jax.__version__} / jaxlib {jaxlib.__version__}; devices: " + ", ".join(
            sorted({d.platform for d in jax.devices()}))
