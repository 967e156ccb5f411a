"""BATCH_MATMUL over its option space against the official builtin kernels: adj_x / adj_y x float32, int8
(int8 and int32 out), int16 (int16 and int8 rhs) and hybrid (float lhs, int8 rhs, symmetric and asymmetric
input quantization), with variable and constant rhs and batch shapes that broadcast.  Integers bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from litegpu.ir.builder import quantization
from oracle import check_op_model, full_range, one_op_model, random_input

KINDS = {  # lhs, rhs, output
    "float32": ("float32", "float32", "float32"),
    "int8": ("int8", "int8", "int8"),
    "int8_to_int32": ("int8", "int8", "int32"),
    "int16": ("int16", "int16", "int16"),
    "int16x8": ("int16", "int8", "int16"),
    "hybrid": ("float32", "int8", "float32"),
    "hybrid_asymmetric": ("float32", "int8", "float32"),
}
# (lhs batch, rhs batch): one batch dim, broadcasting, and 4-D / 5-D inputs, where the official hybrid kernel
# reads its per-row factors at offsets litegpu reproduces (matmul._as_official_hybrid_bmm_reads)
BATCHES = [((2,), (2,)), ((), (2,)), ((2, 3), (1, 3)), ((2, 3), ()), ((3,), (2, 3)), ((2, 1, 3), (2, 3))]


def operand(shape, dtype, seed):
    return random_input(shape, np.float32, seed) if dtype == "float32" else full_range(shape, dtype, seed)


def model(kind, batches, adj_x, adj_y, constant_rhs):
    x_dtype, y_dtype, out_dtype = KINDS[kind]
    rows, depth, cols = 3, 6, 5
    x = operand(batches[0] + ((depth, rows) if adj_x else (rows, depth)), x_dtype, 1)
    y = operand(batches[1] + ((cols, depth) if adj_y else (depth, cols)), y_dtype, 2)
    qx = None if x_dtype == "float32" else quantization(0.05, 0 if x_dtype == "int16" else 3)
    qy = None if y_dtype == "float32" else quantization(0.02, 0)
    qo = None if out_dtype in ("float32", "int32") else quantization(4.0 if x_dtype == "int8" else 80.0,
                                                                      0 if out_dtype == "int16" else -2)
    hybrid = kind.startswith("hybrid")
    out_shape = np.broadcast_shapes(batches[0], batches[1]) + (rows, cols)
    return one_op_model("BATCH_MATMUL", [x, ("const", y) if constant_rhs or hybrid else y],
                        [(out_shape, out_dtype)], input_quant=[qx, qy], output_quant=qo, adj_x=adj_x, adj_y=adj_y,
                        asymmetric_quantize_inputs=kind == "hybrid_asymmetric")


@pytest.mark.parametrize("constant_rhs", [False, True], ids=["variable_rhs", "constant_rhs"])
@pytest.mark.parametrize("batches", BATCHES, ids=str)
@pytest.mark.parametrize("adj_x,adj_y", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_batch_matmul_matches_official(kind, adj_x, adj_y, batches, constant_rhs):
    if kind.startswith("hybrid") and not constant_rhs:
        pytest.skip("a hybrid rhs is a constant")
    built, feeds = model(kind, batches, adj_x, adj_y, constant_rhs)
    check_op_model(built, feeds, rtol=1e-5, atol=1e-4)
