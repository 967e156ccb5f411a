"""The deferred engine choice (runtime/engine_choice.py): a model whose engine is not known without timing starts on
the official interpreter, and the engines are timed once its calls have taken as long as the timing would."""

import threading
import time

import numpy as np
import pytest

import litegpu
from litegpu.backends import litert as litert_backend
from litegpu.backends import openvino as openvino_backend
from litegpu.compile import choices
from litegpu.errors import InvalidArgumentError
from litegpu.ir.builder import ModelBuilder
from litegpu.ir.save import to_bytes
from litegpu.runtime import engine_choice

pytest.importorskip("openvino")
pytest.importorskip("ai_edge_litert.interpreter")

CALLS_BEFORE_TIMING = 4


def dense_tanh(seed=1):
    """x -> FULLY_CONNECTED -> TANH -> FULLY_CONNECTED, float: both engines run it whole."""
    rng = np.random.default_rng(seed)
    b = ModelBuilder()
    x = b.input("x", (2, 8))
    h, t, y = b.tensor("h", (2, 24)), b.tensor("t", (2, 24)), b.tensor("y", (2, 3))
    b.op("FULLY_CONNECTED", [x, b.constant("w1", rng.normal(size=(24, 8)).astype(np.float32)), -1], [h])
    b.op("TANH", [h], [t])
    b.op("FULLY_CONNECTED", [t, b.constant("w2", rng.normal(size=(3, 24)).astype(np.float32)), -1], [y])
    b.output(y)
    return to_bytes(b.build())


@pytest.fixture
def timed(monkeypatch):
    """The model past the rules that know its engine without timing; the deferred timing due at the
    ``CALLS_BEFORE_TIMING``-th call (no fixed cost, the rounds 2 x (CALLS_BEFORE_TIMING / 2) calls); every engine
    timing recorded, the winner ``timed.winner`` (OpenVINO unless set), each timing taking ``timed.seconds``."""

    class Timings(list):
        winner, seconds = "openvino", 0.0

    calls = Timings()

    def timed_rounds(candidates, **kwargs):
        calls.append(sorted(candidates))
        time.sleep(calls.seconds)
        return {name: [1.0 if name == calls.winner else 2.0] * 6 for name in candidates}

    monkeypatch.setattr(choices, "OBVIOUS_MAX_MACS", -1)
    monkeypatch.setattr(litert_backend, "THREAD_CHOICE_MAX_MACS", -1)
    monkeypatch.setattr("litegpu.backends.timing.timed_rounds", timed_rounds)
    monkeypatch.setattr(engine_choice, "OPENVINO_START_S", 0.0)
    monkeypatch.setattr(engine_choice, "CONVERT_S_PER_GMAC", 0.0)
    monkeypatch.setattr(engine_choice, "TIMING_ROUNDS_S", 0.0)
    monkeypatch.setattr(engine_choice, "MIN_TIMED_CALLS", CALLS_BEFORE_TIMING // 2)
    return calls


@pytest.fixture
def conversions(monkeypatch):
    """Every time OpenVINO converts or compiles the model (asked which ops it converts, or compiling them)."""
    calls = []
    for method in ("unsupported", "compile"):
        real = getattr(openvino_backend.OpenVinoEngine, method)

        def asked(self, *args, _real=real, _method=method, **kwargs):
            calls.append(_method)
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(openvino_backend.OpenVinoEngine, method, asked)
    return calls


def x_of(seed=0):
    return np.random.default_rng(seed).normal(size=(2, 8)).astype(np.float32)


def test_the_first_start_times_nothing_and_the_timing_comes_once_after_its_budget(timed, conversions):
    model = litegpu.CompiledModel.from_buffer(dense_tanh())
    assert model.plan.ops_per_engine() == {"litert": 3} and not model.engine_choice_settled
    assert "until the engines are timed" in model.plan.choice
    for _ in range(CALLS_BEFORE_TIMING - 1):
        model(x_of())
    assert timed == [] and conversions == []  # no OpenVINO conversion, no timing: the official runtime's start
    model(x_of())  # the call that reaches the budget: timed after it
    assert len(timed) == 1 and model.engine_choice_settled
    assert model.plan.ops_per_engine() == {"openvino": 3}
    assert model.plan.choice == f"timed after {CALLS_BEFORE_TIMING} calls" + model.plan.choice.split("calls")[1]
    for _ in range(5):
        model(x_of())
    assert len(timed) == 1  # once


def test_the_verdict_is_kept_and_the_next_start_begins_on_the_winner(timed, conversions):
    model = litegpu.CompiledModel.from_buffer(dense_tanh())
    model.settle_engine_choice()
    assert len(timed) == 1 and model.plan.engine == "openvino"
    again = litegpu.CompiledModel.from_buffer(dense_tanh())
    assert again.engine_choice_settled and again.plan.ops_per_engine() == {"openvino": 3}
    assert again.plan.choice == choices.REMEMBERED and len(timed) == 1


def test_the_switch_keeps_outputs_buffers_signatures_and_async_runs(timed):
    model = litegpu.CompiledModel.from_buffer(dense_tanh())
    signatures = model.get_signature_list()
    inputs, outputs = model.create_input_buffers(0), model.create_output_buffers(0)
    inputs[0].write(x_of(3))
    model.run_by_index(0, inputs, outputs)
    on_interpreter = outputs[0].read().copy()
    for _ in range(CALLS_BEFORE_TIMING):
        model.run_by_index(0, inputs, outputs)  # the straight path counts too
    assert model.engine_choice_settled and model.plan.engine == "openvino"
    model.run_by_index(0, inputs, outputs)  # buffers made before the switch
    np.testing.assert_allclose(outputs[0].read(), on_interpreter, rtol=1e-4, atol=1e-5)
    model.run_async(0, inputs, outputs).wait()
    np.testing.assert_allclose(outputs[0].read(), on_interpreter, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(model.run({"x": x_of(3)})["y"], on_interpreter, rtol=1e-4, atol=1e-5)
    assert model.get_signature_list() == signatures
    assert model.plan.engine_summary() == "3 ops on OpenVINO in 1 partition"


def test_a_timing_the_interpreter_wins_keeps_its_program(timed):
    timed.winner = "litert"
    model = litegpu.CompiledModel.from_buffer(dense_tanh())
    before = model(x_of())
    program = model._backends[0].backend
    model.settle_engine_choice()
    assert model.engine_choice_settled and model.plan.ops_per_engine() == {"litert": 3}
    assert model.plan.choice.startswith("timed after 1 call ")
    assert model._backends[0] is program  # the same interpreter, no longer counted
    np.testing.assert_array_equal(model(x_of()), before)


def test_two_processes_timing_together_time_once(timed):
    timed.seconds = 0.3  # the second waits on the memo's lock while the first times
    models = [litegpu.CompiledModel.from_buffer(dense_tanh()) for _ in range(2)]
    threads = [threading.Thread(target=m.settle_engine_choice) for m in models]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(timed) == 1
    assert [m.plan.engine for m in models] == ["openvino", "openvino"]
    assert all(m.engine_choice_settled for m in models)


def test_options_time_at_load_or_never(timed, conversions, monkeypatch):
    at_load = litegpu.CompiledModel.from_buffer(dense_tanh(), options=litegpu.Options(engine_choice="load"))
    assert at_load.engine_choice_settled and at_load.plan.choice == choices.TIMED and len(timed) == 1
    monkeypatch.setenv("LITEGPU_CACHE_DIR", "")  # nothing kept: the next model is not known
    monkeypatch.setenv("LITEGPU_ENGINE_CHOICE", "never")
    never = litegpu.CompiledModel.from_buffer(dense_tanh())
    for _ in range(3 * CALLS_BEFORE_TIMING):
        never(x_of())
    assert never.engine_choice_settled and not never.plan.choice_settled and len(timed) == 1
    assert never.plan.ops_per_engine() == {"litert": 3} and "not timed" in never.plan.choice
    with pytest.raises(InvalidArgumentError, match="engine_choice"):
        litegpu.Options(engine_choice="later")
    monkeypatch.setenv("LITEGPU_ENGINE_CHOICE", "soon")
    with pytest.raises(InvalidArgumentError, match="LITEGPU_ENGINE_CHOICE"):
        litegpu.CompiledModel.from_buffer(dense_tanh())


def test_a_warm_start_of_the_plan_before_the_choice_times_later_and_moves_on(timed, tmp_path):
    path = tmp_path / "dense.tflite"
    path.write_bytes(dense_tanh())
    first = litegpu.CompiledModel.from_file(path)
    expected = first(x_of())  # its first call records the start, the choice still to come
    warm = litegpu.CompiledModel.from_file(path)
    assert warm._warm is not None and not warm.engine_choice_settled and timed == []
    for _ in range(CALLS_BEFORE_TIMING):
        np.testing.assert_array_equal(warm(x_of()), expected)
    assert len(timed) == 1 and warm.engine_choice_settled and warm.plan.ops_per_engine() == {"openvino": 3}
    np.testing.assert_allclose(warm(x_of()), expected, rtol=1e-4, atol=1e-5)
    again = litegpu.CompiledModel.from_file(path)  # the record of the plan before the choice replaced
    assert again.engine_choice_settled and again.plan.ops_per_engine() == {"openvino": 3} and len(timed) == 1
    np.testing.assert_allclose(again(x_of()), expected, rtol=1e-4, atol=1e-5)


def test_a_small_models_thread_count_is_timed_later_too(monkeypatch):
    counted = []

    def timed_thread_count(model, file, cores):
        counted.append(cores)
        return 1

    monkeypatch.setattr(litert_backend, "_timed_thread_count", timed_thread_count)
    monkeypatch.setattr(litert_backend, "thread_count", lambda settings: 2)
    monkeypatch.setattr(engine_choice, "THREAD_TIMING_COST_S", 0.0)  # due at the first call
    model = litegpu.CompiledModel.from_buffer(dense_tanh())  # small: the interpreter's, untimed (compile.choices)
    assert model.plan.choice_settled and not model.engine_choice_settled and counted == []
    before = model(x_of())
    assert counted == [2] and model.engine_choice_settled and "thread count timed after 1 call" in model.plan.choice
    np.testing.assert_array_equal(model(x_of()), before)
    again = litegpu.CompiledModel.from_buffer(dense_tanh())  # the count kept
    assert again.engine_choice_settled and counted == [2]
