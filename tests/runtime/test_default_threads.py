"""The default thread count: the physical cores, with or without options (issue 26), fewer on a small model
where timing says so, ``num_threads=1`` on request.

The engines' thread counts are observed where they are handed over: the official interpreter's constructor
and OpenVINO's compile configuration.  ``physical_cores`` is pinned to 3 so that a default of one thread (the
official interpreter's) fails on any machine, a one-core one included."""

import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert.interpreter")

import litegpu  # noqa: E402
from litegpu.backends import engine as engine_module  # noqa: E402
from litegpu.backends import litert as litert_backend  # noqa: E402
from litegpu.backends.engine import EngineSettings, physical_cores  # noqa: E402

CPU = litegpu.HardwareAccelerator.CPU
SHARED = Path(__file__).resolve().parents[3] / "shared" / "models"
# on the official interpreter whole in the default plan, and big enough that more threads pay (bench/cpu/threads.py)
MODEL = SHARED / "mobilenet_v3_small_float32.tflite"


@pytest.fixture
def interpreter_threads(monkeypatch):
    """The ``num_threads`` of every official interpreter litegpu creates; physical cores pinned to 3."""
    monkeypatch.setattr(litert_backend, "physical_cores", lambda: 3)
    monkeypatch.setattr(engine_module, "physical_cores", lambda: 3)
    real = litert_backend._interpreter_module()
    created = []

    class Recording:
        def __init__(self, **kwargs):
            created.append(kwargs["num_threads"])
            self._real = real.Interpreter(**kwargs)

        def __getattr__(self, name):
            return getattr(self._real, name)

    monkeypatch.setattr(litert_backend, "_interpreter_module", lambda: type("M", (), {"Interpreter": Recording}))
    return created


def only_litert(options=None):
    """Options that plan on the official interpreter alone (no timing against OpenVINO to wait for)."""
    cpu = litegpu.CpuOptions(engines=("litert",), **(options or {}))
    return litegpu.Options(CPU, cpu_options=cpu)


def run_once(model):
    details = model.get_input_tensor_details(0)
    model.run({name: np.zeros(d["shape"], d["dtype"]) for name, d in details.items()})


@pytest.mark.skipif(not MODEL.exists(), reason="shared models not present")
def test_from_file_without_options_runs_on_the_physical_cores(interpreter_threads):
    # planning times the official interpreter against OpenVINO: either way an interpreter is made to time it
    model = litegpu.CompiledModel.from_file(str(MODEL))
    assert model.options.cpu_options.num_threads == 0
    run_once(model)
    assert interpreter_threads and set(interpreter_threads) == {3}


@pytest.mark.skipif(not MODEL.exists(), reason="shared models not present")
def test_cpu_options_without_num_threads_run_on_the_physical_cores(interpreter_threads):
    model = litegpu.CompiledModel.from_file(str(MODEL), options=only_litert())
    run_once(model)
    assert set(interpreter_threads) == {3}


@pytest.mark.skipif(not MODEL.exists(), reason="shared models not present")
def test_one_thread_is_kept_for_whoever_asks(interpreter_threads):
    model = litegpu.CompiledModel.from_file(str(MODEL), options=only_litert({"num_threads": 1}))
    run_once(model)
    assert set(interpreter_threads) == {1}


def test_openvino_is_given_the_physical_cores_by_default(monkeypatch):
    pytest.importorskip("openvino")
    from litegpu.backends import openvino as openvino_backend
    from litegpu.backends.graph import OpRange
    from litegpu.ir import read_model

    monkeypatch.setattr(openvino_backend, "physical_cores", lambda: 3)
    model = read_model(str(MODEL)) if MODEL.exists() else pytest.skip("shared models not present")
    sg = model.subgraphs[0]
    whole = OpRange(0, tuple(range(len(sg.operators))), tuple(sg.inputs), tuple(sg.outputs))
    default = openvino_backend.OpenVinoExecutable(model, whole, EngineSettings())
    asked = openvino_backend.OpenVinoExecutable(model, whole, EngineSettings(num_threads=1))
    assert default._config()["INFERENCE_NUM_THREADS"] == 3
    assert asked._config()["INFERENCE_NUM_THREADS"] == 1


def test_physical_cores_counts_cores_this_process_may_use():
    found = physical_cores()
    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert 1 <= found <= allowed


def tiny_model() -> bytes:
    """Two small FULLY_CONNECTED layers: far under THREAD_CHOICE_MAX_MACS."""
    from litegpu.ir.builder import ModelBuilder
    from litegpu.ir.save import to_bytes

    rng = np.random.default_rng(0)
    b = ModelBuilder()
    x = b.input("x", (1, 16))
    h, y = b.tensor("h", (1, 32)), b.tensor("y", (1, 4))
    b.op("FULLY_CONNECTED", [x, b.constant("w1", rng.normal(size=(32, 16)).astype(np.float32)), -1], [h])
    b.op("FULLY_CONNECTED", [h, b.constant("w2", rng.normal(size=(4, 32)).astype(np.float32)), -1], [y])
    b.output(y)
    return to_bytes(b.build())


def timed_threads(monkeypatch, faster: str) -> list:
    """Thread-count timings from now on, ``faster`` ("1" or "3") winning each, made while loading (the deferred
    timing: tests/runtime/test_engine_choice.py); returns the calls."""
    calls = []
    monkeypatch.setenv("LITEGPU_ENGINE_CHOICE", "load")

    def timed(candidates, **kwargs):
        calls.append(sorted(candidates))
        return faster, {name: 1.0 if name == faster else 2.0 for name in candidates}

    monkeypatch.setattr("litegpu.backends.timing.fastest", timed)
    return calls


@pytest.mark.parametrize("faster, threads", [("1", 1), ("3", 3)])
def test_a_small_model_gets_the_thread_count_timing_says(interpreter_threads, monkeypatch, faster, threads):
    calls = timed_threads(monkeypatch, faster)
    model = litegpu.CompiledModel.from_buffer(tiny_model(), options=only_litert())
    interpreter_threads.clear()  # the two made to time it
    run_once(model)
    assert calls == [["1", "3"]]
    assert set(s.threads for s in model._cpu_engines["litert"]._interpreters.values()) == {threads}


@pytest.mark.parametrize("faster, threads", [("1", 1), ("2", 2)])
def test_a_thread_count_asked_for_is_the_most_a_small_model_gets(interpreter_threads, monkeypatch, faster, threads):
    """The onert comparison's small decoder ran faster on one thread than on the two asked for (issue 38)."""
    calls = timed_threads(monkeypatch, faster)
    model = litegpu.CompiledModel.from_buffer(tiny_model(), options=only_litert({"num_threads": 2}))
    interpreter_threads.clear()
    run_once(model)
    assert calls == [["1", "2"]]
    assert set(s.threads for s in model._cpu_engines["litert"]._interpreters.values()) == {threads}


def test_one_thread_asked_for_is_not_timed(interpreter_threads, monkeypatch):
    calls = timed_threads(monkeypatch, "2")
    model = litegpu.CompiledModel.from_buffer(tiny_model(), options=only_litert({"num_threads": 1}))
    run_once(model)
    assert calls == [] and set(interpreter_threads) == {1}


def test_the_timed_thread_count_is_kept_in_the_compile_cache(interpreter_threads, monkeypatch, tmp_path):
    calls = timed_threads(monkeypatch, "1")
    options = litegpu.Options(CPU, cpu_options=litegpu.CpuOptions(engines=("litert",)),
                              serialization_dir=str(tmp_path), model_token="tiny")
    litegpu.CompiledModel.from_buffer(tiny_model(), options=options)
    interpreter_threads.clear()
    warm = litegpu.CompiledModel.from_buffer(tiny_model(), options=options)
    run_once(warm)
    assert len(calls) == 1 and set(interpreter_threads) == {1}
