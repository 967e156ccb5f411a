"""A decode step's attention over the filled rows of the KV cache (``backends.xla.kv_rows``): the plan derived from
the graph for litert-torch's three conventions (default and transposed cache layouts, mask as an input), the same
logits and caches as the whole cache gives, the loop's buckets switching as the position grows with the same
tokens, and the full cache, with the reason, where the graph bakes the cache's length in."""

from pathlib import Path

import numpy as np
import pytest

from litegpu.backends.xla.backend import XlaBackend
from litegpu.backends.xla.device import jax_module
from litegpu.backends.xla.generate import DecodeLoop, StepLayout, decode_layout
from litegpu.backends.xla.kv_rows import ROWS_ENV, RowPlan, plan_or_reason, row_buckets, rows_for, smallest_rows_setting
from litegpu.errors import InvalidArgumentError
from litegpu.ir import read_model
from litegpu.ir.builder import ModelBuilder

jax = jax_module()
MODELS = Path(__file__).parents[2] / "heldout" / "litert_torch"
CONVENTIONS = ["smollm_tiny_fp16", "smollm_tiny_transposed_kv", "smollm_tiny_mask_as_input"]


def test_buckets_grow_by_halves_of_a_doubling_up_to_the_capacity():
    assert row_buckets(4096) == (256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)
    assert row_buckets(64, 16) == (16, 24, 32, 48, 64) and row_buckets(300) == (256, 300)
    assert row_buckets(256) == (256,) and row_buckets(4096, None) == (4096,)
    buckets = row_buckets(4096)
    assert rows_for(128 + 16, buckets) == 256 and rows_for(2048 + 16, buckets) == 3072
    assert rows_for(9000, buckets) == 4096


def test_the_environment_turns_buckets_off_or_sets_the_shortest(monkeypatch):
    monkeypatch.delenv(ROWS_ENV, raising=False)
    assert smallest_rows_setting() == 256
    monkeypatch.setenv(ROWS_ENV, "off")
    assert smallest_rows_setting() is None
    monkeypatch.setenv(ROWS_ENV, "128")
    assert smallest_rows_setting() == 128
    monkeypatch.setenv(ROWS_ENV, "many")
    with pytest.raises(InvalidArgumentError, match=ROWS_ENV):
        smallest_rows_setting()


def _decoder(name):
    model = read_model(str(MODELS / f"{name}.tflite"))
    layout = decode_layout(model)
    sig = next(s for s in model.signatures if s.key == "decode")
    return model, XlaBackend(model, sig.subgraph_index, "cpu"), layout


@pytest.mark.parametrize("name", [pytest.param(CONVENTIONS[0], marks=pytest.mark.slow), *CONVENTIONS[1:]])
def test_a_step_on_the_first_rows_gives_the_whole_caches_logits_and_caches(name):
    """Every row past the position holds noise (a cache's rows past the tokens filled are never read): cut at 16
    rows the step makes the same caches and float32 logits within rounding, at the bucket's first and last rows."""
    model, backend, layout = _decoder(name)
    assert layout.max_len == 64
    loop = DecodeLoop(backend, layout, chunk=4, smallest_rows=16)
    assert loop.buckets == (16, 24, 32, 48, 64) and loop.full_cache_reason == ""
    rng = np.random.default_rng(0)
    caches = [rng.normal(size=shape).astype(dtype) for shape, dtype in loop.cache_specs()]

    def both(params, caches, token, position):
        return (loop.decode_step(params, caches, token, position),
                loop.decode_step(params, caches, token, position, 16))

    step = jax.jit(both)
    for position in (0, 9, 15):
        (whole, whole_caches), (cut, cut_caches) = step(backend.params, caches, np.int32(7), np.int32(position))
        np.testing.assert_allclose(np.asarray(cut), np.asarray(whole), rtol=1e-5, atol=1e-5 * np.abs(whole).max())
        for a, b in zip(cut_caches, whole_caches):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_the_loop_moves_between_buckets_as_the_position_grows_with_the_same_tokens():
    """Chunks of 4 from position 9 read 16 rows, near the cache's end all of it (the bucket's program takes the
    caches in the full one's layout); the tokens and caches are the unbucketed loop's."""
    model, backend, layout = _decoder("smollm_tiny_fp16")
    rng = np.random.default_rng(1)
    start = [rng.normal(size=shape).astype(dtype) for shape, dtype in DecodeLoop(backend, layout).cache_specs()]
    results = {}
    for smallest in (0, 16):
        loop = DecodeLoop(backend, layout, chunk=4, smallest_rows=smallest)
        caches, token, tokens, rows = loop.carried(loop.unstacked(list(start))), 5, [], []
        for position in (9, 10, 60):
            rows.append(loop.rows_for(position, loop.chunk))
            out, caches, token, _ = loop.run(caches, token, position, position, 4)
            tokens += np.asarray(out).tolist()
        results[smallest] = tokens, [np.asarray(c) for c in loop.per_layer(caches)], rows
    assert results[16][2] == [16, 16, None] and results[0][2] == [None] * 3
    assert results[16][0] == results[0][0]
    for a, b in zip(results[16][1], results[0][1]):
        np.testing.assert_array_equal(a, b)


def _op(b, name, inputs, shape, **options):
    out = b.tensor(f"t{len(b.tensors)}", shape)
    b.op(name, inputs, [out], **options)
    return out


def _baked_model(merge: bool):
    """A decode step whose cache [1, 8, 4] is updated at the position and then read whole: reshaped to [1, 32]
    (positions merged with the width: the length is baked in) or reduced over the positions."""
    b = ModelBuilder()
    cache, row = b.input("cache", (1, 8, 4)), b.input("row", (1, 1, 4))
    starts = b.input("starts", (3,), "int32")
    updated = _op(b, "DYNAMIC_UPDATE_SLICE", [cache, row, starts], (1, 8, 4))
    if merge:
        read = _op(b, "RESHAPE", [updated, b.constant("shape", np.array([1, 32], np.int32))], (1, 32))
    else:
        read = _op(b, "SUM", [updated, b.constant("axis", np.array([1], np.int32))], (1, 4))
    b.output(updated, read)
    return b.build()


def test_a_graph_that_bakes_the_cache_length_in_keeps_the_whole_cache_and_says_where():
    plan, reason = plan_or_reason(_baked_model(merge=True), 0, [0], 4)
    assert plan is None and "RESHAPE" in reason and "merges or splits the cache's positions axis" in reason
    plan, reason = plan_or_reason(_baked_model(merge=False), 0, [0], 4)
    assert plan is None and "SUM" in reason and "needs its full length" in reason
    model = _baked_model(merge=True)
    layout = StepLayout((((1, 8, 4), "float32"), ((1, 1, 4), "float32"), ((3,), "int32")), 1, 2, None, ((0, 0),), 1, 8)
    with pytest.warns(RuntimeWarning, match="whole KV cache at every position: .*RESHAPE"):
        loop = DecodeLoop(XlaBackend(model), layout, smallest_rows=4)
    assert loop.buckets == (8,) and "merges or splits" in loop.full_cache_reason and loop.rows_for(0, 1) is None
    no_update = ModelBuilder()
    x = no_update.input("cache", (1, 8, 4))
    no_update.output(_op(no_update, "NEG", [x], (1, 8, 4)))
    assert "no cache" in plan_or_reason(no_update.build(), 0, [0], 4)[1]


def test_the_plan_rewrites_only_the_attention():
    model, _, layout = _decoder("smollm_tiny_mask_as_input")
    sig = next(s for s in model.signatures if s.key == "decode")
    plan = RowPlan.of(model, sig.subgraph_index, [at for at, _ in layout.caches], 16)
    ops = {model.subgraphs[s].operators[k].opcode_name for s, k in plan.rewrites}
    assert ops == {"STABLEHLO_COMPOSITE", "RESHAPE", "BROADCAST_TO", "ADD"}


@pytest.mark.slow
@pytest.mark.parametrize("name", CONVENTIONS + ["smollm_real_int4_block32"])
def test_generate_gives_the_same_tokens_with_buckets_on_and_off(name, monkeypatch):
    """Through ``litegpu.generate`` (prefill, then chunks of 8 crossing four buckets), greedy and sampled."""
    import litegpu

    options = litegpu.Options(litegpu.HardwareAccelerator.CPU,
                              cpu_options=litegpu.CpuOptions(kernel_mode=litegpu.CpuKernelMode.BUILTIN))
    model = litegpu.CompiledModel.from_file(str(MODELS / f"{name}.tflite"), options=options)
    got = {}
    for setting in ("0", "16"):
        monkeypatch.setenv(ROWS_ENV, setting)
        got[setting] = (litegpu.generate(model, [5, 9, 2, 7, 11], 40, chunk_tokens=8),
                        litegpu.generate(model, [5, 9, 2, 7, 11], 40, chunk_tokens=8, temperature=1.0, seed=3))
    assert got["16"] == got["0"]


@pytest.mark.slow
def test_the_batched_step_reads_the_bucket_of_its_furthest_slot_with_the_same_tokens_and_caches():
    from litegpu.backends.xla.batched_decode import COUNTER, POSITION, BatchedDecode

    model, backend, layout = _decoder("smollm_tiny_fp16")
    rng = np.random.default_rng(2)
    per_layer = [rng.normal(size=shape).astype(dtype) for shape, dtype in
                 ((layout.input_specs[at][0], layout.input_specs[at][1]) for at, _ in layout.caches)]
    fed = np.zeros((4, 2), np.int32)
    fed[POSITION], fed[COUNTER] = (3, 12), (0, 0)
    got = {}
    for smallest in (0, 16):
        batched = BatchedDecode(backend, layout, steps=2, smallest_rows=smallest)
        state = batched.empty(2)
        for slot in (0, 1):
            state = batched.insert(state, slot, batched.stacked(per_layer), 5 + slot)
        picked, state = batched.step(state, fed, np.zeros((2, 2), np.float32), False)
        got[smallest] = np.asarray(picked), [np.asarray(c) for c in state.caches]
    assert BatchedDecode(backend, layout, smallest_rows=16).rows_for(12, 2) == 16
    np.testing.assert_array_equal(got[16][0], got[0][0])
    for a, b in zip(got[16][1], got[0][1]):
        np.testing.assert_array_equal(a, b)
