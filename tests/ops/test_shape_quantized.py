"""Quantized TRANSPOSE / TILE / RESHAPE-family ops: the official kernels copy the values and
ignore the output's quantization, even when it differs from the input's (measured)."""

import numpy as np
import pytest
from oracle import assert_reference_rejects, check_built, const, full_range, one_op_model

from litegpu.ir.builder import quantization

QUANT = {"int8": (quantization(0.05, -3), quantization(0.2, 9)),
         "uint8": (quantization(0.05, 130), quantization(0.2, 9)),
         "int16": (quantization(0.05, 5), quantization(0.2, 0))}


X = (2, 3, 4)
CASES = {
    "TRANSPOSE": ([const([2, 0, 1])], (4, 2, 3), {}),
    "TILE": ([const([2, 1, 3])], (4, 3, 12), {}),
    "RESHAPE": ([const([6, 4])], (6, 4), {}),
}


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16"])
@pytest.mark.parametrize("op", sorted(CASES))
@pytest.mark.parametrize("same_quantization", [True, False])
def test_quantized_shape_ops_copy_values(op, dtype, same_quantization):
    extra, out, options = CASES[op]
    q_in, q_other = QUANT[dtype]
    q_out = q_in if same_quantization else q_other
    check_built(one_op_model(op, [full_range(X, dtype)] + extra, [(out, dtype, q_out)], input_quant=[q_in],
                             **options))


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16"])
def test_quantized_transpose_of_rank_6(dtype):
    q = QUANT[dtype][0]
    x = full_range((2, 1, 3, 2, 2, 3), dtype)
    check_built(one_op_model("TRANSPOSE", [x, const([5, 3, 1, 0, 2, 4])], [((3, 2, 1, 2, 3, 2), dtype, q)],
                             input_quant=[q]))


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16"])
def test_quantized_squeeze_copies_values(dtype):
    q_in, q_out = QUANT[dtype]
    check_built(one_op_model("SQUEEZE", [full_range((2, 1, 3), dtype)], [((2, 3), dtype, q_out)], input_quant=[q_in]))


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16"])
def test_quantized_expand_dims(dtype):
    q = quantization(0.05, 0 if dtype == "int16" else 7)
    check_built(one_op_model("EXPAND_DIMS", [full_range(X, dtype), const([1])], [((2, 1, 3, 4), dtype, q)],
                             input_quant=[q]))


@pytest.mark.parametrize("dtype,q_in,q_out", [
    ("int8", quantization(0.05, 3), quantization(0.1, 3)),
    ("uint8", quantization(0.05, 3), quantization(0.05, 4)),
    ("int16", quantization(0.05, 2), quantization(0.05, 2)),   # int16 must be symmetric
])
def test_expand_dims_refuses_what_the_official_kernel_refuses(dtype, q_in, q_out):
    built = one_op_model("EXPAND_DIMS", [full_range(X, dtype), const([1])], [((2, 1, 3, 4), dtype, q_out)],
                         input_quant=[q_in])
    assert_reference_rejects(built, "EXPAND_DIMS")
