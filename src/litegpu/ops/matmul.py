"""FULLY_CONNECTED and BATCH_MATMUL: float32, full-integer and hybrid (dynamic-range).

FULLY_CONNECTED flattens its input to [-1, in] (``in`` = weights.shape[1]),
multiplies by the [out, in] weights, adds the optional bias and applies the
fused activation; ``keep_num_dims`` keeps the input's leading dims instead
of collapsing them into one batch dim.  Weights may be a non-constant input.
BATCH_MATMUL broadcasts the batch dims and transposes the last two dims of an
operand when ``adj_x`` / ``adj_y`` say so.  XLA matmuls use precision HIGHEST
so that they match fp32 on GPUs that would otherwise use TF32.

Full integer (int8 / uint8 / int16 activations): the int32 (int64 for 16-bit
activations) accumulator of zero-centred values plus the integer bias, rescaled
by QuantizeMultiplier(in_scale * w_scale / out_scale) per output channel, as
the official kernels.  Packed int4 / int2 weights arrive unpacked from the IR.

Hybrid (float input, integer weights, float output): each input row is
quantized to int8 on the fly (symmetric, or asymmetric with a per-row zero
point when ``asymmetric_quantize_inputs``), multiplied in integers, and the
int32 dot product is scaled back with row_scale * weight_scale in float32
(``fully_connected.cc EvalHybridDense``, ``batch_matmul.cc EvalHybrid``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import ModelExecutionError
from . import _quantized as q
from .common import fused_activation
from .registry import Op, OpContext, register


# what the official kernel's Prepare accepts (the hybrid kernel takes any activation)
FC_ACTIVATIONS = ("NONE", "RELU", "RELU_N1_TO_1", "RELU6")
# input dtype -> weight dtypes of the full-integer kernels we implement
FC_INTEGER_WEIGHTS = {"int8": ("int8", "int4", "int2"), "uint8": ("uint8",), "int16": ("int8",)}
HYBRID_WEIGHTS = ("int8", "int4", "int2")


def _tensor(op: Any, subgraph: Any, index: int) -> Any:
    if index < len(op.inputs) and op.inputs[index] >= 0:
        return subgraph.tensors[op.inputs[index]]
    return None


def _fc_reason(op: Any, subgraph: Any) -> str | None:
    """Which input / weights / output combinations the kernels below implement."""
    x, w, out = _tensor(op, subgraph, 0), _tensor(op, subgraph, 1), subgraph.tensors[op.outputs[0]]
    if op.options.get("weights_format", "DEFAULT") != "DEFAULT":
        return f"weights_format {op.options.weights_format} (shuffled uint8 weights) is not supported"
    if w is not None and w.quantization is not None and w.quantization.details is not None:
        return f"{w.quantization.details.get('type')} weight quantization is not supported"
    if x.dtype == "float32":
        if w.dtype not in ("float32",) + HYBRID_WEIGHTS:
            return f"{w.dtype} weights with float input are not supported"
        if w.dtype in HYBRID_WEIGHTS and not q.is_affine_tensor(w):
            return "hybrid weights need a quantization scale"
        return None
    allowed = FC_INTEGER_WEIGHTS[x.dtype]
    if w.dtype not in allowed:
        return f"{w.dtype} weights with {x.dtype} input are not supported (takes {', '.join(allowed)})"
    if out.dtype != x.dtype:
        return f"{out.dtype} output with {x.dtype} input is not supported"
    return None


def _fc_output_shape(ctx: OpContext, x_shape: tuple, w_shape: tuple) -> tuple[int, tuple]:
    """(rows of the flattened input, output shape)."""
    if len(w_shape) != 2:
        raise ModelExecutionError(f"{ctx.op}: weights must be [out, in], got shape {tuple(w_shape)}")
    units, depth = w_shape
    size = math.prod(x_shape)
    if depth == 0 or size % depth:
        raise ModelExecutionError(f"{ctx.op}: input of shape {tuple(x_shape)} cannot be flattened into rows "
                                  f"of {depth} (weights {tuple(w_shape)})")
    rows = size // depth
    if ctx.options.keep_num_dims:
        if not x_shape or x_shape[-1] != depth:
            raise ModelExecutionError(f"{ctx.op}: keep_num_dims needs the input's last dim ({tuple(x_shape)}) "
                                      f"to equal the weights' {depth}")
        return rows, tuple(x_shape[:-1]) + (units,)
    return rows, (rows, units)


@register("FULLY_CONNECTED")
class FullyConnected(Op):
    dtypes = ("float32", "int8", "uint8", "int16")

    def unsupported_reason(self, op, subgraph, target):
        reason = super().unsupported_reason(op, subgraph, target) or _fc_reason(op, subgraph)
        activation = op.options.get("fused_activation_function", "NONE")
        hybrid = subgraph.tensors[op.inputs[0]].dtype == "float32" and \
            subgraph.tensors[op.inputs[1]].dtype != "float32"
        if reason is None and not hybrid and activation not in FC_ACTIVATIONS:
            reason = f"fused activation {activation} (the official kernel takes only {', '.join(FC_ACTIVATIONS)})"
        return reason

    def reference(self, ctx: OpContext, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
        rows, out_shape = _fc_output_shape(ctx, x.shape, w.shape)
        if ctx.input(0).dtype != "float32":
            return _integer_fc(np, ctx, x.reshape(rows, w.shape[1]), w, bias).reshape(out_shape)
        if ctx.input(1).dtype != "float32":
            return self._finish(ctx, np, _hybrid_fc(np, ctx, x.reshape(rows, w.shape[1]), w), bias, out_shape)
        y = x.astype(np.float32).reshape(rows, w.shape[1]) @ w.astype(np.float32).T
        return self._finish(ctx, np, y, bias, out_shape)

    def lower(self, ctx: OpContext, x: Any, w: Any, bias: Any = None) -> Any:
        jnp, lax = ctx.xp, ctx.lax
        rows, out_shape = _fc_output_shape(ctx, x.shape, w.shape)
        if ctx.input(0).dtype != "float32":
            return _integer_fc(jnp, ctx, x.reshape(rows, w.shape[1]), w, bias).reshape(out_shape)
        if ctx.input(1).dtype != "float32":
            return self._finish(ctx, jnp, _hybrid_fc(jnp, ctx, x.reshape(rows, w.shape[1]), w), bias, out_shape)
        y = lax.dot_general(x.reshape(rows, w.shape[1]), w, (((1,), (1,)), ((), ())),
                            precision=lax.Precision.HIGHEST)
        return self._finish(ctx, jnp, y, bias, out_shape)

    @staticmethod
    def _finish(ctx: OpContext, xp: Any, y: Any, bias: Any, out_shape: tuple) -> Any:
        if bias is not None:
            y = y + bias
        return fused_activation(xp, y, ctx.options.fused_activation_function).reshape(out_shape)


# --- integer arithmetic shared by both ops -------------------------------------------

def _integer_dot(xp: Any, ctx: OpContext, a: Any, b: Any, wide: bool) -> Any:
    """a @ b of integer arrays (batch dims broadcast), exact: int64 in numpy; on XLA int32
    accumulation for 8-bit operands (the official kernels' int32 accumulator), int64 for 16-bit."""
    if xp is np:
        return np.matmul(a.astype(np.int64), b.astype(np.int64))
    acc = xp.int64 if wide else xp.int32
    return xp.matmul(a.astype(acc), b.astype(acc), preferred_element_type=acc).astype(xp.int64)


def _zero_point(t: Any) -> int:
    return int(t.quantization.zero_point[0]) if t.quantization.zero_point else 0


def _integer_fc(xp: Any, ctx: OpContext, x: Any, w: Any, bias: Any) -> Any:
    """Full-integer FULLY_CONNECTED of [rows, depth] input against [units, depth] weights."""
    x_t, w_t, y_t = ctx.input(0), ctx.input(1), ctx.output(0)
    in_scale, in_zp = q.scale_and_zero_point(ctx, x_t, "input")
    out_scale, out_zp = q.scale_and_zero_point(ctx, y_t, "output")
    w_scales = q.channel_scales(ctx, w_t, "weights", w.shape[0])
    multipliers, shifts = q.per_channel_multipliers(in_scale, w_scales, out_scale)
    low, high = q.activation_range(ctx.options.fused_activation_function, out_scale, out_zp, y_t.dtype)
    sixteen = x_t.dtype == "int16"
    w_zp = 0 if w_t.quantization.is_per_axis else _zero_point(w_t)  # per-channel weights are symmetric
    acc = _integer_dot(xp, ctx, x.astype(xp.int64) - in_zp, (w.astype(xp.int64) - w_zp).T, sixteen)
    if bias is not None:
        acc = acc + bias.astype(xp.int64)
    # The official optimized kernels (ruy) rescale 16x8 like 8x8, with ruy's half-up
    # rounding: measured on exact halves, which neither the reference kernel's
    # double-precision rescale nor the int64 MultiplyByQuantizedMultiplier reproduce.
    return q.requantize_accumulator(xp, acc, multipliers, shifts, out_zp, low, high, ruy=True)


# --- hybrid: float activations quantized per row --------------------------------------

def _quantize_rows(xp: Any, rows: Any, asymmetric: bool) -> tuple[Any, Any, Any]:
    """``BatchQuantizeFloats`` over the last axis: (int8 values as int64, float32 scale, int64 zero point)."""
    rows = rows.astype(xp.float32)
    lo, hi = rows.min(axis=-1, keepdims=True), rows.max(axis=-1, keepdims=True)
    if not asymmetric:  # SymmetricQuantizeFloats
        value_range = xp.maximum(xp.abs(lo), xp.abs(hi))
        empty = value_range == 0
        safe = xp.where(empty, xp.float32(1), value_range)
        scale = xp.where(empty, xp.float32(1), q.fp.divide_f32_exactly(xp, safe, xp.float32(127)))
        inverse = q.fp.divide_f32_exactly(xp, xp.float32(127), safe)
        values = q.fp.round_half_away_from_zero(xp, rows * inverse)
        values = xp.where(empty, 0, xp.clip(values, -127, 127)).astype(xp.int64)
        return values, scale, xp.zeros_like(values[..., :1])
    # AsymmetricQuantizeFloats: the zero point is nudged in double precision
    rmin = xp.minimum(lo, 0).astype(xp.float64)
    rmax = xp.maximum(hi, 0).astype(xp.float64)
    empty = rmin == rmax
    scale64 = xp.where(empty, 1.0, (rmax - rmin) / 255.0)
    from_min, from_max = -128.0 - rmin / scale64, 127.0 - rmax / scale64
    use_min = (128.0 + xp.abs(rmin / scale64)) < (127.0 + xp.abs(rmax / scale64))
    zero_point = xp.where(use_min, from_min, from_max)
    zero_point = xp.where(zero_point <= -128, -128.0,
                          xp.where(zero_point >= 127, 127.0, q.fp.round_half_away_from_zero(xp, zero_point)))
    zero_point = xp.where(empty, 0.0, zero_point)
    scale = scale64.astype(xp.float32)
    inverse = (1.0 / scale.astype(xp.float64)).astype(xp.float32)
    values = q.fp.round_half_away_from_zero(xp, zero_point.astype(xp.float32) + rows * inverse)
    values = xp.where(empty, 0, xp.clip(values, -128, 127)).astype(xp.int64)
    return values, scale, zero_point.astype(xp.int64)


def _hybrid_scale(row_scale: Any, w_t: Any, channels: int) -> Any:
    """Row scale times weight scale in float32: per-tensor scales fold into the row scale,
    per-channel ones multiply it per output column."""
    scales = np.asarray(w_t.quantization.scale, np.float32)
    if scales.size == 1:
        return row_scale * scales[0]
    if scales.size != channels:
        raise ModelExecutionError(f"weights {w_t.name!r} have {scales.size} scales for {channels} output channels")
    return row_scale * scales


def _hybrid_product(xp: Any, ctx: OpContext, quantized: Any, row_scale: Any, row_zp: Any, w: Any,
                    w_t: Any) -> Any:
    """float32 result of quantized rows [..., R, D] times integer weights [..., D, U]."""
    acc = _integer_dot(xp, ctx, quantized, w.astype(xp.int64), False)
    if ctx.options.get("asymmetric_quantize_inputs", False):
        acc = acc - row_zp * w.astype(xp.int64).sum(axis=-2, keepdims=True)
    scale = _hybrid_scale(row_scale, w_t, w.shape[-1])
    return acc.astype(xp.float32) * scale


def _hybrid_fc(xp: Any, ctx: OpContext, x: Any, w: Any) -> Any:
    w_t = ctx.input(1)
    quantized, row_scale, row_zp = _quantize_rows(xp, x, ctx.options.get("asymmetric_quantize_inputs", False))
    return _hybrid_product(xp, ctx, quantized, row_scale, row_zp, w.T, w_t)


# --- BATCH_MATMUL ------------------------------------------------------------------------

def _batch_matmul_operands(ctx: OpContext, x: Any, y: Any) -> tuple[Any, Any]:
    if x.ndim < 2 or y.ndim < 2:
        raise ModelExecutionError(f"{ctx.op}: operands must have rank >= 2, got {tuple(x.shape)} and {tuple(y.shape)}")
    if ctx.options.adj_x:
        x = x.swapaxes(-1, -2)
    if ctx.options.adj_y:
        y = y.swapaxes(-1, -2)
    if x.shape[-1] != y.shape[-2]:
        raise ModelExecutionError(f"{ctx.op}: contracted dims differ: lhs {tuple(x.shape)} (adj_x="
                                  f"{ctx.options.adj_x}) and rhs {tuple(y.shape)} (adj_y={ctx.options.adj_y})")
    try:
        np.broadcast_shapes(x.shape[:-2], y.shape[:-2])
    except ValueError:
        raise ModelExecutionError(f"{ctx.op}: batch dims {tuple(x.shape[:-2])} and {tuple(y.shape[:-2])} "
                                  "do not broadcast") from None
    return x, y


# lhs dtype -> (rhs dtypes, output dtypes) of the integer kernels
BMM_INTEGER = {"int8": (("int8",), ("int8", "int32")), "int16": (("int8", "int16"), ("int16",))}


def _bmm_reason(op: Any, subgraph: Any) -> str | None:
    x, y, out = _tensor(op, subgraph, 0), _tensor(op, subgraph, 1), subgraph.tensors[op.outputs[0]]
    if x.dtype == "float32":
        if y.dtype == "int8":
            return None if q.is_affine_tensor(y) else "hybrid rhs needs a quantization scale"
        return None if y.dtype == "float32" else f"{y.dtype} rhs with float lhs is not supported"
    rhs_types, out_types = BMM_INTEGER[x.dtype]
    if y.dtype not in rhs_types or out.dtype not in out_types:
        return f"{x.dtype} x {y.dtype} -> {out.dtype} is not supported"
    if y.quantization is not None and y.quantization.is_per_axis:
        return "per-channel rhs scales with integer lhs are not supported"
    return None


@register("BATCH_MATMUL")
class BatchMatMul(Op):
    dtypes = ("float32", "int8", "int16")

    def unsupported_reason(self, op, subgraph, target):
        return super().unsupported_reason(op, subgraph, target) or _bmm_reason(op, subgraph)

    def reference(self, ctx: OpContext, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        if ctx.input(0).dtype != "float32" or ctx.input(1).dtype != "float32":
            return self._quantized(np, ctx, x, y)
        x, y = _batch_matmul_operands(ctx, x.astype(np.float32), y.astype(np.float32))
        return np.matmul(x, y)

    def lower(self, ctx: OpContext, x: Any, y: Any) -> Any:
        if ctx.input(0).dtype != "float32" or ctx.input(1).dtype != "float32":
            return self._quantized(ctx.xp, ctx, x, y)
        x, y = _batch_matmul_operands(ctx, x, y)
        return ctx.xp.matmul(x, y, precision=ctx.lax.Precision.HIGHEST)

    @staticmethod
    def _quantized(xp: Any, ctx: OpContext, x: Any, y: Any) -> Any:
        x, y = _batch_matmul_operands(ctx, x, y)
        x_t, y_t, out_t = ctx.input(0), ctx.input(1), ctx.output(0)
        if x_t.dtype == "float32":
            quantized, row_scale, row_zp = _quantize_rows(xp, x, ctx.options.asymmetric_quantize_inputs)
            return _hybrid_product(xp, ctx, quantized, row_scale, row_zp, y, y_t)
        if out_t.dtype == "int32":  # the raw product: no zero points, no rescaling
            return _integer_dot(xp, ctx, x, y, False)
        in_scale, in_zp = q.scale_and_zero_point(ctx, x_t, "lhs")
        w_scale, w_zp = q.scale_and_zero_point(ctx, y_t, "rhs")
        out_scale, out_zp = q.scale_and_zero_point(ctx, out_t, "output")
        multipliers, shifts = q.per_channel_multipliers(in_scale, np.float32([w_scale]), out_scale)
        low, high = q.dtype_limits(out_t.dtype)
        sixteen = x_t.dtype == "int16"
        acc = _integer_dot(xp, ctx, x.astype(xp.int64) - in_zp, y.astype(xp.int64) - w_zp, sixteen)
        if sixteen:
            scaled = q.fp.multiply_by_quantized_multiplier_int64(xp, acc, multipliers[0], shifts[0])
            return xp.clip(scaled + out_zp, low, high)
        return q.requantize_accumulator(xp, acc, multipliers[0], shifts[0], out_zp, low, high, ruy=False)
