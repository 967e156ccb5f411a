"""What the fast CPU path knows without timing the official interpreter against OpenVINO (compile/choices.py)."""

from pathlib import Path

import numpy as np
import pytest

import litegpu
from litegpu.backends import fidelity
from litegpu.backends import litert as litert_backend
from litegpu.backends import openvino as openvino_backend
from litegpu.compile import choices
from litegpu.ir.builder import ModelBuilder
from litegpu.ir.save import to_bytes

pytest.importorskip("openvino")
pytest.importorskip("ai_edge_litert.interpreter")

CPU = litegpu.HardwareAccelerator.CPU
HELDOUT = Path(__file__).resolve().parents[1] / "heldout" / "models"


@pytest.fixture(autouse=True)
def timed_at_load(monkeypatch):
    """The rules as a load-time timing applies them (the deferred timing: tests/runtime/test_engine_choice.py)."""
    monkeypatch.setenv("LITEGPU_ENGINE_CHOICE", "load")


def mlp(seed=0):
    """x -> FULLY_CONNECTED -> RELU -> FULLY_CONNECTED, float: both engines run it whole."""
    rng = np.random.default_rng(seed)
    b = ModelBuilder()
    x = b.input("x", (1, 16))
    h, r, y = b.tensor("h", (1, 32)), b.tensor("r", (1, 32)), b.tensor("y", (1, 4))
    b.op("FULLY_CONNECTED", [x, b.constant("w1", rng.normal(size=(32, 16)).astype(np.float32)), -1], [h])
    b.op("RELU", [h], [r])
    b.op("FULLY_CONNECTED", [r, b.constant("w2", rng.normal(size=(4, 32)).astype(np.float32)), -1], [y])
    b.output(y)
    return to_bytes(b.build())


@pytest.fixture
def timings(monkeypatch):
    """Every engine timing from here on, OpenVINO winning it; no thread-count timing."""
    calls = []

    def timed(candidates, **kwargs):  # ``timing.timed_rounds``: OpenVINO twice as fast in every round
        calls.append(sorted(candidates))
        return {name: [1.0 if name == "openvino" else 2.0] * 6 for name in candidates}

    monkeypatch.setattr(litert_backend, "THREAD_CHOICE_MAX_MACS", -1)
    monkeypatch.setattr("litegpu.backends.timing.timed_rounds", timed)
    return calls


@pytest.fixture
def conversions(monkeypatch):
    """Every time OpenVINO is asked which ops it converts (it converts the model to answer)."""
    calls = []
    real = openvino_backend.OpenVinoEngine.unsupported

    def asked(self, *args, **kwargs):
        calls.append(args[1])
        return real(self, *args, **kwargs)

    monkeypatch.setattr(openvino_backend.OpenVinoEngine, "unsupported", asked)
    return calls


def test_a_small_model_goes_to_the_official_interpreter_untimed(timings, conversions):
    model = litegpu.CompiledModel.from_buffer(mlp(), CPU)
    assert model.plan.ops_per_engine() == {"litert": 3}
    assert timings == [] and conversions == []  # nothing timed, OpenVINO never asked


def test_a_bigger_model_is_timed_once_and_the_verdict_kept(timings, monkeypatch):
    monkeypatch.setattr(choices, "OBVIOUS_MAX_MACS", -1)  # as a model past the size rule
    assert litegpu.CompiledModel.from_buffer(mlp(), CPU).plan.ops_per_engine() == {"openvino": 3}
    assert litegpu.CompiledModel.from_buffer(mlp(), CPU).plan.ops_per_engine() == {"openvino": 3}
    assert timings == [["litert", "openvino"]]


def test_a_model_of_the_same_ops_takes_the_verdict_untimed(timings, monkeypatch):
    """Other weights, the same op types, options and shapes: a fine-tuned model, or one converted again."""
    monkeypatch.setattr(choices, "OBVIOUS_MAX_MACS", -1)
    litegpu.CompiledModel.from_buffer(mlp(seed=0), CPU)
    other = litegpu.CompiledModel.from_buffer(mlp(seed=1), CPU)
    assert timings == [["litert", "openvino"]] and other.plan.ops_per_engine() == {"openvino": 3}
    assert choices.structure_scope(other.model) == choices.structure_scope(litegpu.Model.from_buffer(mlp(2)).ir)
    assert choices.structure_scope(other.model) != choices.structure_scope(litegpu.Model.from_buffer(_wider_mlp()).ir)


def _wider_mlp():
    b = ModelBuilder()
    x = b.input("x", (1, 16))
    y = b.tensor("y", (1, 8))
    b.op("FULLY_CONNECTED", [x, b.constant("w", np.ones((8, 16), np.float32)), -1], [y])
    b.output(y)
    return to_bytes(b.build())


def test_a_verdict_for_openvino_does_not_load_the_official_interpreter_again(timings, monkeypatch):
    monkeypatch.setattr(choices, "OBVIOUS_MAX_MACS", -1)
    litegpu.CompiledModel.from_buffer(mlp(), CPU)
    loaded = []
    monkeypatch.setattr(litert_backend, "_SharedInterpreter", lambda *a, **k: loaded.append(a))
    warm = litegpu.CompiledModel.from_buffer(mlp(), CPU)
    assert warm.plan.ops_per_engine() == {"openvino": 3} and loaded == []
    x = np.ones((1, 16), np.float32)
    assert np.isfinite(warm.run([x])["y"]).all()


def test_an_integer_model_is_not_converted_for_openvino(timings, conversions, monkeypatch):
    """Integer arithmetic is kept off OpenVINO: nothing it may run does any work, whatever the model's size."""
    monkeypatch.setattr(choices, "OBVIOUS_MAX_MACS", -1)
    model = litegpu.CompiledModel.from_file(str(HELDOUT / "mobilenet_v2_035_96_int8.tflite"), CPU)
    assert set(model.plan.ops_per_engine()) == {"litert"} and timings == [] and conversions == []


def test_a_small_dynamic_range_model_is_not_measured_against_the_builtin_kernels(monkeypatch):
    measured = []
    monkeypatch.setattr(fidelity, "openvino_verdict", lambda *a, **k: measured.append(a))
    model = litegpu.CompiledModel.from_file(str(HELDOUT / "mobilenet_v2_035_96_dynamic.tflite"), CPU)
    assert measured == [] and not model._engine_settings().approximate_integers
    assert "small model" in model._hybrid.reason
