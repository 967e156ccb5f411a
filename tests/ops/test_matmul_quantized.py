"""Quantized FULLY_CONNECTED, BATCH_MATMUL and EMBEDDING_LOOKUP against the official interpreter."""

import numpy as np
import pytest

from litegpu.ir.builder import ModelBuilder, quantization
from oracle import check_op_model, random_input

INT_LIMITS = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767)}


def int_values(shape, dtype, seed, low=None, high=None):
    lo, hi = INT_LIMITS[dtype]
    rng = np.random.default_rng(seed)
    return rng.integers(lo if low is None else low, (hi if high is None else high) + 1, size=shape).astype(dtype)


# --- full-integer FULLY_CONNECTED ----------------------------------------------------

def int_fc_model(in_shape, units, dtype, per_channel=False, activation="NONE", keep_num_dims=False, bias=True,
                 weights_dtype=None, bias_dtype=None, out_scale=0.05):
    weights_dtype = weights_dtype or ("uint8" if dtype == "uint8" else "int8")
    depth = in_shape[-1]
    rng = np.random.default_rng(3)
    in_scale, in_zp = {"int8": (0.02, -5), "uint8": (0.02, 120), "int16": (0.001, 0)}[dtype]
    out_zp = {"int8": 3, "uint8": 128, "int16": 0}[dtype]
    b = ModelBuilder()
    x = b.input("x", in_shape, dtype, quantization=quantization(in_scale, in_zp))
    if per_channel:
        w_scales = np.linspace(0.004, 0.02, units).astype(np.float32)
        w_zp = 0
    else:
        w_scales = np.float32([0.011])
        w_zp = 131 if weights_dtype == "uint8" else 0
    bits = {"int4": (-8, 7), "int2": (-2, 1), "int8": (-127, 127), "uint8": (0, 255)}[weights_dtype]
    w_values = rng.integers(bits[0], bits[1] + 1, (units, depth))
    w = b.constant("w", w_values.astype(np.uint8 if weights_dtype == "uint8" else np.int8), weights_dtype,
                   quantization=quantization(w_scales if per_channel else w_scales[0], w_zp))
    inputs = [x, w]
    if bias:
        bias_dtype = bias_dtype or ("int64" if dtype == "int16" else "int32")
        bias_scales = (np.float32(in_scale) * w_scales).astype(np.float32)
        values = rng.integers(-3000, 3000, units).astype(bias_dtype)
        inputs.append(b.constant("bias", values, quantization=quantization(bias_scales, 0)))
    rows = int(np.prod(in_shape)) // depth
    out_shape = tuple(in_shape[:-1]) + (units,) if keep_num_dims else (rows, units)
    y = b.tensor("y", out_shape, dtype, quantization=quantization(out_scale, out_zp))
    options = dict(keep_num_dims=keep_num_dims, fused_activation_function=activation)
    if dtype == "int16" and bias:
        options["quantized_bias_type"] = bias_dtype.upper()
    b.op("FULLY_CONNECTED", inputs, [y], **options)
    b.output(y)
    return b.build()


def int_input(shape, dtype, seed=0):
    if dtype == "int16":
        return int_values(shape, dtype, seed, -6000, 6000)
    return int_values(shape, dtype, seed)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16"])
@pytest.mark.parametrize("in_shape,activation", [((1, 40), "NONE"), ((5, 40), "RELU"), ((2, 3, 16), "RELU6")])
def test_integer_fc_per_tensor(dtype, in_shape, activation):
    model = int_fc_model(in_shape, 9, dtype, activation=activation)
    check_op_model(model, [int_input(in_shape, dtype)])


@pytest.mark.parametrize("dtype", ["int8", "int16"])
@pytest.mark.parametrize("in_shape", [(1, 40), (6, 33), (2, 2, 2, 24)])
def test_integer_fc_per_channel(dtype, in_shape):
    model = int_fc_model(in_shape, 21, dtype, per_channel=True, activation="RELU6", out_scale=0.03)
    check_op_model(model, [int_input(in_shape, dtype, seed=1)])


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_integer_fc_keep_num_dims_without_bias(dtype):
    model = int_fc_model((2, 3, 16), 5, dtype, keep_num_dims=True, bias=False, activation="RELU_N1_TO_1")
    check_op_model(model, [int_input((2, 3, 16), dtype, seed=2)])


def test_int16_fc_with_int32_bias():
    model = int_fc_model((3, 40), 7, "int16", bias_dtype="int32")
    check_op_model(model, [int_input((3, 40), "int16", seed=3)])


@pytest.mark.parametrize("weights_dtype", ["int4", "int2"])
@pytest.mark.parametrize("per_channel", [False, True])
def test_integer_fc_packed_weights(weights_dtype, per_channel):
    model = int_fc_model((3, 34), 11, "int8", per_channel=per_channel, weights_dtype=weights_dtype, out_scale=0.01)
    check_op_model(model, [int_input((3, 34), "int8", seed=4)])


# --- hybrid FULLY_CONNECTED --------------------------------------------------------------

def hybrid_fc_model(in_shape, units, asymmetric, per_channel, weights_dtype="int8", activation="NONE",
                    keep_num_dims=False, bias=True):
    depth = in_shape[-1]
    rng = np.random.default_rng(5)
    bits = {"int4": 7, "int2": 1, "int8": 127}[weights_dtype]
    lo = -2 if weights_dtype == "int2" else -bits
    b = ModelBuilder()
    x = b.input("x", in_shape)
    scales = np.linspace(0.01, 0.05, units) if per_channel else 0.03
    w = b.constant("w", rng.integers(lo, bits + 1, (units, depth)).astype(np.int8), weights_dtype,
                   quantization=quantization(scales, 0))
    bias_t = b.constant("bias", rng.standard_normal(units).astype(np.float32)) if bias else -1
    rows = int(np.prod(in_shape)) // depth
    out_shape = tuple(in_shape[:-1]) + (units,) if keep_num_dims else (rows, units)
    y = b.tensor("y", out_shape)
    b.op("FULLY_CONNECTED", [x, w, bias_t], [y], keep_num_dims=keep_num_dims, fused_activation_function=activation,
         asymmetric_quantize_inputs=asymmetric)
    b.output(y)
    return b.build()


def hybrid_check(model, inputs):
    """Float outputs of integer arithmetic: within 1e-5 of the output's magnitude."""
    from litegpu.ir.save import to_bytes
    from oracle import run_official

    magnitude = float(np.abs(run_official(to_bytes(model), inputs)[0]).max())
    return check_op_model(model, inputs, rtol=1e-5, atol=1e-5 * max(1.0, magnitude))


@pytest.mark.parametrize("asymmetric", [False, True])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("in_shape", [(1, 32), (2, 3, 16)])
def test_hybrid_fc(asymmetric, per_channel, in_shape):
    model = hybrid_fc_model(in_shape, 13, asymmetric, per_channel)
    x = random_input(in_shape, seed=6)
    x[0, ..., 1] = 0.0
    hybrid_check(model, [x])


@pytest.mark.parametrize("activation", ["RELU", "TANH", "SIGN_BIT"])
def test_hybrid_fc_takes_any_activation(activation):
    model = hybrid_fc_model((3, 2, 8), 6, True, False, activation=activation, keep_num_dims=True)
    hybrid_check(model, [random_input((3, 2, 8), seed=7)])


def test_hybrid_fc_zero_rows_give_the_bias():
    model = hybrid_fc_model((3, 16), 5, True, True)
    x = random_input((3, 16), seed=8)
    x[1] = 0.0
    hybrid_check(model, [x])
    hybrid_check(model, [np.zeros((3, 16), np.float32)])


@pytest.mark.parametrize("weights_dtype", ["int4", "int2"])
@pytest.mark.parametrize("asymmetric", [False, True])
def test_hybrid_fc_packed_weights(weights_dtype, asymmetric):
    model = hybrid_fc_model((3, 30), 9, asymmetric, True, weights_dtype=weights_dtype, bias=False)
    hybrid_check(model, [random_input((3, 30), seed=9)])


# Scales whose real multiplier is 1/8 put many accumulators exactly half-way between two
# outputs: the rounding rule of each kernel shows (ruy rounds halves up, the reference
# kernels' gemmlowp arithmetic away from zero).
TIE_SCALES = dict(in_scale=0.5, w_scale=0.25, out_scale=1.0)


def tie_fc_model(dtype, rows=64):
    b = ModelBuilder()
    x = b.input("x", (rows, 16), dtype, quantization=quantization(0.5, 0))
    w = b.constant("w", int_values((8, 16), "int8", 10, -10, 10), quantization=quantization(0.25, 0))
    y = b.tensor("y", (rows, 8), dtype, quantization=quantization(1.0, 0))
    b.op("FULLY_CONNECTED", [x, w, -1], [y])
    b.output(y)
    return b.build()


@pytest.mark.parametrize("dtype", ["int8", "int16"])
def test_integer_fc_rounds_ties_like_the_official_kernel(dtype):
    x = int_values((64, 16), dtype, 11, -10, 10)
    expected = check_op_model(tie_fc_model(dtype), [x])
    exact = (x.astype(np.int64) @ int_values((8, 16), "int8", 10, -10, 10).T.astype(np.int64)) / 8
    assert np.any((exact % 1 == 0.5) & (exact < 0) & (np.abs(exact) < 100))  # the test exercises negative ties
    assert expected[0].shape == (64, 8)


# --- BATCH_MATMUL ----------------------------------------------------------------------------

def int_bmm_model(x_shape, y_shape, dtype, rhs_dtype=None, adj_x=False, adj_y=False, out_dtype=None,
                  scales=(0.02, 0.01, 0.05), rhs_const=False):
    rhs_dtype = rhs_dtype or dtype
    out_dtype = out_dtype or dtype
    zps = (-3, 0, 4) if dtype == "int8" else (0, 0, 0)
    b = ModelBuilder()
    x = b.input("x", x_shape, dtype, quantization=quantization(scales[0], zps[0]))
    if rhs_const:
        y = b.constant("y", int_input(y_shape, rhs_dtype, seed=12), quantization=quantization(scales[1], zps[1]))
    else:
        y = b.input("y", y_shape, rhs_dtype, quantization=quantization(scales[1], zps[1]))
    xs, ys = np.empty(x_shape), np.empty(y_shape)
    xs = xs.swapaxes(-1, -2) if adj_x else xs
    ys = ys.swapaxes(-1, -2) if adj_y else ys
    out_q = None if out_dtype == "int32" else quantization(scales[2], zps[2])
    out = b.tensor("out", np.matmul(xs, ys).shape, out_dtype, quantization=out_q)
    b.op("BATCH_MATMUL", [x, y], [out], adj_x=adj_x, adj_y=adj_y)
    b.output(out)
    return b.build()


@pytest.mark.parametrize("dtype,rhs_dtype", [("int8", "int8"), ("int16", "int16"), ("int16", "int8")])
@pytest.mark.parametrize("x_shape,y_shape,adj_x,adj_y", [
    ((3, 16), (16, 5), False, False),
    ((2, 3, 16), (16, 5), False, True),
    ((2, 1, 16, 3), (1, 3, 16, 5), True, False),
])
def test_integer_batch_matmul(dtype, rhs_dtype, x_shape, y_shape, adj_x, adj_y):
    if adj_y:
        y_shape = y_shape[:-2] + (y_shape[-1], y_shape[-2])
    model = int_bmm_model(x_shape, y_shape, dtype, rhs_dtype, adj_x, adj_y)
    check_op_model(model, [int_input(x_shape, dtype, 13), int_input(y_shape, rhs_dtype, 14)])


def test_int8_batch_matmul_to_int32():
    model = int_bmm_model((2, 3, 8), (8, 4), "int8", out_dtype="int32")
    check_op_model(model, [int_input((2, 3, 8), "int8", 15), int_input((8, 4), "int8", 16)])


@pytest.mark.parametrize("dtype", ["int8", "int16"])
def test_integer_batch_matmul_rounds_ties_like_the_official_kernel(dtype):
    model = int_bmm_model((64, 16), (16, 8), dtype, "int8", scales=(0.5, 0.25, 1.0), rhs_const=True)
    check_op_model(model, [int_values((64, 16), dtype, 17, -10, 10)])


def hybrid_bmm_model(x_shape, y_shape, asymmetric, per_channel, adj_y=False):
    rng = np.random.default_rng(18)
    b = ModelBuilder()
    x = b.input("x", x_shape)
    channels = y_shape[-2] if adj_y else y_shape[-1]
    scales = np.linspace(0.01, 0.04, channels) if per_channel else 0.02
    axis = len(y_shape) - (2 if adj_y else 1)
    y = b.constant("y", rng.integers(-127, 128, y_shape).astype(np.int8), quantization=quantization(scales, 0, axis))
    ys = np.empty(y_shape).swapaxes(-1, -2) if adj_y else np.empty(y_shape)
    out = b.tensor("out", np.matmul(np.empty(x_shape), ys).shape)
    b.op("BATCH_MATMUL", [x, y], [out], adj_y=adj_y, asymmetric_quantize_inputs=asymmetric)
    b.output(out)
    return b.build()


@pytest.mark.parametrize("asymmetric", [False, True])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("x_shape,y_shape", [((3, 12), (12, 7)), ((2, 4, 12), (12, 7))])
def test_hybrid_batch_matmul(asymmetric, per_channel, x_shape, y_shape):
    model = hybrid_bmm_model(x_shape, y_shape, asymmetric, per_channel)
    hybrid_check(model, [random_input(x_shape, seed=19)])


# --- EMBEDDING_LOOKUP -----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["int8", "uint8", "int4"])
@pytest.mark.parametrize("per_row", [False, True])
def test_hybrid_embedding_lookup(dtype, per_row):
    rows = 6
    b = ModelBuilder()
    ids = b.input("ids", (4,), "int32")
    bits = {"int8": (-128, 127), "uint8": (0, 255), "int4": (-8, 7)}[dtype]
    values = np.random.default_rng(20).integers(bits[0], bits[1] + 1, (rows, 3, 2))
    scales = np.linspace(0.1, 0.6, rows) if per_row else 0.25
    table = b.constant("table", values.astype(np.uint8 if dtype == "uint8" else np.int8), dtype,
                       quantization=quantization(scales, 0))
    out = b.tensor("out", (4, 3, 2))
    b.op("EMBEDDING_LOOKUP", [ids, table], [out])
    b.output(out)
    check_op_model(b.build(), [np.array([5, 0, 2, 5], np.int32)])


# --- the official 4-bit hybrid kernel and blockwise int4 weights ---------------------------------
# Both are bit-exact emulations in our reference kernels (asserted exactly below); the XLA lowerings
# are held to the float rule (1e-5 of the output magnitude).

def assert_reference_bit_exact(model, inputs):
    from litegpu.backends import ReferenceBackend
    from litegpu.ir import read_model
    from litegpu.ir.save import to_bytes
    from oracle import run_official

    data = to_bytes(model)
    expected = run_official(data, inputs)
    got = ReferenceBackend(read_model(data)).run(list(inputs))
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g, e)
    return expected


def four_bit_model(in_shape, units, per_channel, activation="NONE", asymmetric=False, bias=True, keep_num_dims=False):
    """int4 weights in [-7, 7]: the official x86 4-bit kernel repacks -8 wrongly (it turns -8 and
    some of its neighbours into +8), so -8 is left out of the comparison."""
    depth = in_shape[-1]
    rng = np.random.default_rng(21)
    b = ModelBuilder()
    x = b.input("x", in_shape)
    scales = np.linspace(0.01, 0.05, units) if per_channel else 0.03
    w = b.constant("w", rng.integers(-7, 8, (units, depth)).astype(np.int8), "int4",
                   quantization=quantization(scales, 0))
    bias_t = b.constant("bias", rng.standard_normal(units).astype(np.float32)) if bias else -1
    rows = int(np.prod(in_shape)) // depth
    y = b.tensor("y", tuple(in_shape[:-1]) + (units,) if keep_num_dims else (rows, units))
    b.op("FULLY_CONNECTED", [x, w, bias_t], [y], fused_activation_function=activation,
         asymmetric_quantize_inputs=asymmetric, keep_num_dims=keep_num_dims)
    b.output(y)
    return b.build()


@pytest.mark.parametrize("in_shape,units,per_channel,activation,asymmetric,bias", [
    ((1, 512), 256, True, "NONE", False, True),
    ((8, 512), 256, True, "NONE", False, True),
    ((8, 512), 256, False, "RELU", True, False),   # the 4-bit kernel ignores asymmetric_quantize_inputs
    ((5, 34), 4, False, "RELU6", False, True),     # just above the threshold, depth not a multiple of 32
    ((3, 32), 7, True, "NONE", True, True),
])
def test_hybrid_fc_int4_optimized_kernel(in_shape, units, per_channel, activation, asymmetric, bias):
    model = four_bit_model(in_shape, units, per_channel, activation, asymmetric, bias)
    x = random_input(in_shape, seed=22)
    x[0] = 0.0  # an all-zero row: range 127, output = bias
    assert_reference_bit_exact(model, [x])
    hybrid_check(model, [x])


def test_hybrid_fc_int4_optimized_kernel_keeps_num_dims():
    model = four_bit_model((2, 3, 64), 8, True, keep_num_dims=True)
    x = random_input((2, 3, 64), seed=23)
    assert_reference_bit_exact(model, [x])
    hybrid_check(model, [x])


def blockwise_model(in_shape, units, block, bias=True, activation="NONE", weights_dtype="int4",
                    scales_dtype=np.float16, zero_points=None):
    from litegpu.ir.model import Options, Quantization

    depth = in_shape[-1]
    rng = np.random.default_rng(24)
    b = ModelBuilder()
    x = b.input("x", in_shape)
    scales = b.constant("scales", rng.uniform(0.005, 0.05, (units, depth // block)).astype(scales_dtype))
    zps = -1 if zero_points is None else b.constant("zps", np.full((units, depth // block), zero_points, np.int32))
    details = Options({"type": "BlockwiseQuantization", "scales": scales, "zero_points": zps, "block_size": block})
    w = b.constant("w", rng.integers(-8, 8, (units, depth)).astype(np.int8), weights_dtype,
                   quantization=Quantization(details=details))
    bias_t = b.constant("bias", rng.standard_normal(units).astype(np.float32)) if bias else -1
    y = b.tensor("y", (int(np.prod(in_shape)) // depth, units))
    b.op("FULLY_CONNECTED", [x, w, bias_t], [y], fused_activation_function=activation)
    b.output(y)
    return b.build()


@pytest.mark.parametrize("in_shape,units,block,bias", [
    ((1, 64), 8, 32, True),
    ((5, 256), 13, 32, True),
    ((2, 96), 6, 16, False),
    ((7, 2, 256), 64, 64, True),
    ((1, 32, 512), 16, 128, True),  # litert-torch's dynamic_int4_block128 (a prefill of 32 tokens)
    ((32, 512), 8, 256, False),  # its dynamic_int4_block256 scheme
])
def test_blockwise_int4_fc(in_shape, units, block, bias):
    model = blockwise_model(in_shape, units, block, bias)
    x = random_input(in_shape, seed=25)
    x[0, ..., :3] = 0.0
    assert_reference_bit_exact(model, [x])
    hybrid_check(model, [x])


def test_blockwise_int4_fc_applies_no_fused_activation():
    """Measured: EvalBlockwise4Bit never applies the fused activation."""
    model = blockwise_model((3, 64), 8, 32, activation="RELU")
    expected = assert_reference_bit_exact(model, [random_input((3, 64), seed=26)])
    assert (expected[0] < 0).any()
    hybrid_check(model, [random_input((3, 64), seed=26)])


@pytest.mark.parametrize("kwargs,match", [
    (dict(in_shape=(1, 64), units=8, block=32, weights_dtype="int8"), "only int4"),
    (dict(in_shape=(1, 64), units=2, block=32), "outputs the bias"),
    (dict(in_shape=(1, 16), units=8, block=8), "outputs the bias"),
    (dict(in_shape=(1, 64), units=8, block=32, scales_dtype=np.float32), "float16"),
    (dict(in_shape=(1, 64), units=8, block=32, zero_points=1), "zero points"),
])
def test_blockwise_fc_refuses_what_the_official_kernel_does_not_compute(kwargs, match):
    from litegpu.backends import ReferenceBackend
    from litegpu.errors import UnsupportedOpError

    in_shape = kwargs.pop("in_shape")
    model = blockwise_model(in_shape, **kwargs)
    with pytest.raises(UnsupportedOpError, match=match):
        ReferenceBackend(model).run([random_input(in_shape, seed=27)])


@pytest.mark.parametrize("asymmetric", [False, True])
def test_hybrid_fc_deep_enough_to_need_float32_spans_stays_exact(asymmetric):
    """4096 weights of +-127 per unit: one float32 GEMM could round (sums past 2^24), so the XLA lowering
    splits the depth into spans that are each exact (ops.matmul.float32_exact_depth_spans)."""
    from litegpu.ops.matmul import float32_exact_depth_spans

    model = hybrid_fc_model((2, 4096), 8, asymmetric, per_channel=True)
    w = model.subgraphs[0].tensors[1]
    w.data[...] = np.where(np.random.default_rng(0).random(w.shape) < 0.5, -127, 127)
    spans = float32_exact_depth_spans(w, 128)
    assert spans is not None and len(spans) >= 4
    assert all(np.abs(w.data[:, a:b].astype(np.int64)).sum(axis=1).max() * 128 < 2 ** 24 for a, b in spans)
    hybrid_check(model, [random_input((2, 4096), seed=8)])


def test_float32_spans_refuse_weights_that_no_split_makes_exact():
    from litegpu.ops.matmul import _exact_spans

    assert _exact_spans(np.full((2, 70000), 127, np.int8), 128) is None  # 16 spans of 4375 still pass 2^24
    assert _exact_spans(np.ones((2, 100), np.int8), 128) == [(0, 100)]
