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

import functools
import math
import operator
import weakref
from typing import Any

import numpy as np

from ..errors import ModelExecutionError
from ..ir import Options, Quantization
from . import _block_weights as bw
from ._official_math import in_order_affordable, sum_as_the_builtin_gemm, sum_in_depth_order
from . import _quantized as q
from ._common import (applied_activation, computed_once, constant_tensor, fused_activation, opaque_zero, rounded_apart,
                     stored_weight, tie_to, unpack_sub_byte)
from .registry import Op, OpContext, Target, register


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
    if w is not None and _circle_weights(w):
        return _circle_weight_reason(x, w)
    if w is not None and w.quantization is not None and w.quantization.details is not None:
        return _blockwise_reason(op, subgraph, x, w)
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


# Up to this many rows, XLA CPU multiplies ggml weights that are program parameters by a fused elementwise
# product and reduction per block (``_block_weights.ggml_fc_block_sums``: reads the bytes once; its work grows
# with the rows), above it (and weights folded into the program) by a matmul of the scaled quants.
GGML_CPU_REDUCE_ROWS = 4


def _circle_weights(w: Any) -> bool:
    """Weights of circle's own types (``_block_weights``): ggml blocks, MX, UINT4."""
    return bw.is_block_weight(w.dtype) or w.dtype in bw.MX_TYPES or w.dtype == "uint4"


def _circle_weight_reason(x: Any, w: Any) -> str | None:
    if w.dtype in bw.MX_TYPES:
        return f"{w.dtype} weights: {bw.MX_REFUSAL}"
    if x.dtype != "float32":
        return f"{w.dtype} weights with {x.dtype} input are not supported (float32 input only)"
    if len(w.shape) != 2:
        return f"{w.dtype} weights must be [units, depth], got {list(w.shape)}"
    return bw.block_reason(w, "weights") if bw.is_block_weight(w.dtype) else bw.uint4_reason(w, "weights")


def _block_sums_product(g: Any, x: int, block_sums: np.ndarray, out_shape: tuple) -> int:
    """Builtin ops computing, for each input row, its sums over blocks of ``bw.BLOCK`` times ``block_sums``
    [units, blocks]: a float FULLY_CONNECTED on the sums, shaped as the op's output ``out_shape``."""
    units, blocks = block_sums.shape
    rows = math.prod(g.shape(x)) // (blocks * bw.BLOCK)
    split = g.op("RESHAPE", [x, g.constant(np.array([rows, blocks, bw.BLOCK], np.int32))], (rows, blocks, bw.BLOCK))
    sums = g.op("SUM", [split, g.constant(np.array([2], np.int32))], (rows, blocks), keep_dims=False)
    product = g.op("FULLY_CONNECTED", [sums, g.constant(block_sums), -1], (rows, units))
    return g.op("RESHAPE", [product, g.constant(np.array(out_shape, np.int32))], out_shape)


@register("FULLY_CONNECTED")
class FullyConnected(Op):
    dtypes = ("float32", "int8", "uint8", "int16")

    def unsupported_reason(self, op, subgraph, target):
        reason = super().unsupported_reason(op, subgraph, target) or _fc_reason(op, subgraph)
        activation = op.options.get("fused_activation_function", "NONE")
        w = subgraph.tensors[op.inputs[1]]
        hybrid = subgraph.tensors[op.inputs[0]].dtype == "float32" and w.dtype != "float32" and not _circle_weights(w)
        if reason is None and not hybrid and activation not in FC_ACTIVATIONS:
            reason = f"fused activation {activation} (the official kernel takes only {', '.join(FC_ACTIVATIONS)})"
        return reason

    def reference(self, ctx: OpContext, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
        if _circle_weights(ctx.input(1)):
            return self._circle_weights(np, ctx, x, w, bias)
        rows, out_shape = _fc_output_shape(ctx, x.shape, w.shape)
        if ctx.input(0).dtype != "float32":
            return _integer_fc(np, ctx, x.reshape(rows, w.shape[1]), w, bias).reshape(out_shape)
        if ctx.input(1).dtype != "float32":
            return _hybrid_fc_dispatch(np, ctx, x.reshape(rows, w.shape[1]), w, bias, out_shape)
        # BLAS's order, not the builtin kernel's (BUILTIN mode's, ``lower``): an ulp or so apart; in order, numpy
        # took 25x the time of an LLM's projections
        y = x.astype(np.float32).reshape(rows, w.shape[1]) @ w.astype(np.float32).T
        return self._finish(ctx, np, y, bias, out_shape)

    def lower(self, ctx: OpContext, x: Any, w: Any, bias: Any = None) -> Any:
        jnp, lax = ctx.xp, ctx.lax
        if _circle_weights(ctx.input(1)):
            return self._circle_weights(jnp, ctx, x, w, bias)
        rows, out_shape = _fc_output_shape(ctx, x.shape, w.shape)
        if ctx.input(0).dtype != "float32":
            return _integer_fc(jnp, ctx, x.reshape(rows, w.shape[1]), w, bias).reshape(out_shape)
        if ctx.input(1).dtype != "float32":
            return _hybrid_fc_dispatch(jnp, ctx, x.reshape(rows, w.shape[1]), w, bias, out_shape)
        x = x.reshape(rows, w.shape[1])
        if ctx.official_float_order and in_order_affordable(x, w.T):  # the builtin kernels' arithmetic
            return self._finish(ctx, jnp, sum_as_the_builtin_gemm(jnp, lax, x, w.T), bias, out_shape)
        # Weights computed in the program (DEQUANTIZE of float16 ones) are converted slice by slice on the CPU;
        # a GPU converts them inside the product's kernel, whole.
        whole = ctx.constant(1) is not None or ctx.target is Target.XLA_GPU
        spans = [(0, w.shape[0])] if whole else _unit_spans(w, 4)
        y = _chained_products(jnp, lax, spans, lambda start, stop, after: lax.dot_general(
            x, tie_to(jnp, lax, w[start:stop], after), (((1,), (1,)), ((), ())), precision=lax.Precision.HIGHEST))
        return self._finish(ctx, jnp, y, bias, out_shape)

    def builtin_lowering(self, op, subgraph, g) -> bool:
        """ggml q4_0 / q8_0 weights as TFLite's blockwise int4 / per-channel int8 weights, exact to the weights
        (``_block_weights.as_tflite_weights``), for XNNPACK's kernels: the input scaled by a power of two and
        repeated along depth first where the mapping needs it; the fused activation an op of its own (the builtin
        blockwise kernel applies none)."""
        x, w = (subgraph.tensors[t] for t in op.inputs[:2])
        activation = op.options.get("fused_activation_function", "NONE")
        if not bw.is_block_weight(w.dtype) or _circle_weight_reason(x, w) is not None \
                or activation not in FC_ACTIVATIONS or w.shape[0] < FOUR_BIT_FILTER_WIDTH:
            return False
        mapped = bw.as_tflite_weights(w.raw, w.dtype, *w.shape)
        if isinstance(mapped, str):
            return False
        shape = g.shape(x.index)
        source = x.index
        if mapped.input_scale != 1:
            source = g.op("MUL", [source, g.constant(np.array([mapped.input_scale], np.float32))], shape)
        if mapped.copies > 1:
            wide = shape[:-1] + (shape[-1] * mapped.copies,)
            source = g.op("CONCATENATION", [source] * mapped.copies, wide, axis=len(shape) - 1)
        if mapped.dtype == "int4":
            details = Options({"type": "BlockwiseQuantization", "scales": g.constant(mapped.scales),
                               "zero_points": -1, "block_size": bw.BLOCK})
            quantization = Quantization(details=details)
        else:
            quantization = Quantization(scale=tuple(float(s) for s in mapped.scales),
                                        zero_point=(0,) * len(mapped.scales))
        weights = g.constant(mapped.values, mapped.dtype, quantization)
        bias = op.inputs[2] if len(op.inputs) > 2 else -1
        out = op.outputs[0]
        last = mapped.block_sums is None and activation == "NONE"  # this FULLY_CONNECTED writes the op's output
        y = g.op("FULLY_CONNECTED", [source, weights, bias], g.shape(out), output=out if last else None,
                 keep_num_dims=bool(op.options.get("keep_num_dims", False)), asymmetric_quantize_inputs=True)
        if mapped.block_sums is not None:  # the blocks' sums times what each block adds, then the activation
            g.op("ADD", [y, _block_sums_product(g, x.index, mapped.block_sums, g.shape(out))], g.shape(out),
                 output=out, fused_activation_function=activation)
        elif activation != "NONE":
            g.op(activation, [y], g.shape(out), output=out)
        return True

    def _circle_weights(self, xp: Any, ctx: OpContext, x: Any, w: Any, bias: Any) -> Any:
        """Weights of circle's own types, dequantized here (``_block_weights``): ``w`` is the ggml bytes, or
        UINT4 values."""
        t = ctx.input(1)
        units, depth = t.shape
        rows, out_shape = _fc_output_shape(ctx, x.shape, t.shape)
        x = x.reshape(rows, depth)
        lax = ctx.lax
        if t.dtype == "uint4":
            scales, zero_points = bw.affine_parameters(ctx, t, units)
            if ctx.target is Target.XLA_GPU:  # the weight as the GPU holds it (XLA's uint4, see bw.uint4_fc)
                stored = getattr(ctx.backend, "stored_weight", lambda *_: None)(ctx.subgraph, ctx.op.inputs[1])
                y = bw.uint4_fc(xp, lax, x, w, scales, zero_points, stored)
            elif xp is np:
                y = bw.uint4_fc(np, None, x, w, scales, zero_points)
            else:  # XLA CPU: in slices of units, as the float32 weights it converts them to
                y = _chained_products(xp, lax, _unit_spans(w, 4), lambda start, stop, after: bw.uint4_fc(
                    xp, lax, x, tie_to(xp, lax, w[start:stop], after), scales[start:stop], zero_points[start:stop]))
        elif xp is np:
            y = bw.ggml_fc_reference(x, w, t.dtype, units, depth)
        else:
            # A GPU takes the product block by block, the scales on the partial sums, and converts the quants
            # inside the product's kernel.  XLA CPU reduces integer block products in one fused loop for a few
            # rows, else multiplies the scaled quants in one matmul; per slice of units, each tied to the
            # previous product (it converts a product's weights whole, and all of them at once).
            rows_q8 = bw.quantize_rows_q8(xp, computed_once(xp, lax, x))
            gpu = ctx.target is Target.XLA_GPU
            constant = isinstance(w, np.ndarray)  # in the program: XLA folds the scaled quants when compiling
            product = (bw.ggml_fc_partial_sums if gpu else bw.ggml_fc_dequantized if constant
                       or rows > GGML_CPU_REDUCE_ROWS else bw.ggml_fc_block_sums)
            whole = constant or gpu
            spans = [(0, units)] if whole else _spans(units, units * depth * 4)
            stored = xp.asarray(w).reshape(units, -1)
            y = _chained_products(xp, lax, spans, lambda start, stop, after: product(
                xp, lax, rows_q8, tie_to(xp, lax, stored[start:stop], after), t.dtype, stop - start, depth))
        return self._finish(ctx, xp, y, bias, out_shape)

    @staticmethod
    def _finish(ctx: OpContext, xp: Any, y: Any, bias: Any, out_shape: tuple) -> Any:
        if bias is not None:
            y = y + bias
        return fused_activation(xp, y, ctx.options.fused_activation_function).reshape(out_shape)


# Weights that the program converts (float16 -> float32, int8 -> int32, int4 -> float32) are
# multiplied in slices of output units when their converted form would take more than this: XLA CPU
# converts a matmul's weights whole, and schedules the conversions of independent matmuls together
# (the float32 copy of an LLM's 32000 x 2048 vocabulary projection alone took 250 MiB of a 3 GB
# model's run, an int8 MLP's int32 weights 171 MiB each).
CONVERTED_WEIGHT_CHUNK_BYTES = 32 << 20


def _unit_spans(w: Any, converted_itemsize: int, axis: int = 0) -> list[tuple[int, int]]:
    """(start, stop) ranges of ``w``'s units (along ``axis``) to multiply by: one, unless ``w`` is a
    value of the program (not numpy: a constant in the program is converted when compiling) whose
    conversion would pass CONVERTED_WEIGHT_CHUNK_BYTES."""
    if isinstance(w, np.ndarray):
        return [(0, w.shape[axis])]
    return _spans(w.shape[axis], math.prod(w.shape) * converted_itemsize)


def _spans(units: int, size: int) -> list[tuple[int, int]]:
    """(start, stop) ranges of ``units`` whose share of ``size`` converted bytes stays within
    CONVERTED_WEIGHT_CHUNK_BYTES."""
    if size <= CONVERTED_WEIGHT_CHUNK_BYTES or units < 2:
        return [(0, units)]
    step = max(1, -(-units * CONVERTED_WEIGHT_CHUNK_BYTES // size))
    return [(start, min(start + step, units)) for start in range(0, units, step)]


def _chained_products(xp: Any, lax: Any, spans: list[tuple[int, int]], product: Any) -> Any:
    """``product(start, stop, after)`` per span, concatenated along the last axis.  Each product ties
    its weights to ``after`` (``tie_to``), made from the previous product: so each slice is converted
    after the previous one was used, not all of them first."""
    pieces: list[Any] = []
    for start, stop in spans:
        pieces.append(product(start, stop, opaque_zero(xp, lax, pieces[-1]) if pieces else None))
    return pieces[0] if len(pieces) == 1 else xp.concatenate(pieces, axis=-1)


# Weights that XLA CPU holds as parameters are converted inside a loop in slices of this many bytes
# converted (measured on a 4-layer width-4096 int4 decoder's decode step, median of 6: 2 MiB 516 ms,
# 8 MiB 397 ms, 32 MiB 440 ms; one kernel per 32 MiB slice 401 ms).
LOOPED_SLICE_BYTES = 8 << 20


def _stored_rows(ctx: OpContext, w: Any) -> Any:
    """For FULLY_CONNECTED weights [units, depth] of int8 or int4 that XLA CPU holds as a parameter:
    ``rows(start, size, after)``, int8 rows [size, depth] read from the stored parameter (a dynamic slice,
    int4 unpacked; tied to ``after``), for ``_looped_products``; else None."""
    stored, t = stored_weight(ctx, 1), ctx.input(1)
    if stored is None or w.ndim != 2 or t.dtype not in ("int8", "int4"):
        return None
    units, depth = w.shape
    lax, xp = ctx.lax, ctx.xp
    if t.dtype == "int8":
        matrix = stored.reshape(units, depth)
        return lambda start, size, after: tie_to(xp, lax, lax.dynamic_slice_in_dim(matrix, start, size, 0), after)
    if depth % 2:  # a row would not start on a byte
        return None
    packed = stored.reshape(units, depth // 2)
    return lambda start, size, after: unpack_sub_byte(
        xp, tie_to(xp, lax, lax.dynamic_slice_in_dim(packed, start, size, 0), after), 4, True)


def _looped_products(xp: Any, lax: Any, lead: tuple, units: int, depth: int, dtype: Any, product: Any) -> Any:
    """[*lead, units] of ``product(start, size, after)`` ([*lead, size]: the outputs of units start ..
    start+size) over slices of about LOOPED_SLICE_BYTES of float32 weights, as one XLA loop, then the
    tail, whose weights are tied to ``after`` (made from the loop's result: else XLA converts them at the
    program's start).  Against one kernel per slice (``_chained_products``), XLA compiles one loop body:
    big models keep far smaller executables and need less memory to compile them (a 3-layer width-4096
    int4 decoder: decode temporaries 96 -> 9 MiB, executables about half), and runs about as fast
    (BENCHMARKS.md, issue 18)."""
    step = max(1, min(units, LOOPED_SLICE_BYTES // (4 * depth)))
    count, tail = divmod(units, step)
    axis = len(lead)

    def body(i: Any, out: Any) -> Any:
        start = i * step
        return lax.dynamic_update_slice_in_dim(out, product(start, step, None), start, axis)

    out = lax.fori_loop(0, count, body, xp.zeros((*lead, units), dtype))
    if tail:
        last = product(count * step, tail, opaque_zero(xp, lax, out))
        out = lax.dynamic_update_slice_in_dim(out, last, count * step, axis)
    return out


# --- integer arithmetic shared by both ops -------------------------------------------

def _integer_dot(xp: Any, ctx: OpContext, a: Any, b: Any, wide: bool) -> Any:
    """a @ b of integer arrays (batch dims broadcast), exact: int64 in numpy; on XLA int32
    accumulation for 8-bit operands (the official kernels' int32 accumulator), int64 for 16-bit."""
    if xp is np:
        return np.matmul(a.astype(np.int64), b.astype(np.int64))
    a = computed_once(xp, ctx.lax, a)  # else XLA recomputes it per output of a weights-converting matvec
    acc = xp.int64 if wide else xp.int32
    # spans of b's last axis (output units); b[:, ...] would slice the contracted axis of a batched b
    spans = _unit_spans(b, np.dtype(acc).itemsize, axis=-1) if b.ndim == 2 else [(0, b.shape[-1])]
    return _chained_products(xp, ctx.lax, spans, lambda start, stop, after: xp.matmul(
        a.astype(acc), tie_to(xp, ctx.lax, b[..., start:stop], after).astype(acc),
        preferred_element_type=acc)).astype(xp.int64)


# Integers up to 2^24 are exact in float32: a dot of 8-bit values whose every partial sum stays below
# that gives the exact integer whatever the summation order, so it can run as a float32 GEMM.
FLOAT32_EXACT_INTEGERS = 1 << 24
# (id of the weights' buffer array) -> (a weak reference to it, {(shape, dtype, input bound): spans}):
# per buffer, so that signatures sharing a weight (prefill, decode) check it once; the weak reference
# tells a live buffer from a new one that got a freed one's id.
_FLOAT_EXACT_SPANS: dict[int, tuple[Any, dict]] = {}


def float32_exact_depth_spans(t: Any, input_bound: int) -> list[tuple[int, int]] | None:
    """Spans of the depth axis of the constant 8-bit weights ``t`` [units, depth] such that rows of
    |value| <= ``input_bound`` times each span keep every partial sum below 2^24 (checked on the weights'
    own values: the sum of |w| per unit and span); None when ``t`` is not such a constant."""
    if t is None or t.raw is None or t.raw.size == 0 or t.dtype not in ("int8", "uint8") or len(t.shape) != 2:
        return None
    entry = _FLOAT_EXACT_SPANS.get(id(t.raw))
    if entry is None or entry[0]() is not t.raw:
        entry = (weakref.ref(t.raw), {})
        _FLOAT_EXACT_SPANS[id(t.raw)] = entry
        weakref.finalize(t.raw, _FLOAT_EXACT_SPANS.pop, id(t.raw), None)
    key = (tuple(t.shape), t.dtype, input_bound)
    if key not in entry[1]:
        entry[1][key] = _exact_spans(np.asarray(t.data), input_bound)
    return entry[1][key]


def _exact_spans(data: np.ndarray, input_bound: int) -> list[tuple[int, int]] | None:
    depth = data.shape[1]
    limit = (FLOAT32_EXACT_INTEGERS - 1) // input_bound  # the largest sum of |w| a span may have
    for pieces in (1, 2, 3, 4, 6, 8, 12, 16):
        step = -(-depth // pieces)
        spans = [(k, min(k + step, depth)) for k in range(0, depth, step)]
        if all(_largest_abs_sum(data, k0, k1) <= limit for k0, k1 in spans):
            return spans
    return None


def _largest_abs_sum(data: np.ndarray, k0: int, k1: int) -> int:
    """max over units of sum |w[unit, k0:k1]|, in blocks of about 4 MiB as int16 (|int8| <= 128): the
    whole weight widened at once took up to 0.9 GiB for a 32000 x 4096 vocabulary projection."""
    worst = 0
    rows = max(1, (4 << 20) // (2 * max(1, k1 - k0)))
    for start in range(0, data.shape[0], rows):
        block = data[start:start + rows, k0:k1].astype(np.int16)
        np.abs(block, out=block)
        worst = max(worst, int(block.sum(axis=1, dtype=np.int64).max(initial=0)))
    return worst


def _integer_fc_in_float32(xp: Any, ctx: OpContext, a: Any, w: Any, depth_spans: list[tuple[int, int]]) -> Any:
    """a [rows, depth] @ w.T for weights w [units, depth], exact (``float32_exact_depth_spans``): one float32
    GEMM per depth span (contracting w's own last axis: no transposed copy), summed as int64.  On XLA CPU
    the int32 route widened the weights to int64 and int32 and transposed a copy every run."""
    a = computed_once(xp, ctx.lax, a).astype(xp.float32)

    def summed_over_depth_spans(weights: Any) -> Any:  # int8 [n, depth] -> int64 [..., n]
        weights = weights.astype(xp.float32)
        return functools.reduce(operator.add, [xp.matmul(a[..., k0:k1], weights[:, k0:k1].T,
                                                         preferred_element_type=xp.float32).astype(xp.int64)
                                               for k0, k1 in depth_spans])

    spans = _unit_spans(w, 4, axis=0)
    rows = _stored_rows(ctx, w) if len(spans) > 1 else None
    if rows is not None:
        return _looped_products(xp, ctx.lax, a.shape[:-1], w.shape[0], w.shape[1], xp.int64,
                                lambda start, size, after: summed_over_depth_spans(rows(start, size, after)))
    return _chained_products(xp, ctx.lax, spans, lambda start, stop, after: summed_over_depth_spans(
        tie_to(xp, ctx.lax, w[start:stop], after)))


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
                    w_t: Any, weight_sums: Any = None, depth_spans: list[tuple[int, int]] | None = None) -> Any:
    """float32 result of quantized rows [..., R, D] times integer weights [..., D, U] (or, with
    ``depth_spans``, FC weights [U, D] multiplied exactly in float32: ``_integer_fc_in_float32``)."""
    if depth_spans is not None:
        acc = _integer_fc_in_float32(xp, ctx, quantized, w, depth_spans)
        w = w.T  # [D, U] for the weight sums below
    else:
        acc = _integer_dot(xp, ctx, quantized, w.astype(xp.int64), False)
    if ctx.options.get("asymmetric_quantize_inputs", False):
        if weight_sums is None:
            weight_sums = w.astype(xp.int64).sum(axis=-2, keepdims=True)
        acc = acc - row_zp * weight_sums
    scale = _hybrid_scale(row_scale, w_t, w.shape[-1])
    return acc.astype(xp.float32) * scale


def _hybrid_fc(xp: Any, ctx: OpContext, x: Any, w: Any) -> Any:
    w_t = ctx.input(1)
    quantized, row_scale, row_zp = q.quantize_rows(xp, x, ctx.options.get("asymmetric_quantize_inputs", False))
    # quantized rows are within [-128, 127]; FC weights are [units, depth]
    spans = float32_exact_depth_spans(w_t, 128) if xp is not np and w.ndim == 2 else None
    if spans is not None:
        return _hybrid_product(xp, ctx, quantized, row_scale, row_zp, w, w_t, depth_spans=spans)
    return _hybrid_product(xp, ctx, quantized, row_scale, row_zp, w.T, w_t)


def _hybrid_fc_dispatch(xp: Any, ctx: OpContext, x: Any, w: Any, bias: Any, out_shape: tuple) -> Any:
    """The official hybrid FC's three kernels: blockwise int4, the dedicated 4-bit one, the dense one."""
    w_t = ctx.input(1)
    if w_t.quantization.details is not None:
        y = _blockwise_fc(xp, ctx, x, w, bias)
        return y.reshape(out_shape)  # the blockwise kernel applies no fused activation (measured)
    if _takes_4bit_path(w_t, x.shape[0], w.shape[1], w.shape[0]):
        y = _four_bit_fc(xp, ctx, x, w, bias)
    else:
        y = _hybrid_fc(xp, ctx, x, w)
        if bias is not None:
            y = y + bias
    # The hybrid kernel applies the activation function itself (ApplyActivationToVector: TANH, SIGN_BIT too),
    # where the float and integer kernels refuse those values.
    return applied_activation(xp, y, ctx.options.fused_activation_function).reshape(out_shape)


# --- the official optimized 4-bit hybrid kernel (fully_connected.cc EvalHybridDense4Bit) -----
#
# Prepare routes int4 weights to it when they are constant, the input depth is even and at least
# FilterDepth, and there are at least FilterWidth units.  It ignores asymmetric_quantize_inputs:
# rows are quantized symmetrically with their own arithmetic; the int4 weights are repacked as
# unsigned nibbles w + 7 and the 7 * sum(q) offset is removed in float afterwards, bias first.
# Its x86 repacking corrupts -8 weights (and their neighbours): verified only for [-7, 7],
# which is what symmetric int4 quantization produces; we compute -8 as -8.

FOUR_BIT_FILTER_WIDTH, FOUR_BIT_FILTER_DEPTH = 4, 32
FOUR_BIT_ZERO_POINT = 7


def _takes_4bit_path(w_t: Any, rows: int, depth: int, units: int) -> bool:
    return (w_t.dtype == "int4" and w_t.is_constant and rows > 0 and depth % 2 == 0
            and units >= FOUR_BIT_FILTER_WIDTH and depth >= FOUR_BIT_FILTER_DEPTH)


def _quantize_rows_4bit(xp: Any, rows: Any) -> tuple[Any, Any]:
    """``BatchQuantizeFloats4Bit``: (int8 values as int64, float32 row scale); an all-zero row
    gets range 127 (scale 1).  127 / range and range / 127 are divided in double, rounded once."""
    rows = rows.astype(xp.float32)
    value_range = xp.abs(rows).max(axis=-1, keepdims=True)
    value_range = xp.where(value_range == 0, xp.float32(127), value_range).astype(xp.float64)
    inverse = q.fp.divide_f64_exactly(xp, 127.0, value_range).astype(xp.float32)
    scale = q.fp.divide_f64_exactly(xp, value_range, 127.0).astype(xp.float32)
    values = q.fp.round_half_away_from_zero(xp, (rows * inverse).astype(xp.float32))
    return values.astype(xp.int64), scale


def _four_bit_fc(xp: Any, ctx: OpContext, x: Any, w: Any, bias: Any) -> Any:
    """float32 [rows, units] of the 4-bit kernel, bias included, before the activation."""
    f32 = xp.float32
    quantized, row_scale = _quantize_rows_4bit(xp, x)
    filter_scale = xp.asarray(q.channel_scales(ctx, ctx.input(1), "weights", w.shape[0]))
    unsigned = (w.astype(xp.int64) + FOUR_BIT_ZERO_POINT).T
    dst = _integer_dot(xp, ctx, quantized, unsigned, False)
    offsets = -FOUR_BIT_ZERO_POINT * quantized.sum(axis=-1, keepdims=True)
    y = ((offsets.astype(f32) * row_scale).astype(f32) * filter_scale).astype(f32)
    if bias is not None:
        y = (y + bias.astype(f32)).astype(f32)
    return (y + ((dst.astype(f32) * row_scale).astype(f32) * filter_scale).astype(f32)).astype(f32)


# --- blockwise int4 weights (fully_connected.cc EvalBlockwise4Bit) -----------------------
#
# quantization.details = BlockwiseQuantization{scales, zero_points, block_size}: ``scales``
# names a float16 tensor of [units, depth / block_size] per-block scales.  The official
# kernel runs only inside the 4-bit path (above); elsewhere (int8 weights, small shapes) it
# takes the dense hybrid kernel, which reads no blockwise scale and outputs just the bias
# (measured), so those cases are refused.  Inputs are quantized asymmetrically per row whatever
# asymmetric_quantize_inputs says, and no fused activation is applied (measured).

def _blockwise_reason(op: Any, subgraph: Any, x: Any, w: Any) -> str | None:
    details = w.quantization.details
    kind = details.get("type")
    if kind != "BlockwiseQuantization":
        return f"{kind} weight quantization is not supported"
    if x.dtype != "float32" or w.dtype != "int4":
        return (f"blockwise {w.dtype} weights with {x.dtype} input are not supported (only int4 weights with "
                "float input, the official runtime's only blockwise kernel)")
    if len(w.shape) != 2:
        return f"blockwise weights must be [units, depth], got {w.shape}"
    units, depth = w.shape
    if not _takes_4bit_path(w, 1, depth, units):
        return ("blockwise int4 weights need constant weights with an even depth >= "
                f"{FOUR_BIT_FILTER_DEPTH} and >= {FOUR_BIT_FILTER_WIDTH} units (elsewhere the official runtime "
                f"ignores the blockwise scales and outputs the bias); got {w.shape}")
    block = int(details.get("block_size", 0) or 0)
    if block <= 0 or depth % block:
        return f"block_size {block} does not divide the weights' depth {depth}"
    scales = _details_tensor(subgraph, details.get("scales", -1))
    if scales is None or scales.dtype != "float16" or scales.data is None \
            or scales.num_elements != units * (depth // block):
        return (f"blockwise scales must be a constant float16 tensor of {units} x {depth // block} values, "
                f"got {None if scales is None else (scales.dtype, scales.shape)}")
    zero_points = _details_tensor(subgraph, details.get("zero_points", -1))
    if zero_points is not None and (zero_points.data is None or np.any(zero_points.data != 0)):
        return "blockwise zero points must be absent or zero (the official kernel ignores them)"
    return None


def _details_tensor(subgraph: Any, index: Any) -> Any:
    index = int(index if index is not None else -1)
    return subgraph.tensors[index] if 0 <= index < len(subgraph.tensors) else None


def _block_scales(ctx: OpContext, units: int, depth: int) -> tuple[int, Any]:
    """(block size, float16 [units, blocks] scales) of the blockwise weights: numpy, or under XLA the
    backend's value (a parameter, for big models: as a constant it would grow the program), converted to
    float32 where used (converted here, XLA would convert all of them at the program's start)."""
    details = ctx.input(1).quantization.details
    block = int(details.block_size)
    scales = constant_tensor(ctx, int(details.scales))
    return block, scales.reshape(units, depth // block)


def _blockwise_fc(xp: Any, ctx: OpContext, x: Any, w: Any, bias: Any) -> Any:
    if xp is np:
        return _blockwise_fc_exact(ctx, x, w, bias)
    if ctx.target is Target.XLA_GPU:
        return _blockwise_fc_partial_sums(xp, ctx, x, w, bias)
    if ctx.official_float_order and _block_sums_affordable(x, w, ctx):
        return _blockwise_fc_in_official_order(xp, ctx, x, w, bias)
    return _blockwise_fc_dequantized(xp, ctx, x, w, bias)


# The official order keeps every block's integer sum apart ([rows, units, blocks] floats): up to this many.
OFFICIAL_BLOCK_SUMS_MAX = 1 << 26


def _block_sums_affordable(x: Any, w: Any, ctx: OpContext) -> bool:
    block = int(ctx.input(1).quantization.details.block_size)
    rows = int(np.prod(x.shape[:-1], dtype=np.int64))
    return rows * w.shape[0] * (w.shape[1] // block) <= OFFICIAL_BLOCK_SUMS_MAX


def _blockwise_fc_in_official_order(xp: Any, ctx: OpContext, x: Any, w: Any, bias: Any) -> Any:
    """``_blockwise_fc_exact`` under XLA (BUILTIN mode): every block's integer sum, exact in float32 (at most
    block x 128 x 8 < 2^24), then the official kernel's float32 steps in its order, each rounded on its own.
    The dequantized product sums across the blocks in XLA's order: a 32-row prefill of blocks of 256 was 5 %
    of the KV cache off the builtin kernels."""
    lax = ctx.lax
    units, depth = w.shape
    block, scales = _block_scales(ctx, units, depth)
    blocks = depth // block
    quantized, row_scale, row_zp = q.quantize_rows(xp, x, True)
    weights = xp.asarray(w).astype(xp.float32).reshape(units, blocks, block)
    sums = lax.dot_general(quantized.astype(xp.float32).reshape(-1, blocks, block), weights,
                           (((2,), (2,)), ((1,), (1,))), precision=lax.Precision.HIGHEST)  # [blocks, rows, units]
    weight_sums = weights.sum(axis=-1)  # [units, blocks], integers
    scales = xp.asarray(scales).astype(xp.float32)
    y = xp.zeros(sums.shape[1:], xp.float32)
    kfsum = xp.zeros((units,), xp.float32)
    for b in range(blocks):
        y = y + rounded_apart(xp, lax, sums[b] * scales[:, b])
        kfsum = kfsum + rounded_apart(xp, lax, scales[:, b] * weight_sums[:, b])
    y = rounded_apart(xp, lax, (y - rounded_apart(xp, lax, row_zp.astype(xp.float32) * kfsum)) * row_scale)
    return y if bias is None else y + bias.astype(xp.float32)


def _blockwise_fc_partial_sums(xp: Any, ctx: OpContext, x: Any, w: Any, bias: Any) -> Any:
    """XLA GPU: the quantized rows times the int4 weights block by block (one batched product over the blocks,
    whose partial sums are exact in float32), then the partial sums times the block scales, summed.  The
    scales stay off the weights, so XLA converts the weights inside the product's kernel and never holds them
    wider than packed (scales on the weights materialized a float32 copy: ``bench/gpu/gpu_compile.py``)."""
    units, depth = w.shape
    block, scales = _block_scales(ctx, units, depth)
    blocks = depth // block
    quantized, row_scale, row_zp = q.quantize_rows(xp, x, True)
    lax = ctx.lax
    weights = xp.asarray(w).reshape(units, blocks, block).astype(xp.float32)
    if x.shape[0] == 1:
        # one row (a decode step): XLA GPU fuses the scales on the weight into the matrix-vector product (one
        # kernel, nothing written but the result), where the partial sums would be [blocks, units] floats
        scaled = (weights * xp.asarray(scales).astype(xp.float32)[:, :, None]).reshape(units, depth)
        y = lax.dot_general((quantized - row_zp).astype(xp.float32), scaled, (((1,), (1,)), ((), ())),
                            precision=lax.Precision.HIGHEST) * row_scale
        return y if bias is None else y + bias
    centred = (quantized - row_zp).astype(xp.float32).reshape(-1, blocks, block)
    partial = lax.dot_general(centred, weights, (((2,), (2,)), ((1,), (1,))),
                              precision=lax.Precision.HIGHEST)  # [blocks, rows, units]
    # the scales transposed to [blocks, units] while still float16: XLA GPU transposes them into a buffer of
    # their own (a reduction does not read its operand transposed), which it made float32 (a widened copy of
    # a weight) when the conversion came first
    scales_by_block = lax.optimization_barrier(xp.asarray(scales).T)
    y = xp.sum(partial * scales_by_block.astype(xp.float32)[:, None, :], axis=0) * row_scale
    return y if bias is None else y + bias


def _blockwise_fc_exact(ctx: OpContext, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """The official kernel's float32 arithmetic, in its order: per block, the int32 dot product
    times the block scale is added to the output and scale * sum(block weights) to ``kfsum``;
    then output = (output - zero_point * kfsum) * row_scale + bias."""
    units, depth = w.shape
    block, scales = _block_scales(ctx, units, depth)
    scales = scales.astype(np.float32)
    quantized, row_scale, row_zp = q.quantize_rows(np, x, True)
    blocks = depth // block
    weights = w.astype(np.int64).reshape(units, blocks, block)
    acc = np.einsum("rbk,ubk->rub", quantized.reshape(-1, blocks, block), weights).astype(np.float32)
    weight_sums = weights.sum(axis=-1).astype(np.float32)
    y = np.zeros((x.shape[0], units), np.float32)
    kfsum = np.zeros(units, np.float32)
    for b in range(blocks):
        y = y + acc[:, :, b] * scales[:, b]
        kfsum = kfsum + scales[:, b] * weight_sums[:, b]
    y = (y - row_zp.astype(np.float32) * kfsum) * row_scale
    return y if bias is None else y + bias.astype(np.float32)


def _blockwise_fc_dequantized(xp: Any, ctx: OpContext, x: Any, w: Any, bias: Any) -> Any:
    """XLA: the same quantized rows against weights dequantized in the program, one float matmul.
    Every product is exact in float32 (8-bit x 4-bit x float16 scale); only the summation order
    differs from the official kernel's."""
    units, depth = w.shape
    block, scales = _block_scales(ctx, units, depth)
    quantized, row_scale, row_zp = q.quantize_rows(xp, x, True)
    centred = (quantized - row_zp).astype(xp.float32)
    lax = ctx.lax

    def dequantized_dot(weights: Any, block_scales: Any) -> Any:
        """centred @ (int weights [n, depth] times their [n, blocks] scales).T"""
        n = weights.shape[0]
        weights = weights.astype(xp.float32).reshape(n, depth // block, block) * \
            block_scales.astype(xp.float32)[:, :, None]
        return lax.dot_general(centred, weights.reshape(n, depth), (((1,), (1,)), ((), ())),
                               precision=lax.Precision.HIGHEST)

    def product(start: int, stop: int, after: Any) -> Any:
        return dequantized_dot(tie_to(xp, lax, xp.asarray(w)[start:stop], after),
                               tie_to(xp, lax, xp.asarray(scales)[start:stop], after))

    def looped_product(start: Any, size: int, after: Any) -> Any:
        return dequantized_dot(rows(start, size, after),
                               tie_to(xp, lax, lax.dynamic_slice_in_dim(xp.asarray(scales), start, size, 0), after))

    spans = _unit_spans(w, 4)
    rows = _stored_rows(ctx, w) if len(spans) > 1 else None
    if rows is not None:
        y = _looped_products(xp, lax, centred.shape[:-1], units, depth, xp.float32, looped_product)
    else:
        y = _chained_products(xp, lax, spans, product)
    y = y * row_scale
    return y if bias is None else y + bias


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


def _as_official_hybrid_bmm_reads(xp: Any, per_matrix: Any, own_batch: tuple, other_batch: tuple) -> Any:
    """Per-row factors ``[*own_batch, n]`` (the input rows' scales / zero points, or the weights' column sums)
    as the official hybrid BATCH_MATMUL reads them, for the broadcast batch ``[*batch, n]``.

    The official kernel (reference_ops::BatchMatMul, hybrid) steps its factor pointer by ``n`` per index of
    each of its three batch dimensions, not by the size of the matrices below it: batch ``(b0, b1, b2)``
    reads factors ``(b0 + b1 + b2) * n ...`` (a dimension of size 1 adds nothing).  With one batch
    dimension that is the right row; with two or more (a 4-D input) other rows' factors are used, and
    we do the same to give the official numbers."""
    own = (1,) * (3 - len(own_batch)) + tuple(own_batch)
    other = (1,) * (3 - len(other_batch)) + tuple(other_batch)
    batch = tuple(max(a, b) for a, b in zip(own, other))
    n = per_matrix.shape[-1]
    grids = np.meshgrid(*[np.arange(d) * (o != 1) for d, o in zip(batch, own)], indexing="ij")
    start = sum(grids) * n
    index = (start[..., None] + np.arange(n)).reshape(np.broadcast_shapes(own_batch, other_batch) + (n,))
    return xp.take(per_matrix.reshape(-1), xp.asarray(index))


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
        if in_order_affordable(x, y):
            return sum_in_depth_order(np, None, x, y)
        return np.matmul(x, y)

    def lower(self, ctx: OpContext, x: Any, y: Any) -> Any:
        if ctx.input(0).dtype != "float32" or ctx.input(1).dtype != "float32":
            return self._quantized(ctx.xp, ctx, x, y)
        x, y = _batch_matmul_operands(ctx, x, y)
        if ctx.official_float_order and in_order_affordable(x, y):  # the builtin kernels' arithmetic
            return sum_in_depth_order(ctx.xp, ctx.lax, x, y)
        return ctx.xp.matmul(x, y, precision=ctx.lax.Precision.HIGHEST)

    @staticmethod
    def _quantized(xp: Any, ctx: OpContext, x: Any, y: Any) -> Any:
        x, y = _batch_matmul_operands(ctx, x, y)
        x_t, y_t, out_t = ctx.input(0), ctx.input(1), ctx.output(0)
        if x_t.dtype == "float32":
            quantized, row_scale, row_zp = q.quantize_rows(xp, x, ctx.options.asymmetric_quantize_inputs)
            x_batch, y_batch = x.shape[:-2], y.shape[:-2]
            row_scale = _as_official_hybrid_bmm_reads(xp, row_scale[..., 0], x_batch, y_batch)[..., None]
            row_zp = _as_official_hybrid_bmm_reads(xp, row_zp[..., 0], x_batch, y_batch)[..., None]
            sums = _as_official_hybrid_bmm_reads(xp, y.astype(xp.int64).sum(axis=-2), y_batch, x_batch)[..., None, :]
            return _hybrid_product(xp, ctx, quantized, row_scale, row_zp, y, y_t, sums)
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
