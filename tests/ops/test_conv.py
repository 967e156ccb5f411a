import numpy as np
import pytest

from litegpu.ir.builder import ModelBuilder
from litegpu.ops._common import conv_output_size
from litegpu.ir import read_model
from litegpu.ir.save import to_bytes
from oracle import assert_builtin_bits, check_op_model, random_input


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("stride", [1, 2, 3])
@pytest.mark.parametrize("dilation", [1, 2])
@pytest.mark.parametrize("activation", ["NONE", "RELU6"])
@pytest.mark.parametrize("size", [(8, 8), (7, 10), (1, 1)])
def test_conv2d_matches_official(padding, stride, dilation, activation, size):
    rng = np.random.default_rng(1)
    h, w = size
    b = ModelBuilder()
    x = b.input("x", (2, h, w, 3))
    k = b.constant("w", rng.standard_normal((5, 3, 2, 3)).astype(np.float32))
    bias = b.constant("bias", rng.standard_normal(5).astype(np.float32))
    oh = conv_output_size(h, 3, stride, dilation, padding)
    ow = conv_output_size(w, 2, stride, dilation, padding)
    if oh <= 0 or ow <= 0:
        pytest.skip("no output pixels for this geometry")
    y = b.tensor("y", (2, oh, ow, 5))
    b.op("CONV_2D", [x, k, bias], [y], padding=padding, stride_h=stride, stride_w=stride,
         dilation_h_factor=dilation, dilation_w_factor=dilation, fused_activation_function=activation)
    b.output(y)
    check_op_model(b.build(), [random_input((2, h, w, 3))], rtol=1e-5, atol=1e-5)


def test_conv2d_1x1_runs_as_matmul():
    rng = np.random.default_rng(2)
    b = ModelBuilder()
    x = b.input("x", (1, 6, 6, 8))
    k = b.constant("w", rng.standard_normal((4, 1, 1, 8)).astype(np.float32))
    bias = b.constant("bias", np.zeros(4, np.float32))
    y = b.tensor("y", (1, 6, 6, 4))
    b.op("CONV_2D", [x, k, bias], [y], padding="VALID", stride_h=1, stride_w=1)
    b.output(y)
    check_op_model(b.build(), [random_input((1, 6, 6, 8))])


@pytest.mark.parametrize("multiplier,stride,padding", [(1, 1, "SAME"), (2, 2, "SAME"), (1, 2, "VALID")])
def test_grouped_conv2d_with_one_channel_per_group_matches_official(multiplier, stride, padding):
    """ConvNeXt's depthwise layers reach TFLite as grouped CONV_2D ([C*m, KH, KW, 1] filters);
    on XLA CPU they take the depthwise lowering (conv_lowering "depthwise")."""
    from litegpu.ops import Target
    from litegpu.ops.conv import conv_lowering

    rng = np.random.default_rng(3)
    c, cout = 4, 4 * multiplier
    b = ModelBuilder()
    x = b.input("x", (1, 9, 9, c))
    k = b.constant("w", rng.standard_normal((cout, 5, 5, 1)).astype(np.float32))
    bias = b.constant("bias", rng.standard_normal(cout).astype(np.float32))
    o = conv_output_size(9, 5, stride, 1, padding)
    y = b.tensor("y", (1, o, o, cout))
    b.op("CONV_2D", [x, k, bias], [y], padding=padding, stride_h=stride, stride_w=stride,
         fused_activation_function="RELU")
    b.output(y)
    assert conv_lowering((1, 9, 9, c), (cout, 5, 5, 1), (stride, stride), (1, 1), (o, o), Target.XLA_CPU) == "depthwise"
    check_op_model(b.build(), [random_input((1, 9, 9, c))], rtol=1e-5, atol=1e-5)


# --- DEPTHWISE_CONV_2D -----------------------------------------------------------

def run_forced_target(model, inputs, target):
    """Run our XLA backend on CPU with the lowering of another target (the GPU one)."""
    from litegpu.backends.xla.backend import XlaBackend
    from litegpu.ir import read_model
    from litegpu.ir.save import to_bytes

    backend = XlaBackend(read_model(to_bytes(model)))
    backend.target = target
    return [np.asarray(y) for y in backend.run(inputs)]


def depthwise_model(shape, kernel, multiplier, padding, stride, dilation, activation, bias=True):
    rng = np.random.default_rng(3)
    n, h, w, c = shape
    b = ModelBuilder()
    x = b.input("x", shape)
    # the official kernel takes a missing bias as two inputs, not as an omitted (-1) third
    inputs = [x, b.constant("w", rng.standard_normal((1, *kernel, c * multiplier)).astype(np.float32))]
    if bias:
        values = np.zeros(c * multiplier) if bias == "zero" else rng.standard_normal(c * multiplier)
        inputs.append(b.constant("bias", values.astype(np.float32)))
    oh = conv_output_size(h, kernel[0], stride[0], dilation, padding)
    ow = conv_output_size(w, kernel[1], stride[1], dilation, padding)
    y = b.tensor("y", (n, oh, ow, c * multiplier))
    b.op("DEPTHWISE_CONV_2D", inputs, [y], padding=padding, stride_h=stride[0], stride_w=stride[1],
         dilation_h_factor=dilation, dilation_w_factor=dilation, depth_multiplier=multiplier,
         fused_activation_function=activation)
    b.output(y)
    return b.build()


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("stride", [(1, 1), (2, 2), (1, 3)])
@pytest.mark.parametrize("dilation", [1, 2])
@pytest.mark.parametrize("multiplier,activation", [(1, "NONE"), (2, "RELU6"), (3, "RELU")])
def test_depthwise_matches_official(padding, stride, dilation, multiplier, activation):
    # 8x7 with a 3x3 filter makes SAME padding odd for stride 2 (the extra pixel goes after)
    model = depthwise_model((2, 8, 7, 3), (3, 3), multiplier, padding, stride, dilation, activation)
    check_op_model(model, [random_input((2, 8, 7, 3))])


@pytest.mark.parametrize("kernel,size", [((1, 1), (4, 4)), ((5, 2), (6, 9)), ((3, 3), (1, 1))])
def test_depthwise_filter_shapes(kernel, size):
    model = depthwise_model((1, *size, 4), kernel, 1, "SAME", (1, 2), 1, "NONE")
    check_op_model(model, [random_input((1, *size, 4))])


def test_depthwise_without_bias_equals_zero_bias():
    # The official runtime crashes (segfault) on a bias-less DEPTHWISE_CONV_2D, so the
    # oracle runs the same layer with a zero bias.
    from oracle import run_ours

    x = random_input((1, 6, 5, 4))
    with_zero = depthwise_model((1, 6, 5, 4), (3, 3), 2, "SAME", (2, 2), 1, "RELU", bias="zero")
    expected = check_op_model(with_zero, [x])
    without = depthwise_model((1, 6, 5, 4), (3, 3), 2, "SAME", (2, 2), 1, "RELU", bias=False)
    for xla in (False, True):
        np.testing.assert_allclose(run_ours(without, [x], xla)[0], expected[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("multiplier,stride,padding", [(1, (2, 2), "SAME"), (2, (1, 1), "VALID")])
def test_depthwise_gpu_lowering_matches_official(multiplier, stride, padding):
    from litegpu.ops import Target

    model = depthwise_model((1, 9, 8, 5), (3, 3), multiplier, padding, stride, 2, "RELU6")
    x = random_input((1, 9, 8, 5))
    expected = check_op_model(model, [x])
    got = run_forced_target(model, [x], Target.XLA_GPU)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-5, atol=1e-5)


def test_depthwise_rejects_filter_that_does_not_match_channels():
    from litegpu.errors import LiteGpuError

    b = ModelBuilder()
    x = b.input("x", (1, 4, 4, 3))
    k = b.constant("w", np.ones((1, 3, 3, 4), np.float32))
    y = b.tensor("y", (1, 4, 4, 4))
    b.op("DEPTHWISE_CONV_2D", [x, k, -1], [y], padding="SAME", stride_h=1, stride_w=1, depth_multiplier=1)
    b.output(y)
    from litegpu.backends import ReferenceBackend

    with pytest.raises(LiteGpuError, match="DEPTHWISE_CONV_2D"):
        ReferenceBackend(b.build()).run([np.ones((1, 4, 4, 3), np.float32)])


# --- TRANSPOSE_CONV ------------------------------------------------------------------

def transpose_conv_model(in_shape, out_hw, kernel, cout, padding, stride, activation="NONE", bias=True):
    rng = np.random.default_rng(4)
    n, h, w, cin = in_shape
    b = ModelBuilder()
    shape = b.constant("output_shape", np.array([n, *out_hw, cout], np.int32))
    k = b.constant("w", rng.standard_normal((cout, *kernel, cin)).astype(np.float32))
    x = b.input("x", in_shape)
    inputs = [shape, k, x]
    if bias:
        inputs.append(b.constant("bias", rng.standard_normal(cout).astype(np.float32)))
    y = b.tensor("y", (n, *out_hw, cout))
    b.op("TRANSPOSE_CONV", inputs, [y], padding=padding, stride_h=stride[0], stride_w=stride[1],
         fused_activation_function=activation)
    b.output(y)
    return b.build()


@pytest.mark.parametrize("in_hw,out_hw,kernel,stride,padding", [
    ((4, 4), (8, 8), (3, 3), (2, 2), "SAME"),
    ((4, 5), (7, 9), (3, 3), (2, 2), "SAME"),     # odd output: odd total padding
    ((4, 4), (9, 9), (3, 3), (2, 2), "VALID"),
    ((3, 4), (6, 13), (2, 4), (2, 3), "VALID"),
    ((5, 5), (5, 5), (3, 3), (1, 1), "SAME"),
    ((3, 3), (6, 6), (4, 4), (2, 2), "SAME"),
    ((2, 2), (8, 8), (3, 3), (4, 4), "SAME"),     # stride larger than the filter: gaps stay zero
])
@pytest.mark.parametrize("bias", [True, False])
def test_transpose_conv_matches_official(in_hw, out_hw, kernel, stride, padding, bias):
    model = transpose_conv_model((2, *in_hw, 3), out_hw, kernel, 4, padding, stride, bias=bias)
    check_op_model(model, [random_input((2, *in_hw, 3))])


def test_transpose_conv_rejects_output_shape_that_does_not_invert_to_input():
    from litegpu.backends import ReferenceBackend
    from litegpu.errors import LiteGpuError

    model = transpose_conv_model((1, 3, 4, 2), (6, 12), (2, 4), 3, "VALID", (2, 3))
    with pytest.raises(LiteGpuError, match="TRANSPOSE_CONV.*axis 2"):
        ReferenceBackend(model).run([random_input((1, 3, 4, 2))])


def test_transpose_conv_fused_activation():
    model = transpose_conv_model((1, 4, 4, 2), (8, 8), (3, 3), 3, "SAME", (2, 2), activation="RELU6")
    check_op_model(model, [random_input((1, 4, 4, 2))])


# --- CONV_3D ------------------------------------------------------------------------------

@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("stride,dilation", [((1, 1, 1), (1, 1, 1)), ((2, 1, 2), (1, 1, 1)),
                                             ((1, 1, 1), (2, 1, 2))])
@pytest.mark.parametrize("activation,bias", [("NONE", True), ("RELU", False)])
def test_conv3d_matches_official(padding, stride, dilation, activation, bias):
    rng = np.random.default_rng(5)
    shape = (2, 5, 6, 7, 3)
    kernel = (2, 3, 3)
    b = ModelBuilder()
    x = b.input("x", shape)
    k = b.constant("w", rng.standard_normal((*kernel, 3, 4)).astype(np.float32))
    inputs = [x, k] + ([b.constant("bias", rng.standard_normal(4).astype(np.float32))] if bias else [])
    out = [conv_output_size(shape[1 + a], kernel[a], stride[a], dilation[a], padding) for a in range(3)]
    y = b.tensor("y", (2, *out, 4))
    b.op("CONV_3D", inputs, [y], padding=padding, stride_d=stride[0], stride_h=stride[1], stride_w=stride[2],
         dilation_d_factor=dilation[0], dilation_h_factor=dilation[1], dilation_w_factor=dilation[2],
         fused_activation_function=activation)
    b.output(y)
    check_op_model(b.build(), [random_input(shape)])


# --- quantized (int8 per-channel / uint8 per-tensor) ---------------------------------------

from litegpu.ir.builder import quantization  # noqa: E402


def _quantized_conv_model(op, dtype, x_shape, w_shape, y_shape, w_scales, activation, **options):
    rng = np.random.default_rng(sum(x_shape) + len(w_scales))
    b = ModelBuilder()
    zp = -7 if dtype == "int8" else 121
    x = b.input("x", x_shape, dtype, quantization=quantization(0.037, zp))
    if dtype == "int8":  # symmetric per-channel weights, as the converter writes them
        axis = 0 if op == "CONV_2D" else 3
        w = b.constant("w", rng.integers(-127, 128, w_shape).astype(np.int8),
                       quantization=quantization(w_scales, 0, axis=axis))
    else:
        w = b.constant("w", rng.integers(0, 256, w_shape).astype(np.uint8), quantization=quantization(w_scales[0], 131))
    scales = np.float32(0.037) * np.asarray(w_scales, np.float32)
    bias = b.constant("bias", rng.integers(-3000, 3000, y_shape[-1]).astype(np.int32),
                      quantization=quantization(scales if dtype == "int8" else scales[:1], 0))
    y = b.tensor("y", y_shape, dtype, quantization=quantization(0.11, 5 if dtype == "int8" else 130))
    b.op(op, [x, w, bias], [y], fused_activation_function=activation, **options)
    b.output(y)
    return b.build(), random_input(x_shape, dtype, seed=3)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("activation", ["NONE", "RELU", "RELU6"])
@pytest.mark.parametrize("geometry", [((1, 9, 9, 3), (4, 3, 3, 3), "SAME", 2), ((2, 6, 5, 8), (5, 1, 1, 8), "VALID", 1),
                                      ((1, 7, 7, 4), (3, 2, 3, 4), "SAME", 1)])
def test_quantized_conv2d_matches_official(dtype, activation, geometry):
    x_shape, w_shape, padding, stride = geometry
    oh = conv_output_size(x_shape[1], w_shape[1], stride, 1, padding)
    ow = conv_output_size(x_shape[2], w_shape[2], stride, 1, padding)
    w_scales = np.linspace(0.002, 0.02, w_shape[0]) if dtype == "int8" else [0.01]
    model, x = _quantized_conv_model("CONV_2D", dtype, x_shape, w_shape, (x_shape[0], oh, ow, w_shape[0]), w_scales,
                                     activation, padding=padding, stride_h=stride, stride_w=stride)
    check_op_model(model, [x])


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("activation", ["NONE", "RELU6"])
@pytest.mark.parametrize("geometry", [((1, 9, 9, 16), 3, "SAME", 2, 1), ((1, 8, 8, 20), 5, "SAME", 1, 1),
                                      ((2, 6, 6, 3), 3, "VALID", 1, 2)])
def test_quantized_depthwise_conv2d_matches_official(dtype, activation, geometry):
    x_shape, k, padding, stride, multiplier = geometry
    cout = x_shape[3] * multiplier
    oh = conv_output_size(x_shape[1], k, stride, 1, padding)
    w_scales = np.linspace(0.003, 0.03, cout) if dtype == "int8" else [0.01]
    model, x = _quantized_conv_model("DEPTHWISE_CONV_2D", dtype, x_shape, (1, k, k, cout), (x_shape[0], oh, oh, cout),
                                     w_scales, activation, padding=padding, stride_h=stride, stride_w=stride,
                                     depth_multiplier=multiplier)
    check_op_model(model, [x])


@pytest.mark.parametrize("geometry", [
    ((1, 9, 9, 16), (24, 1, 1, 16), 1, 1, "SAME"),     # 1x1: the GEMM over the input channels
    ((2, 11, 10, 3), (16, 3, 3, 3), 2, 1, "SAME"),     # im2col, depth in (row, column, channel) order
    ((1, 6, 6, 4), (6, 3, 3, 2), 1, 1, "SAME"),        # grouped
    ((1, 2, 2, 290), (19, 2, 2, 290), 1, 1, "VALID"),  # one output pixel: Eigen's GEMV (pose landmarks' heads)
    ((1, 12, 12, 6), (1, 3, 3, 6), 1, 1, "SAME"),      # one output channel: Eigen's GEMV too
    ((1, 6, 6, 48), (8, 5, 5, 48), 1, 1, "SAME"),      # InceptionV3's 5x5: depth 1200, Eigen's depth blocks
    ((1, 5, 5, 1400), (8, 1, 1, 1400), 1, 1, "VALID"),  # depth blocks at any L1 size up to 64 KiB
])
def test_float_conv2d_equals_the_builtin_kernel_bit_for_bit(geometry):
    """The builtin float CONV_2D sums each output over the depth in order, every product rounded (in Eigen's depth
    blocks past its L1 cache, each block summed apart, then added), then adds the bias: the numpy reference and
    BUILTIN mode take that order (an ulp or two apart otherwise)."""
    x_shape, w_shape, stride, dilation, padding = geometry
    rng = np.random.default_rng(3)
    b = ModelBuilder()
    x = b.input("x", x_shape)
    k = b.constant("w", rng.standard_normal(w_shape).astype(np.float32))
    bias = b.constant("bias", rng.standard_normal(w_shape[0]).astype(np.float32))
    oh = conv_output_size(x_shape[1], w_shape[1], stride, dilation, padding)
    ow = conv_output_size(x_shape[2], w_shape[2], stride, dilation, padding)
    y = b.tensor("y", (x_shape[0], oh, ow, w_shape[0]))
    b.op("CONV_2D", [x, k, bias], [y], padding=padding, stride_h=stride, stride_w=stride,
         dilation_h_factor=dilation, dilation_w_factor=dilation, fused_activation_function="RELU6")
    b.output(y)
    assert_builtin_bits(read_model(to_bytes(b.build())), [random_input(x_shape, seed=4)])


def test_a_first_layer_on_an_image_keeps_the_builtin_order_past_the_in_order_limit(monkeypatch):
    """A convolution over 3 channels (ResNet50's 7x7 stem, 118 M multiply-adds, past IN_ORDER_MAX_MACS: its
    rounding put the model 2.1e-5 of its largest output from the builtin kernels') sums in the builtin order
    whatever its size."""
    assert_builtin_bits_past_a_lowered_limit(monkeypatch, (1, 32, 32, 3), (16, 7, 7, 3), 2, "SAME", seed=7)


def test_a_convolution_in_the_stem_keeps_the_builtin_order_past_the_in_order_limit(monkeypatch):
    """A convolution with a 64x64 output or larger (a CNN's stem: InceptionV3's 3x3 convolutions at 147x147 and
    71x71, 199 M to 697 M multiply-adds, past IN_ORDER_MAX_MACS; XLA's order in its first one alone put the model
    2.1e-5 of its largest output from the builtin kernels') sums in the builtin order up to
    STEM_IN_ORDER_MAX_MACS."""
    assert_builtin_bits_past_a_lowered_limit(monkeypatch, (1, 66, 66, 16), (16, 3, 3, 16), 1, "VALID", seed=9)


def assert_builtin_bits_past_a_lowered_limit(monkeypatch, x_shape, w_shape, stride, padding, seed):
    """One float CONV_2D (bias, RELU) bit for bit with the builtin kernel, IN_ORDER_MAX_MACS lowered so that a
    small convolution stands for a big one."""
    import litegpu.ops.conv as conv

    monkeypatch.setattr(conv, "IN_ORDER_MAX_MACS", 1000)
    rng = np.random.default_rng(seed)
    b = ModelBuilder()
    x = b.input("x", x_shape)
    k = b.constant("w", rng.standard_normal(w_shape).astype(np.float32))
    bias = b.constant("bias", rng.standard_normal(w_shape[0]).astype(np.float32))
    out_hw = [conv_output_size(x_shape[i], w_shape[i], stride, 1, padding) for i in (1, 2)]
    y = b.tensor("y", (x_shape[0], *out_hw, w_shape[0]))
    b.op("CONV_2D", [x, k, bias], [y], padding=padding, stride_h=stride, stride_w=stride,
         fused_activation_function="RELU")
    b.output(y)
    assert_builtin_bits(read_model(to_bytes(b.build())), [random_input(x_shape, seed=seed + 1)])


@pytest.mark.parametrize("multiplier,stride,padding", [(1, 1, "SAME"), (1, 2, "SAME"), (2, 1, "VALID")])
def test_float_depthwise_equals_the_builtin_kernel_bit_for_bit(multiplier, stride, padding):
    """The builtin float DEPTHWISE_CONV_2D starts each output at its bias and adds the taps in order."""
    model = depthwise_model((2, 9, 8, 4), (3, 3), multiplier, padding, (stride, stride), 1, "RELU6")
    assert_builtin_bits(read_model(to_bytes(model)), [random_input((2, 9, 8, 4), seed=5)])


def pointwise_depthwise_chain(widths, hw=16):
    """BlazeFace's layers without their residuals: a 1x1 CONV_2D (a depth under 32: the in-order sum written out,
    no loop), a 3x3 DEPTHWISE_CONV_2D and a RELU per block; the widths differ so that no two blocks loop."""
    rng = np.random.default_rng(6)
    b = ModelBuilder()
    h = b.input("x", (1, hw, hw, widths[0]))
    for k, (cin, cout) in enumerate(zip(widths, widths[1:])):
        y, z, h_next = (b.tensor(f"{n}{k}", (1, hw, hw, cout)) for n in "yzh")
        b.op("CONV_2D", [h, b.constant(f"w{k}", rng.uniform(-0.3, 0.3, (cout, 1, 1, cin)).astype(np.float32)),
                         b.constant(f"b{k}", rng.uniform(-0.1, 0.1, cout).astype(np.float32))], [y],
             padding="VALID", stride_w=1, stride_h=1)
        b.op("DEPTHWISE_CONV_2D", [y, b.constant(f"d{k}", rng.uniform(-0.3, 0.3, (1, 3, 3, cout)).astype(np.float32)),
                                   b.constant(f"db{k}", np.zeros(cout, np.float32))], [z],
             padding="SAME", stride_w=1, stride_h=1, depth_multiplier=1)
        b.op("RELU", [z], [h_next])
        h = h_next
    b.output(h)
    return b.build()


def test_builtin_order_convolutions_in_a_row_compute_each_layer_once():
    """XLA CPU fused each in-order sum into the next op, which reads every element once per tap or output column,
    recomputing the layers before it: the back-camera face detector's BUILTIN program ran 50x the time of its
    ops one by one.  The work (XLA's own count of the program's flops) now grows with the layers, not faster."""
    import jax

    from litegpu.backends.xla.backend import XlaBackend
    from litegpu.backends.xla.state import XlaState
    from litegpu.backends.xla.device import device_for

    def flops(widths):
        model = pointwise_depthwise_chain(widths)
        backend = XlaBackend(model, state=XlaState(model, device_for("cpu"), official_float_order=True))
        compiled = backend.lower([jax.ShapeDtypeStruct((1, 16, 16, widths[0]), np.float32)]).compile(
            backend.compiler_options)
        analysis = compiled.cost_analysis()
        return (analysis[0] if isinstance(analysis, list) else analysis)["flops"]

    widths = (24, 20, 28, 16, 24, 20, 28)
    one, six = flops(widths[:2]), flops(widths)
    assert six <= 1.3 * 6 * one, (one, six)  # was 2.0x: 14.7 M flops against 6 x 1.21 M
