"""Circle-only ops lowered to TFLite builtin ops (compile/circle_lowering.py) for the engines that read TFLite,
and the fast CPU planner's use of it (compile/plan.py ``plan_model``).

Each lowering is held to the op's own numpy kernel (ONE's semantics, double accumulation) on the original
model, run three ways: litegpu's reference on the lowered model, the official interpreter and OpenVINO on it
written as .tflite.  The planner keeps the lowered model only where a fast engine runs it and the timing
says so (both branches forced here; the timing itself runs in tests/runtime/test_circle_models.py)."""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import pytest
from circle_oracle import ggml_quantized_q4_0
from oracle import random_input

import litegpu as lg
from litegpu.backends import ReferenceBackend
from litegpu.compile import LOWERED_CACHE_KEY, plan_model
from litegpu.compile.circle_lowering import lower_circle_ops, lowerable
from litegpu.ir import read_model
from litegpu.ir.builder import ModelBuilder
from litegpu.ir.opcodes import circle_only_ops
from litegpu.ir.save import format_refusal, to_bytes

TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}


def rms_model(shape=(2, 3, 16), gamma_size=16, beta=False):
    rng = np.random.default_rng(1)
    b = ModelBuilder()
    x = b.input("x", shape)
    inputs = [x, b.constant("gamma", rng.uniform(0.5, 1.5, gamma_size).astype(np.float32))]
    if beta:
        inputs.append(b.constant("beta", rng.uniform(-1, 1, gamma_size).astype(np.float32)))
    h, y = b.tensor("h", shape), b.tensor("y", shape[:-1] + (8,))
    b.op("RMS_NORM", inputs, [h], epsilon=1e-5)
    b.op("FULLY_CONNECTED", [h, b.constant("w", rng.normal(0, 0.3, (8, shape[-1])).astype(np.float32)), -1], [y],
         keep_num_dims=True)
    b.output(y)
    return b.build()


def instance_norm_model(shape=(1, 6, 5, 4), channels_per_gamma=4, activation="RELU"):
    rng = np.random.default_rng(2)
    b = ModelBuilder()
    x = b.input("x", shape)
    gamma = b.constant("gamma", rng.uniform(0.5, 1.5, channels_per_gamma).astype(np.float32))
    beta = b.constant("beta", rng.uniform(-1, 1, channels_per_gamma).astype(np.float32))
    y = b.tensor("y", shape)
    b.op("INSTANCE_NORM", [x, gamma, beta], [y], epsilon=1e-3, fused_activation_function=activation)
    b.output(y)
    return b.build()


def rope_model(shape=(1, 2, 5, 8)):
    b = ModelBuilder()
    x = b.input("x", shape)
    angles = np.outer(np.arange(shape[2]), 1.0 / 10000 ** (np.arange(0, shape[3], 2) / shape[3]))
    emb = np.concatenate([angles, angles], axis=-1).reshape(1, 1, shape[2], shape[3]).astype(np.float32)
    y = b.tensor("y", shape)
    b.op("ROPE", [x, b.constant("sin", np.sin(emb)), b.constant("cos", np.cos(emb))], [y], mode="GPT_NEOX")
    b.output(y)
    return b.build()


MODELS = {
    "rms_norm": (rms_model, {}),
    "rms_norm_beta_single_gamma_rank2": (rms_model, {"shape": (3, 16), "gamma_size": 1, "beta": True}),
    "instance_norm_nhwc_relu": (instance_norm_model, {}),
    "instance_norm_rank3_one_gamma": (instance_norm_model, {"shape": (2, 3, 7), "channels_per_gamma": 1,
                                                           "activation": "RELU6"}),
    "rope": (rope_model, {}),
}


def official(model, inputs):
    interpreter = pytest.importorskip("ai_edge_litert.interpreter").Interpreter(model_content=to_bytes(model))
    interpreter.allocate_tensors()
    for d, x in zip(interpreter.get_input_details(), inputs):
        interpreter.set_tensor(d["index"], x)
    interpreter.invoke()
    return interpreter.get_tensor(interpreter.get_output_details()[0]["index"])


@pytest.mark.parametrize("name", list(MODELS))
def test_lowered_op_computes_what_the_circle_op_does(name):
    make, kwargs = MODELS[name]
    model = make(**kwargs)
    lowered = lower_circle_ops(model)
    circle = circle_only_ops()
    assert not any(op.opcode_name in circle for op in lowered.main.operators)
    assert format_refusal(lowered) is None and format_refusal(model) is not None
    # tensors keep their indices: the same inputs and outputs, new tensors appended
    assert lowered.main.inputs == model.main.inputs and lowered.main.outputs == model.main.outputs
    assert lowered.main.tensors[:len(model.main.tensors)] == model.main.tensors
    inputs = [random_input(model.main.tensors[i].shape, seed=3) for i in model.main.inputs]
    want = ReferenceBackend(model).run(inputs)[0]
    np.testing.assert_allclose(ReferenceBackend(lowered).run(inputs)[0], want, **TOLERANCE)
    np.testing.assert_allclose(official(read_model(to_bytes(lowered)), inputs), want, **TOLERANCE)
    pytest.importorskip("openvino")
    openvino = lg.CompiledModel.from_model(lowered, options=lg.Options(
        lg.HardwareAccelerator.CPU, cpu_options=lg.CpuOptions(engines=("openvino",))))
    assert openvino.plan.engine_summary().endswith("on OpenVINO in 1 partition"), openvino.plan.engine_summary()
    np.testing.assert_allclose(np.asarray(openvino(*inputs)), want, **TOLERANCE)


def gru_model(then_rms_norm: bool):
    b = ModelBuilder()
    x, h0 = b.input("x", (3, 1, 2)), b.input("h0", (1, 4))
    weights = [b.constant(n, np.full(s, 0.1, np.float32)) for n, s in (("wx", (12, 2)), ("bx", (12,)),
                                                                        ("wh", (12, 4)), ("bh", (12,)))]
    h = b.tensor("h", (1, 4))
    b.op("GRU", [x, *weights, h0], [h])
    if then_rms_norm:
        y = b.tensor("y", (1, 4))
        b.op("RMS_NORM", [h, b.constant("gamma", np.ones(4, np.float32))], [y], epsilon=1e-6)
        h = y
    b.output(h)
    return b.build()


def test_ops_without_a_lowering_are_kept():
    """GRU has no lowering: a GRU model is returned as it is; of a GRU then RMS_NORM only the RMS_NORM goes."""
    alone = gru_model(False)
    assert lower_circle_ops(alone) is alone and lowerable(alone) == []
    mixed = gru_model(True)
    lowered = lower_circle_ops(mixed)
    assert lowerable(mixed) == ["RMS_NORM"]
    assert lowered.op_histogram()["GRU"] == 1 and "RMS_NORM" not in lowered.op_histogram()
    inputs = [random_input((3, 1, 2), seed=5), random_input((1, 4), seed=6)]
    np.testing.assert_allclose(ReferenceBackend(lowered).run(inputs)[0], ReferenceBackend(mixed).run(inputs)[0],
                               **TOLERANCE)


@pytest.fixture
def rms_block():
    return dataclasses.replace(rms_model(), file_format="circle")  # as read from a .circle file


@pytest.mark.parametrize("faster", [True, False], ids=["lowered_faster", "xla_faster"])
def test_planner_keeps_the_lowered_model_only_where_it_is_faster(rms_block, monkeypatch, tmp_path, faster):
    monkeypatch.setattr(sys.modules["litegpu.compile.plan"], "_lowered_is_faster", lambda *args: faster)
    options = lg.Options(lg.HardwareAccelerator.CPU, cpu_options=lg.CpuOptions(num_threads=2),
                         serialization_dir=str(tmp_path))
    model = lg.CompiledModel.from_model(rms_block, options=options)
    x = random_input((2, 3, 16), seed=4)
    np.testing.assert_allclose(np.asarray(model(x)), ReferenceBackend(rms_block).run([x])[0], **TOLERANCE)
    engines = set(model.plan.ops_per_engine())
    if faster:
        assert engines <= {"litert", "openvino"}, model.plan.engine_summary()
        assert model._cache_key.items() >= LOWERED_CACHE_KEY.items()  # kept apart from the original's entries
    else:
        assert engines == {"xla"} and model.plan.num_ops == 2
        assert "circle_ops" not in model._cache_key


def test_plan_model_leaves_gpu_and_exact_plans_alone(rms_block):
    engines = {"openvino": object()}  # never asked: nothing is lowered for these plans
    for flags, kernels in ((int(lg.HardwareAccelerator.CPU), "builtin"), (int(lg.HardwareAccelerator.GPU) | 1, "fast")):
        planned = plan_model(rms_block, flags, warn=False, cpu_kernels=kernels,
                             engines=engines if kernels == "fast" and flags & 2 else None)
        assert planned.model is rms_block and not planned.lowered


# ---- ggml weights of FULLY_CONNECTED, as TFLite weights XNNPACK multiplies ------------------------------------

def ggml_fc(dtype="ggml_q4_0", in_shape=(2, 3, 64), units=8, activation="RELU", uniform_rows=False):
    """A FULLY_CONNECTED on ggml weights (quantized as ggml does: signed scales), with bias, keeping dims."""
    rng = np.random.default_rng(7)
    depth = in_shape[-1]
    if dtype == "ggml_q4_0":
        raw = ggml_quantized_q4_0(rng.standard_normal((units, depth)).astype(np.float32) * 0.1)
    else:
        d = rng.uniform(-0.05, 0.05, (units, 1 if uniform_rows else depth // 32))
        d = np.broadcast_to(d, (units, depth // 32)).astype(np.float16)
        q = rng.integers(-127, 128, (units, depth // 32, 32)).astype(np.int8)
        raw = np.concatenate([d.view(np.uint8).reshape(units, -1, 2), q.view(np.uint8)], axis=-1).reshape(-1)
    b = ModelBuilder()
    x = b.input("x", in_shape)
    w = b.tensor("w", (units, depth), dtype, buffer=b.add_buffer(raw), raw=raw)
    y = b.tensor("y", in_shape[:-1] + (units,))
    b.op("FULLY_CONNECTED", [x, w, b.constant("bias", rng.standard_normal(units).astype(np.float32))], [y],
         fused_activation_function=activation, keep_num_dims=True)
    b.output(y)
    return dataclasses.replace(b.build(), file_format="circle")


@pytest.mark.parametrize("dtype,activation", [("ggml_q4_0", "RELU"), ("ggml_q4_0", "NONE"), ("ggml_q8_0", "RELU6")])
def test_ggml_weights_are_lowered_to_what_xnnpack_multiplies(dtype, activation):
    model = ggml_fc(dtype, activation=activation, uniform_rows=True)
    lowered = lower_circle_ops(model)
    assert lowerable(model) == [f"FULLY_CONNECTED of {dtype}"]
    assert format_refusal(lowered) is None and format_refusal(model) is not None
    assert lowered.main.inputs == model.main.inputs and lowered.main.outputs == model.main.outputs
    # the ggml bytes are not held twice: their tensor is emptied, their buffer dropped
    assert not any(t.dtype.startswith("ggml") for t in lowered.main.tensors)
    assert lowered.buffers[model.main.tensors[1].buffer].size == 0
    x = random_input((2, 3, 64), seed=8)
    ggml = ReferenceBackend(model).run([x])[0]
    ours = ReferenceBackend(lowered).run([x])[0]
    # the same weights; the input rows quantized to int8 whole (XNNPACK's kernels) rather than per block of 32
    linear = ReferenceBackend(ggml_fc(dtype, activation="NONE", uniform_rows=True)).run([x])[0]
    assert np.abs(ours - ggml).max() <= 2e-2 * np.abs(linear).max()
    if activation != "NONE":
        assert ours.min() >= 0 and (activation != "RELU6" or ours.max() <= 6)
    np.testing.assert_allclose(official(read_model(to_bytes(lowered)), [x]), ours, rtol=1e-5,
                               atol=1e-5 * np.abs(ours).max())


def test_ggml_weights_without_an_exact_form_stay():
    for model in (ggml_fc("ggml_q8_0"), ggml_fc(units=2)):  # a scale per block; too few units for the int4 kernel
        assert lower_circle_ops(model) is model and lowerable(model) == []


def test_planner_runs_lowered_ggml_weights_on_xnnpack(monkeypatch, tmp_path):
    monkeypatch.setattr(sys.modules["litegpu.compile.plan"], "_lowered_is_faster", lambda *args: True)
    model = ggml_fc()
    compiled = lg.CompiledModel.from_model(model, options=lg.Options(
        lg.HardwareAccelerator.CPU, cpu_options=lg.CpuOptions(num_threads=1), serialization_dir=str(tmp_path)))
    assert set(compiled.plan.ops_per_engine()) == {"litert"}, compiled.plan.engine_summary()
    assert "dynamic-range (hybrid) ops on LiteRT (XNNPACK)" in compiled.plan.numerics
    x = random_input((2, 3, 64), seed=9)
    np.testing.assert_allclose(np.asarray(compiled(x)), ReferenceBackend(lower_circle_ops(model)).run([x])[0],
                               rtol=1e-5, atol=1e-5)


def ggml_table(dtype, units=50, depth=64):
    """A GATHER of rows of a ggml table [units, depth] (signed scales), by indices [2, 3]."""
    rng = np.random.default_rng(10)
    if dtype == "ggml_q4_0":
        raw = ggml_quantized_q4_0(rng.standard_normal((units, depth)).astype(np.float32))
    else:
        d = rng.uniform(-0.05, 0.05, (units, depth // 32)).astype(np.float16)
        q = rng.integers(-128, 128, (units, depth // 32, 32)).astype(np.int8)
        raw = np.concatenate([d.view(np.uint8).reshape(units, -1, 2), q.view(np.uint8)], axis=-1).reshape(-1)
    b = ModelBuilder()
    i = b.input("i", (2, 3), "int32")
    t = b.tensor("table", (units, depth), dtype, buffer=b.add_buffer(raw), raw=raw)
    y = b.tensor("y", (2, 3, depth))
    b.op("GATHER", [t, i], [y], axis=0)
    b.output(y)
    return dataclasses.replace(b.build(), file_format="circle")


@pytest.mark.parametrize("dtype", ["ggml_q4_0", "ggml_q8_0"])
def test_ggml_tables_are_gathered_and_decoded_by_builtin_ops_exactly(dtype):
    model = ggml_table(dtype)
    lowered = lower_circle_ops(model)
    assert lowerable(model) == [f"GATHER of {dtype}"] and format_refusal(lowered) is None
    indices = np.array([[0, 49, 3], [7, 7, 1]], np.int32)
    rows = ReferenceBackend(model).run([indices])[0]  # ggml_get_rows: the dequantized rows (tests/ops)
    np.testing.assert_array_equal(ReferenceBackend(lowered).run([indices])[0], rows)
    np.testing.assert_array_equal(official(read_model(to_bytes(lowered)), [indices]), rows)


def test_ggml_weights_too_big_for_the_official_interpreter_once_rewritten_are_left(monkeypatch):
    from litegpu.backends import litert

    model = ggml_fc()
    monkeypatch.setattr(litert, "MAX_LITERT_MODEL_BYTES", 2 * sum(b.size for b in model.buffers) - 1)
    assert lower_circle_ops(model) is model
