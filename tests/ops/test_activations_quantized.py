"""Quantized activations against the official optimized kernels: every input value, exact."""

import numpy as np
import pytest
from oracle import assert_reference_rejects, check_built, one_op_model

from litegpu.errors import LiteGpuError
from litegpu.ir.builder import quantization

# (scale, zero point) pairs given for int8; uint8 shifts the zero point by 128
INPUT_QUANT = [(0.05, -10), (0.2, 30), (0.006, -128), (0.1, 127), (1.7, 5)]


def every_value(dtype, shape=(4, 64)):
    low = np.iinfo(dtype).min
    return (np.arange(256) + low).reshape(shape).astype(dtype)


def offset(dtype):
    return 128 if dtype == "uint8" else 0


def unary_built(op, dtype, qin, qout, x=None, **options):
    x = every_value(dtype) if x is None else x
    return one_op_model(op, [x], [(x.shape, dtype, quantization(qout[0], qout[1] + offset(dtype)))],
                        input_quant=[quantization(qin[0], qin[1] + offset(dtype))], **options)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("qin", INPUT_QUANT, ids=str)
@pytest.mark.parametrize("out_zp", [-128, 0])
def test_logistic_8bit_matches_official(dtype, qin, out_zp):
    check_built(unary_built("LOGISTIC", dtype, qin, (1 / 256, out_zp)))


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("qin", INPUT_QUANT, ids=str)
@pytest.mark.parametrize("out_zp", [0, 3])
def test_tanh_8bit_matches_official(dtype, qin, out_zp):
    check_built(unary_built("TANH", dtype, qin, (1 / 128, out_zp)))


def int16_ramp(n=4096, seed=0):
    """Both extremes, zero, and a spread of values across the int16 range."""
    rng = np.random.default_rng(seed)
    x = np.concatenate([[-32768, -32767, -1, 0, 1, 32767], np.linspace(-32768, 32767, n - 6 - 500).round(),
                        rng.integers(-32768, 32768, 500)])
    return x.astype(np.int16).reshape(8, -1)


@pytest.mark.parametrize("op", ["LOGISTIC", "TANH"])
@pytest.mark.parametrize("in_scale", [1 / 4096 * 1.3, 0.001, 3e-5, 1 / 1024, 1 / 8192, 0.01], ids=str)
def test_int16_sigmoid_family_matches_official(op, in_scale):
    x = int16_ramp()
    check_built(one_op_model(op, [x], [(x.shape, "int16", quantization(1 / 32768, 0))],
                             input_quant=[quantization(in_scale, 0)]))


@pytest.mark.parametrize("op,dtype", [("RELU", "int8"), ("RELU", "uint8"), ("RELU6", "int8"), ("RELU6", "uint8"),
                                      ("RELU_N1_TO_1", "int8"), ("RELU_N1_TO_1", "uint8"), ("RELU_0_TO_1", "int8"),
                                      ("RELU_0_TO_1", "uint8")])
@pytest.mark.parametrize("qin,qout", [((0.05, -10), (0.03, -100)), ((0.02, 0), (0.02, 0)), ((0.2, 30), (0.5, -128)),
                                      ((0.006, -128), (0.0035, 127)), ((0.1, 127), (0.01, -20))], ids=str)
def test_relu_family_8bit_matches_official(op, dtype, qin, qout):
    check_built(unary_built(op, dtype, qin, qout))


@pytest.mark.parametrize("op", ["RELU", "RELU6"])
@pytest.mark.parametrize("scales", [(0.001, 0.001), (0.0003, 0.0002), (0.01, 0.3)], ids=str)
def test_relu_int16_matches_official(op, scales):
    x = int16_ramp()
    check_built(one_op_model(op, [x], [(x.shape, "int16", quantization(scales[1], 0))],
                             input_quant=[quantization(scales[0], 0)]))


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("alpha", [0.2, -0.5, 1.5])
@pytest.mark.parametrize("qin,qout", [((0.05, -10), (0.03, -100)), ((0.006, -128), (0.0035, 127))], ids=str)
def test_leaky_relu_8bit_matches_official(dtype, alpha, qin, qout):
    check_built(unary_built("LEAKY_RELU", dtype, qin, qout, alpha=alpha))


def test_leaky_relu_int16_matches_official():
    x = int16_ramp()
    check_built(one_op_model("LEAKY_RELU", [x], [(x.shape, "int16", quantization(0.0007, 0))],
                             input_quant=[quantization(0.001, 0)], alpha=0.3))


@pytest.mark.parametrize("qin,qout", [((0.05, -10), (0.03, -100)), ((0.02, 0), (0.02, 0)), ((0.1, 127), (0.01, -20)),
                                      ((0.006, -128), (0.0035, 127))], ids=str)
def test_elu_int8_matches_official(qin, qout):
    check_built(unary_built("ELU", "int8", qin, qout))


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("approximate", [False, True])
@pytest.mark.parametrize("qin,qout", [((0.05, -10), (0.03, -100)), ((0.1, 127), (0.01, -20)),
                                      ((0.006, -128), (0.0035, 127))], ids=str)
def test_gelu_8bit_matches_official(dtype, approximate, qin, qout):
    check_built(unary_built("GELU", dtype, qin, qout, approximate=approximate))


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("x_shape,alpha_shape", [((1, 8, 8, 4), (4,)), ((1, 8, 8, 4), (1, 1, 4)), ((4, 64), (4, 64)),
                                                 ((2, 4, 32), (4, 1))], ids=str)
@pytest.mark.parametrize("qalpha", [(0.004, -100), (0.05, 90)], ids=str)
def test_prelu_8bit_matches_official(dtype, x_shape, alpha_shape, qalpha):
    x = every_value(dtype, x_shape)
    rng = np.random.default_rng(3)
    info = np.iinfo(dtype)
    alpha = rng.integers(info.min, info.max + 1, alpha_shape).astype(dtype)
    o = offset(dtype)
    check_built(one_op_model("PRELU", [x, ("const", alpha)], [(x_shape, dtype, quantization(0.03, -20 + o))],
                             input_quant=[quantization(0.05, 3 + o), quantization(qalpha[0], qalpha[1] + o)]))


@pytest.mark.parametrize("op,dtype,qout", [("LOGISTIC", "int8", (1 / 128, -128)), ("LOGISTIC", "uint8", (1 / 512, 0)),
                                           ("LOGISTIC", "int16", (1 / 16384, 0)), ("TANH", "int16", (1 / 32768, 3))])
def test_output_quantization_the_official_kernel_refuses_is_an_error(op, dtype, qout):
    x = np.zeros((2, 3), dtype)
    built = one_op_model(op, [x], [(x.shape, dtype, quantization(*qout))], input_quant=[quantization(0.01, 0)])
    assert_reference_rejects(built, op)


@pytest.mark.parametrize("op,scale", [("LOGISTIC", 1 / 4096), ("TANH", 1 / 4096), ("TANH", 1 / 2048)])
def test_int16_power_of_two_scale_matches_official_gemmlowp_kernel(op, scale):
    # the official kernel switches to gemmlowp's fixed-point logistic / tanh for these scales
    x = np.arange(-32768, 32768, dtype=np.int16).reshape(16, -1)  # every int16 value
    check_built(one_op_model(op, [x], [(x.shape, "int16", quantization(1 / 32768, 0))],
                             input_quant=[quantization(scale, 0)]))


def test_int8_to_uint8_activation_is_an_error():
    x = every_value("int8")
    built = one_op_model("RELU", [x], [(x.shape, "uint8", quantization(0.1, 128))], input_quant=[quantization(0.1, 0)])
    assert_reference_rejects(built, "RELU")


def test_prelu_alpha_with_another_type_is_an_error():
    x = every_value("int8")
    alpha = np.zeros(64, np.uint8)
    built = one_op_model("PRELU", [x, ("const", alpha)], [(x.shape, "int8", quantization(0.1, 0))],
                         input_quant=[quantization(0.1, 0), quantization(0.1, 0)])
    with pytest.raises(LiteGpuError, match="PRELU"):
        from litegpu.backends import ReferenceBackend
        ReferenceBackend(built[0]).run(built[1])
