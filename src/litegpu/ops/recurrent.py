"""Float recurrent layers: UNIDIRECTIONAL_SEQUENCE_RNN and UNIDIRECTIONAL_SEQUENCE_LSTM.

One step function serves both backends; the reference runs it in a python loop
over time, the XLA lowering in ``lax.scan``.  The state inputs are variable
tensors: as in the official runtime, the final state is written back (to the
backend's variable store under the key ``GraphRunner`` reads variable tensors
from), so the next run of the model continues from it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import ModelExecutionError
from .common import fused_activation
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


def _matmul_t(ctx: OpContext, x: Any, w: Any) -> Any:
    """x @ w.T in full float32 precision (TFLite stores weights as [out, in]; GPUs default to TF32)."""
    if ctx.lax is not None:
        return ctx.xp.matmul(x, ctx.xp.swapaxes(w, 0, 1), precision=ctx.lax.Precision.HIGHEST)
    return x @ w.T


def _require_float(ctx: OpContext, *arrays: Any) -> None:
    for a in arrays:
        if a is not None and str(a.dtype) != "float32":
            raise ModelExecutionError(f"{ctx.op}: only float32 weights are supported, got {a.dtype} "
                                      "(hybrid and integer recurrent layers are not implemented)")


@register("UNIDIRECTIONAL_SEQUENCE_RNN")
class UnidirectionalSequenceRnn(Op):
    def compute(self, ctx: OpContext, x: Any, w: Any, r: Any, bias: Any, h0: Any) -> Any:
        xp = ctx.xp
        _require_float(ctx, w, r)
        activation = ctx.options.fused_activation_function

        def step(h: Any, x_t: Any) -> tuple[Any, Any]:
            h = fused_activation(xp, _matmul_t(ctx, x_t, w) + _matmul_t(ctx, h, r) + bias, activation)
            return h, h

        h, ys = _scan(ctx, step, h0, _time_major(ctx, x))
        _store_state(ctx, 4, h)
        return _from_time_major(ctx, ys)


def _sigmoid(xp: Any, x: Any) -> Any:
    return 1 / (1 + xp.exp(-x))


@register("UNIDIRECTIONAL_SEQUENCE_LSTM")
class UnidirectionalSequenceLstm(Op):
    """Inputs as the schema: x, W_{i,f,c,o}, R_{i,f,c,o}, peepholes, biases, projection, h, c, layer norms."""

    def compute(self, ctx: OpContext, x: Any, *args: Any) -> Any:
        xp = ctx.xp
        args = list(args) + [None] * (23 - len(args))
        w_i, w_f, w_c, w_o, r_i, r_f, r_c, r_o = args[0:8]
        p_i, p_f, p_o, b_i, b_f, b_c, b_o, proj_w, proj_b, h0, c0 = args[8:19]
        if any(a is not None for a in args[19:23]):
            raise ModelExecutionError(f"{ctx.op}: layer-normalised LSTM is not implemented")
        if h0 is None or c0 is None:
            raise ModelExecutionError(f"{ctx.op}: the output state (input 18) and cell state (input 19) are required")
        _require_float(ctx, w_f, w_c, w_o, r_f, r_c, r_o)
        cifg = w_i is None
        o = ctx.options
        activation = o.fused_activation_function
        cell_clip, proj_clip = float(o.cell_clip), float(o.proj_clip)

        def gate(x_t: Any, h: Any, w: Any, r: Any, b: Any, peephole: Any, c: Any) -> Any:
            z = _matmul_t(ctx, x_t, w) + _matmul_t(ctx, h, r)
            if peephole is not None:
                z = z + c * peephole
            return z + b if b is not None else z

        def step(state: tuple, x_t: Any) -> tuple[tuple, Any]:
            h, c = state
            f = _sigmoid(xp, gate(x_t, h, w_f, r_f, b_f, p_f, c))
            i = 1 - f if cifg else _sigmoid(xp, gate(x_t, h, w_i, r_i, b_i, p_i, c))
            g = fused_activation(xp, gate(x_t, h, w_c, r_c, b_c, None, c), activation)
            c = f * c + i * g
            if cell_clip > 0:
                c = xp.clip(c, -cell_clip, cell_clip)
            out_gate = _sigmoid(xp, gate(x_t, h, w_o, r_o, b_o, p_o, c))
            h = out_gate * fused_activation(xp, c, activation)
            if proj_w is not None:
                h = _matmul_t(ctx, h, proj_w)
                if proj_b is not None:
                    h = h + proj_b
                if proj_clip > 0:
                    h = xp.clip(h, -proj_clip, proj_clip)
            return (h, c), h

        (h, c), ys = _scan(ctx, step, (h0, c0), _time_major(ctx, x))
        _store_state(ctx, 18, h)
        _store_state(ctx, 19, c)
        return _from_time_major(ctx, ys)
