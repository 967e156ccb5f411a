import atexit
import itertools
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

# The compile cache is on by default: the suite must never write into the user's own (~/.cache/litegpu), and no
# test may find what an earlier one left there (order-dependent plans and programs).  Set before anything imports
# litegpu, so that module- and session-scoped fixtures use this folder too; each test then gets a folder of its own
# (``_compile_cache_per_test``), created only if the test compiles something.
_CACHE_ROOT = Path(tempfile.mkdtemp(prefix="litegpu-test-cache-"))
atexit.register(shutil.rmtree, _CACHE_ROOT, ignore_errors=True)  # however the session ends
os.environ["LITEGPU_CACHE_DIR"] = str(_CACHE_ROOT / "session")
_TEST_NUMBER = itertools.count()


@pytest.fixture(autouse=True)
def _compile_cache_per_test(monkeypatch):
    monkeypatch.setenv("LITEGPU_CACHE_DIR", str(_CACHE_ROOT / f"test-{next(_TEST_NUMBER)}"))


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
