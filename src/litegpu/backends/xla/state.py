"""Weights and resource variables of one model on one device (:class:`XlaState`), shared by all its signatures.

Large constants (weights: float ones, and the quantized integer ones of big models, int4 still packed)
are passed to the program as device-resident parameters rather than embedded in it: compiling
stays fast, weights are transferred to the accelerator once, and on the CPU they stay pages of
the memory-mapped file.  Small constants stay numpy values so that shapes, axes and paddings are
static for XLA.  Ops on constants only are folded at load where the budgets allow; an LLM's repeated layers
have their weights stacked for the layer loop (``layer_scan``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...format.file import release_file_pages
from ...ir import Model, Operator, Subgraph, Tensor, called_subgraphs, numpy_dtype
from ...ir.dtypes import BLOCK_LAYOUTS, SUB_BYTE_BITS, unpack_sub_byte as unpack_host_sub_byte
from ...ops import Target
from ...ops._common import unpack_sub_byte
from ..graph import STATEFUL_OPS, GraphRunner
from ..memory import device_available_bytes, is_out_of_memory, out_of_memory
from ..device_arrays import jax_module

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
# kernel that reads it (XLA fuses the conversion into the matrix product: ``bench/gpu/gpu_compile.py``), so a
# wider copy would only cost memory and, for a memory-bound decode step, time.  (Folding float16 to float32
# on the H200 was 1.77 against 2.27 ms per token while the conversion was not fused, BENCHMARKS.md "GPU".)
FOLD_BUDGET_BYTES = 512 << 20
FOLD_GROWTH_BUDGET_BYTES = 64 << 20
FOLD_GROWTH_DEVICE_SHARE = 0.0
# A subgraph whose ops hold this many alike blocks in a row (an LLM's layers: ``layer_scan``) is traced with one
# block inside ``lax.scan`` over the blocks' weights, which the state holds stacked: XLA compiles one layer, so
# the compile time and the program no longer grow with the depth.  0 turns it off.
SCAN_MIN_BLOCKS = 3
FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")
# (circle's block types, ggml's and MX, are quantized weights held as their file bytes)
INTEGER_DTYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", *SUB_BYTE_BITS,
                  *BLOCK_LAYOUTS)


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
# product but not into a matrix product's kernel, which then reads an int8 copy (``bench/gpu/gpu_compile.py``:
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



class _FoldRunner(GraphRunner):
    """The reference kernels folding constant ops at load, for a program in the builtin kernels' order or not:
    where those kernels depart from the reference ones (``OpContext.builtin_kernels``), the folded weights follow
    the program's choice."""

    def __init__(self, model: Model, official_float_order: bool):
        super().__init__(model, Target.REFERENCE)
        self.official_float_order = official_float_order


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
            from ..sharding import check_devices, make_mesh, weight_axes

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
        """True for a GPU described to the compiler but absent (``backends.xla.deviceless``): programs are compiled
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
        from ..sharding import named_sharding, placement_for

        placement = placement_for(t, value.nbytes, self._axes, (sg.index, t.index), len(self.mesh.devices.flat))
        self.placements[key] = placement
        return jax_module().device_put(value, named_sharding(self.mesh, value.ndim, placement.axis))

    def placement_report(self) -> Any:
        """How the weights sit on the devices (one device: every weight whole on it), measured."""
        from ..sharding import Placement, PlacementReport

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
