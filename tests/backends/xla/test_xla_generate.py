"""The device-side token pickers of ``backends.xla.generate`` (one sequence) and ``backends.xla.batched_decode`` (a
value per slot): greedy ties, top-k and top-p support, sampled frequencies, and the host sampler's agreement."""

import numpy as np
import pytest

from litegpu.backends.xla.device import jax_module
from litegpu.backends.xla.batched_decode import _sample, bucket_for, slot_buckets
from litegpu.backends.xla.generate import DecodeLoop, Sampling, StepLayout, _pick
from litegpu.runtime.generate import _softmax_sample

jax = jax_module()
jnp = jax.numpy


def pick_many(logits: np.ndarray, sampling: Sampling, draws: int) -> np.ndarray:
    keys = jax.random.split(jax.random.key(7), draws)
    return np.asarray(jax.jit(jax.vmap(lambda k: _pick(jnp, jax, jnp.asarray(logits), sampling, k)))(keys))


def test_greedy_takes_the_last_position_and_breaks_ties_to_the_lowest_id():
    logits = np.array([[9.0, 0, 0, 0], [0, 3.0, 1.0, 3.0]], np.float32)  # [T, vocab]: the last row counts
    assert int(_pick(jnp, jax, jnp.asarray(logits), Sampling(), None)) == 1


def test_sampled_frequencies_follow_the_softmax_and_top_k_keeps_only_the_largest():
    logits = np.log(np.array([0.5, 0.25, 0.15, 0.1], np.float32))
    draws = 20000
    counts = np.bincount(pick_many(logits, Sampling(temperature=1.0), draws), minlength=4) / draws
    np.testing.assert_allclose(counts, [0.5, 0.25, 0.15, 0.1], atol=0.015)
    top2 = np.bincount(pick_many(logits, Sampling(temperature=1.0, top_k=2), draws), minlength=4) / draws
    assert top2[2:].sum() == 0
    np.testing.assert_allclose(top2[:2], [2 / 3, 1 / 3], atol=0.015)
    hot = np.bincount(pick_many(logits, Sampling(temperature=0.25), draws), minlength=4) / draws
    assert hot[0] > 0.9  # a low temperature sharpens towards the argmax


def test_a_chunk_must_hold_one_step():
    layout = StepLayout((((1, 1), "int32"),), 0, 0, None, (), 0, None)
    with pytest.raises(ValueError, match="at least 1"):
        DecodeLoop(object(), layout, chunk=0)


PROBS = np.array([0.5, 0.25, 0.15, 0.1], np.float32)
# top-p 0.7 keeps the largest two (0.5 + 0.25 reaches it), top-p 0.5 the largest alone; top-k first, then top-p
# over what top-k kept: top-k 3 renormalizes to 0.56, 0.28, 0.17, so top-p 0.8 keeps the largest two
NUCLEUS = [(0, 0.7, [2 / 3, 1 / 3, 0, 0]), (0, 0.5, [1, 0, 0, 0]), (0, 1.0, PROBS), (3, 0.8, [2 / 3, 1 / 3, 0, 0]),
           (2, 1.0, [2 / 3, 1 / 3, 0, 0])]


def _assert_frequencies(draws, expected, atol):
    counts = np.bincount(np.asarray(draws).reshape(-1), minlength=4) / np.asarray(draws).size
    np.testing.assert_allclose(counts, expected, atol=atol)
    assert all(c == 0 for c, e in zip(counts, expected) if e == 0)


def test_top_p_keeps_the_smallest_set_of_the_largest_reaching_it_per_slot_on_device_and_on_the_host():
    logits, draws = jnp.asarray(np.log(PROBS)), 20000
    per_slot = jax.jit(jax.vmap(_sample, in_axes=(None, None, None, 0, None, None)))
    rng = np.random.default_rng(0)
    for top_k, top_p, expected in NUCLEUS:
        drawn = per_slot(logits, jnp.int32(top_k), jnp.int32(5), jnp.arange(draws, dtype=jnp.int32),
                         jnp.float32(1.0), jnp.float32(top_p))
        _assert_frequencies(drawn, expected, 0.015)
        host = [_softmax_sample(np.log(PROBS), 1.0, top_k, rng, top_p) for _ in range(4000)]
        _assert_frequencies(host, expected, 0.03)
    for top_k, top_p, expected in NUCLEUS[:1] + NUCLEUS[3:4]:  # the single-sequence loop's (top-k compiled in)
        _assert_frequencies(pick_many(np.log(PROBS), Sampling(1.0, top_k, top_p), draws), expected, 0.015)


def test_the_per_slot_sampler_draws_what_the_single_sequence_one_draws_and_is_greedy_at_temperature_0():
    logits = jnp.asarray(np.random.default_rng(3).normal(size=64).astype(np.float32))
    counters = jnp.arange(16, dtype=jnp.int32)
    single = jax.jit(jax.vmap(lambda c: _pick(jnp, jax, logits, Sampling(2.0, 9, 0.95),
                                              jax.random.fold_in(jax.random.key(11), c))))(counters)
    per_slot = jax.jit(jax.vmap(_sample, in_axes=(None, None, None, 0, 0, None)))
    slots = per_slot(logits, jnp.int32(9), jnp.int32(11), counters, jnp.full(16, 2.0, jnp.float32), jnp.float32(0.95))
    assert np.asarray(single).tolist() == np.asarray(slots).tolist() and len(set(np.asarray(slots).tolist())) > 3
    greedy = per_slot(logits, jnp.int32(9), jnp.int32(11), counters, jnp.zeros(16, jnp.float32), jnp.float32(0.95))
    assert set(np.asarray(greedy).tolist()) == {int(np.argmax(np.asarray(logits)))}


def test_slot_counts_compile_to_powers_of_two_and_the_most():
    assert slot_buckets(1) == (1,) and slot_buckets(8) == (1, 2, 4, 8) and slot_buckets(12) == (1, 2, 4, 8, 12)
    assert [bucket_for(n, slot_buckets(12)) for n in (1, 3, 5, 9, 12)] == [1, 4, 8, 12, 12]
