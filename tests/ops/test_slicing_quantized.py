"""Quantized slicing, gathering and reordering: the official kernels copy the values and
ignore the output's quantization, even when it differs from the input's (measured)."""

import numpy as np
import pytest
from oracle import check_built, const, full_range, one_op_model

from litegpu.ir.builder import quantization

QUANT = {"int8": (quantization(0.05, -3), quantization(0.2, 9)),
         "uint8": (quantization(0.05, 130), quantization(0.2, 9)),
         "int16": (quantization(0.05, 5), quantization(0.2, 0))}


X = (2, 5, 6)
CASES = {
    "STRIDED_SLICE": ([const([0, 4, 1]), const([2, 0, 6]), const([1, -2, 2])], (2, 2, 3), {}),
    "SLICE": ([const([1, 1, 0]), const([1, -1, 4])], (1, 4, 4), {}),
    "GATHER": ([const([[4, 0], [2, 2]])], (2, 2, 2, 6), {"axis": 1}),
    "GATHER_ND": ([const([[1, 4], [0, 0], [1, 2]])], (3, 6), {}),
    "REVERSE_V2": ([const([1, 2])], X, {}),
}


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16"])
@pytest.mark.parametrize("op", sorted(CASES))
@pytest.mark.parametrize("same_quantization", [True, False])
def test_quantized_slicing_copies_values(op, dtype, same_quantization):
    extra, out, options = CASES[op]
    q_in, q_other = QUANT[dtype]
    q_out = q_in if same_quantization else q_other
    check_built(one_op_model(op, [full_range(X, dtype)] + extra, [(out, dtype, q_out)], input_quant=[q_in],
                             **options))
