"""Every value of ``fused_activation_function`` on the ops that have one, against the official builtin kernels.

The official kernels turn the field into a clamp through ``CalculateActivationRange``, which knows only
RELU, RELU6 and RELU_N1_TO_1: with TANH or SIGN_BIT they compute no activation at all (float and quantized
alike).  Where an official kernel refuses an activation in Prepare, litegpu refuses it too.
"""

import numpy as np
import pytest
from oracle import check_op_model, one_op_model, run_official

from litegpu.errors import LiteGpuError
from litegpu.ir.builder import quantization
from litegpu.ir.save import to_bytes

ACTIVATIONS = ["NONE", "RELU", "RELU_N1_TO_1", "RELU6", "TANH", "SIGN_BIT"]


def _binary(op, dtype, activation):
    rng = np.random.default_rng(0)
    shape = (2, 5)
    if dtype == "float32":
        x = rng.uniform(-3, 3, shape).astype(np.float32)
        y = rng.uniform(0.5, 3, shape).astype(np.float32)  # no zero divisor
        return one_op_model(op, [x, y], [(shape, "float32")], fused_activation_function=activation)
    info = np.iinfo(dtype)
    x = rng.integers(info.min // 2, info.max // 2, shape).astype(dtype)
    y = rng.integers(1, info.max // 2, shape).astype(dtype)
    zp = 0 if dtype == "int16" else 3
    q = quantization(0.05, zp)
    return one_op_model(op, [x, y], [(shape, dtype)], input_quant=[q, q], output_quant=quantization(0.1, zp),
                        fused_activation_function=activation)


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("dtype", ["float32", "int8", "int16"])
@pytest.mark.parametrize("op", ["ADD", "SUB", "MUL", "DIV"])
def test_binary_ops_apply_activations_as_the_official_kernels(op, dtype, activation):
    if op == "DIV" and dtype == "int16":
        pytest.skip("no int16 DIV in the official kernels")
    model, feeds = _binary(op, dtype, activation)
    check_op_model(model, feeds)


def _conv_like(op, dtype, activation):
    rng = np.random.default_rng(1)
    x = rng.uniform(-2, 2, (1, 6, 6, 4)).astype(np.float32)
    if op == "CONV_2D":
        w = rng.uniform(-1, 1, (3, 3, 3, 4)).astype(np.float32)
        options = dict(padding="SAME", stride_w=1, stride_h=1)
        out = (1, 6, 6, 3)
    elif op == "DEPTHWISE_CONV_2D":
        w = rng.uniform(-1, 1, (1, 3, 3, 4)).astype(np.float32)
        options = dict(padding="SAME", stride_w=1, stride_h=1, depth_multiplier=1)
        out = (1, 6, 6, 4)
    else:  # pools
        options = dict(padding="VALID", stride_w=2, stride_h=2, filter_width=2, filter_height=2)
        out = (1, 3, 3, 4)
        if dtype == "float32":
            return one_op_model(op, [x], [(out, "float32")], fused_activation_function=activation, **options)
        qx = np.clip(np.round(x / 0.05) + 2, -128, 127).astype(np.int8)
        q = quantization(0.05, 2)
        return one_op_model(op, [qx], [(out, "int8")], input_quant=[q], output_quant=q,
                            fused_activation_function=activation, **options)
    bias = rng.uniform(-1, 1, (out[-1],)).astype(np.float32)
    if dtype == "float32":
        return one_op_model(op, [x, ("const", w), ("const", bias)], [(out, "float32")],
                            fused_activation_function=activation, **options)
    qx = np.clip(np.round(x / 0.05) + 2, -128, 127).astype(np.int8)
    qw = np.clip(np.round(w / 0.01), -127, 127).astype(np.int8)
    qb = np.round(bias / (0.05 * 0.01)).astype(np.int32)
    return one_op_model(op, [qx, ("const", qw), ("const", qb)], [(out, "int8")],
                        input_quant=[quantization(0.05, 2), quantization(0.01, 0), quantization(0.05 * 0.01, 0)],
                        output_quant=quantization(0.08, -1), fused_activation_function=activation, **options)


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("dtype", ["float32", "int8"])
@pytest.mark.parametrize("op", ["CONV_2D", "DEPTHWISE_CONV_2D", "AVERAGE_POOL_2D", "MAX_POOL_2D"])
def test_conv_and_pool_activations_as_the_official_kernels(op, dtype, activation):
    model, feeds = _conv_like(op, dtype, activation)
    try:
        run_official(to_bytes(model), feeds)
    except Exception as official_error:  # the official kernel refuses this activation: so must we
        with pytest.raises(LiteGpuError):
            check_op_model(model, feeds)
        pytest.skip(f"the official kernel refuses it ({str(official_error).splitlines()[0][:80]})")
    check_op_model(model, feeds)
