"""DEQUANTIZE and QUANTIZE: moving between real and quantized values, as the official kernels do.

DEQUANTIZE computes ``scale * (q - zero_point)`` as the official reference kernel:
it multiplies in double and rounds to float, which equals the float32 product
(a float32 scale times an integer below 2^17 is exact in double), so float32
arithmetic is exact on every backend.  The builtin kernels (``CpuKernelMode.BUILTIN``) run the optimized
kernel instead, whose NEON loop (NEON_2_SSE on x86) takes a per-tensor scale over blocks of 8 elements as
``float(q) * scale + float(-zero_point * scale)``, product and sum each rounded to float32, and the last
``size % 8`` elements as the reference kernel: up to an ulp apart where the zero point is not 0
(``optimized_ops::Dequantize``; per-channel scales take the reference kernel's ``PerChannelDequantize``).
There the values are looked up in a table of the kernel's results for every integer (``OpContext.builtin_kernels``):
XLA CPU would fuse the product and the sum, or the product and the next op's add, into one multiply-add
rounded once, and no barrier keeps it apart from a product of integers (LLVM knows it is never NaN).
float16 -> float32 is how float16-weight models store their weights.

QUANTIZE from float follows the reference kernel: ``round(x / scale)`` with the
division in float32, rounding half away from zero, then ``+ zero_point`` and
saturation.  (The official *optimized* x86 kernel rounds half to even inside
8- or 16-element SIMD blocks and half away from zero in the tail, so it can
differ from the reference kernel by one unit on exact halves; we follow the
reference kernel, which is position independent.)  Quantized -> quantized is the
official fixed-point requantization (``fixedpoint.py``): from 16 / 32 bits with gemmlowp's
rounding, from 8 bits with the half-up rounding of the builtin (optimized) kernel, which
differs from gemmlowp's by one unit on ties of the right shift (a quarter of the values when
the scale ratio is below 1/2).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ModelExecutionError
from ..ir import Operator, Subgraph, numpy_dtype
from ._common import apart_for_iree
from ._fixedpoint import (divide_f32_exactly, float_to_int32_like_x86, multiply_by_quantized_multiplier, quantize_multiplier,
                         round_half_away_from_zero, wrap_int32)
from ._quantized import ruy_multiply_by_quantized_multiplier
from .registry import Op, OpContext, Target, register

# input dtype -> output dtypes the official QUANTIZE accepts
_REQUANTIZE_OUTPUTS = {
    "int8": ("int8", "uint8"),
    "uint8": ("int8", "uint8"),
    "int16": ("int8", "int16", "int32"),
    "int32": ("int8", "int16"),
}
_FLOAT_QUANTIZE_OUTPUTS = ("int8", "uint8", "int16")


def _affine_params(ctx: OpContext, tensor_name: str, t: Any, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """(scale float32, zero_point int64) shaped to broadcast against a tensor of ``rank``."""
    q = t.quantization
    if q is None or not q.is_affine:
        raise ModelExecutionError(f"{ctx.op}: the {tensor_name} tensor {t.name!r} has no quantization scale")
    scale = np.asarray(q.scale, np.float32)
    zero_point = np.asarray(q.zero_point or (0,), np.int64)
    if zero_point.size == 1 and scale.size > 1:
        zero_point = np.broadcast_to(zero_point, scale.shape)
    if scale.size == 1:
        return scale.reshape(()), zero_point.reshape(())
    axis = q.quantized_dimension
    if not 0 <= axis < rank or t.shape[axis] != scale.size:
        raise ModelExecutionError(f"{ctx.op}: {tensor_name} tensor {t.name!r} has {scale.size} per-channel "
                                  f"scales for dimension {axis} of shape {t.shape}")
    shape = [1] * rank
    shape[axis] = scale.size
    return scale.reshape(shape), zero_point.reshape(shape)


@register("DEQUANTIZE")
class Dequantize(Op):
    dtypes = ("float16", "int8", "uint8", "int16", "int4")

    def compute(self, ctx: OpContext, x: Any) -> Any:
        xp = ctx.xp
        if ctx.input(0).dtype == "float16":
            return x.astype(xp.float32)
        scale, zero_point = _affine_params(ctx, "input", ctx.input(0), len(x.shape))
        if ctx.input(0).dtype == "int16" and (scale.ndim or np.any(zero_point != 0)):
            raise ModelExecutionError(f"{ctx.op}: int16 input needs one scale and a zero point of 0 "
                                      "(as the official kernel)")
        if ctx.builtin_kernels and not scale.ndim:
            return _as_the_optimized_kernel(xp, x, scale, zero_point)
        centered = x.astype(xp.int32) - xp.asarray(zero_point, xp.int32)
        y = centered.astype(xp.float32) * xp.asarray(scale)
        return y if ctx.constant(0) is not None else apart_for_iree(ctx.lax, y)  # run-time values: see there


_OPTIMIZED_DEQUANTIZE_BLOCK = 8  # the elements of one pass of optimized_ops::Dequantize's NEON loop


def _as_the_optimized_kernel(xp: Any, q: Any, scale: np.ndarray, zero_point: np.ndarray) -> Any:
    """The builtin kernels' per-tensor DEQUANTIZE (the module's docstring): the blocks' and the tail's results
    for every value of ``q``'s integer type, computed here in float32 step by step, then looked up."""
    info = np.iinfo(np.dtype(q.dtype))
    every = np.arange(info.min, info.max + 1, dtype=np.int64)
    scale32 = np.float32(scale)
    zero_times_scale = np.float32(-int(zero_point) * np.float64(scale32))  # in double, as the kernel's setup
    in_blocks = every.astype(np.float32) * scale32 + zero_times_scale
    in_tail = (every - int(zero_point)).astype(np.float32) * scale32
    flat = q.reshape(-1).astype(xp.int32) - info.min
    head = flat.shape[0] - flat.shape[0] % _OPTIMIZED_DEQUANTIZE_BLOCK
    looked_up = xp.concatenate([xp.take(xp.asarray(in_blocks), flat[:head]),
                                xp.take(xp.asarray(in_tail), flat[head:])])
    return looked_up.reshape(q.shape)


@register("QUANTIZE")
class Quantize(Op):
    dtypes = ("float32", "int8", "uint8", "int16", "int32")

    def unsupported_reason(self, op: Operator, subgraph: Subgraph, target: Target) -> str | None:
        reason = super().unsupported_reason(op, subgraph, target)
        if reason:
            return reason
        src, dst = subgraph.tensors[op.inputs[0]], subgraph.tensors[op.outputs[0]]
        allowed = _FLOAT_QUANTIZE_OUTPUTS if src.dtype == "float32" else _REQUANTIZE_OUTPUTS[src.dtype]
        if dst.dtype not in allowed:
            return f"{src.dtype} to {dst.dtype} is not supported (from {src.dtype}: {', '.join(allowed)})"
        if src.dtype != "float32" and (dst.quantization is not None and dst.quantization.is_per_axis):
            return "requantization to per-channel scales is not supported"
        return None

    def reference(self, ctx: OpContext, x: Any) -> Any:
        with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN inputs have defined results
            return self.compute(ctx, x)

    def compute(self, ctx: OpContext, x: Any) -> Any:
        src, dst = ctx.input(0), ctx.output(0)
        out_scale, out_zp = _affine_params(ctx, "output", dst, len(x.shape))
        info = np.iinfo(numpy_dtype(dst.dtype))
        if src.dtype == "float32":
            q = self._from_float(ctx.xp, x, out_scale, out_zp)
        else:
            q = self._requantize(ctx, x, src, dst, out_scale, out_zp)
        return ctx.xp.clip(q, info.min, info.max).astype(numpy_dtype(dst.dtype))

    @staticmethod
    def _from_float(xp: Any, x: Any, scale: np.ndarray, zero_point: np.ndarray) -> Any:
        rounded = round_half_away_from_zero(xp, divide_f32_exactly(xp, x, scale))
        # int32 arithmetic in the official kernel: out-of-range values (and NaN)
        # become INT32_MIN, and adding the zero point wraps.
        return wrap_int32(xp, float_to_int32_like_x86(xp, rounded) + xp.asarray(zero_point))

    @staticmethod
    def _requantize(ctx: OpContext, x: Any, src: Any, dst: Any, out_scale: np.ndarray,
                    out_zp: np.ndarray) -> Any:
        xp = ctx.xp
        in_scale, in_zp = _affine_params(ctx, "input", src, len(x.shape))
        if in_scale.ndim or out_scale.ndim:
            raise ModelExecutionError(f"{ctx.op}: requantization needs per-tensor scales")
        if src.dtype == dst.dtype == "int16" and (int(in_zp) != 0 or int(out_zp) != 0):
            raise ModelExecutionError(f"{ctx.op}: int16 to int16 requantization needs zero points of 0")
        multiplier, shift = quantize_multiplier(float(np.float64(in_scale)) / float(np.float64(out_scale)))
        centered = wrap_int32(xp, x.astype(xp.int64) - int(in_zp))
        # The official 8-bit -> 8-bit requantization (optimized Requantize, what the builtin kernels run) rounds
        # both steps half up, as ruy does; the 16- and 32-bit inputs keep gemmlowp's half-away-from-zero
        # rounding (both measured against the builtin kernels, tests/ops/test_quantize.py).
        rescale = ruy_multiply_by_quantized_multiplier if src.dtype in ("int8", "uint8") \
            else multiply_by_quantized_multiplier
        scaled = rescale(xp, centered, multiplier, shift)
        return wrap_int32(xp, scaled + int(out_zp))
