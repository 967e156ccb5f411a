import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

# Real models and their reference outputs live beside the checkout (../shared/models).
SHARED_MODELS = Path(os.environ.get("LITEGPU_SHARED_MODELS", Path(__file__).resolve().parents[2] / "shared" / "models"))


@pytest.fixture
def shared_models() -> Path:
    if not SHARED_MODELS.is_dir():
        pytest.skip(f"shared models not found at {SHARED_MODELS}")
    return SHARED_MODELS


@pytest.fixture
def without_litert(monkeypatch):
    """The fast CPU path without the official interpreter (OpenVINO and XLA only): for tests about how
    OpenVINO and XLA share a model, which the official interpreter would otherwise take whole."""
    from litegpu.backends import registry

    original = registry.fast_cpu_engines

    def without(*args, **kwargs):
        return {name: e for name, e in original(*args, **kwargs).items() if name != "litert"}

    monkeypatch.setattr(registry, "fast_cpu_engines", without)
