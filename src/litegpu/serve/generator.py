"""The LLM generator the server submits sequences to: ``runtime.continuous.ContinuousBatcher`` (sequences decoded
together, each in its own KV-cache slot) where this build has it, else ``SerialGenerator``, which has the same
interface and runs one sequence at a time through ``litegpu.generate_stream``.

    generator = make_generator(model, max_sequences=32)
    handle = generator.submit(prompt_tokens, max_new_tokens, temperature=0.0, stop_tokens=(2,))
    async for token in handle: ...        # or: for token in handle
    handle.cancel()                       # a client that went away: its slot is freed at once
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

from ..errors import ClosedError, InvalidArgumentError


def make_generator(model: Any, max_sequences: int, **conventions: Any) -> Any:
    """The continuous batcher when ``litegpu.runtime.continuous`` exists, else the serial generator."""
    try:
        from ..runtime.continuous import ContinuousBatcher
    except ImportError:
        return SerialGenerator(model, max_sequences, **conventions)
    return ContinuousBatcher(model, max_sequences, **conventions)


class SerialHandle:
    """One submitted sequence: its tokens as they come, from threads (``for``) or asyncio (``async for``)."""

    def __init__(self, prompt_tokens: list[int], max_new_tokens: int, options: dict[str, Any]):
        self.prompt = prompt_tokens
        self.prompt_tokens = len(prompt_tokens)
        self.max_new_tokens = max_new_tokens
        self.options = options
        self.generated = 0
        self.first_token_s: float | None = None
        self.submitted = time.perf_counter()
        self.cancelled = False
        self._tokens: list[int] = []
        self._finished = False
        self._error: BaseException | None = None
        self._lock = threading.Condition()
        self._wakers: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    # ---- the generator's side --------------------------------------------------------------
    def _push(self, token: int) -> None:
        with self._lock:
            if self.first_token_s is None:
                self.first_token_s = time.perf_counter() - self.submitted
            self._tokens.append(token)
            self.generated += 1
            self._wake()

    def _finish(self, error: BaseException | None = None) -> None:
        with self._lock:
            self._finished, self._error = True, error
            self._wake()

    def _wake(self) -> None:
        self._lock.notify_all()
        for loop, event in self._wakers:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # its loop closed (the server stopped): nobody is waiting there any more
                pass

    # ---- the consumer's side ---------------------------------------------------------------
    def cancel(self) -> None:
        """Stop generating this sequence (idempotent); its iterators end."""
        with self._lock:
            self.cancelled = True
            if not self._finished:
                self._finished = True
                self._wake()

    def __iter__(self) -> Iterator[int]:
        seen = 0
        while True:
            with self._lock:
                while len(self._tokens) <= seen and not self._finished:
                    self._lock.wait()
                if len(self._tokens) > seen:
                    token = self._tokens[seen]
                elif self._error is not None:
                    raise self._error
                else:
                    return
            seen += 1
            yield token

    def __aiter__(self) -> AsyncIterator[int]:
        return self._tokens_async()

    async def _tokens_async(self) -> AsyncIterator[int]:
        event = asyncio.Event()
        waker = (asyncio.get_running_loop(), event)
        with self._lock:
            self._wakers.append(waker)
        seen = 0
        try:
            while True:
                with self._lock:
                    ready = len(self._tokens) > seen
                    token = self._tokens[seen] if ready else None
                    if not ready:
                        if self._finished:
                            if self._error is not None:
                                raise self._error
                            return
                        event.clear()  # under the lock: a token pushed after this sets it again
                if ready:
                    seen += 1
                    yield token
                else:
                    await event.wait()
        finally:
            with self._lock:
                self._wakers.remove(waker)


class SerialGenerator:
    """``ContinuousBatcher``'s interface over ``generate_stream``: one sequence decodes at a time, the others wait
    in order; a cancelled sequence stops at its next token (a waiting one never starts)."""

    def __init__(self, model: Any, max_sequences: int = 32, *, prefill_signature: str = "prefill",
                 decode_signature: str = "decode", tokens_input: str = "tokens", position_input: str = "input_pos",
                 logits_output: str = "logits", pad_token: int = 0):
        self.model, self.max_sequences = model, max_sequences
        self.conventions = dict(prefill_signature=prefill_signature, decode_signature=decode_signature,
                                tokens_input=tokens_input, position_input=position_input,
                                logits_output=logits_output, pad_token=pad_token)
        self._queue: queue.Queue[SerialHandle | None] = queue.Queue()
        self._active: SerialHandle | None = None
        self._tokens_generated = 0
        self._closed = False
        self._worker = threading.Thread(target=self._work, name="litegpu-llm", daemon=True)
        self._worker.start()

    def submit(self, prompt_tokens: Iterable[int], max_new_tokens: int, *, temperature: float = 0.0,
               top_k: int | None = None, top_p: float | None = None, seed: int | None = None,
               stop_tokens: Iterable[int] = ()) -> SerialHandle:
        if self._closed:
            raise ClosedError("the generator was closed")
        prompt = [int(t) for t in prompt_tokens]
        if not prompt:
            raise InvalidArgumentError("a sequence needs at least one prompt token")
        if max_new_tokens < 1:
            raise InvalidArgumentError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
        if top_p is not None and top_p < 1:
            raise InvalidArgumentError("top_p below 1 needs continuous batching (litegpu.runtime.continuous), "
                                       "which this build lacks; use top_k")
        from ..runtime.generate import cache_length

        length = cache_length(self.model, self.conventions["decode_signature"])
        if length is not None and len(prompt) + max_new_tokens - 1 > length:
            raise InvalidArgumentError(f"{len(prompt)} prompt tokens + {max_new_tokens} new ones need "
                                       f"{len(prompt) + max_new_tokens - 1} cache rows; the model's cache holds "
                                       f"{length}")
        handle = SerialHandle(prompt, max_new_tokens, dict(temperature=temperature, top_k=top_k, seed=seed,
                                                           stop_tokens=tuple(int(t) for t in stop_tokens)))
        self._queue.put(handle)
        return handle

    def _work(self) -> None:
        from ..runtime.generate import generate_stream

        while True:
            handle = self._queue.get()
            if handle is None:
                return
            if handle.cancelled:
                continue
            self._active = handle
            tokens = generate_stream(self.model, handle.prompt, handle.max_new_tokens, **handle.options,
                                     **self.conventions)
            try:
                for token in tokens:
                    if handle.cancelled:
                        break
                    handle._push(int(token))
                    self._tokens_generated += 1
                handle._finish()
            except BaseException as e:  # noqa: BLE001 - the sequence's own error, raised to its reader
                handle._finish(e)
            finally:
                tokens.close()  # an abandoned generation releases the cache it kept
                self._active = None

    def stats(self) -> dict[str, int]:
        waiting = sum(1 for h in list(self._queue.queue) if h is not None and not h.cancelled)
        active = self._active
        return {"active": int(active is not None and not active.cancelled), "waiting": waiting,
                "tokens_generated": self._tokens_generated, "max_sequences": self.max_sequences}

    def close(self) -> None:
        """Stop the worker; sequences still waiting or running end with a ClosedError."""
        if self._closed:
            return
        self._closed = True
        active = self._active
        if active is not None:
            active.cancel()
        while True:
            try:
                waiting = self._queue.get_nowait()
            except queue.Empty:
                break
            if waiting is not None:
                waiting._finish(ClosedError("the server stopped before this sequence ran"))
        self._queue.put(None)
        self._worker.join(timeout=30)


__all__ = ["SerialGenerator", "SerialHandle", "make_generator"]
