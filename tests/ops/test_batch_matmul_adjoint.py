"""BATCH_MATMUL over its option space against the official builtin kernels: adj_x / adj_y x float32 / int8 /
int16, batch dims broadcast either way (an int8 rhs with more batches than the lhs used to fail under XLA)."""

import numpy as np
import pytest
from oracle import check_op_model, one_op_model

from litegpu.ir.builder import quantization

BATCHES = [((2,), (2,)), ((2,), ()), ((), (2,)), ((1,), (3,)), ((1, 3), (2, 1))]


@pytest.mark.parametrize("adj_y", [False, True])
@pytest.mark.parametrize("adj_x", [False, True])
@pytest.mark.parametrize("batches", BATCHES, ids=lambda b: f"{b[0]}x{b[1]}")
@pytest.mark.parametrize("dtype", ["float32", "int8", "int16"])
def test_batch_matmul_matches_the_official_kernels(dtype, batches, adj_x, adj_y):
    rng = np.random.default_rng(0)
    (lhs_batch, rhs_batch), (m, k, n) = batches, (7, 33, 6)
    a_shape = lhs_batch + ((k, m) if adj_x else (m, k))
    b_shape = rhs_batch + ((n, k) if adj_y else (k, n))
    out = tuple(np.broadcast_shapes(lhs_batch, rhs_batch)) + (m, n)
    if dtype == "float32":
        a = rng.uniform(-1, 1, a_shape).astype(np.float32)
        b = rng.uniform(-1, 1, b_shape).astype(np.float32)
        model, feeds = one_op_model("BATCH_MATMUL", [a, b], [(out, dtype)], adj_x=adj_x, adj_y=adj_y)
        check_op_model(model, feeds, rtol=1e-5, atol=1e-5)
        return
    a = rng.integers(-50, 50, a_shape).astype(dtype)
    b = rng.integers(-50, 50, b_shape).astype(dtype)
    zp = 0 if dtype == "int16" else 2
    model, feeds = one_op_model("BATCH_MATMUL", [a, b], [(out, dtype)],
                                input_quant=[quantization(0.05, zp), quantization(0.04, 0)],
                                output_quant=quantization(0.5, zp), adj_x=adj_x, adj_y=adj_y)
    check_op_model(model, feeds)
