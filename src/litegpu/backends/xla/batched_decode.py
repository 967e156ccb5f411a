"""Decode steps of many sequences in one XLA program: the device side of continuous batching.

``runtime.continuous`` decodes every active sequence of an LLM together.  Here one program makes a token for each
of ``slots`` sequences: the decode subgraph traced once for one sequence (``CarriedCaches.decode_step``) and
``jax.vmap``-ed over the slots, the weights unbatched (one copy on the device, as the file holds them, read once
per step by all slots), the KV caches stacked on the device with a leading slot axis, each slot with its own
token, position and sampling.  A step reads the weights once for all slots: where a token's cost is reading the
weights (a GPU decoding one sequence), ``slots`` sequences cost about what one does.

The state carried from step to step, ``BatchState``, holds the stacked caches (donated to each step, updated in
place) and the tokens the last step picked (fed to the next one on the device, never read back first).  A
sequence joins after its own prefill (``insert`` writes its caches and first token into a free slot) and leaves
by being left out (its slot is free for the next).  Slot counts compile to a few sizes (``slot_buckets``:
1, 2, 4, ... up to the most): ``resize`` moves the sequences into a state of another size, compacting them.
One slot runs the subgraph unbatched (no vmap), the program ``litegpu.generate`` runs per step.  A launch may
run several steps (``steps``, a loop on the device, as vLLM's multi-step scheduling): the host's cost per launch
is then shared by more tokens, and joins, leaves and stop tokens wait for the launch's end (the tokens a sequence
makes past its end are dropped).

Sampling per slot, as inputs of the program: temperature (0: greedy, argmax with ties to the lowest id),
top-k (0: none), top-p (1: none) and JAX's counter-based random numbers keyed by the sequence's seed and its
count of tokens sampled on the device, so a seed gives the same tokens whichever slots and steps a sequence
shares (``xla_generate``'s single-sequence loop draws the same ones).  Programs where every slot is greedy skip
the sorting that top-k and top-p need.  The caches are carried in the layout XLA picks for the greedy step
program (``Layout.AUTO``, as ``xla_generate`` explains); the other programs take and give that layout.

As in ``xla_generate``'s loop, a launch's attention reads the caches' first rows only, a bucket just past the
furthest position any slot reaches in it (``kv_rows``), one program per bucket; once a launch runs in a bucket,
the next bucket's step (same slots and sampling) is compiled on a background thread (``ahead.COMPILE_AHEAD``).
"""

from __future__ import annotations

import functools
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

# the rows of ``step``'s integer and float inputs ([rows, slots]), and the slot counts, shared with the runtime
from ..decoding import COUNTER, POSITION, SEED, TEMPERATURE, TOP_K, TOP_P, bucket_for, slot_buckets  # noqa: F401
from .ahead import COMPILE_AHEAD, finished
from .generate import CarriedCaches, StepLayout, deviceless_decode, top_p_cutoff

# backend -> {program key: program}: a batcher makes a BatchedDecode, the programs outlive it
_PROGRAMS: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()


@dataclass
class BatchState:
    """What the steps hand on: the caches (carried form, a leading slot axis) and each slot's last token."""

    caches: list
    tokens: Any

    @property
    def slots(self) -> int:
        return int(self.tokens.shape[0])


class BatchedDecode(CarriedCaches):
    """Decode steps for ``slots`` sequences at once, ``steps`` of them per launch (see the module docstring).
    Thread-safe."""

    def __init__(self, backend: Any, layout: StepLayout, steps: int = 1, smallest_rows: int | None = None):
        if steps < 1:
            raise ValueError(f"a launch makes at least one step, not {steps}")
        super().__init__(backend, layout, smallest_rows)
        self.steps = int(steps)
        self._programs = _PROGRAMS.setdefault(backend, {})
        self._lock = threading.RLock()  # the sampled step compiles the greedy one first

    # ---- the state ------------------------------------------------------------------------------
    def empty(self, slots: int) -> BatchState:
        """A state of ``slots`` free slots (zero caches)."""
        jnp = self.backend.jax.numpy

        def zeros() -> tuple:
            return ([jnp.zeros((slots, *shape), dtype) for shape, dtype in self.cache_specs()],
                    jnp.zeros((slots,), jnp.int32))

        caches, tokens = self._helper(("empty", slots), zeros, (), (self.formats(slots), self._sharding))()
        return BatchState(caches, tokens)

    def insert(self, state: BatchState, slot: int, caches: list, token: int) -> BatchState:
        """``state`` with one prefilled sequence in ``slot``: its caches (carried form, as ``stacked`` makes them
        from the per-layer arrays of its prefill) and the token it feeds next."""
        slots = state.slots

        def put(stacks: list, tokens: Any, one: list, at: Any, first: Any) -> tuple:
            return ([s.at[at].set(o.astype(s.dtype)) for s, o in zip(stacks, one)],
                    tokens.at[at].set(first))

        one = [self._sharding] * len(caches)
        program = self._helper(("insert", slots), put, (0,),
                               (self.formats(slots), self._sharding),
                               (self.formats(slots), self._sharding, one, self._sharding, self._sharding))
        caches, tokens = program(state.caches, state.tokens, list(caches), np.int32(slot), np.int32(token))
        return BatchState(caches, tokens)

    def resize(self, state: BatchState, sources: Sequence[int]) -> BatchState:
        """A state of ``len(sources)`` slots whose slot i holds what slot ``sources[i]`` of ``state`` held (-1: a
        free slot): the batch grown, or shrunk with its sequences moved together."""
        jnp = self.backend.jax.numpy
        old, new = state.slots, len(sources)

        def gather(stacks: list, tokens: Any, index: Any) -> tuple:
            keep = index >= 0
            at = jnp.clip(index, 0, old - 1)

            def pick(value: Any) -> Any:
                taken = value[at]
                return jnp.where(keep.reshape((new,) + (1,) * (taken.ndim - 1)), taken, jnp.zeros_like(taken))

            return [pick(s) for s in stacks], pick(tokens)

        program = self._helper(("resize", old, new), gather, (), (self.formats(new), self._sharding),
                               (self.formats(old), self._sharding, self._sharding))
        caches, tokens = program(state.caches, state.tokens, np.asarray(sources, np.int32))
        return BatchState(caches, tokens)

    # ---- the step -------------------------------------------------------------------------------
    def step(self, state: BatchState, fed: np.ndarray, floats: np.ndarray, sampled: bool) -> tuple[Any, BatchState]:
        """Dispatch ``steps`` decode steps for every slot in one launch, without waiting: ``fed`` int32 [4, slots]
        (rows ``POSITION`` and ``COUNTER`` of the first step, ``TOP_K``, ``SEED``), ``floats`` float32 [2, slots]
        (``TEMPERATURE``, ``TOP_P``); ``sampled``: whether any slot samples.  ``state``'s caches are consumed.
        Returns (the tokens picked, int32 [steps, slots] on the device, and the state for the next launch)."""
        rows = self.rows_for(int(np.max(fed[POSITION])), self.steps)
        program = self.program(state.slots, sampled, rows)
        picked, last, caches = program(self.backend.params, state.caches, state.tokens, fed, floats)
        self._compile_next_bucket(state.slots, sampled, rows, picked)
        return picked, BatchState(caches, last)

    def program(self, slots: int, sampled: bool, rows: int | None = None) -> Any:
        """The compiled step for ``slots`` slots (in the compile cache when the model has one); ``rows``: the
        program whose attention reads the caches' first ``rows`` rows (None: all).  One compiled ahead
        (``_compile_next_bucket``) is waited for outside the lock, which its compile takes (``formats``)."""
        what = self._index(slots, sampled, rows)
        while True:
            found = finished(self._programs, what)
            if found is not None:
                return found
            with self._lock:
                if what in self._programs:  # handed to COMPILE_AHEAD or compiled by another thread meanwhile
                    continue
                self._programs[what] = program = self._compiled(slots, sampled, rows)
                return program

    def _index(self, slots: int, sampled: bool, rows: int | None) -> tuple:
        """What a step program depends on, as its key among the backend's programs."""
        return ("step", slots, self.steps, sampled, self.layout, self.groups, rows)

    def _compiled(self, slots: int, sampled: bool, rows: int | None) -> Any:
        key = {"batched_decode": slots, "steps": self.steps, "sampled": sampled, "layout": repr(self.layout),
               "stacked_caches": repr(self.groups),
               # the program bakes the carried caches' layout in: an entry made for another cannot be used
               "carried_layout": repr(self.carried_layout())}
        if rows is not None:  # the whole cache's programs keep the keys they had before buckets
            key.update(kv_rows=rows, carried_formats=repr(self.formats(slots)))
        return self.backend.compile_program(self._jitted(slots, sampled, rows), self._specs(slots), key)

    def _compile_next_bucket(self, slots: int, sampled: bool, rows: int | None, launched: Any) -> None:
        """Hand the compile of the step after ``rows`` (the batch's furthest sequence now runs in ``rows``) to
        ``COMPILE_AHEAD``, started once ``launched`` is ready: every sequence of the batch would otherwise wait
        for it when the furthest one reaches that bucket.  Same slots and sampling: a join or leave that changes
        them compiles its own, as before."""
        after = self.next_bucket(rows)
        if after is None:
            return
        what = self._index(slots, sampled, after)
        with self._lock:
            if what not in self._programs:
                future = COMPILE_AHEAD.submit(functools.partial(self._compiled, slots, sampled, after), launched)
                if future is not None:
                    self._programs[what] = future

    def lowered(self, slots: int, sampled: bool = False, rows: int | None = None) -> Any:
        """The launch's program lowered (``bench/gpu/gpu_compile.py`` compiles it for a GPU not here)."""
        return self._jitted(slots, sampled, rows).lower(self.backend.params, *self._specs(slots))

    def formats(self, slots: int) -> list[Any]:
        """The layout (a ``jax`` Format) of each carried cache of a ``slots`` state: the greedy step's choice."""
        return list(self.program(slots, False).input_formats[0][1])

    def _steps(self, params: Any, caches: list, tokens: Any, fed: Any, floats: Any, sampled: bool,
               rows: int | None) -> tuple:
        jax = self.backend.jax
        jnp = jax.numpy

        def one(caches: list, token: Any, position: Any) -> tuple:
            logits, new_caches = self.decode_step(params, caches, token, position, rows)
            return logits.reshape(-1, logits.shape[-1])[-1], new_caches

        def step(i: Any, caches: list, tokens: Any) -> tuple:
            if tokens.shape[0] == 1:  # the unbatched program: what a lone sequence runs
                logits, new_caches = one([c[0] for c in caches], tokens[0], fed[POSITION, 0] + i)
                logits, new_caches = logits[None], [c[None] for c in new_caches]
            else:
                logits, new_caches = jax.vmap(one)(caches, tokens, fed[POSITION] + i)
            if not sampled:
                return jnp.argmax(logits, axis=-1).astype(jnp.int32), new_caches
            return jax.vmap(_sample)(logits, fed[TOP_K], fed[SEED], fed[COUNTER] + i, floats[TEMPERATURE],
                                     floats[TOP_P]), new_caches

        if self.steps == 1:
            picked, caches = step(0, caches, tokens)
            return picked[None], picked, caches

        def body(i: Any, carry: tuple) -> tuple:
            caches, tokens, out = carry
            picked, caches = step(i, caches, tokens)
            return caches, picked, out.at[i].set(picked)

        out = jnp.zeros((self.steps, tokens.shape[0]), jnp.int32)
        caches, last, out = jax.lax.fori_loop(0, self.steps, body, (list(caches), tokens, out))
        return out, last, caches

    def _specs(self, slots: int) -> list[Any]:
        jax = self.backend.jax
        sharding = self._sharding
        caches = [jax.ShapeDtypeStruct((slots, *shape), np.dtype(dtype), sharding=sharding)
                  for shape, dtype in self.cache_specs()]
        return [caches, jax.ShapeDtypeStruct((slots,), np.int32, sharding=sharding),
                jax.ShapeDtypeStruct((4, slots), np.int32, sharding=sharding),
                jax.ShapeDtypeStruct((2, slots), np.float32, sharding=sharding)]

    def _jitted(self, slots: int, sampled: bool, rows: int | None = None) -> Any:
        from jax.experimental.layout import Format

        jax = self.backend.jax
        sharding = self._sharding
        if sampled or rows is not None:  # the whole cache's greedy program's layouts: all take the same state
            caches = self.formats(slots)
        else:
            caches = [Format(self.carried_layout(), sharding)] * (len(self.groups) + len(self.loose))
        steps = functools.partial(self._steps, sampled=sampled, rows=rows)
        return jax.jit(steps, donate_argnums=(1,),
                       in_shardings=(sharding, caches, sharding, sharding, sharding),
                       out_shardings=(sharding, sharding, caches))

    @property
    def _sharding(self) -> Any:
        return self.backend.state.sharding

    def _helper(self, what: tuple, fn: Any, donated: tuple, out_shardings: Any, in_shardings: Any = ()) -> Any:
        """A small program moving the state (``jax.jit``, kept with the step programs)."""
        key = (*what, self.steps, self.layout, self.groups)  # the layouts are those of this many steps' program
        with self._lock:
            if key not in self._programs:
                self._programs[key] = self.backend.jax.jit(fn, donate_argnums=donated, in_shardings=in_shardings,
                                                           out_shardings=out_shardings)
            return self._programs[key]


def _sample(logits: Any, top_k: Any, seed: Any, counter: Any, temperature: Any, top_p: Any) -> Any:
    """One slot's token from its logits [vocab]: argmax where ``temperature`` is 0, else drawn from
    softmax(logits / temperature) restricted to the ``top_k`` largest (0: all) and then to nucleus ``top_p``
    (ties at the cutoffs kept), as ``xla_generate._pick`` draws it for the same seed and count."""
    import jax
    import jax.numpy as jnp

    greedy = jnp.argmax(logits).astype(jnp.int32)
    scaled = logits.astype(jnp.float32) / jnp.where(temperature > 0, temperature, jnp.float32(1))
    vocab = scaled.shape[0]
    kth = jnp.sort(scaled)[::-1][jnp.clip(top_k - 1, 0, vocab - 1)]
    scaled = jnp.where((top_k > 0) & (top_k < vocab) & (scaled < kth), -jnp.inf, scaled)
    scaled = jnp.where(scaled >= top_p_cutoff(jnp, jax, scaled, top_p), scaled, -jnp.inf)
    key = jax.random.fold_in(jax.random.key(seed), counter)
    drawn = jax.random.categorical(key, scaled).astype(jnp.int32)
    return jnp.where(temperature > 0, drawn, greedy)


def deviceless_batched_programs(model: Any, state: Any, precision: str = "fp32", slots: Sequence[int] = (8, 32, 64),
                                position: int | None = None) -> list[tuple[str, Any, list, int, int | None]]:
    """(label, lowered program, the weights it reads as (params key, tensor), tokens per call, the cache rows its
    attention reads: None for all) of the batched decode step of an LLM (litert-torch's signature names) at each
    slot count, for ``bench/gpu/gpu_compile.py``; with ``position``, the program of the bucket of every sequence
    at that position."""
    found = deviceless_decode(model, state, precision)
    if found is None:
        return []
    backend, layout, weights = found
    batched = BatchedDecode(backend, layout)
    rows = None if position is None else batched.rows_for(position, batched.steps)
    if position is not None and rows is None:  # no bucket below the capacity: the whole-cache programs again
        return []
    at = "" if rows is None else f" at {position} ({rows} rows)"
    return [(f"batched decode x{n}{at}", batched.lowered(n, rows=rows), weights, n, rows) for n in slots]


__all__ = ["BatchState", "BatchedDecode", "bucket_for", "deviceless_batched_programs", "slot_buckets"]
