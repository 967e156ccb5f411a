import numpy as np
import pytest

from litegpu.ir.builder import ModelBuilder, quantization
from oracle import assert_reference_rejects, check_built, check_op_model, const, one_op_model, random_input

DTYPES = ["float32", "float16", "int8", "uint8", "int16", "int32", "int64", "bool"]


one_op = one_op_model


def check(op, inputs, outputs, **kwargs):
    return check_built(one_op(op, inputs, outputs, **kwargs))


def assert_rejected(op, inputs, outputs, **kwargs):
    assert_reference_rejects(one_op(op, inputs, outputs, **kwargs), match=op)


@pytest.mark.parametrize("dtype", DTYPES)
def test_reshape_dtypes(dtype):
    x = random_input((2, 3, 4), dtype)
    check("RESHAPE", [x, const([4, -1])], [((4, 6), dtype)])


@pytest.mark.parametrize("in_shape,new_shape,out_shape", [
    ((2, 3, 4), [-1], (24,)),
    ((2, 3, 4), [3, -1, 2], (3, 4, 2)),
    ((0, 4), [-1, 2], (0, 2)),
    ((0, 4), [2, 0, 3], (2, 0, 3)),
    ((6,), [1, 2, 1, 3], (1, 2, 1, 3)),
])
def test_reshape_shape_input(in_shape, new_shape, out_shape):
    check("RESHAPE", [random_input(in_shape), const(new_shape)], [(out_shape, "float32")])


@pytest.mark.parametrize("new_shape,out_shape", [((3, 8), (3, 8)), ((-1, 2), (12, 2)), ((0,), ())])
def test_reshape_from_options(new_shape, out_shape):
    x = random_input((1, 1) if out_shape == () else (2, 12))
    check("RESHAPE", [x], [(out_shape, "float32")], new_shape=list(new_shape))


def test_reshape_int64_shape_tensor_falls_back_to_options():
    # The official kernel reads the shape input only when it is an int32 vector.
    check("RESHAPE", [random_input((2, 6)), const([12], np.int64)], [((3, 4), "float32")], new_shape=[3, 4])


@pytest.mark.parametrize("new_shape", [[5, -1], [-1, -1], [7]])
def test_reshape_rejects_bad_shapes(new_shape):
    assert_rejected("RESHAPE", [random_input((2, 6)), const(new_shape)], [((12,), "float32")])


def test_reshape_quantized_passes_values():
    q = quantization(0.1, 3)
    b = ModelBuilder()
    x = b.input("x", (2, 6), "int8", quantization=q)
    s = b.constant("s", np.array([3, 4], np.int32))
    y = b.tensor("y", (3, 4), "int8", quantization=q)
    b.op("RESHAPE", [x, s], [y])
    b.output(y)
    check_op_model(b.build(), [random_input((2, 6), np.int8)])


@pytest.mark.parametrize("shape,dims,out", [
    ((1, 3, 1, 2), [], (3, 2)),
    ((1, 3, 1, 2), [0], (3, 1, 2)),
    ((1, 3, 1, 2), [-2, 0], (3, 2)),
    ((1, 1), [], ()),
])
@pytest.mark.parametrize("dtype", ["float32", "int8", "bool"])
def test_squeeze(shape, dims, out, dtype):
    check("SQUEEZE", [random_input(shape, dtype)], [(out, dtype)], squeeze_dims=dims)


def test_squeeze_rejects_non_unit_dim():
    assert_rejected("SQUEEZE", [random_input((1, 3))], [((1,), "float32")], squeeze_dims=[1])


@pytest.mark.parametrize("axis,out", [(0, (1, 2, 3)), (2, (2, 3, 1)), (-1, (2, 3, 1)), (-3, (1, 2, 3))])
@pytest.mark.parametrize("axis_dtype", [np.int32, np.int64])
def test_expand_dims(axis, out, axis_dtype):
    check("EXPAND_DIMS", [random_input((2, 3)), const(axis, axis_dtype)], [(out, "float32")])


def test_expand_dims_rejects_out_of_range_axis():
    assert_rejected("EXPAND_DIMS", [random_input((2, 3)), const(3)], [((2, 3, 1), "float32")])


@pytest.mark.parametrize("perm", [[1, 0], [0, 2, 1], [3, 1, 0, 2], [4, 0, 3, 1, 2], [5, 4, 3, 2, 1, 0], [0]])
def test_transpose(perm):
    shape = (2, 3, 4, 1, 2, 3)[:len(perm)]
    check("TRANSPOSE", [random_input(shape), const(perm)], [(tuple(shape[p] for p in perm), "float32")])


@pytest.mark.parametrize("dtype", DTYPES)
def test_transpose_dtypes(dtype):
    check("TRANSPOSE", [random_input((2, 3, 4), dtype), const([2, 0, 1])], [((4, 2, 3), dtype)])


def test_transpose_rejects_bad_permutation():
    assert_rejected("TRANSPOSE", [random_input((2, 3)), const([0, 0])], [((2, 2), "float32")])


@pytest.mark.parametrize("out_type", ["int32", "int64"])
@pytest.mark.parametrize("shape", [(2, 3, 4), (5,), (0, 2)])
def test_shape(out_type, shape):
    check("SHAPE", [random_input(shape)], [((len(shape),), out_type)], out_type=out_type.upper())


@pytest.mark.parametrize("shape", [(), (3,), (2, 1, 4)])
def test_rank(shape):
    check("RANK", [random_input(shape, np.int32)], [((), "int32")])


@pytest.mark.parametrize("in_shape,target", [((3,), (2, 3)), ((2, 1), (2, 4)), ((1, 3, 1), (2, 3, 5)),
                                             ((), (2, 2)), ((2, 1, 1, 1, 1), (2, 2, 1, 3, 2))])
@pytest.mark.parametrize("dtype", ["float32", "int8", "int64", "bool"])
def test_broadcast_to(in_shape, target, dtype):
    check("BROADCAST_TO", [random_input(in_shape, dtype), const(target)], [(target, dtype)], version=2)


def test_broadcast_to_rejects_incompatible_shape():
    assert_rejected("BROADCAST_TO", [random_input((3,)), const([2, 4])], [((2, 4), "float32")], version=2)


@pytest.mark.parametrize("a,b", [([2, 1, 3], [4, 1]), ([5], [1]), ([1, 0], [3, 1])])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_broadcast_args(a, b, dtype):
    out = np.broadcast_shapes(tuple(a), tuple(b))
    check("BROADCAST_ARGS", [const(a, dtype), const(b, dtype)], [((len(out),), np.dtype(dtype).name)])


def test_broadcast_args_from_inputs():
    check("BROADCAST_ARGS", [np.array([2, 1], np.int32), np.array([3], np.int32)], [((2,), "int32")])


@pytest.mark.parametrize("shape,multiples", [((2, 3), [1, 2]), ((2, 3), [3, 1]), ((1, 2, 2), [2, 2, 2]),
                                             ((3,), [0]), ((2, 1), [1, 1])])
@pytest.mark.parametrize("dtype", ["float32", "int8", "int64", "bool"])
def test_tile(shape, multiples, dtype):
    out = tuple(d * m for d, m in zip(shape, multiples))
    check("TILE", [random_input(shape, dtype), const(multiples)], [(out, dtype)])


def test_tile_int64_multiples():
    check("TILE", [random_input((2, 3)), const([2, 1], np.int64)], [((4, 3), "float32")])


@pytest.mark.parametrize("value", [np.float32(1.5), np.int32(-7), np.int64(2 ** 40), np.bool_(True)])
# (An empty constant cannot be tested yet: the IR reads zero-size constants as missing.)
@pytest.mark.parametrize("dims", [[2, 3], [1], [0, 4]])
def test_fill(value, dims):
    value = np.asarray(value)
    check("FILL", [const(dims), value], [(tuple(dims), value.dtype.name)])


def test_fill_int64_dims_constant_value():
    check("FILL", [const([3, 1], np.int64), const(4.0, np.float32)], [((3, 1), "float32")])


@pytest.mark.parametrize("start,limit,delta,dtype", [
    (0, 10, 3, np.int32), (10, 0, -3, np.int32), (-4, 2**33, 2**31, np.int64),
    (0.5, 2.0, 0.1, np.float32), (3.0, -1.0, -0.7, np.float32),
])
def test_range(start, limit, delta, dtype):
    s, l, d = (np.asarray(v, dtype) for v in (start, limit, delta))
    size = len(np.arange(s, l, d)) if np.dtype(dtype).kind == "i" else int(np.ceil(abs((l - s) / d)))
    check("RANGE", [const(s, dtype), const(l, dtype), const(d, dtype)], [((size,), np.dtype(dtype).name)])


def test_range_rejects_wrong_direction():
    assert_rejected("RANGE", [const(0), const(5), const(-1)], [((5,), "int32")])
