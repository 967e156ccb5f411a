"""Tokens generated on the device: a chunk of decode steps in one XLA program.

``litegpu.generate`` feeds an LLM's ``decode`` signature one token at a time.  Dispatched from Python, every token
costs a program launch and, to pick the next token, a wait for the logits (on the H200 a decode step cost about 0.8
ms beyond its weights' reads, BENCHMARKS.md "GPU").  Here ``chunk`` decode steps run inside one program, a
``lax.fori_loop`` with a fixed trip count around the traced decode subgraph: each step picks its token on the device
(greedy: argmax, ties to the lowest id as ``np.argmax``; sampled: temperature, top-k, top-p, JAX's counter-based
random numbers from a seed) and feeds it to the next, the KV cache is carried through the loop and donated to the
program (updated in place), and one array of ``chunk`` tokens comes back per launch.  A trip count that XLA knows
keeps the loop on the device: a ``while`` loop whose end depends on the data would send its condition to the host
every iteration.  So stop tokens do not end the loop: tokens after a stop token, and past the number asked for, come
back as ``MASKED`` (-1), and the host stops reading there (the work after them is wasted, at most one chunk).

The caches are carried in the layout XLA picks for the loop (``Layout.AUTO``): the attention's product with the
values reads them along the positions, and XLA GPU lays a stacked value cache out with the positions minor where
the product is a reduction (the int4 decoder's).  With the default layout as the program's parameter, every
launch transposed the whole cache in and out (17 MB of temporaries, 5.8 % of a 330 MB int4 decoder's weights,
``bench/gpu/gpu_compile.py``); now the stacking before the first chunk lays the cache out so, and the unstacking
after the last one lays it back, once a generation.

The loop reads the decode signature's tensors through a ``StepLayout``: which subgraph inputs are the token, its
position, the causal mask (litert-torch's ``mask_as_input``) and the caches, and which output is the logits.

A token's cost follows the positions filled, not the cache's capacity: a chunk's attention reads the first rows of
each cache, a bucket of ``kv_rows.row_buckets`` just past the chunk's last position (256, 384, 512, ... rows of a
4096-row cache), one program per bucket, each taking the caches in the layout of the full cache's program
(``kv_rows`` says how the graph is traced for fewer rows, and when it cannot be: ``full_cache_reason``).
``LITEGPU_KV_BUCKETS=0`` reads the whole cache at every step, as the graph says.  Once a generation runs in a
bucket, the next bucket's program is compiled on a background thread (``ahead.COMPILE_AHEAD``), so that reaching it
does not stall the answer for a compile.
"""

from __future__ import annotations

import functools
import warnings
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import SignatureError
from ...ir import Model, numpy_dtype
from ..decoding import DEFAULT_CHUNK, MASKED, Sampling
from .ahead import COMPILE_AHEAD, compile_ahead_enabled, finished
from .kv_rows import RowPlan, cache_rows, plan_or_reason, row_buckets, smallest_rows_setting
from .kv_rows import rows_for as bucket_holding


@dataclass(frozen=True)
class StepLayout:
    """Where the decode subgraph's inputs and outputs sit (positions in the subgraph's order)."""

    input_specs: tuple[tuple[tuple[int, ...], str], ...]   # (shape, numpy dtype name) of every input
    token: int
    position: int
    mask: int | None
    caches: tuple[tuple[int, int], ...]                      # (input position, output position)
    logits: int
    max_len: int | None                                      # cache rows (positions past it are clamped)

    @classmethod
    def of(cls, model: Model, decode: str, tokens: str, position: str, logits: str, mask: str | None,
           caches: list[str], max_len: int | None) -> "StepLayout":
        """The layout of signature ``decode`` of ``model``, from its tensor names."""
        sig = next((s for s in model.signatures if s.key == decode), None)
        if sig is None:
            raise SignatureError(f"{model.source}: no signature {decode!r}")
        sg = model.subgraphs[sig.subgraph_index]
        ins = {t.name: list(sg.inputs).index(t.tensor_index) for t in sig.inputs}
        outs = {t.name: list(sg.outputs).index(t.tensor_index) for t in sig.outputs}
        specs = tuple((tuple(int(d) for d in sg.tensors[t].shape), np.dtype(numpy_dtype(sg.tensors[t].dtype)).name)
                      for t in sg.inputs)
        return cls(specs, ins[tokens], ins[position], ins[mask] if mask else None,
                   tuple((ins[n], outs[n]) for n in caches), outs[logits], max_len)


def _pick(jnp: Any, jax: Any, logits: Any, sampling: Sampling, key: Any, temperature: Any = None,
          top_p: Any = None) -> Any:
    """The next token from logits [..., vocab] (their last position).  ``temperature`` and ``top_p``: traced values
    standing for ``sampling.temperature`` and ``sampling.top_p`` (one program serves every value)."""
    last = logits.reshape(-1, logits.shape[-1])[-1]
    if sampling.greedy:
        return jnp.argmax(last).astype(jnp.int32)
    temperature = jnp.float32(sampling.temperature) if temperature is None else temperature
    scaled = last.astype(jnp.float32) / temperature
    if sampling.top_k is not None and 0 < sampling.top_k < scaled.shape[0]:
        cutoff = jax.lax.top_k(scaled, sampling.top_k)[0][-1]
        scaled = jnp.where(scaled >= cutoff, scaled, -jnp.inf)
    if sampling.top_p is not None:
        top_p = jnp.float32(sampling.top_p) if top_p is None else top_p
        scaled = jnp.where(scaled >= top_p_cutoff(jnp, jax, scaled, top_p), scaled, -jnp.inf)
    return jax.random.categorical(key, scaled).astype(jnp.int32)


def top_p_cutoff(jnp: Any, jax: Any, scaled: Any, top_p: Any) -> Any:
    """The smallest logit of nucleus sampling's set: the largest logits of ``scaled`` [vocab] (-inf: left out
    already) whose probabilities, largest first, reach ``top_p``; -inf (keep all) for ``top_p`` >= 1."""
    desc = jnp.sort(scaled)[::-1]
    probs = jax.nn.softmax(desc)
    before = jnp.cumsum(probs) - probs   # the probability of the logits larger than each
    count = jnp.maximum(jnp.sum((before < top_p) & (desc > -jnp.inf)), 1)
    return jnp.where(top_p < 1, desc[count - 1], -jnp.inf)


# backend -> {program key: compiled program}: a generate call makes a DecodeLoop, the programs outlive it
_PROGRAMS: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()


def _stop_slots(count: int) -> int:
    """Stop tokens are an input padded to a power of two, so that a few programs serve every list of them."""
    return 1 << max(0, (max(count, 1) - 1).bit_length())


class CarriedCaches:
    """One decode step of an XLA backend's subgraph as a function of the KV cache in the form the device programs
    carry it: the caches of repeated layers that the backend loops over stacked, one array per slot (k, v) for
    the whole generation (the layer loop updates each in place, and no step copies them), then the other caches.
    The base of the single-sequence ``DecodeLoop`` and of ``xla_batched_decode.BatchedDecode``."""

    def __init__(self, backend: Any, layout: StepLayout, smallest_rows: int | None = None):
        self.backend, self.layout = backend, layout
        cache_inputs = {at for at, _ in layout.caches}
        self.groups = tuple(sorted((t0, positions) for t0, positions in backend.stacked_inputs().items()
                                   if set(positions) <= cache_inputs))
        grouped = {p for _, positions in self.groups for p in positions}
        self.loose = tuple(k for k, (at, _) in enumerate(layout.caches) if at not in grouped)
        self._plans: dict[int, RowPlan] = {}
        self.buckets, self.full_cache_reason = self._row_buckets(smallest_rows)

    # ---- the cache rows a step attends over --------------------------------------------------------
    def _row_buckets(self, smallest: int | None) -> tuple[tuple[int, ...], str]:
        """(the cache lengths the steps are compiled for, why only the full one where so; "" otherwise).
        ``smallest``: the shortest bucket; None: ``$LITEGPU_KV_BUCKETS``'s (256 by default); 0: the full cache."""
        full = self.layout.max_len
        if full is None or not self.layout.caches:
            return (), "the decode signature has no KV cache of known length"
        smallest = smallest_rows_setting() if smallest is None else (smallest or None)
        buckets = row_buckets(full, smallest)
        if smallest is None:
            return buckets, "turned off ($LITEGPU_KV_BUCKETS=0)"
        if len(buckets) > 1:
            plan, reason = plan_or_reason(self.backend.model, self.backend.subgraph_index,
                                          [at for at, _ in self.layout.caches], buckets[0])
            if plan is None:
                reason = f"the decode steps read the whole KV cache at every position: {reason}"
                warnings.warn(f"{self.backend.model.source}: {reason}", RuntimeWarning, stacklevel=4)
                return (full,), reason
            self._plans[buckets[0]] = plan
        return buckets, ""

    def rows_for(self, position: Any, steps: int) -> int | None:
        """The cache rows a launch of ``steps`` steps from ``position`` (a host int) attends over; None for the
        whole cache (no buckets, or a position known only on the device)."""
        if not self.buckets or not isinstance(position, (int, np.integer)):
            return None
        rows = bucket_holding(min(int(position) + steps, self.buckets[-1]), self.buckets)
        return None if rows == self.buckets[-1] else rows

    def next_bucket(self, rows: int | None) -> int | None:
        """The bucket whose program a launch in ``rows`` hands to ``COMPILE_AHEAD``: the next one, unless it is the
        whole cache's (compiled before any bucket's), ``rows`` is the whole cache, or compiling ahead is off."""
        if rows is None or not compile_ahead_enabled():
            return None
        after = self.buckets[self.buckets.index(rows) + 1]
        return None if after == self.buckets[-1] else after

    def row_plan(self, rows: int | None) -> RowPlan | None:
        """How a step is traced for the caches' first ``rows`` rows; None for the whole cache."""
        if rows is None:
            return None
        if rows not in self._plans:
            self._plans[rows] = RowPlan.of(self.backend.model, self.backend.subgraph_index,
                                           [at for at, _ in self.layout.caches], rows)
        return self._plans[rows]

    def stacked(self, caches: list) -> list:
        """The KV cache (``layout.caches`` order, one array per layer) in the carried form: the stacks of
        ``groups``, then the other caches (in the layout they come in)."""
        jax = self.backend.jax
        by_input = {at: c for (at, _), c in zip(self.layout.caches, caches)}
        return ([jax.numpy.stack([by_input[p] for p in positions]) for _, positions in self.groups]
                + [caches[k] for k in self.loose])

    def unstacked(self, carried: list) -> list:
        """``carried`` back in ``layout.caches`` order, one array per layer."""
        found: dict[int, Any] = {}
        for (_, positions), stack in zip(self.groups, carried):
            found.update((p, stack[k]) for k, p in enumerate(positions))
        for k, value in zip(self.loose, carried[len(self.groups):]):
            found[self.layout.caches[k][0]] = value
        return [found[at] for at, _ in self.layout.caches]

    @property
    def device(self) -> Any:
        """Where the caches live: the runtime places its host caches there."""
        return self.backend.state.device

    def cache_specs(self) -> list[tuple[tuple[int, ...], str]]:
        """(shape, dtype name) of each carried cache of one sequence."""
        specs = self.layout.input_specs
        caches = [((len(positions), *specs[positions[0]][0]), specs[positions[0]][1]) for _, positions in self.groups]
        return caches + [specs[self.layout.caches[k][0]] for k in self.loose]

    def decode_step(self, params: Any, caches: list, token: Any, position: Any,
                    rows: int | None = None) -> tuple[Any, list]:
        """Trace one decode step: ``token`` (a scalar) fed at ``position`` (clamped into the cache) with the carried
        ``caches``; returns (the logits of the subgraph's output, the caches it leaves, carried form).  ``rows``:
        the attention reads the caches' first ``rows`` rows (``position`` must be below), None all of them."""
        jnp = self.backend.jax.numpy
        layout = self.layout
        if layout.max_len:  # steps past the tokens wanted may run past the cache: keep indices in range
            position = jnp.minimum(position, layout.max_len - 1)
        inputs: list[Any] = [None] * len(layout.input_specs)
        for k, (shape, dtype) in enumerate(layout.input_specs):
            if k == layout.token:
                inputs[k] = jnp.full(shape, token, dtype)
            elif k == layout.position:
                inputs[k] = jnp.full(shape, position, dtype)
            elif k == layout.mask:
                rows, length = shape[-2], shape[-1]
                allowed = jnp.arange(length)[None, :] <= (position + jnp.arange(rows))[:, None]
                inputs[k] = jnp.where(allowed, 0, jnp.finfo(dtype).min).astype(dtype).reshape(shape)
        stacks, loose = caches[:len(self.groups)], caches[len(self.groups):]
        for k, cache in zip(self.loose, loose):
            inputs[layout.caches[k][0]] = cache
        if self.groups:
            outputs, _, left = self.backend.trace_stacked(
                params, {}, inputs, {t0: stack for (t0, _), stack in zip(self.groups, stacks)}, self.row_plan(rows))
            new_stacks = [left[t0].astype(stack.dtype) for (t0, _), stack in zip(self.groups, stacks)]
        else:
            outputs, _ = self.backend.trace(params, {}, inputs, self.row_plan(rows))
            new_stacks = []
        new_caches = new_stacks + [outputs[layout.caches[k][1]].astype(c.dtype) for k, c in zip(self.loose, loose)]
        return outputs[layout.logits], new_caches

    @staticmethod
    def carried_layout() -> Any:
        """The layout the programs are compiled to take and give their caches in: XLA's choice."""
        from jax.experimental.layout import Layout

        return Layout.AUTO


class DecodeLoop(CarriedCaches):
    """``chunk`` decode steps of one XLA backend's subgraph as one program (see the module docstring).

    ``run(caches, token, position, step, valid, stopped)`` dispatches a chunk without waiting: ``caches`` (device
    arrays, as ``carried`` makes them from the ``layout.caches`` order) are consumed; it returns (tokens [chunk] int32, the new caches, the last
    token, whether a stop token came) as device arrays, which feed the next chunk directly.  ``step`` counts the
    tokens sampled before (it keys the random numbers, so a seed gives the same tokens whatever the chunk size),
    ``valid`` how many of this chunk's tokens are wanted.  The seed, the temperature, top-p and the stop tokens are
    inputs of the program, so one compiled program serves every call with the same chunk, top-k, use of top-p and
    number of stop slots (kept per backend, and in the compile cache when the model has one)."""

    def __init__(self, backend: Any, layout: StepLayout, chunk: int = DEFAULT_CHUNK,
                 sampling: Sampling = Sampling(), stop_tokens: tuple[int, ...] = (), seed: int | None = None,
                 smallest_rows: int | None = None):
        if chunk < 1:
            raise ValueError(f"chunk must be at least 1, got {chunk}")
        super().__init__(backend, layout, smallest_rows)
        self.chunk = int(chunk)
        self.sampling, self.stop_tokens = sampling, tuple(sorted({int(t) for t in stop_tokens}))
        self.seed = 0 if seed is None else int(seed)
        # what the compiled program depends on; greedy programs ignore the temperature and top-p
        self._shape = Sampling(0.0, None, None) if sampling.greedy else Sampling(
            1.0, sampling.top_k, None if sampling.top_p is None else 1.0)

    # ---- the caches as the loop carries them ------------------------------------------------------
    def carried(self, caches: list) -> list:
        """The KV cache (``layout.caches`` order, one array per layer) as the program takes it: the stacks of
        ``groups``, then the other caches, in the program's layout."""
        jax = self.backend.jax
        return [_laid_out(jax, value, wanted) for value, wanted in zip(self.stacked(caches), self.cache_formats())]

    def per_layer(self, carried: list) -> list:
        """``carried`` back in ``layout.caches`` order, one array per layer (in the default layout)."""
        return self.unstacked([_laid_out(self.backend.jax, value, None) for value in carried])

    # ---- the program ----------------------------------------------------------------------------
    def _steps(self, params: Any, caches: list, token: Any, position: Any, step: Any, valid: Any,
               stopped: Any, seed: Any, temperature: Any, top_p: Any, stops: Any, rows: int | None = None) -> tuple:
        jax = self.backend.jax
        jnp = jax.numpy
        key = jax.random.key(seed)

        def body(i: Any, carry: tuple) -> tuple:
            caches, token, stopped, out = carry
            logits, new_caches = self.decode_step(params, caches, token, position + i, rows)
            picked = _pick(jnp, jax, logits, self._shape, jax.random.fold_in(key, step + i), temperature, top_p)
            shown = jnp.where(stopped | (i >= valid), MASKED, picked)
            stopped = stopped | jnp.any(picked == stops)
            return new_caches, picked, stopped, out.at[i].set(shown)

        out = jnp.full((self.chunk,), MASKED, jnp.int32)
        caches, token, stopped, out = jax.lax.fori_loop(0, self.chunk, body, (list(caches), token, stopped, out))
        return out, caches, token, stopped

    def _specs(self) -> list[Any]:
        jax = self.backend.jax
        sharding = self.backend.state.sharding
        spec = lambda shape, dtype: jax.ShapeDtypeStruct(shape, np.dtype(dtype), sharding=sharding)  # noqa: E731
        caches = [spec(shape, dtype) for shape, dtype in self.cache_specs()]
        return [caches, spec((), np.int32), spec((), np.int32), spec((), np.int32), spec((), np.int32),
                spec((), np.bool_), spec((), np.int32), spec((), np.float32), spec((), np.float32),
                spec((_stop_slots(len(self.stop_tokens)),), np.int32)]

    def lowered(self, rows: int | None = None) -> Any:
        """The program lowered for the layout's shapes (``bench/gpu/gpu_compile.py`` compiles it for a GPU not here);
        ``rows``: the program of that bucket (it takes the caches in the full cache's program's layout)."""
        return self._jitted(rows).lower(self.backend.params, *self._specs())

    def _jitted(self, rows: int | None = None) -> Any:
        jax = self.backend.jax
        sharding = self.backend.state.sharding
        from jax.experimental.layout import Format

        if rows is None:
            caches = [Format(self.carried_layout(), sharding)] * (len(self.groups) + len(self.loose))
        else:  # the layouts XLA chose for the full cache, so that every bucket's program takes the same caches
            caches = self.cache_formats()
        return jax.jit(functools.partial(self._steps, rows=rows), donate_argnums=(1,),
                       in_shardings=(sharding, caches, *[sharding] * 9),
                       out_shardings=(sharding, caches, sharding, sharding))

    def cache_formats(self) -> list[Any]:
        """The layout (a ``jax`` Format) of each carried cache as the compiled programs take and return it: the
        full cache's program's (compiled first)."""
        return list(self._program().input_formats[0][1])

    def _index(self, rows: int | None) -> tuple:
        """What a compiled program depends on, as its key among the backend's programs."""
        return (self.chunk, self._shape, _stop_slots(len(self.stop_tokens)), self.layout, self.groups, rows)

    def _compiled(self, rows: int | None) -> Any:
        key = {"decode_loop": self.chunk, "sampling": repr(self._shape), "stop_slots": self._index(rows)[2],
               "layout": repr(self.layout), "stacked_caches": repr(self.groups)}
        if rows is not None:  # the full cache's program keeps the key it had before buckets
            key.update(kv_rows=rows, carried_formats=repr(self.cache_formats()))
        return self.backend.compile_program(self._jitted(rows), self._specs(), key)

    def _program(self, rows: int | None = None) -> Any:
        programs = _PROGRAMS.setdefault(self.backend, {})
        index = self._index(rows)
        found = finished(programs, index)  # one handed to COMPILE_AHEAD: waited for, or compiled here if not started
        if found is None:
            found = self._compiled(rows)
        programs[index] = found
        return found

    def _compile_next_bucket(self, rows: int | None, launched: Any) -> None:
        """Hand the compile of the bucket after ``rows`` (a generation now runs in ``rows``) to ``COMPILE_AHEAD``,
        started once ``launched`` is ready.  Only the next one: a short answer compiles at most one program it
        does not use (kept by the compile cache), and a bucket spans at least a quarter of its rows (128 tokens and
        up) for the compile to finish in."""
        after = self.next_bucket(rows)
        if after is None:
            return
        programs = _PROGRAMS.setdefault(self.backend, {})
        if self._index(after) not in programs:
            future = COMPILE_AHEAD.submit(functools.partial(self._compiled, after), launched)
            if future is not None:
                programs[self._index(after)] = future

    def run(self, caches: list, token: Any, position: int, step: int, valid: int, stopped: Any = False) -> tuple:
        jax = self.backend.jax
        device = self.backend.state.device
        put = lambda v, dtype: v if hasattr(v, "block_until_ready") else jax.device_put(np.asarray(v, dtype), device)  # noqa: E731
        stops = np.full(_stop_slots(len(self.stop_tokens)), MASKED, np.int32)
        stops[:len(self.stop_tokens)] = self.stop_tokens
        top_p = 1.0 if self.sampling.top_p is None else self.sampling.top_p
        args = [list(caches), put(token, np.int32), put(position, np.int32), put(step, np.int32),
                put(valid, np.int32), put(stopped, np.bool_), put(self.seed % (1 << 31), np.int32),
                put(self.sampling.temperature or 1.0, np.float32), put(top_p, np.float32), put(stops, np.int32)]
        rows = self.rows_for(position, self.chunk)
        launched = self._program(rows)(self.backend.params, *args)
        self._compile_next_bucket(rows, launched[0])
        return launched


def _laid_out(jax: Any, value: Any, wanted: Any) -> Any:
    """``value`` (a device array) in the layout of Format ``wanted`` (None: the default layout), copied only
    where it differs."""
    from jax.experimental.layout import Format, Layout

    have = getattr(value, "format", None)
    if have is None or have.layout is None:
        return value
    if wanted is None:
        wanted = Format(Layout(major_to_minor=tuple(range(value.ndim))), value.sharding)
    if wanted.layout is None or have.layout == wanted.layout:
        return value
    return jax.device_put(value, wanted)


def deviceless_generation_programs(model: Model, state: Any, precision: str = "fp32", chunk: int = DEFAULT_CHUNK,
                                   positions: tuple[int, ...] = ()) -> list[tuple[str, Any, list, int | None]]:
    """(label, lowered program, the weights it reads as (params key, tensor), the cache rows its attention reads:
    None for all) of the decode loop of an LLM with ``prefill`` / ``decode`` signatures (litert-torch's names), for
    ``bench/gpu/gpu_compile.py``: the whole cache's program, then the bucket's of a chunk from each of ``positions``
    (where that is not the whole cache); [] for other models."""
    found = deviceless_decode(model, state, precision)
    if found is None:
        return []
    backend, layout, weights = found
    loop = DecodeLoop(backend, layout, chunk)
    programs = [(f"decode loop x{chunk}", loop.lowered(), weights, None)]
    for position in positions:
        rows = loop.rows_for(position, chunk)
        if rows is not None:
            programs.append((f"decode loop x{chunk} at {position} ({rows} rows)", loop.lowered(rows), weights, rows))
    return programs


def deviceless_decode(model: Model, state: Any, precision: str = "fp32") -> tuple[Any, StepLayout, list] | None:
    """(the GPU backend of an LLM's ``decode`` signature, its ``StepLayout``, the weights it reads as (params key,
    tensor)) for programs compiled without a GPU; None for a model without litert-torch's signature names."""
    from .backend import XlaBackend

    layout = decode_layout(model)
    if layout is None:
        return None
    sig = next(s for s in model.signatures if s.key == "decode")
    sg = model.subgraphs[sig.subgraph_index]
    backend = XlaBackend(model, sig.subgraph_index, "gpu", precision=precision, state=state)
    read = [(key, sg.tensors[t]) for (s_index, t), key in state.param_key.items() if s_index == sig.subgraph_index]
    read += [(key, sg.tensors[t]) for (s_index, t), key in state.folded.items() if s_index == sig.subgraph_index]
    read += [(key, sg.tensors[t]) for (s_index, t), key in state.stacked_key.items() if s_index == sig.subgraph_index]
    return backend, layout, list({key: t for key, t in read if key in state.params}.items())


def decode_layout(model: Model) -> StepLayout | None:
    """The ``StepLayout`` of an LLM's ``decode`` signature by litert-torch's names; None for another model."""
    sig = next((s for s in model.signatures if s.key == "decode"), None)
    if sig is None:
        return None
    names_in = {t.name for t in sig.inputs}
    names_out = {t.name for t in sig.outputs}
    tokens = next((n for n in ("tokens", "input_ids") if n in names_in), None)
    position = next((n for n in ("input_pos", "positions") if n in names_in), None)
    logits = "logits" if "logits" in names_out else None
    if tokens is None or position is None or logits is None:
        return None
    mask = next((n for n in names_in if "mask" in n.lower() and n not in names_out), None)
    caches = [n for n in (t.name for t in sig.inputs) if n in names_out]
    sg = model.subgraphs[sig.subgraph_index]
    by_name = {t.name: sg.tensors[t.tensor_index] for t in sig.inputs}
    inputs = list(sg.inputs)
    max_len = int(by_name[mask].shape[-1]) if mask else (
        cache_rows(model, sig.subgraph_index, [inputs.index(by_name[n].index) for n in caches]) if caches else None)
    return StepLayout.of(model, "decode", tokens, position, logits, mask, caches, max_len)


__all__ = ["DEFAULT_CHUNK", "MASKED", "CarriedCaches", "DecodeLoop", "Sampling", "StepLayout",
           "decode_layout", "deviceless_decode", "deviceless_generation_programs", "top_p_cutoff"]
