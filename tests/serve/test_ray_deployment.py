"""The same application as Ray Serve replicas on a local Ray cluster (slow: Ray starts its processes)."""

import json
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

from litegpu.serve import ServeConfig, model_specs

from serving import free_port, http_status, shared_model

pytestmark = pytest.mark.slow


def test_two_replicas_on_a_local_ray_cluster_answer_as_a_direct_call():
    pytest.importorskip("ray.serve")
    import ray
    from ray import serve

    import litegpu
    from litegpu.serve.ray_deployment import start

    port = free_port()
    path = shared_model("two_signatures_float32")
    config = ServeConfig(model_specs([f"codec={path}"]), accelerator="cpu", port=port, batching="off",
                         api_key="sekret")
    try:
        start(config, "local", replicas=2)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 300
        while http_status(url + "/v2/health/live") != 401:  # the proxy answers, the replicas guard
            assert time.monotonic() < deadline
            time.sleep(0.5)
        x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(1, 64)
        body = json.dumps({"inputs": [{"name": "x", "shape": [1, 64], "datatype": "FP32", "data": x.ravel().tolist()}]})
        headers = {"Authorization": "Bearer sekret"}
        while True:
            request = urllib.request.Request(url + "/v2/models/codec/encode/infer", data=body.encode(), headers=headers,
                                             method="POST")
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    answer = json.load(response)
                break
            except urllib.error.HTTPError as e:
                assert e.code == 503 and time.monotonic() < deadline  # a replica still loading
                time.sleep(0.5)
        expected = litegpu.CompiledModel.from_file(str(path), hardware_accel=litegpu.HardwareAccelerator.CPU).run(
            {"x": x}, "encode")["code"]
        np.testing.assert_allclose(np.asarray(answer["outputs"][0]["data"], np.float32).reshape(1, 32), expected,
                                   rtol=1e-5, atol=1e-6)
        assert len(serve.status().applications["litegpu"].deployments["litegpu"].replica_states) >= 1
    finally:
        serve.shutdown()
        ray.shutdown()
