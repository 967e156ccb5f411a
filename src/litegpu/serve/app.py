"""The server: one ASGI application (FastAPI) serving every model named at start, run by uvicorn.

    service = Service(ServeConfig(model_specs(["model.tflite", "chat=gemma.litertlm"])))
    run(service)                 # blocks; SIGTERM / Ctrl-C drains: requests in flight finish, new ones get 503

Routes: the Open Inference Protocol v2 for tensor models (``protocol_v2``), the OpenAI API for LLMs
(``openai_api``), ``/health`` and ``/metrics`` (Prometheus).  Before any route: the API key (constant-time
comparison, 401), the draining state (503), the body limit (413).  The server is live at once and ready (and
its models answer) once every model is loaded and compiled; ``/v2/health/ready`` says which.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import socket
import threading
import time
import zlib
from typing import Any

from ..errors import (LiteGpuError, PayloadTooLargeError, RequestError, ServiceUnavailableError, UnauthorizedError,
                      UnknownModelError)
from .config import ServeConfig
from .metrics import Metrics

log = logging.getLogger("litegpu.serve")
# answered while the server loads or drains: a probe must see "alive" whatever else it is doing
_ALWAYS_ANSWERED = frozenset({"/v2/health/live", "/health"})


def hardware_accel(spec: str) -> Any:
    """``cpu``, ``gpu`` or ``gpu,cpu`` as HardwareAccelerator flags."""
    from ..errors import InvalidArgumentError
    from ..runtime.options import HardwareAccelerator

    names = {p.strip().lower() for p in spec.split(",") if p.strip()}
    if not names or names - {"cpu", "gpu"}:
        raise InvalidArgumentError(f"accelerator {spec!r}: expected cpu, gpu or gpu,cpu")
    flags = HardwareAccelerator.CPU if "cpu" in names else None
    if "gpu" in names:
        flags = HardwareAccelerator.GPU if flags is None else HardwareAccelerator.GPU | flags
    return flags


class Service:
    """The models, their state (loading, ready, draining, failed), the requests in flight and the metrics."""

    def __init__(self, config: ServeConfig):
        self.config = config
        self.metrics = Metrics()
        self.models: dict[str, Any] = {}
        self.ready = False
        self.draining = False
        self.failed: str | None = None
        self.inflight = 0
        self.started = int(time.time())
        self._loader: threading.Thread | None = None
        self._stopped = False

    # ---- loading ---------------------------------------------------------------------------
    def load(self) -> None:
        """Load, compile and warm up every model (a thread of its own: the server is live meanwhile)."""
        from ..runtime.compiled_model import CompiledModel
        from ..runtime.options import Options
        from .language_model import LanguageModel
        from .tensor_model import TensorModel

        config = self.config
        options = Options(hardware_accel(config.accelerator), serialization_dir=config.cache_dir)
        for spec in config.models:
            started = time.perf_counter()
            if spec.is_bundle:
                model: Any = LanguageModel.from_bundle(spec.name, spec.path, max_sequences=config.max_sequences,
                                                       options=options)
            elif spec.tokenizer is not None:
                model = LanguageModel.from_export(spec.name, spec.path, spec.tokenizer,
                                                  max_sequences=config.max_sequences, options=options)
            else:
                model = TensorModel(spec.name, CompiledModel.from_file(str(spec.path), options=options),
                                    mode=config.batching, max_batch=config.max_batch,
                                    max_delay_s=config.max_delay_ms / 1e3, metrics=self.metrics)
            self.models[spec.name] = model
            model.warm_up()
            if model.kind == "llm":
                self.metrics.llm_gauges(spec.name, model.generator.stats)
            log.info("%s: %s loaded from %s in %.1f s", spec.name, model.kind, spec.path,
                     time.perf_counter() - started)

    def load_in_background(self, loop: asyncio.AbstractEventLoop) -> None:
        def work() -> None:
            try:
                self.load()
            except Exception as e:  # noqa: BLE001 - reported, and the server stops (``failed``)
                self.failed = f"{type(e).__name__}: {e}" if not isinstance(e, LiteGpuError) else str(e)
                log.error("loading the models failed: %s", self.failed)
                return
            loop.call_soon_threadsafe(self._start)

        self._loader = threading.Thread(target=work, name="litegpu-load", daemon=True)
        self._loader.start()

    def _start(self) -> None:
        if self.draining or self._stopped:
            return
        for model in self.models.values():
            if model.kind == "tensor":
                model.start()
        self.ready = True
        self.metrics.ready.set(1)
        log.info("ready: %s", ", ".join(f"{n} ({m.kind})" for n, m in self.models.items()))

    async def stop(self) -> None:
        self._stopped = True
        self.ready = False
        self.metrics.ready.set(0)
        if self._loader is not None:
            # stopped while loading: a thread killed inside XLA's compiler at exit would abort the process
            await asyncio.to_thread(self._loader.join)
        for model in self.models.values():
            if model.kind == "tensor":
                await model.close()
            else:
                model.close()

    # ---- models ----------------------------------------------------------------------------
    def _model(self, name: str) -> Any:
        if name not in (spec.name for spec in self.config.models):
            raise UnknownModelError(f"no model {name!r}; this server serves {[s.name for s in self.config.models]}")
        if not self.ready:
            raise ServiceUnavailableError(f"model {name!r} is still loading")
        return self.models[name]

    def tensor_model(self, name: str) -> Any:
        model = self._model(name)
        if model.kind != "tensor":
            raise RequestError(f"model {name!r} is an LLM: it answers the OpenAI API (/v1/chat/completions)")
        return model

    def language_model(self, name: str) -> Any:
        model = self._model(name)
        if model.kind != "llm":
            raise RequestError(f"model {name!r} is not an LLM: it answers the inference protocol "
                               f"(/v2/models/{name}/infer)")
        return model

    def tensor_models(self) -> list[Any]:
        return [m for m in self.models.values() if m.kind == "tensor"]

    def language_models(self) -> list[Any]:
        return [m for m in self.models.values() if m.kind == "llm"]

    # ---- requests --------------------------------------------------------------------------
    async def read_body(self, request: Any) -> bytes:
        """The request body, at most ``max_body_bytes`` (after gzip / deflate, as Triton's clients send it)."""
        limit = self.config.limits.max_body_bytes
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise PayloadTooLargeError(f"the request body is over the server's limit of {limit} bytes")
            chunks.append(chunk)
        body = b"".join(chunks)
        encoding = request.headers.get("content-encoding", "identity").lower()
        if encoding == "identity":
            return body
        if encoding not in ("gzip", "deflate"):
            raise RequestError(f"Content-Encoding {encoding!r}: this server reads gzip and deflate", status=415)
        inflate = zlib.decompressobj(wbits=31 if encoding == "gzip" else 15)
        try:
            data = inflate.decompress(body, limit + 1)
        except zlib.error as e:
            raise RequestError(f"the {encoding} body does not decompress: {e}") from None
        if len(data) > limit or inflate.unconsumed_tail:
            raise PayloadTooLargeError(f"the decompressed body is over the server's limit of {limit} bytes")
        return data


def _protocol(path: str) -> str:
    return "openai" if path.startswith("/v1") else "v2" if path.startswith("/v2") else "other"


def error_body(path: str, status: int, message: str) -> dict[str, Any]:
    """The protocol's own error object: OpenAI's under /v1, ``{"error": "..."}`` elsewhere."""
    if _protocol(path) == "openai":
        from .openai_api import error_document

        return error_document(message, status)
    return {"error": message}


class _Guard:
    """ASGI middleware before every route: API key, draining, body size; the requests in flight and their
    metrics."""

    def __init__(self, app: Any, service: Service):
        self.app, self.service = app, service
        key = service.config.api_key
        self.expected = f"Bearer {key}".encode() if key is not None else None

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        service, path = self.service, scope["path"]
        protocol = _protocol(path)
        started = time.perf_counter()
        status = {"code": 500}

        async def tracked(message: dict) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        refusal = self._refusal(scope)
        if refusal is not None:
            await self._reject(path, refusal, tracked)
        else:
            service.inflight += 1
            try:
                await self.app(scope, receive, tracked)
            finally:
                service.inflight -= 1
        code = str(status["code"])
        service.metrics.requests.labels(protocol, code).inc()
        if status["code"] >= 400:
            service.metrics.errors.labels(protocol, code).inc()
        service.metrics.latency.labels(protocol).observe(time.perf_counter() - started)

    def _refusal(self, scope: dict) -> RequestError | None:
        headers = dict(scope["headers"])
        if self.expected is not None:
            given = headers.get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                return UnauthorizedError("this server needs its API key: Authorization: Bearer <key>")
        if self.service.draining and scope["path"] not in _ALWAYS_ANSWERED:
            return ServiceUnavailableError("the server is shutting down")
        length = headers.get(b"content-length")
        limit = self.service.config.limits.max_body_bytes
        if length is not None and length.isdigit() and int(length) > limit:
            return PayloadTooLargeError(f"the request body is {int(length)} bytes; the server's limit is {limit}")
        return None

    @staticmethod
    async def _reject(path: str, error: RequestError, send: Any) -> None:
        from starlette.responses import JSONResponse

        headers = {"www-authenticate": "Bearer"} if error.status == 401 else {}
        if error.status in (413, 503):
            headers["connection"] = "close"  # the body is not read: the connection cannot carry another request
        response = JSONResponse(error_body(path, error.status, str(error)), status_code=error.status, headers=headers)
        await response({"type": "http"}, _no_body, send)


async def _no_body() -> dict:
    return {"type": "http.disconnect"}


def create_app(service: Service) -> Any:
    """The ASGI application; its lifespan loads the models in the background at start-up and closes them at the
    end."""
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, Response
    from starlette.exceptions import HTTPException

    from ..version import __version__
    from . import openai_api, protocol_v2

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> Any:
        service.load_in_background(asyncio.get_running_loop())
        yield
        await service.stop()

    app = FastAPI(title="litegpu", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)

    def error(request: Request, status: int, message: str) -> JSONResponse:
        return JSONResponse(error_body(request.url.path, status, message), status_code=status)

    @app.exception_handler(RequestError)
    async def refused(request: Request, e: RequestError) -> JSONResponse:
        return error(request, e.status, str(e))

    @app.exception_handler(LiteGpuError)
    async def invalid(request: Request, e: LiteGpuError) -> JSONResponse:
        return error(request, 400, str(e))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, e: HTTPException) -> JSONResponse:
        message = f"no route {request.method} {request.url.path}" if e.status_code in (404, 405) else str(e.detail)
        return error(request, e.status_code, message)

    @app.exception_handler(RequestValidationError)
    async def validation(request: Request, e: RequestValidationError) -> JSONResponse:
        return error(request, 400, str(e))

    @app.exception_handler(Exception)
    async def internal(request: Request, e: Exception) -> JSONResponse:
        log.exception("internal error on %s", request.url.path)
        return error(request, 500, f"internal error: {type(e).__name__}: {e}")

    @app.get("/health")
    async def health() -> Response:
        state = "failed" if service.failed else "draining" if service.draining else \
            "ready" if service.ready else "loading"
        return JSONResponse({"status": state, "models": {n: m.kind for n, m in service.models.items()}},
                            status_code=200 if state != "failed" else 500)

    @app.get("/metrics")
    async def metrics() -> Response:
        content, media_type = service.metrics.exposition()
        return Response(content, media_type=media_type)

    protocol_v2.add_routes(app, service)
    openai_api.add_routes(app, service)
    app.add_middleware(_Guard, service=service)
    return app


def _uvicorn_server(service: Service, app: Any, host: str, port: int, log_level: str) -> Any:
    import uvicorn

    class DrainingServer(uvicorn.Server):
        """uvicorn's server, which on the first SIGTERM / SIGINT drains (new requests get 503, those in flight
        finish, for up to ``grace_s``) before it stops; a second signal stops it at once."""

        drain_started: float | None = None

        def handle_exit(self, sig: int, frame: Any) -> None:
            if service.draining:
                return super().handle_exit(sig, frame)
            service.draining = True
            service.ready = False
            service.metrics.ready.set(0)
            self.drain_started = time.monotonic()
            log.info("draining: %d request(s) in flight", service.inflight)

        async def on_tick(self, counter: int) -> bool:
            if service.failed:
                self.should_exit = True
            if self.drain_started is not None and (
                    service.inflight == 0 or time.monotonic() - self.drain_started > service.config.grace_s):
                self.should_exit = True
            return await super().on_tick(counter)

    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False,
                            timeout_graceful_shutdown=max(service.config.grace_s, 1), lifespan="on")
    return DrainingServer(config)


def run(service: Service, *, log_level: str = "info", sockets: list[socket.socket] | None = None) -> None:
    """Serve until SIGTERM / SIGINT (then drain); a model that fails to load stops the server with its error."""
    config = service.config
    server = _uvicorn_server(service, create_app(service), config.host, config.port, log_level)
    server.run(sockets=sockets)
    if service.failed:
        raise LiteGpuError(service.failed)


class ServerThread:
    """A server on 127.0.0.1 in a thread of this process, on a free port: for tests and benchmarks.

        with ServerThread(config) as server:   # returns once every model is ready
            requests.get(server.url + "/v2/health/ready")
    """

    def __init__(self, config: ServeConfig, *, ready_timeout_s: float = 600, log_level: str = "warning"):
        self.config, self.ready_timeout_s = config, ready_timeout_s
        self.service = Service(config)
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.port = self._socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._server = _uvicorn_server(self.service, create_app(self.service), "127.0.0.1", self.port, log_level)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]},
                                        name="litegpu-server", daemon=True)

    def __enter__(self) -> "ServerThread":
        self._thread.start()
        deadline = time.monotonic() + self.ready_timeout_s
        while not self.service.ready:
            if self.service.failed:
                self.stop()
                raise LiteGpuError(self.service.failed)
            if time.monotonic() > deadline or not self._thread.is_alive():
                self.stop()
                raise LiteGpuError(f"the server was not ready after {self.ready_timeout_s} s")
            time.sleep(0.05)
        return self

    def drain(self) -> None:
        """What SIGTERM does to ``litegpu serve``."""
        self._server.handle_exit(15, None)

    def stop(self, timeout_s: float = 60) -> None:
        self._server.should_exit = True
        self._thread.join(timeout_s)
        self._socket.close()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


__all__ = ["ServerThread", "Service", "create_app", "error_body", "hardware_accel", "run"]
