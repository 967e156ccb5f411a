"""EMBEDDING_LOOKUP tables of every type against the official builtin kernels: plain row copies for a table
of the output's type, the hybrid kernel (dequantized rows) for int8 / uint8 tables with a float32 output,
and the official refusals (a nonzero zero point) as clear errors."""

import numpy as np
import pytest
from oracle import check_op_model, one_op_model, run_official, run_ours

from litegpu.errors import LiteGpuError
from litegpu.ir import read_model
from litegpu.ir.builder import quantization
from litegpu.ir.save import to_bytes

IDS = np.array([0, 3, 1, 3, 2], np.int32)


def _table(dtype, rng):
    if dtype in ("float32", "float16"):
        return rng.uniform(-1, 1, (4, 6)).astype(dtype)
    if dtype == "bool":
        return rng.integers(0, 2, (4, 6)).astype(bool)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -1000), min(info.max, 1000), (4, 6)).astype(dtype)


@pytest.mark.parametrize("constant", [True, False], ids=["constant", "input"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "int8", "uint8", "int16", "int32", "int64", "bool"])
def test_a_table_of_the_output_type_is_copied_row_by_row(dtype, constant):
    table = _table(dtype, np.random.default_rng(0))
    model, feeds = one_op_model("EMBEDDING_LOOKUP", [IDS, ("const", table) if constant else table],
                                [((5, 6), dtype)])
    check_op_model(model, feeds)


@pytest.mark.parametrize("per_row", [False, True])
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_a_quantized_table_with_a_float_output_is_dequantized(dtype, per_row):
    table = _table(dtype, np.random.default_rng(1))
    scale = quantization([0.1, 0.2, 0.05, 0.3], [0] * 4, axis=0) if per_row else quantization(0.1, 0)
    model, feeds = one_op_model("EMBEDDING_LOOKUP", [IDS, ("const", table)], [((5, 6), "float32")],
                                input_quant={1: scale})
    check_op_model(model, feeds)


def test_a_nonzero_zero_point_is_refused_as_the_official_kernel_does():
    table = _table("int8", np.random.default_rng(2))
    model, feeds = one_op_model("EMBEDDING_LOOKUP", [IDS, ("const", table)], [((5, 6), "float32")],
                                input_quant={1: quantization(0.1, 2)})
    with pytest.raises(Exception, match="zero_point"):
        run_official(to_bytes(model), feeds)
    for xla in (False, True):
        with pytest.raises(LiteGpuError, match="zero point 0"):
            run_ours(read_model(to_bytes(model)), feeds, xla)
