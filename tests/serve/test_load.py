"""The load run of issue 34 (slow): 10,000 requests from 64 concurrent clients against `litegpu serve` on 127.0.0.1,
5 % of them malformed; every good request answered correctly, every bad one a 4xx, never a 5xx, and the server's
resident memory after the run within 1.1x of what it was after warm-up.  Bounded: it stops after its requests, or
after ten minutes."""

import asyncio
import json
import random
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from serving import shared_model, start_serve

pytestmark = pytest.mark.slow
aiohttp = pytest.importorskip("aiohttp")  # httpx's async client, not the server, limits 64 clients to ~50/s here

REQUESTS, CLIENTS, MALFORMED, WARM_UP, LIMIT_S = 10_000, 64, 0.05, 1_000, 600
ENCODE = "/v2/models/codec/encode/infer"


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _body(x):
    return json.dumps({"inputs": [{"name": "x", "shape": [1, 64], "datatype": "FP32", "data": x.ravel().tolist()}]})


BAD = [  # (path, body): what a careless or hostile client sends
    (ENCODE, '{"inputs": ['),
    (ENCODE, json.dumps({"inputs": [{"name": "x", "shape": [1, 63], "datatype": "FP32", "data": [0.0] * 63}]})),
    (ENCODE, json.dumps({"inputs": [{"name": "x", "shape": [1, 64], "datatype": "INT32", "data": [0] * 64}]})),
    (ENCODE, json.dumps({"inputs": [{"name": "y", "shape": [1, 64], "datatype": "FP32", "data": [0.0] * 64}]})),
    ("/v2/models/nope/infer", json.dumps({"inputs": []})),
    ("/v2/models/codec/nope/infer", _body(np.zeros(64, np.float32))),
    (ENCODE, "x" * 100_000),
]


async def _run(url, count, examples, expected, rng):
    outcomes = {"good": 0, "bad": 0, "wrong": [], "5xx": []}
    queue: asyncio.Queue = asyncio.Queue()
    for _ in range(count):
        queue.put_nowait(rng.random() < MALFORMED)
    deadline = time.monotonic() + LIMIT_S

    async def client(http):
        while not queue.empty() and time.monotonic() < deadline:
            malformed = queue.get_nowait()
            if malformed:
                path, body = rng.choice(BAD)
            else:
                k = rng.randrange(len(examples))
                path, body = ENCODE, examples[k]
            async with http.post(url + path, data=body) as response:
                status, text = response.status, await response.text()
            if status >= 500:
                outcomes["5xx"].append(text[:200])
            elif malformed:
                assert 400 <= status < 500 and "error" in json.loads(text), text[:200]
                outcomes["bad"] += 1
            else:
                got = np.asarray(json.loads(text)["outputs"][0]["data"], np.float32) if status == 200 else None
                if got is None or not np.allclose(got, expected[k], rtol=1e-5, atol=1e-6):
                    outcomes["wrong"].append(text[:200])
                outcomes["good"] += 1

    connector = aiohttp.TCPConnector(limit=CLIENTS)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as http:
        await asyncio.gather(*(client(http) for _ in range(CLIENTS)))
    return outcomes


def test_ten_thousand_requests_with_malformed_ones_mixed_in():
    import litegpu

    path = shared_model("two_signatures_float32")
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((1, 64)).astype(np.float32) for _ in range(32)]
    direct = litegpu.CompiledModel.from_file(str(path), hardware_accel=litegpu.HardwareAccelerator.CPU)
    expected = [direct.run({"x": x}, "encode")["code"].ravel() for x in xs]
    examples = [_body(x) for x in xs]
    server, url = start_serve(f"codec={path}", "--accelerator", "cpu", "--max-body-mb", "1")
    try:
        pick = random.Random(1)
        warm = asyncio.run(_run(url, WARM_UP, examples, expected, pick))
        rss_warm = _rss_bytes(server.pid)
        started = time.monotonic()
        outcomes = asyncio.run(_run(url, REQUESTS, examples, expected, pick))
        elapsed = time.monotonic() - started
        rss_after = _rss_bytes(server.pid)
        answered = outcomes["good"] + outcomes["bad"] + len(outcomes["5xx"])
        print(f"load run: {answered} requests in {elapsed:.1f} s ({answered / elapsed:.0f}/s), {outcomes['bad']} "
              f"malformed; RSS {rss_warm / 2**20:.1f} -> {rss_after / 2**20:.1f} MiB")
        assert answered == REQUESTS, "the run hit its time limit"
        assert not outcomes["5xx"] and not outcomes["wrong"] and not warm["5xx"]
        assert outcomes["bad"] > 0.03 * REQUESTS
        assert rss_after <= 1.1 * rss_warm
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.communicate()
