"""Continuous batching of LLM requests: concurrent sequences decode together, one token each per step.

    batcher = ContinuousBatcher(model, max_sequences=32)      # model: a CompiledModel with prefill/decode
    handle = batcher.submit(prompt_tokens, max_new_tokens=64, temperature=0.7, top_p=0.9, seed=1)
    for token in handle: ...                                 # or: async for token in handle
    handle.cancel()                                          # frees the sequence's KV slot at once
    batcher.close()

``submit`` is thread-safe and returns at once; one scheduler thread runs the model.  Sequences join the running
batch after their own prefill (one prompt at a time, the KV cache then written into a free slot) and leave it at
a stop token (included), at ``max_new_tokens``, or when cancelled.  The model's conventions are the ones
``litegpu.generate_stream`` reads from its signatures (litert-torch's included: ``prefill_<T>`` signatures,
prefill without logits, ``input_pos`` per token, a mask input, either cache layout).

Where one XLA program runs the decode signature (a model wholly on the GPU, or on XLA CPU), every step is one
launch for all sequences (``backends.xla.batched_decode``): the decode step vmapped over sequences, the weights
read once per step for all of them, the KV caches stacked on the device with one slot per sequence, each at its
own position with its own sampling.  Slot counts compile to a few sizes (1, 2, 4, ... up to
``max_sequences``); the tokens stay on the device from one step to the next, and each step is dispatched before
the previous step's tokens are read.  A sequence's greedy tokens are the ones ``litegpu.generate`` gives it
alone, and a seeded one draws the same tokens ``generate`` draws for that seed, whatever it shares the batch with:
its slot computes what the single-sequence program does, and the other slots never enter its values.  Bit for bit
alone (one slot runs the single-sequence program) and in the tests' float decoders at any batch size; XLA may sum
a batch's products in another order than one sequence's, so a model can differ in the last bit, which a
dynamic-range (int8 activations) model can turn into a quantization step and, rarely, another token
(BENCHMARKS.md, "Continuous batching of LLM requests").

Where the decode signature runs on a host engine (the official interpreter with XNNPACK, the fast path's choice
for small models on the CPU) or in several parts, the batcher still serves every sequence, by interleaving them:
one decode call per sequence and step, each with its own cache.  That is correct (the tokens ``generate`` gives
each) but not faster than one sequence at a time.  ``stats()["engine"]`` says which.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import secrets
import threading
import time
import weakref
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

import numpy as np

from ..backends.decoding import COUNTER, POSITION, SEED, TEMPERATURE, TOP_K, TOP_P, bucket_for, slot_buckets
from ..errors import ClosedError, InvalidArgumentError, LiteGpuError, ModelExecutionError
from .generate import _Loop, _prefill, _softmax_sample, check_sampling, generate_stream

BATCHED, INTERLEAVED = "xla-batched", "interleaved"
# batchers not closed yet: closed at exit, so that no scheduler thread is stopped inside XLA as the process ends
_OPEN: "weakref.WeakSet[ContinuousBatcher]" = weakref.WeakSet()


@atexit.register
def _close_open_batchers() -> None:
    for batcher in list(_OPEN):
        batcher.close(timeout=60)


class SequenceHandle:
    """One submitted sequence: iterate it for its tokens (blocking, or ``async for``), as they are generated.

    The iteration ends after a stop token (included) or ``max_new_tokens``, quietly after ``cancel()``, and with
    the batcher's error where the sequence could not finish (``ClosedError`` after ``close()``).  Several
    iterators each see every token.  ``prompt_tokens`` and ``generated`` count tokens (OpenAI's ``usage``),
    ``first_token_s`` is the time from ``submit`` to the first token (None before it), ``finish_reason`` is
    None while running, then "stop", "length", "cancelled" or "error"."""

    def __init__(self, batcher: "ContinuousBatcher", prompt_tokens: int, max_new_tokens: int):
        self.prompt_tokens = prompt_tokens
        self.max_new_tokens = max_new_tokens
        self.first_token_s: float | None = None
        self.finish_reason: str | None = None
        self._batcher = batcher
        self._submitted = time.perf_counter()
        self._tokens: list[int] = []
        self._error: BaseException | None = None
        self._cond = threading.Condition()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = []

    @property
    def generated(self) -> int:
        return len(self._tokens)

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    @property
    def tokens(self) -> list[int]:
        """The tokens generated so far."""
        with self._cond:
            return list(self._tokens)

    def cancel(self) -> None:
        """Stop generating: the sequence leaves the batch before the next step and its KV slot is free for the
        next request (a client that went away).  Its iterators end after the tokens already given.  Idempotent."""
        if self._finish("cancelled"):
            self._batcher._wake()

    def result(self, timeout: float | None = None) -> list[int]:
        """Wait for the end; every token generated (raises the sequence's error; TimeoutError after ``timeout``)."""
        with self._cond:
            if not self._cond.wait_for(lambda: self.done, timeout):
                raise TimeoutError(f"the sequence did not finish within {timeout} s")
            if self._error is not None:
                raise self._error
            return list(self._tokens)

    def __iter__(self) -> Iterator[int]:
        seen = 0
        while True:
            with self._cond:
                self._cond.wait_for(lambda: seen < len(self._tokens) or self.done)
                if seen < len(self._tokens):
                    token = self._tokens[seen]
                elif self._error is not None:
                    raise self._error
                else:
                    return
            seen += 1
            yield token

    def __aiter__(self) -> AsyncIterator[int]:
        return self._async_tokens()

    async def _async_tokens(self) -> AsyncIterator[int]:
        seen = 0
        while True:
            with self._cond:
                if seen < len(self._tokens):
                    token = self._tokens[seen]
                elif self.done:
                    if self._error is not None:
                        raise self._error
                    return
                else:
                    loop = asyncio.get_running_loop()
                    woken = loop.create_future()
                    self._waiters.append((loop, woken))
                    token = None
            if token is None:
                await woken  # set from the scheduler thread: no thread waits for this request
                continue
            seen += 1
            yield token

    # ---- called by the batcher ------------------------------------------------------------------
    def _push(self, token: int) -> None:
        with self._cond:
            if self.done:
                return
            if not self._tokens:
                self.first_token_s = time.perf_counter() - self._submitted
            self._tokens.append(token)
            self._notify()

    def _finish(self, reason: str, error: BaseException | None = None) -> bool:
        """End the sequence (once: False when it had ended already)."""
        with self._cond:
            if self.done:
                return False
            self.finish_reason, self._error = reason, error
            self._notify()
            return True

    def _notify(self) -> None:
        self._cond.notify_all()
        waiters, self._waiters = self._waiters, []
        for loop, woken in waiters:
            try:
                loop.call_soon_threadsafe(_set_done, woken)
            except RuntimeError:  # that event loop is closed: nobody waits there any more
                pass


def _integer(name: str, value: Any) -> Any:
    """``value`` as an int (None stays None), or ``InvalidArgumentError`` naming ``name``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidArgumentError(f"{name} must be an int, got {value!r}")
    return int(value)


def _number(name: str, value: Any) -> Any:
    """``value`` as a finite float (None stays None), or ``InvalidArgumentError`` naming ``name``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not np.isfinite(value):
        raise InvalidArgumentError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def _set_done(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


class _Sequence:
    """A request as the scheduler keeps it."""

    def __init__(self, handle: SequenceHandle, prompt: list[int], max_new_tokens: int, temperature: float,
                 top_k: int | None, top_p: float | None, seed: int, stops: frozenset[int]):
        self.handle, self.prompt, self.max_new_tokens = handle, prompt, max_new_tokens
        self.temperature, self.top_k, self.top_p, self.seed, self.stops = temperature, top_k, top_p, seed, stops
        self.slot: int | None = None       # its slot in the device batch
        self.position = 0                  # where the next token it is fed goes in its cache
        self.dispatched = 0                # tokens asked of the device (its sampling counter)
        self.in_flight = 0                 # of which not read yet

    def pick_first(self, logits: np.ndarray) -> int:
        """The first token, from the prompt's last logits, as ``generate`` picks it for the same seed."""
        if self.temperature == 0:
            return int(np.argmax(logits))
        return _softmax_sample(logits, self.temperature, self.top_k, np.random.default_rng(self.seed), self.top_p)

    @property
    def wants_more(self) -> bool:
        return not self.handle.done and self.handle.generated + self.in_flight < self.max_new_tokens


class ContinuousBatcher:
    """Decodes the sequences submitted to it together (see the module docstring).  Thread-safe.

    ``model``: a ``CompiledModel`` of an LLM with prefill and decode signatures (names as ``generate_stream``
    takes them).  At most ``max_sequences`` sequences decode at once (each with its own KV cache); more wait, in
    order.  ``batched``: None picks the batched XLA step where the decode signature allows it, False always
    interleaves, True refuses a model that cannot be batched (``InvalidArgumentError`` saying why).
    ``steps_per_launch`` (the batched XLA step): decode steps per launch, as vLLM's multi-step scheduling: more
    share the host's cost per launch among more tokens; sequences join and leave, and stop tokens are seen, only
    between launches (a sequence's tokens past its end are computed and dropped)."""

    def __init__(self, model: Any, max_sequences: int = 32, *, prefill_signature: str = "prefill",
                 decode_signature: str = "decode", tokens_input: str = "tokens", position_input: str = "input_pos",
                 logits_output: str = "logits", pad_token: int = 0, batched: bool | None = None,
                 steps_per_launch: int = 1):
        for name, value in (("max_sequences", max_sequences), ("steps_per_launch", steps_per_launch)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidArgumentError(f"{name} must be an int >= 1, got {value!r}")
        self.steps_per_launch = steps_per_launch
        self.model, self.max_sequences, self.pad_token = model, max_sequences, int(pad_token)
        self._names = dict(prefill_signature=prefill_signature, decode_signature=decode_signature,
                           tokens_input=tokens_input, position_input=position_input, logits_output=logits_output)
        loop = _Loop(model, prefill_signature, decode_signature, tokens_input, position_input, logits_output)
        self.max_len = loop.max_len
        self.vocab_size = int(model.get_output_tensor_details(decode_signature)[logits_output]["shape"][-1])
        self._engine: _DeviceBatch | _Interleaved = self._pick_engine(loop, batched)
        self._cond = threading.Condition()
        self._waiting: collections.deque[_Sequence] = collections.deque()
        self._closed = False
        self._counts = collections.Counter()
        self._thread = threading.Thread(target=self._schedule, name="litegpu-continuous-batcher", daemon=True)
        self._thread.start()
        _OPEN.add(self)

    def _pick_engine(self, loop: _Loop, batched: bool | None) -> "_DeviceBatch | _Interleaved":
        if batched is not False:
            refusal = _DeviceBatch.refusal(loop)
            if refusal is None:
                return _DeviceBatch(self, loop)
            if batched:
                raise InvalidArgumentError(f"{self.model.model.source}: the decode steps cannot be batched: "
                                           f"{refusal}")
        loop.release()  # each interleaved sequence has a loop of its own
        return _Interleaved(self)

    # ---- the API --------------------------------------------------------------------------------
    def submit(self, prompt_tokens: Iterable[int], max_new_tokens: int, *, temperature: float = 0.0,
               top_k: int | None = None, top_p: float | None = None, seed: int | None = None,
               stop_tokens: Iterable[int] = ()) -> SequenceHandle:
        """Queue a sequence; returns its handle at once.  Sampling as ``litegpu.generate`` takes it (``seed`` None:
        a fresh random one).  Raises ``InvalidArgumentError`` for a request no step could serve (an empty prompt,
        a token outside the vocabulary, a prompt and ``max_new_tokens`` past the KV cache, bad sampling values),
        ``ClosedError`` after ``close()``."""
        prompt = self._checked_prompt(prompt_tokens)
        max_new_tokens, top_k, seed = (_integer(name, value) for name, value in (
            ("max_new_tokens", max_new_tokens), ("top_k", top_k), ("seed", seed)))
        temperature, top_p = (_number(name, value) for name, value in (("temperature", temperature), ("top_p", top_p)))
        check_sampling(max_new_tokens, temperature, top_k, top_p)
        if seed is not None and seed < 0:
            raise InvalidArgumentError(f"seed must be None or an int >= 0, got {seed}")
        needed = len(prompt) + max(int(max_new_tokens) - 1, 0)  # the last token is never fed back
        if self.max_len is not None and needed > self.max_len:
            raise InvalidArgumentError(f"{len(prompt)} prompt tokens + {max_new_tokens} new ones need {needed} "
                                       f"cache rows; the model's KV cache holds {self.max_len}")
        handle = SequenceHandle(self, len(prompt), max_new_tokens)
        sequence = _Sequence(handle, prompt, max_new_tokens, temperature, top_k, top_p,
                             secrets.randbits(31) if seed is None else seed, self._checked_stops(stop_tokens))
        with self._cond:
            if self._closed:
                raise ClosedError("the batcher is closed: it takes no more sequences")
            if max_new_tokens == 0:
                handle._finish("length")
                return handle
            self._waiting.append(sequence)
            self._cond.notify_all()
        return handle

    def stats(self) -> dict[str, Any]:
        """What the batcher is doing: the sequences decoding and waiting, the tokens generated and decode steps
        run so far, the slots the batch holds now, the engine (``"xla-batched"`` or ``"interleaved"``)."""
        with self._cond:
            return {"engine": self._engine.name, "max_sequences": self.max_sequences,
                    "active": self._engine.active_count(),
                    "waiting": sum(1 for s in self._waiting if not s.handle.done),  # not the cancelled
                    "slots": self._engine.slots(), "tokens_generated": self._counts["tokens"],
                    "decode_steps": self._counts["steps"], "prefills": self._counts["prefills"]}

    def warm_up(self) -> None:
        """Compile now what serving will run: the batched steps (greedy, and sampling) for every slot count, then
        one short sequence end to end (its prefill and decode), so that the first requests wait for no compiler."""
        self._engine.warm_up()
        tokens = 2 if self.max_len is None or self.max_len >= 2 else 1
        self.submit([self.pad_token], tokens).result()

    def close(self, timeout: float | None = None) -> None:
        """Stop the scheduler; sequences not finished end with ``ClosedError``.  Idempotent."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        _OPEN.discard(self)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def __enter__(self) -> "ContinuousBatcher":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- the scheduler --------------------------------------------------------------------------
    def _checked_prompt(self, prompt_tokens: Iterable[int]) -> list[int]:
        try:
            array = np.asarray(list(prompt_tokens))
        except TypeError as e:
            raise InvalidArgumentError(f"prompt_tokens must be an iterable of token ids: {e}") from None
        if array.size == 0:
            raise InvalidArgumentError("a sequence needs at least one prompt token")
        if array.dtype.kind not in "iu":
            raise InvalidArgumentError(f"prompt tokens must be integers, got {array.dtype} values")
        bad = array[(array < 0) | (array >= self.vocab_size)].reshape(-1)
        if bad.size:
            raise InvalidArgumentError(f"prompt token {int(bad[0])} is outside the vocabulary (ids 0 to "
                                       f"{self.vocab_size - 1})")
        return [int(t) for t in array.reshape(-1)]

    @staticmethod
    def _checked_stops(stop_tokens: Iterable[int]) -> frozenset[int]:
        try:
            return frozenset(_integer("stop token", t) for t in stop_tokens)
        except TypeError:
            raise InvalidArgumentError(f"stop_tokens must be an iterable of token ids, got {stop_tokens!r}") from None

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _schedule(self) -> None:
        try:
            while True:
                with self._cond:
                    self._cond.wait_for(lambda: self._closed or self._has_work())
                    if self._closed:
                        return
                    joining = []
                    while self._waiting and self._engine.active_count() + len(joining) < self.max_sequences:
                        sequence = self._waiting.popleft()
                        if not sequence.handle.done:  # cancelled while waiting
                            joining.append(sequence)
                for sequence in joining:
                    self._join(sequence)
                self._engine.step()
        except BaseException as e:  # a bug: every sequence ends with it rather than waiting for ever
            self._fail_all(ModelExecutionError(f"the continuous batcher stopped: {type(e).__name__}: {e}"))
            raise
        finally:
            self._fail_all(ClosedError("the batcher was closed before the sequence finished"))

    def _has_work(self) -> bool:
        return bool(self._waiting) or self._engine.busy()

    def _join(self, sequence: _Sequence) -> None:
        try:
            self._counts["prefills"] += 1
            self._engine.join(sequence)
        except Exception as e:
            self._fail(sequence, e)

    def _deliver(self, sequence: _Sequence, token: int) -> None:
        """A token of ``sequence``: to its handle; its end where it is a stop token or the last one asked for."""
        handle = sequence.handle
        if handle.done:
            return
        handle._push(token)
        self._counts["tokens"] += 1
        if token in sequence.stops:
            self._end(sequence, "stop")
        elif handle.generated >= sequence.max_new_tokens:
            self._end(sequence, "length")

    @staticmethod
    def _end(sequence: _Sequence, reason: str) -> None:
        sequence.handle._finish(reason)

    @staticmethod
    def _fail(sequence: _Sequence, error: BaseException) -> None:
        if not isinstance(error, LiteGpuError):
            error = ModelExecutionError(f"generating the sequence failed: {type(error).__name__}: {error}")
        sequence.handle._finish("error", error)

    def _fail_all(self, error: BaseException) -> None:
        with self._cond:
            self._closed = True
            pending = list(self._waiting) + self._engine.sequences()
            self._waiting.clear()
        for sequence in pending:
            self._fail(sequence, error)
        self._engine.drop()


class _DeviceBatch:
    """The batched device engine: the sequences in the slots of the engine's batched decode
    (``SubgraphProgram.batched_decode``; XLA's: ``backends.xla.batched_decode``)."""

    name = BATCHED

    def __init__(self, batcher: ContinuousBatcher, loop: _Loop):
        self.batcher, self.loop = batcher, loop   # ``loop`` prefills, one sequence at a time
        self.decode = loop.decode_program().batched_decode(loop.decode_signature(), batcher.steps_per_launch)
        self.device = self.decode.device
        self.buckets = slot_buckets(batcher.max_sequences)
        self.state: Any = None                     # BatchState, None while no sequence decodes
        self.slots_held: list[_Sequence | None] = []
        self.pending: tuple[Any, list[tuple[int, _Sequence]]] | None = None  # a step dispatched, not read yet
        self._fresh_caches()

    @staticmethod
    def refusal(loop: _Loop) -> str | None:
        """Why the decode steps cannot be one batched program on the device, or None."""
        from .batched import batching_refusal

        if loop.decode_program().device_program() is None:
            return "the decode signature does not run as one XLA program (another engine, or a plan in parts)"
        # a device program runs the whole model as XLA traces it
        return batching_refusal(loop.model._xla_model, loop.model._signature(loop.decode).subgraph)

    def active_count(self) -> int:
        return sum(1 for s in self.slots_held if s is not None and not s.handle.done)

    def slots(self) -> int:
        return len(self.slots_held)

    def busy(self) -> bool:
        """A step to dispatch or read, or slots to free."""
        return self.pending is not None or any(s is not None for s in self.slots_held)

    def sequences(self) -> list[_Sequence]:
        return [s for s in self.slots_held if s is not None]

    def warm_up(self) -> None:
        for slots in self.buckets:
            self.decode.program(slots, False)
            self.decode.program(slots, True)

    def drop(self) -> None:
        self.state, self.pending, self.slots_held = None, None, []

    # ---- joining ------------------------------------------------------------------------------------
    def join(self, sequence: _Sequence) -> None:
        """Prefill ``sequence`` (alone, through the model's own prefill), give its first token, and put it in a
        free slot unless it ended there."""
        try:
            last = _prefill(self.loop, sequence.prompt, self.batcher.pad_token)
            caches = self.loop.cache_arrays(self.device)
        finally:
            self._fresh_caches()
        first = sequence.pick_first(last)
        self.batcher._deliver(sequence, first)
        if sequence.handle.done:
            return
        slot = self._free_slot()
        self.state = self.decode.insert(self.state, slot, self.decode.stacked(caches), first)
        sequence.slot, sequence.position = slot, len(sequence.prompt)
        self.slots_held[slot] = sequence

    def _fresh_caches(self) -> None:
        """Zero caches in the prefill loop's buffers for the next prompt (device zeros: nothing crosses)."""
        from ..backends.device_arrays import jax_module

        jax = jax_module()
        with jax.default_device(self.device):
            self.loop.keep_caches([jax.numpy.zeros(b.shape, b.dtype) for b in
                                   (self.loop.caches[n] for n in self.loop.cache_names)])

    def _free_slot(self) -> int:
        """The lowest free slot, the batch grown to the next size when every slot is taken."""
        self._release_finished()
        free = [k for k, s in enumerate(self.slots_held) if s is None]
        if free:
            return free[0]
        held = len(self.slots_held)
        size = bucket_for(held + 1, self.buckets)
        if self.state is None:
            self.state = self.decode.empty(size)
        else:
            self.state = self.decode.resize(self.state, list(range(held)) + [-1] * (size - held))
        self.slots_held += [None] * (size - held)
        return held

    def _release_finished(self) -> None:
        """Free the slots of the sequences that ended (a stop token, cancelled); the batch shrunk to the smallest
        size that holds the rest, which move to its first slots."""
        self.slots_held = [s if s is not None and not s.handle.done else None for s in self.slots_held]
        kept = [k for k, s in enumerate(self.slots_held) if s is not None]
        if not kept:
            if self.pending is None:
                self.state, self.slots_held = None, []  # nothing decodes: the caches' memory goes back
            return
        size = bucket_for(len(kept), self.buckets)
        if size >= len(self.slots_held):
            return
        self.state = self.decode.resize(self.state, kept + [-1] * (size - len(kept)))
        self.slots_held = [self.slots_held[k] for k in kept] + [None] * (size - len(kept))
        for k, sequence in enumerate(self.slots_held[:len(kept)]):
            sequence.slot = k

    # ---- stepping -----------------------------------------------------------------------------------
    def step(self) -> None:
        """Dispatch one step for every sequence that wants a token, then read the step dispatched before."""
        dispatched = None  # (tokens, [(slot, sequence)]) of the step dispatched now
        try:
            self._release_finished()
            stepping = [(k, s) for k, s in enumerate(self.slots_held) if s is not None and s.wants_more]
            if stepping:
                dispatched = (self._dispatch(stepping), stepping)
            if self.pending is not None:
                self._read(*self.pending)
        except Exception as e:
            for sequence in self.sequences():
                self.batcher._fail(sequence, e)
            self.drop()
            return
        self.pending = dispatched
        if dispatched is None:
            self._release_finished()

    def _dispatch(self, stepping: list[tuple[int, _Sequence]]) -> Any:
        slots = len(self.slots_held)
        fed = np.zeros((4, slots), np.int32)
        floats = np.zeros((2, slots), np.float32)
        floats[TOP_P] = 1
        steps = self.decode.steps
        for k, s in stepping:
            fed[POSITION, k], fed[TOP_K, k], fed[COUNTER, k] = s.position, s.top_k or 0, s.dispatched
            fed[SEED, k] = s.seed % (1 << 31)  # as generate's device loop keys it
            floats[TEMPERATURE, k], floats[TOP_P, k] = s.temperature, 1 if s.top_p is None else s.top_p
            s.position += steps
            s.dispatched += steps
            s.in_flight += steps
        sampled = any(s.temperature > 0 for _, s in stepping)
        picked, self.state = self.decode.step(self.state, fed, floats, sampled)
        self.batcher._counts["steps"] += steps
        return picked

    def _read(self, picked: Any, stepping: list[tuple[int, _Sequence]]) -> None:
        values = np.asarray(picked)  # [steps, slots]; waits for that launch (the next one is queued behind it)
        for k, sequence in stepping:
            sequence.in_flight -= len(values)
            for token in values[:, k].tolist():
                if sequence.handle.done:  # its end came earlier in the launch
                    break
                self.batcher._deliver(sequence, token)


class _Interleaved:
    """The host engine: each sequence its own ``generate_stream`` (its own KV cache), one decode call each per
    step, in turn.  Correct, not faster than one sequence at a time."""

    name = INTERLEAVED

    def __init__(self, batcher: ContinuousBatcher):
        self.batcher = batcher
        self.running: list[tuple[_Sequence, Iterator[int]]] = []

    def active_count(self) -> int:
        return sum(1 for s, _ in self.running if not s.handle.done)

    def slots(self) -> int:
        return len(self.running)

    def busy(self) -> bool:
        """Sequences to step, or ended ones to let go of."""
        return bool(self.running)

    def sequences(self) -> list[_Sequence]:
        return [s for s, _ in self.running]

    def warm_up(self) -> None:
        pass

    def drop(self) -> None:
        for _, tokens in self.running:
            tokens.close()  # the engine lets go of a cache it kept for that sequence
        self.running = []

    def join(self, sequence: _Sequence) -> None:
        batcher = self.batcher
        tokens = generate_stream(batcher.model, sequence.prompt, sequence.max_new_tokens,
                                 temperature=sequence.temperature, top_k=sequence.top_k, top_p=sequence.top_p,
                                 seed=sequence.seed, stop_tokens=sequence.stops, pad_token=batcher.pad_token,
                                 chunk_tokens=0, **batcher._names)
        self.running.append((sequence, tokens))
        self._advance(sequence, tokens)  # the prefill and the first token

    def step(self) -> None:
        for sequence, tokens in self.running:
            if self._advance(sequence, tokens):
                self.batcher._counts["steps"] += 1
        for sequence, tokens in self.running:
            if sequence.handle.done:
                tokens.close()  # a cache the official interpreter kept for it is let go
        self.running = [(s, t) for s, t in self.running if not s.handle.done]

    def _advance(self, sequence: _Sequence, tokens: Iterator[int]) -> bool:
        """The next token of ``sequence``, delivered; False where it had ended."""
        if sequence.handle.done:
            return False
        try:
            token = next(tokens)
        except StopIteration:  # after its last token (a stop token, or the count), delivered already
            self.batcher._end(sequence, "length")
            return False
        except Exception as e:
            self.batcher._fail(sequence, e)
            return False
        self.batcher._deliver(sequence, token)
        return True


__all__ = ["ContinuousBatcher", "SequenceHandle"]
