"""The float view of quantized models (what runs on the GPU by default): structure and numerics.

The official interpreter runs the rewritten models too (they are ordinary TFLite models),
so the float view's semantics are checked against it as well as against the integer path.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from litegpu.backends import ReferenceBackend
from litegpu.compile.float_view import (KEPT_QUANTIZED_MIN_ELEMENTS, dequantize_constant, float_view, float_view_backend,
                                        model_for_platform)
from litegpu.errors import InvalidArgumentError
from litegpu.ir import read_model
from litegpu.ir.builder import ModelBuilder, quantization
from litegpu.ir.save import to_bytes
from litegpu.ops import reduce as reduce_ops
from litegpu.runtime.options import GpuOptions
from oracle import check_op_model

MODELS = Path("/work/shared/models")
MOBILENET = MODELS / "mobilenet_v3_small_int8.tflite"
MOBILENET_REFERENCE = MODELS / "mobilenet_v3_small_int8.reference.npz"
BUNDLED_FLOAT_MODEL = Path(__file__).parents[2] / "src/litegpu/models/mediapipe_face_detection_short_range.tflite"
# Float arithmetic rounds differently from the integer kernels, and a one-step difference early in a
# 100-op network grows: observed at most 6 (numpy) / 9 (XLA) steps of 1/256 at the softmax output.
MAX_OUTPUT_STEPS = 12
MAX_MEAN_STEPS = 0.25

needs_mobilenet = pytest.mark.skipif(not MOBILENET.exists() or not MOBILENET_REFERENCE.exists(),
                                     reason="shared models missing")


def ops_of(model) -> list[str]:
    return [op.opcode_name for op in model.main.operators]


def tensor(model, index):
    return model.main.tensors[index]


def op_named(model, name):
    return next(op for op in model.main.operators if op.opcode_name == name)


# ---- one-op models ----------------------------------------------------------------------------

def int8_conv_model(per_channel: bool = True, activation: str = "NONE"):
    rng = np.random.default_rng(7)
    x_q, y_q = quantization(0.05, -3), quantization(0.11, 5)
    w_scales = [0.002, 0.004, 0.003, 0.006] if per_channel else 0.004
    b = ModelBuilder()
    x = b.input("x", (1, 6, 6, 3), "int8", quantization=x_q)
    w = b.constant("w", rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8), quantization=quantization(w_scales))
    bias_scales = np.float32(0.05) * np.atleast_1d(np.asarray(w_scales, np.float32))
    bias = b.constant("bias", rng.integers(-2000, 2000, 4).astype(np.int32), quantization=quantization(bias_scales))
    y = b.tensor("y", (1, 6, 6, 4), "int8", quantization=y_q)
    b.op("CONV_2D", [x, w, bias], [y], padding="SAME", stride_h=1, stride_w=1, fused_activation_function=activation)
    b.output(y)
    feed = rng.integers(-128, 128, (1, 6, 6, 3)).astype(np.int8)
    return b.build(), [feed]


def test_int8_conv_becomes_dequantize_float_conv_fake_quant():
    model, _ = int8_conv_model()
    view = float_view(model)
    assert ops_of(view) == ["DEQUANTIZE", "CONV_2D", "QUANTIZE"]
    dequantize, conv, quantize = view.main.operators
    # The boundary keeps the user's types: same tensors, same indices, int8 in and out.
    assert view.main.inputs == model.main.inputs and view.main.outputs == model.main.outputs
    assert dequantize.inputs == model.main.inputs and quantize.outputs == model.main.outputs
    assert tensor(view, view.main.inputs[0]) == tensor(model, model.main.inputs[0])
    assert tensor(view, view.main.outputs[0]).dtype == "int8"
    # The conv computes in float: every input and its output are float32 without quantization.
    assert [tensor(view, t).dtype for t in conv.inputs + conv.outputs] == ["float32"] * 4
    assert all(tensor(view, t).quantization is None for t in conv.inputs + conv.outputs)
    assert tensor(view, conv.inputs[0]).name == "x/dequantized"
    assert tensor(view, conv.outputs[0]).name == "y/float"
    assert quantize.inputs == conv.outputs


def test_quantized_constants_become_float32_dequantized_once():
    model, _ = int8_conv_model()
    view = float_view(model)
    conv = op_named(view, "CONV_2D")
    w, bias = tensor(view, conv.inputs[1]), tensor(view, conv.inputs[2])
    w0, bias0 = tensor(model, 1), tensor(model, 2)
    assert w.is_constant and w.dtype == "float32" and w.name == "w/dequantized"
    scales = np.asarray(w0.quantization.scale, np.float32).reshape(4, 1, 1, 1)
    np.testing.assert_array_equal(w.data, w0.data.astype(np.float32) * scales)
    np.testing.assert_array_equal(bias.data, bias0.data.astype(np.float32) * np.asarray(bias0.quantization.scale,
                                                                                          np.float32))
    # The buffers are real model buffers: the rewrite survives a file round trip.
    assert read_model(to_bytes(view)) == view


def test_bias_without_own_scale_uses_input_times_weight_scale():
    model, _ = int8_conv_model()
    sg = model.main
    tensors = list(sg.tensors)
    tensors[2] = replace(tensors[2], quantization=None)
    unscaled = replace(model, subgraphs=(replace(sg, tensors=tuple(tensors)),))

    def float_bias(m):
        view = float_view(m)
        return tensor(view, op_named(view, "CONV_2D").inputs[2]).data

    np.testing.assert_allclose(float_bias(unscaled), float_bias(model), rtol=1e-6)


@pytest.mark.parametrize("per_channel", [True, False])
@pytest.mark.parametrize("activation", ["NONE", "RELU6"])
def test_int8_conv_float_view_is_within_one_step_of_integer(per_channel, activation):
    model, feeds = int8_conv_model(per_channel, activation)
    exact = ReferenceBackend(model).run(feeds)[0]
    # official interpreter == our reference == our XLA on the rewritten model (a tie may round apart)
    floated = check_op_model(float_view(model), feeds, int_atol=1)[0]
    diff = np.abs(floated.astype(int) - exact.astype(int))
    assert diff.max() <= 1 and diff.mean() < 0.05  # different arithmetic (rounding), same meaning


def test_data_movement_with_equal_params_skips_fake_quant_and_stays_exact():
    q = quantization(0.1, 4)
    b = ModelBuilder()
    x = b.input("x", (2, 6), "int8", quantization=q)
    shape = b.constant("shape", np.array([3, 4], np.int32))
    y = b.tensor("y", (3, 4), "int8", quantization=q)
    b.op("RESHAPE", [x, shape], [y])
    b.output(y)
    model = b.build()
    view = float_view(model)
    assert ops_of(view) == ["DEQUANTIZE", "RESHAPE", "QUANTIZE"]
    reshape = op_named(view, "RESHAPE")
    assert tensor(view, reshape.inputs[1]).dtype == "int32"  # unquantized int32 stays as it is
    assert tensor(view, reshape.outputs[0]).name == "y/dequantized"
    feed = np.arange(-60, 60, 10, dtype=np.int8).reshape(2, 6)
    np.testing.assert_array_equal(ReferenceBackend(view).run([feed])[0], ReferenceBackend(model).run([feed])[0])


def test_integer_only_op_reads_the_integer_value():
    # CAST reads raw integers: it keeps its integer input, recomputed from the float view.
    q = quantization(0.1, 4)
    b = ModelBuilder()
    x = b.input("x", (2, 6), "int8", quantization=q)
    shape = b.constant("shape", np.array([12], np.int32))
    flat = b.tensor("flat", (12,), "int8", quantization=q)
    out = b.tensor("out", (12,), "int32")
    b.op("RESHAPE", [x, shape], [flat])
    b.op("CAST", [flat], [out])
    b.output(out)
    model = b.build()
    view = float_view(model)
    assert ops_of(view) == ["DEQUANTIZE", "RESHAPE", "QUANTIZE", "CAST"]
    assert op_named(view, "CAST").inputs == (flat,) and tensor(view, flat).dtype == "int8"
    feed = np.arange(-120, 120, 20, dtype=np.int8).reshape(2, 6)
    check_op_model(view, [feed])
    np.testing.assert_array_equal(ReferenceBackend(view).run([feed])[0], ReferenceBackend(model).run([feed])[0])


def test_model_quantize_and_dequantize_become_fake_quant_and_no_op():
    q = quantization(0.05, 10)
    b = ModelBuilder()
    x = b.input("x", (16,))
    xq = b.tensor("xq", (16,), "int8", quantization=q)
    real = b.tensor("real", (16,))
    y = b.tensor("y", (16,))
    b.op("QUANTIZE", [x], [xq])
    b.op("DEQUANTIZE", [xq], [real])
    b.op("LOGISTIC", [real], [y])
    b.output(y)
    model = b.build()
    view = float_view(model)
    # QUANTIZE stays (it is the fake quant's first half); the model's DEQUANTIZE became the fake quant's second.
    assert ops_of(view) == ["QUANTIZE", "DEQUANTIZE", "LOGISTIC"]
    logistic = op_named(view, "LOGISTIC")
    assert tensor(view, logistic.inputs[0]).name == "xq/dequantized" and logistic.inputs[0] != real
    feed = np.linspace(-8, 8, 16).astype(np.float32)
    np.testing.assert_array_equal(ReferenceBackend(view).run([feed])[0], ReferenceBackend(model).run([feed])[0])


def test_requantize_becomes_float_quantize():
    b = ModelBuilder()
    x = b.input("x", (32,), "int8", quantization=quantization(0.1, 3))
    y = b.tensor("y", (32,), "int8", quantization=quantization(0.07, -5))
    b.op("QUANTIZE", [x], [y])
    b.output(y)
    model = b.build()
    view = float_view(model)
    assert ops_of(view) == ["DEQUANTIZE", "QUANTIZE"]
    assert tensor(view, op_named(view, "QUANTIZE").inputs[0]).dtype == "float32"
    feed = np.arange(-128, 128, 8, dtype=np.int8)
    got, exact = ReferenceBackend(view).run([feed])[0], ReferenceBackend(model).run([feed])[0]
    assert np.abs(got.astype(int) - exact.astype(int)).max() <= 1


def test_argmax_of_quantized_values_runs_on_floats():
    b = ModelBuilder()
    x = b.input("x", (3, 10), "int8", quantization=quantization(0.3, -7))
    axis = b.constant("axis", np.array([1], np.int32))
    y = b.tensor("y", (3,), "int32")
    b.op("ARG_MAX", [x, axis], [y], output_type="INT32")
    b.output(y)
    model = b.build()
    view = float_view(model)
    assert ops_of(view) == ["DEQUANTIZE", "ARG_MAX"]
    assert tensor(view, op_named(view, "ARG_MAX").inputs[0]).dtype == "float32"
    feed = np.random.default_rng(1).integers(-128, 128, (3, 10)).astype(np.int8)
    np.testing.assert_array_equal(ReferenceBackend(view).run([feed])[0], ReferenceBackend(model).run([feed])[0])


def float_conv_model():
    b = ModelBuilder()
    x = b.input("x", (1, 4, 4, 2))
    w = b.constant("w", np.ones((3, 1, 1, 2), np.float32))
    y = b.tensor("y", (1, 4, 4, 3))
    b.op("CONV_2D", [x, w, -1], [y], padding="VALID", stride_h=1, stride_w=1)
    b.output(y)
    return b.build()


def test_float_models_are_returned_unchanged():
    model = float_conv_model()
    assert float_view(model) is model
    if BUNDLED_FLOAT_MODEL.exists():  # float16 weights with DEQUANTIZE: not quantized
        bundled = read_model(BUNDLED_FLOAT_MODEL)
        assert float_view(bundled) is bundled


# ---- options and wiring -----------------------------------------------------------------------

def test_gpu_options_validate_quantized_execution():
    assert GpuOptions().quantized_execution == "float"
    assert GpuOptions(quantized_execution="integer").quantized_execution == "integer"
    for bad in ["Float", "int8", "", None, 1]:
        with pytest.raises(InvalidArgumentError, match="quantized_execution"):
            GpuOptions(quantized_execution=bad)


def test_only_float_execution_on_the_gpu_uses_the_float_view():
    model, _ = int8_conv_model()
    assert model_for_platform(model, "gpu", "integer") is model
    assert model_for_platform(model, "cpu", "float") is model
    assert model_for_platform(model, "gpu", "float") == float_view(model) != model
    with pytest.raises(InvalidArgumentError):
        model_for_platform(model, "gpu", "fast")


def int8_mul_model():
    b = ModelBuilder()
    x = b.input("x", (64,), "int8", quantization=quantization(0.021, 3))
    z = b.input("z", (64,), "int8", quantization=quantization(0.033, -2))
    y = b.tensor("y", (64,), "int8", quantization=quantization(0.0071, 1))
    b.op("MUL", [x, z], [y])
    b.output(y)
    rng = np.random.default_rng(3)
    return b.build(), [rng.integers(-128, 128, 64).astype(np.int8) for _ in range(2)]


@pytest.fixture
def gpu_on_cpu(monkeypatch):
    """An Environment that claims a GPU and hands out the CPU device for it: the GPU code path, run here."""
    from litegpu.runtime.environment import Environment

    class GpuOnCpu(Environment):
        @staticmethod
        def platforms():
            return {"cpu", "gpu"}

        def device(self, platform):
            return super().device("cpu")

    return GpuOnCpu()


@pytest.mark.parametrize("mode", ["float", "integer"])
def test_compiled_model_on_gpu_runs_the_float_view_unless_integer(gpu_on_cpu, mode):
    from litegpu import CompiledModel, HardwareAccelerator, Options

    model, feeds = int8_mul_model()
    floated, exact = ReferenceBackend(float_view(model)).run(feeds)[0], ReferenceBackend(model).run(feeds)[0]
    assert not np.array_equal(floated, exact)  # else this test could not tell the paths apart
    options = Options(HardwareAccelerator.GPU, gpu_options=GpuOptions(quantized_execution=mode))
    compiled = CompiledModel.from_model(model, options=options, environment=gpu_on_cpu)
    assert compiled.accelerator == "GPU"
    got = compiled(*feeds)
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, floated if mode == "float" else exact)


# ---- a real model -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def mobilenet():
    model = read_model(MOBILENET)
    with np.load(MOBILENET_REFERENCE) as z:
        feed, expected = z["serving_default/in/input"], z["serving_default/out_ref/output"]
    patch = pytest.MonkeyPatch()  # the reference file comes from a 2-thread official runtime
    patch.setattr(reduce_ops, "OFFICIAL_NUM_THREADS", 2)
    try:
        exact = ReferenceBackend(model).run([feed])[0]
    finally:
        patch.undo()
    return model, float_view(model), feed, expected, exact


def assert_agrees_with_integer(got, expected, exact):
    assert got.dtype == np.int8 and got.shape == expected.shape
    assert int(got.argmax()) == int(exact.argmax()) == int(expected.argmax())
    steps = np.abs(got.astype(int) - expected.astype(int))
    assert steps.max() <= MAX_OUTPUT_STEPS and steps.mean() <= MAX_MEAN_STEPS


@needs_mobilenet
def test_mobilenet_float_view_structure(mobilenet):
    model, view, *_ = mobilenet
    sg = view.main
    assert sg.inputs == model.main.inputs and sg.outputs == model.main.outputs
    assert [sg.tensors[t].dtype for t in sg.inputs + sg.outputs] == ["int8", "int8"]
    for op in sg.operators:
        if op.opcode_name in ("CONV_2D", "DEPTHWISE_CONV_2D"):
            assert all(sg.tensors[t].dtype == "float32" for t in op.inputs + op.outputs if t >= 0), str(op)
            w = sg.tensors[op.inputs[1]]
            assert w.name.endswith("/dequantized")
            # the weights stay int8 (as in the file): a DEQUANTIZE of the original constant makes the float ones
            # (converted inside the op that reads them on the GPU); the tiny ones are float32 constants
            made = [o for o in sg.operators if op.inputs[1] in o.outputs]
            if w.num_elements > KEPT_QUANTIZED_MIN_ELEMENTS:
                # MUL(DEQUANTIZE(the int8 constant with unit scales), its scales)
                assert not w.is_constant and [o.opcode_name for o in made] == ["MUL"]
                dequantize = next(o for o in sg.operators if made[0].inputs[0] in o.outputs)
                assert dequantize.opcode_name == "DEQUANTIZE"
                integers = sg.tensors[dequantize.inputs[0]]
                original = next(t for t in model.main.tensors if t.name == integers.name.rsplit("/", 1)[0])
                assert integers.is_constant and integers.dtype == "int8" and integers.buffer == original.buffer
                assert set(integers.quantization.scale) == {1.0}
            else:
                assert w.is_constant and not made
    # one fake quant per quantized op output, none after the RESHAPE (equal parameters) nor after the MULs that
    # scale the weights
    computing = sum(op.opcode_name not in ("QUANTIZE", "DEQUANTIZE", "RESHAPE")
                    and not sg.tensors[op.outputs[0]].name.endswith("/dequantized") for op in sg.operators)
    assert view.op_histogram()["QUANTIZE"] == computing


@needs_mobilenet
def test_mobilenet_float_view_agrees_with_integer_top1(mobilenet):
    _, view, feed, expected, exact = mobilenet
    assert_agrees_with_integer(ReferenceBackend(view).run([feed])[0], expected, exact)


@needs_mobilenet
@pytest.mark.slow  # XLA compiles the whole network (~25 s here)
def test_mobilenet_float_view_on_xla_cpu(mobilenet):
    _, _, feed, expected, exact = mobilenet
    backend = float_view_backend(read_model(MOBILENET), platform="cpu")
    assert_agrees_with_integer(np.asarray(backend.run([feed])[0]), expected, exact)


def jax_sees_gpu() -> bool:
    from litegpu.backends.xla.device import available_platforms

    return "gpu" in available_platforms()


@needs_mobilenet
@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["float", "integer"])
def test_mobilenet_on_a_real_gpu(mobilenet, mode):
    if not jax_sees_gpu():
        pytest.skip("JAX sees no GPU")
    from litegpu import CompiledModel, HardwareAccelerator, Options

    model, _, feed, expected, exact = mobilenet
    options = Options(HardwareAccelerator.GPU, gpu_options=GpuOptions(quantized_execution=mode))
    got = CompiledModel.from_model(model, options=options)(feed)
    if mode == "float":
        assert_agrees_with_integer(got, expected, exact)
    else:  # bit-equal to the CPU's integer kernels with the same settings
        np.testing.assert_array_equal(got, ReferenceBackend(model).run([feed])[0])


WAKEWORD = MODELS / "microwakeword_okay_nabu.tflite"


@pytest.mark.skipif(not WAKEWORD.exists(), reason="shared models missing")
@pytest.mark.parametrize("backend", ["reference", pytest.param("xla", marks=pytest.mark.slow)])
def test_streaming_wakeword_float_view_over_twelve_calls(backend):
    # int8 in, uint8 out, int8 resource variables carried across calls (kept integer: READ/ASSIGN_VARIABLE)
    model = read_model(WAKEWORD)
    run = (ReferenceBackend(float_view(model)).run if backend == "reference"
           else float_view_backend(model, platform="cpu").run)
    with np.load(WAKEWORD.with_suffix(".reference.npz")) as z:
        for step in [""] + [f"step{i}/" for i in range(1, 12)]:
            got = np.asarray(run([z[f"serving_default/{step}in/input_audio"]])[0])
            expected = z[f"serving_default/{step}out_ref/dense"]
            assert got.dtype == np.uint8
            assert np.abs(got.astype(int) - expected.astype(int)).max() <= 1, step


def test_dequantize_constant_per_axis_with_zero_points():
    b = ModelBuilder()
    c = b.constant("c", np.array([[1, -2], [3, 4], [-5, 6]], np.int8),
                   quantization=quantization([0.5, 0.25], [1, -1], axis=1))
    t = b.build().main.tensors[c]
    np.testing.assert_array_equal(dequantize_constant(t), [[0, -0.25], [1, 1.25], [-3, 1.75]])


# ---- weights that several subgraphs share --------------------------------------------------------

def prefill_decode_model():
    """Two signatures whose FULLY_CONNECTED ops read one int8 weight buffer and one int32 bias buffer,
    as a converted decoder's ``prefill`` and ``decode`` do."""
    rng = np.random.default_rng(11)
    x_q, y_q, w_q = quantization(0.05, 2), quantization(0.2, -1), quantization(0.004)
    b = ModelBuilder()
    w_values = rng.integers(-127, 128, (32, 16)).astype(np.int8)
    w = b.constant("w", w_values, quantization=w_q)
    bias = b.constant("bias", rng.integers(-500, 500, 32).astype(np.int32),
                      quantization=quantization(np.float32(0.05) * np.float32(0.004)))
    for key, sg, batch in (("prefill", b, 4), ("decode", b.subgraph("decode"), 1)):
        if sg is not b:  # the same buffers, as the converter deduplicates them
            w = sg.tensor("w", (32, 16), "int8", quantization=w_q, buffer=b.tensors[w].buffer, raw=b.tensors[w].raw)
            bias = sg.tensor("bias", (32,), "int32", quantization=b.tensors[bias].quantization,
                             buffer=b.tensors[bias].buffer, raw=b.tensors[bias].raw)
        x = sg.input("x", (batch, 16), "int8", quantization=x_q)
        y = sg.tensor("y", (batch, 32), "int8", quantization=y_q)
        sg.op("FULLY_CONNECTED", [x, w, bias], [y])
        sg.output(y)
        b.signature(key, sg)
    return b.build()


def test_subgraphs_sharing_a_quantized_weight_keep_it_quantized_in_its_shared_buffer():
    """The int8 weight stays int8 (each subgraph's DEQUANTIZE reads the one shared buffer); the small int32 bias
    is dequantized once into one float32 buffer both read."""
    model = prefill_decode_model()
    view = float_view(model)
    weights, sources, biases = [], [], []
    for sg in view.subgraphs:
        fc = next(op for op in sg.operators if op.opcode_name == "FULLY_CONNECTED")
        weights.append(sg.tensors[fc.inputs[1]])
        scaled = next(op for op in sg.operators if fc.inputs[1] in op.outputs)
        dequantize = next(op for op in sg.operators if scaled.inputs[0] in op.outputs)
        assert (scaled.opcode_name, dequantize.opcode_name) == ("MUL", "DEQUANTIZE")
        sources.append(sg.tensors[dequantize.inputs[0]])
        biases.append(sg.tensors[fc.inputs[2]])
    assert [t.name for t in weights] == ["w/dequantized"] * 2 and not any(t.is_constant for t in weights)
    assert [t.dtype for t in sources] == ["int8"] * 2 and sources[0].buffer == sources[1].buffer > 0
    assert biases[0].buffer == biases[1].buffer > 0 and biases[0].dtype == "float32"
    assert len(view.buffers) == len(model.buffers) + 3  # the bias, the weight's scales and their shape (shared)
    assert read_model(to_bytes(view)) == view


def test_the_xla_backend_holds_a_shared_dequantized_weight_once():
    from litegpu.backends.xla.backend import XlaBackend

    model = prefill_decode_model()
    view = float_view(model)
    prefill = XlaBackend(view, 0)
    decode = XlaBackend(view, 1, state=prefill.state)
    assert [np.asarray(p).shape for p in prefill.state.params.values()] == [(32, 16)]  # the bias is too small
    rng = np.random.default_rng(12)
    for index, backend, batch in ((0, prefill, 4), (1, decode, 1)):
        x = rng.integers(-128, 128, (batch, 16)).astype(np.int8)
        expected = ReferenceBackend(view, index).run([x])[0]
        np.testing.assert_array_equal(np.asarray(backend.run([x])[0]), expected)


def test_float_view_of_int4_weights_does_not_unpack_them():
    """Asking whether a tensor is a constant must not decode it: ``Tensor.data`` of an int4 weight is an unpacked
    copy, a byte per value, kept on the tensor (a 3.4 GB int4 decoder's float view spent minutes and 6.8 GB
    unpacking weights it only asked about; BENCHMARKS.md "Fourth run")."""
    from oracle import load_bench_module

    dm = load_bench_module("decoder_model")
    model = dm.build_decoder(dm.DecoderConfig(weights="int4", layers=1, width=64, heads=2, vocab=64))
    int4 = [t for sg in model.subgraphs for t in sg.tensors if t.dtype == "int4" and t.has_data]
    assert int4
    viewed = float_view(model)
    assert [t.name for t in int4 if "data" in vars(t)] == []
    kept = [t for sg in viewed.subgraphs for t in sg.tensors if t.dtype == "int4" and t.has_data]
    assert kept and [t.name for t in kept if "data" in vars(t)] == []
