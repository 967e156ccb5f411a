"""CONV_2D / DEPTHWISE_CONV_2D / TRANSPOSE_CONV beyond int8: hybrid (float input, int8
weights), 16x8 (int16 activations, int8 weights), and quantized TRANSPOSE_CONV.

Rounding choices of the official optimized kernels only show on exact ties, which random
data rarely hits; the ``*_ties`` tests use power-of-two scales so that a quarter of the
accumulators are ties, and fail if the rounding of any lane is wrong."""

import numpy as np
import pytest

from litegpu.ir import read_model
from litegpu.ir.builder import ModelBuilder, quantization
from litegpu.ir.save import to_bytes
from litegpu.ops import Target, find
from litegpu.ops._common import conv_output_size
from oracle import assert_builtin_bits, check_op_model, random_input


def conv_model(op, x_shape, w_shape, *, x_dtype="float32", x_quant=None, w_scales=(0.02,), w_values=None,
               bias="auto", y_quant=None, padding="SAME", stride=1, dilation=1, activation="NONE", seed=0,
               zero_bias=False, **options):
    """One CONV_2D / DEPTHWISE_CONV_2D with int8 weights (per-channel when several scales)."""
    rng = np.random.default_rng(seed)
    b = ModelBuilder()
    x = b.input("x", x_shape, x_dtype, quantization=x_quant)
    cout = w_shape[0] if op == "CONV_2D" else w_shape[3]
    values = rng.integers(-127, 128, w_shape) if w_values is None else w_values
    w = b.constant("w", np.asarray(values, np.int8),
                   quantization=quantization(w_scales, 0, axis=0 if op == "CONV_2D" else 3))
    inputs = [x, w]
    if bias == "auto":
        bias = "float32" if x_dtype == "float32" else "int64"
    if bias == "float32":
        inputs.append(b.constant("bias", rng.standard_normal(cout).astype(np.float32)))
    elif bias:
        bias_scales = np.float32(x_quant.scale[0]) * np.broadcast_to(np.asarray(w_scales, np.float32), (cout,))
        values = np.zeros(cout) if zero_bias else rng.integers(-20000, 20000, cout)
        inputs.append(b.constant("bias", values.astype(bias),
                                 quantization=quantization(bias_scales, 0)))
    oh = conv_output_size(x_shape[1], w_shape[1], stride, dilation, padding)
    ow = conv_output_size(x_shape[2], w_shape[2], stride, dilation, padding)
    y = b.tensor("y", (x_shape[0], oh, ow, cout), x_dtype, quantization=y_quant)
    b.op(op, inputs, [y], padding=padding, stride_h=stride, stride_w=stride, dilation_h_factor=dilation,
         dilation_w_factor=dilation, fused_activation_function=activation, **options)
    b.output(y)
    return b.build()


# --- hybrid: float input quantized per batch on the fly --------------------------------------

HYBRID_CONV_CASES = {  # x shape, w shape, scales, padding, stride, dilation
    "per_channel_3x3_s2": ((2, 7, 6, 3), (4, 3, 3, 3), np.linspace(0.01, 0.03, 4), "SAME", 2, 1),
    "per_tensor_3x3": ((2, 7, 6, 3), (4, 3, 3, 3), [0.02], "SAME", 1, 1),
    "equal_scales_take_per_tensor": ((2, 6, 6, 3), (4, 3, 3, 3), [0.02] * 4, "VALID", 1, 1),
    "per_channel_1x1": ((1, 5, 5, 8), (6, 1, 1, 8), np.linspace(0.01, 0.03, 6), "VALID", 1, 1),
    "per_channel_dilated": ((1, 9, 8, 3), (5, 3, 2, 3), np.linspace(0.01, 0.03, 5), "SAME", 1, 2),
    "grouped": ((1, 6, 6, 4), (4, 3, 3, 2), np.linspace(0.01, 0.03, 4), "SAME", 1, 1),
}
INPUT_RANGES = {"mixed": (-3, 3), "positive": (0.5, 3), "negative": (-2, -0.1)}


HYBRID_GRID = [(case, "mixed") for case in sorted(HYBRID_CONV_CASES)] + [
    ("per_channel_3x3_s2", "positive"), ("per_channel_3x3_s2", "negative"), ("per_tensor_3x3", "negative")]


@pytest.mark.parametrize("case,values", HYBRID_GRID)
def test_hybrid_conv2d_matches_official(case, values):
    x_shape, w_shape, scales, padding, stride, dilation = HYBRID_CONV_CASES[case]
    model = conv_model("CONV_2D", x_shape, w_shape, w_scales=scales, padding=padding, stride=stride,
                       dilation=dilation, activation="RELU6" if values == "mixed" else "NONE")
    low, high = INPUT_RANGES[values]
    check_op_model(model, [random_input(x_shape, low=low, high=high, seed=5)])


def test_hybrid_conv2d_all_zero_batch_matches_official():
    x = random_input((2, 5, 5, 3), seed=1)
    x[1] = 0  # the per-batch quantization of an all-zero batch is special-cased
    for scales in ([0.02], np.linspace(0.01, 0.03, 4)):
        check_op_model(conv_model("CONV_2D", x.shape, (4, 3, 3, 3), w_scales=scales), [x])


@pytest.mark.parametrize("multiplier,stride,padding,values", [(1, 2, "SAME", "mixed"), (2, 1, "VALID", "mixed"),
                                                               (1, 1, "SAME", "positive")])
def test_hybrid_depthwise_matches_official(multiplier, stride, padding, values):
    cout = 3 * multiplier
    model = conv_model("DEPTHWISE_CONV_2D", (2, 7, 6, 3), (1, 3, 3, cout), w_scales=np.linspace(0.01, 0.03, cout),
                       padding=padding, stride=stride, depth_multiplier=multiplier, activation="RELU")
    low, high = INPUT_RANGES[values]
    check_op_model(model, [random_input((2, 7, 6, 3), low=low, high=high, seed=6)])


@pytest.mark.parametrize("case", sorted(HYBRID_CONV_CASES))
def test_hybrid_conv2d_equals_the_builtin_kernel_bit_for_bit(case):
    """HybridConvPerChannel scales the integer sum by (channel scale x input scale), rounds, then adds the bias:
    XLA CPU contracted the last two into one fused multiply-add (an ulp off, which a TF dynamic-range MobileNetV2's
    later layers carried to 0.10 of its largest output)."""
    x_shape, w_shape, scales, padding, stride, dilation = HYBRID_CONV_CASES[case]
    model = conv_model("CONV_2D", x_shape, w_shape, w_scales=scales, padding=padding, stride=stride,
                       dilation=dilation, activation="RELU6")
    assert_builtin_bits(read_model(to_bytes(model)), [random_input(x_shape, seed=7)])


@pytest.mark.parametrize("multiplier,stride,padding", [(1, 2, "SAME"), (2, 1, "VALID"), (1, 1, "SAME")])
def test_hybrid_depthwise_equals_the_builtin_kernel_bit_for_bit(multiplier, stride, padding):
    """DepthwiseConvHybridPerChannel scales by the channel's scale first, then by the input's."""
    cout = 3 * multiplier
    model = conv_model("DEPTHWISE_CONV_2D", (2, 7, 6, 3), (1, 3, 3, cout), w_scales=np.linspace(0.01, 0.03, cout),
                       padding=padding, stride=stride, depth_multiplier=multiplier, activation="RELU6")
    assert_builtin_bits(read_model(to_bytes(model)), [random_input((2, 7, 6, 3), seed=8)])


# --- 16x8: int16 activations (zero point 0), int8 weights ------------------------------------

X16, Y16 = quantization(0.0007, 0), quantization(0.0031, 0)


@pytest.mark.parametrize("bias_type,activation", [("int64", "NONE"), ("int32", "RELU")])
@pytest.mark.parametrize("w_shape,stride", [((4, 3, 3, 5), 2), ((20, 1, 1, 5), 1)])
def test_16x8_conv2d_matches_official(w_shape, stride, bias_type, activation):
    options = {"quantized_bias_type": "INT32"} if bias_type == "int32" else {}
    model = conv_model("CONV_2D", (2, 7, 6, 5), w_shape, x_dtype="int16", x_quant=X16, y_quant=Y16,
                       w_scales=np.linspace(0.003, 0.02, w_shape[0]), bias=bias_type, stride=stride,
                       activation=activation, **options)
    check_op_model(model, [random_input((2, 7, 6, 5), "int16", low=-3000, high=3000, seed=4)])


@pytest.mark.parametrize("multiplier,activation", [(1, "NONE"), (2, "RELU6")])
def test_16x8_depthwise_matches_official(multiplier, activation):
    cout = 5 * multiplier
    model = conv_model("DEPTHWISE_CONV_2D", (2, 7, 6, 5), (1, 3, 3, cout), x_dtype="int16", x_quant=X16,
                       y_quant=quantization(0.004, 0), w_scales=np.linspace(0.003, 0.02, cout), stride=2,
                       depth_multiplier=multiplier, activation=activation)
    check_op_model(model, [random_input((2, 7, 6, 5), "int16", low=-3000, high=3000, seed=4)])


def tie_weights(shape, seed=0):
    return np.random.default_rng(seed).integers(-8, 9, shape)


@pytest.mark.parametrize("op,bias_type", [("CONV_2D", "int64"), ("CONV_2D", "int32"), ("DEPTHWISE_CONV_2D", "int64")])
def test_16x8_rounding_on_ties_matches_official(op, bias_type):
    # in 0.5 * w 0.25 / out 0.5: the accumulator is divided by exactly 4
    options = {"quantized_bias_type": "INT32"} if bias_type == "int32" else {}
    if op == "DEPTHWISE_CONV_2D":
        options["depth_multiplier"] = 1
    w_shape = (12, 1, 1, 6) if op == "CONV_2D" else (1, 1, 1, 6)
    model = conv_model(op, (1, 6, 6, 6), w_shape, x_dtype="int16", x_quant=quantization(0.5, 0),
                       y_quant=quantization(0.5, 0), w_scales=[0.25], w_values=tie_weights(w_shape), bias=bias_type,
                       zero_bias=True, **options)
    check_op_model(model, [random_input((1, 6, 6, 6), "int16", low=-3, high=3, seed=2)])


# --- TRANSPOSE_CONV: int8 per-channel, uint8, 16x8, hybrid ------------------------------------

def transpose_model(dtype, in_shape, out_hw, kernel, cout, padding, stride, *, bias=True, bias_type=None,
                    x_quant=None, y_quant=None, w_quant=None, w_values=None, activation="NONE", seed=0):
    rng = np.random.default_rng(seed)
    n, _, _, cin = in_shape
    b = ModelBuilder()
    shape = b.constant("output_shape", np.array([n, *out_hw, cout], np.int32))
    w_dtype = np.uint8 if dtype == "uint8" else np.int8
    if w_values is None:
        w_values = rng.integers(0, 256, (cout, *kernel, cin)) if dtype == "uint8" else \
            rng.integers(-127, 128, (cout, *kernel, cin))
    if w_quant is None:
        w_quant = quantization(0.01, 120) if dtype == "uint8" else quantization(np.linspace(0.004, 0.02, cout), 0)
    k = b.constant("w", np.asarray(w_values, w_dtype), quantization=w_quant)
    x = b.input("x", in_shape, dtype, quantization=x_quant)
    inputs = [shape, k, x]
    options = {}
    if bias and dtype == "float32":
        inputs.append(b.constant("bias", rng.standard_normal(cout).astype(np.float32)))
    elif bias:
        bias_type = bias_type or ("int64" if dtype == "int16" else "int32")
        if dtype == "int16" and bias_type == "int32":
            options["quantized_bias_type"] = "INT32"
        inputs.append(b.constant("bias", rng.integers(-2000, 2000, cout).astype(bias_type),
                                 quantization=quantization(np.full(cout, 0.0002), 0)))
    y = b.tensor("y", (n, *out_hw, cout), dtype, quantization=y_quant)
    b.op("TRANSPOSE_CONV", inputs, [y], padding=padding, stride_h=stride[0], stride_w=stride[1],
         fused_activation_function=activation, **options)
    b.output(y)
    return b.build()


TRANSPOSE_GEOMETRIES = {  # input, output HW, kernel, stride, padding, output channels
    "3x3_s2_same": ((1, 4, 4, 3), (8, 8), (3, 3), (2, 2), "SAME", 4),
    "odd_same": ((2, 4, 5, 3), (7, 9), (3, 3), (2, 2), "SAME", 4),
    "2x4_valid": ((1, 3, 4, 2), (6, 13), (2, 4), (2, 3), "VALID", 3),
    "1x1_20_channels": ((1, 5, 5, 16), (5, 5), (1, 1), (1, 1), "SAME", 20),
}
TRANSPOSE_TYPES = {  # input quantization, output quantization, input range
    "int8": (quantization(0.05, -3), quantization(0.2, 4), (-12, 12)),
    "uint8": (quantization(0.05, 125), quantization(0.2, 130), (-12, 12)),
    "int16": (quantization(0.0007, 0), quantization(0.004, 0), (-3000, 3000)),
}


@pytest.mark.parametrize("dtype,bias_type,geometry", [
    ("int8", None, "odd_same"), ("int8", None, "2x4_valid"), ("int8", None, "1x1_20_channels"),
    ("uint8", None, "3x3_s2_same"), ("uint8", None, "odd_same"), ("int16", "int64", "odd_same"),
    ("int16", "int64", "2x4_valid"), ("int16", "int32", "3x3_s2_same"), ("int16", "int32", "1x1_20_channels")])
def test_quantized_transpose_conv_matches_official(dtype, bias_type, geometry):
    in_shape, out_hw, kernel, stride, padding, cout = TRANSPOSE_GEOMETRIES[geometry]
    x_quant, y_quant, (low, high) = TRANSPOSE_TYPES[dtype]
    model = transpose_model(dtype, in_shape, out_hw, kernel, cout, padding, stride, bias_type=bias_type,
                            x_quant=x_quant, y_quant=y_quant, activation="RELU" if geometry == "odd_same" else "NONE")
    check_op_model(model, [random_input(in_shape, dtype, low=low, high=high, seed=2)])


@pytest.mark.parametrize("dtype,cout,in_shape", [("int8", 20, (1, 3, 3, 3)), ("int8", 4, (1, 5, 5, 3)),
                                                 ("uint8", 3, (1, 5, 6, 2)), ("uint8", 5, (1, 3, 5, 2)),
                                                 ("int16", 12, (1, 3, 3, 3))])
def test_quantized_transpose_conv_rounding_on_ties_matches_official(dtype, cout, in_shape):
    # int8 rescales blocks of 8 channels rounding half up, the rest half away from zero;
    # uint8 blocks of 16 flat elements; exact ties (x 0.5 * w 0.25 / y 0.5) show every lane.
    zp = 128 if dtype == "uint8" else 0
    w_values = tie_weights((cout, 1, 1, in_shape[3])) + zp
    w_quant = quantization(0.25, zp) if dtype == "uint8" else quantization([0.25] * cout, 0)
    x = random_input(in_shape, "int8", low=-0.1, high=0.1, seed=1).astype(np.int64) + zp
    model = transpose_model(dtype, in_shape, in_shape[1:3], (1, 1), cout, "VALID", (1, 1), bias=False,
                            x_quant=quantization(0.5, zp), y_quant=quantization(0.5, zp), w_quant=w_quant,
                            w_values=w_values)
    check_op_model(model, [x.astype(dtype)])


@pytest.mark.parametrize("scales,bias,values", [(np.linspace(0.01, 0.02, 4), True, "mixed"),
                                                ([0.02], False, "mixed"), ([0.02], True, "positive")])
def test_hybrid_transpose_conv_matches_official(scales, bias, values):
    in_shape = (2, 4, 5, 3)
    model = transpose_model("float32", in_shape, (7, 9), (3, 3), 4, "SAME", (2, 2), bias=bias,
                            w_quant=quantization(scales, 0))
    low, high = INPUT_RANGES[values]
    check_op_model(model, [random_input(in_shape, low=low, high=high, seed=3)])


# --- what stays refused --------------------------------------------------------------------------

def reason(model):
    sg = read_model(to_bytes(model)).subgraphs[0]
    op = sg.operators[0]
    return find(op.opcode_name).unsupported_reason(op, sg, Target.XLA_CPU)


def test_int32_bias_without_its_option_is_refused():
    # the official 16x8 CONV_2D would read the int32 bias as int64 (garbage)
    model = conv_model("CONV_2D", (1, 4, 4, 5), (3, 1, 1, 5), x_dtype="int16", x_quant=X16, y_quant=Y16,
                       bias="int32")
    assert "options ask for int64" in reason(model)


def test_depthwise_16x8_int32_bias_is_refused():
    model = conv_model("DEPTHWISE_CONV_2D", (1, 4, 4, 5), (1, 3, 3, 5), x_dtype="int16", x_quant=X16,
                       y_quant=Y16, bias="int32", depth_multiplier=1)
    assert "int32 bias" in reason(model)


def test_grouped_hybrid_conv_with_one_scale_is_refused():
    # the official Prepare fails: grouped hybrid runs the per-channel kernel
    model = conv_model("CONV_2D", (1, 6, 6, 4), (4, 3, 3, 2), w_scales=[0.02])
    assert "one weight scale per output channel" in reason(model)


def test_hybrid_depthwise_with_one_scale_is_refused():
    model = conv_model("DEPTHWISE_CONV_2D", (1, 4, 4, 3), (1, 3, 3, 3), w_scales=[0.02], depth_multiplier=1)
    assert "one weight scale per output channel" in reason(model)


@pytest.mark.parametrize("op", ["CONV_2D", "DEPTHWISE_CONV_2D"])
def test_supported_combinations_are_claimed(op):
    w_shape = (4, 3, 3, 3) if op == "CONV_2D" else (1, 3, 3, 3)
    extra = {} if op == "CONV_2D" else {"depth_multiplier": 1}
    cout = w_shape[0] if op == "CONV_2D" else 3
    hybrid = conv_model(op, (1, 5, 5, 3), w_shape, w_scales=np.linspace(0.01, 0.02, cout), **extra)
    int16 = conv_model(op, (1, 5, 5, 3), w_shape, x_dtype="int16", x_quant=X16, y_quant=Y16, **extra)
    assert reason(hybrid) is None and reason(int16) is None
