import numpy as np
import pytest

from litegpu.backends import ReferenceBackend
from litegpu.errors import ModelExecutionError
from litegpu.ir.builder import ModelBuilder
from oracle import check_op_model, full_range, random_input

COMPARISONS = ["LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL", "EQUAL", "NOT_EQUAL"]
SHAPE_PAIRS = [((), ()), ((), (2, 3)), ((1,), (5,)), ((2, 1, 3), (4, 1)), ((4, 1, 1, 3), (1, 2, 5, 1)),
               ((1, 1, 1, 1, 1, 5), (2, 3, 1, 4, 1, 1)), ((0, 3), (1, 3))]


def model(op, shapes, in_dtype, out_dtype):
    b = ModelBuilder()
    xs = [b.input(f"x{i}", s, in_dtype) for i, s in enumerate(shapes)]
    y = b.tensor("y", np.broadcast_shapes(*shapes), out_dtype)
    b.op(op, xs, [y])
    b.output(y)
    return b.build()


def with_ties(shapes, dtype, seed=0):
    """Operands drawn from few values, so that equality happens often."""
    x = random_input(shapes[0], dtype, seed=seed, low=-0.2, high=0.2)
    y = random_input(shapes[1], dtype, seed=seed + 1, low=-0.2, high=0.2)
    if np.dtype(dtype).kind == "f":
        x, y = np.round(x * 10).astype(dtype), np.round(y * 10).astype(dtype)
    return [x, y]


@pytest.mark.parametrize("op,dtype", [(op, d) for op in COMPARISONS
                                      for d in ["float32", "float16", "int16", "int32", "int64"]
                                      if (op, d) != ("NOT_EQUAL", "int16")])
def test_comparison_types_match_official(op, dtype):
    shapes = ((2, 1, 3), (4, 1))
    check_op_model(model(op, shapes, dtype, "bool"), with_ties(shapes, dtype))


@pytest.mark.parametrize("op", ["EQUAL", "NOT_EQUAL"])
def test_bool_equality_matches_official(op):
    shapes = ((3, 4), (4,))
    check_op_model(model(op, shapes, "bool", "bool"), [random_input(s, "bool", seed=i) for i, s in enumerate(shapes)])


@pytest.mark.parametrize("shapes", SHAPE_PAIRS, ids=str)
@pytest.mark.parametrize("op", ["LESS", "EQUAL"])
def test_comparison_broadcasting_matches_official(op, shapes):
    check_op_model(model(op, shapes, "float32", "bool"), with_ties(shapes, "float32", seed=4))


@pytest.mark.parametrize("op", COMPARISONS)
def test_comparison_with_nan_matches_official(op):
    x = np.array([np.nan, 1, np.nan, np.inf, -0.0], np.float32)
    y = np.array([1, np.nan, np.nan, np.inf, 0.0], np.float32)
    check_op_model(model(op, [(5,), (5,)], "float32", "bool"), [x, y])


@pytest.mark.parametrize("shapes", SHAPE_PAIRS[:5], ids=str)
@pytest.mark.parametrize("op", ["LOGICAL_AND", "LOGICAL_OR"])
def test_logical_binary_matches_official(op, shapes):
    check_op_model(model(op, shapes, "bool", "bool"), [random_input(s, "bool", seed=i) for i, s in enumerate(shapes)])


@pytest.mark.parametrize("shape", [(), (7,), (2, 3, 4), (0, 2)], ids=str)
def test_logical_not_matches_official(shape):
    check_op_model(model("LOGICAL_NOT", [shape], "bool", "bool"), [random_input(shape, "bool", seed=2)])


BITWISE_TYPES = ["int8", "uint8", "int16", "uint16", "int32", "uint32"]


@pytest.mark.parametrize("dtype", BITWISE_TYPES)
def test_bitwise_xor_matches_official(dtype):
    shapes = ((2, 1, 3), (4, 1))
    check_op_model(model("BITWISE_XOR", shapes, dtype, dtype), [full_range(s, dtype, i) for i, s in enumerate(shapes)])


@pytest.mark.parametrize("dtype", BITWISE_TYPES)
def test_right_shift_matches_official(dtype):
    # Shifts below 0 and at or past the bit width are clamped by the official kernel.
    bits = np.dtype(dtype).itemsize * 8
    x = full_range((3, 1), dtype, 0)
    low = -3 if np.dtype(dtype).kind == "i" else 0
    shifts = np.array(sorted({low, 0, 1, 3, bits - 1, bits, min(bits + 5, np.iinfo(dtype).max)}), dtype)
    check_op_model(model("RIGHT_SHIFT", [x.shape, shifts.shape], dtype, dtype), [x, shifts])


def test_mixed_input_types_are_an_error():
    b = ModelBuilder()
    x, y = b.input("x", (3,), "float32"), b.input("y", (3,), "int32")
    z = b.tensor("z", (3,), "bool")
    b.op("LESS", [x, y], [z])
    b.output(z)
    with pytest.raises(ModelExecutionError, match="LESS"):
        ReferenceBackend(b.build()).run([np.zeros(3, np.float32), np.zeros(3, np.int32)])


# --- quantized int8 / uint8: compared by real value after fixed-point rescaling -----------------

from litegpu.ir.builder import quantization  # noqa: E402

QUANTIZED_SCALES = [((0.05, 3), (0.05, 3)), ((0.05, 3), (0.1, -5)), ((0.013, 10), (0.2, -50))]


def quantized_comparison(op, dtype, qx, qy, sx, sy):
    b = ModelBuilder()
    x = b.input("x", sx, dtype, quantization=quantization(*qx))
    y = b.input("y", sy, dtype, quantization=quantization(*qy))
    out = b.tensor("out", np.broadcast_shapes(sx, sy), "bool")
    b.op(op, [x, y], [out])
    b.output(out)
    return b.build()


@pytest.mark.parametrize("qx,qy", QUANTIZED_SCALES)
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("op", COMPARISONS)
def test_quantized_comparison_matches_official(op, dtype, qx, qy):
    offset = 128 if dtype == "uint8" else 0
    model = quantized_comparison(op, dtype, (qx[0], qx[1] + offset), (qy[0], qy[1] + offset), (2, 3, 4), (3, 1))
    # few distinct values, so that equal real values (x 0.05 * 2k == y 0.1 * k) happen
    x = random_input((2, 3, 4), "int8", seed=1, low=-0.4, high=0.4).astype(np.int64) * 2 + 3 + offset
    y = random_input((3, 1), "int8", seed=2, low=-0.4, high=0.4).astype(np.int64) - 5 + offset
    check_op_model(model, [x.astype(dtype), y.astype(dtype)])


def test_quantized_comparison_with_scale_of_one_or_more_is_refused():
    from litegpu.ir import read_model
    from litegpu.ir.save import to_bytes
    from litegpu.ops import Target, find

    sg = read_model(to_bytes(quantized_comparison("LESS", "int8", (2.0, 0), (0.5, 1), (3,), (3,)))).subgraphs[0]
    assert ">= 1" in find("LESS").unsupported_reason(sg.operators[0], sg, Target.XLA_CPU)
