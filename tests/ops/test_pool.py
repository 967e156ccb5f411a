import numpy as np
import pytest
from oracle import assert_builtin_bits, check_op_model, full_range as full_range_input, random_input

from litegpu.backends import ReferenceBackend
from litegpu.errors import LiteGpuError
from litegpu.ir.builder import ModelBuilder
from litegpu.ops._common import conv_output_size

POOLS = ["MAX_POOL_2D", "AVERAGE_POOL_2D", "L2_POOL_2D"]


def pool_model(name, shape, window, stride, padding, activation="NONE"):
    n, h, w, c = shape
    oh = conv_output_size(h, window[0], stride[0], 1, padding)
    ow = conv_output_size(w, window[1], stride[1], 1, padding)
    b = ModelBuilder()
    x = b.input("x", shape)
    y = b.tensor("y", (n, oh, ow, c))
    b.op(name, [x], [y], padding=padding, filter_height=window[0], filter_width=window[1],
         stride_h=stride[0], stride_w=stride[1], fused_activation_function=activation)
    b.output(y)
    return b.build()


@pytest.mark.parametrize("name", POOLS)
@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("window,stride", [((2, 2), (2, 2)), ((3, 3), (2, 2)), ((3, 2), (1, 1)), ((3, 3), (1, 2))])
@pytest.mark.parametrize("size", [(7, 7), (8, 5)])
def test_pool_matches_official(name, padding, window, stride, size):
    # odd sizes with SAME give odd padding and windows that are partly padding at the edges:
    # the average and L2 divide by the in-bounds count, the max ignores the padding
    shape = (2, *size, 3)
    check_op_model(pool_model(name, shape, window, stride, padding), [random_input(shape, low=-5, high=-1)])


@pytest.mark.parametrize("name", POOLS)
@pytest.mark.parametrize("activation", ["RELU", "RELU6", "RELU_N1_TO_1"])
def test_pool_fused_activation(name, activation):
    shape = (1, 6, 6, 2)
    check_op_model(pool_model(name, shape, (2, 2), (2, 2), "SAME", activation), [random_input(shape, low=-8, high=8)])


@pytest.mark.parametrize("name", POOLS)
def test_global_pool_window_covers_input(name):
    shape = (2, 7, 7, 4)
    check_op_model(pool_model(name, shape, (7, 7), (1, 1), "VALID"), [random_input(shape)])


@pytest.mark.parametrize("window,stride,padding", [((2, 2), (2, 2), "VALID"), ((3, 3), (2, 2), "SAME"),
                                                    ((3, 3), (1, 1), "SAME"), ((16, 16), (16, 16), "VALID"),
                                                    ((9, 9), (7, 7), "SAME")])
def test_float_average_pool_equals_the_builtin_kernel_bit_for_bit(window, stride, padding):
    """The builtin float AVERAGE_POOL_2D adds each window's pixels in order, then divides by their count: BUILTIN
    mode takes that order (XLA's window sum is an ulp away on some outputs, which the next dynamic-range layer's
    int8 rounding of its input turned into 6.3e-3 of a DenseNet121's largest output)."""
    from litegpu.ir import read_model
    from litegpu.ir.save import to_bytes

    shape = (1, 16, 16, 64)
    model = read_model(to_bytes(pool_model("AVERAGE_POOL_2D", shape, window, stride, padding)))
    assert_builtin_bits(model, [random_input(shape, seed=9, low=-3, high=7)])


def test_a_global_average_pool_of_a_large_map_compiles_in_builtin_mode():
    """Past ``IN_ORDER_UNROLLED_TAPS`` the windows are summed in a loop, still in order: MediaPipe's selfie
    segmentation pools 128x128 maps, whose 16,384 unrolled adds crashed XLA's compiler (a segmentation fault)."""
    from litegpu.ir import read_model
    from litegpu.ir.save import to_bytes

    shape = (1, 128, 128, 4)
    model = read_model(to_bytes(pool_model("AVERAGE_POOL_2D", shape, (128, 128), (128, 128), "VALID")))
    assert_builtin_bits(model, [random_input(shape, seed=3, low=-3, high=7)])


def test_pool_rejects_window_larger_than_valid_input():
    b = ModelBuilder()
    x = b.input("x", (1, 2, 2, 1))
    y = b.tensor("y", (1, 1, 1, 1))
    b.op("MAX_POOL_2D", [x], [y], padding="VALID", filter_height=3, filter_width=3, stride_h=1, stride_w=1)
    b.output(y)
    with pytest.raises(LiteGpuError, match="MAX_POOL_2D"):
        ReferenceBackend(b.build()).run([np.ones((1, 2, 2, 1), np.float32)])


# --- quantized MAX / AVERAGE: the stored integers pooled exactly like the official kernels -------

from oracle import assert_reference_rejects, check_built, one_op_model

from litegpu.ir.builder import quantization

QUANT_POOLS = ["MAX_POOL_2D", "AVERAGE_POOL_2D"]
# (scale, zero point) per dtype, zero points at and near the edges
POOL_QUANT = {"int8": [(0.05, -128), (0.1, 5), (0.02, 127)], "uint8": [(0.05, 0), (0.1, 133), (0.02, 255)],
              "int16": [(0.001, 0)]}


def quantized_pool_built(name, x, window, stride, padding, q, activation="NONE"):
    n, h, w, c = x.shape
    oh = conv_output_size(h, window[0], stride[0], 1, padding)
    ow = conv_output_size(w, window[1], stride[1], 1, padding)
    quant = quantization(*q)
    return one_op_model(name, [x], [((n, oh, ow, c), str(x.dtype), quant)], input_quant=[quant], padding=padding,
                        filter_height=window[0], filter_width=window[1], stride_h=stride[0], stride_w=stride[1],
                        fused_activation_function=activation)


@pytest.mark.parametrize("name", QUANT_POOLS)
@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16"])
@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("window,stride", [((2, 2), (2, 2)), ((3, 3), (2, 2)), ((4, 3), (3, 1))], ids=str)
def test_quantized_pool_matches_official(name, dtype, padding, window, stride):
    # odd sizes with SAME: edge windows are partly padding, so averages divide by 1..9 pixels
    # (every remainder, ties included, rounds half away from zero)
    x = full_range_input((2, 7, 8, 3), dtype, seed=len(window) + stride[0])
    check_built(quantized_pool_built(name, x, window, stride, padding, POOL_QUANT[dtype][0]))


@pytest.mark.parametrize("name", QUANT_POOLS)
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("activation,qi", [("RELU", 0), ("RELU6", 1), ("RELU_N1_TO_1", 2)])
def test_quantized_pool_fused_activation_matches_official(name, dtype, activation, qi):
    x = full_range_input((1, 6, 6, 4), dtype, seed=qi)
    check_built(quantized_pool_built(name, x, (2, 2), (2, 2), "SAME", POOL_QUANT[dtype][qi], activation))


@pytest.mark.parametrize("name", QUANT_POOLS)
def test_quantized_pool_filter_bigger_than_input_with_same_padding(name):
    x = full_range_input((1, 3, 2, 5), "int8")
    check_built(quantized_pool_built(name, x, (5, 4), (1, 1), "SAME", (0.05, -3)))


@pytest.mark.parametrize("name", QUANT_POOLS)
def test_quantized_global_pool_and_many_channels(name):
    # a window of 100 pixels, more channels than the official kernel's 256-wide tranches
    x = full_range_input((1, 10, 10, 260), "int8", seed=4)
    check_built(quantized_pool_built(name, x, (10, 10), (1, 1), "VALID", (0.05, 10)))


def test_quantized_average_rounds_half_away_from_zero():
    # windows summing to exactly +-k.5 pixels' worth
    x = np.array([-3, -2, 1, 2, 5, 6, -7, -8], np.int8).reshape(1, 1, 8, 1)
    official = check_built(quantized_pool_built("AVERAGE_POOL_2D", x, (1, 2), (1, 2), "VALID", (0.1, 0)))[0]
    np.testing.assert_array_equal(official.reshape(-1), [-3, 2, 6, -8])


def test_quantized_pool_rejects_a_mismatched_output_type():
    x = full_range_input((1, 4, 4, 1), "int8")
    q = quantization(0.1, 0)
    built = one_op_model("MAX_POOL_2D", [x], [((1, 2, 2, 1), "uint8", q)], input_quant=[q], padding="VALID",
                         filter_height=2, filter_width=2, stride_h=2, stride_w=2)
    assert_reference_rejects(built, "MAX_POOL_2D")
