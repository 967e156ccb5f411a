"""Quantized PAD / PADV2 / MIRROR_PAD against the official kernels: PAD fills with the output's
zero point and copies the values whatever the output's scale; MIRROR_PAD refuses a
requantization and an asymmetric int16."""

import numpy as np
import pytest
from oracle import assert_reference_rejects, check_built, full_range, one_op_model

from litegpu.ir.builder import quantization


PADS = ("const", np.asarray([[0, 0], [2, 1], [1, 0]], np.int32))


@pytest.mark.parametrize("dtype,q_in,q_out", [
    ("int8", quantization(0.05, -3), quantization(0.2, 9)),
    ("uint8", quantization(0.05, 130), quantization(0.2, 9)),
    ("int16", quantization(0.05, 0), quantization(0.2, 0)),
    ("int16", quantization(0.05, 4), quantization(0.05, 4)),
])
def test_quantized_pad_fills_with_the_output_zero_point(dtype, q_in, q_out):
    check_built(one_op_model("PAD", [full_range((2, 3, 4), dtype), PADS], [((2, 6, 5), dtype, q_out)],
                             input_quant=[q_in]))


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16"])
@pytest.mark.parametrize("mode", ["REFLECT", "SYMMETRIC"])
def test_quantized_mirror_pad(dtype, mode):
    q = quantization(0.05, 0 if dtype == "int16" else 7)
    check_built(one_op_model("MIRROR_PAD", [full_range((2, 3, 4), dtype), PADS], [((2, 6, 5), dtype, q)],
                             input_quant=[q], mode=mode))


@pytest.mark.parametrize("dtype,q_in,q_out", [
    ("int8", quantization(0.05, 3), quantization(0.1, 3)),
    ("uint8", quantization(0.05, 3), quantization(0.05, 4)),
    ("int16", quantization(0.05, 2), quantization(0.05, 2)),
])
def test_mirror_pad_refuses_what_the_official_kernel_refuses(dtype, q_in, q_out):
    built = one_op_model("MIRROR_PAD", [full_range((2, 3, 4), dtype), PADS], [((2, 6, 5), dtype, q_out)],
                         input_quant=[q_in], mode="REFLECT")
    assert_reference_rejects(built, "MIRROR_PAD")
