"""Weights sharded across several devices of one host: which axis of each weight is split, and how.

A model too big for one device (an LLM past 80 GB), or a user who asks for it, gets its large matrix
weights split along their output dimension over a one-axis device mesh (axis name ``"model"``); every
other weight is replicated, and XLA's sharding propagation (GSPMD) partitions the computation and adds
the communication.  Nothing here writes collectives: the program is the one-device program, traced once,
and the placement of its parameters is the only thing that changes.  Results are the one-device results
up to floating-point reassociation: only output dimensions are split, so no sum is cut in parts.

Which axis is the output dimension depends on the op that reads the weight:

- FULLY_CONNECTED weights ``[out, in]``: axis 0;
- BATCH_MATMUL constant right-hand sides ``[..., K, N]`` (``[..., N, K]`` with ``adj_y``): the N axis;
- EMBEDDING_LOOKUP tables ``[rows, width]`` (and GATHER of rows from a constant table): the width
  (axis 1), so each device gathers its columns;
- the same through the ops that only convert a weight (DEQUANTIZE, CAST: float16 / int8 storage);
- int4 / int2 weights are stored packed, one flat byte array: they split by rows (whole rows per device),
  which for an FC weight is its output dimension and for an embedding table its rows;
- blockwise scales (litert-torch's int4 block32) split with their weight's rows.

The KV cache of a prefill/decode model is split by head where the head count allows it
(:func:`cache_head_axis`); XLA keeps the attention per head on its device.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError
from ..ir import Model, Subgraph, Tensor
from ..ir.dtypes import SUB_BYTE_BITS

MESH_AXIS = "model"
# Weights smaller than this stay replicated: splitting them saves little and costs communication.
SHARD_MIN_BYTES = 64 << 10
# Ops that only change how a weight is stored: the weight is split as their output is.
_CONVERTING_OPS = ("DEQUANTIZE", "CAST")


@dataclasses.dataclass(frozen=True)
class Placement:
    """How one weight lives on the devices: split along ``axis`` (None: a full copy on each device)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    axis: int | None
    reason: str

    def bytes_per_device(self, devices: int) -> int:
        return self.nbytes // devices if self.axis is not None else self.nbytes


@dataclasses.dataclass
class PlacementReport:
    """The weights of a model over ``devices`` devices: what is split and what each device holds."""

    devices: int
    weights: list[Placement]
    measured_bytes_per_device: list[int] | None = None

    @property
    def sharded_bytes(self) -> int:
        return sum(w.nbytes for w in self.weights if w.axis is not None)

    @property
    def replicated_bytes(self) -> int:
        return sum(w.nbytes for w in self.weights if w.axis is None)

    @property
    def estimated_bytes_per_device(self) -> int:
        return sum(w.bytes_per_device(self.devices) for w in self.weights)

    def describe(self, limit: int = 12) -> str:
        total = self.sharded_bytes + self.replicated_bytes
        lines = [f"weights over {self.devices} device(s): {_mib(total)} in all; "
                 f"{sum(w.axis is not None for w in self.weights)} split ({_mib(self.sharded_bytes)}), "
                 f"{sum(w.axis is None for w in self.weights)} replicated ({_mib(self.replicated_bytes)}); "
                 f"estimated {_mib(self.estimated_bytes_per_device)} per device"]
        if self.measured_bytes_per_device is not None:
            lines.append("measured per device: " + ", ".join(_mib(b) for b in self.measured_bytes_per_device))
        for w in sorted(self.weights, key=lambda w: -w.nbytes)[:limit]:
            where = f"split on axis {w.axis}" if w.axis is not None else "replicated"
            lines.append(f"  {_short(w.name)} {w.dtype}{list(w.shape)} {_mib(w.nbytes)}: {where} ({w.reason})")
        if len(self.weights) > limit:
            lines.append(f"  ... {len(self.weights) - limit} smaller weights")
        return "\n".join(lines)


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.2f} MiB"


def _short(name: str, width: int = 60) -> str:
    name = name.split(";")[0]
    return name if len(name) <= width else "..." + name[-(width - 3):]


def make_mesh(devices: Sequence[Any]) -> Any:
    from jax.sharding import Mesh

    return Mesh(np.array(list(devices)), (MESH_AXIS,))


def named_sharding(mesh: Any, rank: int, axis: int | None) -> Any:
    """Split along ``axis`` of a ``rank``-dimensional array over the mesh (None: replicated)."""
    from jax.sharding import NamedSharding, PartitionSpec

    if axis is None:
        return NamedSharding(mesh, PartitionSpec())
    spec = [None] * rank
    spec[axis] = MESH_AXIS
    return NamedSharding(mesh, PartitionSpec(*spec))


def weight_axes(model: Model, devices: int) -> dict[tuple[int, int], tuple[int | None, str]]:
    """(subgraph, tensor) -> (axis to split along or None, why) for every constant the ops read as a
    matrix weight (through converting ops).  Tensors not in the map are replicated."""
    axes: dict[tuple[int, int], tuple[int | None, str]] = {}
    for sg in model.subgraphs:
        producer = {t: op for op in sg.operators for t in op.outputs if t >= 0}
        for op in sg.operators:
            rule = _output_axis(sg, op)
            if rule is None:
                continue
            weight, axis, what = rule
            chain = _through_conversions(sg, weight, producer)
            for index in chain:
                t = sg.tensors[index]
                axes[(sg.index, index)] = _checked_axis(t, axis, devices, what)
                for scales in _blockwise_scales(t):
                    s = sg.tensors[scales]
                    axes[(sg.index, scales)] = _checked_axis(s, 0, devices, f"scales of {what}")
    return axes


def _output_axis(sg: Subgraph, op: Any) -> tuple[int, int, str] | None:
    """(weight tensor, its output axis, what it is) when ``op`` reads a matrix weight."""
    name = op.opcode_name
    if name == "FULLY_CONNECTED" and len(op.inputs) > 1 and op.inputs[1] >= 0:
        return op.inputs[1], 0, "FULLY_CONNECTED weights [out, in]"
    if name == "BATCH_MATMUL" and len(op.inputs) > 1 and op.inputs[1] >= 0:
        rank = len(sg.tensors[op.inputs[1]].shape)
        if rank < 2:
            return None
        adj_y = bool((op.options or {}).get("adj_y", False))
        return op.inputs[1], rank - 2 if adj_y else rank - 1, "BATCH_MATMUL right-hand side, N axis"
    if name == "EMBEDDING_LOOKUP" and len(op.inputs) > 1 and op.inputs[1] >= 0:
        return op.inputs[1], 1, "EMBEDDING_LOOKUP table [rows, width], width axis"
    if (name == "GATHER" and op.inputs and op.inputs[0] >= 0 and len(sg.tensors[op.inputs[0]].shape) == 2
            and int((op.options or {}).get("axis", 0)) == 0 and not int((op.options or {}).get("batch_dims", 0))):
        return op.inputs[0], 1, "GATHER table [rows, width] (rows gathered), width axis"
    return None


def _through_conversions(sg: Subgraph, index: int, producer: dict[int, Any]) -> list[int]:
    """``index`` and the constants it is converted from (float16 -> DEQUANTIZE -> float32 ...)."""
    chain = [index]
    op = producer.get(index)
    while op is not None and op.opcode_name in _CONVERTING_OPS and op.inputs and op.inputs[0] >= 0:
        index = op.inputs[0]
        chain.append(index)
        op = producer.get(index)
    return [i for i in chain if _is_constant(sg.tensors[i]) or i in producer]


def _is_constant(t: Tensor) -> bool:
    return t.raw is not None and t.raw.size > 0


def _checked_axis(t: Tensor, axis: int, devices: int, what: str) -> tuple[int | None, str]:
    """The axis if the weight can be split evenly there (packed sub-byte weights: by whole rows)."""
    shape = tuple(t.shape)
    if t.dtype in SUB_BYTE_BITS:
        bits = SUB_BYTE_BITS[t.dtype]
        row_bits = int(np.prod(shape[1:], dtype=np.int64)) * bits if len(shape) > 1 else bits
        if len(shape) < 1 or shape[0] % devices or row_bits % 8:
            return None, f"{what}: packed {t.dtype} rows do not split evenly over {devices} devices"
        return 0, f"{what}; packed {t.dtype}, split by rows"
    if axis >= len(shape):
        return None, f"{what}: rank {len(shape)}"
    if shape[axis] % devices:
        return None, f"{what}: axis {axis} ({shape[axis]}) does not split evenly over {devices} devices"
    return axis, what


def _blockwise_scales(t: Tensor) -> list[int]:
    details = t.quantization.details if t.quantization is not None else None
    if not details:
        return []
    try:
        index = int(details.get("scales", -1))
    except (TypeError, ValueError):
        return []
    return [index] if index >= 0 else []


def placement_for(t: Tensor, nbytes: int, axes: dict, where: tuple[int, int], devices: int) -> Placement:
    """How the parameter for tensor ``where`` is placed."""
    axis, reason = axes.get(where, (None, "not a matrix weight"))
    if axis is not None and nbytes < SHARD_MIN_BYTES:
        axis, reason = None, f"smaller than {SHARD_MIN_BYTES >> 10} KiB"
    if axis is not None and t.dtype in SUB_BYTE_BITS:
        axis = 0  # the device array is the flat packed bytes: whole rows are contiguous chunks
    return Placement(t.name, tuple(t.shape), t.dtype, nbytes, axis, reason)


def check_devices(devices: Sequence[Any]) -> None:
    platforms = {getattr(d, "platform", None) for d in devices}
    if len(platforms) != 1:
        raise InvalidArgumentError(f"weights can be sharded over devices of one kind, not {sorted(map(str, platforms))}")


def cache_axes(model: Model, subgraph_index: int, devices: int) -> tuple[dict[int, int], dict[int, int]]:
    """(subgraph input tensor -> head axis, output tensor -> head axis) for the KV caches of a signature:
    state that a signature takes and returns under the same name (``kv_cache_k_0`` ...), rank 4
    (heads on their own axis) or rank 3 ([1, T, heads * dim]: split on the last axis, whole heads per
    device when the head count divides evenly)."""
    ins: dict[int, int] = {}
    outs: dict[int, int] = {}
    for s in model.signatures:
        if s.subgraph_index != subgraph_index:
            continue
        returned = {o.name: o.tensor_index for o in s.outputs}
        sg = model.subgraphs[subgraph_index]
        state = {i.name: (i.tensor_index, returned[i.name]) for i in s.inputs
                 if i.name in returned and len(sg.tensors[i.tensor_index].shape) in (3, 4)}
        shapes = {n: tuple(sg.tensors[t].shape) for n, (t, _) in state.items()}
        for name, (t_in, t_out) in state.items():
            axis = _head_axis(name, shapes, devices)
            if axis is not None:
                ins[t_in], outs[t_out] = axis, axis
    return ins, outs


def _head_axis(name: str, shapes: dict[str, tuple], devices: int) -> int | None:
    """The default layout [1, T, heads, dim] (k and v alike) has heads on axis 2; litert-torch's
    transposed one (k [1, heads, T, dim], v [1, heads, dim, T]) on axis 1."""
    shape = shapes[name]
    if len(shape) == 3:
        return 2 if shape[2] % devices == 0 else None
    partner = name.replace("_k_", "_v_") if "_k_" in name else name.replace("_v_", "_k_")
    other = shapes.get(partner, shape)
    transposed = other != shape or (shape[2] == shape[3] and shape[1] < shape[2])
    axis = 1 if transposed else 2
    return axis if shape[axis] % devices == 0 and shape[axis] >= devices else None


def estimate(model: Model, devices: int) -> PlacementReport:
    """The placement of a model's weights over ``devices`` devices, from the model alone (no device is
    needed: ``litegpu inspect --devices 8`` answers for an 8-GPU host anywhere).  Every constant of more
    than 1 KiB counts once per buffer, in its stored type; the run itself may fold float16 weights of small
    models to float32 (see ``backends.xla``), which the measured report shows."""
    axes = weight_axes(model, devices)
    seen: set[Any] = set()
    weights = []
    for sg in model.subgraphs:
        for t in sg.tensors:
            if not _is_constant(t) or t.raw.nbytes <= 1024 or t.dtype in ("string", "resource", "variant"):
                continue
            key = t.buffer if t.buffer > 0 else (sg.index, t.index)
            if key in seen:
                continue
            seen.add(key)
            weights.append(placement_for(t, int(t.raw.nbytes), axes, (sg.index, t.index), devices))
    return PlacementReport(devices, weights)


# Weights above this share of one device's memory are split over all the devices of the accelerator
# when the user named none: the rest is left for activations, the KV cache and XLA's temporaries.
AUTO_SPLIT_SHARE = 0.8


def devices_for_weights(weight_bytes: int, devices: Sequence[Any]) -> list[Any] | None:
    """All ``devices`` when the weights do not fit one of them (by its allocator's limit), else None.
    Devices without allocator statistics (the CPU) never split on their own."""
    if len(devices) < 2:
        return None
    try:
        stats = devices[0].memory_stats() or {}
    except Exception:  # noqa: BLE001  (no statistics on this device kind)
        return None
    limit = stats.get("bytes_limit")
    if not limit or weight_bytes <= AUTO_SPLIT_SHARE * limit:
        return None
    return list(devices)
