"""``import litegpu`` stays light: the engines' packages (JAX, OpenVINO, the official interpreter) are imported
when an engine first needs them, not by the import (issue 26: ``import litegpu`` under 0.3 s; the whole-process
figures are in BENCHMARKS.md, "Start-up")."""

import json
import subprocess
import sys

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
