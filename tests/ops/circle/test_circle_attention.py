"""Circle's ATTENTION against Hugging Face's LlamaAttention, the module tico's onert adapter fuses into it.

Each case exports ``LlamaAttention`` (random weights) through ``tico.convert`` with the adapter installed,
checks the file holds one ATTENTION op, and runs our numpy reference and XLA lowering on it (written back
by our writer) against the unpatched module's output with the same cache: a DynamicCache (the new keys
appended) and a StaticCache (written at cache_position), grouped, multi-query and plain heads, a head size
that does not divide the hidden size, batches, padding, an empty past.  The shape rules and the static
form's position checks run without transformers, on models built by hand.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from circle_oracle import check_circle_model, have_onert, onert_outputs
from oracle import random_input

from litegpu.backends import ReferenceBackend
from litegpu.errors import ModelExecutionError, UnsupportedOpError
from litegpu.ir import read_model
from litegpu.ir.builder import ModelBuilder
from litegpu.ops import Target, find

CASES = {
    "decode_gqa": {},
    "prefill_after_past": {"tokens": 3, "past": 5, "kv_heads": 4},
    "batch_mqa_wide_heads_padding": {"batch": 2, "tokens": 2, "past": 3, "hidden": 24, "heads": 2, "kv_heads": 1,
                                     "head_dim": 16, "padding": 1},
    "empty_past": {"tokens": 4, "past": 0},
    "static_decode": {"cache": "static", "past": 8, "start": 5},
    "static_chunk_batch": {"cache": "static", "batch": 2, "tokens": 2, "past": 6, "start": 2, "kv_heads": 4},
}
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict:
    tico_models = pytest.importorskip("tico_models")  # torch and tico; the hand-built models below need neither
    folder = tmp_path_factory.mktemp("llama_attention")
    return {name: tico_models.make_llama_attention(folder, **case) for name, case in CASES.items()}


@pytest.mark.parametrize("name", list(CASES))
def test_tico_attention_matches_torch(made, name):
    m = made[name]
    model = read_model(m.path)
    assert [op.opcode_name for op in model.main.operators] == ["ATTENTION"]
    check_circle_model(model, m.inputs, m.torch_outputs, **TOLERANCE)


@pytest.mark.skipif(not have_onert(), reason="needs onert (pip install onert)")
def test_against_onert_where_it_runs(made, tmp_path):
    """onert 0.1.0 refuses to load ATTENTION ("Unsupported operation"); a later onert that runs tico's file
    is held to torch here (its upstream kernel reads another cache layout: this would say so)."""
    m = made["decode_gqa"]
    theirs = onert_outputs(m.path, m.inputs, tmp_path)
    if theirs is None:
        pytest.skip("onert does not run ATTENTION")
    np.testing.assert_allclose(theirs[0].reshape(m.torch_outputs[0].shape), m.torch_outputs[0], **TOLERANCE)


def attention_model(hidden=(1, 2, 8), heads=2, kv_heads=1, head_size=4, cache=3, keys=None,
                    position_dtype="int64"):
    """ATTENTION built by hand (constants for weights), its mask's key axis ``keys`` (default: appended)."""
    b, s, d = hidden
    keys = cache + s if keys is None else keys
    rng = np.random.default_rng(0)
    mb = ModelBuilder()
    x = mb.input("hidden", hidden)
    shapes = {"wq": (heads * head_size, d), "wk": (kv_heads * head_size, d), "wv": (kv_heads * head_size, d),
              "wo": (d, heads * head_size)}
    weights = [mb.constant(n, rng.normal(0, 0.5, shape).astype(np.float32)) for n, shape in shapes.items()]
    tables = [mb.input(n, (b, s, head_size)) for n in ("cos", "sin")]
    mask = mb.input("mask", (b, 1, s, keys))
    caches = [mb.input(n, (b, kv_heads, cache, head_size)) for n in ("past_key", "past_value")]
    position = mb.input("cache_position", (s,), position_dtype)
    y = mb.tensor("y", (b, s, d))
    mb.op("ATTENTION", [x, *weights, *tables, mask, *caches, position], [y])
    mb.output(y)
    return mb.build()


def feeds(model, positions):
    sg = model.main
    shapes = [sg.tensors[i].shape for i in sg.inputs]
    values = [random_input(shape, seed=i) for i, shape in enumerate(shapes[:-1])]
    return values + [np.asarray(positions, np.int64)]


def test_static_form_reads_the_written_cache():
    """Without transformers: the written form equals the appended form over the cache's first slots."""
    written = attention_model(cache=5, keys=5)
    appended = attention_model(cache=3)
    x, cos, sin, mask, key, value, _ = feeds(written, [3, 4])
    want = ReferenceBackend(appended).run([x, cos, sin, mask, key[:, :, :3], value[:, :, :3], np.zeros(2, np.int64)])
    check_circle_model(written, [x, cos, sin, mask, key, value, np.array([3, 4], np.int64)], want, **TOLERANCE)


@pytest.mark.parametrize("positions, why", [([4, 5], "cache_position 5 is outside the cache's 5 positions"),
                                            ([-1, 0], "cache_position -1 is outside"),
                                            ([2, 2], r"cache_position \[2, 2\] writes a cache slot twice")])
def test_static_positions_outside_the_cache_are_refused(positions, why):
    model = attention_model(cache=5, keys=5)
    with pytest.raises(ModelExecutionError, match=rf"ATTENTION \(#0\): {why}"):
        ReferenceBackend(model).run(feeds(model, positions))


@pytest.mark.parametrize("kwargs, why", [
    ({"keys": 4}, "the mask's key axis is 4: neither the cache's 3 positions followed by the 2 new ones"),
    ({"heads": 3, "kv_heads": 2}, r"wq \[12, 8\] must hold a multiple of the 2 key heads of size 4"),
    ({"head_size": 3, "heads": 1}, "the head size .* must be even"),
    ({"position_dtype": "float32"}, "cache_position is float32"),
])
def test_shapes_that_fit_neither_form_are_refused(kwargs, why):
    model = attention_model(**kwargs)
    sg = model.main
    assert re.search(why, find("ATTENTION").unsupported_reason(sg.operators[0], sg, Target.XLA_CPU))
    with pytest.raises(UnsupportedOpError, match=rf"op ATTENTION \(#0\) cannot run on reference: {why}"):
        ReferenceBackend(model).run(feeds(model, [3, 4]))
