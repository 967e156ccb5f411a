"""The LiteRT engine (the official interpreter, XNNPACK): what it refuses, its runs against the official
interpreter, signatures, resizes and variables, and how the planner chooses it."""

import sys
from pathlib import Path

import numpy as np
import pytest

litert = pytest.importorskip("ai_edge_litert.interpreter")

import litegpu  # noqa: E402
from litegpu.backends import litert as litert_backend  # noqa: E402
from litegpu.backends.engine import EngineSettings  # noqa: E402
from litegpu.backends.registry import engine  # noqa: E402
from litegpu.backends.graph import OpRange  # noqa: E402
from litegpu.backends.litert import LiteRtEngine  # noqa: E402
from litegpu.errors import EngineCompileError, InvalidArgumentError, ModelExecutionError  # noqa: E402
from litegpu.ir import execution_order, read_model  # noqa: E402
from litegpu.ir.builder import ModelBuilder  # noqa: E402
from litegpu.ir.save import to_bytes  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ops"))
from test_matmul_quantized import blockwise_model  # noqa: E402
from test_variables import accumulate, add_init_subgraph  # noqa: E402

CPU = litegpu.HardwareAccelerator.CPU
SHARED = Path(__file__).resolve().parents[3] / "shared" / "models"


@pytest.fixture(autouse=True)
def timed_at_load(monkeypatch):
    """The planner's timings made while loading, as these tests check them (the deferred timing:
    tests/runtime/test_engine_choice.py)."""
    monkeypatch.setenv("LITEGPU_ENGINE_CHOICE", "load")


def whole(model, subgraph=0):
    sg = model.subgraphs[subgraph]
    return OpRange(subgraph, tuple(execution_order(sg, model.source)), tuple(sg.inputs), tuple(sg.outputs))


def small_mlp(batch_signature=False):
    """x -> FULLY_CONNECTED -> RELU -> FULLY_CONNECTED: float ops every engine runs."""
    rng = np.random.default_rng(0)
    b = ModelBuilder()
    x = b.input("x", (1, 16), shape_signature=(-1, 16) if batch_signature else None)
    w1 = b.constant("w1", rng.normal(size=(32, 16)).astype(np.float32) * 0.3)
    w2 = b.constant("w2", rng.normal(size=(4, 32)).astype(np.float32) * 0.3)
    h = b.tensor("h", (1, 32), shape_signature=(-1, 32) if batch_signature else None)
    r = b.tensor("r", (1, 32), shape_signature=(-1, 32) if batch_signature else None)
    y = b.tensor("y", (1, 4), shape_signature=(-1, 4) if batch_signature else None)
    b.op("FULLY_CONNECTED", [x, w1, -1], [h])
    b.op("RELU", [h], [r])
    b.op("FULLY_CONNECTED", [r, w2, -1], [y])
    b.output(y)
    return to_bytes(b.build())


def official(data, inputs):
    interpreter = litert.Interpreter(model_content=data)
    interpreter.allocate_tensors()
    for d, x in zip(interpreter.get_input_details(), inputs):
        interpreter.set_tensor(d["index"], x)
    interpreter.invoke()
    return [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]


def test_the_engine_is_available_and_says_what_it_is():
    found = engine("litert")
    assert found.available() and "ai-edge-litert" in found.describe()


def test_a_partition_runs_as_the_official_interpreter_runs_it():
    data = small_mlp()
    model = read_model(data)
    x = np.random.default_rng(1).normal(size=(1, 16)).astype(np.float32)
    executable = LiteRtEngine().compile(model, whole(model), EngineSettings(num_threads=1))
    (got,) = executable.run([x])
    (want,) = official(data, [x])
    np.testing.assert_array_equal(got, want)
    # the output is a copy: the next run does not overwrite it
    executable.run([x * 2])
    np.testing.assert_array_equal(got, want)


def batch_mlp_executable():
    """The whole small MLP, batch dimension free, on the official interpreter."""
    model = read_model(small_mlp(batch_signature=True))
    return LiteRtEngine().compile(model, whole(model), EngineSettings())


def test_new_input_shapes_resize_the_interpreter():
    executable = batch_mlp_executable()
    x = np.random.default_rng(2).normal(size=(3, 16)).astype(np.float32)
    (got,) = executable.run([x])
    assert got.shape == (3, 4)
    (one,) = executable.run([x[:1]])
    np.testing.assert_allclose(one, got[:1], rtol=1e-6, atol=1e-6)


def test_a_shape_the_interpreter_refuses_fails_that_run_only():
    executable = batch_mlp_executable()
    x = np.random.default_rng(5).normal(size=(2, 16)).astype(np.float32)
    (want,) = executable.run([x])
    with pytest.raises(ModelExecutionError, match="official interpreter failed"):
        executable.run([np.zeros((2, 5), np.float32)])  # 5 features where the weights take 16
    (again,) = executable.run([x])
    np.testing.assert_array_equal(again, want)


def test_a_part_of_a_subgraph_runs_as_a_sub_model():
    data = small_mlp()
    model = read_model(data)
    sg = model.subgraphs[0]
    first, relu = sg.operators[0], sg.operators[1]
    part = OpRange(0, (0, 1), (first.inputs[0],), (relu.outputs[0],))   # FULLY_CONNECTED -> RELU
    x = np.random.default_rng(6).normal(size=(1, 16)).astype(np.float32)
    (got,) = LiteRtEngine().compile(model, part, EngineSettings()).run([x])
    w1 = sg.tensors[first.inputs[1]].data
    np.testing.assert_allclose(got, np.maximum(x @ w1.T, 0), rtol=1e-5, atol=1e-5)


def test_a_model_the_interpreter_cannot_load_is_refused_with_its_message():
    b = ModelBuilder()
    x = b.input("x", (4,))
    y = b.tensor("y", (4,))
    b.op("NoSuchCustomOpAnywhere", [x], [y], custom_options=b"")
    b.output(y)
    model = read_model(to_bytes(b.build()))
    found = LiteRtEngine()
    reason = found.model_refusal(model)
    assert reason is not None and "official interpreter refuses" in reason
    with pytest.raises(EngineCompileError, match="cannot run"):
        found.compile(model, whole(model), EngineSettings())


def test_big_models_and_reduced_precision_stay_off_it(monkeypatch):
    model = read_model(small_mlp())
    assert LiteRtEngine(EngineSettings(precision="bf16")).model_refusal(model).startswith("the official interpreter")
    monkeypatch.setattr(litert_backend, "MAX_LITERT_MODEL_BYTES", 1024)
    assert "XLA maps them in place" in LiteRtEngine().model_refusal(model)


def test_a_model_whose_packed_copy_would_not_fit_stays_off_it(monkeypatch):
    """Below the size bound, XNNPACK takes a big model only where the host has room for its packed copy."""
    model = read_model(small_mlp())
    weights = litert_backend.constant_bytes(model)
    monkeypatch.setattr(litert_backend, "constant_bytes", lambda m: (512 << 20) + weights)
    monkeypatch.setattr(litert_backend, "host_available_bytes", lambda: (1 << 30, "available memory (MemAvailable)"))
    reason = LiteRtEngine().model_refusal(model)
    assert reason is not None and "XNNPACK's packed copy" in reason and "1.0 GiB" in reason
    monkeypatch.setattr(litert_backend, "host_available_bytes", lambda: (8 << 30, "available memory (MemAvailable)"))
    assert LiteRtEngine().model_refusal(model) is None


def accumulator(initial: float) -> bytes:
    """acc = initial (CALL_ONCE); each run: acc += x, returns acc: a resource variable."""
    b = ModelBuilder()
    x = b.input("x", (2, 3))
    init = add_init_subgraph(b, {"acc": np.full((2, 3), initial, np.float32)})
    b.op("CALL_ONCE", [], [], init_subgraph_index=init.index)
    b.output(accumulate(b, "acc", x, (2, 3)))
    return to_bytes(b.build())


def test_variables_keep_their_state_across_runs_and_reset():
    data = accumulator(1.0)
    cm = litegpu.CompiledModel.from_buffer(data, CPU)
    assert cm.plan.ops_per_engine() == {"litert": len(read_model(data).subgraphs[0].operators)}
    x = np.full((2, 3), 2.0, np.float32)
    first = cm.run([x])
    second = cm.run([x])
    np.testing.assert_array_equal(list(first.values())[0], np.full((2, 3), 3.0))
    np.testing.assert_array_equal(list(second.values())[0], np.full((2, 3), 5.0))
    cm.reset_all_variables()
    np.testing.assert_array_equal(list(cm.run([x]).values())[0], np.full((2, 3), 3.0))


@pytest.mark.skipif(not (SHARED / "two_signatures_float32.tflite").exists(), reason="needs ../shared/models")
def test_every_signature_runs_on_the_one_interpreter():
    path = str(SHARED / "two_signatures_float32.tflite")
    cm = litegpu.CompiledModel.from_file(path, litegpu.Options(CPU, cpu_options=litegpu.CpuOptions(engines=("litert",))))
    assert set(cm.plan.ops_per_engine()) == {"litert"}
    want = litert.Interpreter(model_path=path)
    for key in cm.get_signature_list():
        runner = want.get_signature_runner(key)
        inputs = {name: sample_inputs_for(d) for name, d in runner.get_input_details().items()}
        expected = runner(**inputs)
        got = cm.run(inputs, key)
        assert set(got) == set(expected)
        for name in got:
            np.testing.assert_array_equal(got[name], expected[name])


def two_signature_model() -> bytes:
    """"double" (x * 2, subgraph 0) and "scale" (a * b with a batch dimension that can change, subgraph 1)."""
    b = ModelBuilder()
    x, y = b.input("x", (1, 4)), b.tensor("y", (1, 4))
    b.op("ADD", [x, x], [y])
    b.output(y)
    b.signature("double")
    second = b.subgraph("scale")
    a = second.input("a", (1, 4), shape_signature=(-1, 4))
    s = second.input("s", (1, 4), shape_signature=(-1, 4))
    out = second.tensor("out", (1, 4), shape_signature=(-1, 4))
    second.op("MUL", [a, s], [out])
    second.output(out)
    b.signature("scale", second)
    return to_bytes(b.build())


class CountingWrapper:
    """The interpreter's entry points, counting the resizes and allocations a run asks for."""

    def __init__(self, wrapper):
        self.wrapper, self.resizes, self.allocations = wrapper, 0, 0

    def ResizeInputTensor(self, *args):
        self.resizes += 1
        return self.wrapper.ResizeInputTensor(*args)

    def AllocateTensors(self, *args):
        self.allocations += 1
        return self.wrapper.AllocateTensors(*args)

    def __getattr__(self, name):
        return getattr(self.wrapper, name)


def test_a_signature_on_another_subgraph_is_resized_only_when_its_shapes_change():
    data = two_signature_model()
    cm = litegpu.CompiledModel.from_buffer(data, litegpu.Options(CPU, cpu_options=litegpu.CpuOptions(
        engines=("litert",))))
    assert set(cm.plan.ops_per_engine()) == {"litert"}
    rng = np.random.default_rng(4)
    x = rng.normal(size=(1, 4)).astype(np.float32)
    np.testing.assert_array_equal(cm.run({"x": x}, "double")["y"], x + x)
    shared = cm._backend(cm._signature("scale")).units[0].executable.shared
    counting = shared.wrapper = CountingWrapper(shared.wrapper)
    runner = litert.Interpreter(model_content=data).get_signature_runner("scale")
    for batch in (1, 1, 1, 3, 3, 1):
        a, s = (rng.normal(size=(batch, 4)).astype(np.float32) for _ in range(2))
        got = cm.run({"a": a, "s": s}, "scale")["out"]
        np.testing.assert_array_equal(got, runner(a=a, s=s)["out"])
    np.testing.assert_array_equal(cm.run({"x": x}, "double")["y"], x + x)  # subgraph 0 unharmed
    # first use of subgraph 1: one allocation; then one resize of both inputs (and an allocation) per change
    assert (counting.resizes, counting.allocations) == (4, 3)


def sample_inputs_for(detail):
    rng = np.random.default_rng(3)
    shape, dtype = tuple(detail["shape"]), detail["dtype"]
    return rng.normal(size=shape).astype(dtype) if np.dtype(dtype).kind == "f" else np.zeros(shape, dtype)


# ---- how the planner chooses ------------------------------------------------------------------

def test_models_xla_would_run_alone_go_to_the_official_interpreter():
    data = accumulator(0.0)
    assert litegpu.CompiledModel.from_buffer(data, CPU).plan.target.value == "litert"
    # without it (or in the exact mode) XLA runs them
    no_litert = litegpu.Options(CPU, cpu_options=litegpu.CpuOptions(engines=("openvino",)))
    assert litegpu.CompiledModel.from_buffer(data, no_litert).plan.target.value == "xla_cpu"
    exact = litegpu.Options(CPU, cpu_options=litegpu.CpuOptions(kernel_mode=litegpu.CpuKernelMode.BUILTIN))
    assert litegpu.CompiledModel.from_buffer(data, exact).plan.target.value == "xla_cpu"


def time_every_model(monkeypatch):
    """Models as small as these tests' are given to the official interpreter without timing
    (``compile.choices``): here they are timed as a bigger one would be."""
    import litegpu.compile.choices as choices  # imported on first use: a test run alone has not yet

    monkeypatch.setattr(choices, "OBVIOUS_MAX_MACS", -1)


def _openvino_or_litert(monkeypatch, winner):
    calls = []
    time_every_model(monkeypatch)
    monkeypatch.setattr(litert_backend, "THREAD_CHOICE_MAX_MACS", -1)  # no thread-count timing here

    def timed(candidates, **kwargs):  # ``timing.timed_rounds``: the winner twice as fast in every round
        calls.append(sorted(candidates))
        return {name: [1.0 if name == winner else 2.0] * litert_backend.MIN_VERDICT_ROUNDS for name in candidates}

    monkeypatch.setattr("litegpu.backends.timing.timed_rounds", timed)
    return calls


@pytest.mark.parametrize("winner", ["litert", "openvino"])
def test_against_openvino_the_faster_engine_is_measured(monkeypatch, winner):
    pytest.importorskip("openvino")
    calls = _openvino_or_litert(monkeypatch, winner)
    cm = litegpu.CompiledModel.from_buffer(small_mlp(), CPU)
    assert calls == [["litert", "openvino"]]
    assert set(cm.plan.ops_per_engine()) == {winner}
    x = np.random.default_rng(4).normal(size=(1, 16)).astype(np.float32)
    np.testing.assert_allclose(list(cm.run([x]).values())[0], official(small_mlp(), [x])[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("openvino_ms, chosen", [(1.0, "litert"), (0.98, "litert"), (0.96, "litert"),
                                                  (0.92, "openvino"), (0.85, "openvino")])
def test_a_tie_goes_to_the_official_interpreter(monkeypatch, openvino_ms, chosen):
    pytest.importorskip("openvino")
    time_every_model(monkeypatch)
    monkeypatch.setattr(litert_backend, "THREAD_CHOICE_MAX_MACS", -1)  # no thread-count timing here
    monkeypatch.setattr("litegpu.backends.timing.timed_rounds", lambda candidates, **kwargs: {
        "litert": [1.0] * 6, "openvino": [openvino_ms] * 6})
    cm = litegpu.CompiledModel.from_buffer(small_mlp(), CPU)
    assert cm.plan.target.value == chosen


def test_the_verdict_is_kept_in_the_compile_cache(monkeypatch, tmp_path):
    pytest.importorskip("openvino")
    calls = _openvino_or_litert(monkeypatch, "litert")
    options = litegpu.Options(CPU, serialization_dir=str(tmp_path), model_token="mlp")
    litegpu.CompiledModel.from_buffer(small_mlp(), options)
    warm = litegpu.CompiledModel.from_buffer(small_mlp(), options)
    assert len(calls) == 1 and set(warm.plan.ops_per_engine()) == {"litert"}


def test_big_models_stay_on_openvino_without_timing(monkeypatch):
    pytest.importorskip("openvino")
    calls = _openvino_or_litert(monkeypatch, "litert")
    monkeypatch.setattr(sys.modules["litegpu.compile.plan"], "LITERT_MEASURE_MAX_MACS", 10)
    cm = litegpu.CompiledModel.from_buffer(small_mlp(), CPU)
    assert calls == [] and set(cm.plan.ops_per_engine()) == {"openvino"}


def test_cpu_options_engines_are_checked():
    with pytest.raises(InvalidArgumentError, match="unknown engine"):
        litegpu.CpuOptions(engines=("xnnpack",))
    with pytest.raises(InvalidArgumentError, match="tuple of engine names"):
        litegpu.CpuOptions(engines="litert")
    assert litegpu.CpuOptions(engines=["openvino"]).engines == ("openvino",)


@pytest.mark.skipif(not (SHARED / "mobilenet_v3_small_int8.tflite").exists(), reason="needs ../shared/models")
def test_integer_models_follow_the_official_default_unless_exact_is_asked():
    path = str(SHARED / "mobilenet_v3_small_int8.tflite")
    fast = litegpu.CompiledModel.from_file(path, CPU)
    assert set(fast.plan.ops_per_engine()) == {"litert"}
    x = np.random.default_rng(5).integers(-128, 127, (1, 224, 224, 3)).astype(np.int8)
    official = litert.Interpreter(model_path=path)
    official.allocate_tensors()
    official.set_tensor(official.get_input_details()[0]["index"], x)
    official.invoke()
    want = official.get_tensor(official.get_output_details()[0]["index"])
    np.testing.assert_array_equal(list(fast.run([x]).values())[0], want)  # XNNPACK's int8 results, exactly
    exact = litegpu.CompiledModel.from_file(path, litegpu.Options(
        CPU, cpu_options=litegpu.CpuOptions(quantized_execution="exact")))
    assert set(exact.plan.ops_per_engine()) == {"xla"}
    with pytest.raises(InvalidArgumentError, match="quantized_execution"):
        litegpu.CpuOptions(quantized_execution="xnnpack")


@pytest.mark.skipif(not (SHARED / "mediapipe_selfie_segmentation.tflite").exists(), reason="needs ../shared/models")
@pytest.mark.parametrize("winner", ["litert", "openvino"])
def test_a_model_split_around_a_custom_op_times_the_official_interpreter_on_its_part(monkeypatch, tmp_path, winner):
    pytest.importorskip("openvino")
    calls = _openvino_or_litert(monkeypatch, winner)
    path = str(SHARED / "mediapipe_selfie_segmentation.tflite")
    options = litegpu.Options(CPU, serialization_dir=str(tmp_path), model_token="selfie")
    fast = litegpu.CompiledModel.from_file(path, options)
    assert calls == [["litert", "openvino"]]          # OpenVINO's part (all but the custom op), timed once
    engines = [(p.engine, [fast.model.main.operators[i].opcode_name for i in p.op_indices]) for p in fast.plan.partitions]
    if winner == "litert":
        # OpenVINO kept nothing: the custom op runs on the interpreter too, no XLA partition, no boundary
        assert [e for e, _ in engines] == ["litert"]
        assert litegpu.CompiledModel.from_file(path, options).plan.engine_summary() == fast.plan.engine_summary()
        assert len(calls) == 1                        # the warm start read the verdict
    else:
        assert [e for e, _ in engines] == ["openvino", "xla"]
        # the float16 weights of the custom op are dequantized beside it, not handed over on every run
        assert "Convolution2DTransposeBias" in engines[1][1] and engines[1][1].count("DEQUANTIZE") == 2
    x = np.random.default_rng(7).random((1, 256, 256, 3), np.float32)
    exact = litegpu.CompiledModel.from_file(path, litegpu.Options(
        CPU, cpu_options=litegpu.CpuOptions(kernel_mode=litegpu.CpuKernelMode.BUILTIN)))
    np.testing.assert_allclose(list(fast.run([x]).values())[0], list(exact.run([x]).values())[0], rtol=1e-4,
                               atol=1e-4)


# ---- the official library's log lines -------------------------------------------------------------

_FIRST_LOAD = """
import numpy as np, litegpu
model = litegpu.CompiledModel.from_file({path!r}, options=litegpu.Options(
    litegpu.HardwareAccelerator.CPU, cpu_options=litegpu.CpuOptions(engines=("litert",))))
details = model.get_input_tensor_details(0)
model.run({{name: np.zeros(d["shape"], d["dtype"]) for name, d in details.items()}})
print(model.plan.engine_summary())
"""


@pytest.mark.parametrize("debug", [False, True])
def test_the_xnnpack_delegate_info_line_stays_out_of_stderr_unless_debugging(debug):
    import os
    import subprocess

    path = SHARED / "two_signatures_float32.tflite"
    if not path.exists():
        pytest.skip("shared models not present")
    env = {k: v for k, v in os.environ.items() if k != "LITEGPU_DEBUG"}
    if debug:
        env["LITEGPU_DEBUG"] = "1"
    done = subprocess.run([sys.executable, "-c", _FIRST_LOAD.format(path=str(path))], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "LiteRT (XNNPACK)" in done.stdout
    # with LITEGPU_DEBUG the official library's own line shows: the model did go through its XNNPACK delegate
    assert ("Created TensorFlow Lite XNNPACK delegate" in done.stderr) is debug, done.stderr


def test_only_info_lines_are_dropped_and_stderr_is_restored(capfd, monkeypatch):
    import os

    monkeypatch.delenv("LITEGPU_DEBUG", raising=False)
    with litert_backend.native_info_logs_dropped():
        os.write(2, b"INFO: chatter\nWARNING: something the user must see\n")
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "WARNING: something the user must see\nafter\n"


# ---- int4 weights ----------------------------------------------------------------------------------------------

def builtin_kernels(data, inputs):
    interpreter = litert.Interpreter(model_content=data, experimental_op_resolver_type=(
        litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES))
    interpreter.allocate_tensors()
    for d, x in zip(interpreter.get_input_details(), inputs):
        interpreter.set_tensor(d["index"], x)
    interpreter.invoke()
    return [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]


def with_scales(model, change):
    """``model`` (one blockwise FULLY_CONNECTED) with its scales passed through ``change``."""
    import dataclasses

    from litegpu.ir.model import Buffer

    sg = model.subgraphs[0]
    scales = sg.tensors[int(sg.tensors[sg.operators[0].inputs[1]].quantization.details["scales"])]
    values = change(scales.data.copy())
    raw = np.frombuffer(values.tobytes(), np.uint8)
    tensors = list(sg.tensors)
    tensors[scales.index] = dataclasses.replace(scales, dtype=str(values.dtype), raw=raw,
                                                buffer=len(model.buffers))
    return dataclasses.replace(model, subgraphs=(dataclasses.replace(sg, tensors=tuple(tensors)),),
                               buffers=(*model.buffers, Buffer(raw)))


def bfloat16_exact(scales):
    """float16 scales that bfloat16 holds exactly, as litert-torch writes them (XNNPACK keeps bfloat16 scales)."""
    return (scales.astype(np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32).astype(np.float16)


def test_blockwise_int4_weights_run_on_xnnpack_near_the_builtin_kernels():
    model = with_scales(read_model(to_bytes(blockwise_model((3, 256), 16, 32))), bfloat16_exact)
    assert litert_backend.sub_byte_refusal(model) is None
    assert LiteRtEngine().model_refusal(model) is None
    x = np.random.default_rng(3).normal(size=(3, 256)).astype(np.float32)
    (got,) = LiteRtEngine().compile(model, whole(model), EngineSettings(num_threads=1)).run([x])
    (want,) = builtin_kernels(to_bytes(model), [x])
    # XNNPACK's int4 kernels quantize each input row as the builtin hybrid kernels do; the float steps may round
    # otherwise
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
    assert litegpu.CompiledModel.from_buffer(to_bytes(model), CPU).plan.target.value == "litert"


def test_a_block_of_zero_scale_is_cleared_so_that_xnnpack_takes_the_model():
    """The official default refuses the whole model over one zero scale (litert-torch's int4 exports with tied
    embeddings have a row of zeros); litegpu hands XNNPACK the same weights in a form it takes."""
    def zero_first_row(scales):
        scales = bfloat16_exact(scales)
        scales[0] = 0
        return scales

    model = with_scales(read_model(to_bytes(blockwise_model((2, 64), 8, 32))), zero_first_row)
    data = to_bytes(model)
    with pytest.raises(RuntimeError, match="unsupported scale value"):
        official(data, [np.zeros((2, 64), np.float32)])
    cleared = litert_backend.with_empty_blocks_cleared(model)
    assert cleared is not model and litert_backend.with_empty_blocks_cleared(cleared) is cleared
    w, w_cleared = (m.subgraphs[0].tensors[m.subgraphs[0].operators[0].inputs[1]] for m in (model, cleared))
    assert np.any(w.data[0] != 0) and np.all(w_cleared.data[0] == 0)  # the same weights: zeros
    np.testing.assert_array_equal(w_cleared.data[1:], w.data[1:])
    x = np.random.default_rng(4).normal(size=(2, 64)).astype(np.float32)
    (got,) = LiteRtEngine().compile(model, whole(model), EngineSettings(num_threads=1)).run([x])
    (want,) = builtin_kernels(data, [x])
    np.testing.assert_array_equal(got[:, 0], want[:, 0])  # the bias alone
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


@pytest.mark.parametrize("change,match", [
    (lambda s: s.astype(np.float32), "blockwise scales in float32"),
    (lambda s: -bfloat16_exact(s), "negative, subnormal"),
    (lambda s: np.full_like(s, 1e-6), "negative, subnormal"),  # an fp16 subnormal
    (lambda s: s, "bfloat16 does not hold exactly"),  # XNNPACK would round them: 1.7e-3 off on this model
])
def test_int4_weights_xnnpack_would_refuse_stay_off_it(change, match):
    model = with_scales(read_model(to_bytes(blockwise_model((1, 64), 8, 32))), change)
    assert match in litert_backend.sub_byte_refusal(model)
    assert match in LiteRtEngine().model_refusal(model)


def test_other_sub_byte_weights_stay_off_it():
    model = read_model(to_bytes(blockwise_model((1, 64), 8, 32, zero_points=0)))
    assert "blockwise with scales only" in litert_backend.sub_byte_refusal(model)
    b = ModelBuilder()
    x = b.input("x", (1, 8))
    w = b.constant("w", np.ones((8, 8), np.int8), "int2")
    y = b.tensor("y", (1, 8))
    b.op("FULLY_CONNECTED", [x, w, -1], [y])
    b.output(y)
    assert "constant int4 weights only" in litert_backend.sub_byte_refusal(b.build())


def test_the_plan_says_whose_numbers_the_hybrid_ops_give():
    data = to_bytes(with_scales(read_model(to_bytes(blockwise_model((3, 256), 16, 32))), bfloat16_exact))
    fast = litegpu.CompiledModel.from_buffer(data, CPU).plan
    assert "dynamic-range (hybrid) ops on LiteRT (XNNPACK)" in fast.numerics
    assert "CpuKernelMode.BUILTIN" in fast.numerics
    exact = litegpu.Options(CPU, cpu_options=litegpu.CpuOptions(kernel_mode=litegpu.CpuKernelMode.BUILTIN))
    assert litegpu.CompiledModel.from_buffer(data, exact).plan.numerics is None
    assert litegpu.CompiledModel.from_buffer(small_mlp(), CPU).plan.numerics is None


def test_weights_the_signatures_share_are_rewritten_once():
    """litert-torch's prefill and decode subgraphs read one buffer of weights: the cleared copy is one too."""
    from litegpu.backends.litert import with_empty_blocks_cleared

    path = Path(__file__).resolve().parents[1] / "heldout" / "litert_torch" / "smollm_tiny_int4_block32.tflite"
    model = read_model(str(path))
    cleared = with_empty_blocks_cleared(model)
    assert cleared is not model
    added = len(cleared.buffers) - len(model.buffers)
    changed = {(t.buffer, c.buffer) for sg, csg in zip(model.subgraphs, cleared.subgraphs)
               for t, c in zip(sg.tensors, csg.tensors) if t.buffer != c.buffer}
    assert added == len(changed) == len({old for old, _ in changed})
    assert len(model.subgraphs) > 1 and added < sum(
        1 for sg in model.subgraphs for t in sg.tensors if t.buffer != 0 and t.buffer in {o for o, _ in changed})


def test_the_room_asked_counts_the_rewritten_copy(monkeypatch):
    """A model whose zero int4 blocks are rewritten is held once more in memory: room for 4 copies, not 3."""
    def zero_first_row(scales):
        scales = bfloat16_exact(scales)
        scales[0] = 0
        return scales

    plain = with_scales(read_model(to_bytes(blockwise_model((2, 64), 8, 32))), bfloat16_exact)
    rewritten = with_scales(read_model(to_bytes(blockwise_model((2, 64), 8, 32))), zero_first_row)
    assert not litert_backend.has_empty_blocks(plain) and litert_backend.has_empty_blocks(rewritten)
    monkeypatch.setattr(litert_backend, "constant_bytes", lambda m: 1 << 30)
    monkeypatch.setattr(litert_backend, "host_available_bytes", lambda: (int(3.5 * (1 << 30)), "MemAvailable"))
    assert LiteRtEngine().settings_refusal(plain) is None
    assert "XNNPACK's packed copy" in LiteRtEngine().settings_refusal(rewritten)


# ---- a verdict that holds ---------------------------------------------------------------------------------------

def timings_giving(*timings):
    """``timing.timed_rounds`` stand-in: each call returns the next timing's rounds, given as the OpenVINO time
    of each round (the official interpreter's: 1.0); counts its calls."""
    calls = []

    def timed():
        openvino = timings[len(calls)]
        calls.append(1)
        return {"litert": [1.0] * len(openvino), "openvino": list(openvino)}

    return timed, calls


@pytest.mark.parametrize("timings,winner,count", [
    (([0.5, 0.6, 0.55, 0.5, 0.6, 0.5],), "openvino", 1),      # faster in every round: one timing decides
    (([1.5, 1.4, 1.6, 1.5, 1.4, 1.6],), "litert", 1),
    (([0.98, 0.99, 0.985, 1.0, 0.99, 0.98],), "litert", 1),   # a tie goes to the official default at once
    (([0.85, 0.87, 0.86, 0.85, 0.86, 0.87],), "openvino", 1),  # 15 % apart, every round agreeing
    (([0.96, 0.97, 0.965, 0.96, 0.97, 0.96],), "litert", 1),   # 4 %: a tie once OpenVINO's start-up is counted
    # 8 %: beyond the tie margin, which leaves the timing's error room under issue 38's 0.9x bar (Keras
    # MobileNetV2 b8: timed 0.91-0.96 in every first start, 0.83-0.89 alone)
    (([0.92, 0.93, 0.925, 0.92, 0.93, 0.92],), "openvino", 1),
    # a big model's timing of three rounds cannot decide alone: its median is one round (ConvNeXt-tiny at load
    # 10: three rounds kept XNNPACK, 2x slower than OpenVINO alone, for good); timed again, the rounds pooled
    (([1.5, 1.4, 1.6], [1.5, 1.4, 1.6]), "litert", 2),
    (([0.5, 0.6, 0.55], [0.5, 0.6, 0.55]), "openvino", 2),
    # ... and where the pooled rounds still disagree, a far faster median goes to that engine, not kept
    (([1.4, 1.3, 1.2], [0.5, 0.5, 0.5], [0.5, 0.5, 0.5]), "openvino", 3),
    # the load made the rounds disagree (MnasNet 0.5 on the loaded machine: either engine faster in a round):
    # timed again, the rounds pooled: a pooled median within TIE_MARGIN keeps the official interpreter, decided
    # where OpenVINO was not far ahead in a quarter of the rounds ...
    (([0.5, 1.0, 1.4, 0.98], [0.95, 2.0, 0.92, 1.0], [0.7, 1.5, 0.9, 1.2]), "litert", 2),
    # ... and not decided where it was (Keras DenseNet-121 at load 9: OpenVINO 0.7x in some rounds, 1.6x in
    # others, 0.78x alone): the official interpreter for this start only, timed again at the next
    (([0.5, 1.0, 1.4, 0.98], [0.8, 2.0, 0.6, 1.0], [0.7, 1.5, 0.9, 1.2]), "litert", 3),
    # ... and the other engine where it is further ahead (0.85)
    (([0.4, 0.9, 1.3, 0.8], [0.7, 2.0, 0.5, 0.9], [0.6, 1.4, 0.8, 1.1]), "openvino", 3),
    # ... or the pooled rounds do tell: the other engine faster in most of them by far
    (([0.4, 0.9, 1.3, 0.8], [0.7, 0.6, 0.5, 0.8]), "openvino", 2),
    (([0.95, 0.9, 1.3, 0.8], [1.2, 1.1, 1.3, 1.0]), "litert", 2),
])
def test_the_verdict_is_the_one_the_rounds_agree_on(timings, winner, count):
    timed, calls = timings_giving(*timings)
    verdict = litert_backend._verdict_that_holds(timed, "m.tflite", "whole model")
    assert verdict == winner and len(calls) == count
    # only where all three timings left the rounds disagreeing is the official default not a verdict
    assert verdict.decided == (count < 3)


def test_a_verdict_the_rounds_could_not_decide_is_timed_again_at_the_next_start(monkeypatch, tmp_path):
    pytest.importorskip("openvino")
    time_every_model(monkeypatch)
    monkeypatch.setattr(litert_backend, "THREAD_CHOICE_MAX_MACS", -1)  # no thread-count timing here
    calls = []

    def disagreeing(candidates, **kwargs):  # ``timing.timed_rounds`` on a loaded machine: either engine faster
        calls.append(sorted(candidates))
        # OpenVINO more than TIE_MARGIN faster in the median, not in three rounds of four: undecided
        return {"litert": [1.0] * 4, "openvino": [0.5, 0.8, 1.4, 0.85]}

    monkeypatch.setattr("litegpu.backends.timing.timed_rounds", disagreeing)
    options = litegpu.Options(CPU, serialization_dir=str(tmp_path), model_token="mlp")
    first = litegpu.CompiledModel.from_buffer(small_mlp(), options)
    assert set(first.plan.ops_per_engine()) == {"openvino"} and len(calls) == litert_backend.CLOSE_TIMINGS
    second = litegpu.CompiledModel.from_buffer(small_mlp(), options)
    assert set(second.plan.ops_per_engine()) == {"openvino"} and len(calls) == 2 * litert_backend.CLOSE_TIMINGS


def test_an_engine_that_could_not_be_timed_leaves_the_other_the_verdict():
    assert litert_backend._clear_verdict({"openvino": [1.0, 1.0, 1.0]}) == "openvino"
    assert litert_backend._clear_verdict({"litert": [1.0, 1.0, 1.0]}) == "litert"


def _litert_model_from_file(monkeypatch, tmp_path, threads=2):
    """small_mlp() written to a file and run on the official interpreter with ``threads`` threads, and the
    interpreter litegpu built for it (after a first run, which opens the straight path to it)."""
    monkeypatch.setattr(litert_backend, "THREAD_CHOICE_MAX_MACS", -1)  # the count asked for, not a timed one
    path = tmp_path / "mlp.tflite"
    path.write_bytes(small_mlp())
    options = litegpu.Options(CPU, cpu_options=litegpu.CpuOptions(num_threads=threads, engines=("litert",)),
                              serialization_dir=str(tmp_path / "cache"))
    model = litegpu.CompiledModel.from_file(str(path), options)
    x = np.random.default_rng(5).normal(size=(1, 16)).astype(np.float32)
    model.run([x])
    return path, model, model._straight[0].run.__self__.shared, x


def test_xnnpack_gets_the_users_file_with_the_official_options(monkeypatch, tmp_path):
    """Issue 38: litegpu's interpreter is the one a user would build: the file itself (not a rewritten copy), the
    thread count asked for, the default delegate over the same ops and tensors."""
    path, _, shared, _ = _litert_model_from_file(monkeypatch, tmp_path)
    assert shared.file is not None and Path(shared.file).samefile(path) and shared.threads == 2
    bare = litert.Interpreter(model_path=str(path), num_threads=2)
    bare.allocate_tensors()
    ops = [(d["op_name"], tuple(d["inputs"]), tuple(d["outputs"])) for d in bare._get_ops_details()]
    assert [(d["op_name"], tuple(d["inputs"]), tuple(d["outputs"])) for d in shared.interpreter._get_ops_details()] \
        == ops and any(name == "DELEGATE" for name, _, _ in ops)
    assert len(shared.interpreter.get_tensor_details()) == len(bare.get_tensor_details())


class _RecordingWrapper:
    """The interpreter's wrapper, each call of the entry points a run uses recorded with its arguments and result."""

    def __init__(self, wrapper):
        self.wrapper, self.calls = wrapper, []

    def __getattr__(self, name):
        found = getattr(self.wrapper, name)
        if name not in ("SetTensor", "Invoke", "GetTensor"):
            return found

        def recorded(*args):
            result = found(*args)
            self.calls.append((name, args, result))
            return result

        return recorded


def test_a_run_copies_each_input_in_and_each_output_out_once(monkeypatch, tmp_path):
    """Issue 38: litegpu's call does what the official loop does and no more: the caller's array itself handed to
    ``SetTensor`` (no conversion first), one ``Invoke``, one ``GetTensor`` per output returned as it came."""
    _, model, shared, x = _litert_model_from_file(monkeypatch, tmp_path)
    recorder = _RecordingWrapper(shared.wrapper)
    monkeypatch.setattr(shared, "wrapper", recorder)
    (y,) = model.run([x]).values()
    assert [name for name, _, _ in recorder.calls] == ["SetTensor", "Invoke", "GetTensor"]
    assert recorder.calls[0][1][1] is x and recorder.calls[2][2] is y and y.flags.owndata
    np.testing.assert_allclose(y, official(small_mlp(), [x])[0], rtol=1e-5, atol=1e-6)
