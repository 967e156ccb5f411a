"""`litegpu serve` as a process: ready once loaded, answers, drains and exits 0 on SIGTERM; bad arguments are one
line and exit code 2."""

import json
import signal
import subprocess
import sys
import urllib.request

import pytest
from serving import SHARED, start_serve

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

MODEL = SHARED / "two_signatures_float32.tflite"


def test_serve_answers_then_drains_on_sigterm(tmp_path):
    if not MODEL.is_file():
        pytest.skip(f"{MODEL} not found")
    process, url = start_serve(f"codec={MODEL}", "--accelerator", "cpu", "--batching", "off", "--cache-dir",
                               str(tmp_path / "cache"))
    try:
        body = json.dumps({"inputs": [{"name": "x", "shape": [1, 64], "datatype": "FP32", "data": [1.0] * 64}]})
        request = urllib.request.Request(url + "/v2/models/codec/encode/infer", data=body.encode(), method="POST")
        with urllib.request.urlopen(request, timeout=30) as response:
            assert json.load(response)["outputs"][0]["shape"] == [1, 32]
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
        assert process.returncode == 0, stderr[-2000:]
        assert "ready: codec (tensor)" in stderr and "draining" in stderr
        assert any((tmp_path / "cache").iterdir())  # what it compiled is kept for the next start
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


@pytest.mark.parametrize("arguments, message", [
    (["missing.tflite"], "missing.tflite: no such file or folder"),
    ([str(MODEL), "--batching", "sometimes"], "invalid choice"),
    ([str(MODEL), "--api-key", ""], "is empty"),
])
def test_bad_arguments_are_one_line_and_exit_2(arguments, message):
    done = subprocess.run([sys.executable, "-m", "litegpu.cli.main", "serve", *arguments], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1
