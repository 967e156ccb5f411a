"""What stands before every route: the API key, the body limit, draining on shutdown; health and metrics."""

import gzip
import json
import socket
import time

import httpx
import pytest

from litegpu.errors import ServiceUnavailableError, UnknownModelError
from litegpu.serve import ServeConfig, Service, model_specs
from litegpu.serve.app import hardware_accel

from serving import shared_model, small_server

ENCODE = "/v2/models/two_signatures_float32/encode/infer"
REQUEST = json.dumps({"inputs": [{"name": "x", "shape": [1, 64], "datatype": "FP32", "data": [0.25] * 64}]}).encode()


def test_an_api_key_guards_every_route():
    with small_server(api_key="sekret") as server:
        for path in ("/v2/health/live", "/v2/models/two_signatures_float32", "/metrics"):
            refused = httpx.get(server.url + path)
            assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
            assert "API key" in refused.json()["error"]
        wrong = httpx.get(server.url + "/v1/models", headers={"Authorization": "Bearer sekreT"})
        assert wrong.status_code == 401 and wrong.json()["error"]["type"] == "authentication_error"
        right = httpx.post(server.url + ENCODE, content=REQUEST, headers={"Authorization": "Bearer sekret"})
        assert right.status_code == 200 and right.json()["outputs"][0]["shape"] == [1, 32]


def test_bodies_and_tensors_over_the_limits_are_413():
    with small_server(limits={"max_body_bytes": 2000, "max_tensor_bytes": 200}) as server:
        declared = httpx.post(server.url + ENCODE, content=b"x" * 3000)
        assert declared.status_code == 413 and "limit is 2000" in declared.json()["error"]
        chunked = httpx.post(server.url + ENCODE, content=iter([b"x" * 1000] * 3))  # no Content-Length
        assert chunked.status_code == 413 and "over the server's limit" in chunked.json()["error"]
        bomb = httpx.post(server.url + ENCODE, content=gzip.compress(b" " * 100_000),
                          headers={"Content-Encoding": "gzip"})
        assert bomb.status_code == 413 and "decompressed" in bomb.json()["error"]
        tensor = httpx.post(server.url + ENCODE, content=REQUEST)  # 64 float32: 256 bytes
        assert tensor.status_code == 413 and "at most 200 per tensor" in tensor.json()["error"]
        encoded = httpx.post(server.url + ENCODE, content=gzip.compress(REQUEST), headers={"Content-Encoding": "br"})
        assert encoded.status_code == 415
        assert httpx.get(server.url + "/v2/health/ready").status_code == 200


def test_a_gzip_body_is_read():
    with small_server() as server:
        response = httpx.post(server.url + ENCODE, content=gzip.compress(REQUEST), headers={"Content-Encoding": "gzip"})
        assert response.status_code == 200, response.text


def test_draining_finishes_requests_in_flight_and_refuses_new_ones():
    with small_server() as server:
        head = (f"POST {ENCODE} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(REQUEST)}\r\n\r\n").encode()
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as slow:
            slow.sendall(head + REQUEST[:10])  # in flight: its body is still coming
            deadline = time.monotonic() + 10
            while server.service.inflight == 0:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            server.drain()
            refused = httpx.post(server.url + ENCODE, content=REQUEST)
            assert refused.status_code == 503 and "shutting down" in refused.json()["error"]
            assert httpx.get(server.url + "/v2/health/live").status_code == 200
            assert httpx.get(server.url + "/v2/health/ready").status_code == 503
            slow.sendall(REQUEST[10:])
            answer = slow.makefile("rb").read()
        assert answer.startswith(b"HTTP/1.1 200") and b'"outputs"' in answer
        server._thread.join(30)
        assert not server._thread.is_alive()  # drained: the server stopped by itself


def test_health_and_metrics(server):
    assert httpx.get(server.url + "/health").json()["status"] == "ready"
    httpx.post(server.url + ENCODE, content=REQUEST)
    httpx.post(server.url + ENCODE, content=b"{")
    httpx.post(server.url + "/v1/completions", json={"model": "chat", "prompt": "hi", "max_tokens": 3})
    metrics = httpx.get(server.url + "/metrics")
    assert metrics.headers["content-type"].startswith("text/plain")
    text = metrics.text
    for line in ('litegpu_requests_total{code="200",protocol="v2"}', 'litegpu_request_errors_total{code="400",protocol="v2"}',
                 'litegpu_batch_size_count{model="two_signatures_float32/encode"}',
                 'litegpu_queue_time_seconds_count{model="two_signatures_float32/encode"}',
                 'litegpu_time_to_first_token_seconds_count{model="chat"}', 'litegpu_generated_tokens_total{model="chat"}',
                 'litegpu_llm_active_sequences{model="chat"} 0.0', "litegpu_ready 1.0"):
        assert line in text, line


def test_a_model_answers_only_once_loaded_and_only_if_named():
    service = Service(ServeConfig(model_specs([str(shared_model("two_signatures_float32"))])))
    with pytest.raises(ServiceUnavailableError, match="still loading"):
        service.tensor_model("two_signatures_float32")
    with pytest.raises(UnknownModelError, match="serves \\['two_signatures_float32'\\]"):
        service.tensor_model("../../etc/passwd")


def test_accelerator_names():
    import litegpu

    assert hardware_accel("cpu") == litegpu.HardwareAccelerator.CPU
    assert hardware_accel("gpu,cpu") == litegpu.HardwareAccelerator.GPU | litegpu.HardwareAccelerator.CPU
    with pytest.raises(litegpu.errors.InvalidArgumentError):
        hardware_accel("tpu")
