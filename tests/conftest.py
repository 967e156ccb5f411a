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
