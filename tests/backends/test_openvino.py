"""The OpenVINO engine: OpenVINO's own verdict on ops, the policy that keeps exact ops off it, compiled
partitions against the reference kernels, reshapes, precision, threads, the fallback, and no telemetry."""

import subprocess
import sys
import warnings

import numpy as np
import pytest

pytest.importorskip("openvino")

import litegpu  # noqa: E402
from litegpu.backends.engine import EngineSettings  # noqa: E402
from litegpu.backends.registry import engine  # noqa: E402
from litegpu.backends.graph import GraphRunner, OpRange  # noqa: E402
from litegpu.backends.openvino import OpenVinoEngine, OpenVinoExecutable  # noqa: E402
from litegpu.errors import EngineCompileError  # noqa: E402
from litegpu.ir import execution_order, read_model  # noqa: E402
from litegpu.ir.builder import ModelBuilder, quantization  # noqa: E402
from litegpu.ir.save import to_bytes  # noqa: E402
from litegpu.ops import Target  # noqa: E402

CPU = litegpu.HardwareAccelerator.CPU
# about OpenVINO's share of a model: the official interpreter, which would take small models whole, stays out
pytestmark = pytest.mark.usefixtures("without_litert")


def conv_chain(batch_signature=False):
    """conv 3x3 -> RELU -> conv 1x1 -> MEAN: float ops OpenVINO converts."""
    rng = np.random.default_rng(0)
    b = ModelBuilder()
    x = b.input("x", (1, 16, 16, 8), shape_signature=(-1, 16, 16, 8) if batch_signature else None)
    w1 = b.constant("w1", rng.normal(size=(16, 3, 3, 8)).astype(np.float32) * 0.2)
    w2 = b.constant("w2", rng.normal(size=(32, 1, 1, 16)).astype(np.float32) * 0.2)
    bias = b.constant("bias", np.zeros(32, np.float32))
    axes = b.constant("axes", np.array([1, 2], np.int32))
    h, r, f, y = (b.tensor(n, s) for n, s in (("h", (1, 16, 16, 16)), ("r", (1, 16, 16, 16)),
                                             ("f", (1, 16, 16, 32)), ("y", (1, 32))))
    b.op("CONV_2D", [x, w1, -1], [h], padding="SAME", stride_w=1, stride_h=1)
    b.op("RELU", [h], [r])
    b.op("CONV_2D", [r, w2, bias], [f], padding="SAME", stride_w=1, stride_h=1)
    b.op("MEAN", [f, axes], [y], keep_dims=False)
    b.output(y)
    return read_model(to_bytes(b.build()))


def whole(model, subgraph=0):
    sg = model.subgraphs[subgraph]
    return OpRange(subgraph, tuple(execution_order(sg, model.source)), tuple(sg.inputs), tuple(sg.outputs))


def image(batch=1, seed=1):
    return np.random.default_rng(seed).normal(size=(batch, 16, 16, 8)).astype(np.float32)


def test_the_engine_is_available_and_says_what_it_is():
    ov = engine("openvino")
    assert ov.available() and "openvino" in ov.describe()


def test_float_ops_are_taken_and_the_partition_matches_the_reference_kernels():
    model = conv_chain()
    assert OpenVinoEngine().unsupported(model, 0, whole(model).op_indices) == {}
    executable = OpenVinoEngine().compile(model, whole(model), EngineSettings(num_threads=1))
    x = image()
    (got,) = executable.run([x])
    (expected,) = GraphRunner(model, Target.REFERENCE).run_subgraph(0, [x])
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_other_input_shapes_compile_again_and_report_their_output_shapes():
    model = conv_chain(batch_signature=True)
    executable = OpenVinoEngine().compile(model, whole(model), EngineSettings())
    assert executable.output_shapes([(3, 16, 16, 8)])[0][0] == (3, 32)
    (got,) = executable.run([image(batch=3)])
    assert got.shape == (3, 32)


def test_bf16_is_only_used_when_asked_and_stays_close():
    model = conv_chain()
    x = image()
    (fp32,) = OpenVinoEngine().compile(model, whole(model), EngineSettings()).run([x])
    (bf16,) = OpenVinoEngine().compile(model, whole(model), EngineSettings(precision="bf16")).run([x])
    scale = np.abs(fp32).max()
    assert np.abs(bf16 - fp32).max() <= 5e-2 * scale


def test_threads_and_precision_are_part_of_the_compiled_partition():
    model = conv_chain()
    one = OpenVinoExecutable(model, whole(model), EngineSettings(num_threads=1))
    two = OpenVinoExecutable(model, whole(model), EngineSettings(num_threads=2))
    assert one._config()["INFERENCE_NUM_THREADS"] == 1 and one._config()["INFERENCE_PRECISION_HINT"] == "f32"
    assert one._key(((1, 16, 16, 8),)) != two._key(((1, 16, 16, 8),))
    with pytest.raises(litegpu.errors.ModelExecutionError, match="precision"):
        OpenVinoExecutable(model, whole(model), EngineSettings(precision="int3"))._config()


def quantized_add():
    b = ModelBuilder()
    q = quantization(0.05, 3)
    x = b.input("x", (1, 8), "int8", quantization=q)
    y = b.input("y", (1, 8), "int8", quantization=q)
    z = b.tensor("z", (1, 8), "int8", quantization=quantization(0.1, -2))
    b.op("ADD", [x, y], [z])
    b.output(z)
    return read_model(to_bytes(b.build()))


def test_quantized_ops_stay_on_the_exact_kernels_by_policy():
    model = quantized_add()
    (reason,) = OpenVinoEngine().unsupported(model, 0, (0,)).values()
    assert "quantized integer arithmetic" in reason
    compiled = litegpu.CompiledModel.from_model(model, options=litegpu.Options(CPU))
    assert compiled.plan.target is Target.XLA_CPU  # nothing for OpenVINO: the exact whole-model plan


def test_a_custom_op_openvino_cannot_convert_is_named_by_openvino(shared_models):
    model = read_model(shared_models / "mediapipe_selfie_segmentation.tflite")
    refused = OpenVinoEngine().unsupported(model, 0, whole(model).op_indices)
    assert {model.main.operators[i].opcode_name for i in refused} == {"Convolution2DTransposeBias"}
    assert all("frontend cannot convert" in why for why in refused.values())


def test_kernel_modes_pick_the_engines():
    model = conv_chain()

    def plan_of(mode):
        options = litegpu.Options(CPU, cpu_options=litegpu.CpuOptions(kernel_mode=mode))
        return litegpu.CompiledModel.from_model(model, options=options).plan

    assert plan_of(None).ops_per_engine() == {"openvino": 4}
    assert plan_of(litegpu.CpuKernelMode.BUILTIN).ops_per_engine() == {"xla": 4}
    assert plan_of(litegpu.CpuKernelMode.REFERENCE).ops_per_engine() == {"reference": 4}


def test_fast_and_exact_paths_agree():
    model = conv_chain()
    x = image(seed=5)
    fast = litegpu.CompiledModel.from_model(model)(x)
    exact = litegpu.CompiledModel.from_model(model, options=litegpu.Options(
        CPU, cpu_options=litegpu.CpuOptions(kernel_mode=litegpu.CpuKernelMode.BUILTIN)))(x)
    np.testing.assert_allclose(fast, exact, rtol=1e-5, atol=1e-5)


def test_a_partition_openvino_cannot_compile_goes_to_xla(monkeypatch):
    """OpenVINO's shape inference refuses some graphs its frontend converts: the planner gives them to XLA."""
    def refuse(self):
        raise EngineCompileError("OpenVINO could not compile it (test)")

    monkeypatch.setattr(OpenVinoExecutable, "prepare", refuse)
    model = conv_chain()
    compiled = litegpu.CompiledModel.from_model(model)
    assert compiled.plan.ops_per_engine() == {"xla": 4}
    (expected,) = GraphRunner(model, Target.REFERENCE).run_subgraph(0, [image()])
    np.testing.assert_allclose(compiled(image()), expected, rtol=1e-5, atol=1e-5)


def test_a_shape_openvino_cannot_compile_falls_back_with_a_warning(monkeypatch):
    model = conv_chain(batch_signature=True)
    compiled = litegpu.CompiledModel.from_model(model)
    assert compiled.plan.ops_per_engine() == {"openvino": 4}
    compiled(image())
    original = OpenVinoExecutable._compile

    def refuse_batch_2(self, shapes):
        if shapes[0][0] == 2:
            raise EngineCompileError("OpenVINO could not compile batch 2 (test)")
        return original(self, shapes)

    monkeypatch.setattr(OpenVinoExecutable, "_compile", refuse_batch_2)
    with pytest.warns(RuntimeWarning, match="exact kernels instead"):
        got = compiled(image(batch=2))
    (expected,) = GraphRunner(model, Target.REFERENCE).run_subgraph(0, [image(batch=2)])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_loading_openvino_through_litegpu_sends_no_telemetry():
    script = ("import sys, litegpu; from litegpu.backends import openvino as o; o._frontend(); "
              "print(sys.modules.get('openvino_telemetry', 'absent'))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                         env={k: v for k, v in __import__("os").environ.items() if k != "CI"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "None"


def test_loading_openvino_skips_its_converter_which_still_imports_when_called():
    """A warm start's 60 ms: OpenVINO's model converter (``openvino.tools.ovc``) is not imported with the package
    when litegpu loads it; ``openvino.convert_model`` still works, importing it then."""
    script = ("import sys, litegpu; from litegpu.backends import openvino as o; ov = o._openvino(); "
              "print('openvino.tools.ovc' in sys.modules); "
              "import openvino; from openvino.tools.ovc import convert_model; "
              "print(callable(ov.convert_model), ov.convert_model.__module__)")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    skipped, works = out.stdout.strip().splitlines()[-2:]
    assert skipped == "False" and works.startswith("True")


def test_big_models_stay_on_xla_which_maps_their_weights(monkeypatch):
    """OpenVINO copies a model's weights into its compiled model; past the limit XLA keeps the 1.3x memory goal."""
    from litegpu.backends import openvino as engine_module

    model = conv_chain()
    monkeypatch.setattr(engine_module, "MAX_OPENVINO_WEIGHT_BYTES", 1024)
    refused = OpenVinoEngine().unsupported(model, 0, whole(model).op_indices)
    assert set(refused) == set(whole(model).op_indices) and "maps them in place" in refused[0]
    assert litegpu.CompiledModel.from_model(model).plan.ops_per_engine() == {"xla": 4}


def test_quantized_ops_go_to_openvino_only_when_asked():
    model = quantized_add()
    fast = litegpu.Options(CPU, cpu_options=litegpu.CpuOptions(quantized_execution="fast"))
    compiled = litegpu.CompiledModel.from_model(model, options=fast)
    assert compiled.plan.ops_per_engine() == {"openvino": 1}
    rng = np.random.default_rng(3)
    x, y = (rng.integers(-128, 127, (1, 8)).astype(np.int8) for _ in range(2))
    exact = litegpu.CompiledModel.from_model(model)(x, y)
    got = compiled(x, y)
    assert got.dtype == np.int8 and np.abs(got.astype(int) - exact.astype(int)).max() <= 1
    with pytest.raises(litegpu.errors.InvalidArgumentError, match="quantized_execution"):
        litegpu.CpuOptions(quantized_execution="approximately")


def test_an_int8_network_on_openvino_stays_near_the_builtin_kernels(shared_models):
    """MobileNetV3-small int8 through OpenVINO's int8 kernels: the recorded builtin-kernel output within a few
    units (BENCHMARKS.md measures it against XNNPACK's distance)."""
    from test_shared_models import load_reference

    path = shared_models / "mobilenet_v3_small_int8.tflite"
    record = load_reference(shared_models / "mobilenet_v3_small_int8.reference.npz")["serving_default"]
    fast = litegpu.Options(CPU, cpu_options=litegpu.CpuOptions(quantized_execution="fast"))
    compiled = litegpu.CompiledModel.from_file(str(path), options=fast)
    assert compiled.plan.ops_per_engine() == {"openvino": 109}
    got = compiled.run(record["in"], signature_key="serving_default")
    for name, want in record["out_ref"].items():
        diff = np.abs(got[name].astype(int) - want.astype(int))
        assert diff.max() <= 32 and np.mean(diff <= 1) >= 0.9, (diff.max(), np.mean(diff <= 1))
