import numpy as np
import pytest

from litegpu.ir.builder import quantization
from oracle import assert_reference_rejects, check_built, const, one_op_model, random_input

DTYPES = ["float32", "float16", "int8", "uint8", "int16", "int32", "int64", "bool"]


def one_op(op, inputs, outputs, quant=None, **options):
    """``quant`` goes on the input, the constant pad value (input 2) and the output."""
    return one_op_model(op, inputs, outputs, input_quant={0: quant, 2: quant}, output_quant=quant, **options)


def check(op, inputs, outputs, **kwargs):
    return check_built(one_op(op, inputs, outputs, **kwargs))


def assert_rejected(op, inputs, outputs, **kwargs):
    assert_reference_rejects(one_op(op, inputs, outputs, **kwargs), match=op)


def padded(shape, pads):
    return tuple(d + a + b for d, (a, b) in zip(shape, pads))


PADS = [
    ((2, 3), [[1, 0], [0, 2]]),
    ((1, 4, 4, 3), [[0, 0], [1, 1], [2, 1], [0, 0]]),
    ((2, 3, 1, 2, 2), [[1, 1], [0, 0], [3, 0], [0, 1], [1, 0]]),
    ((3,), [[0, 0]]),
    ((0, 2), [[1, 1], [0, 1]]),
]


@pytest.mark.parametrize("shape,pads", PADS)
@pytest.mark.parametrize("pad_dtype", [np.int32, np.int64])
def test_pad(shape, pads, pad_dtype):
    check("PAD", [random_input(shape), const(pads, pad_dtype)], [(padded(shape, pads), "float32")])


@pytest.mark.parametrize("dtype", DTYPES)
def test_pad_dtypes(dtype):
    check("PAD", [random_input((2, 3), dtype), const([[1, 2], [0, 1]])], [((5, 4), dtype)])


@pytest.mark.parametrize("dtype,zero_point", [("int8", -5), ("uint8", 130)])
def test_pad_quantized_pads_with_the_zero_point(dtype, zero_point):
    q = quantization(0.1, zero_point)
    check("PAD", [random_input((1, 2, 2, 1), dtype), const([[0, 0], [1, 1], [1, 1], [0, 0]])],
          [((1, 4, 4, 1), dtype)], quant=q)


def test_pad_rejects_negative_paddings():
    assert_rejected("PAD", [random_input((2, 3)), const([[1, -1], [0, 0]])], [((2, 3), "float32")])


@pytest.mark.parametrize("shape,pads", PADS[:3])
@pytest.mark.parametrize("dtype,value", [("float32", -1.5), ("int32", 7), ("int64", -3), ("int8", 4)])
def test_padv2(shape, pads, dtype, value):
    check("PADV2", [random_input(shape, dtype), const(pads), const(value, dtype)], [(padded(shape, pads), dtype)])


def test_padv2_value_from_input():
    check("PADV2", [random_input((2, 3)), const([[1, 1], [2, 0]]), np.asarray(9.5, np.float32)],
          [((4, 5), "float32")])


def test_padv2_quantized_value():
    q = quantization(0.5, 10)
    check("PADV2", [random_input((2, 2), "uint8"), const([[1, 0], [0, 1]]), const(200, np.uint8)],
          [((3, 3), "uint8")], quant=q)


@pytest.mark.parametrize("mode", ["REFLECT", "SYMMETRIC"])
@pytest.mark.parametrize("shape,pads", [
    ((3, 4), [[2, 1], [3, 0]]),
    ((1, 4, 5, 2), [[0, 0], [3, 3], [1, 4], [0, 0]]),
    ((5,), [[0, 4]]),
    ((2, 2, 3), [[1, 1], [1, 0], [2, 2]]),
])
@pytest.mark.parametrize("dtype", ["float32", "int8", "int64"])
def test_mirror_pad(mode, shape, pads, dtype):
    limit = 1 if mode == "REFLECT" else 0
    pads = [[min(a, d - limit), min(b, d - limit)] for (a, b), d in zip(pads, shape)]
    check("MIRROR_PAD", [random_input(shape, dtype), const(pads)], [(padded(shape, pads), dtype)], mode=mode)


def test_mirror_pad_rejects_too_wide_reflection():
    assert_rejected("MIRROR_PAD", [random_input((3,)), const([[3, 0]])], [((6,), "float32")], mode="REFLECT")
