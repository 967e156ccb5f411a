"""int16 SOFTMAX and 8-bit LOG_SOFTMAX against the official kernels, exact."""

import numpy as np
import pytest
from oracle import assert_reference_rejects, check_built, one_op_model

from litegpu.ir.builder import quantization


def built(op, x, qin, qout, out_dtype=None, **options):
    return one_op_model(op, [x], [(x.shape, out_dtype or str(x.dtype), quantization(*qout))],
                        input_quant=[quantization(*qin)], **options)


def random_values(shape, dtype, seed=0):
    info = np.iinfo(dtype)
    return np.random.default_rng(seed).integers(info.min, info.max + 1, shape).astype(dtype)


@pytest.mark.parametrize("shape,in_scale,beta", [((4, 64), 0.001, 1.0), ((4, 64), 1e-5, 0.5), ((3, 7, 5), 0.0003, 1.0),
                                                 ((3, 7, 5), 0.01, 0.5), ((1000,), 0.001, 0.5), ((1000,), 1e-5, 1.0),
                                                 ((2, 2, 3, 50), 0.0003, 0.5), ((2, 2, 3, 50), 0.01, 1.0)], ids=str)
def test_int16_softmax_matches_official(shape, in_scale, beta):
    check_built(built("SOFTMAX", random_values(shape, np.int16), (in_scale, 0), (1 / 32768, 0), beta=beta))


def test_int16_softmax_of_equal_and_extreme_rows_matches_official():
    x = np.array([[0] * 8, [32767] * 8, [-32768] * 7 + [32767], [-32768, 32767] * 4], np.int16)
    check_built(built("SOFTMAX", x, (0.002, 0), (1 / 32768, 0), beta=1.0))


@pytest.mark.parametrize("qout,shape", [((1 / 16384, 0), (2, 4)), ((1 / 32768, 2), (2, 4)),
                                        ((1 / 32768, 0), (1, 1, 1, 2, 4))], ids=str)
def test_int16_softmax_rejects_what_the_official_kernel_rejects(qout, shape):
    assert_reference_rejects(built("SOFTMAX", np.zeros(shape, np.int16), (0.001, 0), qout, beta=1.0), "SOFTMAX")


@pytest.mark.parametrize("dtype,out_zp", [("int8", 127), ("uint8", 255)])
@pytest.mark.parametrize("in_scale", [0.05, 0.0123, 1.7], ids=str)
def test_8bit_log_softmax_matches_official(dtype, out_zp, in_scale):
    # many rows: a float rounding difference (e.g. offsetting int8 values by 128) shows in a few
    check_built(built("LOG_SOFTMAX", random_values((3000, 40), dtype, seed=1), (in_scale, 3), (16 / 256, out_zp)))


@pytest.mark.parametrize("shape", [(300,), (3, 7, 5), (2, 1)], ids=str)
def test_8bit_log_softmax_shapes_match_official(shape):
    check_built(built("LOG_SOFTMAX", random_values(shape, np.int8, seed=2), (0.3, -5), (16 / 256, 127)))


@pytest.mark.parametrize("dtype,qout", [("int8", (0.1, 127)), ("int8", (16 / 256, 0)), ("uint8", (16 / 256, 127))])
def test_8bit_log_softmax_rejects_other_output_quantization(dtype, qout):
    assert_reference_rejects(built("LOG_SOFTMAX", random_values((2, 3), dtype), (0.1, 0), qout), "LOG_SOFTMAX")
