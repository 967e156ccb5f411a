import atexit
import fnmatch
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


# Costlier twins left to the slow run, chosen by their measured cost (`pytest --durations`, 2 loaded cores,
# 2026-11-28: 245 s of the quick suite's 1,834): each repeats on another parameter a check that a cheaper twin keeps
# in the quick suite (fp32 beside fp16 on the GPU stand-in, chunk 3 beside chunks 1 and 16, prefill 32 beside 8,
# int4/int8 looped layers on the CPU beside the GPU's, ...), so the quick suite keeps every behaviour and CI its
# 30-minute budget; `-m slow` runs them all.
SLOW_TWINS = (
    "tests/backends/xla/test_xla_weights.py::test_sliced_quantized_matmuls_loop_over_the_stored_weights[[]int8]",
    "tests/backends/xla/test_xla_weights.py::test_big_subgraphs_compile_in_parts_with_the_same_results[[]float16]",
    "tests/backends/xla/test_layer_scan.py::test_looped_layers_compute_what_the_ops_traced_one_by_one_compute[[]int4-gpu]",
    "tests/backends/test_litert.py::test_a_model_split_around_a_custom_op_times_the_official_interpreter_on_its_part[[]litert]",
    "tests/runtime/test_generate.py::test_the_device_loop_gives_the_token_by_token_loop_tokens_for_any_chunk[[]1]",
    "tests/runtime/test_generate.py::test_the_device_loop_gives_the_token_by_token_loop_tokens_for_any_chunk[[]16]",
    "tests/gpu/test_gpu_models.py::test_heldout_model_on_gpu[[]fp16-*",
    "tests/gpu/test_gpu_circle_weights.py::test_circle_weight_fc_on_the_gpu[[]1-*",
    "tests/gpu/test_gpu_split.py::test_detector_split_across_gpu_and_cpu_matches_the_official_interpreter[[]1]",
    "tests/gpu/test_gpu_split.py::test_detector_split_across_gpu_and_cpu_matches_the_official_interpreter[[]2]",
    "tests/heldout/test_litert_torch_llm.py::test_prefill_and_decode_match_the_official_kernels[[]*-prefill_8-exact]",
    "tests/heldout/test_heldout_models.py::test_heldout_model_matches_official_builtin_kernels[[]interpreter_xla-tf_decoder_extended_float32]",
)


@pytest.hookimpl(tryfirst=True)  # before the "-m" selection deselects by marker
def pytest_collection_modifyitems(config, items):
    for item in items:
        if any(fnmatch.fnmatchcase(item.nodeid, pattern) for pattern in SLOW_TWINS):
            item.add_marker(pytest.mark.slow)
