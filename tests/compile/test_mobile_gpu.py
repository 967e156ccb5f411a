"""The LiteRT mobile GPU delegate compatibility check (litegpu.compile.mobile_gpu)."""

import numpy as np
import pytest

import litegpu as lg
from litegpu.compile.mobile_gpu import TENSOR_MESSAGE, check_model, op_reason
from litegpu.ir.builder import ModelBuilder


def one_op(name, inputs, outputs, version=1, **options):
    """inputs/outputs: (name, shape, dtype, constant value or None)"""
    b = ModelBuilder()
    ins = [b.constant(n, v) if v is not None else b.input(n, s, d) for n, s, d, v in inputs]
    outs = [b.tensor(n, s, d) for n, s, d in outputs]
    b.op(name, ins, outs, version=version, **options)
    b.output(*outs)
    model = b.build()
    return model.main, model.main.operators[0]


F = "float32"
W = np.zeros((4, 3, 3, 2), np.float32)

CASES = [
    # op, inputs, outputs, version, options, expected reason (None: taken)
    ("CONV_2D", [("x", (1, 5, 5, 2), F, None), ("w", None, F, W)], [("y", (1, 5, 5, 4), F)], 6,
     {"padding": "SAME", "stride_w": 1, "stride_h": 1}, None),
    ("CONV_2D", [("x", (1, 5, 5, 2), F, None), ("w", None, F, W)], [("y", (1, 5, 5, 4), F)], 7,
     {"padding": "SAME", "stride_w": 1, "stride_h": 1}, "Max version supported: 6. Requested version 7."),
    ("CONV_2D", [("x", (1, 5, 5, 2), F, None), ("w", None, F, W)], [("y", (1, 5, 5, 4), F)], 1,
     {"padding": "SAME", "stride_w": 1, "stride_h": 1, "fused_activation_function": "SIGN_BIT"},
     "TfLiteFusedActivation.kTfLiteActSignBit"),
    ("RESHAPE", [("x", (2, 3), F, None), ("s", None, None, np.array([6], np.int32))], [("y", (6,), F)], 2, {},
     "Max version supported: 1. Requested version 2."),
    ("ADD", [("x", (2, 3), "int32", None), ("z", (2, 3), "int32", None)], [("y", (2, 3), "int32")], 1, {},
     TENSOR_MESSAGE),
    ("ADD", [("x", (1, 2, 3, 4, 5), F, None), ("z", (1, 2, 3, 4, 5), F, None)], [("y", (1, 2, 3, 4, 5), F)], 1, {},
     TENSOR_MESSAGE),
    ("SOFTMAX", [("x", (2, 3), F, None)], [("y", (2, 3), F)], 1, {"beta": 0.5}, "Softmax.beta != 1 is not supported."),
    ("STRIDED_SLICE", [("x", (4, 6), F, None)] + [(n, None, None, np.array(v, np.int32)) for n, v in
                                                 (("b", [0, 0]), ("e", [2, 3]), ("s", [1, 1]))],
     [("y", (2, 3), F)], 1, {}, "STRIDED_SLICE supports for 3 or 4 dimensional tensors only."),
    ("MEAN", [("x", (1, 4, 4, 3), F, None), ("a", (2,), "int32", None)], [("y", (1, 3), F)], 1, {},
     "Expected 1 const input tensor(s), but node has 0 const input(s)."),
    ("GATHER", [("x", (5, 3), "int32", None), ("i", None, None, np.array([0, 2], np.int32))],
     [("y", (2, 3), "int32")], 1, {}, "Does not accept INT32 input."),
    ("ARG_MAX", [("x", (5, 3), F, None), ("a", None, None, np.array(1, np.int32))], [("y", (5,), "int64")], 1, {},
     "Operation is not supported."),
    ("MyCustomOp", [("x", (2,), F, None)], [("y", (2,), F)], 1, {"custom_options": b""},
     "Not supported custom op MyCustomOp"),
]


@pytest.mark.parametrize("name, inputs, outputs, version, options, expected", CASES)
def test_op_rules_follow_the_delegate(name, inputs, outputs, version, options, expected):
    sg, op = one_op(name, inputs, outputs, version, **options)
    assert op_reason(sg, op) == expected


def test_a_comparison_is_taken_only_when_it_feeds_a_cast_to_float():
    b = ModelBuilder()
    x = b.input("x", (4,))
    m, f, w = b.tensor("m", (4,), "bool"), b.tensor("f", (4,)), b.tensor("w", (0, 1), "int64")
    b.op("GREATER", [x, b.constant("z", np.zeros(4, np.float32))], [m])
    b.op("CAST", [m], [f])
    b.output(f)
    report = check_model(b.build())
    assert report.fully_delegated and report.summary() == "all 2 operations will run on the GPU"
    b2 = ModelBuilder()
    x = b2.input("x", (4,))
    m, w = b2.tensor("m", (4,), "bool"), b2.tensor("w", (0, 1), "int64")
    b2.op("GREATER", [x, b2.constant("z", np.zeros(4, np.float32))], [m])
    b2.op("WHERE", [m], [w])
    b2.output(w)
    report = check_model(b2.build())
    assert [(o.opcode, o.reason) for o in report.unsupported] == [
        ("GREATER", "Not supported logical op case."), ("WHERE", "Operation is not supported.")]
    assert report.summary() == "No operations will run on the GPU, and all 2 operations will run on the CPU."


def test_only_the_largest_supported_run_is_delegated_by_default():
    b = ModelBuilder()
    x = b.input("x", (4,))
    t = [b.tensor(f"t{k}", (4,)) for k in range(5)]
    b.op("TANH", [x], [t[0]])
    b.op("ARG_MAX", [t[0], b.constant("a", np.array(0, np.int32))], [b.tensor("i", (), "int64")])
    b.op("TANH", [x], [t[1]])
    b.op("TANH", [t[1]], [t[2]])
    b.output(t[2])
    report = check_model(b.build())
    assert report.delegated == ((0, (2, 3)),) and not report.fully_delegated
    assert report.summary() == "2 operations will run on the GPU, and the remaining 2 operations will run on the CPU."


@pytest.mark.parametrize("name, fully", [("mobilenet_v3_small_float32", True), ("mobilenet_v3_small_int8", True),
                                         ("mediapipe_face_detection_short_range", True),
                                         ("two_signatures_float32", False)])
def test_shared_models(shared_models, name, fully):
    # MediaPipe's float16 weights reach their convolutions through DEQUANTIZE: the delegate folds those
    report = check_model(lg.Model.from_file(shared_models / f"{name}.tflite").ir)
    assert report.fully_delegated is fully
