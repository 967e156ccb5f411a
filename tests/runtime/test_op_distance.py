"""Each op's distance from the builtin kernels (litegpu.runtime.op_distance), as the plan's engines run the model."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import litegpu
from litegpu.errors import InvalidArgumentError, ModelExecutionError
from litegpu.ir import Quantization, Tensor
from litegpu.ir.builder import ModelBuilder, quantization
from litegpu.ir.save import write_model
from litegpu.runtime import op_distance
from litegpu.runtime.op_distance import op_distances, tensor_distance

HELDOUT = Path(__file__).resolve().parents[1] / "heldout" / "models"
BUILTIN = litegpu.Options(litegpu.HardwareAccelerator.CPU,
                          cpu_options=litegpu.CpuOptions(kernel_mode=litegpu.CpuKernelMode.BUILTIN))


def int8_model():
    """float -> QUANTIZE -> CONV_2D (int8, per-channel weights) -> ADD (int8) -> DEQUANTIZE -> float."""
    rng = np.random.default_rng(0)
    b = ModelBuilder()
    x = b.input("x", (1, 6, 6, 3))
    q = b.tensor("q", (1, 6, 6, 3), "int8", quantization=quantization(0.02, -3))
    b.op("QUANTIZE", [x], [q])
    scales = np.array([0.01, 0.02, 0.015, 0.03], np.float32)
    w = b.constant("w", rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8), quantization=quantization(scales, 0))
    bias = b.constant("bias", rng.integers(-500, 500, 4).astype(np.int32),
                      quantization=quantization(np.float32(0.02) * scales, 0))
    c = b.tensor("c", (1, 6, 6, 4), "int8", quantization=quantization(0.05, 2))
    b.op("CONV_2D", [q, w, bias], [c], padding="SAME", stride_h=1, stride_w=1, fused_activation_function="RELU")
    s = b.tensor("s", (1, 6, 6, 4), "int8", quantization=quantization(0.09, -5))
    b.op("ADD", [c, c], [s])
    y = b.tensor("y", (1, 6, 6, 4))
    b.op("DEQUANTIZE", [s], [y])
    b.output(y)
    return b.build()


def random_inputs(model, key):
    rng = np.random.default_rng(0)
    return {n: rng.uniform(-1, 1, d["shape"]).astype(d["dtype"]) if np.dtype(d["dtype"]).kind == "f"
            else rng.integers(-128, 128, d["shape"]).astype(d["dtype"])
            for n, d in model.get_input_tensor_details(key).items()}


def compiled(source, options=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if isinstance(source, Path):
            return litegpu.CompiledModel.from_file(str(source), options=options)
        return litegpu.CompiledModel.from_model(source, options=options)


@pytest.mark.parametrize("against", ["builtin", "official"])
def test_the_exact_integer_kernels_are_at_distance_zero_op_by_op(tmp_path, against):
    if against == "official":
        pytest.importorskip("ai_edge_litert.interpreter")
    path = tmp_path / "int8.tflite"
    write_model(int8_model(), path)
    model = compiled(path, BUILTIN)
    assert model.plan.engine_summary() == "4 ops on XLA in 1 partition"
    found = op_distances(model, random_inputs(model, 0), compare_with=against)
    assert sorted(found.ops) == [(0, i) for i in range(4)] and found.note is None
    integer = {k: (d.distance, d.units) for k, d in found.ops.items() if k != (0, 3)}
    assert integer == {(0, 0): (0.0, 0), (0, 1): (0.0, 0), (0, 2): (0.0, 0)}
    # the float DEQUANTIZE: an ulp from the official kernel (which scales in double) at most
    assert found.ops[(0, 3)].distance < 1e-6 and found.ops[(0, 3)].units is None
    values = found.node_data().to_dict()["main"]["results"]
    assert [values[str(i)]["value"] for i in range(3)] == [0.0] * 3


def test_xnnpacks_int8_drift_grows_op_by_op_to_the_whole_models():
    """The official interpreter's XNNPACK runs the int8 model (the fast plan): its first op is a unit or so from
    the builtin kernels, the drift grows through the layers, and the last op's distance is what the whole model
    shows when XNNPACK's outputs are compared with the builtin kernels' outputs alone."""
    interpreter = pytest.importorskip("ai_edge_litert.interpreter")
    path = HELDOUT / "mobilenet_v2_035_96_int8.tflite"
    model = compiled(path)
    if set(model.plan.ops_per_engine()) != {"litert"}:
        pytest.skip(f"the fast plan is not the official interpreter's here: {model.plan.engine_summary()}")
    key = next(iter(model.get_signature_list()))
    inputs = random_inputs(model, key)
    found = op_distances(model, inputs, compare_with="official")
    ops = [found.ops[(0, i)] for i in range(len(model.model.subgraphs[0].operators))]
    assert ops[0].units <= 2 and max(d.units for d in ops) > 4 * max(ops[0].units, 1)
    builtin_kernels = interpreter.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    builtin = interpreter.Interpreter(model_path=str(path), experimental_op_resolver_type=builtin_kernels)
    xnnpack = interpreter.Interpreter(model_path=str(path), num_threads=2)
    want, got = (list(it.get_signature_runner(key)(**inputs).values())[0] for it in (builtin, xnnpack))
    last = model.model.subgraphs[0].outputs[0]
    assert ops[-1].tensor == model.model.subgraphs[0].tensors[last].name
    assert ops[-1].units == np.abs(got.astype(int) - want.astype(int)).max()


def test_a_plan_split_between_engines_is_probed_partition_by_partition(shared_models, without_litert):
    path = shared_models / "mediapipe_selfie_segmentation.tflite"
    model = compiled(path)
    assert model.plan.ops_per_engine() == {"openvino": 242, "xla": 4}
    found = op_distances(model, random_inputs(model, 0))
    sg = model.model.subgraphs[0]
    weights = {op.index for op in sg.operators if op.opcode_name == "DEQUANTIZE" and sg.tensors[op.inputs[0]].data
               is not None}
    assert {i for _, i in found.ops} == {op.index for op in sg.operators} - weights
    assert max(d.distance for d in found.ops.values()) < 1e-3 and found.note is None


def test_an_engine_that_cannot_return_the_intermediates_compares_the_partitions_outputs(tmp_path, monkeypatch):
    path = tmp_path / "int8.tflite"
    write_model(int8_model(), path)
    model = compiled(path, BUILTIN)
    original = op_distance._run_probe

    def without_intermediates(*args, every):
        if every:
            raise ModelExecutionError("no intermediate tensors here")
        return original(*args, every=every)

    monkeypatch.setattr(op_distance, "_run_probe", without_intermediates)
    found = op_distances(model, random_inputs(model, 0))
    assert list(found.ops) == [(0, 3)] and "no intermediate tensors here" in found.note


def tensor(dtype="float32", q=None):
    return Tensor(index=0, name="t", shape=(4,), dtype=dtype, quantization=q)


@pytest.mark.parametrize("got, want, t, expected", [
    ([1, 2, 3, 4.5], [1, 2, 3, 4], tensor(), (0.125, None)),
    ([0, 0, 1e-9, 0], [0, 0, 0, 0], tensor(), (1e-9, None)),
    ([1, np.nan, 3, np.inf], [1, np.nan, 3, np.inf], tensor(), (0.0, None)),
    ([1, 2, 3, 4], [1, np.nan, 3, 4], tensor(), (1.0, None)),
    ([1, 2, 3], [1, 2, 3, 4], tensor(), (1.0, None)),
    ([10, 12, -3, 5], [10, 10, -3, 5], tensor("int8", Quantization(scale=(0.1,), zero_point=(2,))), (0.25, 2)),
    ([1, 2, 3, 4], [1, 2, 3, 5], tensor("int32"), (0.25, None)),
    ([True, False, True, True], [True, True, True, True], tensor("bool"), (0.25, None)),
])
def test_tensor_distance(got, want, t, expected):
    dtype = {"float32": np.float32, "int8": np.int8, "int32": np.int32, "bool": np.bool_}[t.dtype]
    distance, units = tensor_distance(np.asarray(got, dtype), np.asarray(want, dtype), t)
    assert (pytest.approx(distance), units) == expected


def test_bad_requests_say_what_is_wrong(tmp_path):
    path = tmp_path / "int8.circle"
    write_model(int8_model(), path, file_format="circle")
    model = compiled(path, BUILTIN)
    inputs = random_inputs(model, 0)
    with pytest.raises(InvalidArgumentError, match="compare_with='xnnpack'"):
        op_distances(model, inputs, compare_with="xnnpack")
    with pytest.raises(InvalidArgumentError, match="needs inputs x"):
        op_distances(model, {})
    with pytest.raises(InvalidArgumentError, match="'x' is float64, the model takes float32"):
        op_distances(model, {"x": inputs["x"].astype(np.float64)})
    with pytest.raises(InvalidArgumentError, match="no signature 'nope'"):
        op_distances(model, inputs, signature="nope")
    pytest.importorskip("ai_edge_litert.interpreter")
    assert op_distances(model, inputs, compare_with="official").ops[(0, 2)].units == 0  # through its .tflite form
    b = ModelBuilder()
    x = b.input("x", (2, 4))
    y = b.tensor("y", (2, 4))
    b.op("RMS_NORM", [x, b.constant("gamma", np.ones(4, np.float32))], [y])
    b.output(y)
    write_model(b.build(), path, file_format="circle")
    circle_only = compiled(path, BUILTIN)
    with pytest.raises(InvalidArgumentError, match="reads .tflite only, and this model cannot be written as .tflite"):
        op_distances(circle_only, random_inputs(circle_only, 0), compare_with="official")


def test_a_quantized_model_on_the_gpu_is_probed_as_its_float_view(tmp_path):
    """The GPU runs a quantized model as its float view (ops renumbered, fake quantization after each): its
    integer tensors are compared in units, with the CPU standing in for the GPU."""
    from oracle import load_bench_module

    path = tmp_path / "int8.tflite"
    write_model(int8_model(), path)
    options = litegpu.Options(litegpu.HardwareAccelerator.GPU | litegpu.HardwareAccelerator.CPU,
                              gpu_options=litegpu.GpuOptions(engine="xla"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = litegpu.CompiledModel.from_file(str(path), options=options,
                                                environment=load_bench_module("bench_gpu").environment("cpu"))
    assert model.plan.target.value == "xla_gpu"
    executed, _, _ = op_distance._executed(model)
    assert len(executed.subgraphs[0].operators) > len(model.model.subgraphs[0].operators)  # the float view
    found = op_distances(model, random_inputs(model, 0))
    assert sorted(found.ops) == [(0, i) for i in range(4)]
    assert found.ops[(0, 0)].units == 0  # QUANTIZE: the same rounding
    assert all(d.units <= 2 for k, d in found.ops.items() if k != (0, 3)) and found.ops[(0, 3)].distance < 0.05
