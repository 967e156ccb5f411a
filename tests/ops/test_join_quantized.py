"""Quantized CONCATENATION / PACK / UNPACK / SPLIT against the official kernels: uint8
CONCATENATION requantizes each input to the output's scale, the rest copy values and
refuse (or ignore) a differing quantization exactly as the official Prepare does."""

import numpy as np
import pytest
from oracle import assert_reference_rejects, check_built, const, full_range, one_op_model, random_input

from litegpu.ir.builder import quantization


# (input scale, input zero point) pairs against an output of scale 0.1, zero point 128:
# exact halves (0.05 and 0.15 scales put values at .5), tiny and huge ratios, equal params.
UINT8_INPUT_QUANT = [(0.05, 120), (0.15, 0), (0.2, 7), (0.1, 128), (0.0123, 255), (1.7, 3), (0.1, 127)]


@pytest.mark.parametrize("in_q", UINT8_INPUT_QUANT)
@pytest.mark.parametrize("axis", [0, -1])
def test_uint8_concatenation_requantizes_each_input(in_q, axis):
    shapes = [(4, 64), (4, 64)] if axis == 0 else [(4, 64), (4, 32)]
    out = (8, 64) if axis == 0 else (4, 96)
    xs = [full_range(s, np.uint8, seed=i) for i, s in enumerate(shapes)]
    quants = [quantization(*in_q), quantization(0.3, 40)]
    check_built(one_op_model("CONCATENATION", xs, [(out, "uint8", quantization(0.1, 128))], input_quant=quants,
                             axis=axis))


def test_uint8_concatenation_rounds_halves_away_from_zero():
    # 0.5-steps on both sides of the zero point: round(-2.5) = -3, round(2.5) = 3
    x = np.arange(256, dtype=np.uint8).reshape(1, 256)
    check_built(one_op_model("CONCATENATION", [x, x[:, ::-1].copy()], [((2, 256), "uint8", quantization(1.0, 100))],
                             input_quant=[quantization(0.5, 131), quantization(2.5, 130)], axis=0))


def test_uint8_concatenation_of_constant_and_input():
    x = full_range((2, 3, 5), np.uint8)
    c = const(full_range((2, 3, 2), np.uint8, seed=3), np.uint8)
    check_built(one_op_model("CONCATENATION", [x, c], [((2, 3, 7), "uint8", quantization(0.25, 10))],
                             input_quant=[quantization(0.5, 3), quantization(0.125, 200)], axis=2))


def test_int16_concatenation_copies_whatever_the_scales():
    xs = [full_range((3, 4), np.int16, seed=i) for i in range(2)]
    check_built(one_op_model("CONCATENATION", xs, [((3, 8), "int16", quantization(0.5, 0))],
                             input_quant=[quantization(0.01, 0), quantization(2.0, 0)], axis=1))


@pytest.mark.parametrize("dtype,in_q,out_q", [
    ("int8", (0.1, 3), (0.2, 3)),      # int8: no requantization at all
    ("int8", (0.1, 3), (0.1, 4)),
    ("int16", (0.1, 2), (0.1, 2)),     # int16: symmetric only
])
def test_concatenation_refuses_what_the_official_kernel_refuses(dtype, in_q, out_q):
    xs = [random_input((2, 3), dtype), random_input((2, 3), dtype, seed=1)]
    built = one_op_model("CONCATENATION", xs, [((4, 3), dtype, quantization(*out_q))],
                         input_quant=[quantization(*out_q), quantization(*in_q)], axis=0)
    assert_reference_rejects(built, "CONCATENATION")


@pytest.mark.parametrize("op", ["PACK", "UNPACK"])
@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16"])
def test_pack_and_unpack_refuse_a_requantization(op, dtype):
    x = random_input((2, 3), dtype)
    zp = 0 if dtype == "int16" else 3
    qa, qb = quantization(0.1, zp), quantization(0.2, zp)
    if op == "PACK":
        built = one_op_model("PACK", [x, x], [((2, 2, 3), dtype, qb)], input_quant=[qa, qa], values_count=2)
    else:
        built = one_op_model("UNPACK", [x], [((3,), dtype, qb)] * 2, input_quant=[qa], num=2)
    assert_reference_rejects(built, op)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16"])
def test_quantized_pack_unpack_split_copy_values(dtype):
    zp = 0 if dtype == "int16" else -7 if dtype == "int8" else 200
    q = quantization(0.05, zp)
    x = full_range((4, 6), dtype)
    check_built(one_op_model("PACK", [x, x[::-1].copy()], [((4, 2, 6), dtype, q)], input_quant=[q, q], axis=1,
                             values_count=2))
    check_built(one_op_model("UNPACK", [x], [((4,), dtype, q)] * 6, input_quant=[q], axis=1, num=6))
    # SPLIT ignores the quantization of its outputs (values are copied)
    check_built(one_op_model("SPLIT", [const(1), x], [((4, 3), dtype, quantization(0.7, 0))] * 2,
                             input_quant={1: q}, num_splits=2))
    check_built(one_op_model("SPLIT_V", [x, const([1, 5]), const(1)],
                             [((4, 1), dtype, q), ((4, 5), dtype, quantization(0.3, 0))], input_quant=[q], num_splits=2))
