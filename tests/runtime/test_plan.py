"""The static delegation plan (litegpu.compile.plan) as seen through Model.plan and CompiledModel."""

import warnings

import numpy as np
import pytest

import litegpu as lg
from litegpu import HardwareAccelerator as HA
from litegpu.compile import plan
from litegpu.ir.builder import ModelBuilder
from litegpu.ops import Op, Target, register
from litegpu.ops.registry import unregister_custom


@pytest.fixture
def cpu_only_op():
    """A custom op that XLA can run on the CPU but not on the GPU (its output shape depends on data)."""
    @register("TestCpuOnlyIdentity", custom=True)
    class CpuOnly(Op):
        data_dependent_shape = True

        def compute(self, ctx, x):
            return x

    yield "TestCpuOnlyIdentity"
    unregister_custom("TestCpuOnlyIdentity")


def _model(custom=None):
    b = ModelBuilder()
    x = b.input("x", (4,))
    h = b.tensor("h", (4,))
    y = b.tensor("y", (4,))
    b.op("ADD", [x, x], [h])
    if custom:
        b.op(custom, [h], [y], custom_options=b"")
    else:
        b.op("MUL", [h, h], [y])
    b.output(y)
    return b.build()


def test_a_fully_supported_model_runs_whole_on_the_gpu():
    p = plan(_model(), HA.GPU | HA.CPU)
    assert (p.accelerator, p.target, p.fully_accelerated) == ("GPU", Target.XLA_GPU, True)
    assert p.partitions[0].op_indices == (0, 1)


def test_cpu_fallback_warns_with_op_index_reason_and_summary(cpu_only_op):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        p = plan(_model(cpu_only_op), HA.GPU | HA.CPU)
    # split since the delegation issue: ADD stays on the GPU, only the refused op falls back
    assert (p.accelerator, p.target, p.fully_accelerated) == ("GPU", Target.XLA_GPU, False)
    assert [(q.device, q.target, q.op_indices) for q in p.partitions] == [
        ("GPU", Target.XLA_GPU, (0,)), ("CPU", Target.XLA_CPU, (1,))]
    assert [(u.opcode, u.op_index) for u in p.unsupported] == [(cpu_only_op, 1)]
    messages = [str(w.message) for w in caught]
    assert messages == [f"op {cpu_only_op} (#1) cannot be handled by the GPU: output shape depends on data",
                        "1 operations will run on the GPU, and the remaining 1 on the CPU (1 on XLA)"]


def test_gpu_alone_with_an_unsupported_op_is_an_error(cpu_only_op):
    with pytest.raises(lg.UnsupportedOpError, match="add HardwareAccelerator.CPU"):
        plan(_model(cpu_only_op), HA.GPU)


def test_model_plan_needs_no_device_and_compiled_model_runs_the_fallback(cpu_only_op):
    from litegpu.ir.save import to_bytes

    data = to_bytes(_model(cpu_only_op))
    assert lg.Model.from_buffer(data).plan(HA.GPU | HA.CPU).ops_on("CPU") == 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = lg.CompiledModel.from_buffer(data, hardware_accel=HA.GPU | HA.CPU)
    assert not model.is_fully_accelerated()
    np.testing.assert_array_equal(model(np.arange(4, dtype=np.float32)), 2 * np.arange(4))


def test_op_without_xla_lowering_runs_on_the_reference_backend():
    @register("TestNumpyOnly", custom=True)
    class NumpyOnly(Op):
        xla = False

        def reference(self, ctx, x):
            return x * 10

    try:
        from litegpu.ir.save import to_bytes

        data = to_bytes(_model("TestNumpyOnly"))
        with pytest.warns(UserWarning, match="reference backend"):
            model = lg.CompiledModel.from_buffer(data)
        # the fast CPU path sends only the op XLA cannot lower to numpy; the exact path keeps the model whole
        assert model.plan.ops_per_engine() == {"xla": 1, "reference": 1}
        np.testing.assert_array_equal(model(np.ones(4, np.float32)), 20)
        exact = lg.Options(lg.HardwareAccelerator.CPU, cpu_options=lg.CpuOptions(kernel_mode=lg.CpuKernelMode.BUILTIN))
        with pytest.warns(UserWarning, match="reference backend"):
            model = lg.CompiledModel.from_buffer(data, options=exact)
        assert model.plan.target is Target.REFERENCE
        np.testing.assert_array_equal(model(np.ones(4, np.float32)), 20)
    finally:
        unregister_custom("TestNumpyOnly")


# ---- split plans: GPU partitions run on the XLA CPU platform here ------------------------------

def _detector():
    """The detector model of tests/compile/test_plan_partitions.py (one definition for both)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "compile" / "test_plan_partitions.py"
    spec = importlib.util.spec_from_file_location("_plan_partitions_models", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.detector_model(), module.detector_image


class _CpuPretendingGpu(lg.Environment):
    """An environment whose "gpu" is the XLA CPU device, so the split path of CompiledModel runs here."""

    @staticmethod
    def platforms():
        return {"cpu", "gpu"}

    def device(self, platform):
        return super().device("cpu")


def _official(model, inputs):
    from oracle import run_official

    from litegpu.ir.save import to_bytes

    return run_official(to_bytes(model), inputs)


def _assert_matches(got, expected):
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        g = np.asarray(g)
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed", [0, 1])
def test_detector_runs_split_and_matches_the_official_interpreter(seed):
    from litegpu.runtime.partitioned import PartitionedModel

    model, image = _detector()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = plan(model, HA.GPU | HA.CPU)
    runner = PartitionedModel(model, p, platforms={HA.GPU: "cpu"})
    x = image(seed)
    got = runner.run([x])
    _assert_matches(got, _official(model, [x]))
    sig = runner.signature(0)
    # the XLA partitions were traced with the GPU's rules; the NMS/WHERE island ran with numpy
    assert [getattr(u.executable, "backend", None) and u.executable.backend.target for u in sig.units] == [
        Target.XLA_GPU, None, Target.XLA_GPU]
    # image in; boxes, scores, mask to the host; selected back to the device (boxes already there)
    assert sig.transfers == 5


def test_compiled_model_runs_a_split_plan_through_its_buffers():
    from litegpu.ir.save import to_bytes

    model, image = _detector()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cm = lg.CompiledModel.from_buffer(to_bytes(model), hardware_accel=HA.GPU | HA.CPU,
                                          environment=_CpuPretendingGpu())
    assert [str(w.message) for w in caught][-1] == ("7 operations will run on the GPU, and the remaining 2 on the CPU "
                                                          "(2 on the numpy reference)")
    assert cm.plan.is_split and cm.accelerator == "GPU" and not cm.is_fully_accelerated()
    x = image(2)
    inputs, outputs = cm.create_input_buffers(0), cm.create_output_buffers(0)
    inputs[0].write(x)
    expected = _official(model, [x])
    cm.run_by_index(0, inputs, outputs)
    _assert_matches([outputs[0].read(), outputs[1].read()], expected[:2])
    _assert_matches(list(cm.run([x]).values()), expected)  # WHERE's row count is data-dependent
    cm.reset_all_variables()
    cm.close()


def test_gpu_cpu_without_a_gpu_runs_all_on_cpu_with_one_warning(without_litert):
    from litegpu.ir.save import to_bytes

    if "gpu" in lg.Environment.platforms():
        pytest.skip("this machine has a GPU")
    model, image = _detector()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cm = lg.CompiledModel.from_buffer(to_bytes(model), hardware_accel=HA.GPU | HA.CPU)
    (only,) = [str(w.message) for w in caught]
    assert "JAX sees no GPU" in only and "runs on the CPU" in only
    # On the CPU: XLA, and numpy for the data-dependent WHERE (the convolutions are too small for OpenVINO
    # to pay for two partition edges).
    assert cm.plan.accelerator == "CPU" and cm.plan.ops_on("GPU") == 0
    assert set(cm.plan.ops_per_engine()) == {"xla", "reference"}
    x = image(3)
    _assert_matches(list(cm.run([x]).values()), _official(model, [x]))


def test_a_weight_dequantize_runs_beside_the_ops_that_read_it():
    """A DEQUANTIZE of a float16 weight joins its readers' engine (else its output would cross a partition edge
    on every run); one read on two engines stays where it was."""
    import sys

    from litegpu.ir import read_model
    from litegpu.ir.save import to_bytes

    plan_module = sys.modules["litegpu.compile.plan"]
    b = ModelBuilder()
    x = b.input("x", (1, 4))
    w16 = b.constant("w16", np.ones((4, 4), np.float16))
    w = b.tensor("w", (4, 4))
    y, z = b.tensor("y", (1, 4)), b.tensor("z", (1, 4))
    b.op("DEQUANTIZE", [w16], [w])
    b.op("FULLY_CONNECTED", [x, w, -1], [y])
    b.op("FULLY_CONNECTED", [y, w, -1], [z])
    b.output(z)
    sg = read_model(to_bytes(b.build())).subgraphs[0]
    side = {0: "openvino", 1: "xla", 2: "xla"}
    plan_module._weights_follow_their_users(sg, (0, 1, 2), side)
    assert side == {0: "xla", 1: "xla", 2: "xla"}
    side = {0: "openvino", 1: "xla", 2: "openvino"}
    plan_module._weights_follow_their_users(sg, (0, 1, 2), side)
    assert side[0] == "openvino"


def test_host_values_cross_to_a_partition_in_its_call_not_one_device_put_each(monkeypatch):
    """Issue 25: a partition's host inputs go to its program as numpy, which the call copies to the device in
    one batched transfer; no ``device_put`` per tensor (a crossing each, 150-250 us on an H200)."""
    import jax

    from litegpu.runtime.partitioned import PartitionedModel

    model, image = _detector()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = plan(model, HA.GPU | HA.CPU)
    runner = PartitionedModel(model, p, platforms={HA.GPU: "cpu"})
    x = image(0)
    runner.run([x])  # compiles
    calls = []
    original = jax.device_put
    monkeypatch.setattr(jax, "device_put", lambda *a, **k: calls.append(a) or original(*a, **k))
    got = runner.run([x])
    _assert_matches(got, _official(model, [x]))
    assert calls == [] and runner.signature(0).transfers == 5
