"""CAST (value conversion) and BITCAST (reinterpretation of the bytes).

CAST follows C++ ``static_cast``: floats truncate toward zero, integers wrap,
anything nonzero becomes true.  Out-of-range float-to-int conversions are
undefined in C++; numpy wraps them and XLA saturates, so those two backends
may disagree there.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ModelExecutionError
from ..ir import numpy_dtype
from .registry import Op, OpContext, register

CASTABLE = ("float32", "float16", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "bool")


def _output_dtype(ctx: OpContext) -> np.dtype:
    return numpy_dtype(ctx.output(0).dtype)


@register("CAST")
class Cast(Op):
    dtypes = CASTABLE

    def unsupported_reason(self, op, subgraph, target):
        reason = super().unsupported_reason(op, subgraph, target)
        out = subgraph.tensors[op.outputs[0]].dtype if op.outputs else None
        if reason is None and out not in CASTABLE:
            reason = f"output type {out} is not supported (supported: {', '.join(CASTABLE)})"
        return reason

    def compute(self, ctx: OpContext, x: Any) -> Any:
        return x.astype(_output_dtype(ctx))


@register("BITCAST")
class Bitcast(Op):
    """Same bytes, new type: a narrower type adds a last dimension, a wider one consumes it."""

    dtypes = CASTABLE

    def reference(self, ctx: OpContext, x: np.ndarray) -> np.ndarray:
        out_dtype = _output_dtype(ctx)
        shape = _bitcast_shape(ctx, x.shape, x.dtype, out_dtype)
        return np.ascontiguousarray(x).reshape(-1).view(out_dtype).reshape(shape)

    def lower(self, ctx: OpContext, x: Any) -> Any:
        out_dtype = _output_dtype(ctx)
        _bitcast_shape(ctx, x.shape, x.dtype, out_dtype)
        # XLA has no bool bitcast; bools are single bytes, as uint8.
        if x.dtype == np.bool_:
            x = x.astype(np.uint8)
        target = np.dtype(np.uint8) if out_dtype == np.bool_ else out_dtype
        y = ctx.lax.bitcast_convert_type(x, target)
        return y.astype(np.bool_) if out_dtype == np.bool_ else y


def _bitcast_shape(ctx: OpContext, shape: tuple, in_dtype: Any, out_dtype: np.dtype) -> tuple:
    n_in, n_out = np.dtype(in_dtype).itemsize, out_dtype.itemsize
    if n_in == n_out:
        return tuple(shape)
    if n_in > n_out:
        return tuple(shape) + (n_in // n_out,)
    if not shape or shape[-1] != n_out // n_in:
        raise ModelExecutionError(f"{ctx.op}: casting {np.dtype(in_dtype)} to {out_dtype} needs a last "
                                  f"dimension of {n_out // n_in}, got shape {tuple(shape)}")
    return tuple(shape[:-1])
