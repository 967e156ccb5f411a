import numpy as np
import pytest

from litegpu.backends import ReferenceBackend
from litegpu.errors import LiteGpuError
from litegpu.ir.builder import ModelBuilder, quantization
from litegpu.ir.save import to_bytes
from oracle import check_op_model, random_input, run_official, run_ours_builtin, same_bits


def fc_model(in_shape, units, keep_num_dims=False, activation="NONE", bias=True, weights_as_input=False):
    rng = np.random.default_rng(7)
    depth = in_shape[-1]
    b = ModelBuilder()
    x = b.input("x", in_shape)
    if weights_as_input:
        w = b.input("w", (units, depth))
    else:
        w = b.constant("w", rng.standard_normal((units, depth)).astype(np.float32))
    bias_t = b.constant("bias", rng.standard_normal(units).astype(np.float32)) if bias else -1
    rows = int(np.prod(in_shape)) // depth
    out_shape = tuple(in_shape[:-1]) + (units,) if keep_num_dims else (rows, units)
    y = b.tensor("y", out_shape)
    b.op("FULLY_CONNECTED", [x, w, bias_t], [y], keep_num_dims=keep_num_dims,
         fused_activation_function=activation)
    b.output(y)
    return b.build()


@pytest.mark.parametrize("in_shape", [(1, 16), (5, 16), (2, 3, 16), (2, 2, 2, 16), (16,)])
@pytest.mark.parametrize("keep_num_dims", [False, True])
@pytest.mark.parametrize("activation", ["NONE", "RELU", "RELU_N1_TO_1"])
def test_fully_connected_matches_official(in_shape, keep_num_dims, activation):
    check_op_model(fc_model(in_shape, 7, keep_num_dims, activation), [random_input(in_shape)])


@pytest.mark.parametrize("bias", [True, False])
def test_fully_connected_large_weights_without_bias(bias):
    # 300 x 64 weights become a traced parameter of the XLA program, not a numpy constant
    check_op_model(fc_model((3, 64), 300, bias=bias, activation="RELU6"), [random_input((3, 64))], atol=1e-4)


def test_fully_connected_flattens_input_whose_last_dim_is_not_depth():
    # [2, 3, 4] with weights [5, 6]: the 24 values are read as 4 rows of 6
    rng = np.random.default_rng(8)
    b = ModelBuilder()
    x = b.input("x", (2, 3, 4))
    w = b.constant("w", rng.standard_normal((5, 6)).astype(np.float32))
    y = b.tensor("y", (4, 5))
    b.op("FULLY_CONNECTED", [x, w, -1], [y])
    b.output(y)
    check_op_model(b.build(), [random_input((2, 3, 4))])


def test_fully_connected_weights_as_input():
    model = fc_model((4, 8), 3, weights_as_input=True)
    check_op_model(model, [random_input((4, 8)), random_input((3, 8), seed=1)])


def test_fully_connected_rejects_indivisible_input():
    b = ModelBuilder()
    x = b.input("x", (2, 5))
    w = b.constant("w", np.ones((3, 4), np.float32))
    y = b.tensor("y", (2, 3))
    b.op("FULLY_CONNECTED", [x, w, -1], [y])
    b.output(y)
    with pytest.raises(LiteGpuError, match="FULLY_CONNECTED.*rows of 4"):
        ReferenceBackend(b.build()).run([np.ones((2, 5), np.float32)])


@pytest.mark.parametrize("weights_dtype,activation,expected", [
    (np.int16, "NONE", "int16 weights"),  # int8 / int4 / int2 weights are the hybrid kernel
    (np.int8, "TANH", None),  # ... which takes any fused activation
    (np.float32, "TANH", "fused activation TANH"),  # the official Prepare rejects it too
    (np.float32, "RELU6", None),
])
def test_fully_connected_unsupported_reason(weights_dtype, activation, expected):
    from litegpu.ops import Target, find

    b = ModelBuilder()
    x = b.input("x", (2, 4))
    w = b.constant("w", np.ones((3, 4), weights_dtype),
                   quantization=None if weights_dtype == np.float32 else quantization(0.1, 0))
    y = b.tensor("y", (2, 3))
    b.op("FULLY_CONNECTED", [x, w, -1], [y], fused_activation_function=activation)
    b.output(y)
    sg = b.build().subgraphs[0]
    reason = find("FULLY_CONNECTED").unsupported_reason(sg.operators[0], sg, Target.XLA_CPU)
    if expected is None:
        assert reason is None
    else:
        assert reason is not None and expected in reason


def batch_matmul_model(x_shape, y_shape, adj_x, adj_y, y_const=False):
    b = ModelBuilder()
    x = b.input("x", x_shape)
    y = b.constant("y", random_input(y_shape, seed=2)) if y_const else b.input("y", y_shape)
    xs = np.empty(x_shape)
    ys = np.empty(y_shape)
    if adj_x:
        xs = xs.swapaxes(-1, -2)
    if adj_y:
        ys = ys.swapaxes(-1, -2)
    out = b.tensor("out", np.matmul(xs, ys).shape)
    b.op("BATCH_MATMUL", [x, y], [out], adj_x=adj_x, adj_y=adj_y)
    b.output(out)
    return b.build()


@pytest.mark.parametrize("x_shape,y_shape", [
    ((3, 4), (4, 5)),
    ((2, 3, 4), (2, 4, 5)),
    ((2, 3, 4), (4, 5)),          # rhs broadcast over the batch
    ((3, 4), (2, 2, 4, 5)),       # lhs broadcast, ranks differ
    ((2, 1, 3, 4), (1, 3, 4, 5)),  # both broadcast
    ((1, 2, 2, 3, 4), (2, 1, 1, 4, 5)),
])
@pytest.mark.parametrize("adj_x,adj_y", [(False, False), (True, False), (False, True), (True, True)])
def test_batch_matmul_matches_official(x_shape, y_shape, adj_x, adj_y):
    if adj_x:
        x_shape = x_shape[:-2] + (x_shape[-1], x_shape[-2])
    if adj_y:
        y_shape = y_shape[:-2] + (y_shape[-1], y_shape[-2])
    model = batch_matmul_model(x_shape, y_shape, adj_x, adj_y)
    check_op_model(model, [random_input(x_shape), random_input(y_shape, seed=1)])


def test_batch_matmul_constant_rhs():
    model = batch_matmul_model((2, 3, 8), (8, 40), False, False, y_const=True)
    check_op_model(model, [random_input((2, 3, 8))])


def test_batch_matmul_rejects_mismatched_contraction():
    b = ModelBuilder()
    x = b.input("x", (2, 3))
    y = b.input("y", (4, 5))
    out = b.tensor("out", (2, 5))
    b.op("BATCH_MATMUL", [x, y], [out])
    b.output(out)
    with pytest.raises(LiteGpuError, match="BATCH_MATMUL.*contracted"):
        ReferenceBackend(b.build()).run([np.ones((2, 3), np.float32), np.ones((4, 5), np.float32)])


@pytest.mark.parametrize("x_shape,y_shape", [
    ((9, 1, 64), (9, 64, 256)),    # SmolLM decode: Q.K^T over a 256-position cache
    ((9, 1, 256), (9, 256, 64)),   # and P.V
    ((9, 32, 64), (9, 64, 256)),   # prefill_32
    ((2, 3, 1024), (2, 1024, 40)),
])
def test_float_batch_matmul_is_bit_exact(x_shape, y_shape):
    """The builtin float kernel sums over the depth in order, each product rounded (no fused multiply-add): the
    attention products of quantized LLMs feed hybrid FULLY_CONNECTEDs, whose int8 row quantization turns an ulp
    into a quantization step, so both the reference and the XLA CPU kernel must give its bits."""
    from oracle import assert_builtin_bits
    model = batch_matmul_model(x_shape, y_shape, False, False)
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=x_shape).astype(np.float32), rng.normal(size=y_shape).astype(np.float32)
    assert_builtin_bits(model, [x, y])  # XLA's own order on the fast path: an ulp or so away


@pytest.mark.parametrize("rows, depth, units", [
    (2, 12, 24),    # held-out two_signatures' embedding: a GEMM, summed in depth order (1.8e-7 off before)
    (5, 101, 24),
    (1, 102, 24),   # one row: Eigen's GEMV, in four lanes, then the last depth % 4 products
    (3, 101, 1),    # one unit: the same
    (1, 3, 5),
    (5, 1400, 24),  # Eigen's depth blocks (1400 past its L1 cache's max_kc, at any L1 size up to 64 KiB)
])
def test_float_fully_connected_equals_the_builtin_kernel_bit_for_bit(rows, depth, units):
    """The builtin float FULLY_CONNECTED is x86's Eigen GEMM: each output summed over the depth in order, every
    product rounded (a matrix by a vector in four lanes), the bias added last: BUILTIN mode takes that order
    (the numpy reference keeps BLAS's, an ulp or so away)."""
    rng = np.random.default_rng(depth)
    b = ModelBuilder()
    x = b.input("x", (rows, depth))
    w = b.constant("w", rng.standard_normal((units, depth)).astype(np.float32))
    bias = b.constant("bias", rng.standard_normal(units).astype(np.float32))
    y = b.tensor("y", (rows, units))
    b.op("FULLY_CONNECTED", [x, w, bias], [y], fused_activation_function="RELU6")
    b.output(y)
    model, inputs = b.build(), [random_input((rows, depth), seed=7)]
    want = run_official(to_bytes(model), inputs)[0]
    same = same_bits(run_ours_builtin(model, inputs)[0], want)
    assert same.all(), f"{int((~same).sum())} of {same.size} values differ"
