"""Circle's GRU (code -5): a whole GRU over a time-major sequence, float32, returning the last state.

Semantics from ONE's luci-interpreter (``kernels/GRU.cpp``, ``pal/linux/PALGRU.h``), which defines
the op (onert has no GRU kernel):

- inputs: x [T, B, I], W_x [3H, I], b_x [3H], W_h [3H, H], b_h [3H], h0 [B, H]; the output is the
  state after the last step, shaped like h0.  The three gate blocks of each weight are ordered
  (update z, reset r, candidate n): not torch's (r, z, n).
- per step: ``gx = W_x x_t + b_x``, ``gh = W_h h + b_h``; ``z = sigmoid(gx_z + gh_z)``,
  ``r = sigmoid(gx_r + gh_r)``, ``n = tanh(gx_n + r * gh_n)``, ``h = z * h + (1 - z) * n``;
- ONE's sigmoid saturates as TFLite's reference Logistic does (1 above 16.619047, exp(v) below -9)
  and its tanh is +-1 past +-19.

ONE's kernel steps one batch row (B = 1) and leaves ``return_sequences``, ``time_major`` and the
fused activation unread; litegpu runs every batch row the same way and refuses the options ONE
would silently ignore (sequences returned, an activation) rather than guess what they mean.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import ModelExecutionError
from ..registry import Op, OpContext, register

SIGMOID_UPPER_CUTOFF = 16.619047164916992188
SIGMOID_LOWER_CUTOFF = -9.0
TANH_CUTOFF = 19.0


def one_sigmoid(xp: Any, v: Any) -> Any:
    """ONE's GRU Logistic: exact 1 / (1 + exp(-v)) between the cutoffs, saturated outside."""
    middle = 1 / (1 + xp.exp(-v))
    return xp.where(v > SIGMOID_UPPER_CUTOFF, xp.ones_like(v), xp.where(v < SIGMOID_LOWER_CUTOFF, xp.exp(v), middle))


def one_tanh(xp: Any, v: Any) -> Any:
    return xp.where(v > TANH_CUTOFF, xp.ones_like(v), xp.where(v < -TANH_CUTOFF, -xp.ones_like(v), xp.tanh(v)))


def gru_step(xp: Any, h: Any, x_t: Any, w_x: Any, b_x: Any, w_h: Any, b_h: Any) -> Any:
    hidden = h.shape[-1]
    gx = x_t @ w_x.T + b_x
    gh = h @ w_h.T + b_h
    z = one_sigmoid(xp, gx[:, :hidden] + gh[:, :hidden])
    r = one_sigmoid(xp, gx[:, hidden:2 * hidden] + gh[:, hidden:2 * hidden])
    n = one_tanh(xp, gx[:, 2 * hidden:] + r * gh[:, 2 * hidden:])
    return z * h + (1 - z) * n


def _check_shapes(ctx: OpContext, x: Any, w_x: Any, b_x: Any, w_h: Any, b_h: Any, h0: Any) -> None:
    hidden = h0.shape[-1] if h0.ndim == 2 else -1
    expected = {"input": (x.ndim == 3 and x.shape[1] == h0.shape[0], f"[T, {h0.shape[0]}, I]"),
                "input weights": (w_x.shape == (3 * hidden, x.shape[-1]), f"[{3 * hidden}, {x.shape[-1]}]"),
                "input bias": (b_x.shape == (3 * hidden,), f"[{3 * hidden}]"),
                "state weights": (w_h.shape == (3 * hidden, hidden), f"[{3 * hidden}, {hidden}]"),
                "state bias": (b_h.shape == (3 * hidden,), f"[{3 * hidden}]")}
    if h0.ndim != 2:
        raise ModelExecutionError(f"{ctx.op}: the state must be [B, H], got shape {tuple(h0.shape)}")
    for what, (ok, shape) in expected.items():
        if not ok:
            raise ModelExecutionError(f"{ctx.op}: {what} must be {shape} for state {tuple(h0.shape)}")


@register("GRU")
class Gru(Op):
    dtypes = ("float32",)

    def unsupported_reason(self, op, subgraph, target):
        reason = super().unsupported_reason(op, subgraph, target)
        if reason is None and op.options.get("return_sequences"):
            reason = "return_sequences (ONE's kernel returns the last state only)"
        if reason is None and op.options.get("fused_activation_function", "NONE") != "NONE":
            reason = f"fused activation {op.options.fused_activation_function} (ONE's kernel applies none)"
        return reason

    def reference(self, ctx: OpContext, x: Any, w_x: Any, b_x: Any, w_h: Any, b_h: Any, h0: Any) -> Any:
        _check_shapes(ctx, x, w_x, b_x, w_h, b_h, h0)
        h = h0
        for t in range(x.shape[0]):
            h = gru_step(np, h, x[t], w_x, b_x, w_h, b_h).astype(np.float32)
        return h

    def lower(self, ctx: OpContext, x: Any, w_x: Any, b_x: Any, w_h: Any, b_h: Any, h0: Any) -> Any:
        _check_shapes(ctx, x, w_x, b_x, w_h, b_h, h0)
        xp = ctx.xp

        def step(h: Any, x_t: Any) -> tuple[Any, None]:
            return gru_step(xp, h, x_t, w_x, b_x, w_h, b_h), None

        h, _ = ctx.lax.scan(step, h0, x)
        return h
