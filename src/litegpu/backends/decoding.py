"""What the runtime's token generation (``runtime.generate``, ``runtime.continuous``) and an engine's device decode
loop agree on, without either naming the other: the decode signature's tensors (``DecodeSignature``), how a token
is picked (``Sampling``), the slot a loop leaves empty (``MASKED``), the steps per launch (``DEFAULT_CHUNK``), and
the batched decode's slot counts and per-slot inputs.

An engine whose whole-subgraph program can run the decode signature step after step on its device offers that
through two optional capabilities of ``engine.SubgraphProgram``: ``decode_loop`` (one sequence, ``chunk`` steps
per launch) and ``batched_decode`` (many sequences, one step program vmapped over slots); both answer None where
the engine has none (a host engine, a plan in parts), and the runtime then runs the signature step by step.  The
XLA engine has both (``backends.xla.generate``, ``backends.xla.batched_decode``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MASKED = -1            # a token slot after a stop token, or past the tokens asked for
DEFAULT_CHUNK = 16     # decode steps per launch (BENCHMARKS.md "GPU": per-token cost against chunk size)

# The rows of a batched decode step's integer and float inputs ([rows, slots]): what each slot is fed.
POSITION, TOP_K, SEED, COUNTER = range(4)
TEMPERATURE, TOP_P = range(2)


@dataclass(frozen=True)
class Sampling:
    """How each token is picked: greedy (temperature 0) or sampled from softmax(logits / temperature), restricted
    to the ``top_k`` largest when given, then to the smallest set of the largest whose probabilities (after top-k)
    add up to ``top_p`` when given (nucleus sampling); ties at either cutoff are kept, as ``generate``'s host
    sampler keeps them."""

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True)
class DecodeSignature:
    """The decode signature by its tensors' names: the token and position inputs, the logits output, the causal
    mask input (litert-torch's ``mask_as_input``; None without one), the KV caches (inputs returned under the same
    name) and how many rows they hold (None: unknown)."""

    key: str
    tokens: str
    position: str
    logits: str
    mask: str | None
    caches: tuple[str, ...]
    max_len: int | None


def slot_buckets(most: int) -> tuple[int, ...]:
    """The slot counts batched programs are compiled for: the powers of two below ``most``, and ``most``."""
    if most < 1:
        raise ValueError(f"a batch holds at least one slot, not {most}")
    sizes = [1 << k for k in range(most.bit_length()) if 1 << k < most]
    return tuple(sizes + [most])


def bucket_for(count: int, buckets: Sequence[int]) -> int:
    """The smallest of ``buckets`` that holds ``count`` slots."""
    return next(b for b in buckets if b >= count)


__all__ = ["COUNTER", "DEFAULT_CHUNK", "MASKED", "POSITION", "SEED", "TEMPERATURE", "TOP_K", "TOP_P",
           "DecodeSignature", "Sampling", "bucket_for", "slot_buckets"]
