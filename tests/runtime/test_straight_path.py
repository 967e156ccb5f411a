"""The straight path of a call (issue 26): a signature the official interpreter runs whole takes numpy arrays
and ready host buffers straight to the engine; everything else still goes the general way, with its checks
and messages.  The general path is replaced by a recorder after the first runs, so these tests fail if the
common calls stop taking the straight path, and show which calls still take the general one."""

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert.interpreter")

import litegpu as lg  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backends"))
from test_litert import accumulator  # noqa: E402

CPU = lg.HardwareAccelerator.CPU


def on_litert(data: bytes) -> lg.CompiledModel:
    model = lg.CompiledModel.from_buffer(data, lg.Options(CPU, cpu_options=lg.CpuOptions(engines=("litert",))))
    assert set(model.plan.ops_per_engine()) == {"litert"}
    return model


def record_general_path(monkeypatch, model: lg.CompiledModel) -> list:
    """Calls of the general path from now on (it still runs)."""
    calls = []
    general = model._execute

    def recorded(*args, **kwargs):
        calls.append(args[0].key)
        return general(*args, **kwargs)

    monkeypatch.setattr(model, "_execute", recorded)
    return calls


@pytest.fixture
def two_signatures(two_sig_bytes):
    model = on_litert(two_sig_bytes)
    rng = np.random.default_rng(0)
    a, b = (rng.normal(size=(2, 3)).astype(np.float32) for _ in range(2))
    u = rng.normal(size=(4,)).astype(np.float32)
    model.run({"lhs": a, "rhs": b}, "sum")  # first runs: the backends are made, and the straight paths with them
    model.run({"u": u}, "scale")
    return model, a, b, u


def test_the_common_calls_take_the_straight_path(two_signatures, monkeypatch):
    model, a, b, u = two_signatures
    general = record_general_path(monkeypatch, model)
    total, diff = model(a, b)
    np.testing.assert_allclose(total, a + b, rtol=1e-6)
    np.testing.assert_allclose(diff, a - b, rtol=1e-6)
    np.testing.assert_allclose(model(u, signature_key="scale"), u * 3, rtol=1e-6)
    got = model.run({"lhs": a, "rhs": b}, "sum")
    assert list(got) == ["total", "diff"]
    np.testing.assert_allclose(got["total"], a + b, rtol=1e-6)
    np.testing.assert_allclose(model.run([u], 1)["p"], u * 3, rtol=1e-6)
    inputs, outputs = model.create_input_buffers(0), model.create_output_buffers(0)
    inputs[0].write(a)
    inputs[1].write(b)
    model.run_by_index(0, inputs, outputs)
    np.testing.assert_allclose(outputs[0].read(), a + b, rtol=1e-6)
    np.testing.assert_allclose(outputs[1].read(), a - b, rtol=1e-6)
    by_name = {"total": lg.TensorBuffer.create((2, 3)), "diff": lg.TensorBuffer.create((2, 3))}
    model.run_by_name("sum", {"lhs": inputs[0], "rhs": inputs[1]}, by_name)
    np.testing.assert_allclose(by_name["diff"].read(), a - b, rtol=1e-6)
    # a run's outputs fed to the next run are ready host data too
    again = model.create_output_buffers(0)
    model.run_by_index(0, outputs, again)
    np.testing.assert_allclose(again[0].read(), 2 * a, rtol=1e-5, atol=1e-6)
    assert general == []


def test_anything_else_goes_the_general_way_with_its_checks(two_signatures, monkeypatch):
    model, a, b, u = two_signatures
    general = record_general_path(monkeypatch, model)
    np.testing.assert_allclose(model(a.tolist(), b)[0], a + b, rtol=1e-6)  # a list is converted
    with pytest.raises(lg.TensorBufferError, match="float32"):
        model(a.astype(np.float64), b)
    with pytest.raises(lg.SignatureError):
        model.run({"lhs": a, "wrong": b}, "sum")
    with pytest.raises(lg.SignatureError):
        model(a, signature_key="sum")
    with pytest.raises(lg.SignatureError):
        model.run_by_name("sum", {"lhs": lg.TensorBuffer.create((2, 3))}, {})
    # buffers that wrap the caller's memory receive the results there
    total, diff = np.zeros((2, 3), np.float32), np.zeros((2, 3), np.float32)
    inputs = model.create_input_buffers(0)
    inputs[0].write(a)
    inputs[1].write(b)
    model.run_by_index(0, inputs, [lg.TensorBuffer.create_from_host_memory(total),
                                   lg.TensorBuffer.create_from_host_memory(diff)])
    np.testing.assert_allclose(total, a + b, rtol=1e-6)
    # an input a run still has to deliver (run_async's output) is waited for
    first = model.create_output_buffers(0)
    model.run_async(0, inputs, first)
    second = model.create_output_buffers(0)
    model.run_by_index(0, first, second)
    np.testing.assert_allclose(second[0].read(), 2 * a, rtol=1e-5, atol=1e-6)
    # ran the general way: the list, the run into host-memory outputs, run_async and the run that waited on it
    # (the wrong dtype and the wrong names were refused by its checks before it ran)
    assert general == ["sum"] * 4


def test_a_resize_is_seen_and_a_closed_model_refuses(add_bytes):
    model = on_litert(add_bytes)
    x, y = np.ones((1, 4), np.float32), np.full((1, 4), 2.0, np.float32)
    np.testing.assert_array_equal(model(x, y), x + y)
    np.testing.assert_array_equal(model(x, y), x + y)
    model.resize_input_tensor(0, (3, 4))
    with pytest.raises(lg.TensorBufferError):
        model(np.ones((3, 5), np.float32), y)  # only the batch is free
    wide = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(model(wide, y), wide + y)
    model.close()
    with pytest.raises(lg.ClosedError):
        model(wide, y)


def test_variables_carry_over_and_reset_on_the_straight_path():
    model = on_litert(accumulator(1.0))
    x = np.full((2, 3), 2.0, np.float32)
    model(x)
    np.testing.assert_array_equal(model(x), np.full((2, 3), 5.0))  # straight from the second run
    model.reset_all_variables()
    np.testing.assert_array_equal(model(x), np.full((2, 3), 3.0))
