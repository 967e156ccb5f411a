"""Servers for the serve tests: started in this process on 127.0.0.1 (a free port), ready before a test uses them,
always shut down.  The shared server is started once per session; tests that need other settings start small
servers of their own."""

from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("prometheus_client")

from litegpu.serve import Limits, ServeConfig, ServerThread, model_specs  # noqa: E402

BUNDLE = Path(__file__).resolve().parents[1] / "heldout" / "litert_torch" / "smollm_tiny.litertlm"
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "models"


def shared_model(name: str) -> Path:
    path = SHARED / f"{name}.tflite"
    if not path.is_file():
        pytest.skip(f"shared model {path} not found")
    return path


@pytest.fixture(scope="session")
def server():
    """two_signatures_float32 and the face detector (v2), the tiny SmolLM bundle as "chat" (OpenAI); no batching,
    so every answer is a direct call's, bit for bit."""
    pytest.importorskip("litert_lm_builder")
    pytest.importorskip("sentencepiece")
    models = [str(shared_model("two_signatures_float32")), str(shared_model("mediapipe_face_detection_short_range")),
              f"chat={BUNDLE}"]
    with ServerThread(ServeConfig(model_specs(models), accelerator="cpu", batching="off")) as running:
        yield running


def small_server(**settings) -> ServerThread:
    """A server of two_signatures_float32 alone, with ``settings`` (ServeConfig's, ``limits`` as a dict)."""
    limits = Limits(**settings.pop("limits", {}))
    return ServerThread(ServeConfig(model_specs([str(shared_model("two_signatures_float32"))]), accelerator="cpu",
                                    limits=limits, **{"batching": "off", **settings}))
