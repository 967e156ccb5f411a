"""The official converter's decoder with its weights after the FlatBuffer (``tf_decoder_extended_float32``).

``test_heldout_models.py`` compares every recorded call with the official builtin kernels; this checks what
the model stands for: the layout the converter writes for every model past 2 GB (Buffer.offset/size, offsets
only 4-byte aligned) is really the committed file's, and ``litegpu.generate`` follows the official greedy
tokens through it (bench/models/tf_decoder_model.py makes the > 2.5 GB version from the same code).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np

import litegpu
from litegpu.format.file import decode_model

MODELS = Path(__file__).resolve().parent / "models"
NAME = "tf_decoder_extended_float32"


def recorded_calls() -> list[tuple[str, dict[str, np.ndarray], np.ndarray]]:
    """(signature, inputs, official builtin logits) per call, in order (keys as in README.md)."""
    with np.load(MODELS / f"{NAME}.npz") as z:
        steps = json.loads(str(z["meta"]))["steps"]
        calls = []
        for k in range(steps):
            (signature,) = {key.split("/")[1] for key in z.files if key.startswith(f"step{k}/")}
            prefix = f"step{k}/{signature}/"
            inputs = {key[len(prefix) + 3:]: z[key] for key in z.files if key.startswith(prefix + "in/")}
            calls.append((signature, inputs, z[prefix + "out_ref/logits"]))
    return calls


def test_weights_lie_after_the_flatbuffer_at_offsets_only_4_byte_aligned():
    raw = decode_model(MODELS / f"{NAME}.tflite")
    blocks = [(int(b.get("offset") or 0), int(b.get("size") or 0)) for b in raw.root["buffers"]]
    extended = [(offset, size) for offset, size in blocks if offset > 1]
    assert extended, "no buffer after the FlatBuffer: remake the model with _experimental_use_buffer_offset"
    assert all(offset >= raw.flatbuffer_end for offset, _ in extended)
    assert sum(size for _, size in extended) > 0.9 * raw.size  # the weights, not just a stray block
    assert not all(offset % 4 for offset, _ in extended)
    assert any(offset % 16 for offset, _ in extended), "offsets all aligned: no longer the converter's layout"


def test_generate_follows_the_official_greedy_tokens():
    calls = recorded_calls()
    assert [signature for signature, _, _ in calls] == ["prefill"] + ["decode"] * (len(calls) - 1)
    expected = [int(np.argmax(logits[0, -1])) for _, _, logits in calls]
    fed = [int(inputs["tokens"][0, 0]) for _, inputs, _ in calls[1:]]
    assert fed == expected[:-1]  # the recording is a greedy generation
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = litegpu.CompiledModel.from_file(MODELS / f"{NAME}.tflite", litegpu.HardwareAccelerator.CPU)
    with model:
        assert litegpu.generate(model, calls[0][1]["tokens"][0], len(expected)) == expected
