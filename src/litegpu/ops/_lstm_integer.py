"""The full-integer LSTM cell: int8 activations and weights, int16 cell state, int32 biases.

Bit-exact to the official builtin kernel on x86 (``lstm_eval.cc EvalInteger8x8_16`` over the portable
tensor utils, with the parameters of ``PopulateQuantizedLstmParams8x8_16`` and
``PopulatePrecomputedZPTimesWeightsWithBias``), which both UNIDIRECTIONAL_SEQUENCE_LSTM and LSTM run
when the input is int8 and the operator has 5 intermediate tensors:

- every gate is int16 Q3.12 (or, with layer norm, at the scale of intermediates 0-3): the int8 input
  and output-state products accumulate in int32 from raw int8 values, the zero points folded into
  the bias (``bias - zp * row_sum``); each product is rescaled on its own
  (``MultiplyByQuantizedMultiplier``) and added with int16 saturation; then the peephole, the layer
  norm, and gemmlowp's int16 sigmoid (forget, input, output gates) or tanh with 3 integer bits
  (the cell gate, whatever the op's activation);
- the cell state has a power-of-two scale 2^k: ``c = f*c >> 15`` (rounding, int16 wrap) plus
  ``i*g >> (30 + k)`` with int16 saturation, then the quantized cell clip;
- the hidden value is ``o * tanh(c)`` (gemmlowp tanh with 15 + k integer bits) rescaled to the
  hidden intermediate (4): the output state itself, or, with a projection, the int8 input of the
  projection product.

Quirks kept on purpose: the cell and projection clips clamp the raw values symmetrically about 0
(not about the zero point); the peephole runs over the first ``n_output`` cells only (it is called
with ``n_output`` as the vector length, so with a projection it covers fewer cells, and in the
time-major layout it walks the batch as one flat vector).

The step is written against ``ctx.xp``: numpy in the reference backend, jax.numpy (x64) under XLA.
Everything static (weights, effective biases, multipliers, lookup tables) is numpy.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from ..errors import ModelExecutionError, UnsupportedOpError
from . import _quantized as qz
from . import _fixedpoint as fp

# Input positions of the (UNIDIRECTIONAL_SEQUENCE_)LSTM schema.
INPUT_WEIGHTS = {"input": 1, "forget": 2, "cell": 3, "output": 4}
RECURRENT_WEIGHTS = {"input": 5, "forget": 6, "cell": 7, "output": 8}
PEEPHOLES = {"input": 9, "forget": 10, "output": 11}
BIASES = {"input": 12, "forget": 13, "cell": 14, "output": 15}
PROJECTION_WEIGHTS, PROJECTION_BIAS = 16, 17
OUTPUT_STATE, CELL_STATE = 18, 19
LAYER_NORMS = {"input": 20, "forget": 21, "cell": 22, "output": 23}
GATE_INTERMEDIATE = {"input": 0, "forget": 1, "cell": 2, "output": 3}
HIDDEN_INTERMEDIATE = 4

INT16_MIN, INT16_MAX = -(1 << 15), (1 << 15) - 1
Q3_12 = 2.0 ** -12


@dataclass(frozen=True)
class Rescale:
    """A real multiplier as ``QuantizeMultiplier`` decomposes it."""
    multiplier: int
    shift: int

    @staticmethod
    def of(real: float) -> Rescale:
        return Rescale(*fp.quantize_multiplier(float(real)))


@dataclass(frozen=True)
class LayerNorm:
    weights: np.ndarray      # int16 [n_cell]
    bias: np.ndarray         # int32 [n_cell] (the gate bias goes here, not into the products)
    rescale: Rescale
    variance_guard: int


@dataclass(frozen=True)
class Gate:
    input_weights: np.ndarray       # int8 [n_cell, n_input]
    input_bias: np.ndarray          # int64 [n_cell]: bias - input_zp * row sums (int32 values)
    input_rescale: Rescale
    recurrent_weights: np.ndarray   # int8 [n_cell, n_output]
    recurrent_bias: np.ndarray      # int64 [n_cell]: -output_state_zp * row sums
    recurrent_rescale: Rescale
    peephole: np.ndarray | None     # int16 [n_cell]
    peephole_rescale: Rescale | None
    layer_norm: LayerNorm | None


@dataclass(frozen=True)
class IntegerLstm:
    """Everything static about one full-integer LSTM operator."""
    gates: dict[str, Gate]           # "forget", "cell", "output", and "input" unless CIFG
    n_input: int
    n_cell: int
    n_output: int
    cell_exponent: int               # the cell state's scale is 2^cell_exponent
    cell_clip: int                   # 0: no clipping
    hidden_rescale: Rescale
    hidden_zp: int
    projection: np.ndarray | None    # int8 [n_output, n_cell]
    projection_bias: np.ndarray | None  # int64 [n_output]: bias + hidden_zp * row sums
    projection_rescale: Rescale | None
    projection_clip: int
    output_state_zp: int

    @property
    def cifg(self) -> bool:
        return "input" not in self.gates


# ---- parameters (Prepare) ------------------------------------------------------------------------

def unsupported_reason(op: Any, subgraph: Any) -> str | None:
    """Why an int8 (UNIDIRECTIONAL_SEQUENCE_)LSTM cannot run here, known before running it."""
    if len(op.intermediates) != 5:
        return (f"full-integer LSTM with {len(op.intermediates)} intermediate tensors (the 8x8_8 kernel) is not "
                "implemented; only the 8x8_16 kernel (5 intermediates) is")
    return None


def _tensor(ctx: Any, index: int) -> Any:
    return ctx.input(index)


def _fail(ctx: Any, message: str) -> ModelExecutionError:
    return ModelExecutionError(f"{ctx.op}: full-integer LSTM: {message}")


def _scale_zp(ctx: Any, t: Any, what: str) -> tuple[np.float32, int]:
    """The one (float32) scale and zero point of a per-tensor quantized tensor (``params.scale``)."""
    q = t.quantization if t is not None else None
    if q is None or not q.scale:
        raise _fail(ctx, f"{what} ({t.name if t is not None else 'missing'}) has no quantization")
    if len(q.scale) != 1:
        raise _fail(ctx, f"{what} ({t.name}) must have one scale, got {len(q.scale)} (per-channel)")
    return np.float32(q.scale[0]), int(q.zero_point[0]) if q.zero_point else 0


def _constant(ctx: Any, index: int, dtype: str, what: str) -> np.ndarray | None:
    t = _tensor(ctx, index)
    if t is None:
        return None
    if t.dtype != dtype or t.data is None:
        raise _fail(ctx, f"{what} (input {index}, {t.name}) must be a constant {dtype} tensor, got "
                         f"{'a constant' if t.has_data else 'a non-constant'} {t.dtype} tensor")
    return np.asarray(t.data)


def _checked_log2(ctx: Any, scale: np.float32) -> int:
    """``CheckedLog2``: the exponent of a power-of-two scale (float32 arithmetic, tolerance 1e-3)."""
    log2 = np.float32(np.float32(math.log(float(scale))) * np.float32(1.0 / math.log(2.0)))
    rounded = fp.round_half_away(float(log2))
    if abs(float(log2) - rounded) >= 1e-3:
        raise _fail(ctx, f"the cell state scale must be a power of two, got {float(scale)}")
    return int(rounded)


def _folded_bias(weights: np.ndarray, zero_point: int, bias: np.ndarray | None) -> np.ndarray:
    """``PrecomputeZeroPointTimesWeightWithBias``: bias + zero_point * row sums, in int32."""
    rows = weights.shape[0]
    total = np.zeros(rows, np.int64) if bias is None else bias.astype(np.int64)
    if zero_point != 0:
        total = total + zero_point * weights.astype(np.int64).sum(axis=1)
    return fp.wrap_int32(np, total)


def _f32_mul(a: Any, b: Any) -> np.float32:
    return np.float32(np.float32(a) * np.float32(b))


def _f32_div(a: Any, b: Any) -> np.float32:
    return np.float32(np.float32(a) / np.float32(b))


def integer_lstm(ctx: Any, n_input: int) -> IntegerLstm:
    """The parameters ``Prepare`` computes, read from the op's inputs and intermediates."""
    reason = unsupported_reason(ctx.op, ctx.subgraph)
    if reason is not None:
        raise UnsupportedOpError(f"{ctx.op}: {reason}")
    inter = [ctx.subgraph.tensors[i] for i in ctx.op.intermediates]
    x_scale, x_zp = _scale_zp(ctx, _tensor(ctx, 0), "the input")
    out_state_t, cell_t = _tensor(ctx, OUTPUT_STATE), _tensor(ctx, CELL_STATE)
    if out_state_t is None or cell_t is None:
        raise _fail(ctx, "the output state (input 18) and cell state (input 19) are required")
    if out_state_t.dtype != "int8" or cell_t.dtype != "int16":
        raise _fail(ctx, f"the output state must be int8 and the cell state int16, got {out_state_t.dtype} "
                         f"and {cell_t.dtype}")
    h_scale, h_zp = _scale_zp(ctx, out_state_t, "the output state")
    cell_scale, _ = _scale_zp(ctx, cell_t, "the cell state")
    cell_exponent = _checked_log2(ctx, cell_scale)
    if not 0 <= 15 + cell_exponent <= 6:
        # PortableApplyTanh only has 0..6 integer bits; other scales leave garbage in the official kernel.
        raise _fail(ctx, f"the cell state scale 2^{cell_exponent} is outside the kernel's 2^-15..2^-9")

    use_layer_norm = _tensor(ctx, LAYER_NORMS["forget"]) is not None
    cifg = _tensor(ctx, INPUT_WEIGHTS["input"]) is None
    peephole = _tensor(ctx, PEEPHOLES["output"]) is not None
    gate_names = ("forget", "cell", "output") if cifg else ("input", "forget", "cell", "output")
    gate_scale = {}
    for name in gate_names:
        if use_layer_norm:
            gate_scale[name] = _scale_zp(ctx, inter[GATE_INTERMEDIATE[name]], f"intermediate {GATE_INTERMEDIATE[name]}")[0]
        else:
            gate_scale[name] = np.float32(Q3_12)
    hidden_scale, hidden_zp = _scale_zp(ctx, inter[HIDDEN_INTERMEDIATE], "intermediate 4 (the hidden state)")

    gates = {name: _gate(ctx, name, n_input, x_scale, x_zp, h_scale, h_zp, gate_scale[name], cell_exponent,
                         peephole, use_layer_norm) for name in gate_names}
    n_cell, n_output = gates["output"].recurrent_weights.shape
    for name, gate in gates.items():
        if gate.input_weights.shape != (n_cell, n_input) or gate.recurrent_weights.shape != (n_cell, n_output):
            raise _fail(ctx, f"the {name} gate's weights are {gate.input_weights.shape} and "
                             f"{gate.recurrent_weights.shape}, expected {(n_cell, n_input)} and {(n_cell, n_output)}")
    if peephole and n_output > n_cell:
        raise _fail(ctx, "a peephole with more outputs than cells reads past the cell state in the official kernel")

    projection = _constant(ctx, PROJECTION_WEIGHTS, "int8", "the projection weights")
    projection_bias = projection_rescale = None
    if projection is not None:
        if projection.shape != (n_output, n_cell):
            raise _fail(ctx, f"the projection weights are {projection.shape}, expected {(n_output, n_cell)}")
        proj_scale, _ = _scale_zp(ctx, _tensor(ctx, PROJECTION_WEIGHTS), "the projection weights")
        projection_bias = _folded_bias(projection, hidden_zp, _constant(ctx, PROJECTION_BIAS, "int32",
                                                                        "the projection bias"))
        projection_rescale = Rescale.of(_f32_div(_f32_mul(proj_scale, hidden_scale), h_scale))
    elif _tensor(ctx, PROJECTION_BIAS) is not None:
        raise _fail(ctx, "a projection bias without projection weights")

    # effective_hidden_scale = 2^-15 / hidden_scale * 2^-15, in double, stored as float
    hidden_rescale = Rescale.of(np.float32(2.0 ** -15 / float(hidden_scale) * 2.0 ** -15))
    return IntegerLstm(
        gates=gates, n_input=n_input, n_cell=n_cell, n_output=n_output, cell_exponent=cell_exponent,
        cell_clip=_quantized_clip(ctx.options.cell_clip, cell_scale, INT16_MIN, INT16_MAX),
        hidden_rescale=hidden_rescale, hidden_zp=hidden_zp, projection=projection,
        projection_bias=projection_bias, projection_rescale=projection_rescale,
        projection_clip=_quantized_clip(ctx.options.proj_clip, h_scale, -128, 127), output_state_zp=h_zp)


def _quantized_clip(clip: float, scale: np.float32, low: int, high: int) -> int:
    """``static_cast<intN_t>(min(max(clip / scale, low), high))`` in float32; 0 turns clipping off."""
    if not clip > 0:
        return 0
    return int(np.trunc(min(max(_f32_div(clip, scale), np.float32(low)), np.float32(high))))


def _gate(ctx: Any, name: str, n_input: int, x_scale: np.float32, x_zp: int, h_scale: np.float32, h_zp: int,
          gate_scale: np.float32, cell_exponent: int, peephole: bool, use_layer_norm: bool) -> Gate:
    w = _constant(ctx, INPUT_WEIGHTS[name], "int8", f"the input-to-{name} weights")
    r = _constant(ctx, RECURRENT_WEIGHTS[name], "int8", f"the recurrent-to-{name} weights")
    bias = _constant(ctx, BIASES[name], "int32", f"the {name} gate bias")
    if w is None or r is None or bias is None:
        raise _fail(ctx, f"the {name} gate needs its input and recurrent weights and its bias")
    if w.ndim != 2 or r.ndim != 2 or w.shape[1] != n_input:
        raise _fail(ctx, f"the {name} gate's weights must be 2-D with {n_input} input columns, got {w.shape} and "
                         f"{r.shape} (diagonal recurrent weights are float-only)")
    w_scale, _ = _scale_zp(ctx, _tensor(ctx, INPUT_WEIGHTS[name]), f"the input-to-{name} weights")
    r_scale, _ = _scale_zp(ctx, _tensor(ctx, RECURRENT_WEIGHTS[name]), f"the recurrent-to-{name} weights")
    layer_norm = None
    if use_layer_norm:
        layer_norm = _layer_norm(ctx, name, bias)
        bias = None
    p = p_rescale = None
    if peephole and name != "cell":
        p = _constant(ctx, PEEPHOLES[name], "int16", f"the cell-to-{name} (peephole) weights")
        if p is None:
            raise _fail(ctx, f"the peephole weights must be all present or all absent (cell-to-{name} is missing)")
        p_scale, _ = _scale_zp(ctx, _tensor(ctx, PEEPHOLES[name]), f"the cell-to-{name} weights")
        # std::pow(2, cell_scale) * weight_scale / intermediate_scale, in double, stored as float
        p_rescale = Rescale.of(np.float32(2.0 ** cell_exponent * float(p_scale) / float(gate_scale)))
    return Gate(
        input_weights=w, input_bias=_folded_bias(w, -x_zp, bias),
        input_rescale=Rescale.of(_f32_div(_f32_mul(w_scale, x_scale), gate_scale)),
        recurrent_weights=r, recurrent_bias=_folded_bias(r, -h_zp, None),
        recurrent_rescale=Rescale.of(_f32_div(_f32_mul(r_scale, h_scale), gate_scale)),
        peephole=p, peephole_rescale=p_rescale, layer_norm=layer_norm)


def _layer_norm(ctx: Any, name: str, bias: np.ndarray) -> LayerNorm:
    weights = _constant(ctx, LAYER_NORMS[name], "int16", f"the {name} layer-norm coefficients")
    if weights is None:
        raise _fail(ctx, f"the {name} layer-norm coefficients are missing")
    scale, _ = _scale_zp(ctx, _tensor(ctx, LAYER_NORMS[name]), f"the {name} layer-norm coefficients")
    guard = max(1, int(np.trunc(np.float32(np.float32(10000) * scale))))
    return LayerNorm(weights=weights, bias=bias, rescale=Rescale.of(scale), variance_guard=guard)


# ---- the cell (Eval) -----------------------------------------------------------------------------

@cache
def _activation_table() -> np.ndarray:
    """gemmlowp's int16 sigmoid then tanh, both of Q3.12 inputs, as one table: index raw + 32768, plus
    65536 for the tanh of the cell gate."""
    return np.concatenate([fp.gemmlowp_logistic16_table(3), fp.gemmlowp_tanh16_table(3)]).astype(np.int64)


@cache
def _tanh_table(integer_bits: int) -> np.ndarray:
    return fp.gemmlowp_tanh16_table(integer_bits).astype(np.int64)


def _lookup(xp: Any, table: np.ndarray, index: Any) -> Any:
    return xp.take(xp.asarray(table), index + 32768)


def _rescale(xp: Any, x: Any, r: Rescale) -> Any:
    """MultiplyByQuantizedMultiplier of int32 values (given as int64)."""
    return fp.multiply_by_quantized_multiplier(xp, fp.wrap_int32(xp, x), r.multiplier, r.shift)


def _rescales(rescales: list) -> tuple[np.ndarray, np.ndarray]:
    """Per-gate multipliers and shifts as [gates, 1] arrays (None: a zero multiplier)."""
    pairs = [(r.multiplier, r.shift) if r is not None else (0, 0) for r in rescales]
    return np.array([p[0] for p in pairs], np.int64)[:, None], np.array([p[1] for p in pairs], np.int64)[:, None]


def _saturate16(xp: Any, x: Any) -> Any:
    return xp.clip(x, INT16_MIN, INT16_MAX)


def _product(xp: Any, x: Any, weights: np.ndarray, bias: np.ndarray) -> Any:
    """bias + x @ weights.T of raw int8 values, exactly (the int32 accumulator of the portable kernel)."""
    bound = qz.dot_bound(128, weights, 1) + int(np.abs(bias).max(initial=0))
    return qz.exact_matmul(xp, x, weights.T.astype(np.int64), bound) + bias


def _gate_products(xp: Any, x: Any, weights: list, biases: list, rescales: list) -> Any:
    """The rescaled products of several gates at once: one matmul, [..., gates, n_cell]."""
    acc = _product(xp, x, np.concatenate(weights), np.concatenate(biases))
    acc = xp.reshape(acc, tuple(acc.shape[:-1]) + (len(weights), weights[0].shape[0]))
    multiplier, shift = _rescales(rescales)
    return fp.multiply_by_quantized_multiplier(xp, fp.wrap_int32(xp, acc), multiplier, shift)


def input_gates(ctx: Any, lstm: IntegerLstm, x: Any) -> Any:
    """Every gate after its input product, [..., gates, n_cell] in ``lstm.gates`` order, for inputs of any
    leading shape: it does not depend on the state, so a sequence computes it for all steps at once.
    The gate starts at 0 and gets the rescaled product with int16 saturation."""
    gates = list(lstm.gates.values())
    return _saturate16(ctx.xp, _gate_products(ctx.xp, x.astype(ctx.xp.int64), [g.input_weights for g in gates],
                                              [g.input_bias for g in gates], [g.input_rescale for g in gates]))


def peephole_weights(lstm: IntegerLstm, weights: np.ndarray | None, n_batch: int, flat_batch: bool) -> np.ndarray:
    """[n_batch, n_cell] int64 weights of ``VectorBatchVectorCwiseProductAccumulate(w, n_output, cell,
    n_batch)``: the first n_output cells of each row, or (``flat_batch``: the time-major call with all
    rows at once) the first n_batch * n_output cells of the flattened batch.  0 leaves a cell as it is
    (and stands for a gate without peephole)."""
    n_cell, n_output = lstm.n_cell, lstm.n_output
    if weights is None:
        return np.zeros((n_batch, n_cell), np.int64)
    w = weights.astype(np.int64)
    if not flat_batch or n_batch == 1:
        out = np.zeros((n_batch, n_cell), np.int64)
        out[:, :n_output] = w[:n_output]
        return out
    flat = np.zeros(n_batch * n_cell, np.int64)
    flat[:n_batch * n_output] = np.tile(w[:n_output], n_batch)
    return flat.reshape(n_batch, n_cell)


class _GateGroup:
    """The static per-gate constants of some gates, stacked to broadcast against [batch, gates, n_cell]."""

    def __init__(self, lstm: IntegerLstm, names: list, n_batch: int, flat_batch: bool):
        gates = [lstm.gates[name] for name in names]
        self.peephole = None
        if any(g.peephole is not None for g in gates):
            self.peephole = np.stack([peephole_weights(lstm, g.peephole, n_batch, flat_batch) for g in gates], axis=1)
            self.peephole_rescale = _rescales([g.peephole_rescale for g in gates])
        self.layer_norm = None
        if gates[0].layer_norm is not None:
            norms = [g.layer_norm for g in gates]
            self.layer_norm = (np.stack([n.weights.astype(np.int64) for n in norms]),
                               np.stack([n.bias.astype(np.int64) for n in norms]),
                               _rescales([n.rescale for n in norms]),
                               np.array([n.variance_guard for n in norms], np.int64)[:, None])
        self.table_offset = np.array([65536 if name == "cell" else 0 for name in names], np.int64)[:, None]

    def activate(self, xp: Any, z: Any, c: Any) -> Any:
        """Peephole (on cell state ``c``), layer norm, then sigmoid (tanh for the cell gate)."""
        if self.peephole is not None:
            multiplier, shift = self.peephole_rescale
            z = _saturate16(xp, fp.multiply_by_quantized_multiplier(xp, self.peephole * c[:, None, :], multiplier,
                                                                    shift) + z)
        if self.layer_norm is not None:
            z = layer_norm(xp, z, *self.layer_norm)
        return _lookup(xp, _activation_table(), z + self.table_offset)


def step_function(ctx: Any, lstm: IntegerLstm, n_batch: int, flat_batch: bool) -> Callable:
    """``step((h, c), gates_in) -> ((h, c), h)`` of ``LstmStepInteger8x8_16``: h the int8 output state
    [n_batch, n_output] and c the int16 cell state [n_batch, n_cell] (as int64 arrays), ``gates_in`` the
    gates after the input product (``input_gates``).  The gates but the output one see the old cell
    state, the output gate's peephole the new one."""
    xp = ctx.xp
    names = list(lstm.gates)
    gates = list(lstm.gates.values())
    recurrent = ([g.recurrent_weights for g in gates], [g.recurrent_bias for g in gates],
                 [g.recurrent_rescale for g in gates])
    early, late = _GateGroup(lstm, names[:-1], n_batch, flat_batch), _GateGroup(lstm, names[-1:], n_batch, flat_batch)
    position = {name: k for k, name in enumerate(names)}
    tanh_cell = _tanh_table(15 + lstm.cell_exponent)

    def step(state: tuple, gates_in: Any) -> tuple[tuple, Any]:
        h, c = state
        z = _saturate16(xp, _gate_products(xp, h, *recurrent) + gates_in)
        a = early.activate(xp, z[:, :-1, :], c)
        i = None if lstm.cifg else a[:, position["input"], :]
        c = update_cell(xp, lstm, c, i, a[:, position["forget"], :], a[:, position["cell"], :])
        o = late.activate(xp, z[:, -1:, :], c)[:, 0, :]
        h = output_state(ctx, lstm, o, c, tanh_cell)
        return (h, c), h
    return step


def _wrap16(xp: Any, x: Any) -> Any:
    return ((x + (1 << 15)) & 0xFFFF) - (1 << 15)


def update_cell(xp: Any, lstm: IntegerLstm, c: Any, i: Any, f: Any, g: Any) -> Any:
    """``UpdateLstmCellInteger``: the products are rounding right shifts cast to int16 (wrapping),
    their sum saturates; CIFG's input gate is 32767 - f."""
    if i is None:
        i = INT16_MAX - f
    kept = _wrap16(xp, fp.rounding_divide_by_pot(xp, f * c, 15))
    added = _wrap16(xp, fp.rounding_divide_by_pot(xp, i * g, 30 + lstm.cell_exponent))
    c = _saturate16(xp, kept + added)
    if lstm.cell_clip > 0:
        c = xp.clip(c, -lstm.cell_clip, lstm.cell_clip)
    return c


def output_state(ctx: Any, lstm: IntegerLstm, o: Any, c: Any, tanh_cell: np.ndarray) -> Any:
    """``CalculateLstmOutputInteger8x8_16``: o * tanh(c) rescaled to the hidden intermediate; with a
    projection that int8 hidden value (its zero point negated, as the official code does) goes
    through the projection product to the output state."""
    xp = ctx.xp
    hidden = o * _lookup(xp, tanh_cell, c)
    if lstm.projection is None:
        return xp.clip(_rescale(xp, hidden, lstm.hidden_rescale) + lstm.hidden_zp, -128, 127)
    hidden = xp.clip(_rescale(xp, hidden, lstm.hidden_rescale) - lstm.hidden_zp, -128, 127)
    acc = _product(xp, hidden, lstm.projection, lstm.projection_bias)
    h = xp.clip(_rescale(xp, acc, lstm.projection_rescale) + lstm.output_state_zp, -128, 127)
    if lstm.projection_clip > 0:
        h = xp.clip(h, -lstm.projection_clip, lstm.projection_clip)
    return h


# ---- integer layer norm (PortableApplyLayerNorm) -------------------------------------------------

def layer_norm(xp: Any, z: Any, weights: np.ndarray, bias: np.ndarray, rescale: tuple, guard: np.ndarray) -> Any:
    """``PortableApplyLayerNorm`` over the cells (last axis) of [batch, gates, n_cell] with per-gate
    constants: integer mean and variance (with the official 2^20 / n_cell, exact only for power-of-two
    widths), an inverse square root multiplier per row, the coefficients and bias (int32 arithmetic),
    then the layer-norm scale (+12 shift)."""
    n = z.shape[-1]
    total = xp.sum(z, axis=-1, keepdims=True)
    total_sq = xp.sum(z * z, axis=-1, keepdims=True)
    mean = fp.wrap_int32(xp, fp.truncating_divide(xp, total * 1024, n))
    variance = fp.wrap_int32(xp, fp.truncating_divide(xp, total_sq * ((1 << 20) // n) - mean * mean, 1 << 20))
    variance = xp.where(variance < 1, guard, variance)
    inv_multiplier, inv_right_shift = fp.inv_sqrt_multiplier(xp, variance)
    shifted = fp.wrap_int32(xp, 1024 * z - mean)
    rescaled = fp.multiply_by_quantized_multiplier(xp, shifted, inv_multiplier, -inv_right_shift)
    weighted = fp.wrap_int32(xp, rescaled * weights + bias)
    rounded = fp.wrap_int32(xp, fp.truncating_divide(xp, xp.where(weighted > 0, weighted + 512, weighted - 512), 1024))
    multiplier, shift = rescale
    return _saturate16(xp, fp.multiply_by_quantized_multiplier(xp, rounded, multiplier, shift + 12))
