"""Would the LiteRT *mobile* GPU delegate (OpenCL / OpenGL / Metal) take this model?

The rules follow the delegate's op parsers (``tflite/delegates/gpu/common/
model_builder.cc``: the op list and each op's highest supported version) and
its compatibility checks (``tflite/tools/versioning/gpu_compatibility.cc``:
inputs, constants, options, broadcasting), plus the tensor rule applied to
every op: non-constant tensors are float32/float16 (int8/uint8 with quantized
models, which the default options allow, and a few op-specific types), and no
tensor has more than 4 dimensions.  Default delegate options are assumed:
quantized ops allowed, ``max_delegated_partitions`` = 1 (only the largest run of
supported ops is delegated; the rest runs on the CPU; runs are taken in execution
order here, an approximation of the delegate's graph partitioner).

This is a static check for mobile engineers; litegpu's own GPU (XLA) is far
less restrictive and is planned by ``litegpu.compile.plan``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..ir import Model, Operator, Subgraph, execution_order

# Highest op version each parser accepts; None: the parser checks no version.
_ELEMENTWISE_1 = ("ABS", "COS", "ELU", "EXP", "FLOOR", "GELU", "LOG", "LOGISTIC", "NEG", "RSQRT", "SIGN", "SIN",
                  "SQRT", "SQUARE", "TANH")
_ELEMENTWISE_2 = ("DIV", "FLOOR_DIV", "FLOOR_MOD", "MAXIMUM", "MINIMUM", "POW", "SQUARED_DIFFERENCE", "SUB")
_LOGICAL = ("EQUAL", "GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL", "NOT_EQUAL")
MAX_VERSION: dict[str, int | None] = {
    **{op: 2 for op in _ELEMENTWISE_1 + _ELEMENTWISE_2 + _LOGICAL + ("ADD", "ADD_N", "LOGICAL_AND")},
    "MUL": 3, "AVERAGE_POOL_2D": 2, "MAX_POOL_2D": 2, "BATCH_MATMUL": None, "CAST": None, "CONCATENATION": 2,
    "CONV_2D": 6, "DEPTHWISE_CONV_2D": 6, "CUMSUM": 1, "DENSIFY": 1, "DEPTH_TO_SPACE": None, "DEQUANTIZE": 3,
    "FULLY_CONNECTED": 9, "GATHER": 1, "HARD_SWISH": None, "LSTM": 4, "MEAN": None, "MIRROR_PAD": 2, "PAD": 2,
    "PADV2": 2, "ONE_HOT": 1, "PACK": None, "PRELU": 1, "QUANTIZE": 2, "RELU": 2, "RELU6": 2, "RELU_0_TO_1": 2,
    "RELU_N1_TO_1": 2, "LEAKY_RELU": 2, "RESHAPE": 1, "RESIZE_BILINEAR": 3, "RESIZE_NEAREST_NEIGHBOR": 3,
    "SELECT": 1, "SELECT_V2": 1, "SLICE": 2, "SOFTMAX": 2, "SPACE_TO_DEPTH": 2, "SPLIT": None, "SPLIT_V": None,
    "STRIDED_SLICE": 4, "SUM": None, "REDUCE_MAX": None, "REDUCE_MIN": None, "REDUCE_PROD": None, "TILE": None,
    "TRANSPOSE": 4, "TRANSPOSE_CONV": 3, "UNPACK": None,
}
CUSTOM_OPS = ("Convolution2DTransposeBias", "MaxPoolingWithArgmax2D", "MaxUnpooling2D", "Resampler")
_FLOAT = {"float32", "float16"}
_QUANT = {"int8", "uint8"}
TENSOR_MESSAGE = "OP is supported, but tensor type/shape isn't compatible."


@dataclass(frozen=True)
class MobileGpuOp:
    subgraph: int
    op_index: int
    opcode: str
    version: int
    reason: str | None          # None: the delegate takes it

    def __str__(self) -> str:
        return f"{self.opcode} v{self.version} (#{self.op_index}): {self.reason or 'supported'}"


@dataclass(frozen=True)
class MobileGpuReport:
    ops: tuple[MobileGpuOp, ...]
    delegated: tuple[tuple[int, tuple[int, ...]], ...]   # (subgraph, op indices) of the partition delegated

    @property
    def unsupported(self) -> list[MobileGpuOp]:
        return [o for o in self.ops if o.reason is not None]

    @property
    def fully_delegated(self) -> bool:
        return not self.unsupported and sum(len(d) for _, d in self.delegated) == len(self.ops)

    def summary(self) -> str:
        """The delegate's own closing line."""
        on_gpu = sum(len(d) for _, d in self.delegated)
        if on_gpu == len(self.ops):
            return f"all {on_gpu} operations will run on the GPU"
        if on_gpu == 0:
            return f"No operations will run on the GPU, and all {len(self.ops)} operations will run on the CPU."
        return (f"{on_gpu} operations will run on the GPU, and the remaining {len(self.ops) - on_gpu} "
                "operations will run on the CPU.")


class _Context:
    def __init__(self, sg: Subgraph, op: Operator, folded: frozenset[int] = frozenset()):
        self.sg, self.op, self.folded = sg, op, folded

    def is_const(self, t) -> bool:
        return t.has_data or t.index in self.folded

    def tensor(self, i: int):
        return self.sg.tensors[self.op.inputs[i]] if i < len(self.op.inputs) and self.op.inputs[i] >= 0 else None

    @property
    def present(self):
        return [self.sg.tensors[t] for t in self.op.inputs if t >= 0]

    @property
    def runtime_inputs(self) -> int:
        return sum(1 for t in self.present if not self.is_const(t))

    @property
    def const_inputs(self) -> int:
        return sum(1 for t in self.present if self.is_const(t))

    @property
    def outputs(self):
        return [self.sg.tensors[t] for t in self.op.outputs if t >= 0]

    def option(self, name: str, default=None):
        return self.op.options.get(name, default)


def _io(runtime: int, outputs: int, const: int | None = None) -> Callable[[_Context], str | None]:
    def check(c: _Context) -> str | None:
        if const is not None and c.const_inputs != const:
            return f"Expected {const} const input tensor(s), but node has {c.const_inputs} const input(s)."
        if c.runtime_inputs != runtime:
            return f"Expected {runtime} runtime input tensor(s), but node has {c.runtime_inputs} runtime input(s)."
        if len(c.outputs) != outputs:
            return f"Expected {outputs} output tensor(s), but node has {len(c.outputs)} output(s)."
        return None
    return check


def _activation(c: _Context) -> str | None:
    act = c.option("fused_activation_function", "NONE")
    return "TfLiteFusedActivation.kTfLiteActSignBit" if act == "SIGN_BIT" else None


def _one_or_two_operands(c: _Context) -> str | None:
    if _io(2, 1, 0)(c) and _io(1, 1, 1)(c):
        return "Op can only handle 1 or 2 operand(s)."
    return _activation(c)


def _broadcastable(c: _Context) -> str | None:
    a, b = c.tensor(0), c.tensor(1)
    if a is None or b is None:
        return f"{c.op.opcode_name} requires two input tensor(s)."
    if len(a.shape) > 1 and len(b.shape) > 1 and len(a.shape) != len(b.shape):
        long, short = (a.shape, b.shape) if len(a.shape) >= len(b.shape) else (b.shape, a.shape)
        padded = (1,) * (len(long) - len(short)) + tuple(short)
        if any(x != y and x != 1 and y != 1 for x, y in zip(long, padded)):
            return f"Doesn't support broadcasting - input0: {list(a.shape)}, input1: {list(b.shape)}"
    return None


def _mul(c: _Context) -> str | None:
    a, b = c.tensor(0), c.tensor(1)
    if a is None or b is None or len(c.present) != 2:
        return "MUL requires two input tensors."
    if len(a.shape) == len(b.shape):
        if any(x < y for x, y in zip(a.shape, b.shape)) and any(y < x for x, y in zip(a.shape, b.shape)):
            return "MUL requires one tensor that not less than second in all dimensions."
    elif (reason := _broadcastable(c)):
        return reason
    return _activation(c)


def _conv(c: _Context) -> str | None:
    if c.runtime_inputs > 2:
        return f"Expected 1 or 2 input tensor(s), but node has {c.runtime_inputs} runtime inputs."
    if len(c.outputs) != 1:
        return f"Expected 1 output tensor(s), but node has {len(c.outputs)} runtime outputs."
    if min(c.option("stride_h", 1), c.option("stride_w", 1)) <= 0:
        return "Incorrect stride values"
    if min(c.option("dilation_h_factor", 1), c.option("dilation_w_factor", 1)) <= 0:
        return "Incorrect dilation values"
    return _activation(c)


def _depthwise(c: _Context) -> str | None:
    if (reason := _conv(c)):
        return reason
    x, w, y = c.tensor(0), c.tensor(1), c.outputs[0]
    if len(x.shape) != 4 or len(w.shape) != 4 or len(y.shape) != 4:
        return "input, filter and output must be 4-D"
    if c.option("depth_multiplier", 1) != 1 and x.shape[3] != 1:
        return "depth_multiplier != 1 && input.c != 1"
    return None


def _pool(c: _Context) -> str | None:
    if (reason := _io(1, 1)(c)):
        return reason
    if min(c.option("filter_height", 1), c.option("filter_width", 1), c.option("stride_h", 1),
           c.option("stride_w", 1)) <= 0:
        return "Incorrect kernel or stride values"
    return _activation(c)


def _fully_connected(c: _Context) -> str | None:
    if c.option("weights_format", "DEFAULT") != "DEFAULT":
        return f"Unsupported FullyConnected weights format: {c.option('weights_format')}"
    if c.runtime_inputs > 2:
        return "FullyConnected doesn't support more than 2 runtime inputs."
    if c.tensor(0) is not None and c.tensor(0).has_data:
        return "FullyConnected doesn't support constant input."
    if c.option("keep_num_dims", False) and len(c.tensor(0).shape) != len(c.outputs[0].shape):
        return "Input and output dimensions different and FullyConnected doesn't support keep_num_dims."
    return None


def _axes(c: _Context) -> str | None:
    axes = c.tensor(1)
    if axes is None or axes.data is None:
        return f"{c.op.opcode_name} is only supported with constant axes."
    if axes.dtype != "int32":
        return f"{c.op.opcode_name} supports int32 tensor for axes. But node has {axes.dtype}"
    return None


def _reduce(c: _Context) -> str | None:
    return _io(1, 1)(c) or _axes(c)


def _mean(c: _Context) -> str | None:
    return _io(1, 1, 1)(c) or _axes(c)


def _rank_3_or_4(c: _Context) -> str | None:
    rank = len(c.tensor(0).shape)
    return None if rank in (3, 4) else f"{c.op.opcode_name} supports for 3 or 4 dimensional tensors only."


def _strided_slice(c: _Context) -> str | None:
    for mask in ("ellipsis_mask", "new_axis_mask", "shrink_axis_mask"):
        if c.option(mask, 0):
            return f"Slice does not support {mask}."
    if len(c.op.inputs) < 4:
        return "STRIDED_SLICE requires 4 inputs."
    return _rank_3_or_4(c)


def _slice(c: _Context) -> str | None:
    return f"SLICE requires 3 inputs, but node has {len(c.op.inputs)} inputs." if len(c.op.inputs) < 3 else \
        _rank_3_or_4(c)


def _pad(c: _Context) -> str | None:
    if c.op.opcode_name == "MIRROR_PAD" and c.option("mode", "REFLECT") != "REFLECT":
        return "Only Reflective padding is supported for Mirror Pad operation."
    if (reason := _io(1, 1)(c)):
        return reason
    pads = c.tensor(1)
    if pads is None or len(pads.shape) != 2 or pads.shape[0] not in (3, 4) or pads.shape[1] != 2:
        return "Invalid paddings tensor shape: expected 4x2 or 3x2"
    return None


def _softmax(c: _Context) -> str | None:
    return None if c.option("beta", 1.0) == 1 else "Softmax.beta != 1 is not supported."


def _resize(c: _Context) -> str | None:
    if (reason := _io(1, 1)(c)):
        return reason
    if c.op.opcode_name == "RESIZE_BILINEAR" and c.option("align_corners") and c.option("half_pixel_centers"):
        return "If half_pixel_centers is True, align_corners must be False."
    return None


def _block_size(c: _Context) -> str | None:
    size = c.option("block_size", 2)
    return None if size > 1 else f"{c.op.opcode_name} block_size must be > 1."


def _gather(c: _Context) -> str | None:
    if _io(2, 1, 0)(c) and _io(1, 1, 1)(c):
        return "Op can only handle 1 or 2 operand(s)."
    if c.tensor(0).dtype == "int32":
        return "Does not accept INT32 input."
    if len(c.tensor(1).shape) != 1:
        return "Only support 1D indices"
    return None if c.tensor(1).dtype == "int32" else "Only accept INT32 indices"


def _cast(c: _Context) -> str | None:
    src, dst = c.tensor(0).dtype, c.outputs[0].dtype
    if (src == "bool" and dst in _FLOAT) or (src in _FLOAT and dst == "bool") or (
            src in ("float32", "int32") and dst in ("float32", "int32")):
        return _io(1, 1)(c)
    return f"Not supported Cast case. Input type: {src} and output type: {dst}"


def _select(c: _Context) -> str | None:
    if len(c.op.inputs) != 3 or len(c.outputs) != 1:
        return "Expected 3 inputs and 1 output"
    cond, a, b = c.tensor(0), c.tensor(1), c.tensor(2)
    if cond.dtype not in _FLOAT | {"bool"} or a.dtype not in _FLOAT or b.dtype not in _FLOAT:
        return ("Cond must be float or bool type, if, else tensors must be float and either be same the shape as "
                "output or constant, scalar.")
    return None


def _logical(model_sg: Subgraph) -> Callable[[_Context], str | None]:
    """Comparisons only feed a CAST / SELECT to float on this delegate."""
    def check(c: _Context) -> str | None:
        out = c.op.outputs[0]
        users = [op for op in model_sg.operators if out in op.inputs]
        if len(users) != 1:
            return "Not supported logical op case"
        user = users[0]
        result = model_sg.tensors[user.outputs[0]].dtype if user.outputs else None
        if user.opcode_name in ("CAST", "SELECT", "SELECT_V2") and result in _FLOAT:
            return _one_or_two_operands(c)
        return "Not supported logical op case."
    return check


def _custom(c: _Context) -> str | None:
    name = c.op.opcode_name
    if name not in CUSTOM_OPS:
        return f"Not supported custom op {name}"
    if name in ("MaxUnpooling2D", "Resampler"):
        return _io(2, 1)(c)
    return None


_CHECKS: dict[str, Callable[[_Context], str | None]] = {
    **{op: _io(1, 1, 0) for op in _ELEMENTWISE_1},
    **{op: _one_or_two_operands for op in _ELEMENTWISE_2},
    "ADD": lambda c: _broadcastable(c) or (None if len(c.op.inputs) == 2 else "ADD requires two input tensors."),
    "ADD_N": lambda c: None if len(c.op.inputs) == 2 else "ADD_N only supports 2 inputs.",
    "LOGICAL_AND": _one_or_two_operands, "MUL": _mul, "CONV_2D": _conv, "DEPTHWISE_CONV_2D": _depthwise,
    "TRANSPOSE_CONV": _conv, "AVERAGE_POOL_2D": _pool, "MAX_POOL_2D": _pool, "FULLY_CONNECTED": _fully_connected,
    "MEAN": _mean, "SUM": _reduce, "REDUCE_MAX": _reduce, "REDUCE_MIN": _reduce, "REDUCE_PROD": _reduce,
    "STRIDED_SLICE": _strided_slice, "SLICE": _slice, "PAD": _pad, "PADV2": _pad, "MIRROR_PAD": _pad,
    "SOFTMAX": _softmax, "RESIZE_BILINEAR": _resize, "RESIZE_NEAREST_NEIGHBOR": _resize,
    "DEPTH_TO_SPACE": lambda c: _io(1, 1)(c) or _block_size(c), "SPACE_TO_DEPTH": lambda c: _io(1, 1)(c) or
    _block_size(c), "GATHER": _gather, "CAST": _cast, "SELECT": _select, "SELECT_V2": _select,
    "RESHAPE": _io(1, 1), "TILE": _io(1, 1), "TRANSPOSE": _io(1, 1), "HARD_SWISH": _io(1, 1),
    "QUANTIZE": _io(1, 1), "DENSIFY": _io(0, 1),
    "BATCH_MATMUL": lambda c: None if len(c.op.inputs) == 2 and len(c.outputs) == 1 else
    "Expected 2 inputs and 1 output",
    "DEQUANTIZE": lambda c: "Unsupported dequantization type." if c.tensor(0).dtype == "int16" else None,
}


def _allowed_types(opcode: str) -> tuple[set[str], set[str]]:
    inputs, outputs = set(_FLOAT | _QUANT), set(_FLOAT | _QUANT)
    if opcode in _LOGICAL:
        outputs.add("bool")
    if opcode == "CAST":
        inputs |= {"bool", "int32"}
        outputs |= {"bool", "int32"}
    if opcode in ("ONE_HOT", "GATHER"):
        inputs.add("int32")
    if opcode in ("SELECT", "SELECT_V2"):
        inputs.add("bool")
    if opcode == "LOGICAL_AND":
        inputs.add("bool")
        outputs.add("bool")
    return inputs, outputs


def _tensors_ok(sg: Subgraph, op: Operator, folded: frozenset[int] = frozenset()) -> bool:
    allowed_in, allowed_out = _allowed_types(op.opcode_name)
    for indices, allowed in ((op.inputs, allowed_in), (op.outputs, allowed_out)):
        for t in indices:
            if t < 0:
                continue
            tensor = sg.tensors[t]
            if len(tensor.shape) >= 5:
                return False
            if tensor.data is None and t not in folded and not tensor.is_variable and tensor.dtype not in allowed:
                return False
    return True


def _is_fp16_weight_dequantize(sg: Subgraph, op: Operator) -> bool:
    """FP16 weights behind a DEQUANTIZE are folded by the delegate."""
    return (op.opcode_name == "DEQUANTIZE" and op.inputs and op.inputs[0] >= 0
            and sg.tensors[op.inputs[0]].dtype == "float16" and sg.tensors[op.inputs[0]].has_data)


def fp16_weights(sg: Subgraph) -> frozenset[int]:
    """Tensors made by DEQUANTIZE from float16 constants: the delegate reads them as constant weights."""
    return frozenset(op.outputs[0] for op in sg.operators if _is_fp16_weight_dequantize(sg, op) and op.outputs)


def op_reason(sg: Subgraph, op: Operator, folded: frozenset[int] | None = None) -> str | None:
    """Why the mobile GPU delegate would refuse ``op``, or None."""
    name = op.opcode_name
    folded = fp16_weights(sg) if folded is None else folded
    if op.is_custom:
        reason = _custom(_Context(sg, op, folded))
        return reason or (None if _tensors_ok(sg, op, folded) else TENSOR_MESSAGE)
    if _is_fp16_weight_dequantize(sg, op):
        return None
    if name not in MAX_VERSION:
        return "Operation is not supported."
    limit = MAX_VERSION[name]
    if limit is not None and op.version > limit:
        return f"Max version supported: {limit}. Requested version {op.version}."
    check = _logical(sg) if name in _LOGICAL else _CHECKS.get(name)
    try:
        reason = check(_Context(sg, op, folded)) if check else None
    except (IndexError, AttributeError, TypeError):  # a malformed op: the delegate would refuse it too
        reason = "Operation is not supported."
    if reason is None and not _tensors_ok(sg, op, folded):
        reason = TENSOR_MESSAGE
    return reason


def _largest_run(order: tuple[int, ...], supported: set[int]) -> tuple[int, ...]:
    best: list[int] = []
    run: list[int] = []
    for i in order:
        if i in supported:
            run.append(i)
            if len(run) > len(best):
                best = list(run)
        else:
            run = []
    return tuple(best)


def check_model(model: Model) -> MobileGpuReport:
    """Check every op of the primary subgraph (the one the delegate partitions)."""
    sg = model.subgraphs[0]
    order = execution_order(sg, model.source)
    folded = fp16_weights(sg)
    ops = tuple(MobileGpuOp(sg.index, i, sg.operators[i].opcode_name, sg.operators[i].version,
                            op_reason(sg, sg.operators[i], folded)) for i in order)
    supported = {o.op_index for o in ops if o.reason is None}
    return MobileGpuReport(ops, ((sg.index, _largest_run(order, supported)),))
