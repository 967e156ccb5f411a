"""Helpers for tests that start `litegpu serve` as a process or on Ray: a free loopback port, a status code, waiting
until the server is ready."""

import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request


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
