"""Helpers for the tests of `litegpu serve` (tests/serve, tests/cli): the models they serve, small servers in this
process, a free loopback port, a status code, `litegpu serve` as a process once ready.  (Not in a conftest.py:
`from conftest import ...` finds whichever conftest another folder of the session imported first.)"""

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

BUNDLE = Path(__file__).resolve().parent / "heldout" / "litert_torch" / "smollm_tiny.litertlm"
SHARED = Path(os.environ.get("LITEGPU_SHARED_MODELS", Path(__file__).resolve().parents[1].parent / "shared" / "models"))


def shared_model(name: str) -> Path:
    path = SHARED / f"{name}.tflite"
    if not path.is_file():
        pytest.skip(f"shared model {path} not found")
    return path


def small_server(**settings):
    """A server of two_signatures_float32 alone, in this process, with ``settings`` (ServeConfig's, ``limits`` as
    a dict); batching off unless told."""
    from litegpu.serve import Limits, ServeConfig, ServerThread, model_specs

    limits = Limits(**settings.pop("limits", {}))
    return ServerThread(ServeConfig(model_specs([str(shared_model("two_signatures_float32"))]), accelerator="cpu",
                                    limits=limits, **{"batching": "off", **settings}))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_status(url: str) -> int | None:
    """The status of GET ``url``; None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def start_serve(*arguments: str, timeout_s: float = 180) -> tuple[subprocess.Popen, str]:
    """`litegpu serve ARGUMENTS --port FREE` as a process, once ready: (process, its URL)."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "litegpu.cli.main", "serve", *arguments, "--port", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while http_status(url + "/v2/health/ready") != 200:
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"litegpu serve was not ready: {process.communicate()[1][-2000:]}")
        time.sleep(0.2)
    return process, url
