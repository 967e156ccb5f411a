"""The Open Inference Protocol v2 through Triton's own client (tritonclient.http), JSON and binary tensor data, on
the shared models: each answer equals a direct CompiledModel call; each bad request a 4xx {"error": ...}."""

import json

import httpx
import numpy as np
import pytest

from litegpu.errors import RequestError, UnknownModelError
from litegpu.serve.protocol_v2 import split_model_path


triton = pytest.importorskip("tritonclient.http")
from tritonclient.utils import InferenceServerException  # noqa: E402

FACE = "mediapipe_face_detection_short_range"
TWO = "two_signatures_float32"


def _client(server):
    return triton.InferenceServerClient(server.url.removeprefix("http://"))


def _direct(server, name, feeds, signature=0):
    """A direct call of the server's CompiledModel (a fresh one may pick another CPU engine by timing, whose
    float results differ in the last bits)."""
    return server.service.models[name].compiled.run(feeds, signature)


def _inputs(feeds, binary):
    inputs = []
    for name, value in feeds.items():
        tensor = triton.InferInput(name, list(value.shape), "FP32" if value.dtype == np.float32 else "INT32")
        tensor.set_data_from_numpy(value, binary_data=binary)
        inputs.append(tensor)
    return inputs


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_triton_client_infers_the_face_detector_as_a_direct_call(server, binary):
    image = np.random.default_rng(1).uniform(-1, 1, (1, 128, 128, 3)).astype(np.float32)
    outputs = [triton.InferRequestedOutput(n, binary_data=binary) for n in ("regressors", "classificators")]
    result = _client(server).infer(FACE, _inputs({"input": image}, binary), outputs=outputs)
    expected = _direct(server, FACE, {"input": image})
    for name, value in expected.items():
        assert result.as_numpy(name).dtype == value.dtype
        np.testing.assert_array_equal(result.as_numpy(name), value)


def test_a_signature_by_path_and_by_parameter(server):
    code = np.random.default_rng(2).standard_normal((1, 32)).astype(np.float32)
    scale = np.array([3], np.int32)
    client = _client(server)
    by_path = client.infer(f"{TWO}/decode", _inputs({"code": code, "scale": scale}, True))
    expected = _direct(server, TWO, {"code": code, "scale": scale}, "decode")
    for name, value in expected.items():
        np.testing.assert_array_equal(by_path.as_numpy(name), value)
    x = np.random.default_rng(3).standard_normal((1, 64)).astype(np.float32)
    by_parameter = client.infer(TWO, _inputs({"x": x}, False), parameters={"signature": "encode"})
    np.testing.assert_array_equal(by_parameter.as_numpy("code"), _direct(server, TWO, {"x": x}, "encode")["code"])


def test_health_metadata_and_repository(server):
    client = _client(server)
    assert client.is_server_live() and client.is_server_ready() and client.is_model_ready(FACE)
    metadata = client.get_model_metadata(FACE)
    assert metadata["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [1, 128, 128, 3]}]
    assert [o["name"] for o in metadata["outputs"]] == ["regressors", "classificators"]
    assert client.get_model_metadata(f"{TWO}/encode")["inputs"][0]["name"] == "x"
    assert {m["name"] for m in client.get_model_repository_index()} == {TWO, FACE}
    assert client.get_server_metadata()["name"] == "litegpu"


def _post(server, path, content, headers=None):
    return httpx.post(server.url + path, content=content, headers=headers or {}, timeout=60)


def _tensor(name="x", shape=(1, 64), datatype="FP32", data=None):
    return {"name": name, "shape": list(shape), "datatype": datatype,
            "data": data if data is not None else [0.5] * int(np.prod(shape))}


BAD_REQUESTS = [
    ("malformed JSON", f"/v2/models/{TWO}/encode/infer", b'{"inputs": [', "not valid JSON", 400),
    ("no inputs", f"/v2/models/{TWO}/encode/infer", {"inputs": []}, "inputs", 400),
    ("wrong dtype", f"/v2/models/{TWO}/encode/infer", {"inputs": [_tensor(datatype="INT32", data=[1] * 64)]},
     "is FP32; got INT32", 400),
    ("wrong shape", f"/v2/models/{TWO}/encode/infer", {"inputs": [_tensor(shape=(1, 63))]}, "has shape [1, 64]", 400),
    ("data of another size", f"/v2/models/{TWO}/encode/infer", {"inputs": [_tensor(data=[1.0] * 3)]},
     "takes 64 values; data holds 3", 400),
    ("strings as data", f"/v2/models/{TWO}/encode/infer", {"inputs": [_tensor(data=["a"] * 64)]},
     "holds string values", 400),
    ("unknown tensor", f"/v2/models/{TWO}/encode/infer", {"inputs": [_tensor(name="y")]}, "unknown: ['y']", 400),
    ("unknown model", "/v2/models/nope/infer", {"inputs": [_tensor()]}, "no model 'nope'", 404),
    ("unknown signature", f"/v2/models/{TWO}/nope/infer", {"inputs": [_tensor()]}, "no signature 'nope'", 404),
    ("unknown version", f"/v2/models/{TWO}/versions/7/infer", {"inputs": [_tensor()]}, "version 1 only", 404),
    ("unknown output", f"/v2/models/{TWO}/encode/infer", {"inputs": [_tensor()], "outputs": [{"name": "zz"}]},
     "no output 'zz'", 400),
    ("an LLM", "/v2/models/chat/infer", {"inputs": [_tensor()]}, "is an LLM", 400),
    ("out of range integers", f"/v2/models/{TWO}/decode/infer",
     {"inputs": [_tensor("code", (1, 32)), _tensor("scale", (1,), "INT32", [1 << 40])]}, "do not fit INT32", 400),
    ("BYTES", f"/v2/models/{TWO}/encode/infer", {"inputs": [_tensor(datatype="BYTES")]}, "datatype 'BYTES'", 400),
    ("negative dimension", f"/v2/models/{TWO}/encode/infer", {"inputs": [_tensor(shape=(-1, 64))]},
     "negative dimension", 400),
]


@pytest.mark.parametrize("what, path, body, message, status", BAD_REQUESTS, ids=[b[0] for b in BAD_REQUESTS])
def test_a_bad_request_is_a_4xx_protocol_error_and_the_server_stays_up(server, what, path, body, message, status):
    response = _post(server, path, body if isinstance(body, bytes) else json.dumps(body).encode())
    assert response.status_code == status, response.text
    assert message in response.json()["error"]
    assert httpx.get(server.url + "/v2/health/ready").status_code == 200


def test_binary_data_that_does_not_add_up_is_refused(server):
    header = json.dumps({"inputs": [{"name": "x", "shape": [1, 64], "datatype": "FP32",
                                     "parameters": {"binary_data_size": 256}}]}).encode()
    path = f"/v2/models/{TWO}/encode/infer"
    short = _post(server, path, header + bytes(100), {"Inference-Header-Content-Length": str(len(header))})
    assert short.status_code == 400 and "run past the body" in short.json()["error"]
    extra = _post(server, path, header + bytes(300), {"Inference-Header-Content-Length": str(len(header))})
    assert extra.status_code == 400 and "no input claims" in extra.json()["error"]
    lying = _post(server, path, header + bytes(256), {"Inference-Header-Content-Length": "99999"})
    assert lying.status_code == 400 and "Inference-Header-Content-Length" in lying.json()["error"]


def test_triton_client_raises_the_servers_message(server):
    with pytest.raises(InferenceServerException, match="has shape"):
        _client(server).infer(f"{TWO}/encode", _inputs({"x": np.zeros((1, 65), np.float32)}, True))


def test_model_paths():
    assert split_model_path("m") == ("m", None)
    assert split_model_path("m/encode") == ("m", "encode")
    assert split_model_path("m/encode/versions/1") == ("m", "encode")
    with pytest.raises(UnknownModelError):
        split_model_path("m/versions/2")
    with pytest.raises(RequestError):
        split_model_path("a/b/c")


def test_outputs_orjson_cannot_write_as_numbers_go_through_json():
    from litegpu.serve.protocol_v2 import InferRequest, encode_response

    request = InferRequest.model_validate({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [0]}]})
    finite, _ = encode_response("m", request, {"y": np.array([0.1, 2.5], np.float32)})
    assert json.loads(finite)["outputs"][0]["data"] == [0.1, 2.5]  # float32's shortest form, exact when read back
    special, _ = encode_response("m", request, {"y": np.array([np.nan, np.inf, 1.0], np.float32)})
    data = json.loads(special)["outputs"][0]["data"]
    assert np.isnan(data[0]) and data[1:] == [np.inf, 1.0]
