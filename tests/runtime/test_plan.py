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
    assert (p.accelerator, p.target, p.fully_accelerated) == ("CPU", Target.XLA_CPU, False)
    assert [(u.opcode, u.op_index) for u in p.unsupported] == [(cpu_only_op, 1)]
    (message,) = [str(w.message) for w in caught]
    assert f"{cpu_only_op} (#1): output shape depends on data" in message
    assert "0 operations will run on the GPU, and the remaining 2 on the CPU" in message


def test_gpu_alone_with_an_unsupported_op_is_an_error(cpu_only_op):
    with pytest.raises(lg.UnsupportedOpError, match="add HardwareAccelerator.CPU"):
        plan(_model(cpu_only_op), HA.GPU)


def test_model_plan_needs_no_device_and_compiled_model_runs_the_fallback(cpu_only_op):
    from litegpu.ir.save import to_bytes

    data = to_bytes(_model(cpu_only_op))
    assert lg.Model.from_buffer(data).plan(HA.GPU | HA.CPU).accelerator == "CPU"
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
        assert model.plan.target is Target.REFERENCE
        np.testing.assert_array_equal(model(np.ones(4, np.float32)), 20)
    finally:
        unregister_custom("TestNumpyOnly")
