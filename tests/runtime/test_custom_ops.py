"""Custom ops registered from Python (litegpu.register_custom_op): numpy on the CPU, jax inside XLA partitions."""

import warnings

import numpy as np
import pytest

import litegpu as lg
from litegpu import HardwareAccelerator as HA
from litegpu.compile import plan
from litegpu.ir.builder import ModelBuilder
from litegpu.ir.save import to_bytes
from litegpu.ops import Target

NAME = "TestPyScaleShift"


def flex(options: dict) -> bytes:
    from flatbuffers import flexbuffers

    return bytes(flexbuffers.Dumps(options))


def custom_model(options: bytes | None = None, out_shape=(2, 3), shape_signature=None):
    """y = custom(x + x) * x"""
    b = ModelBuilder()
    x = b.input("x", (2, 3))
    h = b.tensor("h", (2, 3))
    c = b.tensor("c", out_shape, shape_signature=shape_signature)
    y = b.tensor("y", (2, 3))
    b.op("ADD", [x, x], [h])
    b.op(NAME, [h], [c], custom_options=options if options is not None else b"")
    b.op("MUL", [c, x], [y])
    b.output(y)
    return b.build()


@pytest.fixture
def calls():
    record = {"numpy": 0, "jax": 0, "options": []}
    yield record
    lg.unregister_custom_op(NAME)


def numpy_fn(record):
    def fn(x, options):
        record["numpy"] += 1
        record["options"].append(options)
        scale, shift = (options["scale"], options["shift"]) if isinstance(options, dict) else (2.0, 1.0)
        return np.asarray(x) * scale + shift
    return fn


def jax_fn(record):
    def fn(x, options):
        import jax.numpy as jnp

        record["jax"] += 1
        return jnp.multiply(x, options["scale"]) + options["shift"]
    return fn


def expected(x, scale=2.0, shift=1.0):
    return ((x + x) * scale + shift) * x


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


X = np.arange(6, dtype=np.float32).reshape(2, 3) - 2


@pytest.mark.parametrize("options, scale, shift", [
    (flex({"scale": 3.0, "shift": -1}), 3.0, -1.0),      # FlexBuffer map -> dict
    (b"\x01\x02\x03", 2.0, 1.0),                          # anything else -> the raw bytes
])
def test_numpy_custom_op_runs_in_a_model_on_the_cpu(calls, options, scale, shift):
    lg.register_custom_op(NAME, numpy_fn(calls))
    data = to_bytes(custom_model(options))
    model = lg.CompiledModel.from_buffer(data, hardware_accel=HA.CPU)
    assert model.plan.target is Target.XLA_CPU  # static output shapes: a host callback inside the XLA program
    np.testing.assert_allclose(model(X), expected(X, scale, shift), rtol=1e-6)
    seen = calls["options"][-1]
    assert seen == ({"scale": 3.0, "shift": -1} if isinstance(seen, dict) else b"\x01\x02\x03")
    interp = lg.Interpreter(model_content=data)
    interp.allocate_tensors()
    interp.set_tensor(interp.get_input_details()[0]["index"], X)
    interp.invoke()
    np.testing.assert_allclose(interp.get_tensor(interp.get_output_details()[0]["index"]), expected(X, scale, shift),
                               rtol=1e-6)


def test_without_jax_fn_a_gpu_plan_sends_the_custom_op_to_the_cpu(calls):
    lg.register_custom_op(NAME, numpy_fn(calls))
    model = custom_model(flex({"scale": 2.0, "shift": 1.0}))
    p = _quiet(plan, model, HA.GPU | HA.CPU)
    assert [(q.device, q.target, q.op_indices) for q in p.partitions] == [
        ("GPU", Target.XLA_GPU, (0,)), ("CPU", Target.XLA_CPU, (1,)), ("GPU", Target.XLA_GPU, (2,))]
    assert "without a GPU lowering" in p.unsupported[0].reason
    from litegpu.runtime.partitioned import PartitionedModel

    got = PartitionedModel(model, p, platforms={HA.GPU: "cpu"}).run([X])
    np.testing.assert_allclose(np.asarray(got[0]), expected(X), rtol=1e-6)
    assert calls["numpy"] >= 1


def test_with_jax_fn_the_custom_op_is_lowered_into_the_gpu_partition(calls):
    lg.register_custom_op(NAME, numpy_fn(calls), jax_fn=jax_fn(calls))
    model = custom_model(flex({"scale": 0.5, "shift": 4.0}))
    p = _quiet(plan, model, HA.GPU | HA.CPU)
    (only,) = p.partitions
    assert (only.device, only.op_indices, p.fully_accelerated) == ("GPU", (0, 1, 2), True)

    class CpuPretendingGpu(lg.Environment):  # the GPU partition is traced for the GPU, executed by XLA CPU here
        platforms = staticmethod(lambda: {"cpu", "gpu"})

        def device(self, platform):
            return super().device("cpu")

    cm = lg.CompiledModel.from_buffer(to_bytes(model), hardware_accel=HA.GPU | HA.CPU,
                                      environment=CpuPretendingGpu())
    assert cm.is_fully_accelerated() and cm.plan.target is Target.XLA_GPU
    np.testing.assert_allclose(cm(X), expected(X, 0.5, 4.0), rtol=1e-6)
    assert calls["jax"] == 1 and calls["numpy"] == 0  # traced once, never called back on the host


def test_dynamic_outputs_need_a_shape_fn_to_run_inside_xla(calls):
    lg.register_custom_op(NAME, numpy_fn(calls))
    model = custom_model(flex({"scale": 2.0, "shift": 1.0}), out_shape=(2, 3), shape_signature=(-1, 3))
    assert _quiet(plan, model, HA.CPU, cpu_kernels="builtin").target is Target.REFERENCE
    assert "reference" in _quiet(plan, model, HA.CPU).ops_per_engine()  # the fast path: only that op in numpy
    lg.register_custom_op(NAME, numpy_fn(calls), shape_fn=lambda shape: shape)
    cpu = _quiet(plan, model, HA.CPU)
    assert cpu.target is Target.XLA_CPU
    got = _quiet(lg.CompiledModel.from_buffer, to_bytes(model), hardware_accel=HA.CPU)(X)
    np.testing.assert_allclose(got, expected(X), rtol=1e-6)


def test_registration_checks_its_arguments_and_protects_litegpu_custom_ops(calls):
    with pytest.raises(lg.InvalidArgumentError, match="implemented by litegpu"):
        lg.register_custom_op("TFLite_Detection_PostProcess", lambda *a: a[0])
    with pytest.raises(lg.InvalidArgumentError, match="jax_fn must be callable"):
        lg.register_custom_op(NAME, lambda x: x, jax_fn=3)
    with pytest.raises(lg.InvalidArgumentError, match="non-empty string"):
        lg.register_custom_op("", lambda x: x)
    first = lg.register_custom_op(NAME, lambda x: x)
    second = lg.register_custom_op(NAME, lambda x: x + 1)  # a Python op may be replaced
    assert first is not second
    model = lg.CompiledModel.from_buffer(to_bytes(custom_model()), hardware_accel=HA.CPU)
    np.testing.assert_allclose(model(X), (X + X + 1) * X)
