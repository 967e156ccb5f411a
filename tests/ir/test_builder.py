"""ModelBuilder: models made in code write, read back equal, and mean what they say."""

from __future__ import annotations

import numpy as np
import pytest

from litegpu.errors import ModelFormatError
from litegpu.ir import read_model
from litegpu.ir.builder import ModelBuilder, quantization
from litegpu.ir.save import to_bytes


def conv_model() -> ModelBuilder:
    b = ModelBuilder()
    x = b.input("x", (1, 8, 8, 3))
    w = b.constant("w", np.arange(4 * 3 * 3 * 3, dtype=np.float32).reshape(4, 3, 3, 3))
    bias = b.constant("bias", np.array([1, 2, 3, 4], np.float32))
    y = b.tensor("y", (1, 8, 8, 4))
    b.op("CONV_2D", [x, w, bias], [y], padding="SAME", stride_w=1, stride_h=1, fused_activation_function="RELU6")
    b.output(y)
    return b


def test_conv_model_round_trips_with_options_and_constants():
    model = conv_model().build()
    back = read_model(to_bytes(model))
    assert back == model
    op = back.main.operators[0]
    assert op.opcode_name == "CONV_2D" and op.builtin_code == 3 and op.options_type == "Conv2DOptions"
    assert op.options.padding == "SAME" and op.options.fused_activation_function == "RELU6"
    assert op.options.dilation_w_factor == 1  # schema default filled in
    w = back.main.tensors[op.inputs[1]]
    assert w.is_constant and w.data.shape == (4, 3, 3, 3) and w.data[3, 2, 2, 2] == 107
    assert back.main.inputs == (0,) and back.main.outputs == (3,)


def test_unknown_option_is_rejected():
    b = ModelBuilder()
    x = b.input("x", (2,))
    with pytest.raises(ValueError, match="no field"):
        b.op("SOFTMAX", [x], [x], betta=1.0)


@pytest.mark.parametrize("dtype,values", [
    ("int4", [-8, -1, 0, 7, 3]), ("uint4", [0, 15, 7, 1, 2]), ("int2", [-2, -1, 0, 1, 1]),
])
def test_sub_byte_constants_pack_and_unpack(dtype, values):
    b = ModelBuilder()
    c = b.constant("c", np.array(values, np.int8 if dtype != "uint4" else np.uint8), dtype)
    b.output(c)
    back = read_model(to_bytes(b.build()))
    t = back.main.tensors[c]
    assert t.dtype == dtype and t.data.tolist() == values
    assert t.raw.size == (len(values) * (4 if dtype != "int2" else 2) + 7) // 8


def test_quantization_signatures_metadata_and_subgraphs():
    b = ModelBuilder(description="built in a test")
    x = b.input("x", (1, 4), "int8", quantization=quantization(0.5, -3))
    w = b.constant("w", np.ones((3, 4), np.int8), quantization=quantization([0.1, 0.2, 0.3], 0, axis=0))
    y = b.tensor("y", (1, 3), "int8", quantization=quantization(0.25, 1))
    b.op("FULLY_CONNECTED", [x, w, -1], [y])
    b.output(y)
    b.signature("serving", inputs={"in": x}, outputs={"out": y})
    body = b.subgraph("body")
    z = body.input("z", (2,))
    body.output(z)
    b.add_metadata("min_runtime_version", b"1.14.0")
    model = b.build()
    back = read_model(to_bytes(model))
    assert back == model
    assert back.description == "built in a test"
    assert back.main.tensors[w].quantization.scale == pytest.approx((0.1, 0.2, 0.3))
    assert back.main.tensors[x].quantization.zero_point == (-3,)
    assert back.signatures[0].key == "serving" and back.signatures[0].inputs[0].name == "in"
    assert back.subgraphs[1].name == "body"
    assert back.metadata_bytes("min_runtime_version") == b"1.14.0"


def test_custom_op_keeps_its_options_bytes():
    b = ModelBuilder()
    x = b.input("x", (2,))
    y = b.tensor("y", (2,))
    b.op("MyCustomOp", [x], [y], custom_options=b"\x01\x02\x03")
    b.output(y)
    back = read_model(to_bytes(b.build()))
    op = back.main.operators[0]
    assert op.is_custom and op.opcode_name == "MyCustomOp" and op.custom_options == b"\x01\x02\x03"


def test_two_ops_feeding_each_other_are_a_cycle():
    b = ModelBuilder()
    x = b.input("x", (2,))
    a, c = b.tensor("a", (2,)), b.tensor("c", (2,))
    b.op("ADD", [x, c], [a])
    b.op("ADD", [x, a], [c])
    b.output(c)
    with pytest.raises(ModelFormatError, match="cycle"):
        b.build()


def test_tensor_written_twice_is_rejected():
    b = ModelBuilder()
    x = b.input("x", (2,))
    y = b.tensor("y", (2,))
    b.op("RELU", [x], [y])
    b.op("RELU", [x], [y])
    with pytest.raises(ModelFormatError, match="written by both"):
        b.build()


def test_ops_out_of_order_get_a_valid_execution_order():
    from litegpu.ir import execution_order

    b = ModelBuilder()
    x = b.input("x", (2,))
    a, c = b.tensor("a", (2,)), b.tensor("c", (2,))
    b.op("RELU", [a], [c])   # reads a, written by the next op
    b.op("RELU", [x], [a])
    b.output(c)
    assert execution_order(b.build().main) == (1, 0)


def test_subgraph_calling_itself_is_rejected():
    b = ModelBuilder()
    x = b.input("x", (2,))
    y = b.tensor("y", (2,))
    b.op("CALL_ONCE", [], [], init_subgraph_index=0)
    b.op("RELU", [x], [y])
    b.output(y)
    with pytest.raises(ModelFormatError, match="calls itself"):
        b.build()


def test_official_interpreter_runs_a_built_model():
    litert = pytest.importorskip("ai_edge_litert.interpreter")
    b = ModelBuilder()
    x = b.input("x", (2, 3))
    c = b.constant("c", np.array([10.0, 20.0, 30.0], np.float32))
    y = b.tensor("y", (2, 3))
    b.op("ADD", [x, c], [y], fused_activation_function="RELU")
    b.output(y)
    interp = litert.Interpreter(model_content=to_bytes(b.build()))
    interp.allocate_tensors()
    value = np.array([[-100, 1, 2], [3, -4, 5]], np.float32)
    interp.set_tensor(interp.get_input_details()[0]["index"], value)
    interp.invoke()
    got = interp.get_tensor(interp.get_output_details()[0]["index"])
    np.testing.assert_array_equal(got, np.maximum(value + [10, 20, 30], 0))
