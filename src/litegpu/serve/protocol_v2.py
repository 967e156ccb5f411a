"""The Open Inference Protocol (v2, KServe's and Triton's REST API) for every ``.tflite`` / ``.circle`` model.

    GET  /v2                                  server metadata
    GET  /v2/health/live, /v2/health/ready    200 when live / when every model is loaded
    GET  /v2/models/{name}[/{signature}]      model metadata (inputs, outputs, datatypes, shapes)
    GET  /v2/models/{name}/ready
    POST /v2/models/{name}[/{signature}]/infer    (also .../versions/1/infer; or parameters.signature)
    POST /v2/repository/index                 the models served (Triton's repository extension)

Tensors travel as JSON (``data``, row-major, flat or nested) or through the binary tensor data extension: the
JSON header is the first ``Inference-Header-Content-Length`` bytes of the body, and each tensor whose
``parameters.binary_data_size`` is set follows it, raw, in order.  Outputs come back as JSON, or binary where
the request asks (``outputs[i].parameters.binary_data``, or ``parameters.binary_data_output``).  Errors are
the protocol's ``{"error": "..."}`` with a 4xx status.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import orjson  # 6x json's speed reading tensors, 100x writing them (numpy arrays written directly)
from fastapi import Request, Response  # at module level: FastAPI resolves the routes' annotations here
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import RequestError, UnknownModelError
from .tensor_model import TensorModel, numpy_dtype, protocol_datatype

HEADER_LENGTH = "Inference-Header-Content-Length"
VERSION = "1"


class _Tensor(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    shape: list[int]
    datatype: str
    parameters: dict[str, Any] | None = None
    data: Any = None


class _Output(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    parameters: dict[str, Any] | None = None


class InferRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str | None = None
    parameters: dict[str, Any] | None = None
    inputs: list[_Tensor] = Field(min_length=1)
    outputs: list[_Output] | None = None


def split_model_path(path: str) -> tuple[str, str | None]:
    """``name``, ``name/signature``, ``name/versions/V`` or ``name/signature/versions/V`` -> (name, signature)."""
    parts = path.split("/")
    if len(parts) >= 3 and parts[-2] == "versions":
        if parts[-1] != VERSION:
            raise UnknownModelError(f"model {'/'.join(parts[:-2])!r} has version {VERSION} only, not {parts[-1]!r}")
        parts = parts[:-2]
    if len(parts) == 1:
        return parts[0], None
    if len(parts) == 2:
        return parts[0], parts[1]
    raise UnknownModelError(f"no model {path!r}: name a model as NAME or NAME/SIGNATURE")


def parse_request(body: bytes, header_length: str | None) -> tuple[InferRequest, memoryview]:
    """The JSON header and the binary tensor data after it."""
    view = memoryview(body)
    if header_length is not None:
        try:
            length = int(header_length)
        except ValueError:
            raise RequestError(f"{HEADER_LENGTH} {header_length!r} is not a byte count") from None
        if not 0 < length <= len(body):
            raise RequestError(f"{HEADER_LENGTH} is {length}; the body holds {len(body)} bytes")
        head, binary = view[:length], view[length:]
    else:
        head, binary = view, view[len(body):]
    try:
        document = orjson.loads(head)
    except orjson.JSONDecodeError as e:
        raise RequestError(f"the request is not valid JSON: {e}") from None
    try:
        return InferRequest.model_validate(document), binary
    except ValidationError as e:
        raise RequestError(f"the request is not an inference request: {_validation_message(e)}") from None


def _validation_message(error: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in error.errors()[:5])


def decode_inputs(request: InferRequest, binary: memoryview, model: TensorModel,
                  max_tensor_bytes: int) -> dict[str, np.ndarray]:
    """Each input tensor as a numpy array of its declared shape and datatype."""
    inputs: dict[str, np.ndarray] = {}
    offset = 0
    for tensor in request.inputs:
        if tensor.name in inputs:
            raise RequestError(f"input {tensor.name!r} is given twice")
        dtype = numpy_dtype(tensor.datatype)
        size = model.tensor_bytes(tensor.shape, dtype, tensor.name, max_tensor_bytes)
        binary_size = (tensor.parameters or {}).get("binary_data_size")
        if binary_size is not None:
            if not isinstance(binary_size, int) or binary_size != size:
                raise RequestError(f"input {tensor.name!r}: binary_data_size {binary_size!r}, but shape "
                                   f"{tensor.shape} of {tensor.datatype} is {size} bytes")
            if offset + size > len(binary):
                raise RequestError(f"input {tensor.name!r}: its {size} bytes run past the body's binary data "
                                   f"({len(binary) - offset} left)")
            array = np.frombuffer(binary[offset:offset + size], dtype).reshape(tensor.shape)
            offset += size
        elif tensor.data is None:
            raise RequestError(f"input {tensor.name!r} has neither data nor parameters.binary_data_size")
        else:
            array = _from_json(tensor.name, tensor.data, dtype, tensor.shape)
        inputs[tensor.name] = array
    if offset != len(binary):
        raise RequestError(f"the body holds {len(binary) - offset} bytes of binary data no input claims")
    return inputs


def _from_json(name: str, data: Any, dtype: np.dtype, shape: list[int]) -> np.ndarray:
    try:
        raw = np.asarray(data)
    except ValueError as e:  # ragged nesting
        raise RequestError(f"input {name!r}: data is not a regular array: {e}") from None
    if raw.dtype.kind not in _JSON_KINDS[dtype.kind]:
        raise RequestError(f"input {name!r} is {protocol_datatype(dtype)}; its data holds "
                           f"{_KIND_NAMES.get(raw.dtype.kind, raw.dtype.name)} values")
    if raw.size != math.prod(shape):
        raise RequestError(f"input {name!r}: shape {shape} takes {math.prod(shape)} values; data holds {raw.size}")
    if dtype.kind in "iu" and raw.size:
        info = np.iinfo(dtype)
        if raw.min() < info.min or raw.max() > info.max:
            raise RequestError(f"input {name!r}: values {raw.min()}..{raw.max()} do not fit "
                               f"{protocol_datatype(dtype)}")
    return raw.astype(dtype).reshape(shape)


# JSON values each tensor kind takes: booleans for BOOL, integers for integers, numbers for floats
_JSON_KINDS = {"b": "b", "i": "iu", "u": "iu", "f": "iuf", "V": "iuf"}
_KIND_NAMES = {"U": "string", "O": "mixed or null", "f": "float", "b": "boolean", "i": "integer", "u": "integer"}


def requested_outputs(request: InferRequest, produced: dict[str, np.ndarray]) -> list[tuple[str, bool]]:
    """(output name, as binary) in the order asked, or every output in the model's order."""
    default = bool((request.parameters or {}).get("binary_data_output", False))
    if not request.outputs:
        return [(name, default) for name in produced]
    chosen = []
    for output in request.outputs:
        if output.name not in produced:
            raise RequestError(f"no output {output.name!r}; the model gives {list(produced)}")
        chosen.append((output.name, bool((output.parameters or {}).get("binary_data", default))))
    return chosen


def encode_response(model_name: str, request: InferRequest, produced: dict[str, np.ndarray]
                    ) -> tuple[bytes, dict[str, str]]:
    """The response body and its headers (``Inference-Header-Content-Length`` when binary data follows)."""
    outputs, blobs = [], []
    for name, binary in requested_outputs(request, produced):
        array = np.asarray(produced[name])
        entry: dict[str, Any] = {"name": name, "datatype": protocol_datatype(array.dtype), "shape": list(array.shape)}
        if binary:
            blob = np.ascontiguousarray(array).tobytes()
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            entry["data"] = np.ascontiguousarray(array.reshape(-1))
        outputs.append(entry)
    document: dict[str, Any] = {"model_name": model_name, "model_version": VERSION, "outputs": outputs}
    if request.id is not None:
        document["id"] = request.id
    head = _dumps(document)
    if not blobs:
        return head, {"content-type": "application/json"}
    return b"".join([head, *blobs]), {"content-type": "application/octet-stream", HEADER_LENGTH: str(len(head))}


def _dumps(document: dict[str, Any]) -> bytes:
    """orjson with the arrays written directly; json (lists) for what orjson cannot write as numbers: NaN and
    infinities (orjson would write null), bfloat16."""
    arrays = [o["data"] for o in document["outputs"] if "data" in o]
    if all(a.dtype.name != "bfloat16" and (a.dtype.kind != "f" or np.isfinite(a).all()) for a in arrays):
        return orjson.dumps(document, option=orjson.OPT_SERIALIZE_NUMPY)
    for o in document["outputs"]:
        if "data" in o:
            o["data"] = o["data"].astype(np.float32).tolist() if o["data"].dtype.name == "bfloat16" \
                else o["data"].tolist()
    return json.dumps(document, separators=(",", ":")).encode()


def add_routes(app: Any, service: Any) -> None:
    """The protocol's routes on ``app`` (a FastAPI application) over ``service``'s models."""
    from fastapi.responses import JSONResponse

    from ..version import __version__

    @app.get("/v2")
    async def server_metadata() -> dict:
        return {"name": "litegpu", "version": __version__, "extensions": ["binary_tensor_data", "model_repository"]}

    @app.get("/v2/health/live")
    async def live() -> dict:
        return {"live": True}

    @app.get("/v2/health/ready")
    async def ready() -> Response:
        return JSONResponse({"ready": service.ready}, status_code=200 if service.ready else 503)

    @app.post("/v2/repository/index")
    async def repository_index() -> list:
        return [{"name": m.name, "version": VERSION, "state": "READY" if service.ready else "LOADING"}
                for m in service.tensor_models()]

    @app.post("/v2/models/{path:path}/infer")
    async def infer(path: str, request: Request) -> Response:
        name, signature = split_model_path(path)
        model = service.tensor_model(name)
        body = await service.read_body(request)
        parsed, binary = parse_request(body, request.headers.get(HEADER_LENGTH))
        asked = (parsed.parameters or {}).get("signature")
        if asked is not None and signature is not None and asked != signature:
            raise RequestError(f"the path names signature {signature!r}, parameters.signature {asked!r}")
        key = model.signature(signature if signature is not None else asked)
        inputs = decode_inputs(parsed, binary, model, service.config.limits.max_tensor_bytes)
        produced = await model.infer(key, inputs)
        content, headers = encode_response(name, parsed, produced)
        return Response(content, headers=headers)

    @app.get("/v2/models/{path:path}/ready")
    async def model_ready(path: str) -> Response:
        name, signature = split_model_path(path)
        service.tensor_model(name).signature(signature)
        return JSONResponse({"name": name, "ready": service.ready}, status_code=200 if service.ready else 503)

    @app.get("/v2/models/{path:path}")
    async def model_metadata(path: str) -> dict:
        name, signature = split_model_path(path)
        return service.tensor_model(name).metadata(signature)


__all__ = ["HEADER_LENGTH", "InferRequest", "add_routes", "decode_inputs", "encode_response", "parse_request",
           "split_model_path"]
