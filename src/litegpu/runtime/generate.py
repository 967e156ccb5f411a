"""A decode loop for LLM-style models: prefill the prompt, then one decode step per new token.

    model = litegpu.CompiledModel.from_file("decoder.tflite", litegpu.HardwareAccelerator.GPU)
    tokens = litegpu.generate(model, prompt, max_new_tokens=32)                 # greedy
    tokens = litegpu.generate(model, prompt, 32, temperature=0.8, seed=1)      # sampled, reproducible

The model has two signatures (names configurable): ``prefill`` takes ``tokens`` int [1, T] and
``input_pos`` int [1] (the position of tokens[0]), ``decode`` the same with T = 1; both return
``logits`` [1, T, vocab] and take the KV cache as inputs that come back, updated, as outputs of the
same name (the ai-edge-torch convention).  The cache buffers are passed as both the inputs and the
outputs of every run, so after the first run they hold the run's device arrays and go straight into
the next run.  Greedy decoding on the XLA engines also picks each token on the device and feeds it to the
next step there: one integer per token comes back to the host.  Sampling reads the logits of each step.

A prompt longer than T is prefilled in chunks of T; the last chunk is padded, which is harmless for a
causal model: the padding's cache rows lie past the current position (masked) and the decode steps
overwrite them.  When a padded chunk would run past the cache, the rest is fed through decode steps.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from ..backends.decoding import DEFAULT_CHUNK, MASKED, DecodeSignature, Sampling
from ..errors import InvalidArgumentError, ModelExecutionError, SignatureError
from .tensor_buffer import TensorBuffer, _is_device_array


def _softmax_sample(logits: np.ndarray, temperature: float, top_k: int | None, rng: np.random.Generator,
                    top_p: float | None = None) -> int:
    """A token drawn from softmax(logits / temperature), restricted to the ``top_k`` largest, then to the smallest
    set of the largest whose probabilities reach ``top_p`` (ties at either cutoff kept), as the device sampler
    (``backends.xla.generate``) restricts them."""
    scaled = logits.astype(np.float64) / temperature
    if top_k is not None and 0 < top_k < scaled.size:
        cutoff = np.partition(scaled, -top_k)[-top_k]
        scaled = np.where(scaled >= cutoff, scaled, -np.inf)
    if top_p is not None and top_p < 1:
        desc = np.sort(scaled)[::-1]
        probs = np.exp(desc - desc[0])
        probs /= probs.sum()
        before = np.cumsum(probs) - probs
        count = max(int(np.sum((before < top_p) & (desc > -np.inf))), 1)
        scaled = np.where(scaled >= desc[count - 1], scaled, -np.inf)
    probs = np.exp(scaled - scaled.max())
    return int(rng.choice(scaled.size, p=probs / probs.sum()))


def check_sampling(max_new_tokens: int, temperature: float, top_k: int | None, top_p: float | None) -> None:
    """Refuse sampling arguments no generation can take, naming the value (``InvalidArgumentError``)."""
    if max_new_tokens < 0 or temperature < 0:
        raise InvalidArgumentError(f"max_new_tokens ({max_new_tokens}) and temperature ({temperature}) "
                                   "cannot be negative")
    if top_k is not None and top_k < 0:
        raise InvalidArgumentError(f"top_k must be None or at least 0 (0: no limit), got {top_k}")
    if top_p is not None and not 0 < top_p <= 1:
        raise InvalidArgumentError(f"top_p must be None or in (0, 1], got {top_p}")


class _Loop:
    """The signatures of one model as a decode loop: the prefill ones (``prefill``, or the converter's
    ``prefill_8``, ``prefill_32``, ...), the decode one, and the KV-cache buffers they share."""

    def __init__(self, model: Any, prefill: str, decode: str, tokens: str, position: str, logits: str):
        self.model = model
        self.decode = decode
        self.tokens_name, self.position_name, self.logits_name = tokens, position, logits
        signatures = model.get_signature_list()
        self.prefills = _prefill_signatures(signatures, prefill)
        if not self.prefills or decode not in signatures:
            raise SignatureError(f"generate needs a {prefill!r} signature (or {prefill}_<length> ones) and "
                                 f"{decode!r}; the model has {sorted(signatures)}")
        for key in [*self.prefills.values(), decode]:
            missing = [n for n in (tokens, position) if n not in signatures[key]["inputs"]]
            if key == decode and logits not in signatures[key]["outputs"]:
                missing.append(logits)
            if missing:
                raise SignatureError(f"signature {key!r} lacks {missing} (inputs {signatures[key]['inputs']}, "
                                     f"outputs {signatures[key]['outputs']})")
        # litert-torch's prefill returns no logits (its default): the prompt's last token is then decoded
        self.prefill_logits = all(logits in signatures[k]["outputs"] for k in self.prefills.values())
        # litert-torch's mask_as_input: a causal attention mask [1, 1, T, cache length] given with each step
        self.mask_name = next((n for n in signatures[decode]["inputs"] if "mask" in n.lower()
                               and n not in signatures[decode]["outputs"]), None)
        self.cache_names = self._cache_names(signatures)
        first = next(iter(self.prefills.values()))
        details = model.get_input_tensor_details(first)
        self.token_dtype = np.dtype(details[tokens]["dtype"])
        self.position_dtype = np.dtype(details[position]["dtype"])
        # Buffers made once: the cache ones change from host zeros to device arrays after the first run.
        self.caches = {n: model.create_input_buffer_by_name(first, n) for n in self.cache_names}
        keys = [*self.prefills.values(), decode]
        fed = (tokens, position) + ((self.mask_name,) if self.mask_name else ())
        self.step_inputs = {key: {n: model.create_input_buffer_by_name(key, n) for n in fed} for key in keys}
        self.per_token_position = {key: int(np.prod(model.get_input_tensor_details(key)[position]["shape"])) > 1
                                   for key in keys}
        self.step_logits = {key: model.create_output_buffer_by_name(key, logits) for key in keys
                            if logits in signatures[key]["outputs"]}
        # on the official interpreter, the token-by-token steps leave the cache in its tensors
        self.carried = _CarriedCache.for_loop(self)

    def _cache_names(self, signatures: dict) -> list[str]:
        names = []
        for key in [*self.prefills.values(), self.decode]:
            ins, outs = signatures[key]["inputs"], signatures[key]["outputs"]
            given = (self.tokens_name, self.position_name, self.mask_name)
            state = [n for n in ins if n in outs and n not in given]
            rest = [n for n in ins if n not in state and n not in given]
            if rest:
                raise SignatureError(f"signature {key!r} has inputs {rest} that are neither the tokens, the position "
                                     "nor state returned under the same name")
            names.append(state)
        if any(set(n) != set(names[0]) for n in names):
            raise SignatureError(f"the signatures carry different state: {names}")
        return names[0]

    def device_loop(self, chunk: int, sampling: Sampling, stops: set[int], seed: int | None) -> Any:
        """The engine's loop making ``chunk`` tokens per launch on its device (``SubgraphProgram.decode_loop``)
        where one device program runs all of the decode signature; None elsewhere."""
        return self.decode_program().decode_loop(self.decode_signature(), chunk, sampling, tuple(stops), seed)

    def decode_program(self) -> Any:
        """The program running the decode signature (``engine.SubgraphProgram``: its capabilities say whether it
        runs it whole on a device)."""
        return self.model._backend(self.model._signature(self.decode))

    def decode_signature(self) -> DecodeSignature:
        """The decode signature by its tensors' names, as an engine's device decode loop reads it."""
        return DecodeSignature(self.decode, self.tokens_name, self.position_name, self.logits_name, self.mask_name,
                               tuple(self.cache_names), self.max_len)

    def release(self) -> None:
        """The generation is over: a cache kept in the engine's tensors is dropped there (``_CarriedCache``)."""
        if self.carried is not None:
            self.carried.state.release()

    def cache_arrays(self, device: Any) -> list[Any]:
        """The KV cache as device arrays, in ``cache_names`` order (host zeros before any run are placed there)."""
        from ..backends.device_arrays import jax_module

        values = [self.caches[n]._data() for n in self.cache_names]
        return [v if _is_device_array(v) else jax_module().device_put(np.asarray(v), device) for v in values]

    def keep_caches(self, arrays: Sequence[Any]) -> None:
        for name, value in zip(self.cache_names, arrays):
            self.caches[name]._set_result(value)

    @functools.cached_property
    def max_len(self) -> int | None:
        details = self.model.get_input_tensor_details(self.decode)
        return _cache_length({n: tuple(details[n]["shape"]) for n in self.cache_names},
                             self.step_inputs[self.decode].get(self.mask_name))

    def prefill_for(self, remaining: int) -> tuple[str, int]:
        """(signature, length): the smallest prefill that takes ``remaining`` tokens, else the longest."""
        fitting = [n for n in self.prefills if n >= remaining]
        length = min(fitting) if fitting else max(self.prefills)
        return self.prefills[length], length

    def step(self, key: str, tokens: Sequence[int], position: int) -> np.ndarray | None:
        """Run one signature for ``tokens`` starting at ``position``; its logits [T, vocab] on the host, or None
        when the signature returns none.  ``input_pos`` is one position, or one per token (the converter's)."""
        inputs = self.step_inputs[key]
        if self.carried is not None:
            fed = {self.tokens_name: np.asarray(tokens, self.token_dtype).reshape(inputs[self.tokens_name].shape),
                   self.position_name: self._positions(key, position, len(tokens))}
            if self.mask_name:
                fed[self.mask_name] = _causal_mask(inputs[self.mask_name], position)
            values = self.carried.run(key, fed)
            return None if values is None else values.reshape(-1, values.shape[-1])
        inputs[self.tokens_name].write(np.asarray(tokens, self.token_dtype).reshape(1, -1))
        inputs[self.position_name].write(self._positions(key, position, len(tokens)))
        if self.mask_name:
            inputs[self.mask_name].write(_causal_mask(inputs[self.mask_name], position))
        outputs = dict(self.caches)
        logits = self.step_logits.get(key)
        if logits is not None:
            outputs[self.logits_name] = logits
        self.model.run_by_name(key, {**inputs, **self.caches}, outputs)
        if logits is None:
            return None
        values = logits.read()
        return values.reshape(-1, values.shape[-1])

    def _positions(self, key: str, position: int, count: int) -> np.ndarray:
        """``input_pos`` for ``count`` tokens from ``position``: one position, or one per token (the converter's)."""
        positions = np.arange(position, position + count) if self.per_token_position[key] else [position]
        return np.asarray(positions, self.position_dtype).reshape(self.step_inputs[key][self.position_name].shape)

    def greedy_step(self, token: Any, position: int) -> Any:
        """Dispatch one decode step feeding ``token`` at ``position``, without waiting for it; returns the greedy
        next token.  ``token`` is a host int or the device array an earlier step returned.  When the logits
        stay on the device (the XLA engines) the next token is picked there and returned as a device array
        [1, 1], not yet read; otherwise the logits are read and the token is a host int."""
        key = self.decode
        if self.carried is not None:  # a host engine: the step runs now, its token is a host int
            return int(np.argmax(self.step(key, [int(token)], position)[-1]))
        shape = self.step_inputs[key][self.tokens_name].shape
        # Fresh input buffers each step: the step dispatched before may not have read the last ones yet.
        inputs = {**self.caches,
                  self.tokens_name: TensorBuffer(token if _is_device_array(token)
                                                 else np.full(shape, token, self.token_dtype)),
                  self.position_name: TensorBuffer(self._positions(key, position, 1))}
        if self.mask_name:
            inputs[self.mask_name] = TensorBuffer(_causal_mask(self.step_inputs[key][self.mask_name], position))
        logits = self.step_logits[key]
        self.model.run_async(key, inputs, {**self.caches, self.logits_name: logits})
        values = logits._data()
        if _is_device_array(values):
            return _device_argmax(tuple(shape), self.token_dtype.name)(values)
        values = logits.read()
        return int(np.argmax(values.reshape(-1, values.shape[-1])[-1]))


class _CarriedCache:
    """The KV cache kept in the official interpreter between the token-by-token steps, for a model whose every
    prefill and decode signature it runs whole (an executable that carries state between runs: ``carry``, and
    ``run_carrying``; the official interpreter's, ``backends.litert.CarriedState``).  A step sets the tokens,
    the position (and the mask), runs, and reads the logits; the cache is copied from the last step's output
    tensors into the next step's input tensors inside the interpreter, never through numpy.  Passing it
    through TensorBuffers as inputs and outputs of each run, as the official signature-runner loop does, copies
    every cache tensor out and back in every step (issue 26; BENCHMARKS.md, LLM decode on the CPU)."""

    def __init__(self, loop: _Loop, executables: dict[str, Any]):
        self.executables = executables
        self.state = next(iter(executables.values())).carry([loop.caches[n]._data() for n in loop.cache_names])
        self.layouts = {key: _carried_layout(loop, key, executable) for key, executable in executables.items()}

    @classmethod
    def for_loop(cls, loop: _Loop) -> "_CarriedCache | None":
        """One for ``loop`` where one official interpreter runs every signature it steps through whole."""
        executables = {}
        for key in [loop.decode, *loop.prefills.values()]:  # the decode first: nothing made for another engine
            backend = loop.model._backend(loop.model._signature(key))
            whole = getattr(backend, "whole_executable", None)
            executable = whole() if whole is not None else None
            if not callable(getattr(executable, "run_carrying", None)):  # an engine that carries no state
                return None
            executables[key] = executable
        if len({id(e.shared) for e in executables.values()}) != 1:
            return None
        return cls(loop, executables)

    def run(self, key: str, fed: dict[str, np.ndarray]) -> np.ndarray | None:
        """Run signature ``key`` on ``fed`` (name -> array) with the carried cache; its logits, or None."""
        carried_in, carried_out, positions, logits = self.layouts[key]
        results = self.executables[key].run_carrying(self.state, carried_in, carried_out,
                                                     {positions[n]: v for n, v in fed.items()}, logits)
        return results[0] if results else None


def _carried_layout(loop: _Loop, key: str, executable: Any) -> tuple[list[int], list[int], dict[str, int], list[int]]:
    """Where signature ``key``'s cache, fed inputs and logits sit among ``executable``'s inputs and outputs:
    (cache inputs, cache outputs, fed name -> input position, [logits output position] or [])."""
    signature = loop.model._signature(key)
    by_input, by_output = dict(signature.inputs), dict(signature.outputs)
    inputs, outputs = list(executable.op_range.inputs), list(executable.op_range.outputs)
    fed = {n: inputs.index(by_input[n]) for n in (loop.tokens_name, loop.position_name, loop.mask_name) if n}
    logits = [outputs.index(by_output[loop.logits_name])] if loop.logits_name in by_output else []
    return ([inputs.index(by_input[n]) for n in loop.cache_names], [outputs.index(by_output[n]) for n in loop.cache_names],
            fed, logits)


@functools.lru_cache(maxsize=None)
def _device_argmax(shape: tuple[int, ...], dtype: str) -> Any:
    """logits [..., vocab] -> the argmax of the last position (ties to the lowest id, as ``np.argmax``), as a
    device array of the tokens input's shape and dtype, ready to be fed to the next step."""
    from ..backends.device_arrays import jax_module

    jax = jax_module()

    def pick(logits: Any) -> Any:
        last = logits.reshape(-1, logits.shape[-1])[-1]
        return jax.numpy.argmax(last).astype(dtype).reshape(shape)

    return jax.jit(pick)


def _token_value(token: Any) -> int:
    """A token from ``greedy_step`` as a host int: the one wait per token of the greedy loop, where a failure
    of the dispatched steps surfaces (out of device memory: ``OutOfMemoryError``, as for any run waited on)."""
    if isinstance(token, int):
        return token
    from .event import _wait_for

    _wait_for(token)
    return int(np.asarray(token).reshape(-1)[0])


def cache_length(model: Any, decode_signature: str = "decode") -> int | None:
    """How many positions the KV cache of a prefill/decode model holds (None: it has no cache)."""
    details = model.get_input_tensor_details(decode_signature)
    outputs = set(model.get_signature_list()[decode_signature]["outputs"])
    mask = next((d for n, d in details.items() if "mask" in n.lower() and n not in outputs), None)
    if mask is not None:
        return int(mask["shape"][-1])
    caches = {n: tuple(d["shape"]) for n, d in details.items() if n in outputs}  # state: in and out
    return _cache_length(caches, None)


def _cache_length(caches: dict[str, tuple], mask: Any) -> int | None:
    """The mask's last axis when there is a mask; else the sequence axis of the caches, axis 1 in the
    default layout ([1, T, heads, dim], k and v alike) or axis 2 of the k cache in the converter's
    transposed one (k [1, heads, T, dim], v [1, heads, dim, T])."""
    if mask is not None:
        return int(mask.shape[-1])
    if not caches:
        return None
    ks = [s for n, s in caches.items() if "_k_" in n or n.endswith("_k")]
    vs = [s for n, s in caches.items() if "_v_" in n or n.endswith("_v")]
    if ks and vs and len(ks[0]) == 4 and (ks[0] != vs[0] or (ks[0][2] == ks[0][3] and ks[0][1] < ks[0][2])):
        return int(ks[0][2])
    return int(next(iter(caches.values()))[1])


def _causal_mask(buffer: Any, position: int) -> np.ndarray:
    """Row i (the token at ``position + i``) may attend to cache rows 0 .. position + i."""
    shape, dtype = tuple(buffer.shape), np.dtype(buffer.dtype)
    rows, length = shape[-2], shape[-1]
    allowed = np.arange(length)[None, :] <= (position + np.arange(rows))[:, None]
    return np.where(allowed, 0, np.finfo(dtype).min).astype(dtype).reshape(shape)


def _prefill_signatures(signatures: dict, prefill: str) -> dict[int, str]:
    """Token count -> prefill signature: ``prefill`` itself, or ``prefill_8``, ``prefill_32``, ..."""
    import re

    found = {}
    for key in signatures:
        match = re.fullmatch(re.escape(prefill) + r"(?:_(\d+))?", key)
        if match:
            found[int(match.group(1)) if match.group(1) else -1] = key
    if -1 in found:  # one plain "prefill": its length is its tokens input's
        return {-1: found[-1]}
    return dict(sorted(found.items()))


def generate(model: Any, prompt_tokens: Iterable[int], max_new_tokens: int, *, temperature: float = 0.0,
             top_k: int | None = None, top_p: float | None = None, seed: int | None = None,
             stop_tokens: Iterable[int] = (), pad_token: int = 0, prefill_signature: str = "prefill",
             decode_signature: str = "decode", tokens_input: str = "tokens", position_input: str = "input_pos",
             logits_output: str = "logits", chunk_tokens: int = DEFAULT_CHUNK) -> list[int]:
    """Generate up to ``max_new_tokens`` tokens after ``prompt_tokens``; returns the new tokens.

    ``temperature`` 0 is greedy (argmax, ties to the lowest id); above 0 samples from
    softmax(logits / temperature), restricted to the ``top_k`` largest when given, then to the smallest set of
    the largest whose probabilities reach ``top_p`` when given (nucleus sampling), reproducibly for a ``seed``.
    Generation stops early after a token in ``stop_tokens`` (included in the result).
    ``model`` is a litegpu ``CompiledModel``.  ``chunk_tokens``: decode steps per launch where the decode
    signature runs as one XLA program (0: one launch per token).  See ``generate_stream`` for the
    conventions understood (litert-torch's included).
    """
    return list(generate_stream(model, prompt_tokens, max_new_tokens, temperature=temperature, top_k=top_k,
                                top_p=top_p, seed=seed, stop_tokens=stop_tokens, pad_token=pad_token,
                                prefill_signature=prefill_signature, decode_signature=decode_signature,
                                tokens_input=tokens_input, position_input=position_input,
                                logits_output=logits_output, chunk_tokens=chunk_tokens))


def generate_stream(model: Any, prompt_tokens: Iterable[int], max_new_tokens: int, *, temperature: float = 0.0,
                    top_k: int | None = None, top_p: float | None = None, seed: int | None = None,
                    stop_tokens: Iterable[int] = (), pad_token: int = 0, prefill_signature: str = "prefill",
                    decode_signature: str = "decode", tokens_input: str = "tokens", position_input: str = "input_pos",
                    logits_output: str = "logits", chunk_tokens: int = DEFAULT_CHUNK) -> Iterator[int]:
    """``generate`` as an iterator: the new tokens as they come.

    Conventions, read from the signatures: one ``prefill`` signature, or several ``prefill_<T>`` ones (as
    litert-torch writes them: the smallest that takes the rest of the prompt, longer prompts in chunks);
    ``input_pos`` one position or one per token; prefill with logits, or without (litert-torch's default:
    the prompt but its last token is prefilled, and the last token is decoded, as LiteRT-LM does).  The KV
    cache stays on the device between steps.

    Where the decode signature runs as one XLA program (a model fully on the GPU, or on XLA CPU), tokens are
    generated on the device ``chunk_tokens`` at a time in one launch (``backends.xla.generate``): picked there,
    fed back there, one array of tokens read per chunk, the next chunk already dispatched; the stream yields
    them chunk by chunk.  Greedy tokens equal the token-by-token loop's.  Sampled tokens come from JAX's random
    numbers there (the same for a seed whatever the chunk size) and from a numpy generator elsewhere.
    """
    prompt = [int(t) for t in np.asarray(list(prompt_tokens)).reshape(-1)]
    if not prompt:
        raise InvalidArgumentError("generate needs at least one prompt token")
    check_sampling(max_new_tokens, temperature, top_k, top_p)
    top_p = None if top_p is not None and top_p >= 1 else top_p  # keeps all: no sort in the device loop
    loop = _Loop(model, prefill_signature, decode_signature, tokens_input, position_input, logits_output)
    # The last generated token is never fed back, so the cache must hold prompt + max_new_tokens - 1.
    needed = len(prompt) + max(max_new_tokens - 1, 0)
    if loop.max_len is not None and needed > loop.max_len:
        raise InvalidArgumentError(f"{len(prompt)} prompt tokens + {max_new_tokens} new ones need {needed} cache "
                                   f"rows; the model's cache holds {loop.max_len}")
    rng = np.random.default_rng(seed)
    stops = {int(t) for t in stop_tokens}

    def pick(logits: np.ndarray) -> int:
        if temperature == 0:
            return int(np.argmax(logits))
        return _softmax_sample(logits, temperature, top_k, rng, top_p)

    if max_new_tokens == 0:
        return
    if chunk_tokens < 0:
        raise InvalidArgumentError(f"chunk_tokens cannot be negative, got {chunk_tokens}")
    last = _prefill(loop, prompt, pad_token)
    device = None
    if chunk_tokens and max_new_tokens > 1:
        device = loop.device_loop(chunk_tokens, Sampling(float(temperature), top_k, top_p), stops, seed)
    if device is not None:
        first = pick(last)
        yield first
        if first not in stops:
            yield from _device_decode(loop, device, first, len(prompt), max_new_tokens - 1)
        return
    try:
        if temperature == 0:
            first = pick(last)
            yield first
            if first not in stops and max_new_tokens > 1:
                yield from _greedy_decode(loop, first, len(prompt), max_new_tokens - 1, stops)
            return
        produced, position = 0, len(prompt)
        while True:
            token = pick(last)
            produced += 1
            yield token
            if token in stops or produced == max_new_tokens:
                return
            last = loop.step(loop.decode, [token], position)[0]
            position += 1
    finally:
        loop.release()  # done or abandoned: a cache kept in the engine need not be copied out for its next user


def _greedy_decode(loop: _Loop, token: int, position: int, count: int, stops: set[int]) -> Iterator[int]:
    """The ``count`` greedy tokens after ``token``, which is fed at ``position``.

    Where the logits stay on the device, each token is picked there and fed to the next step as a device
    array, and that next step is dispatched before the token is read back: per token the host waits for one
    integer (not the whole logits row and a host argmax), and the device has the next step queued meanwhile.
    Measured on the CPU standing in for a GPU: 1.35-1.46 -> 1.16-1.18 ms per token (BENCHMARKS.md); on the
    H200 a host round trip cost 0.15-0.25 ms per crossing, and the float32 decoder spent 1.06 of its 1.43 ms
    per token beyond what reading its weights needs.  The step dispatched ahead of a stop token is wasted
    work; its cache rows lie past the end.  Elsewhere (host engines) each step is run and read before the next.
    """
    pending = loop.greedy_step(token, position)
    for produced in range(1, count + 1):
        ahead = None
        if produced < count and not isinstance(pending, int):
            ahead = loop.greedy_step(pending, position + produced)
        token = _token_value(pending)
        yield token
        if token in stops or produced == count:
            return
        pending = ahead if ahead is not None else loop.greedy_step(token, position + produced)


def _device_decode(loop: _Loop, device: Any, token: int, position: int, count: int) -> Iterator[int]:
    """The ``count`` tokens after ``token`` (fed at ``position``), generated on the device a chunk at a time: each
    chunk is dispatched before the previous one's tokens are read, so the device never waits for the host."""
    from .event import _wait_for

    chunk = device.chunk
    caches = device.carried(loop.cache_arrays(device.device))
    pending = device.run(caches, token, position, 0, min(chunk, count))
    latest = pending
    done = 0
    try:
        while True:
            tokens, caches, last, stopped = pending
            ahead = None
            if done + chunk < count:  # ``done``: the tokens yielded, all of the chunks before this one
                ahead = device.run(caches, last, position + done + chunk, done + chunk,
                                   min(chunk, count - done - chunk), stopped)
                latest = ahead
            _wait_for(tokens)
            for value in np.asarray(tokens).tolist():
                if value == MASKED:  # only after a stop token or past the tokens asked for, both returned below
                    raise ModelExecutionError(f"the device's decode loop gave no token at step {done + 1} of "
                                              f"{count} (no stop token before it): a bug, please report it")
                yield value
                done += 1
                if value in device.stop_tokens or done == count:
                    return
            if ahead is None:
                return
            pending = ahead
    finally:
        loop.keep_caches(device.per_layer(latest[1]))


def _prefill(loop: _Loop, prompt: list[int], pad_token: int) -> np.ndarray:
    """Feed the prompt; returns the logits after its last token."""
    limit = loop.max_len if loop.max_len is not None else len(prompt) + max(loop.prefills, default=0) + 1
    # Without prefill logits the last prompt token is decoded: its logits are the first new token's.
    body = prompt if loop.prefill_logits else prompt[:-1]
    position = 0
    last: np.ndarray | None = None
    while position < len(body):
        key, length = loop.prefill_for(len(body) - position)
        if length < 0:  # one plain prefill: its tokens input's length
            length = int(loop.step_inputs[key][loop.tokens_name].shape[-1])
        part = body[position:position + length]
        if position + length <= limit:
            logits = loop.step(key, part + [pad_token] * (length - len(part)), position)
            if logits is not None:
                last = logits[len(part) - 1]
            position += len(part)
        else:
            for token in part:
                last = loop.step(loop.decode, [token], position)[0]
                position += 1
    if not loop.prefill_logits:
        last = loop.step(loop.decode, [prompt[-1]], len(prompt) - 1)[0]
    assert last is not None
    return last


__all__ = ["generate", "generate_stream"]
