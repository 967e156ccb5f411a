"""The full-integer MobileNetV3-small, tensor by tensor against the official builtin kernels.

``mobilenet_v3_small_int8.intermediates.npz`` holds every activation the official
runtime (builtin kernels, no delegates) produced; walking the operators in
execution order and comparing each output names the first op whose integer
arithmetic diverges from the official one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from litegpu.backends import ReferenceBackend
from litegpu.errors import LiteGpuError
from litegpu.ir import read_model
from litegpu.ops import reduce as reduce_ops

MODELS = Path("/work/shared/models")
MODEL = MODELS / "mobilenet_v3_small_int8.tflite"
INTERMEDIATES = MODELS / "mobilenet_v3_small_int8.intermediates.npz"
REFERENCE = MODELS / "mobilenet_v3_small_int8.reference.npz"

pytestmark = pytest.mark.skipif(not MODEL.exists() or not INTERMEDIATES.exists(), reason="shared models missing")


def _official_tensors() -> dict[int, np.ndarray]:
    stored = np.load(INTERMEDIATES)
    return {int(key[1:].split(":", 1)[0]): stored[key] for key in stored.files if key.startswith("t")}


@pytest.fixture(scope="module")
def run():
    # The reference files come from a 2-thread official runtime; its MEAN rounds per thread split.
    patch = pytest.MonkeyPatch()
    patch.setattr(reduce_ops, "OFFICIAL_NUM_THREADS", 2)
    try:
        yield _run_model()
    finally:
        patch.undo()


def _run_model():
    model = read_model(MODEL.read_bytes())
    official = _official_tensors()
    reference = np.load(REFERENCE)
    backend = ReferenceBackend(model, preserve_all_tensors=True)
    try:
        outputs, error = backend.run([reference["serving_default/in/input"]]), None
    except LiteGpuError as e:  # what ran before the failing op is still compared
        outputs, error = None, e
    ours = {t: np.asarray(v) for (sg, t), v in backend.tensors.items() if sg == 0}
    return model, official, ours, outputs, reference, error


def _describe(model, op) -> str:
    sg = model.subgraphs[0]
    return f"{op.opcode_name} #{op.index} (output t{op.outputs[0]} {sg.tensors[op.outputs[0]].name!r})"


def test_every_op_output_matches_the_official_kernels(run):
    model, official, ours, _, _, error = run
    sg = model.subgraphs[0]
    compared = 0
    for op in sorted(sg.operators, key=lambda o: o.index):
        for t in op.outputs:
            if t not in official:
                continue
            assert t in ours, f"first failure at {_describe(model, op)}: no value ({error})"
            got, want = ours[t], official[t]
            assert got.shape == want.shape and got.dtype == want.dtype, (
                f"first divergence at {_describe(model, op)}: {got.dtype}{got.shape} vs official "
                f"{want.dtype}{want.shape}")
            diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
            assert diff.max(initial=0) == 0, (
                f"first divergence at {_describe(model, op)}: {np.count_nonzero(diff)} of {diff.size} "
                f"elements differ, by up to {diff.max()} units")
            compared += 1
    assert compared == len(sg.operators)


def test_output_matches_out_ref(run):
    _, _, _, outputs, reference, error = run
    assert error is None, str(error)
    got = outputs[0].astype(np.int64)
    want = reference["serving_default/out_ref/output"].astype(np.int64)
    diff = np.abs(got - want)
    assert diff.max() <= 1
    assert np.mean(diff == 0) >= 0.99
