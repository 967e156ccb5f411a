"""From decoded schema tables to the IR, verifying what the model means.

The codec already guarantees every byte read lies inside the file; this
module checks the semantics: indices in range, buffer ``offset/size`` inside
the file and clear of the FlatBuffer, shapes that fit in memory, data sizes
that match shapes, operator graphs and subgraph calls without cycles.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import ModelFormatError
from ..format import CIRCLE, RawModel, decode_model
from ..format.file import ModelSource
from .dtypes import SUB_BYTE_BITS, from_tflite, storage_bytes
from .model import Buffer, Metadata, Model, Operator, Options, Quantization, Signature, SignatureTensor, Subgraph, Tensor
from .opcodes import absent_options, builtin_codes, options_table_for

MAX_RANK = 64
MAX_TENSOR_BYTES = 1 << 48  # far past any real model; keeps arithmetic from overflowing downstream
CUSTOM_CODE = 32
# OperatorCode.deprecated_builtin_code holds this where the op's code does not fit a byte.
PLACEHOLDER_FOR_GREATER_OP_CODES = 127


def read_model(source: ModelSource) -> Model:
    """Read and verify a .tflite or .circle model from a path (memory-mapped), bytes or a binary file."""
    return model_from_raw(decode_model(source))


def _values(vector: Any) -> tuple:
    """A decoded scalar vector (a numpy view into the file) as a tuple of Python ints or floats; () where absent.
    ``tolist`` converts in C: per element in Python, the quantization parameters of an int8 model's tensors were
    a third of its load."""
    if vector is None:
        return ()
    return tuple(vector.tolist() if isinstance(vector, np.ndarray) else vector)


def operator_code(raw: Mapping, circle: bool = False) -> int:
    """The op code a decoded OperatorCode table means.  TFLite keeps it in two fields: the byte
    ``deprecated_builtin_code`` (codes up to 127, the only field older writers fill) and the wide
    ``builtin_code`` (which such files leave at its default, 0, ADD); the op is the larger of the two."""
    new = raw.get("builtin_code")
    new = int(builtin_codes().get(new, new)) if isinstance(new, str) else int(new or 0)
    deprecated = int(raw.get("deprecated_builtin_code") or 0)
    if circle:
        # As ONE's loaders read it: the wide field where it holds a code past the byte's range, the
        # byte field otherwise, which is where circle's negative codes live (tico writes them in
        # both fields, older tools in the byte only, leaving the wide one 0).
        return new if new >= PLACEHOLDER_FOR_GREATER_OP_CODES else deprecated
    return max(new, deprecated)


def with_ir_defaults(table_name: str | None, decoded: Mapping | None) -> dict[str, Any]:
    """A decoded options / quantization-details table as the IR holds it: every field of the IR's
    definition of the table (TFLite's where both formats have it), decoded values over defaults."""
    values: dict[str, Any] = dict(absent_options(table_name)) if table_name else {}
    values.update(decoded or {})
    return values


def freeze(value: Any) -> Any:
    """Decoded schema values -> immutable, comparable python values."""
    if isinstance(value, np.ndarray):
        # An empty byte vector is () like every other empty vector, so that a builder's
        # default () and the empty vector it is written as read back equal.
        return value.tobytes() if value.dtype == np.uint8 and value.size else tuple(value.tolist())
    if isinstance(value, Mapping):
        return Options({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    return value


class _Loader:
    def __init__(self, raw: RawModel):
        self.raw = raw
        self.where = raw.where
        self.root = raw.root
        self.op_names = raw.schema.enums["BuiltinOperator"].names  # the codes this file's format defines

    def fail(self, message: str) -> ModelFormatError:
        return ModelFormatError(f"{self.where}: {message}")

    def index(self, value: int, count: int, what: str, allow_optional: bool = False) -> int:
        value = int(value)
        if allow_optional and value == -1:
            return value
        if not 0 <= value < count:
            raise self.fail(f"{what} is {value}, outside 0..{count - 1}" if count else
                            f"{what} is {value}, but there are none")
        return value

    def load(self) -> Model:
        buffers = tuple(self.buffer(i, b) for i, b in enumerate(self.root.get("buffers") or []))
        if not buffers:
            buffers = (Buffer(),)
        opcodes = [self.opcode(i, c) for i, c in enumerate(self.root.get("operator_codes") or [])]
        raw_subgraphs = self.root.get("subgraphs") or []
        if not raw_subgraphs:
            raise self.fail("model has no subgraphs")
        subgraphs = tuple(self.subgraph(i, sg, opcodes, buffers, len(raw_subgraphs))
                          for i, sg in enumerate(raw_subgraphs))
        signatures = tuple(self.signature(i, s, subgraphs) for i, s in enumerate(self.root.get("signature_defs") or []))
        metadata = tuple(
            Metadata(m.get("name") or "", self.index(m.get("buffer", 0), len(buffers), f"metadata[{i}].buffer"))
            for i, m in enumerate(self.root.get("metadata") or []))
        model = Model(subgraphs=subgraphs, buffers=buffers, signatures=signatures, metadata=metadata,
                      description=self.root.get("description") or "", version=int(self.root.get("version") or 0),
                      source=self.where, file_format=self.raw.file_format.name)
        check_subgraph_calls(model)
        for sg in subgraphs:
            execution_order(sg, self.where)
        return model

    def buffer(self, i: int, raw: Mapping) -> Buffer:
        offset, size = int(raw.get("offset") or 0), int(raw.get("size") or 0)
        if offset > 1:
            if offset < self.raw.flatbuffer_end:
                raise self.fail(f"buffers[{i}].offset {offset} overlaps the FlatBuffer "
                                f"(which ends at byte {self.raw.flatbuffer_end})")
            if offset + size > self.raw.size:
                raise self.fail(f"buffers[{i}] (offset {offset}, size {size}) runs past the end of "
                                f"the {self.raw.size}-byte file")
            return Buffer(np.frombuffer(self.raw.buffer, np.uint8, size, offset))
        data = raw.get("data")
        return Buffer(data if data is not None and data.size else None)

    def opcode(self, i: int, raw: Mapping) -> tuple[str, int | None, int]:
        code = operator_code(raw, self.raw.file_format is CIRCLE)
        version = int(raw.get("version") or 1)
        if code == CUSTOM_CODE:
            custom = raw.get("custom_code")
            if not custom:
                raise self.fail(f"operator_codes[{i}] is CUSTOM but has no custom_code")
            return custom, None, version
        name = self.op_names.get(code)
        if name is None:
            # A newer schema's op: readable and inspectable, rejected when run.
            name = f"UNKNOWN_BUILTIN_{code}"
        return name, code, version

    def tensor(self, sg: int, i: int, raw: Mapping, buffers: tuple[Buffer, ...]) -> Tensor:
        where = f"subgraph {sg} tensor {i}"
        name = raw.get("name") or ""
        if name:
            where += f" ({name!r})"
        dtype = from_tflite(raw.get("type"), f"{self.where}: {where}")
        compression = raw.get("compression_type", "NONE")  # circle only
        if compression != "NONE":
            raise self.fail(f"{where} holds {compression}-compressed data, which litegpu cannot read "
                            "(only uncompressed weights)")
        shape = _values(raw.get("shape"))
        if len(shape) > MAX_RANK:
            raise self.fail(f"{where} has rank {len(shape)}, more than {MAX_RANK}")
        if any(d < 0 for d in shape):
            raise self.fail(f"{where} has a negative dimension in shape {list(shape)}")
        signature = raw.get("shape_signature")
        shape_signature = None
        if signature is not None and len(signature):
            shape_signature = _values(signature)
            if len(shape_signature) != len(shape) or any(d < -1 for d in shape_signature):
                raise self.fail(f"{where} has shape_signature {list(shape_signature)} that does not "
                                f"match shape {list(shape)}")
        if dtype not in ("string", "resource", "variant") and storage_bytes(dtype, math.prod(shape)) > MAX_TENSOR_BYTES:
            raise self.fail(f"{where} has shape {list(shape)}, too large to exist")
        buffer_index = self.index(raw.get("buffer") or 0, len(buffers), f"{where}: buffer")
        data = buffers[buffer_index].data
        sparsity = freeze(raw["sparsity"]) if raw.get("sparsity") is not None else None
        if data is not None and sparsity is None and dtype not in ("string", "resource", "variant"):
            expected = storage_bytes(dtype, math.prod(shape))
            if data.size != expected:
                raise self.fail(f"{where} of shape {list(shape)} and type {dtype} needs {expected} bytes, "
                                f"but buffer {buffer_index} holds {data.size}")
        return Tensor(index=i, name=name, shape=shape, dtype=dtype, buffer=buffer_index,
                      shape_signature=shape_signature, quantization=self.quantization(raw.get("quantization"), shape, where),
                      is_variable=bool(raw.get("is_variable")), has_rank=bool(raw.get("has_rank", True)) or bool(shape),
                      sparsity=sparsity, raw=data)

    def quantization(self, raw: Mapping | None, shape: tuple[int, ...], where: str) -> Quantization | None:
        if raw is None:
            return None
        scale, zero_point = _values(raw.get("scale")), _values(raw.get("zero_point"))
        details = None
        if raw.get("details") is not None:
            kind = raw.get("details_type")
            details = Options({"type": kind, **freeze(with_ir_defaults(kind, raw["details"]))})
        if not scale and not zero_point and details is None and raw.get("min") is None:
            return None
        axis = int(raw.get("quantized_dimension") or 0)
        if zero_point and len(zero_point) != len(scale):
            raise self.fail(f"{where}: quantization has {len(scale)} scales but {len(zero_point)} zero points")
        if len(scale) > 1:
            if not 0 <= axis < len(shape):
                raise self.fail(f"{where}: quantized_dimension {axis} is outside rank {len(shape)}")
            if shape[axis] != len(scale):
                raise self.fail(f"{where}: {len(scale)} per-channel scales for dimension {axis} "
                                f"of size {shape[axis]}")
        return Quantization(scale=scale, zero_point=zero_point, quantized_dimension=axis,
                            min=_values(raw.get("min")), max=_values(raw.get("max")),
                            details=details)

    def operator(self, sg: int, i: int, raw: Mapping, opcodes: list, num_tensors: int) -> Operator:
        where = f"subgraph {sg} operator {i}"
        opcode_index = self.index(raw.get("opcode_index") or 0, len(opcodes), f"{where}: opcode_index")
        name, code, version = opcodes[opcode_index]
        where = f"subgraph {sg} op {name} (#{i})"

        def tensor_list(key: str, optional: bool) -> tuple[int, ...]:
            values = raw.get(key)
            values = () if values is None else values
            return tuple(self.index(v, num_tensors, f"{where}: {key}[{j}]", allow_optional=optional)
                         for j, v in enumerate(values))

        options_type = raw.get("builtin_options_type") or raw.get("builtin_options_2_type")
        decoded = raw.get("builtin_options") if raw.get("builtin_options_type") else raw.get("builtin_options_2")
        if options_type is None and code is not None:
            options_type = options_table_for(name)
        values = with_ir_defaults(options_type, decoded)
        custom = raw.get("custom_options")
        large_offset, large_size = int(raw.get("large_custom_options_offset") or 0), int(raw.get("large_custom_options_size") or 0)
        if large_offset > 1:
            if large_offset < self.raw.flatbuffer_end or large_offset + large_size > self.raw.size:
                raise self.fail(f"{where}: large custom options (offset {large_offset}, size {large_size}) "
                                "lie outside the data after the FlatBuffer")
            custom = np.frombuffer(self.raw.buffer, np.uint8, large_size, large_offset)
        mutating = raw.get("mutating_variable_inputs")
        return Operator(
            index=i, opcode_name=name, builtin_code=code, version=version,
            inputs=tensor_list("inputs", True), outputs=tensor_list("outputs", True),
            intermediates=tensor_list("intermediates", True),
            options=freeze(values) if values else Options(), options_type=options_type,
            custom_options=bytes(custom) if custom is not None else None,
            custom_options_format=raw.get("custom_options_format") or "FLEXBUFFERS",
            mutating_variable_inputs=tuple(bool(v) for v in mutating) if mutating is not None else (),
        )

    def subgraph(self, i: int, raw: Mapping, opcodes: list, buffers: tuple[Buffer, ...], num_subgraphs: int) -> Subgraph:
        raw_tensors = raw.get("tensors") or []
        tensors = tuple(self.tensor(i, j, t, buffers) for j, t in enumerate(raw_tensors))
        n = len(tensors)

        def indices(key: str) -> tuple[int, ...]:
            values = raw.get(key)
            return tuple(self.index(v, n, f"subgraph {i} {key}[{j}]")
                         for j, v in enumerate(() if values is None else values))

        operators = tuple(self.operator(i, j, op, opcodes, n) for j, op in enumerate(raw.get("operators") or []))
        return Subgraph(index=i, name=raw.get("name") or "", tensors=tensors, inputs=indices("inputs"),
                        outputs=indices("outputs"), operators=operators)

    def signature(self, i: int, raw: Mapping, subgraphs: tuple[Subgraph, ...]) -> Signature:
        sg = self.index(raw.get("subgraph_index") or 0, len(subgraphs), f"signature_defs[{i}].subgraph_index")
        n = len(subgraphs[sg].tensors)

        def tensor_maps(key: str) -> tuple[SignatureTensor, ...]:
            return tuple(SignatureTensor(m.get("name") or "",
                                         self.index(m.get("tensor_index") or 0, n, f"signature_defs[{i}].{key}[{j}].tensor_index"))
                         for j, m in enumerate(raw.get(key) or []))

        return Signature(key=raw.get("signature_key") or "", subgraph_index=sg,
                         inputs=tensor_maps("inputs"), outputs=tensor_maps("outputs"))


def model_from_raw(raw: RawModel) -> Model:
    return _Loader(raw).load()


def entry_subgraphs(model: Model) -> list[int]:
    """Subgraphs that are run directly (subgraph 0 and the signatures'); the others run inside an op."""
    found = [0] + [s.subgraph_index for s in model.signatures]
    return sorted({i for i in found if 0 <= i < len(model.subgraphs)})


def called_subgraphs(op: Operator) -> list[int]:
    """Subgraph indices an op's options refer to (WHILE, IF, CALL_ONCE, composites, ...)."""
    found: list[int] = []
    for key, value in op.options.items():
        if key.endswith("subgraph_index") or key == "subgraph" and op.opcode_name == "CALL":
            found.append(int(value))
        elif key.endswith("subgraph_indices"):
            found.extend(int(v) for v in value)
    return found


def check_subgraph_calls(model: Model) -> None:
    """Every referenced subgraph exists, and no subgraph (indirectly) calls itself."""
    calls: dict[int, set[int]] = {}
    n = len(model.subgraphs)
    for sg in model.subgraphs:
        targets = calls.setdefault(sg.index, set())
        for op in sg.operators:
            for target in called_subgraphs(op):
                if not 0 <= target < n:
                    raise ModelFormatError(f"{model.source}: subgraph {sg.index} op {op}: refers to "
                                           f"subgraph {target}, outside 0..{n - 1}")
                targets.add(target)
    state: dict[int, int] = {}  # 1 = on the current path, 2 = done

    for start in calls:
        stack = [(start, iter(calls[start]))]
        if state.get(start):
            continue
        state[start] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                raise ModelFormatError(f"{model.source}: subgraph {nxt} calls itself (through subgraph {node})")
            elif not state.get(nxt):
                state[nxt] = 1
                stack.append((nxt, iter(calls[nxt])))


def execution_order(sg: Subgraph, where: str = "<model>") -> tuple[int, ...]:
    """Op indices in an order where every op runs after the ops it reads from.

    The stored order is kept whenever it is valid (it is what the official
    runtime runs); a graph with a cycle or a doubly-written tensor is rejected.
    """
    producer: dict[int, int] = {}
    for op in sg.operators:
        for t in op.outputs:
            if t < 0:
                continue
            if t in producer:
                raise ModelFormatError(f"{where}: subgraph {sg.index} tensor {t} is written by both op "
                                       f"#{producer[t]} and op #{op.index}")
            producer[t] = op.index
    deps = [sorted({producer[t] for t in op.inputs if t >= 0 and t in producer}) for op in sg.operators]
    if all(d < op_index for op_index, ds in enumerate(deps) for d in ds):
        return tuple(range(len(sg.operators)))
    # Kahn's algorithm, preferring the stored order among ready ops.
    import heapq

    users: dict[int, list[int]] = {}
    waiting = [len(d) for d in deps]
    for op_index, ds in enumerate(deps):
        for d in ds:
            users.setdefault(d, []).append(op_index)
    ready = [i for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users.get(i, ()):
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(deps):
        stuck = [sg.operators[i] for i, w in enumerate(waiting) if w > 0][:3]
        raise ModelFormatError(f"{where}: subgraph {sg.index} has a cycle among its operators "
                               f"(involving {', '.join(map(str, stuck))})")
    return tuple(order)


__all__ = ["read_model", "model_from_raw", "execution_order", "called_subgraphs", "freeze", "SUB_BYTE_BITS"]
