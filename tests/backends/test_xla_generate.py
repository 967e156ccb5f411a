"""The device-side token picker of ``backends.xla_generate``: greedy ties, top-k support, sampled frequencies."""

import numpy as np
import pytest

from litegpu.backends.xla import jax_module
from litegpu.backends.xla_generate import DecodeLoop, Sampling, StepLayout, _pick

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
