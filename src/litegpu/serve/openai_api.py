"""The OpenAI API for the LLMs served: ``GET /v1/models``, ``POST /v1/chat/completions`` and ``/v1/completions``,
streamed (server-sent events ending in ``data: [DONE]``) or not, with ``max_tokens``, ``temperature``, ``top_p``,
``top_k``, ``stop``, ``seed`` and ``usage``; the model's prompt template applied to chat messages.  Errors are
OpenAI's ``{"error": {"message", "type", "param", "code"}}`` with a 4xx status.  A client that disconnects
cancels its sequence at once (its KV-cache slot is freed).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import Request  # at module level: FastAPI resolves the routes' annotations here
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import RequestError


class _Part(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None


class _Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[_Part] | None = None


class _StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")
    include_usage: bool = False


class _Sampling(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str
    max_tokens: int | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=-1)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: _StreamOptions | None = None
    n: int = 1
    logprobs: bool | int | None = None


class ChatRequest(_Sampling):
    messages: list[_Message] = Field(min_length=1)
    max_completion_tokens: int | None = None
    tools: list[Any] | None = None


class CompletionRequest(_Sampling):
    prompt: str | list[str] | list[int]
    echo: bool = False


def parse(schema: type[BaseModel], body: bytes) -> Any:
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RequestError(f"the request is not valid JSON: {e}") from None
    try:
        request = schema.model_validate(document)
    except ValidationError as e:
        raise RequestError("; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'body'}: {err['msg']} (got "
                                     f"{_short(err.get('input'))})" for err in e.errors()[:5])) from None
    _refuse_unsupported(request)
    return request


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _refuse_unsupported(request: Any) -> None:
    if request.n != 1:
        raise RequestError(f"n must be 1 (one choice per request), got {request.n}")
    if request.logprobs:
        raise RequestError("logprobs are not supported")
    if getattr(request, "tools", None):
        raise RequestError("tools (function calling) are not supported")
    if getattr(request, "echo", False):
        raise RequestError("echo is not supported")
    stops = [request.stop] if isinstance(request.stop, str) else request.stop or []
    if len(stops) > 4:
        raise RequestError(f"stop takes at most 4 strings, got {len(stops)}")


def _messages(request: ChatRequest) -> list[dict[str, str]]:
    messages = []
    for i, m in enumerate(request.messages):
        if isinstance(m.content, list):
            if any(p.type != "text" or p.text is None for p in m.content):
                raise RequestError(f"messages.{i}.content: only text parts are supported")
            content = "".join(p.text or "" for p in m.content)
        else:
            content = m.content or ""
        messages.append({"role": "system" if m.role == "developer" else m.role, "content": content})
    return messages


def _sampling(request: Any) -> dict[str, Any]:
    top_k = request.top_k if request.top_k not in (None, -1, 0) else None
    top_p = request.top_p if request.top_p not in (None, 1) else None
    return {"temperature": float(request.temperature or 0.0), "top_k": top_k, "top_p": top_p, "seed": request.seed}


def _stops(request: Any) -> list[str]:
    return [request.stop] if isinstance(request.stop, str) else list(request.stop or [])


class _Completion:
    """One request's generation: the handle, its text stream, the pieces of its answer, its usage."""

    def __init__(self, service: Any, model: Any, prompt: list[int], request: Any, chat: bool):
        self.service, self.model, self.request, self.chat = service, model, request, chat
        asked = getattr(request, "max_completion_tokens", None) or request.max_tokens
        if not chat and asked is None:
            asked = min(16, max(model.new_tokens(len(prompt), None, service.config.limits), 1))  # OpenAI's default
        self.max_new = model.new_tokens(len(prompt), asked, service.config.limits)
        self.text = model.text_stream(_stops(request))
        self.handle = model.submit(prompt, self.max_new, _sampling(request))
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.started = time.perf_counter()
        self.closed = False

    async def pieces(self) -> AsyncIterator[str]:
        """The answer's text as it becomes final; ``self.text.finish_reason`` is set at the end."""
        try:
            async for token in self.handle:
                piece = self.text.add(int(token))
                if piece:
                    yield piece
                if self.text.finish_reason is not None:  # a stop string or token: no more tokens needed
                    break
            if self.text.finish_reason is None:
                piece = self.text.finish()
                if piece:
                    yield piece
        finally:
            self.close()

    def close(self) -> None:
        """Done, stopped by a stop string, or the client went away: free the sequence's slot (idempotent)."""
        self.handle.cancel()
        if not self.closed:
            self.closed = True
            self._record()

    def _record(self) -> None:
        metrics, name, handle = self.service.metrics, self.model.name, self.handle
        metrics.prompt_tokens.labels(name).inc(handle.prompt_tokens)
        metrics.generated_tokens.labels(name).inc(handle.generated)
        if handle.first_token_s is not None:
            metrics.first_token.labels(name).observe(handle.first_token_s)
            decoding = time.perf_counter() - self.started - handle.first_token_s
            if handle.generated > 1 and decoding > 0:
                metrics.tokens_per_second.labels(name).observe((handle.generated - 1) / decoding)

    def usage(self) -> dict[str, int]:
        return {"prompt_tokens": self.handle.prompt_tokens, "completion_tokens": self.handle.generated,
                "total_tokens": self.handle.prompt_tokens + self.handle.generated}

    def choice(self, text: str, finish_reason: str | None, delta: bool) -> dict[str, Any]:
        if not self.chat:
            return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        if delta:
            return {"index": 0, "delta": {"content": text} if text else {}, "logprobs": None,
                    "finish_reason": finish_reason}
        return {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                "finish_reason": finish_reason}

    def document(self, choices: list[dict[str, Any]], chunk: bool) -> dict[str, Any]:
        kind = ("chat.completion" if self.chat else "text_completion") + (".chunk" if chunk and self.chat else "")
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model.name, "choices": choices}


async def _cancel_on_disconnect(request: Any, completion: _Completion) -> None:
    """Wait for the client to go away (the body is already read), then cancel its sequence."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            completion.handle.cancel()
            return


async def _answer(completion: _Completion, request: Any) -> dict[str, Any]:
    watcher = asyncio.get_running_loop().create_task(_cancel_on_disconnect(request, completion))
    try:
        text = "".join([piece async for piece in completion.pieces()])
    finally:
        watcher.cancel()
    document = completion.document([completion.choice(text, completion.text.finish_reason, delta=False)], False)
    document["usage"] = completion.usage()
    return document


async def _events(completion: _Completion) -> AsyncIterator[str]:
    def event(document: dict[str, Any]) -> str:
        return f"data: {json.dumps(document, separators=(',', ':'))}\n\n"

    if completion.chat:
        first = completion.choice("", None, delta=True)
        first["delta"] = {"role": "assistant", "content": ""}
        yield event(completion.document([first], True))
    try:
        async for piece in completion.pieces():
            yield event(completion.document([completion.choice(piece, None, delta=True)], True))
        yield event(completion.document([completion.choice("", completion.text.finish_reason, delta=True)], True))
        options = completion.request.stream_options
        if options is not None and options.include_usage:
            last = completion.document([], True)
            last["usage"] = completion.usage()
            yield event(last)
    except Exception as e:  # noqa: BLE001 - the status is sent already: the error travels as an event
        yield event(error_document(str(e), 500))
    yield "data: [DONE]\n\n"


def error_document(message: str, status: int) -> dict[str, Any]:
    kinds = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
             413: "invalid_request_error", 503: "service_unavailable"}
    return {"error": {"message": message, "type": kinds.get(status, "server_error" if status >= 500 else
                                                             "invalid_request_error"),
                      "param": None, "code": {404: "model_not_found", 401: "invalid_api_key"}.get(status)}}


def add_routes(app: Any, service: Any) -> None:
    from fastapi.responses import StreamingResponse
    from starlette.background import BackgroundTask

    def model_card(name: str) -> dict[str, Any]:
        return {"id": name, "object": "model", "created": service.started, "owned_by": "litegpu"}

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [model_card(m.name) for m in service.language_models()]}

    @app.get("/v1/models/{name}")
    async def model(name: str) -> dict:
        return model_card(service.language_model(name).name)

    async def complete(request: Request, chat: bool) -> Any:
        parsed = parse(ChatRequest if chat else CompletionRequest, await service.read_body(request))
        model = service.language_model(parsed.model)
        if chat:
            prompt = model.chat_prompt(_messages(parsed))
        elif isinstance(parsed.prompt, list) and parsed.prompt and all(isinstance(p, int) for p in parsed.prompt):
            prompt = model.start_tokens + model.check_token_ids(parsed.prompt)
        elif isinstance(parsed.prompt, list):
            if len(parsed.prompt) != 1:
                raise RequestError(f"prompt: one prompt per request, got {len(parsed.prompt)}")
            prompt = model.text_prompt(parsed.prompt[0])
        else:
            prompt = model.text_prompt(parsed.prompt)
        completion = _Completion(service, model, prompt, parsed, chat)
        if parsed.stream:
            # the background task frees the slot of a client gone before the first event was sent
            return StreamingResponse(_events(completion), media_type="text/event-stream",
                                     headers={"cache-control": "no-cache"}, background=BackgroundTask(completion.close))
        return await _answer(completion, request)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        return await complete(request, chat=True)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        return await complete(request, chat=False)


__all__ = ["ChatRequest", "CompletionRequest", "add_routes", "error_document"]
