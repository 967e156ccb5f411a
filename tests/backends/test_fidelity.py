"""Per-model verdict on a dynamic-range model's hybrid ops (``backends.fidelity``): OpenVINO may run them where
it is no further from the builtin kernels than XNNPACK, measured on the model."""

from pathlib import Path

import pytest

import litegpu as lg
from litegpu.backends import fidelity
from litegpu.compile import choices
from litegpu.backends.engine import EngineSettings
from litegpu.ir import read_model

HELDOUT = Path(__file__).resolve().parents[1] / "heldout" / "models"


@pytest.fixture(autouse=True)
def needs_openvino():
    from litegpu.backends.openvino import OpenVinoEngine

    if not OpenVinoEngine().installed():
        pytest.skip("OpenVINO is not installed")


def heldout(name: str) -> str:
    return str(HELDOUT / f"{name}.tflite")


def test_only_models_whose_integer_ops_are_all_hybrid_are_measured():
    assert fidelity.dynamic_range_only(read_model(heldout("transformer_dynamic")))
    assert not fidelity.dynamic_range_only(read_model(heldout("transformer_float32")))
    assert not fidelity.dynamic_range_only(read_model(heldout("mobilenet_v2_035_96_int8")))


def test_the_verdict_follows_the_measured_distances():
    """The transformer's hybrid ops: XNNPACK equals the builtin kernels within 1e-6, OpenVINO is 1e-3 away."""
    path = heldout("transformer_dynamic")
    verdict = fidelity.openvino_verdict(read_model(path), path, EngineSettings(num_threads=1))
    assert not verdict.openvino_allowed
    assert verdict.xnnpack_distance < 1e-5 < verdict.openvino_distance
    assert "OpenVINO may not run the hybrid ops" in verdict.reason


def test_a_model_given_as_bytes_keeps_the_rule_by_op_type():
    path = heldout("transformer_dynamic")
    verdict = fidelity.openvino_verdict(read_model(path), None, EngineSettings())
    assert not verdict.openvino_allowed and "bytes" in verdict.reason


def test_openvino_must_be_no_further_on_any_input_than_xnnpack_on_its_nearest():
    """Engines whose distances cross from input to input are a tie, which goes to the official default."""
    assert fidelity.decide([(0.2, 0.01), (0.15, 0.02), (0.3, 0.05)]).openvino_allowed
    assert not fidelity.decide([(0.15, 0.12), (0.14, 0.16)]).openvino_allowed  # a TF MobileNetV2's, two inputs


def test_the_verdict_on_a_real_model_keeps_the_tie_with_xnnpack():
    """The TF dynamic-range MobileNetV2: OpenVINO nearer the builtin kernels than XNNPACK on one input, further
    on another: XNNPACK keeps the hybrid ops (as the held-out test's criterion wants on its recorded inputs)."""
    path = heldout("mobilenet_v2_035_96_dynamic")
    verdict = fidelity.openvino_verdict(read_model(path), path, EngineSettings(num_threads=1))
    assert not verdict.openvino_allowed and verdict.openvino_distance > verdict.xnnpack_distance


def test_the_default_path_lets_openvino_take_the_hybrid_ops_when_allowed_and_keeps_the_verdict(
        tmp_path, monkeypatch):
    """Where the measurement allows OpenVINO (faked here: no held-out model is far enough from XNNPACK), the
    default path plans with OpenVINO's int8 arithmetic allowed, and the engines' timing decides; a second load
    reads the verdict from the compile cache without measuring."""
    measured = []
    real_decide = fidelity.decide

    def nearer(distances):
        measured.append(distances)
        verdict = real_decide([(o + 1.0, o) for _, o in distances])
        assert verdict.openvino_allowed
        return verdict

    monkeypatch.setattr(fidelity, "decide", nearer)
    # a model this small goes to the official interpreter unmeasured (compile.choices): measured as a bigger one
    monkeypatch.setattr(choices, "OBVIOUS_MAX_MACS", -1)
    path = heldout("mobilenet_v2_035_96_dynamic")
    options = lg.Options(lg.HardwareAccelerator.CPU, serialization_dir=str(tmp_path))
    first = lg.CompiledModel.from_file(path, options=options)
    assert first._engine_settings().approximate_integers and len(measured) == 1 and len(measured[0]) == 3
    second = lg.CompiledModel.from_file(path, options=options)
    assert second._engine_settings().approximate_integers and len(measured) == 1  # from the compile cache
    exact = lg.CompiledModel.from_file(path, options=lg.Options(
        lg.HardwareAccelerator.CPU, cpu_options=lg.CpuOptions(quantized_execution="exact")))
    assert not exact._engine_settings().approximate_integers and len(measured) == 1
