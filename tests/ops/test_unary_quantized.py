"""Quantized RSQRT, SQRT, EXP, LOG (int16), NEG against the official kernels: exact, every int8 value."""

import numpy as np
import pytest
from oracle import (
    assert_reference_rejects,
    check_built,
    one_op_model,
    run_official,
    run_ours,
)

from litegpu.ir import read_model
from litegpu.ir.builder import quantization
from litegpu.ir.save import to_bytes

INT8_EVERY_VALUE = np.arange(-128, 128).astype(np.int8)
# (input, output) quantization; the zero points are int8 values
INT8_QUANT = [((0.05, -128), (0.02, -128)), ((0.01, -10), (0.1, 5)), ((0.3, -128), (0.005, -100)),
              ((2.0, -128), (0.001, 0)), ((0.002, 50), (0.4, 127))]
INT16_SCALES = [(0.001, 0.0005), (0.0001, 0.01), (0.05, 0.002), (3e-6, 1e-4)]


def int16_ramp(low=-32768):
    """Every 7th int16 value from ``low`` up, and the ends."""
    x = np.concatenate([np.arange(low, 32768, 7), [low, low + 1, 32767, -1, 0, 1]])
    return x[x >= low].astype(np.int16)


def built(op, x, qin, qout):
    return one_op_model(op, [x], [(x.shape, str(x.dtype), quantization(*qout))], input_quant=[quantization(*qin)])


def at_or_above_zero_point(qin):
    return INT8_EVERY_VALUE[INT8_EVERY_VALUE >= qin[1]]


@pytest.mark.parametrize("op", ["RSQRT", "SQRT"])
@pytest.mark.parametrize("qin,qout", INT8_QUANT, ids=str)
def test_int8_root_matches_official(op, qin, qout):
    check_built(built(op, at_or_above_zero_point(qin), qin, qout))


@pytest.mark.parametrize("op", ["RSQRT", "SQRT"])
@pytest.mark.parametrize("scales", INT16_SCALES, ids=str)
def test_int16_root_matches_official(op, scales):
    check_built(built(op, int16_ramp(low=0), (scales[0], 0), (scales[1], 0)))


@pytest.mark.parametrize("op,dtype", [("RSQRT", "int8"), ("SQRT", "int8"), ("RSQRT", "int16"), ("SQRT", "int16")])
def test_input_below_the_zero_point_fails_like_official(op, dtype):
    x = np.array([3, 1, -2, 5], dtype)
    model, feeds = built(op, x, (0.1, 0), (0.05, 0))
    with pytest.raises(RuntimeError, match="only defined for"):
        run_official(to_bytes(model), feeds)
    assert_reference_rejects((model, feeds), f"{op}.*below the zero point")


def test_int8_rsqrt_on_xla_treats_inputs_below_the_zero_point_as_one_step_above():
    # documented choice: XLA cannot raise, it returns the official arithmetic for x - zp <= 1
    model, _ = built("RSQRT", INT8_EVERY_VALUE, (0.05, -3), (0.02, -128))
    y = run_ours(read_model(to_bytes(model)), [INT8_EVERY_VALUE], xla=True)[0]
    below = INT8_EVERY_VALUE < -3
    assert np.all(y[below] == y[INT8_EVERY_VALUE == -2])


def test_int8_sqrt_on_xla_gives_the_lowest_value_below_the_zero_point():
    model, _ = built("SQRT", INT8_EVERY_VALUE, (0.05, -3), (0.02, 10))
    y = run_ours(read_model(to_bytes(model)), [INT8_EVERY_VALUE], xla=True)[0]
    assert np.all(y[INT8_EVERY_VALUE < -3] == -128) and y[INT8_EVERY_VALUE == -3][0] == 10


@pytest.mark.parametrize("qin,qout", INT8_QUANT + [((0.1, 127), (1e-6, -128))], ids=str)
def test_int8_exp_matches_official(qin, qout):
    # the large ranges saturate at 127 (exp beyond int32 after rescaling too)
    check_built(built("EXP", INT8_EVERY_VALUE, qin, qout))


@pytest.mark.parametrize("op", ["EXP", "LOG"])
@pytest.mark.parametrize("scales", INT16_SCALES, ids=str)
def test_int16_table_ops_match_official(op, scales):
    # LOG of values <= 0 gives the lowest output; EXP of large inputs makes an inf-ridden table
    check_built(built(op, int16_ramp(), (scales[0], 0), (scales[1], 0)))


@pytest.mark.parametrize("op", ["EXP", "LOG", "RSQRT"])
def test_int16_table_ops_need_zero_points_of_zero(op):
    assert_reference_rejects(built(op, np.array([1, 2], np.int16), (0.01, 3), (0.01, 0)), op)


@pytest.mark.parametrize("x", [INT8_EVERY_VALUE, int16_ramp()], ids=["int8", "int16"])
def test_quantized_neg_negates_raw_values_like_official(x):
    # the official kernel ignores the quantization (and wraps -min to min)
    check_built(built("NEG", x, (0.05, 3), (0.02, -7)))
