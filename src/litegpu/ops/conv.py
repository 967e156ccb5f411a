"""Convolutions: CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV, CONV_3D (NHWC / NDHWC).

CONV_2D: OHWI filter.  Grouped convolution (input channels a multiple of the
filter's) follows the official kernel.  The reference forms the output tap by
tap (exact float semantics, no im2col memory blow-up); the XLA lowering is
``lax.conv_general_dilated``, except 1x1 stride-1 filters, which run as a
matrix product (same speed on XLA CPU, and fewer layout changes).

DEPTHWISE_CONV_2D: filter [1, KH, KW, C * multiplier]; output channel
``c * multiplier + m`` reads input channel ``c``.  TRANSPOSE_CONV: inputs
(output_shape, OHWI weights, input, optional bias); its padding is the one a
forward convolution from the *output* size would use.  CONV_3D: DHWIO filter.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ModelExecutionError
from . import _quantized as q
from . import _fixedpoint as fp
from ._official_math import IN_ORDER_MAX_MACS, sum_as_the_builtin_gemm
from ._common import computed_once, conv_output_size, explicit_padding, fused_activation, rounded_apart, same_padding
from .registry import Op, OpContext, Target, register


def _geometry(ctx: OpContext, x_shape: tuple, w_shape: tuple) -> tuple:
    o = ctx.options
    strides = (o.stride_h, o.stride_w)
    dilations = (o.dilation_h_factor, o.dilation_w_factor)
    pads = explicit_padding(o.padding, (x_shape[1], x_shape[2]), (w_shape[1], w_shape[2]), strides, dilations)
    return strides, dilations, pads


@register("CONV_2D")
class Conv2D(Op):
    dtypes = ("float32", "float16", "int8", "uint8", "int16")

    def unsupported_reason(self, op, subgraph, target):
        return super().unsupported_reason(op, subgraph, target) or _quantized_weights_reason(op, subgraph)

    def reference(self, ctx: OpContext, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
        if _is_hybrid(ctx):
            return _hybrid_conv(np, ctx, x, w, bias, _conv_accumulate, _conv_hybrid_per_channel(ctx, w))
        if ctx.input(0).dtype == "int16":
            return _quantized_conv_16x8(np, ctx, x, w, bias, _conv_accumulate)
        if x.dtype.kind in "iu":
            return _quantized_conv(np, ctx, x, w, bias, _conv_accumulate, ruy=not _is_grouped(x, w))
        if x.dtype == np.float32 and w.dtype == np.float32 and _conv_in_order_affordable(ctx, x.shape, w.shape):
            return _conv_in_official_order(np, None, ctx, x, w, bias)
        (sh, sw), (dh, dw), ((pt, pb), (pl, pr)) = _geometry(ctx, x.shape, w.shape)
        n, h, wd, cin = x.shape
        cout, kh, kw, cin_g = w.shape
        groups = cin // cin_g
        xp = np.pad(x.astype(np.float32), ((0, 0), (pt, pb), (pl, pr), (0, 0)))
        oh = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1
        ow = (wd + pl + pr - (kw - 1) * dw - 1) // sw + 1
        out = np.zeros((n, oh, ow, cout), np.float32)
        wf = w.astype(np.float32)
        per_group = cout // groups
        for g in range(groups):
            xs = xp[..., g * cin_g:(g + 1) * cin_g]
            wg = wf[g * per_group:(g + 1) * per_group]
            for i in range(kh):
                for j in range(kw):
                    patch = xs[:, i * dh: i * dh + (oh - 1) * sh + 1: sh, j * dw: j * dw + (ow - 1) * sw + 1: sw, :]
                    out[..., g * per_group:(g + 1) * per_group] += patch @ wg[:, i, j, :].T
        if bias is not None:
            out += bias.astype(np.float32)
        return fused_activation(np, out, ctx.options.fused_activation_function).astype(x.dtype)

    def lower(self, ctx: OpContext, x: Any, w: Any, bias: Any = None) -> Any:
        if _is_hybrid(ctx):
            return _hybrid_conv(ctx.xp, ctx, x, w, bias, _conv_accumulate, _conv_hybrid_per_channel(ctx, w))
        if ctx.input(0).dtype == "int16":
            return _quantized_conv_16x8(ctx.xp, ctx, x, w, bias, _conv_accumulate)
        if ctx.input(0).dtype in q.QUANTIZED_8BIT:
            return _quantized_conv(ctx.xp, ctx, x, w, bias, _conv_accumulate, ruy=not _is_grouped(x, w))
        if (ctx.official_float_order and x.dtype == np.float32 and w.dtype == np.float32
                and _conv_in_order_affordable(ctx, x.shape, w.shape)):  # the builtin kernels' arithmetic
            return _conv_in_official_order(ctx.xp, ctx.lax, ctx, x, w, bias)
        jnp, lax = ctx.xp, ctx.lax
        strides, dilations, pads = _geometry(ctx, x.shape, w.shape)
        cout, kh, kw, cin_g = w.shape
        out_hw = _output_sizes(ctx, x.shape[1:3], (kh, kw), strides, dilations, pads)
        lowering = conv_lowering(x.shape, w.shape, strides, dilations, out_hw, ctx.target)
        if lowering == "matmul":
            y = jnp.einsum("nhwc,oc->nhwo", x, w.reshape(cout, cin_g), precision=lax.Precision.HIGHEST)
        elif lowering == "depthwise":  # groups == channels: DEPTHWISE_CONV_2D's taps ([1, KH, KW, Cout] weights)
            y = _depthwise_by_taps(jnp, ctx, x, jnp.transpose(w, (3, 1, 2, 0)))
        elif lowering == "im2col":
            xp_ = jnp.pad(x, ((0, 0), pads[0], pads[1], (0, 0)))
            taps = [_strided_tap(xp_, (i * dilations[0], j * dilations[1]), out_hw, strides)
                    for i in range(kh) for j in range(kw)]
            y = jnp.einsum("nhwk,ok->nhwo", jnp.concatenate(taps, axis=-1), w.reshape(cout, -1),
                           precision=lax.Precision.HIGHEST)
        else:
            y = lax.conv_general_dilated(
                x, w, window_strides=strides, padding=pads, rhs_dilation=dilations,
                dimension_numbers=("NHWC", "OHWI", "NHWC"), feature_group_count=x.shape[-1] // cin_g,
                precision=lax.Precision.HIGHEST)
        if bias is not None:
            y = y + bias
        return fused_activation(jnp, y, ctx.options.fused_activation_function)


def _conv_in_order_affordable(ctx: OpContext, x_shape: tuple, w_shape: tuple) -> bool:
    """Whether CONV_2D takes the builtin kernel's depth order: not dilated (the builtin kernel's dilated im2col
    GEMM sums in another order, not found: none of the six (row, column, channel) orders, nor 2 to 8 interleaved
    partial sums, gave its bits), and either not past IN_ORDER_MAX_MACS, or a layer that reads an image
    (``_reads_an_image``) whatever its size, or one in a CNN's stem (``_in_the_stem``) up to
    STEM_IN_ORDER_MAX_MACS."""
    strides, dilations, pads = _geometry(ctx, x_shape, w_shape)
    if dilations != (1, 1):
        return False
    cout, kh, kw, cin_g = w_shape
    out_hw = _output_sizes(ctx, x_shape[1:3], (kh, kw), strides, dilations, pads)
    macs = x_shape[0] * out_hw[0] * out_hw[1] * kh * kw * cin_g * cout  # im2col multiply-adds
    return (macs <= IN_ORDER_MAX_MACS or _reads_an_image(w_shape)
            or (_in_the_stem(out_hw) and macs <= STEM_IN_ORDER_MAX_MACS))


def _reads_an_image(w_shape: tuple) -> bool:
    """A convolution over at most 4 channels (a network's first layer, on an image) with at most
    MAX_IM2COL_TAPS taps: its depth is short (147 for a 7x7 RGB stem), so the in-order sum's one pass over the
    output per depth step stays cheap at any image size, and its rounding reaches every layer after it.  Measured
    on ResNet50's 118 M-MAC 7x7 stem, past IN_ORDER_MAX_MACS: XLA's dot left the output 2.1e-5 of its largest
    value from the builtin kernels', the in-order sum 3.6e-6, at about the same first-call and steady-call cost
    (BENCHMARKS.md, "The fidelity sweep"); raising IN_ORDER_MAX_MACS to 2^27 for all convolutions gave 4.0e-6
    but 1.3x the first call and 1.6x the steady call."""
    cout, kh, kw, cin_g = w_shape
    return cin_g <= 4 and kh * kw <= MAX_IM2COL_TAPS


# A convolution whose output has at least this many pixels per image sits in a CNN's stem, before it halves its
# resolution a few times; with this many multiply-adds at most it sums in the builtin order past IN_ORDER_MAX_MACS.
STEM_MIN_PIXELS = 64 * 64
STEM_IN_ORDER_MAX_MACS = 1 << 30


def _in_the_stem(out_hw: tuple) -> bool:
    """A high-resolution convolution: its rounding reaches the most elements of every layer after it.  Measured
    on Keras InceptionV3 float32, one convolution past IN_ORDER_MAX_MACS in XLA's order, all others in the
    builtin order (BENCHMARKS.md, "InceptionV3 in the builtin order"): its first 3x3 after the image (147x147
    output, 199 M multiply-adds) alone put the model 2.1e-5 of its largest output from the builtin kernels'
    (outside the rule, as far as all 24 together), a 35x35 one 4.8e-6, a 17x17 or 8x8 one 7e-7; the three stem
    convolutions (147x147 and 71x71) in order and the 21 others in XLA's, 6.0e-6, at 1.44x the steady call and
    the same first call.  ResNet50, DenseNet121 and ConvNeXt leave their stems at 56x56, under this size: their
    3x3 convolutions (115.6 M multiply-adds each; 1.6x the steady call in order) keep XLA's."""
    return out_hw[0] * out_hw[1] >= STEM_MIN_PIXELS


def _conv_in_official_order(xp: Any, lax: Any, ctx: OpContext, x: Any, w: Any, bias: Any) -> Any:
    """Float CONV_2D as the builtin kernel sums it (measured bit for bit on the x86 wheel): im2col, then each
    output summed over the depth in the weights' (row, column, channel) order, every product rounded before it
    is added (in Eigen's GEMV lanes for one output pixel or one output channel: ``sum_as_the_builtin_gemm``),
    the bias added last.  (A GEMM's other orders are an ulp or two away, which a TF dynamic-range
    MobileNetV2's hybrid layers after it carried to 0.10 of its largest output.)"""
    _check_rank(ctx, "input", x.shape, 4)
    _check_rank(ctx, "filter", w.shape, 4)
    strides, dilations, pads = _geometry(ctx, x.shape, w.shape)
    cout, kh, kw, cin_g = w.shape
    if cin_g == 0 or x.shape[3] % cin_g or cout % (x.shape[3] // cin_g):
        raise ModelExecutionError(f"{ctx.op}: filter {tuple(w.shape)} does not fit {x.shape[3]} input channels")
    groups = x.shape[3] // cin_g
    out_hw = _output_sizes(ctx, x.shape[1:3], (kh, kw), strides, dilations, pads)
    if kh * kw > 1:  # im2col reads each element once per tap
        x = computed_once(xp, lax, x)
    padded = xp.pad(x, ((0, 0), pads[0], pads[1], (0, 0)))
    taps = [_strided_tap(padded, (i * dilations[0], j * dilations[1]), out_hw, strides)
            for i in range(kh) for j in range(kw)]
    per_group = cout // groups
    parts = []
    for g in range(groups):
        columns = [tap[..., g * cin_g:(g + 1) * cin_g] for tap in taps]
        patches = (columns[0] if len(columns) == 1 else xp.concatenate(columns, axis=-1)).reshape(-1, kh * kw * cin_g)
        matrix = w[g * per_group:(g + 1) * per_group].reshape(per_group, -1).T
        parts.append(sum_as_the_builtin_gemm(xp, lax, patches, matrix))
    y = (parts[0] if groups == 1 else xp.concatenate(parts, axis=-1)).reshape(x.shape[0], *out_hw, cout)
    return _finish(ctx, xp, y, bias)


def conv_lowering(x_shape: tuple, w_shape: tuple, strides: tuple, dilations: tuple, out_hw: tuple,
                  target: Target = Target.XLA_CPU) -> str:
    """How float CONV_2D is lowered: "matmul" (1x1), "im2col" (taps concatenated along channels,
    then one GEMM), "depthwise" (one group per input channel: DEPTHWISE_CONV_2D's multiply-add over
    the taps, see bench/cpu/bench_depthwise.py) or "conv" (``lax.conv_general_dilated``).

    Measured with bench/cpu/bench_conv.py (XLA CPU, process CPU time, ms):
    conv / im2col — 128x128x3->24 5x5 s2: 3.05 / 1.30; 224x224x3->32 3x3 s2: 1.49 / 1.26;
    7x7x512->512 3x3: 9.4 / 5.4; 14x14x256->256: 3.0 / 2.5; 14x14x128->128: 0.79 / 0.86;
    56x56x64->64: 1.6 / 3.1.
    So im2col where the input has few channels (the first layer of image models) or the
    output has few pixels; XLA's own convolution elsewhere, and always on GPU (cuDNN)."""
    cout, kh, kw, cin_g = w_shape
    grouped = cin_g != x_shape[-1]
    if kh == kw == 1 and tuple(strides) == (1, 1) and not grouped:
        return "matmul"
    if target is Target.XLA_GPU:
        return "conv"
    if grouped:  # ConvNeXt's 7x7 depthwise layers come out of the converter as grouped CONV_2D
        return "depthwise" if cin_g == 1 else "conv"
    pixels = out_hw[0] * out_hw[1]
    if kh * kw > MAX_IM2COL_TAPS:  # one slice per tap: Basic Pitch's 1x256 kernels took 47 s and 3.9 GB to compile
        return "conv"
    if cin_g <= 4 or pixels <= 64 or (pixels <= 196 and cin_g >= 256):
        return "im2col"
    return "conv"


MAX_IM2COL_TAPS = 64


# --- shared by the ops below -------------------------------------------------

def _strided_tap(x: Any, offsets: tuple, counts: tuple, strides: tuple) -> Any:
    """What one filter tap sees for every output pixel: a strided window of the
    spatial dims (1..k) of ``x``.  Basic slicing, so numpy and jax (``lax.slice``) alike."""
    index = [slice(None)]
    for offset, count, stride in zip(offsets, counts, strides):
        index.append(slice(offset, offset + (count - 1) * stride + 1, stride))
    return x[tuple(index)]


def _output_sizes(ctx: OpContext, in_sizes: tuple, kernel: tuple, strides: tuple, dilations: tuple,
                  pads: list) -> tuple:
    sizes = tuple((n + lo + hi - (k - 1) * d - 1) // s + 1
                  for n, k, s, d, (lo, hi) in zip(in_sizes, kernel, strides, dilations, pads))
    if min(sizes, default=1) <= 0:
        raise ModelExecutionError(f"{ctx.op}: input {in_sizes} is smaller than the filter {kernel} "
                                  f"(dilations {dilations}) with {ctx.options.padding} padding")
    return sizes


def _check_rank(ctx: OpContext, what: str, shape: tuple, rank: int) -> None:
    if len(shape) != rank:
        raise ModelExecutionError(f"{ctx.op}: {what} must have rank {rank}, got shape {tuple(shape)}")


def _float_weights_reason(op: Any, subgraph: Any, index: int) -> str | None:
    """Float ops with integer weights are the hybrid (dynamic-range) kernels: not here yet."""
    if index < len(op.inputs) and op.inputs[index] >= 0:
        dtype = subgraph.tensors[op.inputs[index]].dtype
        if dtype != "float32":
            return f"{dtype} weights with float input (hybrid quantization) are not supported"
    return None


# The official conv kernels (float, hybrid, integer) clamp to CalculateActivationRange's range: a fused TANH or
# SIGN_BIT computes nothing there, and fused_activation / activation_range do the same.
def _finish(ctx: OpContext, xp: Any, y: Any, bias: Any) -> Any:
    if bias is not None:
        y = y + bias
    return fused_activation(xp, y, ctx.options.get("fused_activation_function", "NONE"))


# --- quantized (int8 / uint8) CONV_2D and DEPTHWISE_CONV_2D --------------------------

def _quantized_weights_reason(op: Any, subgraph: Any, *, depthwise: bool = False) -> str | None:
    """The input / weights / bias type combinations the official kernels run."""
    x, w = subgraph.tensors[op.inputs[0]], subgraph.tensors[op.inputs[1]]
    bias = subgraph.tensors[op.inputs[2]] if len(op.inputs) > 2 and op.inputs[2] >= 0 else None
    if x.dtype == "float32":
        grouped = not depthwise and len(w.shape) == 4 and len(x.shape) == 4 and x.shape[3] != w.shape[3]
        return _hybrid_weights_reason(w, depthwise, grouped)
    if x.dtype in q.QUANTIZED_8BIT and w.dtype != x.dtype:  # int8 activations take int8 weights, uint8 take uint8
        return f"{w.dtype} weights with {x.dtype} input are not supported"
    if x.dtype == "int16":
        if w.dtype != "int8":
            return f"{w.dtype} weights with int16 input are not supported (16x8 takes int8 weights)"
        wanted = "int64" if depthwise else _bias_type_16x8(op.options)
        if bias is not None and bias.dtype != wanted:
            # the official kernel would read the bias buffer as the other type
            return f"{bias.dtype} bias with int16 input is not supported here (the options ask for {wanted})"
    return None


def _bias_type_16x8(options: Any) -> str:
    """CONV_2D 16x8 accumulates in int32 only when the options say quantized_bias_type INT32."""
    return "int32" if options.get("quantized_bias_type", "FLOAT32") == "INT32" else "int64"


def _hybrid_weights_reason(w: Any, depthwise: bool, grouped: bool = False) -> str | None:
    if w.dtype == "float32":
        return None
    if w.dtype != "int8":  # the official CONV_2D would read uint8 weights as int8
        return f"{w.dtype} weights with float input are not supported (hybrid kernels take int8)"
    if w.quantization is None or not w.quantization.scale:
        return "int8 weights without a quantization scale"
    if depthwise and len(w.quantization.scale) != w.shape[3]:
        # the official kernel indexes one scale per output channel
        return "hybrid DEPTHWISE_CONV_2D needs one weight scale per output channel"
    if not depthwise and grouped and len(w.quantization.scale) != w.shape[0]:
        return "grouped hybrid CONV_2D needs one weight scale per output channel"
    return None


def _is_hybrid(ctx: OpContext) -> bool:
    return ctx.input(0).dtype == "float32" and ctx.input(1).dtype == "int8"


def _conv_hybrid_per_channel(ctx: OpContext, w: Any) -> bool:
    """CONV_2D takes the per-channel (asymmetric input) hybrid kernel when the weight
    scales differ, or for grouped convolution; otherwise the per-tensor symmetric one."""
    scales = ctx.input(1).quantization.scale
    return len(set(scales)) > 1 or ctx.input(0).shape[-1] != w.shape[3]


def _hybrid_conv(xp: Any, ctx: OpContext, x: Any, w: Any, bias: Any, accumulate: Any, per_channel: bool) -> Any:
    """The dynamic-range kernels: each batch of the float input is quantized to int8 on the
    fly, convolved with the int8 weights in integers, and the int32 result is scaled back
    to float (input scale times weight scale, in float32), plus the float bias.

    Per channel, the input quantization is asymmetric and padding takes the batch's zero
    point (a real 0), which centring then zero padding reproduces; per tensor it is
    symmetric and the weight scale folds into the input's (``scale[0]``)."""
    y_t = ctx.output(0)
    cout = y_t.shape[-1] if y_t.shape else w.shape[0]
    scales = np.asarray(ctx.input(1).quantization.scale, np.float32)
    wc = w.astype(xp.int64)  # the hybrid kernels ignore the weights' zero point
    grouped = accumulate is _conv_accumulate and x.shape[-1] != w.shape[3]
    if per_channel and (accumulate is _depthwise_by_taps or grouped):
        return _hybrid_scaled_in_two_steps(xp, ctx, x, wc, bias, accumulate, scales, cout,
                                           vector_channels=(cout // 4) * 4 if accumulate is _depthwise_by_taps else cout)
    if per_channel:  # HybridConvPerChannel: one factor, the channel's scale times the input's
        xq, input_scale, zero_point = q.asymmetric_quantize_batches(xp, x)
        acc = accumulate(xp, ctx, xq - zero_point.reshape(-1, 1, 1, 1), wc)
        scales = np.broadcast_to(scales, (cout,)) if scales.size == 1 else scales
        factor = (input_scale[:, None] * scales[None, :]).astype(xp.float32)[:, None, None, :]
    else:
        xq, input_scale = q.symmetric_quantize_batches(xp, x)
        acc = accumulate(xp, ctx, xq, wc)
        factor = (input_scale * scales[0]).astype(xp.float32).reshape(-1, 1, 1, 1)
    y = fp.wrap_int32(xp, acc).astype(xp.float32) * factor
    # the scaled accumulator rounded before the bias is added (XLA CPU contracted them into one fused
    # multiply-add: an ulp off the builtin kernel, measured on a TF dynamic-range MobileNetV2)
    y = rounded_apart(xp, None if xp is np else ctx.lax, y)
    return _finish(ctx, xp, y, None if bias is None else bias.astype(xp.float32))


def _hybrid_scaled_in_two_steps(xp: Any, ctx: OpContext, x: Any, wc: Any, bias: Any, accumulate: Any,
                                scales: np.ndarray, cout: int, vector_channels: int) -> Any:
    """The hybrid kernels that scale the integer sum by the channel's and the input's scale one after the other
    (measured bit for bit): the optimized DEPTHWISE_CONV_2D (DoDepthwiseConvHybridGeneral, whose NEON code the
    x86 wheel runs through NEON_2_SSE) takes the channel's scale first on the channels it handles four at a time
    (the first ``vector_channels``) and the input's first on the rest; the reference HybridConvPerChannel
    (grouped CONV_2D) takes the channel's first."""
    lax = None if xp is np else ctx.lax
    xq, input_scale, zero_point = q.asymmetric_quantize_batches(xp, x)
    acc = fp.wrap_int32(xp, accumulate(xp, ctx, xq - zero_point.reshape(-1, 1, 1, 1), wc)).astype(xp.float32)
    channel = (np.broadcast_to(scales, (cout,)) if scales.size == 1 else scales).astype(np.float32)
    batch = input_scale.astype(xp.float32).reshape(-1, 1, 1, 1)
    channel_first = rounded_apart(xp, lax, rounded_apart(xp, lax, acc * channel) * batch)
    if vector_channels < cout:
        input_first = rounded_apart(xp, lax, rounded_apart(xp, lax, acc * batch) * channel)
        channel_first = xp.where(np.arange(cout) < vector_channels, channel_first, input_first)
    return _finish(ctx, xp, channel_first, None if bias is None else bias.astype(xp.float32))


def _quantized_conv_16x8(xp: Any, ctx: OpContext, x: Any, w: Any, bias: Any, accumulate: Any,
                         input_index: int = 0) -> Any:
    """``ConvPerChannel`` on int16 activations and int8 weights (zero points 0).  By default
    the accumulator and bias are int64 and the reference kernel rescales with the
    single-rounding 64-bit MultiplyByQuantizedMultiplier.  CONV_2D with quantized_bias_type
    INT32 runs the optimized int32 GEMM instead, whose rescale is ruy's half-up double
    rounding (measured: TFLite's rounding differs by 1 there)."""
    y_t = ctx.output(0)
    in_scale, _ = q.scale_and_zero_point(ctx, ctx.input(input_index), "input")
    out_scale, out_zp = q.scale_and_zero_point(ctx, y_t, "output")
    cout = y_t.shape[-1] if y_t.shape else w.shape[-1]
    multipliers, shifts = q.per_channel_multipliers(in_scale, q.channel_scales(ctx, ctx.input(1), "filter", cout),
                                                    out_scale)
    low, high = q.activation_range(ctx.options.get("fused_activation_function", "NONE"), out_scale, out_zp, y_t.dtype)
    acc = accumulate(xp, ctx, x.astype(xp.int64), w.astype(xp.int64))
    if bias is not None:
        acc = acc + bias.astype(xp.int64)
    if ctx.op.opcode_name != "DEPTHWISE_CONV_2D" and _bias_type_16x8(ctx.options) == "int32":
        scaled = q.ruy_multiply_by_quantized_multiplier(xp, fp.wrap_int32(xp, acc), multipliers, shifts)
    else:
        scaled = fp.multiply_by_quantized_multiplier_int64(xp, acc, multipliers, shifts)
    return xp.clip(scaled + out_zp, low, high)


def _is_grouped(x: Any, w: Any) -> bool:
    """Grouped CONV_2D: the official kernel runs it only with its reference per-channel kernel, whose
    rescale is gemmlowp's (rounding half away from zero), not ruy's GEMM (half up)."""
    return len(x.shape) == 4 and len(w.shape) == 4 and w.shape[3] != x.shape[3]


def _conv_accumulate(xp: Any, ctx: OpContext, x: Any, w: Any) -> Any:
    """Integer correlation of zero-centred (zero-padded) input and weights: the int32 accumulator."""
    (sh, sw), (dh, dw), pads = _geometry(ctx, x.shape, w.shape)
    _check_rank(ctx, "input", x.shape, 4)
    _check_rank(ctx, "filter", w.shape, 4)
    cout, kh, kw, cin_g = w.shape
    if cin_g == 0 or x.shape[3] % cin_g or cout % (x.shape[3] // cin_g):
        raise ModelExecutionError(f"{ctx.op}: filter {tuple(w.shape)} does not fit {x.shape[3]} input channels")
    groups = x.shape[3] // cin_g
    if groups > 1 and cin_g == 1 and xp is not np:
        # One input channel per group (ConvNeXt's 7x7 layers, as the converter writes them): DEPTHWISE_CONV_2D's
        # multiply-add over the taps.  A GEMM per group made an HLO of groups x taps slices (96 x 49 in
        # ConvNeXt-Tiny) that XLA's simplifier looped on until it exhausted memory (16 GB, then abort).
        return _depthwise_by_taps(xp, ctx, x, xp.transpose(w, (3, 1, 2, 0)))
    out_hw = _output_sizes(ctx, x.shape[1:3], (kh, kw), (sh, sw), (dh, dw), pads)
    x = xp.pad(x, ((0, 0), pads[0], pads[1], (0, 0)))
    per_group = cout // groups
    parts = []
    for g in range(groups):
        xs = x[..., g * cin_g:(g + 1) * cin_g]
        wg = w[g * per_group:(g + 1) * per_group]
        taps = [_strided_tap(xs, (i * dh, j * dw), out_hw, (sh, sw)) for i in range(kh) for j in range(kw)]
        if xp is np:
            acc = None
            for n, tap in enumerate(taps):
                term = xp.matmul(tap, wg[:, n // kw, n % kw, :].T)
                acc = term if acc is None else acc + term
        else:
            # im2col: one exact GEMM over (tap, channel), the taps in the weights' (i, j, c) order
            patches = taps[0] if len(taps) == 1 else xp.concatenate(taps, axis=-1)
            matrix = wg.reshape(wg.shape[0], -1).T
            acc = q.exact_matmul(xp, patches, matrix, _integer_dot_bound(ctx, matrix))
        parts.append(acc)
    return parts[0] if groups == 1 else xp.concatenate(parts, axis=-1)


def _integer_input_magnitude(ctx: OpContext) -> int:
    """The largest |x| the integer accumulators see: the centred 8-bit input, the hybrid
    kernels' on-the-fly int8 quantization minus its zero point, or an int16 input."""
    x_t = ctx.input(2 if ctx.op.opcode_name == "TRANSPOSE_CONV" else 0)
    if x_t.dtype in q.QUANTIZED_8BIT and q.is_quantized(x_t):
        return q.centred_magnitude(x_t.dtype, q.scale_and_zero_point(ctx, x_t, "input")[1])
    if x_t.dtype == "int16":
        return 1 << 16
    return 255


def _integer_dot_bound(ctx: OpContext, matrix: Any) -> int:
    """Bound on every accumulator sum (see ``_quantized.exact_matmul``): exact from the weights'
    values when they are constants, from their dtype's range otherwise."""
    magnitude = _integer_input_magnitude(ctx)
    if isinstance(matrix, np.ndarray):
        return q.dot_bound(magnitude, matrix, 0)
    return magnitude * (1 << 16) * int(matrix.shape[0])


def _depthwise_vector_channels(ctx: OpContext, channels: int) -> Any:
    """The official optimized per-channel depthwise kernel rescales whole blocks of 8
    channels with the (x86-emulated) NEON instructions, which round half up, and the
    remaining channels with the scalar MultiplyByQuantizedMultiplier (half away from
    zero).  Measured against the official runtime (20 channels: 16..19 round the scalar way)."""
    if ctx.input(0).dtype == "uint8":
        return False  # the per-tensor uint8 kernel: scalar rounding throughout (measured)
    return np.arange(channels) < channels // 8 * 8


def _quantized_conv(xp: Any, ctx: OpContext, x: Any, w: Any, bias: Any, accumulate: Any, *, ruy: Any,
                    input_index: int = 0) -> Any:
    """TFLite's integer convolution: sum((x - x_zp) * (w - w_zp)) + bias, rescaled per output
    channel by QuantizeMultiplier(in_scale * w_scale / out_scale), plus the output zero
    point, clamped to the fused activation's quantized range."""
    x_t, w_t, y_t = ctx.input(input_index), ctx.input(1), ctx.output(0)
    in_scale, in_zp = q.scale_and_zero_point(ctx, x_t, "input")
    out_scale, out_zp = q.scale_and_zero_point(ctx, y_t, "output")
    cout = y_t.shape[-1] if y_t.shape else w.shape[0]
    w_scales = q.channel_scales(ctx, w_t, "filter", cout)
    w_zp = int(w_t.quantization.zero_point[0]) if w_t.quantization.zero_point else 0
    multipliers, shifts = q.per_channel_multipliers(in_scale, w_scales, out_scale)
    low, high = q.activation_range(ctx.options.get("fused_activation_function", "NONE"), out_scale, out_zp, y_t.dtype)
    # Centring first makes the zero padding equal to the official "pad with the zero point".
    xc = x.astype(xp.int64) - in_zp
    wc = w.astype(xp.int64) - w_zp
    acc = accumulate(xp, ctx, xc, wc)
    if bias is not None:
        acc = acc + bias.astype(xp.int64)
    return q.requantize_accumulator(xp, acc, multipliers, shifts, out_zp, low, high, ruy=ruy)


# --- DEPTHWISE_CONV_2D ---------------------------------------------------------

def _depthwise_geometry(ctx: OpContext, x_shape: tuple, w_shape: tuple) -> tuple:
    _check_rank(ctx, "input", x_shape, 4)
    _check_rank(ctx, "filter", w_shape, 4)
    cin, cout = x_shape[3], w_shape[3]
    if w_shape[0] != 1 or cin == 0 or cout % cin:
        raise ModelExecutionError(f"{ctx.op}: filter must be [1, KH, KW, C*multiplier] for {cin} input "
                                  f"channels, got {tuple(w_shape)}")
    strides, dilations, pads = _geometry(ctx, x_shape, w_shape)
    out_hw = _output_sizes(ctx, x_shape[1:3], w_shape[1:3], strides, dilations, pads)
    return strides, dilations, pads, out_hw, cout // cin


def _depthwise_by_taps(xp: Any, ctx: OpContext, x: Any, w: Any) -> Any:
    """Sum over the filter taps of shifted input slices times per-channel weights."""
    (sh, sw), (dh, dw), pads, out_hw, multiplier = _depthwise_geometry(ctx, x.shape, w.shape)
    x = xp.pad(x, ((0, 0), pads[0], pads[1], (0, 0)))
    if multiplier > 1:  # output channel c*m + k reads input channel c
        x = xp.repeat(x, multiplier, axis=3)
    exact_in = _exact_float_type(xp, ctx, x, w)
    if exact_in is not None:  # integers as floats: several times faster vectors than int64 (see exact_matmul)
        x, w = x.astype(exact_in), w.astype(exact_in)
    out = None
    for i in range(w.shape[1]):
        for j in range(w.shape[2]):
            term = _strided_tap(x, (i * dh, j * dw), out_hw, (sh, sw)) * w[0, i, j]
            out = term if out is None else out + term
    return out if exact_in is None else out.astype(xp.int64)


def _depthwise_in_official_order(xp: Any, lax: Any, ctx: OpContext, x: Any, w: Any, bias: Any) -> Any:
    """Float DEPTHWISE_CONV_2D as the builtin kernel sums it (measured bit for bit on the x86 wheel): the
    accumulator starts at the bias, then takes the taps in (row, column) order, every product rounded before it
    is added."""
    (sh, sw), (dh, dw), pads, out_hw, multiplier = _depthwise_geometry(ctx, x.shape, w.shape)
    x = xp.pad(computed_once(xp, lax, x), ((0, 0), pads[0], pads[1], (0, 0)))  # read once per tap
    if multiplier > 1:  # output channel c*m + k reads input channel c
        x = xp.repeat(x, multiplier, axis=3)
    shape = (x.shape[0], *out_hw, w.shape[3])
    acc = xp.zeros(shape, xp.float32) if bias is None else xp.broadcast_to(bias.astype(xp.float32), shape)
    for i in range(w.shape[1]):
        for j in range(w.shape[2]):
            acc = acc + rounded_apart(xp, lax, _strided_tap(x, (i * dh, j * dw), out_hw, (sh, sw)) * w[0, i, j])
    return fused_activation(xp, acc, ctx.options.get("fused_activation_function", "NONE"))


def _exact_float_type(xp: Any, ctx: OpContext, x: Any, w: Any) -> Any:
    """float32 when an integer depthwise sum provably stays exact in it under XLA, else None."""
    if xp is np or np.dtype(x.dtype).kind not in "iu" or not isinstance(w, np.ndarray):
        return None
    taps = np.abs(w.astype(np.int64)).sum(axis=(0, 1, 2)).max() if w.size else 0
    return xp.float32 if _integer_input_magnitude(ctx) * int(taps) < q.F32_EXACT else None


@register("DEPTHWISE_CONV_2D")
class DepthwiseConv2D(Op):
    dtypes = ("float32", "int8", "uint8", "int16")

    def unsupported_reason(self, op, subgraph, target):
        return super().unsupported_reason(op, subgraph, target) or \
            _quantized_weights_reason(op, subgraph, depthwise=True)

    def reference(self, ctx: OpContext, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
        if _is_hybrid(ctx):
            return _hybrid_conv(np, ctx, x, w, bias, _depthwise_by_taps, per_channel=True)
        if ctx.input(0).dtype == "int16":
            return _quantized_conv_16x8(np, ctx, x, w, bias, _depthwise_by_taps)
        if x.dtype.kind in "iu":
            return _quantized_conv(np, ctx, x, w, bias, _depthwise_by_taps, ruy=_depthwise_vector_channels(ctx, w.shape[3]))
        if x.dtype == np.float32 and w.dtype == np.float32:
            return _depthwise_in_official_order(np, None, ctx, x, w, bias)
        y = _depthwise_by_taps(np, ctx, x.astype(np.float32), w.astype(np.float32))
        return _finish(ctx, np, y, None if bias is None else bias.astype(np.float32))

    def lower(self, ctx: OpContext, x: Any, w: Any, bias: Any = None) -> Any:
        # Measured with bench/cpu/bench_depthwise.py (XLA CPU, 2 shared cores, jit, 3x3, SAME,
        # best of 20, ms):  taps  grouped conv
        #   112x112x32 s1    0.66   10.30   (15.6x)
        #   112x112x96 s2    1.59    9.01   ( 5.7x)
        #   56x56x144  s1    0.71   13.74   (19.3x)
        #   28x28x192  s1    0.31    4.68   (15.2x)
        #   14x14x576  s1    0.59    5.18   ( 8.7x)
        #   7x7x960    s1    0.25    2.46   (10.0x)
        # XLA CPU has no fast path for feature_group_count == channels, so the unrolled
        # multiply-add of shifted slices wins there; on GPU the grouped convolution is a
        # native cuDNN kernel, so it stays.
        if _is_hybrid(ctx):
            return _hybrid_conv(ctx.xp, ctx, x, w, bias, _depthwise_by_taps, per_channel=True)
        if ctx.input(0).dtype == "int16":
            return _quantized_conv_16x8(ctx.xp, ctx, x, w, bias, _depthwise_by_taps)
        if ctx.input(0).dtype in q.QUANTIZED_8BIT:
            return _quantized_conv(ctx.xp, ctx, x, w, bias, _depthwise_by_taps, ruy=_depthwise_vector_channels(ctx, w.shape[3]))
        if ctx.target is Target.XLA_GPU:
            return _finish(ctx, ctx.xp, self._grouped_conv(ctx, x, w), bias)
        if ctx.official_float_order and x.dtype == np.float32 and w.dtype == np.float32:
            return _depthwise_in_official_order(ctx.xp, ctx.lax, ctx, x, w, bias)
        return _finish(ctx, ctx.xp, _depthwise_by_taps(ctx.xp, ctx, x, w), bias)

    @staticmethod
    def _grouped_conv(ctx: OpContext, x: Any, w: Any) -> Any:
        lax = ctx.lax
        strides, dilations, pads, _, _ = _depthwise_geometry(ctx, x.shape, w.shape)
        return lax.conv_general_dilated(
            x, w[0][:, :, None, :], window_strides=strides, padding=pads, rhs_dilation=dilations,
            dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=x.shape[3],
            precision=lax.Precision.HIGHEST)


# --- TRANSPOSE_CONV --------------------------------------------------------------

def _transpose_conv_geometry(ctx: OpContext, output_shape: Any, w_shape: tuple, x_shape: tuple) -> tuple:
    out_shape = tuple(int(d) for d in ctx.static(output_shape).reshape(-1))
    _check_rank(ctx, "input", x_shape, 4)
    _check_rank(ctx, "weights", w_shape, 4)
    if len(out_shape) != 4 or out_shape[0] != x_shape[0] or out_shape[3] != w_shape[0] \
            or w_shape[3] != x_shape[3]:
        raise ModelExecutionError(f"{ctx.op}: output_shape {list(out_shape)}, weights {tuple(w_shape)} "
                                  f"[out, KH, KW, in] and input {tuple(x_shape)} do not agree")
    strides = (ctx.options.stride_h, ctx.options.stride_w)
    # Padding is that of the forward convolution from the output back to the input;
    # only its leading part matters (the kernel crops the scattered result there).
    for a in range(2):
        forward = conv_output_size(out_shape[1 + a], w_shape[1 + a], strides[a], 1, ctx.options.padding)
        if forward != x_shape[1 + a]:
            raise ModelExecutionError(f"{ctx.op}: output_shape {list(out_shape)} convolved back with "
                                      f"{ctx.options.padding} padding gives {forward} pixels on axis {1 + a}, "
                                      f"not the input's {x_shape[1 + a]}")
    if ctx.options.padding == "SAME":
        pads = tuple(same_padding(out_shape[1 + a], w_shape[1 + a], strides[a])[0] for a in range(2))
    else:
        pads = (0, 0)
    return out_shape, strides, pads


def _transpose_conv_reason(op: Any, subgraph: Any) -> str | None:
    """TRANSPOSE_CONV's inputs are (output_shape, weights, input, bias): the type checks of
    CONV_2D, on its own input positions."""
    x, w = subgraph.tensors[op.inputs[2]], subgraph.tensors[op.inputs[1]]
    bias = subgraph.tensors[op.inputs[3]] if len(op.inputs) > 3 and op.inputs[3] >= 0 else None
    if x.dtype == "float32":
        return _hybrid_weights_reason(w, depthwise=False)
    if x.dtype in q.QUANTIZED_8BIT and w.dtype != x.dtype:
        return f"{w.dtype} weights with {x.dtype} input are not supported"
    if x.dtype == "int16":
        if w.dtype != "int8":
            return f"{w.dtype} weights with int16 input are not supported (16x8 takes int8 weights)"
        wanted = _bias_type_16x8(op.options)
        if bias is not None and bias.dtype != wanted:
            return f"{bias.dtype} bias with int16 input is not supported here (the options ask for {wanted})"
    return None


def _transpose_accumulate(xp: Any, ctx: OpContext, output_shape: Any, x: Any, w: Any) -> Any:
    """Scatter-add of every input pixel times each filter tap into the (stride-spaced)
    output, cropped by the padding: exact in integers, the float reference's order too."""
    out_shape, (sh, sw), (ph, pw) = _transpose_conv_geometry(ctx, output_shape, w.shape, x.shape)
    n, h, wd, _ = x.shape
    cout, kh, kw, _ = w.shape
    full_shape = (n, max((h - 1) * sh + kh, ph + out_shape[1]), max((wd - 1) * sw + kw, pw + out_shape[2]), cout)
    dtype = xp.result_type(x.dtype, w.dtype)
    full = xp.zeros(full_shape, dtype)
    for i in range(kh):
        for j in range(kw):
            window = (slice(None), slice(i, i + (h - 1) * sh + 1, sh), slice(j, j + (wd - 1) * sw + 1, sw), slice(None))
            term = xp.matmul(x, w[:, i, j, :].T)
            if xp is np:
                full[window] += term
            else:
                full = full.at[window].add(term)
    return full[:, ph:ph + out_shape[1], pw:pw + out_shape[2], :]


def _transpose_vector_lanes(dtype: str, out_shape: tuple) -> np.ndarray:
    """Where the official optimized TRANSPOSE_CONV rescales with (x86-emulated) NEON
    vectors, which round half up; elsewhere the scalar MultiplyByQuantizedMultiplier
    rounds half away from zero.  Measured with exact ties: int8 (per channel) vectorizes
    whole blocks of 8 channels; uint8 (one multiplier) whole blocks of 16 elements of the
    flattened output."""
    if dtype == "int8":
        return np.arange(out_shape[3]) < out_shape[3] // 8 * 8
    size = int(np.prod(out_shape))
    return np.arange(size).reshape(out_shape) < size // 16 * 16


@register("TRANSPOSE_CONV")
class TransposeConv(Op):
    dtypes = ("float32", "int8", "uint8", "int16")

    def input_dtype(self, op, subgraph):
        if len(op.inputs) > 2 and op.inputs[2] >= 0:
            return subgraph.tensors[op.inputs[2]].dtype  # input 0 is the int32 output shape
        return super().input_dtype(op, subgraph)

    def unsupported_reason(self, op, subgraph, target):
        return super().unsupported_reason(op, subgraph, target) or _transpose_conv_reason(op, subgraph)

    def _integer(self, xp: Any, ctx: OpContext, output_shape: Any, w: Any, x: Any, bias: Any) -> Any | None:
        """The hybrid and quantized kernels, or None for float weights and input."""
        def accumulate(xp_, ctx_, xc, wc):
            return _transpose_accumulate(xp_, ctx_, output_shape, xc, wc)

        dtype = ctx.input(2).dtype
        if dtype == "float32" and ctx.input(1).dtype == "int8":
            # reference_ops::HybridTransposeConv: per-batch asymmetric input, per-channel scales
            return _hybrid_conv(xp, ctx, x, w, bias, accumulate, per_channel=True)
        if dtype == "int16":
            return _quantized_conv_16x8(xp, ctx, x, w, bias, accumulate, input_index=2)
        if dtype in q.QUANTIZED_8BIT:
            out_shape = _transpose_conv_geometry(ctx, output_shape, w.shape, x.shape)[0]
            return _quantized_conv(xp, ctx, x, w, bias, accumulate, ruy=_transpose_vector_lanes(dtype, out_shape),
                                   input_index=2)
        return None

    def reference(self, ctx: OpContext, output_shape: Any, w: np.ndarray, x: np.ndarray,
                  bias: np.ndarray | None = None) -> np.ndarray:
        integer = self._integer(np, ctx, output_shape, w, x, bias)
        if integer is not None:
            return integer
        y = _transpose_accumulate(np, ctx, output_shape, x.astype(np.float32), w.astype(np.float32))
        return _finish(ctx, np, y, None if bias is None else bias.astype(np.float32))

    def lower(self, ctx: OpContext, output_shape: Any, w: Any, x: Any, bias: Any = None) -> Any:
        integer = self._integer(ctx.xp, ctx, output_shape, w, x, bias)
        if integer is not None:
            return integer
        lax = ctx.lax
        out_shape, strides, pads = _transpose_conv_geometry(ctx, output_shape, w.shape, x.shape)
        # A stride-1 correlation of the stride-dilated input with the flipped filter;
        # lax.pad takes the (possibly negative) edge padding and the dilation at once.
        edges = []
        for a in range(2):
            k, n, s, p = w.shape[1 + a], x.shape[1 + a], strides[a], pads[a]
            lo = k - 1 - p
            edges.append((lo, out_shape[1 + a] + k - 1 - ((n - 1) * s + 1) - lo, s - 1))
        xd = lax.pad(x, np.array(0, x.dtype), [(0, 0, 0), edges[0], edges[1], (0, 0, 0)])
        y = lax.conv_general_dilated(
            xd, w[:, ::-1, ::-1, :], window_strides=(1, 1), padding="VALID",
            dimension_numbers=("NHWC", "OHWI", "NHWC"), precision=lax.Precision.HIGHEST)
        return _finish(ctx, ctx.xp, y, bias)


# --- CONV_3D -----------------------------------------------------------------------

def _conv3d_geometry(ctx: OpContext, x_shape: tuple, w_shape: tuple) -> tuple:
    _check_rank(ctx, "input", x_shape, 5)
    _check_rank(ctx, "filter", w_shape, 5)
    if w_shape[3] != x_shape[4]:
        raise ModelExecutionError(f"{ctx.op}: filter [KD, KH, KW, in, out] {tuple(w_shape)} does not match "
                                  f"the {x_shape[4]} input channels")
    o = ctx.options
    strides = (o.stride_d, o.stride_h, o.stride_w)
    dilations = (o.dilation_d_factor, o.dilation_h_factor, o.dilation_w_factor)
    if o.padding == "SAME":
        pads = [same_padding(x_shape[1 + a], w_shape[a], strides[a], dilations[a]) for a in range(3)]
    else:
        pads = [(0, 0)] * 3
    out_sizes = _output_sizes(ctx, x_shape[1:4], w_shape[:3], strides, dilations, pads)
    return strides, dilations, pads, out_sizes


@register("CONV_3D")
class Conv3D(Op):
    dtypes = ("float32",)

    def unsupported_reason(self, op, subgraph, target):
        return super().unsupported_reason(op, subgraph, target) or _float_weights_reason(op, subgraph, 1)

    def reference(self, ctx: OpContext, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
        strides, dilations, pads, out_sizes = _conv3d_geometry(ctx, x.shape, w.shape)
        xp = np.pad(x.astype(np.float32), [(0, 0), *pads, (0, 0)])
        wf = w.astype(np.float32)
        out = np.zeros((x.shape[0], *out_sizes, w.shape[4]), np.float32)
        for a in range(w.shape[0]):
            for b in range(w.shape[1]):
                for c in range(w.shape[2]):
                    offsets = (a * dilations[0], b * dilations[1], c * dilations[2])
                    out += _strided_tap(xp, offsets, out_sizes, strides) @ wf[a, b, c]
        return _finish(ctx, np, out, None if bias is None else bias.astype(np.float32))

    def lower(self, ctx: OpContext, x: Any, w: Any, bias: Any = None) -> Any:
        lax = ctx.lax
        strides, dilations, pads, _ = _conv3d_geometry(ctx, x.shape, w.shape)
        y = lax.conv_general_dilated(
            x, w, window_strides=strides, padding=pads, rhs_dilation=dilations,
            dimension_numbers=("NDHWC", "DHWIO", "NDHWC"), precision=lax.Precision.HIGHEST)
        return _finish(ctx, ctx.xp, y, bias)
