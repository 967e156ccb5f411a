"""Real models end to end: our backends against the official runtime's recorded outputs.

Each ``X.reference.npz`` beside the shared models holds inputs and the outputs
of ai-edge-litert 2.3.0 (``out``: XNNPACK, ``out_ref``: builtin reference
kernels).  Float models must match ``out_ref`` within a relative error of 1e-4
(largest difference over largest magnitude).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from litegpu.backends import ReferenceBackend
from litegpu.ir import Model, read_model

FLOAT_MODELS = [
    "mediapipe_face_detection_short_range",
    "mediapipe_hand_landmark_lite",
    "mobilenet_v3_small_float32",
    "transformer_encoder_float32",
    "two_signatures_float32",
]


def load_reference(path: Path) -> dict[str, dict[str, dict[str, np.ndarray]]]:
    """{signature: {"in": {...}, "out": {...}, "out_ref": {...}}} for the first call."""
    out: dict = {}
    with np.load(path) as z:
        for key in z.files:
            parts = key.split("/")
            if len(parts) != 3:
                continue  # stepN/... entries of stateful models
            sig, kind, name = parts
            out.setdefault(sig, {}).setdefault(kind, {})[name] = z[key]
    return out


def signature_io(model: Model, key: str) -> tuple[int, dict[str, int], dict[str, int]]:
    """(subgraph index, input name -> position, output name -> position)."""
    if key == "-":
        sg = model.subgraphs[0]
        return 0, {sg.tensors[t].name: i for i, t in enumerate(sg.inputs)}, \
            {sg.tensors[t].name: i for i, t in enumerate(sg.outputs)}
    sig = next(s for s in model.signatures if s.key == key)
    sg = model.subgraphs[sig.subgraph_index]
    inputs = {st.name: sg.inputs.index(st.tensor_index) for st in sig.inputs}
    outputs = {st.name: sg.outputs.index(st.tensor_index) for st in sig.outputs}
    return sig.subgraph_index, inputs, outputs


def relative_error(actual: np.ndarray, expected: np.ndarray) -> float:
    scale = float(np.max(np.abs(expected))) or 1.0
    return float(np.max(np.abs(actual.astype(np.float64) - expected.astype(np.float64)))) / scale


def run_backend(model: Model, backend: str, subgraph: int, inputs: list[np.ndarray]) -> list[np.ndarray]:
    if backend == "reference":
        return ReferenceBackend(model).run(inputs, subgraph_index=subgraph)
    if backend == "fast":  # the default CPU path: OpenVINO for the float ops it converts, XLA for the rest
        import litegpu

        compiled = litegpu.CompiledModel.from_model(model, options=litegpu.Options(
            litegpu.HardwareAccelerator.CPU, cpu_options=litegpu.CpuOptions(num_threads=1)))
        return [np.asarray(y) for y in compiled._backend(compiled._signatures[next(
            s.index for s in compiled._signatures if s.subgraph == subgraph)]).run(inputs)]
    from litegpu.backends.xla.backend import XlaBackend

    return [np.asarray(y) for y in XlaBackend(model, subgraph_index=subgraph).run(inputs)]


@pytest.mark.parametrize("backend", ["reference", "xla", "fast"])
@pytest.mark.parametrize("name", FLOAT_MODELS)
def test_float_model_matches_official_reference_kernels(shared_models, name, backend):
    model = read_model(shared_models / f"{name}.tflite")
    for key, record in load_reference(shared_models / f"{name}.reference.npz").items():
        subgraph, in_pos, out_pos = signature_io(model, key)
        inputs: list = [None] * len(in_pos)
        for input_name, value in record["in"].items():
            inputs[in_pos[input_name]] = value
        got = run_backend(model, backend, subgraph, inputs)
        for output_name, expected in record["out_ref"].items():
            actual = got[out_pos[output_name]]
            assert actual.shape == expected.shape, f"{key}/{output_name}"
            assert actual.dtype == expected.dtype, f"{key}/{output_name}"
            err = relative_error(actual, expected)
            assert err <= 1e-4, f"{name} {key}/{output_name}: relative error {err:.2e} on {backend}"


def stateful_steps(path: Path, key: str) -> list[tuple[dict, dict]]:
    """[(inputs, out_ref)] of the first call and then step1, step2, ... in order."""
    with np.load(path) as z:
        def part(prefix: str, kind: str) -> dict:
            return {k.rsplit("/", 1)[1]: z[k] for k in z.files if k.startswith(f"{prefix}/{kind}/")}
        steps = [(part(key, "in"), part(key, "out_ref"))]
        while part(f"{key}/step{len(steps)}", "in"):
            steps.append((part(f"{key}/step{len(steps)}", "in"), part(f"{key}/step{len(steps)}", "out_ref")))
    return steps


@pytest.mark.parametrize("backend", ["reference", "compiled_model"])
def test_microwakeword_int8_streaming_matches_official_reference_kernels(shared_models, backend):
    """Streaming int8 model with resource variables: every call of the recorded sequence,
    state carried between calls, bit-exact against the official builtin kernels."""
    path = shared_models / "microwakeword_okay_nabu.tflite"
    steps = stateful_steps(shared_models / "microwakeword_okay_nabu.reference.npz", "serving_default")
    assert len(steps) == 12
    if backend == "reference":
        model = read_model(path)
        _, in_pos, out_pos = signature_io(model, "serving_default")
        runner = ReferenceBackend(model)

        def call(inputs: dict) -> dict:
            ordered: list = [None] * len(in_pos)
            for name, value in inputs.items():
                ordered[in_pos[name]] = value
            got = runner.run(ordered, subgraph_index=0)
            return {name: got[i] for name, i in out_pos.items()}
    else:
        import litegpu

        compiled = litegpu.CompiledModel.from_file(str(path), hardware_accel=litegpu.HardwareAccelerator.CPU)

        def call(inputs: dict) -> dict:
            return compiled.run(inputs, signature_key="serving_default")
    for n, (inputs, expected) in enumerate(steps):
        got = call(inputs)
        for name, want in expected.items():
            assert got[name].dtype == want.dtype and got[name].shape == want.shape, f"step {n} {name}"
            np.testing.assert_array_equal(got[name], want, err_msg=f"step {n} {name} on {backend}")
