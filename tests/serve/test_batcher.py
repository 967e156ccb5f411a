"""Dynamic batching: concurrent requests gathered into batched calls give each request the direct call's answer
(floats to rounding: XLA against the direct engine); ``auto`` measures whether batching pays."""

import asyncio
import time

import httpx
import numpy as np
import pytest

from litegpu.serve.batcher import BatchingPolicy, padded_size

from serving import small_server

ENCODE = "/v2/models/two_signatures_float32/encode/infer"


def test_padded_sizes():
    assert [padded_size(n) for n in (1, 2, 3, 4, 5, 17, 32)] == [1, 2, 4, 4, 8, 32, 32]
    policy = BatchingPolicy("on", 20, batched_sizes={2, 4, 8, 16, 32})
    assert policy.sizes() == [2, 4, 8, 16, 32]
    assert not policy.batches(1) and policy.batches(3) and policy.batches(20)
    assert not BatchingPolicy("auto", 8, batched_sizes={8}).batches(3)


async def _concurrently(url, examples):
    async with httpx.AsyncClient(timeout=60) as client:
        async def one(x):
            body = {"inputs": [{"name": "x", "shape": [1, 64], "datatype": "FP32", "data": x.ravel().tolist()}]}
            response = await client.post(url + ENCODE, json=body)
            assert response.status_code == 200, response.text
            return np.asarray(response.json()["outputs"][0]["data"], np.float32).reshape(1, 32)
        return await asyncio.gather(*(one(x) for x in examples))


def test_concurrent_requests_run_batched_with_each_its_own_answer():
    rng = np.random.default_rng(5)
    examples = [rng.standard_normal((1, 64)).astype(np.float32) for _ in range(24)]
    with small_server(batching="on", max_batch=4, max_delay_ms=50) as server:
        batcher = server.service.models["two_signatures_float32"].batchers["encode"]
        assert batcher.policy.batched_sizes == {2, 4}
        answers = asyncio.run(_concurrently(server.url, examples))
        direct = server.service.models["two_signatures_float32"].compiled
        for x, answer in zip(examples, answers):
            expected = direct.run({"x": x}, "encode")["code"]
            np.testing.assert_allclose(answer, expected, rtol=1e-5, atol=1e-6 * np.abs(expected).max())
        histogram = server.service.metrics.batch_size.labels("two_signatures_float32/encode")
        count, total = _histogram(histogram)
        assert total == 24 and count < 24  # some requests shared a call


def _histogram(histogram):
    samples = {s.name: s.value for metric in histogram.collect() for s in metric.samples}
    return samples["litegpu_batch_size_count"], samples["litegpu_batch_size_sum"]


def test_auto_measures_whether_batching_pays():
    with small_server(batching="auto", max_batch=2) as server:
        policy = server.service.models["two_signatures_float32"].batchers["encode"].policy
        deadline = time.monotonic() + 120
        while policy.reason.startswith("measuring"):
            assert time.monotonic() < deadline, policy.describe()
            time.sleep(0.1)
        described = policy.describe()
        assert described["reason"].startswith("measured") and described["direct_ms"] > 0
        assert 2 in described["batched_ms"]
        # batched sizes are exactly those that beat as many direct calls
        for size in policy.batched_sizes:
            assert policy.batched_s[size] * 1.1 < size * policy.direct_s


@pytest.mark.parametrize("mode", ["off", "on"])
def test_batching_off_or_on_is_reported_in_the_metadata(mode):
    with small_server(batching=mode, max_batch=2) as server:
        batching = httpx.get(server.url + "/v2/models/two_signatures_float32/encode").json()["batching"]
        assert batching["mode"] == mode and batching["batched_sizes"] == ([2] if mode == "on" else [])
