"""XlaBackend: device arrays out, one compile per shape, precision policy, shared state."""

import numpy as np
import pytest

from litegpu.backends.xla.backend import XlaBackend
from litegpu.backends.xla.state import XlaState
from litegpu.backends.xla.device import device_for
from litegpu.errors import InvalidArgumentError, ModelExecutionError
from litegpu.ir.builder import ModelBuilder

jax = pytest.importorskip("jax")


def _scale_model(n=300):
    """y = x * w with w large enough to be a device parameter; x's first dim is -1."""
    b = ModelBuilder()
    x = b.input("x", (1, n), shape_signature=(-1, n))
    w = b.constant("w", np.linspace(0.1, 1.0, n, dtype=np.float32).reshape(1, n) * 1.001)
    y = b.tensor("y", (1, n))
    b.op("MUL", [x, w], [y])
    b.output(y)
    return b.build()


def test_run_returns_device_arrays_without_waiting():
    backend = XlaBackend(_scale_model())
    (y,) = backend.run([np.ones((1, 300), np.float32)])
    assert isinstance(y, jax.Array) and y.dtype == np.float32
    (z,) = backend.run([y])  # a device array goes back in as is
    np.testing.assert_allclose(np.asarray(z), np.asarray(y) * np.asarray(y), rtol=1e-6)


def test_one_compile_per_input_shape():
    backend = XlaBackend(_scale_model())
    for batch in (1, 2, 1, 2, 4):
        backend.run([np.ones((batch, 300), np.float32)])
    assert len(backend._by_shape) == 3  # one compiled executable per input shape
    assert len(backend.compiled_shapes) == 3


def test_output_shapes_by_tracing_only():
    backend = XlaBackend(_scale_model())
    assert backend.output_shapes([((5, 300), np.float32)]) == [((5, 300), np.dtype(np.float32))]
    assert backend._program._cache_size() == 0
    with pytest.raises(ModelExecutionError, match="MUL|cannot take inputs"):
        backend.output_shapes([((5, 7), np.float32)])


@pytest.mark.parametrize("precision,param_dtype", [("fp32", "float32"), ("fp16", "float16"),
                                                   ("fp16_fp32_accum", "float16")])
def test_precision_policy_casts_inside_and_returns_float32(precision, param_dtype):
    backend = XlaBackend(_scale_model(), precision=precision)
    assert {str(p.dtype) for p in backend.params.values()} == {param_dtype}
    x = np.full((1, 300), 1.0001, np.float32)
    (y,) = backend.run([x])
    assert y.dtype == np.float32
    exact = x * np.linspace(0.1, 1.0, 300, dtype=np.float32) * np.float32(1.001)
    err = np.abs(np.asarray(y) - exact).max()
    assert (err < 1e-6) if precision == "fp32" else (1e-6 < err < 1e-2)


def test_unknown_precision_is_refused():
    with pytest.raises(InvalidArgumentError, match="fp8"):
        XlaBackend(_scale_model(), precision="fp8")


def test_signatures_share_state():
    model = _scale_model()
    state = XlaState(model, device_for("cpu"))
    a, b = XlaBackend(model, state=state), XlaBackend(model, state=state)
    assert a.params is b.params
    a.variables = {"k": 1}
    assert b.variables == {"k": 1}
    b.reset_variables()
    assert a.variables == {}


def test_builtin_order_programs_of_small_models_use_the_fusion_emitters(monkeypatch):
    """The builtin kernels' depth-ordered sums are loops that the classic CPU emitters run 3.6-6.8x slower
    (BENCHMARKS.md); big models keep the classic emitters for their compile memory, as the fast path does."""
    from litegpu.backends.xla import backend as xla_backend

    model = _scale_model()
    cpu = device_for("cpu")
    fast = XlaBackend(model, state=XlaState(model, cpu))
    builtin = XlaBackend(model, state=XlaState(model, cpu, official_float_order=True))
    assert fast.compiler_options == xla_backend.CPU_COMPILER_OPTIONS
    assert builtin.compiler_options == {}
    monkeypatch.setattr(xla_backend, "BUILTIN_ORDER_FUSION_EMITTERS_MAX_BYTES", 100)  # the model's 1200 bytes pass it
    assert XlaBackend(model, state=XlaState(model, cpu, official_float_order=True)).compiler_options == \
        xla_backend.CPU_COMPILER_OPTIONS


def test_gpu_programs_run_their_loops_inside_command_buffers_unless_switched_off(monkeypatch):
    """WHILE and CONDITIONAL among the command-buffer types on the GPU (one launch a decode chunk, not one a layer);
    ``$LITEGPU_GPU_LOOP_BUFFERS=0`` or a choice of types in ``$XLA_FLAGS`` leaves XLA's defaults."""
    from litegpu.backends.xla.backend import LOOP_BUFFERS_ENV, gpu_compiler_options

    monkeypatch.delenv(LOOP_BUFFERS_ENV, raising=False)
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/nowhere")
    types = gpu_compiler_options()["xla_gpu_enable_command_buffer"].split(",")
    assert {"WHILE", "CONDITIONAL", "FUSION"} <= set(types)
    assert gpu_compiler_options()["xla_gpu_dot_merger_threshold_mb"] == 0
    monkeypatch.setenv(LOOP_BUFFERS_ENV, "0")
    assert "xla_gpu_enable_command_buffer" not in gpu_compiler_options()
    monkeypatch.delenv(LOOP_BUFFERS_ENV)
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_enable_command_buffer=FUSION")
    assert "xla_gpu_enable_command_buffer" not in gpu_compiler_options()
