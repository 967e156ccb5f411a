import numpy as np
import pytest

from litegpu.ir.builder import quantization
from oracle import assert_reference_rejects, check_built, const, one_op_model, random_input

DTYPES = ["float32", "float16", "int8", "uint8", "int16", "int32", "int64", "bool"]


def one_op(op, inputs, outputs, in_quant=None, **options):
    return one_op_model(op, inputs, outputs, input_quant=in_quant, **options)


def check(op, inputs, outputs, **kwargs):
    return check_built(one_op(op, inputs, outputs, **kwargs))


def assert_rejected(op, inputs, outputs, **kwargs):
    assert_reference_rejects(one_op(op, inputs, outputs, **kwargs), match=op)


# ---- CONCATENATION

@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
@pytest.mark.parametrize("count", [1, 3])
def test_concatenation_axes(axis, count):
    base = (2, 3, 4)
    a = axis % 3
    shapes = [tuple(d + i if j == a else d for j, d in enumerate(base)) for i in range(count)]
    out = tuple(sum(s[a] for s in shapes) if j == a else d for j, d in enumerate(base))
    check("CONCATENATION", [random_input(s, seed=i) for i, s in enumerate(shapes)], [(out, "float32")], axis=axis)


@pytest.mark.parametrize("activation", ["RELU", "TANH"])
def test_concatenation_rejects_fused_activation_like_official(activation):
    assert_rejected("CONCATENATION", [random_input((2, 3)), random_input((2, 2))], [((2, 5), "float32")],
                    axis=1, fused_activation_function=activation)


def test_concatenation_of_scalars():
    # The official kernel concatenates scalars only when they are constants.
    check("CONCATENATION", [const(1.5, np.float32), const(-2, np.float32), const(4, np.float32)],
          [((3,), "float32")], axis=0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_concatenation_dtypes(dtype):
    check("CONCATENATION", [random_input((2, 3), dtype), random_input((2, 1), dtype, seed=1)], [((2, 4), dtype)],
          axis=1)


def test_concatenation_with_a_constant_and_empty_input():
    check("CONCATENATION", [random_input((2, 3)), const(np.ones((2, 2)), np.float32), random_input((2, 0))],
          [((2, 5), "float32")], axis=1)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16"])
def test_concatenation_same_quantization_copies(dtype):
    q = quantization(0.05, 0 if dtype == "int16" else 3)
    check("CONCATENATION", [random_input((2, 3), dtype), random_input((1, 3), dtype, seed=2)],
          [((3, 3), dtype, q)], in_quant=[q, q], axis=0)


def test_concatenation_uint8_requantizes_to_output_scale():
    qs = [quantization(0.05, 120), quantization(0.2, 7)]
    out_q = quantization(0.1, 128)
    x = [np.arange(0, 256, 11, dtype=np.uint8).reshape(1, -1)[:, :20], np.arange(20, dtype=np.uint8).reshape(1, 20) * 13]
    check("CONCATENATION", x, [((2, 20), "uint8", out_q)], in_quant=qs, axis=0)


def test_concatenation_rejects_mismatched_shapes():
    assert_rejected("CONCATENATION", [random_input((2, 3)), random_input((3, 3))], [((2, 6), "float32")], axis=1)


# ---- PACK / UNPACK

@pytest.mark.parametrize("axis", [0, 1, 2, -1])
@pytest.mark.parametrize("dtype", ["float32", "int8", "uint8", "int16", "int32", "int64"])
def test_pack(axis, dtype):
    xs = [random_input((2, 3), dtype, seed=i) for i in range(3)]
    out = np.stack(xs, axis=axis).shape
    check("PACK", xs, [(out, dtype)], axis=axis, values_count=3)


def test_pack_scalars():
    check("PACK", [np.float32(1.0).reshape(()), np.float32(2.0).reshape(())], [((2,), "float32")], values_count=2)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("dtype", ["float32", "int8", "uint8", "int16", "int32", "bool"])
def test_unpack(axis, dtype):
    x = random_input((3, 2, 4), dtype)
    parts = [np.take(x, i, axis=axis) for i in range(x.shape[axis])]
    check("UNPACK", [x], [(p.shape, dtype) for p in parts], axis=axis, num=len(parts))


# ---- SPLIT / SPLIT_V

@pytest.mark.parametrize("axis,n", [(0, 2), (1, 3), (-1, 2), (2, 1)])
@pytest.mark.parametrize("dtype", ["float32", "int8", "int32", "int64"])
def test_split(axis, n, dtype):
    x = random_input((4, 6, 2), dtype)
    parts = np.split(x, n, axis=axis)
    check("SPLIT", [const(axis), x], [(p.shape, dtype) for p in parts], num_splits=n)


def test_split_rejects_uneven_split():
    assert_rejected("SPLIT", [const(1), random_input((4, 5))], [((4, 2), "float32")] * 2, num_splits=2)


@pytest.mark.parametrize("sizes,axis", [([1, 2, 3], 1), ([2, -1], 0), ([-1, 4, 0], -2), ([6], 1), ([3, 3], -1)])
@pytest.mark.parametrize("dtype", ["float32", "int8", "int64"])
def test_split_v(sizes, axis, dtype):
    x = random_input((4, 6, 6), dtype)
    dim = x.shape[axis]
    real = [dim - sum(s for s in sizes if s != -1) if s == -1 else s for s in sizes]
    parts = np.split(x, np.cumsum(real)[:-1], axis=axis)
    check("SPLIT_V", [x, const(sizes), const(axis)], [(p.shape, dtype) for p in parts], num_splits=len(sizes))


def test_split_v_rejects_sizes_not_adding_up():
    assert_rejected("SPLIT_V", [random_input((4, 6)), const([2, 3]), const(1)], [((4, 2), "float32"),
                                                                              ((4, 3), "float32")], num_splits=2)
