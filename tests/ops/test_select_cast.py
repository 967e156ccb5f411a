import numpy as np
import pytest
from oracle import check_built, check_op_model, one_op_model, random_input

from litegpu.backends import ReferenceBackend
from litegpu.errors import ModelExecutionError
from litegpu.ir.builder import ModelBuilder, quantization
from litegpu.ir.dtypes import numpy_dtype, to_tflite

SELECT_TYPES = ["float32", "float16", "int8", "uint8", "int16", "int32", "int64", "bool"]


def select_model(op, shapes, dtype):
    cond_shape, x_shape, y_shape = shapes
    out_shape = np.broadcast_shapes(*shapes) if op == "SELECT_V2" else x_shape
    b = ModelBuilder()
    ins = [b.input("cond", cond_shape, "bool"), b.input("x", x_shape, dtype), b.input("y", y_shape, dtype)]
    out = b.tensor("out", out_shape, dtype)
    b.op(op, ins, [out])
    b.output(out)
    return b.build()


def select_inputs(shapes, dtype):
    return [random_input(shapes[0], "bool", seed=0), random_input(shapes[1], dtype, seed=1),
            random_input(shapes[2], dtype, seed=2)]


@pytest.mark.parametrize("dtype", SELECT_TYPES)
@pytest.mark.parametrize("op", ["SELECT", "SELECT_V2"])
def test_select_types_match_official(op, dtype):
    shapes = ((2, 3), (2, 3), (2, 3))
    check_op_model(select_model(op, shapes, dtype), select_inputs(shapes, dtype))


@pytest.mark.parametrize("shapes", [
    ((), (2, 3), (2, 3)), ((2,), (2, 3, 2), (2, 3, 2)), ((4,), (4,), (4,)), ((), (), ()), ((0, 2), (0, 2), (0, 2)),
], ids=str)
def test_select_v1_condition_forms_match_official(shapes):
    check_op_model(select_model("SELECT", shapes, "float32"), select_inputs(shapes, "float32"))


@pytest.mark.parametrize("shapes", [
    ((2, 1), (1, 3), (2, 3)), ((), (2, 3), ()), ((3,), (2, 1), (1,)), ((2, 1, 3, 1), (1, 4, 1, 2), (1, 1, 1, 1)),
    ((1, 2, 1, 1, 3), (2, 1, 1, 2, 1), (1, 1, 2, 1, 1)), ((0, 3), (1, 3), (1, 1)),
], ids=str)
def test_select_v2_broadcasting_matches_official(shapes):
    check_op_model(select_model("SELECT_V2", shapes, "float32"), select_inputs(shapes, "float32"))


def test_select_v1_rejects_a_condition_that_only_broadcasts():
    shapes = ((2, 1), (2, 3), (2, 3))
    with pytest.raises(ModelExecutionError, match="SELECT"):
        ReferenceBackend(select_model("SELECT", shapes, "float32")).run(select_inputs(shapes, "float32"))


CAST_TYPES = ["float32", "float16", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "bool"]


def cast_model(src, dst, shape):
    b = ModelBuilder()
    x = b.input("x", shape, src)
    y = b.tensor("y", shape, dst)
    b.op("CAST", [x], [y], in_data_type=to_tflite(src), out_data_type=to_tflite(dst))
    b.output(y)
    return b.build()


def representable_values(src, dst):
    """Values every pair can convert without undefined behaviour: in range of both, fractions for floats."""
    values = np.array([0, 1, 2, 5, 7, 100, 127], np.float64)
    signed = all(np.dtype(numpy_dtype(t)).kind in "fi" for t in (src, dst) if t != "bool")
    if signed:
        values = np.concatenate([values, -values[1:]])
    if np.dtype(numpy_dtype(src)).kind == "f":
        values = values + np.where(values >= 0, 0.75, -0.75)
        values[0] = 0.0
    if src == "bool":
        return (values.astype(np.int64) % 2 == 1)
    return values.astype(numpy_dtype(src))


@pytest.mark.parametrize("src", CAST_TYPES)
def test_cast_to_every_type_matches_official(src):
    # One model per source type, with one CAST per target, keeps the table fast.
    x_value = representable_values(src, "uint8")
    b = ModelBuilder()
    x = b.input("x", x_value.shape, src)
    for dst in CAST_TYPES:
        y = b.tensor(f"y_{dst}", x_value.shape, dst)
        b.op("CAST", [x], [y], in_data_type=to_tflite(src), out_data_type=to_tflite(dst))
        b.output(y)
    check_op_model(b.build(), [x_value])


@pytest.mark.parametrize("src,dst", [("float32", "int32"), ("float32", "int8"), ("int64", "int16"),
                                     ("int32", "uint8"), ("float64", "float16"), ("int32", "bool")])
def test_cast_of_signed_values_matches_official(src, dst):
    x = representable_values(src, "int8")
    if dst == "uint8":  # wrapping of negative ints is defined (modular) in C++
        x = np.array([-1, -128, -300, 255, 256, 70000], np.int32)
    check_op_model(cast_model(src, dst, x.shape), [x])


@pytest.mark.parametrize("shape", [(), (0, 3), (2, 1, 3, 1, 2)], ids=str)
def test_cast_shapes_match_official(shape):
    check_op_model(cast_model("float32", "int32", shape), [random_input(shape, seed=3)])


def bitcast_model(src, dst, in_shape, out_shape):
    b = ModelBuilder()
    x = b.input("x", in_shape, src)
    y = b.tensor("y", out_shape, dst)
    b.op("BITCAST", [x], [y])
    b.output(y)
    return b.build()


@pytest.mark.parametrize("src,dst,in_shape,out_shape", [
    ("float32", "int32", (2, 3), (2, 3)), ("float32", "uint8", (2, 3), (2, 3, 4)), ("int8", "int32", (3, 4), (3,)),
    ("uint8", "float32", (2, 2, 4), (2, 2)), ("float16", "int16", (5,), (5,)), ("int64", "float32", (2,), (2, 2)),
    ("float32", "int16", (), (2,)), ("int16", "float32", (2,), ()), ("int32", "uint32", (0, 2), (0, 2)),
    ("float64", "int64", (3,), (3,)),
])
def test_bitcast_matches_official(src, dst, in_shape, out_shape):
    x = random_input(in_shape, src, seed=4)
    check_op_model(bitcast_model(src, dst, in_shape, out_shape), [x])


def test_bitcast_to_wider_type_needs_the_ratio_as_last_dimension():
    model = bitcast_model("int8", "int32", (3, 2), (3,))
    with pytest.raises(ModelExecutionError, match="BITCAST"):
        ReferenceBackend(model).run([np.zeros((3, 2), np.int8)])


# ---- quantized operands: the official kernels move values and ignore the quantization ----------


@pytest.mark.parametrize("op", ["SELECT", "SELECT_V2"])
@pytest.mark.parametrize("dtype,zero_point", [("int8", -4), ("uint8", 140), ("int16", 0)])
def test_select_of_quantized_values(op, dtype, zero_point):
    cond = np.random.default_rng(1).random((2, 3, 4)) < 0.5
    x, y = random_input((2, 3, 4), dtype, seed=2), random_input((2, 3, 4), dtype, seed=3)
    q = quantization(0.05, zero_point)
    check_built(one_op_model(op, [cond, x, y], [((2, 3, 4), dtype, quantization(0.2, 0))], input_quant={1: q, 2: q}))


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16"])
def test_cast_of_quantized_values_ignores_the_scale(dtype):
    x = random_input((3, 5), dtype, seed=4)
    check_built(one_op_model("CAST", [x], [((3, 5), "int32")], input_quant=[quantization(0.05, 3)]))
