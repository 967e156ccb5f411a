import numpy as np
import pytest

from litegpu.backends import ReferenceBackend
from litegpu.errors import LiteGpuError
from litegpu.ir.builder import ModelBuilder
from litegpu.ops.common import conv_output_size
from oracle import check_op_model, random_input

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


def test_pool_rejects_window_larger_than_valid_input():
    b = ModelBuilder()
    x = b.input("x", (1, 2, 2, 1))
    y = b.tensor("y", (1, 1, 1, 1))
    b.op("MAX_POOL_2D", [x], [y], padding="VALID", filter_height=3, filter_width=3, stride_h=1, stride_w=1)
    b.output(y)
    with pytest.raises(LiteGpuError, match="MAX_POOL_2D"):
        ReferenceBackend(b.build()).run([np.ones((1, 2, 2, 1), np.float32)])
