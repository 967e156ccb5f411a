"""Differential testing of .circle models: ONE's own runtime (onert) where it runs the model, and an
independent reference (torch, or numpy written from ONE's kernel source) for what it does not run.

``check_circle_model(model, inputs, expected)`` writes ``model`` as .circle with our writer, reads it
back, runs our numpy reference and XLA backends on it and compares both with ``expected``;
``onert_outputs(path, inputs)`` runs a file on onert's CPU backend (None where onert refuses it).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from litegpu.backends import ReferenceBackend
from litegpu.format import CIRCLE
from litegpu.ir import Model, read_model
from litegpu.ir.save import to_bytes

_ONERT_SCRIPT = """
import sys, numpy as np, onert
data = np.load(sys.argv[2])
outs = onert.infer.session(sys.argv[1], "cpu").infer([data[f"x{i}"] for i in range(len(data.files))])
np.savez(sys.argv[3], *outs)
"""


def have_onert() -> bool:
    try:
        import onert  # noqa: F401
    except ImportError:
        return False
    return True


def onert_outputs(path: str | Path, inputs: Sequence[np.ndarray], tmp: Path) -> list[np.ndarray] | None:
    """onert's outputs for a .circle file, or None where it refuses to prepare or run it.  It runs in a
    child process: onert 0.1.0 crashes the process on some files it cannot read (extended buffers)."""
    feeds, result = tmp / "onert_in.npz", tmp / "onert_out.npz"
    np.savez(feeds, **{f"x{i}": np.asarray(x) for i, x in enumerate(inputs)})
    done = subprocess.run([sys.executable, "-c", _ONERT_SCRIPT, str(path), str(feeds), str(result)],
                          capture_output=True, timeout=120)
    if done.returncode != 0:
        return None
    data = np.load(result)
    return [data[f"arr_{i}"] for i in range(len(data.files))]


def run_backends(model: Model, inputs: Sequence[np.ndarray]) -> dict[str, list[np.ndarray]]:
    from litegpu.backends.xla.backend import XlaBackend

    return {"reference": [np.asarray(y) for y in ReferenceBackend(model).run(list(inputs))],
            "xla": [np.asarray(y) for y in XlaBackend(model).run(list(inputs))]}


def check_circle_model(model: Model, inputs: Sequence[np.ndarray], expected: Sequence[np.ndarray], *,
                       rtol: float = 1e-5, atol: float = 1e-5) -> Model:
    """Our reference and XLA backends on ``model`` written as .circle and read back == ``expected``."""
    again = read_model(to_bytes(model, CIRCLE))
    assert again.file_format == "circle" and again.main.operators[0].opcode_name == model.main.operators[0].opcode_name
    for name, outputs in run_backends(again, inputs).items():
        assert len(outputs) == len(expected)
        for i, (got, want) in enumerate(zip(outputs, expected)):
            np.testing.assert_allclose(got, np.asarray(want), rtol=rtol, atol=atol, err_msg=f"{name} output {i}")
    return again


def ggml_quantized_q4_0(w: np.ndarray) -> np.ndarray:
    """``w`` [units, depth] quantized as ggml's ``quantize_row_q4_0_ref`` does: d = max / -8 (the value of the
    largest magnitude, signed: half the scales negative, and that value's quant -8), q = min(15, x / d + 8.5)."""
    units, depth = w.shape
    blocks = w.reshape(units, depth // 32, 32).astype(np.float32)
    largest = np.take_along_axis(blocks, np.abs(blocks).argmax(axis=-1)[..., None], axis=-1)[..., 0]
    d = (largest / -8).astype(np.float32)
    inverse = np.where(d != 0, 1 / np.where(d != 0, d, 1), 0).astype(np.float32)
    q = np.minimum(15, (blocks * inverse[..., None] + 8.5).astype(np.int8))
    nibbles = (q[..., :16] | (q[..., 16:] << 4)).astype(np.uint8)
    return np.concatenate([d.astype(np.float16).view(np.uint8).reshape(units, -1, 2), nibbles], axis=-1).reshape(-1)
