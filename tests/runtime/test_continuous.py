"""Continuous batching (runtime/continuous.py) on the small decoder of bench/models/decoder_model.py: every sequence gets the
tokens ``litegpu.generate`` gives it alone, whatever joins and leaves the batch around it; stop tokens, cancel,
refusals, close, threads and asyncio; the interleaving fallback of host engines.  litert-torch exports in a slow
test."""

import asyncio
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest

import litegpu
from litegpu import ClosedError, InvalidArgumentError
from litegpu.backends.xla.batched_decode import BatchedDecode
from litegpu.ir.save import to_bytes
from litegpu.runtime.continuous import ContinuousBatcher
from oracle import load_bench_module

dm = load_bench_module("decoder_model")

CONFIG = dict(layers=2, width=32, heads=2, vocab=64, max_len=24, prefill_len=4)
# the decoder on XLA CPU alone (the fast path would give a model this small to the official interpreter)
XLA_CPU = litegpu.Options(litegpu.HardwareAccelerator.CPU, cpu_options=litegpu.CpuOptions(engines=()))
# prompts longer and shorter than the prefill, counts from 1 to 12: they join and leave at different steps
PROMPTS = [[3, 1, 4, 1, 5], [2, 7], [9, 9, 9, 1, 2, 3, 4, 5, 6], [5], [11, 12, 13], [60, 1]]
COUNTS = [9, 4, 12, 1, 7, 6]
TIMEOUT = 120


@pytest.fixture(scope="module")
def model():
    return litegpu.CompiledModel.from_buffer(to_bytes(dm.build_decoder(dm.DecoderConfig(**CONFIG))), options=XLA_CPU)


@pytest.fixture(scope="module")
def alone(model):
    """Each prompt's greedy tokens from litegpu.generate, alone."""
    return [litegpu.generate(model, p, n) for p, n in zip(PROMPTS, COUNTS)]


@pytest.fixture
def batcher(model):
    made = []

    def make(max_sequences=3, **kwargs):
        made.append(ContinuousBatcher(model, max_sequences, **kwargs))
        return made[-1]

    yield make
    for b in made:
        b.close()


@pytest.fixture
def held_steps(monkeypatch):
    """Decode steps wait until the test lets them go (``set()``): what happens before the first one is the test's."""
    gate = threading.Event()
    original = BatchedDecode.step

    def step(self, *args):
        assert gate.wait(TIMEOUT)
        return original(self, *args)

    monkeypatch.setattr(BatchedDecode, "step", step)
    yield gate
    gate.set()


def test_greedy_tokens_equal_generate_alone_as_sequences_join_and_leave(batcher, alone, monkeypatch):
    """Six sequences through three slots: they wait, join after their prefill as slots free, leave at their
    count; the batch grows and shrinks (sequences moved between slots) and one more joins mid-run."""
    resized = []
    original = BatchedDecode.resize
    monkeypatch.setattr(BatchedDecode, "resize",
                        lambda self, state, sources: resized.append((state.slots, len(sources)))
                        or original(self, state, sources))
    b = batcher(3)
    handles = [b.submit(p, n) for p, n in zip(PROMPTS, COUNTS)]
    assert next(iter(handles[2])) == alone[2][0]  # running: one more joins now
    late = b.submit(PROMPTS[0], COUNTS[0])
    assert [h.result(TIMEOUT) for h in handles] == alone
    assert late.result(TIMEOUT) == alone[0]
    assert {h.finish_reason for h in handles} == {"length"}
    assert [(h.prompt_tokens, h.generated) for h in handles] == [(len(p), n) for p, n in zip(PROMPTS, COUNTS)]
    assert all(h.first_token_s is not None and h.first_token_s > 0 for h in handles)
    stats = b.stats()
    assert stats["engine"] == "xla-batched" and stats["tokens_generated"] == sum(COUNTS) + COUNTS[0]
    assert stats["prefills"] == len(PROMPTS) + 1
    # one step decodes a token for every sequence in the batch: far fewer steps than tokens after the first
    assert stats["decode_steps"] < sum(COUNTS) + COUNTS[0] - len(PROMPTS) - 1
    assert any(new > old for old, new in resized) and any(new < old for old, new in resized)


def test_a_sequence_ends_at_its_stop_token_included(batcher, alone):
    b = batcher(2)
    stop = alone[2][4]
    first = alone[2].index(stop)
    stopped = b.submit(PROMPTS[2], COUNTS[2], stop_tokens=[stop, 63])
    beside = b.submit(PROMPTS[0], COUNTS[0], stop_tokens=[63] if 63 not in alone[0] else [])
    assert list(stopped) == alone[2][:first + 1] and stopped.finish_reason == "stop"
    assert beside.result(TIMEOUT) == alone[0]


def test_several_steps_per_launch_give_the_same_tokens_and_drop_those_past_the_end(batcher, alone):
    """Three steps per launch (vLLM's multi-step scheduling): counts that are no multiple of 3 and a stop token in
    the middle of a launch end where they should; what the launch made past them is dropped."""
    b = batcher(2, steps_per_launch=3)
    stop = alone[2][4]
    handles = [b.submit(p, n) for p, n in zip(PROMPTS[:2], COUNTS[:2])]
    stopped = b.submit(PROMPTS[2], COUNTS[2], stop_tokens=[stop])
    assert [h.result(TIMEOUT) for h in handles] == alone[:2]
    assert stopped.result(TIMEOUT) == alone[2][:alone[2].index(stop) + 1]
    assert b.stats()["decode_steps"] % 3 == 0
    with pytest.raises(InvalidArgumentError, match="steps_per_launch"):
        ContinuousBatcher(b.model, 2, steps_per_launch=0)


def test_a_seeded_sequence_draws_the_same_tokens_alone_beside_others_and_from_generate(model, batcher):
    """Sampling per sequence (temperature, top-k, top-p) keyed by its own seed: the batch around it changes nothing,
    and it draws what litegpu.generate draws for that seed; a greedy sequence beside it stays greedy."""
    kwargs = dict(temperature=0.9, top_k=20, top_p=0.9, seed=1234)
    expected = litegpu.generate(model, PROMPTS[0], 10, **kwargs)
    b = batcher(2)
    solo = b.submit(PROMPTS[0], 10, **kwargs).result(TIMEOUT)
    crowd = [b.submit(PROMPTS[1], 8, temperature=1.5, seed=7), b.submit(PROMPTS[0], 10, **kwargs),
             b.submit(PROMPTS[2], 12)]
    assert solo == expected == crowd[1].result(TIMEOUT)
    assert crowd[2].result(TIMEOUT) == litegpu.generate(model, PROMPTS[2], 12)
    assert crowd[0].result(TIMEOUT) == litegpu.generate(model, PROMPTS[1], 8, temperature=1.5, seed=7)


def test_cancel_frees_the_slot_for_the_next_request_and_ends_the_iteration(batcher, held_steps, alone):
    b = batcher(1)
    first = b.submit(PROMPTS[2], COUNTS[2])
    queued = b.submit(PROMPTS[4], COUNTS[4])   # waits for the one slot
    dropped = b.submit(PROMPTS[1], COUNTS[1])  # cancelled while waiting: never runs
    dropped.cancel()
    tokens = iter(first)
    assert next(tokens) == alone[2][0]  # from its prefill; its first decode step is held
    first.cancel()
    first.cancel()  # idempotent
    assert list(tokens) == [] and first.finish_reason == "cancelled" and first.tokens == alone[2][:1]
    held_steps.set()
    assert queued.result(TIMEOUT) == alone[4]
    assert first.tokens == alone[2][:1]  # what the held step made for it was dropped
    assert dropped.generated == 0 and dropped.finish_reason == "cancelled"
    assert b.stats()["prefills"] == 2


def test_requests_no_step_could_serve_are_refused_at_submit(batcher):
    b = batcher(2)
    for prompt, count, kwargs, match in [
            ([1] * 20, 6, {}, "need 25 cache rows; the model's KV cache holds 24"),
            ([], 3, {}, "at least one prompt token"),
            ([1, 64], 3, {}, "token 64 is outside the vocabulary"),
            ([1, -1], 3, {}, "token -1 is outside"),
            ([1.5], 3, {}, "must be integers"),
            ([1], -1, {}, "cannot be negative"),
            ([1], 3, {"temperature": -1.0}, "cannot be negative"),
            ([1], 3, {"top_p": 0.0}, "top_p"),
            ([1], 3, {"top_k": -2}, "top_k"),
            ([1], 3, {"temperature": float("nan")}, "temperature must be a finite number"),
            ([1], 3, {"seed": -5}, "seed must be None or an int >= 0"),
            ([1], 2.5, {}, "max_new_tokens must be an int"),
            ([1], 3, {"stop_tokens": ["a"]}, "stop token must be an int")]:
        with pytest.raises(InvalidArgumentError, match=match):
            b.submit(prompt, count, **kwargs)
    assert b.submit([1] * 20, 5).result(TIMEOUT)  # exactly the cache: served
    nothing = b.submit([1], 0)
    assert nothing.result(TIMEOUT) == [] and nothing.finish_reason == "length"
    with pytest.raises(InvalidArgumentError, match="max_sequences"):
        ContinuousBatcher(b.model, 0)


def test_close_ends_unfinished_sequences_with_an_error_and_refuses_new_ones(batcher, held_steps):
    b = batcher(1)
    running, waiting = b.submit(PROMPTS[2], COUNTS[2]), b.submit(PROMPTS[0], COUNTS[0])
    tokens = iter(running)
    next(tokens)  # from its prefill; its first decode step is held
    b.close(timeout=0)
    with pytest.raises(ClosedError, match="takes no more"):
        b.submit(PROMPTS[0], 2)
    held_steps.set()
    for handle in (running, waiting):
        with pytest.raises(ClosedError, match="closed before the sequence finished"):
            handle.result(TIMEOUT)
        assert handle.finish_reason == "error"
    with pytest.raises(ClosedError):
        list(tokens)
    with pytest.raises(ClosedError):
        list(waiting)
    b.close()  # idempotent


def test_submits_and_iterations_from_several_threads(batcher, alone):
    b = batcher(3)
    results, errors = {}, []

    def client(k):
        try:
            results[k] = list(b.submit(PROMPTS[k], COUNTS[k]))
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert not errors and [results[k] for k in range(len(PROMPTS))] == alone


def test_async_for_serves_many_sequences_from_one_event_loop(batcher, alone):
    b = batcher(3)

    async def tokens(handle):
        return [t async for t in handle]

    async def main():
        handles = [b.submit(p, n) for p, n in zip(PROMPTS, COUNTS)]
        return await asyncio.wait_for(asyncio.gather(*(tokens(h) for h in handles)), TIMEOUT)

    before = threading.active_count()
    assert asyncio.run(main()) == alone
    assert threading.active_count() == before  # no thread per request


def test_caches_in_the_layout_the_step_program_takes(batcher, alone, monkeypatch):
    """XLA GPU may lay the stacked caches out its own way (``Layout.AUTO``); XLA CPU keeps the default, so a
    transposed layout is forced: inserting, resizing and stepping all keep it, and the tokens stay generate's."""
    from jax.experimental.layout import Layout

    from litegpu.backends.xla import batched_decode as xla_batched_decode

    transposed = Layout(major_to_minor=(0, 1, 3, 2))
    monkeypatch.setattr(BatchedDecode, "carried_layout", staticmethod(lambda: transposed))
    monkeypatch.setattr(xla_batched_decode, "_PROGRAMS", type(xla_batched_decode._PROGRAMS)())
    layouts = []
    original = BatchedDecode.step
    monkeypatch.setattr(BatchedDecode, "step", lambda self, state, *a: layouts.extend(
        c.format.layout.major_to_minor for c in state.caches) or original(self, state, *a))
    b = batcher(2)
    handles = [b.submit(p, n) for p, n in zip(PROMPTS[:3], COUNTS[:3])]
    assert [h.result(TIMEOUT) for h in handles] == alone[:3]
    assert layouts and set(layouts) == {(0, 1, 3, 2)}


def test_a_model_whose_decode_cannot_be_batched_interleaves_its_sequences(model, batcher, alone):
    """batched=False (what a host engine gets): one decode call per sequence and step, the same tokens."""
    b = batcher(3, batched=False)
    handles = [b.submit(p, n) for p, n in zip(PROMPTS, COUNTS)]
    assert [h.result(TIMEOUT) for h in handles] == alone
    stats = b.stats()
    assert stats["engine"] == "interleaved"
    assert stats["decode_steps"] == sum(COUNTS) - len(PROMPTS)


def test_the_official_interpreter_interleaves_and_batched_true_says_why_not(alone):
    pytest.importorskip("ai_edge_litert.interpreter")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = litegpu.CompiledModel.from_buffer(to_bytes(dm.build_decoder(dm.DecoderConfig(**CONFIG))),
                                                  litegpu.HardwareAccelerator.CPU)
    with ContinuousBatcher(model, 2) as b:
        if b.stats()["engine"] != "interleaved":
            pytest.skip("the fast path ran this decoder on XLA here")
        handles = [b.submit(p, n) for p, n in zip(PROMPTS[:3], COUNTS[:3])]
        assert [h.result(TIMEOUT) for h in handles] == alone[:3]
    with pytest.raises(InvalidArgumentError, match="cannot be batched: the decode signature does not run as one"):
        ContinuousBatcher(model, 2, batched=True)


LITERT_TORCH = Path(__file__).parents[1] / "heldout" / "litert_torch"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["smollm_tiny_dynamic_int8", "smollm_tiny_mask_as_input", "smollm_tiny_transposed_kv",
                                  "smollm_5layers_int4_block32"])
def test_litert_torch_exports_batched_give_generates_tokens(name):
    """litert-torch's conventions (prefill_<T> without logits, input_pos per token, a mask input, the transposed
    cache, looped layers) through the batched XLA step: every sequence gets generate's greedy tokens."""
    builtin = litegpu.Options(litegpu.HardwareAccelerator.CPU,
                              cpu_options=litegpu.CpuOptions(kernel_mode=litegpu.CpuKernelMode.BUILTIN))
    model = litegpu.CompiledModel.from_file(str(LITERT_TORCH / f"{name}.tflite"), options=builtin)
    prompts = [[3, 1, 4, 1, 5], [2, 7], [9, 9, 9, 1, 2, 3, 4, 5, 6, 7, 8], [5], [11, 12, 13] * 4]
    counts = [9, 4, 12, 7, 15]
    expected = [litegpu.generate(model, p, n) for p, n in zip(prompts, counts)]
    with ContinuousBatcher(model, 4) as b:
        handles = [b.submit(p, n) for p, n in zip(prompts, counts)]
        assert [h.result(600) for h in handles] == expected
        assert b.stats()["engine"] == "xla-batched"
