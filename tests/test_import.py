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


_OPENVINO_START = """
import sys
import numpy as np, litegpu
from litegpu.backends import timing, litert
from litegpu.compile import choices
sys.path.insert(0, {tests!r})
choices.OBVIOUS_MAX_MACS = -1  # as a model past the size rule: the engines are timed ...
litert.THREAD_CHOICE_MAX_MACS = -1
timing.timed_rounds = lambda candidates, **kw: {{n: [1.0 if n == "openvino" else 2.0] * 6 for n in candidates}}
model = litegpu.CompiledModel.from_file({path!r})  # ... and OpenVINO wins
assert model.plan.engine_summary() == "3 ops on OpenVINO in 1 partition", model.plan.engine_summary()
model.run([np.ones((1, 16), np.float32)])
"""


def test_a_warm_start_on_openvino_loads_no_other_engine(tmp_path, monkeypatch):
    """The verdict "OpenVINO" in the compile cache: the second process does not load the official interpreter to
    ask whether it could run the model."""
    pytest.importorskip("openvino")
    sys.path.insert(0, str(Path(__file__).resolve().parent / "compile"))
    from test_choices import mlp

    monkeypatch.setenv("LITEGPU_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("LITEGPU_ENGINE_CHOICE", "load")  # the first start times, the second reads the verdict
    path = tmp_path / "mlp.tflite"
    path.write_bytes(mlp())
    code = _OPENVINO_START.format(tests=str(Path(__file__).resolve().parent), path=str(path))
    assert "ai_edge_litert" in modules_after(code)  # the first start timed both
    assert modules_after(code) == ["openvino"]


def test_the_first_start_of_a_small_model_loads_only_the_official_interpreter(tmp_path, monkeypatch):
    """The bundled face detector, empty cache, no options: small enough to go to the official interpreter without
    converting it for OpenVINO or timing the two."""
    pytest.importorskip("ai_edge_litert.interpreter")
    monkeypatch.setenv("LITEGPU_CACHE_DIR", str(tmp_path / "cache"))
    code = ("import numpy as np, litegpu\n"
            "model = litegpu.CompiledModel.from_file(litegpu.bundled_model())\n"
            "model.run([np.zeros((1, 128, 128, 3), np.float32)])")
    assert modules_after(code) == ["ai_edge_litert"]
    assert modules_after(code) == ["ai_edge_litert"]
