"""read -> write -> read gives an equal model, for every shared model and both layouts.

The official interpreter must also see no difference: our rewritten file gives
bit-identical outputs to the original.
"""

from __future__ import annotations

import io

import numpy as np
import pytest

from litegpu.format import decode_model
from litegpu.ir import read_model
from litegpu.ir.save import to_bytes, write_extended, write_model

MODELS = [
    "mediapipe_face_detection_short_range", "mediapipe_hand_landmark_lite", "mediapipe_selfie_segmentation",
    "microwakeword_okay_nabu", "mobilenet_v3_small_float32", "mobilenet_v3_small_int8",
    "transformer_encoder_float32", "two_signatures_float32",
]


def extended_bytes(model) -> bytes:
    out = io.BytesIO()
    write_extended(model, out)
    return out.getvalue()


def test_every_shared_model_is_listed(shared_models):
    assert sorted(p.stem for p in shared_models.glob("*.tflite")) == sorted(MODELS)


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("layout", ["inline", "extended"])
def test_read_write_read_is_equal(shared_models, name, layout):
    original = read_model(shared_models / f"{name}.tflite")
    data = to_bytes(original) if layout == "inline" else extended_bytes(original)
    again = read_model(data)
    assert again == original
    # And once more: writing what we read gives the same bytes (the writer is deterministic).
    assert (to_bytes(again) if layout == "inline" else extended_bytes(again)) == data


@pytest.mark.parametrize("name", ["two_signatures_float32", "mobilenet_v3_small_float32"])
def test_extended_layout_puts_aligned_buffers_after_the_flatbuffer(shared_models, name, tmp_path):
    original = read_model(shared_models / f"{name}.tflite")
    path = tmp_path / "out.tflite"
    seen = []
    write_model(original, path, extended_buffers=True, progress=seen.append)
    raw = decode_model(path)
    stored = [b for b in raw.root["buffers"] if (b.get("offset") or 0) > 1]
    assert stored and all(b["data"] is None for b in stored)
    assert all(b["offset"] % 16 == 0 and b["offset"] >= raw.flatbuffer_end for b in stored)
    assert sum(seen) == sum(size for _, size in {(b["offset"], b["size"]) for b in stored})
    assert read_model(path) == original


def test_threshold_picks_the_layout(shared_models, tmp_path):
    original = read_model(shared_models / "two_signatures_float32.tflite")
    small, big = tmp_path / "inline.tflite", tmp_path / "extended.tflite"
    write_model(original, small)
    write_model(original, big, threshold=100)
    assert all((b.get("offset") or 0) == 0 for b in decode_model(small).root["buffers"])
    assert any((b.get("offset") or 0) > 1 for b in decode_model(big).root["buffers"])
    assert read_model(small) == read_model(big) == original


def test_constant_data_are_views_into_the_map(shared_models):
    model = read_model(shared_models / "mobilenet_v3_small_float32.tflite")
    big = max(model.buffers, key=lambda b: b.size)
    assert big.size > 100_000 and not big.data.flags.owndata and not big.data.flags.writeable


def _official_outputs(data: bytes, signature: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    litert = pytest.importorskip("ai_edge_litert.interpreter")
    interp = litert.Interpreter(model_content=data)
    runner = interp.get_signature_runner(signature)
    return runner(**inputs)


@pytest.mark.parametrize("name", ["two_signatures_float32", "mobilenet_v3_small_float32"])
@pytest.mark.parametrize("layout", ["inline", "extended"])
def test_official_interpreter_agrees_on_our_rewrite(shared_models, name, layout):
    path = shared_models / f"{name}.tflite"
    original_bytes = path.read_bytes()
    model = read_model(path)
    rewritten = to_bytes(model) if layout == "inline" else extended_bytes(model)
    reference = np.load(shared_models / f"{name}.reference.npz")
    for sig in model.signatures:
        prefix = f"{sig.key}/in/"
        inputs = {k[len(prefix):]: reference[k] for k in reference.files if k.startswith(prefix)}
        assert inputs, f"no reference inputs for signature {sig.key}"
        want = _official_outputs(original_bytes, sig.key, inputs)
        got = _official_outputs(rewritten, sig.key, inputs)
        assert want.keys() == got.keys()
        for key in want:
            np.testing.assert_array_equal(got[key], want[key], err_msg=f"{name} {sig.key} {key}")
