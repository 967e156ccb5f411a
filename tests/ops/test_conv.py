import numpy as np
import pytest

from litegpu.ir.builder import ModelBuilder
from litegpu.ops.common import conv_output_size
from oracle import check_op_model, random_input


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
