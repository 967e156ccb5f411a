"""A decode loop for LLM-style models: prefill the prompt, then one decode step per new token.

    model = litegpu.CompiledModel.from_file("decoder.tflite", litegpu.HardwareAccelerator.GPU)
    tokens = litegpu.generate(model, prompt, max_new_tokens=32)                 # greedy
    tokens = litegpu.generate(model, prompt, 32, temperature=0.8, seed=1)      # sampled, reproducible

The model has two signatures (names configurable): ``prefill`` takes ``tokens`` int [1, T] and
``input_pos`` int [1] (the position of tokens[0]), ``decode`` the same with T = 1; both return
``logits`` [1, T, vocab] and take the KV cache as inputs that come back, updated, as outputs of the
same name (the ai-edge-torch convention).  The cache buffers are passed as both the inputs and the
outputs of every run, so after the first run they hold the run's device arrays and go straight into
the next run: only the logits of the last position come back to the host, to pick the next token.

A prompt longer than T is prefilled in chunks of T; the last chunk is padded, which is harmless for a
causal model: the padding's cache rows lie past the current position (masked) and the decode steps
overwrite them.  When a padded chunk would run past the cache, the rest is fed through decode steps.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError, SignatureError


def _softmax_sample(logits: np.ndarray, temperature: float, top_k: int | None, rng: np.random.Generator) -> int:
    scaled = logits.astype(np.float64) / temperature
    if top_k is not None and 0 < top_k < scaled.size:
        cutoff = np.partition(scaled, -top_k)[-top_k]
        scaled = np.where(scaled >= cutoff, scaled, -np.inf)
    probs = np.exp(scaled - scaled.max())
    return int(rng.choice(scaled.size, p=probs / probs.sum()))


class _Loop:
    def __init__(self, model: Any, prefill: str, decode: str, tokens: str, position: str, logits: str):
        self.model = model
        self.prefill, self.decode = prefill, decode
        self.tokens_name, self.position_name, self.logits_name = tokens, position, logits
        signatures = model.get_signature_list()
        for key in (prefill, decode):
            if key not in signatures:
                raise SignatureError(f"generate needs signatures {prefill!r} and {decode!r}; the model has "
                                     f"{sorted(signatures)}")
            missing = [n for n in (tokens, position) if n not in signatures[key]["inputs"]] + \
                      [n for n in (logits,) if n not in signatures[key]["outputs"]]
            if missing:
                raise SignatureError(f"signature {key!r} lacks {missing} (inputs {signatures[key]['inputs']}, "
                                     f"outputs {signatures[key]['outputs']})")
        self.cache_names = self._cache_names(signatures)
        details = model.get_input_tensor_details(prefill)
        self.chunk = int(details[tokens]["shape"][-1])
        self.token_dtype = np.dtype(details[tokens]["dtype"])
        self.position_dtype = np.dtype(details[position]["dtype"])
        # Buffers made once: the cache ones change from host zeros to device arrays after the first run.
        self.caches = {n: model.create_input_buffer_by_name(prefill, n) for n in self.cache_names}
        self.step_inputs = {key: {n: model.create_input_buffer_by_name(key, n) for n in (tokens, position)}
                            for key in (prefill, decode)}
        self.step_logits = {key: model.create_output_buffer_by_name(key, logits) for key in (prefill, decode)}

    def _cache_names(self, signatures: dict) -> list[str]:
        names = []
        for key in (self.prefill, self.decode):
            ins, outs = signatures[key]["inputs"], signatures[key]["outputs"]
            state = [n for n in ins if n in outs and n not in (self.tokens_name, self.position_name)]
            rest = [n for n in ins if n not in state and n not in (self.tokens_name, self.position_name)]
            if rest:
                raise SignatureError(f"signature {key!r} has inputs {rest} that are neither the tokens, the position "
                                     "nor state returned under the same name")
            names.append(state)
        if set(names[0]) != set(names[1]):
            raise SignatureError(f"{self.prefill!r} and {self.decode!r} carry different state: {names[0]} vs {names[1]}")
        return names[0]

    @property
    def max_len(self) -> int | None:
        """The cache length: axis 1 of the cache tensors ([1, max_len, ...] in the usual layouts)."""
        if not self.caches:
            return None
        return int(next(iter(self.caches.values())).shape[1])

    def step(self, key: str, tokens: Sequence[int], position: int) -> np.ndarray:
        """Run one signature at ``position``; returns its logits [T, vocab] on the host."""
        inputs = self.step_inputs[key]
        inputs[self.tokens_name].write(np.asarray(tokens, self.token_dtype).reshape(1, -1))
        inputs[self.position_name].write(np.asarray([position], self.position_dtype))
        logits = self.step_logits[key]
        self.model.run_by_name(key, {**inputs, **self.caches}, {self.logits_name: logits, **self.caches})
        values = logits.read()
        return values.reshape(-1, values.shape[-1])


def generate(model: Any, prompt_tokens: Iterable[int], max_new_tokens: int, *, temperature: float = 0.0,
             top_k: int | None = None, seed: int | None = None, stop_tokens: Iterable[int] = (),
             pad_token: int = 0, prefill_signature: str = "prefill", decode_signature: str = "decode",
             tokens_input: str = "tokens", position_input: str = "input_pos",
             logits_output: str = "logits") -> list[int]:
    """Generate up to ``max_new_tokens`` tokens after ``prompt_tokens``; returns the new tokens.

    ``temperature`` 0 is greedy (argmax, ties to the lowest id); above 0 samples from
    softmax(logits / temperature), restricted to the ``top_k`` largest when given, with a numpy
    generator seeded by ``seed``.  Generation stops early after a token in ``stop_tokens``
    (included in the result).  ``model`` is a litegpu ``CompiledModel``.
    """
    prompt = [int(t) for t in np.asarray(list(prompt_tokens)).reshape(-1)]
    if not prompt:
        raise InvalidArgumentError("generate needs at least one prompt token")
    if max_new_tokens < 0 or temperature < 0:
        raise InvalidArgumentError(f"max_new_tokens ({max_new_tokens}) and temperature ({temperature}) "
                                   "cannot be negative")
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
        return _softmax_sample(logits, temperature, top_k, rng)

    last = _prefill(loop, prompt, pad_token)
    out: list[int] = []
    position = len(prompt)
    while len(out) < max_new_tokens:
        token = pick(last)
        out.append(token)
        if token in stops or len(out) == max_new_tokens:
            break
        last = loop.step(loop.decode, [token], position)[0]
        position += 1
    return out


def _prefill(loop: _Loop, prompt: list[int], pad_token: int) -> np.ndarray:
    """Feed the prompt; returns the logits after its last token."""
    position, chunk = 0, loop.chunk
    limit = loop.max_len if loop.max_len is not None else position + len(prompt) + chunk
    last: np.ndarray | None = None
    while position < len(prompt):
        part = prompt[position:position + chunk]
        if position + chunk <= limit:
            logits = loop.step(loop.prefill, part + [pad_token] * (chunk - len(part)), position)
            last = logits[len(part) - 1]
            position += len(part)
        else:
            for token in part:
                last = loop.step(loop.decode, [token], position)[0]
                position += 1
    assert last is not None
    return last


__all__ = ["generate"]
