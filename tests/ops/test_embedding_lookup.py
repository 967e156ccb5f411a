"""EMBEDDING_LOOKUP over its table types against the official builtin kernels: plain tables of every type
(copied row by row; quantized ones too), hybrid int8 / uint8 tables dequantized to float32 (per-tensor and
per-row scales), and the tables the official kernel refuses (refused here too, with a LiteGpuError)."""

from __future__ import annotations

import numpy as np
import pytest

from litegpu.errors import LiteGpuError
from litegpu.ir import read_model
from litegpu.ir.builder import quantization
from litegpu.ir.save import to_bytes
from oracle import assert_close, full_range, one_op_model, run_official, run_ours

IDS = np.array([2, 0, 4, 2], np.int32)
PER_ROW = np.linspace(0.1, 0.5, 5)


def table(dtype: str) -> np.ndarray:
    rng = np.random.default_rng(1)
    if dtype == "bool":
        return rng.random((5, 3, 2)) < 0.5
    if dtype.startswith("float"):
        return rng.normal(size=(5, 3, 2)).astype(dtype)
    return full_range((5, 3, 2), dtype, 1)


# (table type, output type, table quantization (scale, zero point), table constant)
CASES = {
    **{f"plain_{t}": (t, t, None, True) for t in ("float32", "float16", "int8", "uint8", "int16", "int32",
                                                  "int64", "bool")},
    "plain_int32_variable": ("int32", "int32", None, False),
    "plain_float32_variable": ("float32", "float32", None, False),
    "plain_quantized_int8": ("int8", "int8", (0.1, 3), True),
    "plain_quantized_uint8": ("uint8", "uint8", (0.1, 128), True),
    "plain_quantized_int16": ("int16", "int16", (0.1, 0), True),
    "hybrid_int8": ("int8", "float32", (0.25, 0), True),
    "hybrid_uint8": ("uint8", "float32", (0.25, 0), True),
    "hybrid_int8_per_row": ("int8", "float32", (PER_ROW, 0), True),
    "refused_hybrid_zero_point": ("int8", "float32", (0.25, 3), True),
    # the official kernel copies the int32 bits into the float32 output (a reinterpretation, not a lookup
    # any model means): litegpu refuses it instead
    "mismatched_int32_to_float32": ("int32", "float32", None, True),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_embedding_lookup_does_what_the_official_kernel_does(case):
    table_dtype, out_dtype, quant, constant = CASES[case]
    values = table(table_dtype)
    q = None if quant is None else quantization(*quant)
    model, feeds = one_op_model("EMBEDDING_LOOKUP", [IDS, ("const", values) if constant else values],
                                [((4, 3, 2), out_dtype)], input_quant={1: q},
                                output_quant=q if out_dtype == table_dtype else None)
    data = to_bytes(model)
    ours = read_model(data)
    if case.startswith(("refused", "mismatched")):
        if case.startswith("refused"):
            with pytest.raises((RuntimeError, ValueError)):
                run_official(data, feeds)
        for xla in (False, True):
            with pytest.raises(LiteGpuError):
                run_ours(ours, feeds, xla)
        return
    expected = run_official(data, feeds)[0]
    for name, xla in (("reference", False), ("xla", True)):
        assert_close(run_ours(ours, feeds, xla)[0], expected, 0, 0, f"{case} on {name}")
