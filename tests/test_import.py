"""``import litegpu`` stays light: the engines' packages (JAX, OpenVINO, the official interpreter) are imported
when an engine first needs them, not by the import (issue 26: ``import litegpu`` under 0.3 s; the whole-process
figures are in BENCHMARKS.md, "Start-up")."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ENGINE_PACKAGES = ("jax", "jaxlib", "openvino", "ai_edge_litert")


def modules_after(code: str) -> list[str]:
    """The engine packages a fresh interpreter has imported after running ``code``."""
    probe = code + f"\nimport json, sys\nprint(json.dumps(sorted(m for m in {ENGINE_PACKAGES!r} if m in sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_import_litegpu_imports_no_engine():
    assert modules_after("import litegpu") == []


def test_the_public_names_and_the_cli_import_no_engine():
    code = ("import litegpu\n"
            "[getattr(litegpu, name) for name in litegpu.__all__]\n"
            "import litegpu.cli.main")
    assert modules_after(code) == []


def test_the_probe_sees_an_engine_that_is_imported():
    # the checks above would pass on a broken probe: this one must not
    pytest.importorskip("openvino")
    assert "openvino" in modules_after("import litegpu\nimport openvino")


def test_the_version_is_the_installed_one():
    from importlib.metadata import PackageNotFoundError, version

    import litegpu

    try:
        installed = version("litegpu")
    except PackageNotFoundError:
        pytest.skip("litegpu is not installed (its metadata is what pyproject says)")
    assert litegpu.__version__ == installed  # the compile cache's keys use __version__ (runtime.compiled_model)


_START = """
import sys
import numpy as np, litegpu
sys.path.insert(0, {tests!r})
model = litegpu.CompiledModel.from_file({path!r}, options=litegpu.Options(
    litegpu.HardwareAccelerator.CPU, serialization_dir={cache!r}))
assert model.plan.engine_summary().endswith("on LiteRT (XNNPACK) in 1 partition"), model.plan.engine_summary()
model.run([np.ones((2, 3), np.float32)])
"""


def test_a_warm_start_on_the_official_interpreter_loads_no_other_engine(tmp_path):
    """The verdict "the official interpreter runs it whole" is cached however it was reached (here without
    timing: OpenVINO cannot keep the model's variables), so the second process asks neither OpenVINO nor XLA."""
    pytest.importorskip("ai_edge_litert.interpreter")
    sys.path.insert(0, str(Path(__file__).resolve().parent / "backends"))
    from test_litert import accumulator

    path = tmp_path / "accumulator.tflite"
    path.write_bytes(accumulator(0.0))
    code = _START.format(tests=str(Path(__file__).resolve().parent), path=str(path), cache=str(tmp_path / "cache"))
    cold = modules_after(code)
    warm = modules_after(code)
    assert "ai_edge_litert" in cold
    assert warm == ["ai_edge_litert"]
