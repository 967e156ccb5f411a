"""Quantized REDUCE_PROD (int8 / int16) against the official optimized kernel: each product
step rescaled in the int64 fixed point, in the order the kernel meets the values, so the
results are bit-exact; plus what the official Prepare refuses."""

import numpy as np
import pytest
from oracle import assert_reference_rejects, check_built, const, one_op_model

from litegpu.ir.builder import quantization


def reduced_shape(shape, axes, keep_dims):
    axes = {a % len(shape) for a in axes}
    return tuple(1 if i in axes else d for i, d in enumerate(shape) if keep_dims or i not in axes)


def prod(x, axes, q_in, q_out, keep_dims=False, op="REDUCE_PROD"):
    out = reduced_shape(x.shape, axes, keep_dims)
    return one_op_model(op, [x, const(axes)], [(out, x.dtype.name, quantization(*q_out))],
                        input_quant=[quantization(*q_in)], keep_dims=keep_dims)


def values(shape, dtype, low, high, seed=0):
    return np.random.default_rng(seed).integers(low, high + 1, size=shape).astype(dtype)


@pytest.mark.parametrize("shape,axes,keep_dims", [((3, 4), [1], False), ((2, 3, 5), [0, 2], True),
                                                  ((4, 6), [0], False), ((2, 3, 4), [-1, 0], False),
                                                  ((5, 2), [], False), ((1, 40), [1], True)])
@pytest.mark.parametrize("dtype,q_in,q_out", [
    ("int8", (0.1, 3), (0.05, -2)),
    ("int8", (0.02, -20), (0.5, 10)),
    ("int16", (0.001, 0), (0.0005, 0)),
    ("int16", (0.3, 0), (20.0, 0)),
])
def test_quantized_reduce_prod(shape, axes, keep_dims, dtype, q_in, q_out):
    low, high = (-40, 40) if dtype == "int8" else (-3000, 3000)
    check_built(prod(values(shape, dtype, low, high), axes, q_in, q_out, keep_dims))


def test_quantized_reduce_prod_saturates():
    # large factors: intermediate products overflow the output range and clamp at the end
    x = values((3, 6), "int8", -128, 127, seed=4)
    check_built(prod(x, [1], (1.0, 0), (0.01, 0)))


def test_quantized_reduce_prod_refuses_asymmetric_int16():
    assert_reference_rejects(prod(values((2, 3), "int16", -9, 9), [1], (0.1, 2), (0.1, 0)), "REDUCE_PROD")


@pytest.mark.parametrize("op", ["REDUCE_MAX", "REDUCE_MIN"])
def test_int16_extrema_refuse_asymmetric_int16(op):
    assert_reference_rejects(prod(values((2, 3), "int16", -9, 9), [1], (0.1, 2), (0.1, 2), op=op), op)


@pytest.mark.parametrize("op", ["SUM", "MEAN"])
def test_int16_sum_and_mean_refuse_asymmetric_int16(op):
    assert_reference_rejects(prod(values((2, 3), "int16", -9, 9), [1], (0.1, 2), (0.1, 0), op=op), op)
