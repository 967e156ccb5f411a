import numpy as np
import pytest

from litegpu.ir.builder import quantization
from oracle import assert_reference_rejects, check_built, const, one_op_model, random_input


def one_op(op, inputs, outputs, in_quant=None, **options):
    return one_op_model(op, inputs, outputs, input_quant={0: in_quant}, **options)


def check(op, inputs, outputs, **kwargs):
    return check_built(one_op(op, inputs, outputs, **kwargs))


def assert_rejected(op, inputs, outputs, **kwargs):
    assert_reference_rejects(one_op(op, inputs, outputs, **kwargs), match=op)


def reduced_shape(shape, axes, keep_dims):
    axes = {a % len(shape) for a in axes}
    if keep_dims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


AXES = [([1], (2, 3, 4)), ([0, 2], (2, 3, 4)), ([-1], (2, 3, 4)), ([1, 1, -2], (2, 3, 4)),
        ([0, 1, 2], (2, 3, 4)), ([1, 2], (1, 5, 5, 3)), ([0], (6,))]


@pytest.mark.parametrize("op", ["MEAN", "SUM", "REDUCE_PROD", "REDUCE_MAX", "REDUCE_MIN"])
@pytest.mark.parametrize("axes,shape", AXES)
@pytest.mark.parametrize("keep_dims", [False, True])
def test_float_reductions(op, axes, shape, keep_dims):
    low, high = (0.5, 1.5) if op == "REDUCE_PROD" else (-3, 3)
    check(op, [random_input(shape, low=low, high=high), const(axes)],
          [(reduced_shape(shape, axes, keep_dims), "float32")], keep_dims=keep_dims)


@pytest.mark.parametrize("op", ["MEAN", "SUM", "REDUCE_PROD", "REDUCE_MAX", "REDUCE_MIN"])
@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("axes", [[1], [0, 2]])
def test_integer_reductions(op, dtype, axes):
    shape = (2, 3, 4)
    low, high = (-0.3, 0.3) if op == "REDUCE_PROD" else (-10, 10)
    check(op, [random_input(shape, dtype, low=low, high=high), const(axes)],
          [(reduced_shape(shape, axes, False), dtype)])


@pytest.mark.parametrize("op", ["REDUCE_MAX", "REDUCE_MIN"])
@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16"])
def test_extrema_of_quantized_tensors_copy_values(op, dtype):
    q = quantization(0.25, 0 if dtype == "int16" else 3)
    check(op, [random_input((2, 5, 3), dtype, low=-12, high=12), const([1])], [((2, 3), dtype, q)], in_quant=q)


def test_extrema_reject_a_requantization():
    assert_rejected("REDUCE_MAX", [random_input((2, 3), "int8"), const([1])], [((2,), "int8", quantization(0.5, 0))],
                    in_quant=quantization(0.25, 0))


QUANT = [((0.1, 3), (0.1, 3)), ((0.1, 3), (0.05, -2)), ((0.013, -7), (0.3, 5)), ((0.5, 1), (0.007, 0))]
QUANT_SHAPES = [((1, 4, 5, 8), [1, 2], True), ((2, 7, 7, 20), [2, 1], True), ((1, 4, 5, 8), [1, 2], False),
                ((2, 3, 4), [0, 2], True), ((2, 6, 6, 3), [1, 2, -3], True), ((1, 3, 3, 2), [3], False)]


@pytest.mark.parametrize("op", ["MEAN", "SUM"])
@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16"])
@pytest.mark.parametrize("qin,qout", QUANT)
@pytest.mark.parametrize("shape,axes,keep_dims", QUANT_SHAPES)
def test_quantized_mean_and_sum(op, dtype, qin, qout, shape, axes, keep_dims):
    # MEAN over H and W of a 4-D int8/uint8 tensor takes the official runtime's optimized kernel
    # (NEON-style rounding on whole blocks of 16 channels); other MEANs the fixed-point reference,
    # SUM a float32 rescale.
    offset = {"int8": 0, "uint8": 128, "int16": None}[dtype]
    qin = (qin[0], 0 if offset is None else qin[1] + offset)
    qout = (qout[0], 0 if offset is None else qout[1] + offset)
    x = random_input(shape, dtype, seed=len(shape) + shape[-1], low=-30, high=30)
    check(op, [x, const(axes)], [(reduced_shape(shape, axes, keep_dims), dtype, quantization(*qout))],
          in_quant=quantization(*qin), keep_dims=keep_dims)


@pytest.mark.parametrize("op", ["REDUCE_ANY", "REDUCE_ALL"])
@pytest.mark.parametrize("axes,shape", AXES[:5])
@pytest.mark.parametrize("keep_dims", [False, True])
def test_boolean_reductions(op, axes, shape, keep_dims):
    x = np.random.default_rng(5).random(shape) < (0.15 if op == "REDUCE_ANY" else 0.85)
    check(op, [x, const(axes)], [(reduced_shape(shape, axes, keep_dims), "bool")], keep_dims=keep_dims)


def test_reduce_rejects_out_of_range_axis():
    assert_rejected("MEAN", [random_input((3, 4)), const([2])], [((3,), "float32")])


# ---- ARG_MAX / ARG_MIN

@pytest.mark.parametrize("op", ["ARG_MAX", "ARG_MIN"])
@pytest.mark.parametrize("axis", [0, 1, -1, 2])
@pytest.mark.parametrize("out", ["int32", "int64"])
def test_arg_extrema(op, axis, out):
    x = random_input((3, 4, 5))
    check(op, [x, const([axis])], [(reduced_shape(x.shape, [axis], False), out)], output_type=out.upper())


@pytest.mark.parametrize("op", ["ARG_MAX", "ARG_MIN"])
@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "bool"])
def test_arg_extrema_dtypes_and_ties(op, dtype):
    x = random_input((4, 6), dtype, low=-0.2, high=0.2)  # few distinct values: many ties
    check(op, [x, const(1, np.int64)], [((4,), "int32")], output_type="INT32")


# ---- CUMSUM

@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "int32", "int64"])
def test_cumsum(axis, exclusive, reverse, dtype):
    x = random_input((3, 4, 2), dtype)
    check("CUMSUM", [x, const(axis)], [(x.shape, dtype)], exclusive=exclusive, reverse=reverse)


# ---- TOPK_V2

@pytest.mark.parametrize("shape,k", [((10,), 3), ((2, 7), 7), ((2, 3, 5), 1)])
@pytest.mark.parametrize("dtype", ["float32", "int8", "uint8", "int16", "int32", "int64"])
def test_topk(shape, k, dtype):
    x = random_input(shape, dtype, low=-0.5, high=0.5)  # few distinct values: ties go to the lower index
    check("TOPK_V2", [x, const(k)], [(shape[:-1] + (k,), dtype), (shape[:-1] + (k,), "int32")])


def test_topk_distinct_floats():
    x = np.random.default_rng(2).permutation(40).astype(np.float32).reshape(4, 10) - 20
    check("TOPK_V2", [x, const(4)], [((4, 4), "float32"), ((4, 4), "int32")])


@pytest.mark.parametrize("shape,axes", [
    ((1, 1, 576), [2]),      # one output: a sequential sum (SmolLM's RMSNorm in a decode step)
    ((1, 32, 576), [-1]),    # last axis, several outputs: Eigen's 4-wide, two-accumulator column sums
    ((3, 7, 37), [-1]),      # rows starting off 16-byte boundaries: each row's packets start elsewhere
    ((2, 5, 3), [-1]),       # rows shorter than a packet
    ((2, 5, 7, 9), [1, 2]),  # other axes: reference_ops::Mean, sequential in row-major order
    ((4, 8, 6), [1]),
])
def test_float_mean_is_bit_exact(shape, axes):
    """MEAN feeds RMSNorm / LayerNorm, and through them int8 row quantization: it must give the builtin bits."""
    from oracle import assert_builtin_bits
    x = (np.random.default_rng(0).normal(size=shape) ** 2 * 30).astype(np.float32)
    out = tuple(1 if i in [a % len(shape) for a in axes] else d for i, d in enumerate(shape))
    model, _ = one_op("MEAN", [x, const(axes)], [(out, "float32")], keep_dims=True)
    assert_builtin_bits(model, [x])
