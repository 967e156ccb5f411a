"""Float and hybrid recurrent layers: RNN, LSTM, SVDF and their (bi/uni)directional sequence forms,
and the full-integer LSTM (``_lstm_integer``) and SVDF (``EvalIntegerSVDF``, at the end).

One step function serves both backends; the reference runs it in a python loop
over time, the XLA lowering in ``lax.scan``.  The state inputs are variable
tensors: as in the official runtime, the final state is written back (to the
backend's variable store under the key ``GraphRunner`` reads variable tensors
from), so the next run of the model continues from it.

Hybrid (dynamic-range) layers have int8 weights with one scale each and float
activations (``lstm_eval.cc EvalHybrid``, ``kernel_utils.cc RnnBatchStep``,
``svdf.cc EvalHybridSVDF``): every matmul operand (the input, the previous
output state, the projection input) is quantized per batch row to int8 —
asymmetrically when ``asymmetric_quantize_inputs`` — the product accumulates in
int32 and is scaled back by row_scale * weight_scale in float32.  Peephole and
SVDF time weights are dequantized to float32.  Gates accumulate in the official
order: bias, then the input product, then the recurrent product, then the peephole.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from ..errors import ModelExecutionError
from . import _lstm_integer as integer_lstm
from . import _quantized as qz
from . import _fixedpoint as fp
from ._quantized import quantize_rows as _quantize_rows
from ._common import applied_activation
from .matmul import _integer_dot
from .registry import Op, OpContext, register


def _time_major(ctx: OpContext, x: Any) -> Any:
    if len(x.shape) != 3:
        raise ModelExecutionError(f"{ctx.op}: input must be 3-D (batch, time, features), got shape {x.shape}")
    return x if ctx.options.time_major else ctx.xp.swapaxes(x, 0, 1)


def _from_time_major(ctx: OpContext, y: Any) -> Any:
    return y if ctx.options.time_major else ctx.xp.swapaxes(y, 0, 1)


def _scan(ctx: OpContext, step: Callable, state: Any, xs: Any) -> tuple[Any, Any]:
    """(final state, stacked outputs) of ``step(state, x_t) -> (state, y_t)`` over the first axis."""
    if ctx.lax is not None:
        return ctx.lax.scan(step, state, xs)
    ys = []
    for t in range(xs.shape[0]):
        state, y = step(state, xs[t])
        ys.append(y)
    if not ys:
        raise ModelExecutionError(f"{ctx.op}: the sequence is empty")
    return state, ctx.xp.stack(ys)


def _store_state(ctx: OpContext, input_index: int, value: Any) -> None:
    t = ctx.input(input_index)
    if t is not None and t.is_variable:
        ctx.variables[("tensor", ctx.subgraph.index, ctx.op.inputs[input_index])] = value


class HybridWeight(NamedTuple):
    """An int8 weight of a hybrid layer: its values, its one float32 scale, its row sums."""
    values: np.ndarray
    scale: np.float32
    row_sums: np.ndarray


def _weights(ctx: OpContext, first_input: int, arrays: Any) -> list:
    """The arrays of inputs ``first_input``, ``first_input + 1``...: float ones as they are,
    int8 ones (hybrid) as ``HybridWeight``; anything else is refused."""
    return [_weight(ctx, first_input + k, a) for k, a in enumerate(arrays)]


def _is_float(array: Any) -> bool:
    """float32, or the float16 that a reduced GPU precision holds float32 weights in."""
    return np.dtype(array.dtype).kind == "f" or str(array.dtype) == "bfloat16"


def _weight(ctx: OpContext, index: int, array: Any) -> Any:
    if array is None or _is_float(array):
        return array
    t = ctx.input(index)
    q = t.quantization if t is not None else None
    if str(array.dtype) != "int8" or q is None or len(q.scale) != 1 or not t.is_constant:
        what = "per-channel " if q is not None and len(q.scale) > 1 else ""
        raise ModelExecutionError(f"{ctx.op}: input {index} ({t.name if t is not None else '?'}) is {what}"
                                  f"{array.dtype}; recurrent weights must be float, or constant int8 with "
                                  "one scale (hybrid)")
    values = np.asarray(t.data)
    return HybridWeight(values, np.float32(q.scale[0]), values.astype(np.int64).sum(axis=-1))


def _matmul_t(ctx: OpContext, x: Any, w: Any) -> Any:
    """x @ w.T in full float32 precision (TFLite stores weights as [out, in]; GPUs default to TF32);
    a hybrid weight takes x quantized per row (``MatrixBatchVectorMultiplyAccumulate``)."""
    if isinstance(w, HybridWeight):
        return _hybrid_matmul_t(ctx, x, w)
    if ctx.lax is not None:
        return ctx.xp.matmul(x, ctx.xp.swapaxes(w, 0, 1), precision=ctx.lax.Precision.HIGHEST)
    return x @ w.T


def _hybrid_matmul_t(ctx: OpContext, x: Any, w: HybridWeight) -> Any:
    xp = ctx.xp
    asymmetric = bool(ctx.options.get("asymmetric_quantize_inputs", False))
    quantized, row_scale, row_zp = _quantize_rows(xp, x, asymmetric)
    acc = _integer_dot(xp, ctx, quantized, w.values.astype(np.int64).T, False)
    if asymmetric:
        acc = acc - row_zp * w.row_sums
    return acc.astype(xp.float32) * (row_scale * w.scale)


def _dequantized(w: Any) -> Any:
    """Peephole and SVDF time weights: hybrid ones are used as float32(value) * scale."""
    if isinstance(w, HybridWeight):
        return w.values.astype(np.float32) * w.scale
    return w


def _require_weight(ctx: OpContext, *weights: Any) -> None:
    for w in weights:
        if w is None:
            raise ModelExecutionError(f"{ctx.op}: a required weight input is missing")


def _rnn_step(ctx: OpContext, w: Any, r: Any, bias: Any) -> Callable:
    _require_weight(ctx, w, r)
    if bias is None:
        raise ModelExecutionError(f"{ctx.op}: the RNN bias input is required")
    activation = ctx.options.fused_activation_function

    def step(h: Any, x_t: Any) -> tuple[Any, Any]:
        h = applied_activation(ctx.xp, bias + _matmul_t(ctx, x_t, w) + _matmul_t(ctx, h, r), activation)
        return h, h
    return step


def _reversed_scan(ctx: OpContext, step: Callable, state: Any, xs: Any) -> tuple[Any, Any]:
    """The backward direction: runs from the last step, outputs stay at their time positions."""
    state, ys = _scan(ctx, step, state, xs[::-1])
    return state, ys[::-1]


@register("UNIDIRECTIONAL_SEQUENCE_RNN")
class UnidirectionalSequenceRnn(Op):
    def compute(self, ctx: OpContext, x: Any, w: Any, r: Any, bias: Any, h0: Any) -> Any:
        w, r = _weights(ctx, 1, (w, r))
        h, ys = _scan(ctx, _rnn_step(ctx, w, r, bias), h0, _time_major(ctx, x))
        _store_state(ctx, 4, h)
        return _from_time_major(ctx, ys)


def _sigmoid(xp: Any, x: Any) -> Any:
    return 1 / (1 + xp.exp(-x))


@register("RNN")
class Rnn(Op):
    """One step of UNIDIRECTIONAL_SEQUENCE_RNN on a [batch, features] input."""

    def compute(self, ctx: OpContext, x: Any, w: Any, r: Any, bias: Any, h0: Any) -> Any:
        if len(x.shape) != 2:
            raise ModelExecutionError(f"{ctx.op}: input must be 2-D (batch, features), got shape {x.shape}")
        w, r = _weights(ctx, 1, (w, r))
        h, _ = _rnn_step(ctx, w, r, bias)(h0, x)
        _store_state(ctx, 4, h)
        return h


@register("BIDIRECTIONAL_SEQUENCE_RNN")
class BidirectionalSequenceRnn(Op):
    """Inputs: x, fw (W, R, bias, h), bw (W, R, bias, h), aux input and its fw/bw weights (unsupported)."""

    def compute(self, ctx: OpContext, x: Any, *args: Any) -> Any:
        args = list(args) + [None] * (11 - len(args))
        _reject_aux_input(ctx, args[8:11])
        fw_w, fw_r, fw_b, fw_h0, bw_w, bw_r, bw_b, bw_h0 = args[:8]
        fw_w, fw_r = _weights(ctx, 1, (fw_w, fw_r))
        bw_w, bw_r = _weights(ctx, 5, (bw_w, bw_r))
        xs = _time_major(ctx, x)
        fw_h, fw_ys = _scan(ctx, _rnn_step(ctx, fw_w, fw_r, fw_b), fw_h0, xs)
        bw_h, bw_ys = _reversed_scan(ctx, _rnn_step(ctx, bw_w, bw_r, bw_b), bw_h0, xs)
        _store_state(ctx, 4, fw_h)
        _store_state(ctx, 8, bw_h)
        return _bidirectional_outputs(ctx, fw_ys, bw_ys)


def _reject_aux_input(ctx: OpContext, aux: list) -> None:
    if any(a is not None for a in aux):
        raise ModelExecutionError(f"{ctx.op}: the auxiliary input is not implemented")


def _bidirectional_outputs(ctx: OpContext, fw_ys: Any, bw_ys: Any) -> Any:
    fw, bw = _from_time_major(ctx, fw_ys), _from_time_major(ctx, bw_ys)
    if ctx.options.merge_outputs:
        return ctx.xp.concatenate([fw, bw], axis=-1)
    return fw, bw


def _lstm_step(ctx: OpContext, params: list) -> Callable:
    """The float LSTM cell; ``params`` are the schema's 16 weights: W_{i,f,c,o}, R_{i,f,c,o},
    peepholes {i,f,o}, biases {i,f,c,o}, projection weights and bias (CIFG when W_i is absent)."""
    xp = ctx.xp
    w_i, w_f, w_c, w_o, r_i, r_f, r_c, r_o = params[0:8]
    p_i, p_f, p_o, b_i, b_f, b_c, b_o, proj_w, proj_b = params[8:17]
    _require_weight(ctx, w_f, w_c, w_o, r_f, r_c, r_o)
    p_i, p_f, p_o = _dequantized(p_i), _dequantized(p_f), _dequantized(p_o)
    cifg = w_i is None
    o = ctx.options
    activation = o.fused_activation_function
    cell_clip, proj_clip = float(o.cell_clip), float(o.proj_clip)

    def gate(x_t: Any, h: Any, w: Any, r: Any, b: Any, peephole: Any, c: Any) -> Any:
        z = _matmul_t(ctx, x_t, w)
        z = z + b if b is not None else z
        z = z + _matmul_t(ctx, h, r)
        return z + c * peephole if peephole is not None else z

    def step(state: tuple, x_t: Any) -> tuple[tuple, Any]:
        h, c = state
        f = _sigmoid(xp, gate(x_t, h, w_f, r_f, b_f, p_f, c))
        i = 1 - f if cifg else _sigmoid(xp, gate(x_t, h, w_i, r_i, b_i, p_i, c))
        g = applied_activation(xp, gate(x_t, h, w_c, r_c, b_c, None, c), activation)
        c = f * c + i * g
        if cell_clip > 0:
            c = xp.clip(c, -cell_clip, cell_clip)
        out_gate = _sigmoid(xp, gate(x_t, h, w_o, r_o, b_o, p_o, c))
        h = out_gate * applied_activation(xp, c, activation)
        if proj_w is not None:
            h = _matmul_t(ctx, h, proj_w)
            if proj_b is not None:
                h = h + proj_b
            if proj_clip > 0:
                h = xp.clip(h, -proj_clip, proj_clip)
        return (h, c), h
    return step


def _lstm_params(ctx: OpContext, args: tuple, count: int) -> list:
    """The 23 inputs after x of the (UNIDIRECTIONAL_SEQUENCE_)LSTM schema; layer norm is refused."""
    args = list(args) + [None] * (count - len(args))
    if any(a is not None for a in args[19:23]):
        raise ModelExecutionError(f"{ctx.op}: layer-normalised LSTM is not implemented")
    if args[17] is None or args[18] is None:
        raise ModelExecutionError(f"{ctx.op}: the output state (input 18) and cell state (input 19) are required")
    return _weights(ctx, 1, args[:17]) + args[17:]


def _is_integer(ctx: OpContext) -> bool:
    return ctx.input(0).dtype == "int8"


def _integer_unsupported_reason(op: Any, subgraph: Any) -> str | None:
    if op.inputs and op.inputs[0] >= 0 and subgraph.tensors[op.inputs[0]].dtype == "int8":
        return integer_lstm.unsupported_reason(op, subgraph)
    return None


def _integer_lstm(ctx: OpContext, xs: Any, h0: Any, c0: Any) -> Any:
    """The full-integer cell (``_lstm_integer``) over time-major int8 ``xs``; stores the final
    states, returns the int8 outputs [time, batch, n_output]."""
    xp = ctx.xp
    if h0 is None or c0 is None:
        raise ModelExecutionError(f"{ctx.op}: the output state (input 18) and cell state (input 19) are required")
    if len(xs.shape) != 3:
        raise ModelExecutionError(f"{ctx.op}: input must be 3-D, got shape {xs.shape}")
    lstm = integer_lstm.integer_lstm(ctx, xs.shape[-1])
    n_batch = xs.shape[1]
    for name, state, width in (("output", h0, lstm.n_output), ("cell", c0, lstm.n_cell)):
        if int(np.prod(state.shape)) != n_batch * width:
            raise ModelExecutionError(f"{ctx.op}: the {name} state has shape {tuple(state.shape)}, expected "
                                      f"{n_batch} x {width} elements")
    state = (xp.reshape(h0, (n_batch, lstm.n_output)).astype(xp.int64),
             xp.reshape(c0, (n_batch, lstm.n_cell)).astype(xp.int64))
    # The official time-major loop (which the LSTM op always uses) runs the whole batch as one flat
    # vector, and its peephole sees it so; the batch-major loop runs row by row.
    flat_batch = bool(ctx.options.get("time_major", True))
    step = integer_lstm.step_function(ctx, lstm, n_batch, flat_batch)
    (h, c), ys = _scan(ctx, step, state, integer_lstm.input_gates(ctx, lstm, xs))
    _store_state(ctx, 18, xp.reshape(h, h0.shape).astype(xp.int8))
    _store_state(ctx, 19, xp.reshape(c, c0.shape).astype(xp.int16))
    return ys.astype(xp.int8)


@register("UNIDIRECTIONAL_SEQUENCE_LSTM")
class UnidirectionalSequenceLstm(Op):
    """Inputs as the schema: x, W_{i,f,c,o}, R_{i,f,c,o}, peepholes, biases, projection, h, c, layer norms.
    An int8 input runs the full-integer kernel (``_lstm_integer``)."""
    dtypes = ("float32", "int8")

    def unsupported_reason(self, op: Any, subgraph: Any, target: Any) -> str | None:
        return _integer_unsupported_reason(op, subgraph) or super().unsupported_reason(op, subgraph, target)

    def compute(self, ctx: OpContext, x: Any, *args: Any) -> Any:
        if _is_integer(ctx):
            args = list(args) + [None] * (23 - len(args))
            return _from_time_major(ctx, _integer_lstm(ctx, _time_major(ctx, x), args[17], args[18]))
        args = _lstm_params(ctx, args, 23)
        (h, c), ys = _scan(ctx, _lstm_step(ctx, args[:17]), (args[17], args[18]), _time_major(ctx, x))
        _store_state(ctx, 18, h)
        _store_state(ctx, 19, c)
        return _from_time_major(ctx, ys)


@register("LSTM")
class Lstm(Op):
    """One step of the LSTM cell on [batch, features] (kernel_type FULL; the BASIC 4-output form is refused).
    An int8 input runs the full-integer kernel (``_lstm_integer``)."""
    dtypes = ("float32", "int8")

    def unsupported_reason(self, op: Any, subgraph: Any, target: Any) -> str | None:
        if op.options.get("kernel_type", "FULL") != "FULL":
            return f"kernel_type {op.options.get('kernel_type')} is not supported (only FULL)"
        return _integer_unsupported_reason(op, subgraph) or super().unsupported_reason(op, subgraph, target)

    def compute(self, ctx: OpContext, x: Any, *args: Any) -> Any:
        if len(x.shape) != 2:
            raise ModelExecutionError(f"{ctx.op}: input must be 2-D (batch, features), got shape {x.shape}")
        if ctx.options.kernel_type != "FULL":
            raise ModelExecutionError(f"{ctx.op}: kernel_type {ctx.options.kernel_type} is not supported")
        if _is_integer(ctx):
            args = list(args) + [None] * (23 - len(args))
            return _integer_lstm(ctx, x[None], args[17], args[18])[0]
        args = _lstm_params(ctx, args, 23)
        (h, c), _ = _lstm_step(ctx, args[:17])((args[17], args[18]), x)
        _store_state(ctx, 18, h)
        _store_state(ctx, 19, c)
        return h


@register("BIDIRECTIONAL_SEQUENCE_LSTM")
class BidirectionalSequenceLstm(Op):
    """48 inputs: x, fw weights (1-17), bw weights (18-34), fw h/c (35, 36), bw h/c (37, 38),
    aux input (39) and its fw/bw weights (40-47; unsupported)."""

    def compute(self, ctx: OpContext, x: Any, *args: Any) -> Any:
        args = list(args) + [None] * (47 - len(args))
        _reject_aux_input(ctx, args[38:47])
        fw_params, bw_params = _weights(ctx, 1, args[0:17]), _weights(ctx, 18, args[17:34])
        fw_h0, fw_c0, bw_h0, bw_c0 = args[34:38]
        if any(s is None for s in (fw_h0, fw_c0, bw_h0, bw_c0)):
            raise ModelExecutionError(f"{ctx.op}: the fw/bw output and cell states (inputs 35-38) are required")
        xs = _time_major(ctx, x)
        (fw_h, fw_c), fw_ys = _scan(ctx, _lstm_step(ctx, fw_params), (fw_h0, fw_c0), xs)
        (bw_h, bw_c), bw_ys = _reversed_scan(ctx, _lstm_step(ctx, bw_params), (bw_h0, bw_c0), xs)
        for index, value in zip((35, 36, 37, 38), (fw_h, fw_c, bw_h, bw_c)):
            _store_state(ctx, index, value)
        return _bidirectional_outputs(ctx, fw_ys, bw_ys)


# --- full-integer SVDF (svdf.cc, reference_ops::EvalIntegerSVDF) -----------------------------------

class IntegerSvdf(NamedTuple):
    """What ``Prepare`` fixes for an int8 SVDF: the weights and the two rescalings."""
    weights_feature: np.ndarray      # int8 [filters, n_input]
    weights_time: np.ndarray         # int16 [filters, memory]
    bias: np.ndarray | None          # int32 [units]
    feature_rescale: tuple[int, int]  # input * weights_feature / state scale
    output_rescale: tuple[int, int]   # state * weights_time / output scale
    input_zp: int
    output_zp: int


def _integer_svdf_reason(op: Any, subgraph: Any) -> str | None:
    """The official Eval refuses any int8 SVDF whose activation is not RELU (and then never applies it)."""
    if op.inputs and op.inputs[0] >= 0 and subgraph.tensors[op.inputs[0]].dtype == "int8":
        activation = op.options.get("fused_activation_function", "NONE")
        if activation != "RELU":
            return f"the full-integer SVDF only runs with fused activation RELU (the official kernel's check), " \
                   f"got {activation}"
    return None


def _svdf_constant(ctx: OpContext, index: int, dtype: str, what: str) -> np.ndarray | None:
    t = ctx.input(index)
    if t is None:
        return None
    if t.dtype != dtype or t.data is None:
        raise ModelExecutionError(f"{ctx.op}: full-integer SVDF: {what} (input {index}) must be a constant {dtype} "
                                  f"tensor, got a {'constant' if t.has_data else 'non-constant'} {t.dtype} one")
    return np.asarray(t.data)


def _first_scale(ctx: OpContext, t: Any, what: str) -> tuple[float, int]:
    """``params.scale->data[0]`` and the zero point, as the official Prepare reads them (float32 values)."""
    q = t.quantization if t is not None else None
    if q is None or not q.scale:
        raise ModelExecutionError(f"{ctx.op}: full-integer SVDF: {what} has no quantization scale")
    return float(np.float32(q.scale[0])), int(q.zero_point[0]) if q.zero_point else 0


def _integer_svdf(ctx: OpContext) -> IntegerSvdf:
    wf = _svdf_constant(ctx, 1, "int8", "the feature weights")
    wt = _svdf_constant(ctx, 2, "int16", "the time weights")
    bias = _svdf_constant(ctx, 3, "int32", "the bias")
    state_t, out_t = ctx.input(4), ctx.output(0)
    if wf is None or wt is None or state_t is None:
        raise ModelExecutionError(f"{ctx.op}: full-integer SVDF needs feature weights, time weights and a state")
    if state_t.dtype != "int16" or out_t.dtype != "int8":
        raise ModelExecutionError(f"{ctx.op}: full-integer SVDF needs an int16 state and an int8 output, got "
                                  f"{state_t.dtype} and {out_t.dtype}")
    s_in, zp_in = _first_scale(ctx, ctx.input(0), "the input")
    s_wf, _ = _first_scale(ctx, ctx.input(1), "the feature weights")
    s_wt, _ = _first_scale(ctx, ctx.input(2), "the time weights")
    s_state, _ = _first_scale(ctx, state_t, "the state")
    s_out, zp_out = _first_scale(ctx, out_t, "the output")
    # double arithmetic on the float32 scales, as Prepare does; the weights' and the state's zero
    # points are never read (the kernel assumes them 0)
    return IntegerSvdf(wf, wt, bias, fp.quantize_multiplier(s_in * s_wf / s_state),
                       fp.quantize_multiplier(s_state * s_wt / s_out), zp_in, zp_out)


def _svdf_integer_step(ctx: OpContext, x: Any, state: Any) -> tuple[Any, Any]:
    """(int8 output, new int16 state) of ``EvalIntegerSVDF``: the state shifts left one step per filter,
    the newest column is the feature product rescaled to the state scale (int16 saturation); the time
    product, rank reduction and bias accumulate in int32; then one rescale to the output, its zero point
    and the int8 clamp (no activation: the RELU the op demands is not applied)."""
    xp = ctx.xp
    svdf = _integer_svdf(ctx)
    batch = x.shape[0]
    filters, memory = svdf.weights_time.shape
    rank = int(ctx.options.rank)
    units = filters // rank
    if svdf.weights_feature.shape != (filters, x.shape[1]):
        raise ModelExecutionError(f"{ctx.op}: the feature weights are {svdf.weights_feature.shape}, expected "
                                  f"{(filters, x.shape[1])}")
    if svdf.bias is not None and svdf.bias.shape != (units,):
        raise ModelExecutionError(f"{ctx.op}: the bias has shape {svdf.bias.shape}, expected {(units,)}")
    centred = x.astype(xp.int64) - svdf.input_zp
    bound = qz.dot_bound(qz.centred_magnitude("int8", svdf.input_zp), svdf.weights_feature, 1)
    feature = qz.exact_matmul(xp, centred, svdf.weights_feature.T.astype(np.int64), bound)
    newest = xp.clip(fp.multiply_by_quantized_multiplier(xp, fp.wrap_int32(xp, feature), *svdf.feature_rescale),
                     -32768, 32767)
    window = xp.concatenate([xp.reshape(state.astype(xp.int64), (batch, filters, memory))[:, :, 1:],
                             newest[:, :, None]], axis=2)
    per_filter = xp.sum(window * svdf.weights_time.astype(np.int64)[None], axis=2)
    acc = xp.sum(xp.reshape(per_filter, (batch, units, rank)), axis=2)
    if svdf.bias is not None:
        acc = acc + svdf.bias.astype(np.int64)
    out = fp.multiply_by_quantized_multiplier(xp, fp.wrap_int32(xp, acc), *svdf.output_rescale) + svdf.output_zp
    return xp.clip(out, -128, 127).astype(xp.int8), xp.reshape(window, (batch, filters * memory)).astype(xp.int16)


@register("SVDF")
class Svdf(Op):
    """Inputs: x [batch, in], feature weights [filters, in], time weights [filters, memory], bias
    [units] (optional), state [batch, filters * memory] (a variable); units = filters / rank.
    Float, hybrid (int8 weights, float input) or full integer (int8 input: int8 feature weights,
    int16 time weights and state, int32 bias, int8 output)."""
    dtypes = ("float32", "int8")

    def unsupported_reason(self, op: Any, subgraph: Any, target: Any) -> str | None:
        return _integer_svdf_reason(op, subgraph) or super().unsupported_reason(op, subgraph, target)

    def compute(self, ctx: OpContext, x: Any, w_feature: Any, w_time: Any, bias: Any, state: Any) -> Any:
        xp = ctx.xp
        _require_weight(ctx, w_feature, w_time)
        rank = int(ctx.options.rank)
        filters, memory = w_time.shape
        batch = x.shape[0]
        if len(x.shape) != 2 or rank <= 0 or filters % rank or state is None:
            raise ModelExecutionError(f"{ctx.op}: expected a 2-D input, a state and rank dividing the "
                                      f"{filters} filters, got input {x.shape}, rank {rank}")
        if int(np.prod(state.shape)) != batch * filters * memory:
            raise ModelExecutionError(f"{ctx.op}: the state has shape {tuple(state.shape)}, expected "
                                      f"{(batch, filters * memory)}")
        if _is_integer(ctx):
            reason = _integer_svdf_reason(ctx.op, ctx.subgraph)
            if reason is not None:
                raise ModelExecutionError(f"{ctx.op}: {reason}")
            out, window = _svdf_integer_step(ctx, x, state)
            _store_state(ctx, 4, xp.reshape(window, state.shape))
            return out
        w_feature, w_time = _weights(ctx, 1, (w_feature, w_time))
        _require_weight(ctx, w_feature, w_time)
        w_time = _dequantized(w_time)
        # The state is a sliding window of each filter's last `memory` feature activations.
        activations = _matmul_t(ctx, x, w_feature)[:, :, None]
        window = xp.concatenate([xp.reshape(state, (batch, filters, memory))[:, :, 1:], activations], axis=2)
        per_filter = xp.sum(window * w_time[None], axis=2)
        out = xp.sum(xp.reshape(per_filter, (batch, filters // rank, rank)), axis=2)
        if bias is not None:
            out = out + bias
        _store_state(ctx, 4, xp.reshape(window, (batch, filters * memory)))
        return applied_activation(xp, out, ctx.options.fused_activation_function)
