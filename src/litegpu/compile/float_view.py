"""The float view of a quantized model: how the LiteRT GPU delegate runs int8 models.

GPUs are fast at float arithmetic and slow (or unsupported) at the fixed-point
rescaling of TFLite's integer kernels, so the GPU delegate computes quantized
models in float:

- quantized constants (weights, per-channel too; int32/int64 biases) are
  dequantized once, into float32 constants that live on the device;
- the model's inputs and outputs keep their integer types: an int8 input is
  followed by a DEQUANTIZE, an int8 output is produced by a QUANTIZE;
- every op that produced a quantized tensor now computes in float and its
  result passes through QUANTIZE then DEQUANTIZE ("fake quant") with the
  tensor's own parameters, so activations keep the ranges and the resolution
  the model was trained and calibrated with (XLA fuses the pair into the op).

This module is a rewrite of the IR, not a new backend: the rewritten model
uses the ordinary float kernels and QUANTIZE / DEQUANTIZE.  The original
integer tensors keep their indices, names and types (each one now holds the
fake-quantized value), so signatures and ``preserve_all_tensors`` dumps still
line up with the original model; the float values are new tensors named
``<name>/float`` (an op's raw result) and ``<name>/dequantized``.

Ops outside ``FLOAT_OPS`` (CAST, bitwise ops, recurrent cells, control flow,
variables ...) read the integer values as the model does, so they keep their
integer kernels; only the boundary around them changes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError
from ..ir import Buffer, Model, Operator, Options, Subgraph, Tensor, execution_order

QUANTIZED_EXECUTION = ("float", "integer")
QUANTIZED_DTYPES = ("int8", "uint8", "int16")
# Sub-byte weights have no integer activation counterpart, but dequantize the same way.
QUANTIZED_CONSTANT_DTYPES = QUANTIZED_DTYPES + ("int4",)

# Ops whose float kernel, given dequantized inputs, computes what the integer kernel
# approximates: the real-valued meaning of the op.
ARITHMETIC_OPS = frozenset({
    "ADD", "SUB", "MUL", "DIV", "SQUARED_DIFFERENCE", "MAXIMUM", "MINIMUM", "POW", "ADD_N",
    "CONV_2D", "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV", "FULLY_CONNECTED", "BATCH_MATMUL",
    "AVERAGE_POOL_2D", "L2_POOL_2D", "MEAN", "SUM", "REDUCE_PROD",
    "RELU", "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1", "LEAKY_RELU", "PRELU", "ELU", "HARD_SWISH", "GELU",
    "LOGISTIC", "TANH", "SOFTMAX", "LOG_SOFTMAX", "L2_NORMALIZATION", "LOCAL_RESPONSE_NORMALIZATION",
    "ABS", "NEG", "SQRT", "RSQRT", "SQUARE", "EXP", "LOG", "SIN", "COS",
    "RESIZE_BILINEAR",
    "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL", "EQUAL", "NOT_EQUAL", "ARG_MAX", "ARG_MIN",
})
# Ops that only move or select values: with equal input and output parameters the integer
# kernel copies bytes, so their float result is already on the output's grid and the fake
# quant after them would change nothing (PAD pads with the zero point, i.e. real 0).
DATA_MOVEMENT_OPS = frozenset({
    "RESHAPE", "SQUEEZE", "EXPAND_DIMS", "TRANSPOSE", "CONCATENATION", "PACK", "UNPACK", "SPLIT", "SPLIT_V",
    "SLICE", "STRIDED_SLICE", "GATHER", "GATHER_ND", "TILE", "BROADCAST_TO", "REVERSE_V2",
    "DEPTH_TO_SPACE", "SPACE_TO_DEPTH", "SPACE_TO_BATCH_ND", "BATCH_TO_SPACE_ND", "RESIZE_NEAREST_NEIGHBOR",
    "PAD", "PADV2", "MIRROR_PAD", "SELECT", "SELECT_V2", "MAX_POOL_2D", "REDUCE_MAX", "REDUCE_MIN",
})
FLOAT_OPS = ARITHMETIC_OPS | DATA_MOVEMENT_OPS

# (input, weights, bias) positions of the ops with an integer bias.
_BIAS_OPS = {"CONV_2D": (0, 1, 2), "DEPTHWISE_CONV_2D": (0, 1, 2), "FULLY_CONNECTED": (0, 1, 2),
             "TRANSPOSE_CONV": (2, 1, 3)}


def check_quantized_execution(value: Any) -> str:
    """``GpuOptions.quantized_execution``: "float" (the float view) or "integer" (exact integer kernels)."""
    if not isinstance(value, str) or value not in QUANTIZED_EXECUTION:
        raise InvalidArgumentError(f"quantized_execution must be one of {', '.join(map(repr, QUANTIZED_EXECUTION))}; "
                                   f"got {value!r}")
    return value


def is_quantized_value(t: Tensor) -> bool:
    """An integer tensor that stands for real values through affine quantization."""
    q = t.quantization
    if q is None or not q.is_affine or q.details is not None:
        return False
    return t.dtype in QUANTIZED_DTYPES or (t.dtype in QUANTIZED_CONSTANT_DTYPES and t.is_constant)


def has_quantized_values(model: Model) -> bool:
    return any(is_quantized_value(t) for sg in model.subgraphs for t in sg.tensors)


def float_view(model: Model) -> Model:
    """The model computed in float with fake quantization; a model without quantized tensors is returned as is."""
    if not has_quantized_values(model):
        return model
    buffers = _DequantizedBuffers(list(model.buffers))
    subgraphs = tuple(_SubgraphRewrite(sg, buffers).run() for sg in model.subgraphs)
    return replace(model, subgraphs=subgraphs, buffers=tuple(buffers.buffers))


def model_for_platform(model: Model, platform: str, quantized_execution: str = "float") -> Model:
    """What the XLA backend compiles: on the GPU, the float view unless exact integer execution is asked for."""
    if platform == "gpu" and check_quantized_execution(quantized_execution) == "float":
        return float_view(model)
    return model


def float_view_backend(model: Model, subgraph_index: int = 0, platform: str = "cpu", precision: str = "fp32") -> Any:
    """The exact kernels' engine running a subgraph of the float view whole (``Engine.compile_subgraph``): the GPU's
    arithmetic, runnable on the CPU (tests, comparisons)."""
    from ..backends import registry
    from ..backends.engine import EngineSettings
    from ..ops import Target

    settings = EngineSettings(precision=precision)
    engine = registry.engine(registry.name_of(Target.XLA_CPU), settings).placed(
        platform, Target.XLA_GPU if platform == "gpu" else Target.XLA_CPU)
    return engine.compile_subgraph(float_view(model), subgraph_index, settings)


def dequantize_constant(t: Tensor, scale: Iterable[float] | None = None) -> np.ndarray:
    """``scale * (q - zero_point)`` in float32, per tensor or along the quantized dimension."""
    q = t.quantization
    scales = np.asarray(tuple(scale) if scale is not None else q.scale, np.float32)
    zero_points = np.asarray((q.zero_point if q is not None else ()) or (0,), np.int64)
    values = np.asarray(t.data).astype(np.int64)
    if scales.size > 1 or zero_points.size > 1:
        axis = q.quantized_dimension if q is not None else 0
        shape = [1] * values.ndim
        shape[axis] = -1
        scales = scales.reshape(shape)
        zero_points = zero_points.reshape(shape) if zero_points.size > 1 else zero_points.reshape(())
    # As the DEQUANTIZE kernel: the exact integer difference, then one float32 product.
    return (values - zero_points).astype(np.float32) * scales


@functools.lru_cache(maxsize=None)
def _new_operator(name: str) -> Operator:
    """A builtin op as ``ModelBuilder`` makes it (so that the rewritten model round-trips through a file)."""
    from ..format.schema import load_schema
    from ..ir.load import freeze
    from ..ir.opcodes import builtin_codes, options_table_for

    table = options_table_for(name)
    options = freeze(dict(load_schema().defaults(table))) if table else Options()
    return Operator(index=0, opcode_name=name, inputs=(), outputs=(), options=options or Options(),
                    options_type=table, builtin_code=builtin_codes()[name])


# Quantized weights of at least this many elements stay quantized in the float view: a DEQUANTIZE op reads
# them, which the XLA backend traces into the op that consumes its result (``backends.xla``: converted where
# used), so the device holds them as the file does (int8, int4) and converts them inside the kernels that read
# them.  Smaller ones are dequantized once into float32 constants (the program folds them anyway).
KEPT_QUANTIZED_MIN_ELEMENTS = 256


def _kept_quantized(t: Tensor) -> bool:
    return t.num_elements > KEPT_QUANTIZED_MIN_ELEMENTS and t.sparsity is None


def _params(t: Tensor) -> tuple:
    q = t.quantization
    return t.dtype, tuple(q.scale), tuple(q.zero_point or (0,)), q.quantized_dimension


class _DequantizedBuffers:
    """The rewritten model's buffers: the original ones, then the float32 constants.

    A quantized weight buffer that several tensors read (a ``prefill`` and a ``decode`` subgraph of
    one decoder) is dequantized once into one float32 buffer that all of them read, so the XLA
    backend, which keeps one device array per buffer, holds that weight once and not once per
    subgraph (a 3 GB int8 decoder with two signatures would otherwise need 24 GB of float32)."""

    def __init__(self, buffers: list[Buffer]):
        self.buffers = buffers
        self._made: dict[tuple, int] = {}  # what a float32 buffer was dequantized from -> its index

    def add(self, values: Callable[[], np.ndarray], source: tuple | None, dtype: Any = np.float32) -> int:
        """The index of a buffer holding ``values()`` as ``dtype`` (computed only when ``source`` is new)."""
        if source is not None and source in self._made:
            return self._made[source]
        raw = np.ascontiguousarray(values(), dtype).reshape(-1).view(np.uint8)
        self.buffers.append(Buffer(raw if raw.size else None))
        index = len(self.buffers) - 1
        if source is not None:
            self._made[source] = index
        return index


def _dequantized_source(t: Tensor, scale: np.ndarray | None = None) -> tuple | None:
    """What determines a constant's dequantized values: its buffer, type, shape and quantization
    (``scale``: a bias's scale taken from its op).  None where the tensor reads no shared buffer."""
    if t.buffer <= 0 or t.sparsity is not None:
        return None
    q = t.quantization
    params = None if q is None else (tuple(q.scale), tuple(q.zero_point or ()), q.quantized_dimension)
    override = None if scale is None else tuple(np.asarray(scale, np.float64).reshape(-1).tolist())
    return t.buffer, t.dtype, tuple(t.shape), params, override


class _SubgraphRewrite:
    """Rewrites one subgraph; tensors keep their indices, new tensors and ops are appended."""

    def __init__(self, sg: Subgraph, buffers: _DequantizedBuffers):
        self.sg, self.buffers = sg, buffers
        self.tensors: list[Tensor] = list(sg.tensors)
        self.ops: list[Operator] = []
        self.floats: dict[int, int] = {}      # quantized tensor -> float32 tensor with its real values
        self.alias: dict[int, int] = {}       # DEQUANTIZE output -> the float tensor it equals
        self.bias_constants: dict[int, int] = {}
        # Integer tensors whose value exists (others are computed in float only, until asked for).
        self.has_integer: set[int] = {t.index for t in sg.tensors if t.has_data or t.is_variable}
        self.has_integer.update(sg.inputs)

    def run(self) -> Subgraph:
        for op_index in execution_order(self.sg):
            self._rewrite(self.sg.operators[op_index])
        for t in self.sg.outputs:
            if t >= 0 and is_quantized_value(self.sg.tensors[t]):
                self._integer(t)
        return replace(self.sg, tensors=tuple(self.tensors), operators=tuple(self.ops))

    # ---- tensors and ops ------------------------------------------------------------------
    def _new_tensor(self, like: Tensor, suffix: str, data: Callable[[], np.ndarray] | None = None,
                    source: tuple | None = None, dtype: str = "float32") -> int:
        """A float32 (or ``dtype``) tensor like ``like``; a constant one when ``data`` (its values, computed only
        if no other tensor dequantized the same ``source`` before) is given."""
        buffer, raw = 0, None
        if data is not None:
            buffer = self.buffers.add(data, source, np.dtype(dtype))
            raw = self.buffers.buffers[buffer].data
        self.tensors.append(replace(like, index=len(self.tensors), name=f"{like.name}/{suffix}", dtype=dtype,
                                    buffer=buffer, raw=raw, quantization=None, is_variable=False, sparsity=None))
        return len(self.tensors) - 1

    def _emit(self, op: Operator, inputs: Iterable[int], outputs: Iterable[int]) -> None:
        self.ops.append(replace(op, index=len(self.ops), inputs=tuple(inputs), outputs=tuple(outputs)))
        self.has_integer.update(t for t in self.ops[-1].outputs if t >= 0)

    def _emit_new(self, name: str, inputs: Iterable[int], outputs: Iterable[int]) -> None:
        self._emit(_new_operator(name), inputs, outputs)

    def _float(self, index: int) -> int:
        """The float32 tensor holding quantized tensor ``index``'s real values."""
        if index in self.floats:
            return self.floats[index]
        t = self.sg.tensors[index]
        if t.is_constant and not _kept_quantized(t):
            result = self._new_tensor(t, "dequantized", lambda: dequantize_constant(t), _dequantized_source(t))
        elif t.is_constant:
            result = self._scaled_in_the_program(t)
        else:
            result = self._new_tensor(t, "dequantized")
            self._emit_new("DEQUANTIZE", [self._integer(index)], [result])
        if not t.is_variable:  # ops may update a variable tensor in place: read it at each use
            self.floats[index] = result
        return result

    def _scaled_in_the_program(self, t: Tensor) -> int:
        """A quantized weight kept as stored, made real in the program: DEQUANTIZE with unit scales (its integers
        less the zero points, exactly), then MUL by its scales (a float32 constant shaped to broadcast along the
        quantized dimension): the one float32 product DEQUANTIZE itself computes, so the values are the same bit
        for bit.  Written this way the weight's tensor has the same quantization in every layer of an LLM, and its
        scales are a constant like the layer's other weights, which lets the XLA backend loop over the layers
        (``backends.xla.layer_scan``: kernels read quantization parameters as constants, so layers whose differ
        cannot share one traced body)."""
        q = t.quantization
        scales = np.asarray(q.scale, np.float32)
        unit = replace(q, scale=(1.0,) * scales.size, min=(), max=())
        self.tensors.append(replace(t, index=len(self.tensors), name=f"{t.name}/integers", quantization=unit))
        integers = len(self.tensors) - 1
        shape = [1] * len(t.shape)
        if scales.size > 1:
            shape[q.quantized_dimension] = scales.size
        # the scales as a vector, reshaped in the program to broadcast: XLA GPU fuses a vector broadcast into the
        # matrix product that reads the weight, and materializes the weight for a [C, 1] parameter (measured with
        # bench/gpu/gpu_compile.py: a 16-row prefill of an int8 decoder)
        scale = self._new_tensor(replace(t, shape=(scales.size,)), "scales", lambda: scales,
                                 None if t.buffer <= 0 else ("scales", t.buffer, tuple(q.scale)))
        if len(shape) != 1:
            shaped = self._new_tensor(replace(t, shape=tuple(shape)), "scales_shaped")
            dims = self._new_tensor(replace(t, shape=(len(shape),)), "scales_shape",
                                    lambda: np.asarray(shape, np.int32), ("shape", tuple(shape)), dtype="int32")
            self._emit_new("RESHAPE", [scale, dims], [shaped])
            scale = shaped
        values = self._new_tensor(t, "integer_values")
        self._emit_new("DEQUANTIZE", [integers], [values])
        result = self._new_tensor(t, "dequantized")
        self._emit_new("MUL", [values, scale], [result])
        return result

    def _integer(self, index: int) -> int:
        """Quantized tensor ``index`` itself, computed from its float value where only that exists."""
        if index not in self.has_integer:
            self._emit_new("QUANTIZE", [self.floats[index]], [index])
        return index

    def _bias(self, op: Operator, positions: tuple[int, int, int]) -> int:
        """An integer bias as float: its own scale (the converter stores input scale x weight scale) or,
        without one, that product."""
        index = op.inputs[positions[2]]
        if index not in self.bias_constants:
            t = self.sg.tensors[index]
            scale = None
            if t.quantization is None or not t.quantization.is_affine:
                x, w = (self.sg.tensors[op.inputs[p]] for p in positions[:2])
                scale = np.float64(np.float32(x.quantization.scale[0])) * np.asarray(w.quantization.scale, np.float64)
            self.bias_constants[index] = self._new_tensor(t, "dequantized", lambda: dequantize_constant(t, scale),
                                                          _dequantized_source(t, scale))
        return self.bias_constants[index]

    # ---- ops --------------------------------------------------------------------------------
    def _rewrite(self, op: Operator) -> None:
        name = op.opcode_name
        tensors = [self.sg.tensors[t] if t >= 0 else None for t in op.inputs + op.outputs]
        if op.is_custom or not any(t is not None and is_quantized_value(t) for t in tensors):
            self._rewrite_integer(op)
        elif name == "DEQUANTIZE" and self._dequantize_is_alias(op):
            self.alias[op.outputs[0]] = self._float(op.inputs[0])
        elif name == "QUANTIZE" and self._quantize_is_fake_quant(op):
            src = op.inputs[0]
            self._emit(op, [self._float(src) if is_quantized_value(self.sg.tensors[src]) else self.alias.get(src, src)],
                       op.outputs)
        elif name in FLOAT_OPS and self._can_run_in_float(op):
            self._rewrite_in_float(op)
        else:
            self._rewrite_integer(op)

    def _dequantize_is_alias(self, op: Operator) -> bool:
        out = op.outputs[0]
        return (is_quantized_value(self.sg.tensors[op.inputs[0]]) and self.sg.tensors[out].dtype == "float32"
                and out not in self.sg.outputs)

    def _quantize_is_fake_quant(self, op: Operator) -> bool:
        src, dst = (self.sg.tensors[op.inputs[0]], self.sg.tensors[op.outputs[0]])
        return is_quantized_value(dst) and dst.dtype in QUANTIZED_DTYPES and (
            src.dtype == "float32" or is_quantized_value(src))

    def _can_run_in_float(self, op: Operator) -> bool:
        if any(t >= 0 and self.sg.tensors[t].sparsity is not None for t in op.inputs):
            return False  # sparse weights stay as they are: DENSIFY or the integer kernel reads them
        positions = _BIAS_OPS.get(op.opcode_name)
        if positions is None or len(op.inputs) <= positions[2] or op.inputs[positions[2]] < 0:
            return True
        bias = self.sg.tensors[op.inputs[positions[2]]]
        if bias.dtype == "float32" or is_quantized_value(bias):
            return True
        x, w = (self.sg.tensors[op.inputs[p]] for p in positions[:2])
        # An integer bias needs a scale: its own, or the input's times the weights'.
        return bias.is_constant and bias.dtype in ("int32", "int64") and (
            (bias.quantization is not None and bias.quantization.is_affine)
            or (is_quantized_value(x) and len(x.quantization.scale) == 1 and is_quantized_value(w)))

    def _rewrite_in_float(self, op: Operator) -> None:
        positions = _BIAS_OPS.get(op.opcode_name)
        inputs = []
        for slot, t in enumerate(op.inputs):
            if t >= 0 and is_quantized_value(self.sg.tensors[t]):
                inputs.append(self._float(t))
            elif t >= 0 and positions is not None and slot == positions[2] and self.sg.tensors[t].dtype != "float32":
                inputs.append(self._bias(op, positions))
            else:
                inputs.append(self.alias.get(t, t))
        exact = self._moves_values_only(op)
        outputs, fake_quant = [], []
        for t in op.outputs:
            if t < 0 or not is_quantized_value(self.sg.tensors[t]):
                outputs.append(t)
            elif exact:
                self.floats[t] = self._new_tensor(self.sg.tensors[t], "dequantized")
                outputs.append(self.floats[t])
            else:
                outputs.append(self._new_tensor(self.sg.tensors[t], "float"))
                fake_quant.append((outputs[-1], t))
        self._emit(op, inputs, outputs)
        for raw, t in fake_quant:
            self._emit_new("QUANTIZE", [raw], [t])

    def _moves_values_only(self, op: Operator) -> bool:
        """True where the float result is exactly the dequantized integer result (no fake quant needed)."""
        if op.opcode_name not in DATA_MOVEMENT_OPS or op.options.get("fused_activation_function", "NONE") != "NONE":
            return False
        data = [self.sg.tensors[t] for t in op.inputs + op.outputs
                if t >= 0 and (is_quantized_value(self.sg.tensors[t]) or self.sg.tensors[t].dtype == "float32")]
        return all(is_quantized_value(t) for t in data) and len({_params(t) for t in data}) == 1

    def _rewrite_integer(self, op: Operator) -> None:
        inputs = [self._integer(t) if t >= 0 and is_quantized_value(self.sg.tensors[t]) else self.alias.get(t, t)
                  for t in op.inputs]
        self._emit(op, inputs, op.outputs)


__all__ = ["FLOAT_OPS", "QUANTIZED_EXECUTION", "check_quantized_execution", "dequantize_constant", "float_view",
           "float_view_backend", "has_quantized_values", "model_for_platform"]
