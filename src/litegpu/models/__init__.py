"""The model bundled with litegpu, and the official runtime's outputs to check a run against.

    import litegpu
    model = litegpu.CompiledModel.from_file(litegpu.bundled_model())

MediaPipe's short-range face detector (from the mediapipe 0.10.21 wheel, Apache-2.0), so that ``litegpu run``
and the README's example work on a fresh machine with nothing to download.  Beside it, and beside each model in
the project's shared test models, ``<name>.reference.npz`` holds what the official runtime (ai-edge-litert
2.3.0) gives for fixed inputs: ``<signature>/in/<input>``, ``<signature>/out/<output>`` (its default CPU path,
XNNPACK) and ``<signature>/out_ref/<output>`` (its builtin kernels); the signature is ``-`` for a model without
SignatureDefs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

BUNDLED_MODEL = "mediapipe_face_detection_short_range.tflite"
REFERENCE_SUFFIX = ".reference.npz"
NO_SIGNATURE = "-"  # a reference file's name for the signature of a model without SignatureDefs


def bundled_model() -> Path:
    """The path of the model shipped in the package (a file: the package is installed unzipped)."""
    return Path(__file__).with_name(BUNDLED_MODEL)


@dataclass(frozen=True)
class Reference:
    """The official runtime's inputs and outputs for one signature of a model."""

    path: Path
    inputs: dict = field(default_factory=dict)      # name -> array
    outputs: dict = field(default_factory=dict)     # name -> array, the official default (XNNPACK)
    builtin: dict = field(default_factory=dict)     # name -> array, the builtin kernels


def reference_for(model_path: str | Path, signature: str | None = None) -> Reference | None:
    """The reference beside ``model_path`` (``<stem>.reference.npz``) for ``signature`` (None: a model without
    SignatureDefs); None where there is none, or none for that signature."""
    import numpy as np

    found = Path(model_path).with_suffix(REFERENCE_SUFFIX)
    if not found.is_file():
        return None
    prefix = f"{signature if signature is not None else NO_SIGNATURE}/"
    parts: dict[str, dict] = {"in": {}, "out": {}, "out_ref": {}}
    with np.load(found, allow_pickle=False) as data:
        for key in data.files:
            if not key.startswith(prefix):
                continue
            kind, _, name = key[len(prefix):].partition("/")
            if kind in parts and name:
                parts[kind][name] = data[key]
    if not parts["in"] or not parts["out"]:
        return None
    return Reference(found, parts["in"], parts["out"], parts["out_ref"])


__all__ = ["BUNDLED_MODEL", "Reference", "bundled_model", "reference_for"]
