"""Circle's ROPE (code -7): rotary position embedding of a [B, heads, S, D] tensor, float32.

Semantics from onert's ``cker::RoPE`` (and luci-interpreter's ``RoPE.cpp``): inputs (x, sin_table,
cos_table), mode GPT_NEOX, which rotates the two halves of the last axis:

    y[..., :D/2] = x[..., :D/2] * cos[..., :D/2] - x[..., D/2:] * sin[..., :D/2]
    y[..., D/2:] = x[..., :D/2] * sin[..., D/2:] + x[..., D/2:] * cos[..., D/2:]

(with torch's tables, cos = [cos t, cos t] and sin = [sin t, sin t], this is ``x * cos +
rotate_half(x) * sin``).  The tables' last axis is D; ONE's kernel reads their first D values for
every position, which is what a table of one position (a decode step) means; litegpu broadcasts the
tables against x, so a table with one row per position rotates each position by its own angle
where ONE would reuse the first.  GPT_J mode (interleaved pairs) has no kernel in ONE and is refused.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import ModelExecutionError, UnsupportedOpError
from ..registry import Op, OpContext, register


@register("ROPE")
class Rope(Op):
    dtypes = ("float32",)

    def unsupported_reason(self, op, subgraph, target):
        reason = super().unsupported_reason(op, subgraph, target)
        mode = op.options.get("mode", "GPT_NEOX")
        if reason is None and mode != "GPT_NEOX":
            reason = f"mode {mode} (ONE implements GPT_NEOX only)"
        shape = subgraph.tensors[op.inputs[0]].shape
        if reason is None and (len(shape) != 4 or shape[-1] % 2):
            reason = f"input shape {list(shape)} (ROPE takes [B, heads, S, D] with D even)"
        return reason

    def builtin_lowering(self, op, subgraph, g) -> bool:
        """The halves cut out with SLICE, the two products of each half, CONCATENATION: the same float32
        operations as ``neox_rotate``."""
        x, sin, cos = op.inputs[:3]
        shape = g.shape(x)
        half = shape[-1] // 2

        def halves(t: int) -> tuple[int, int]:
            lead = len(g.shape(t)) - 1
            part = g.shape(t)[:-1] + (half,)
            size = g.constant(np.array([-1] * lead + [half], np.int32))
            return tuple(g.op("SLICE", [t, g.constant(np.array([0] * lead + [start], np.int32)), size], part)
                         for start in (0, half))

        (x0, x1), (s0, s1), (c0, c1) = halves(x), halves(sin), halves(cos)

        def product(a: int, b: int) -> int:
            return g.op("MUL", [a, b], np.broadcast_shapes(g.shape(a), g.shape(b)))

        first = g.op("SUB", [product(x0, c0), product(x1, s0)], shape[:-1] + (half,))
        second = g.op("ADD", [product(x0, s1), product(x1, c1)], shape[:-1] + (half,))
        g.op("CONCATENATION", [first, second], shape, output=op.outputs[0], axis=len(shape) - 1)
        return True

    def compute(self, ctx: OpContext, x: Any, sin: Any, cos: Any) -> Any:
        if ctx.options.mode != "GPT_NEOX":
            raise UnsupportedOpError(f"{ctx.op}: RoPE mode {ctx.options.mode} is not implemented (ONE has GPT_NEOX "
                                     "only)")
        if x.ndim != 4 or x.shape[-1] % 2:
            raise ModelExecutionError(f"{ctx.op}: input must be [B, heads, S, D] with D even, got {tuple(x.shape)}")
        for name, table in (("sin", sin), ("cos", cos)):
            if table.shape[-1] != x.shape[-1]:
                raise ModelExecutionError(f"{ctx.op}: the {name} table's last axis is {table.shape[-1]}, the input's "
                                          f"{x.shape[-1]}")
        return neox_rotate(ctx.xp, x, sin, cos)


def neox_rotate(xp: Any, x: Any, sin: Any, cos: Any) -> Any:
    """GPT_NEOX rotation of x's last axis by tables that broadcast against x (also ATTENTION's rotary step)."""
    half = x.shape[-1] // 2
    x0, x1 = x[..., :half], x[..., half:]
    first = x0 * cos[..., :half] - x1 * sin[..., :half]
    second = x0 * sin[..., half:] + x1 * cos[..., half:]
    return xp.concatenate([first, second], axis=-1).astype(x.dtype)
