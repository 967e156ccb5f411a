"""The server most serve tests share: started once per session in this process on 127.0.0.1 (a free port), ready
before a test uses it, always shut down.  Tests that need other settings start small servers of their own
(``serving.small_server``)."""

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("prometheus_client")

from serving import BUNDLE, shared_model  # noqa: E402

from litegpu.serve import ServeConfig, ServerThread, model_specs  # noqa: E402


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
