"""litegpu.generate on the LLM-style decoder from bench/models/decoder_model.py, against the official interpreter
stepped by hand (prefill, then one decode step per token, caches passed back through numpy)."""

import warnings

import numpy as np
import pytest

import litegpu
from litegpu import InvalidArgumentError, ModelExecutionError, SignatureError, UnsupportedOpError
from litegpu.ir.save import to_bytes
from oracle import load_bench_module
from litegpu.runtime.tensor_buffer import TensorBuffer

litert = pytest.importorskip("ai_edge_litert.interpreter")


dm = load_bench_module("decoder_model")

# max_len 30 is not a multiple of T = 8, so a long prompt's last chunk must go through decode steps.
CONFIG = dict(layers=2, width=64, heads=4, vocab=128, max_len=30, prefill_len=8)
QUANTIZED = ("int8", "int4")


def official_generate(data: bytes, config, prompt: list[int], n: int) -> list[int]:
    """Greedy decoding with the official interpreter: a padded prefill when the prompt fits one chunk,
    else every prompt token through decode (an independent path to the same cache)."""
    interp = litert.Interpreter(model_content=data,
                                experimental_op_resolver_type=litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    prefill, decode = interp.get_signature_runner("prefill"), interp.get_signature_runner("decode")
    caches = dm.empty_caches(config)

    def run(runner, tokens, pos):
        out = runner(tokens=np.asarray([tokens], np.int32), input_pos=np.asarray([pos], np.int32), **caches)
        caches.update({k: v for k, v in out.items() if k != "logits"})
        return out["logits"][0]

    if len(prompt) <= config.prefill_len:
        last = run(prefill, prompt + [0] * (config.prefill_len - len(prompt)), 0)[len(prompt) - 1]
    else:
        for pos, token in enumerate(prompt):
            last = run(decode, [token], pos)[0]
    tokens = []
    for pos in range(len(prompt), len(prompt) + n):
        tokens.append(int(np.argmax(last)))
        if len(tokens) < n:
            last = run(decode, [tokens[-1]], pos)[0]
    return tokens


@pytest.fixture(scope="module", params=["float32", "float16", *QUANTIZED])
def decoder(request):
    """(config, file bytes, litegpu CompiledModel on the CPU); quantized formats xfail while litegpu
    refuses their FULLY_CONNECTED weights (UnsupportedOpError only)."""
    config = dm.DecoderConfig(weights=request.param, **CONFIG)
    data = to_bytes(dm.build_decoder(config))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "no GPU: runs on the CPU"
            model = litegpu.CompiledModel.from_buffer(data, litegpu.HardwareAccelerator.CPU)
    except UnsupportedOpError as e:
        if request.param in QUANTIZED:
            pytest.xfail(f"{request.param} weights not supported yet: {e}")
        raise
    return config, data, model


# The cache-on-the-device and in-place tests are about XLA's buffers: the exact kernels keep the decoder on XLA
# (the fast path gives a decoder this small to the official interpreter, whose caches live in host memory).
ON_XLA = litegpu.Options(litegpu.HardwareAccelerator.CPU,
                         cpu_options=litegpu.CpuOptions(kernel_mode=litegpu.CpuKernelMode.BUILTIN))


@pytest.fixture(scope="module")
def float_decoder():
    config = dm.DecoderConfig(**CONFIG)
    data = to_bytes(dm.build_decoder(config))
    return config, data, litegpu.CompiledModel.from_buffer(data, options=ON_XLA)


@pytest.mark.parametrize("prompt, n", [([3, 1, 4, 1, 5], 12), ([7], 4), (list(range(1, 20)), 6),
                                       (list(range(40, 67)), 4)],
                         ids=["one-padded-chunk", "single-token", "chunks", "chunks-then-decode-steps"])
def test_greedy_tokens_match_the_official_interpreter(decoder, prompt, n):
    config, data, model = decoder
    assert len(prompt) + n - 1 <= config.max_len
    try:
        tokens = litegpu.generate(model, prompt, n)
    except ModelExecutionError as e:
        # The int8 embedding is a numpy constant (only float weights become parameters), and GATHER
        # indexes it with the traced token ids (ops/slicing.py Gather.compute); known, reported.
        if config.weights in QUANTIZED and "GATHER" in str(e) and "TracerArrayConversionError" in str(e):
            pytest.xfail(f"GATHER of a constant int8 table with traced indices: {str(e)[:120]}")
        raise
    assert tokens == official_generate(data, config, prompt, n)


def spy_on_runs(model, monkeypatch) -> tuple[list, list]:
    """(names of the buffers read, one dict per run: input name -> whether it held a device array)."""
    read_names, run_inputs = [], []
    original_read, original_run, original_async = TensorBuffer.read, type(model).run_by_name, type(model).run_async

    def spy_read(self, *args, **kwargs):
        read_names.append(self.name)
        return original_read(self, *args, **kwargs)

    def spy_run(self, key, inputs, outputs):
        run_inputs.append({n: b.is_on_device for n, b in inputs.items()})
        return original_run(self, key, inputs, outputs)

    def spy_async(self, key, inputs, outputs):
        run_inputs.append({n: b.is_on_device for n, b in inputs.items()})
        return original_async(self, key, inputs, outputs)

    monkeypatch.setattr(TensorBuffer, "read", spy_read)
    monkeypatch.setattr(type(model), "run_by_name", spy_run)
    monkeypatch.setattr(type(model), "run_async", spy_async)
    return read_names, run_inputs


def caches_on_device(run: dict) -> list[bool]:
    return [on for n, on in run.items() if n.startswith("kv_cache")]


def test_token_by_token_greedy_decoding_picks_tokens_on_the_device_and_reads_only_the_prefill_logits(
        float_decoder, monkeypatch):
    _, _, model = float_decoder
    read_names, runs = spy_on_runs(model, monkeypatch)
    tokens = litegpu.generate(model, [1, 2, 3], 5, chunk_tokens=0)
    assert len(tokens) == 5 and len(runs) == 5                      # prefill + 4 decode steps, none ahead of the end
    assert read_names == ["logits"]                                 # the prefill's; then one int per token
    assert not any(caches_on_device(runs[0]))                       # zeros from the host, once
    assert all(all(caches_on_device(run)) for run in runs[1:])      # then the previous run's device arrays
    assert not runs[1]["tokens"] and all(run["tokens"] for run in runs[2:])  # picked on the device and fed back


def test_token_by_token_sampling_reads_the_logits_of_every_step(float_decoder, monkeypatch):
    _, _, model = float_decoder
    read_names, runs = spy_on_runs(model, monkeypatch)
    litegpu.generate(model, [1, 2, 3], 5, temperature=1.0, seed=0, chunk_tokens=0)
    assert read_names == ["logits"] * 5 and len(runs) == 5
    assert all(all(caches_on_device(run)) for run in runs[1:])


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_on_xla_tokens_come_from_the_device_a_chunk_per_launch(float_decoder, monkeypatch, temperature):
    """One signature run (the prefill) and one logits read; then each launch generates a chunk of tokens on the
    device, the next launched before the last one's tokens are read."""
    from litegpu.backends.xla.generate import DecodeLoop

    _, _, model = float_decoder
    read_names, runs = spy_on_runs(model, monkeypatch)
    launches = []
    original = DecodeLoop.run

    def spy(self, *args, **kwargs):
        launches.append((self.chunk, args[2]))  # (chunk, position fed)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(DecodeLoop, "run", spy)
    tokens = litegpu.generate(model, [1, 2, 3], 12, temperature=temperature, seed=4, chunk_tokens=4)
    assert len(tokens) == 12 and len(runs) == 1 and read_names == ["logits"]
    assert launches == [(4, 3), (4, 7), (4, 11)]  # 11 tokens after the prefill's: 3 chunks from position 3


@pytest.mark.parametrize("chunk", [1, 3, 16])
def test_the_device_loop_gives_the_token_by_token_loop_tokens_for_any_chunk(float_decoder, chunk):
    _, _, model = float_decoder
    prompt = [4, 8, 15, 16]
    assert litegpu.generate(model, prompt, 15, chunk_tokens=chunk) == litegpu.generate(model, prompt, 15,
                                                                                       chunk_tokens=0)
    sampled = litegpu.generate(model, prompt, 15, temperature=0.9, top_k=10, seed=2, chunk_tokens=chunk)
    assert sampled == litegpu.generate(model, prompt, 15, temperature=0.9, top_k=10, seed=2, chunk_tokens=5)


def test_a_negative_chunk_is_refused(float_decoder):
    _, _, model = float_decoder
    with pytest.raises(InvalidArgumentError, match="chunk_tokens"):
        litegpu.generate(model, [1], 3, chunk_tokens=-1)


@pytest.mark.parametrize("prompt, n, stop", [([3, 1, 4, 1, 5], 12, None), ([7], 4, None),
                                             (list(range(40, 67)), 4, None), ([3, 1, 4], 10, 2)],
                         ids=["padded-chunk", "single-token", "to-the-end-of-the-cache", "stop-token"])
def test_greedy_on_the_device_matches_the_official_interpreter(float_decoder, prompt, n, stop):
    config, data, model = float_decoder
    expected = official_generate(data, config, prompt, n)
    stops = ()
    if stop is not None:  # the stop token is the expected sequence's third: generation ends right after it
        stops, expected = (expected[stop],), expected[:expected.index(expected[stop]) + 1]
    assert litegpu.generate(model, prompt, n, stop_tokens=stops) == expected


def test_sampling_is_reproducible_and_top_k_1_is_greedy(float_decoder):
    _, _, model = float_decoder
    prompt = [5, 6, 7]
    greedy = litegpu.generate(model, prompt, 8)
    a = litegpu.generate(model, prompt, 8, temperature=1.5, seed=3)
    assert a == litegpu.generate(model, prompt, 8, temperature=1.5, seed=3)
    assert a != greedy  # vocabulary 128 at temperature 1.5: 8 greedy picks in a row would be a bug
    assert litegpu.generate(model, prompt, 8, temperature=1.5, top_k=1, seed=9) == greedy


def test_a_tiny_top_p_keeps_only_the_most_likely_token_on_the_device_and_on_the_host(float_decoder):
    _, _, model = float_decoder
    prompt = [5, 6, 7]
    greedy = litegpu.generate(model, prompt, 6)
    for chunk in (4, 0):  # the device loop, the host sampler
        assert litegpu.generate(model, prompt, 6, temperature=1.5, top_p=1e-6, seed=1, chunk_tokens=chunk) == greedy
    with pytest.raises(InvalidArgumentError, match="top_p must be None or in"):
        litegpu.generate(model, prompt, 2, top_p=1.5)


def test_stops_after_a_stop_token(float_decoder):
    _, _, model = float_decoder
    greedy = litegpu.generate(model, [9, 9], 6)
    third = greedy[2]
    expected = greedy[:greedy.index(third) + 1]
    assert litegpu.generate(model, [9, 9], 6, stop_tokens=[third]) == expected
    assert litegpu.generate(model, [9, 9], 0) == []


@pytest.mark.parametrize("prompt, n, match", [([], 3, "at least one"), ([1] * 25, 7, "cache holds 30"),
                                              ([1], -1, "negative")])
def test_bad_requests(float_decoder, prompt, n, match):
    _, _, model = float_decoder
    with pytest.raises(InvalidArgumentError, match=match):
        litegpu.generate(model, prompt, n)


def test_a_model_without_the_signatures_is_refused(float_decoder):
    from litegpu.ir.builder import ModelBuilder

    b = ModelBuilder()
    x = b.input("x", (1, 4))
    y = b.tensor("y", (1, 4))
    b.op("ADD", [x, x], [y])
    b.output(y)
    model = litegpu.CompiledModel.from_buffer(to_bytes(b.build()), litegpu.HardwareAccelerator.CPU)
    with pytest.raises(SignatureError, match="prefill"):
        litegpu.generate(model, [1], 1)
    _, _, decoder = float_decoder
    with pytest.raises(SignatureError, match="lacks"):
        litegpu.generate(decoder, [1], 1, logits_output="scores")


def test_generator_shares_weights_between_signatures():
    config = dm.DecoderConfig(**CONFIG)
    model = dm.build_decoder(config)
    used = [{t.buffer for t in sg.tensors if t.buffer and t.raw is not None and t.raw.size > 4096}
            for sg in model.subgraphs]
    assert len(used) == 2 and used[0] == used[1] and len(used[0]) == 2 + 7 * config.layers
    assert dm.build_decoder(config) == model  # deterministic


def _decode_feeds(step: int) -> dict:
    return {"tokens": TensorBuffer(np.asarray([[step + 1]], np.int32)),
            "input_pos": TensorBuffer(np.asarray([step], np.int32))}


@pytest.fixture
def fresh_decoder(float_decoder):
    """A new CompiledModel of the float decoder (nothing compiled yet), new cache buffers and a logits buffer."""
    _, data, _ = float_decoder
    model = litegpu.CompiledModel.from_buffer(data, options=ON_XLA)
    return model, _new_caches(model), model.create_output_buffer_by_name("decode", "logits")


def _new_caches(model) -> dict:
    names = [n for n in model.get_input_tensor_details("decode") if n.startswith("kv_cache")]
    return {n: model.create_input_buffer_by_name("decode", n) for n in names}


def _decode_steps(model, caches: dict, logits, steps: int, in_place: bool) -> tuple[np.ndarray, list]:
    """Logits of ``steps`` decode steps, and a cache array of each; with ``in_place`` each cache buffer is passed
    as input and output, else each step writes new buffers."""
    held, out = [], []
    for step in range(steps):
        new = caches if in_place else {n: model.create_output_buffer_by_name("decode", n) for n in caches}
        model.run_by_name("decode", {**_decode_feeds(step), **caches}, {"logits": logits, **new})
        caches = new
        held.append(next(iter(caches.values()))._array)
        out.append(logits.read())
    return np.stack(out), held


def test_a_cache_buffer_passed_in_and_out_is_updated_in_its_own_memory(fresh_decoder):
    """The same TensorBuffer as input and output (a KV cache, as generate and LiteRT-LM pass it): the run
    consumes the old array (XLA donation) instead of holding both, with the same results."""
    model, caches, logits = fresh_decoder
    in_place, held = _decode_steps(model, caches, logits, 4, True)
    separate, kept = _decode_steps(model, _new_caches(model), logits, 4, False)
    np.testing.assert_array_equal(in_place, separate)
    assert [a.is_deleted() for a in held] == [True, True, True, False]  # each consumed by the next step
    assert not any(a.is_deleted() for a in kept)


def test_arrays_the_caller_holds_are_never_consumed(fresh_decoder):
    """A jax array the caller wrote into a cache buffer, and a host view the caller read, stay intact."""
    import jax

    model, caches, logits = fresh_decoder
    model.run_by_name("decode", {**_decode_feeds(0), **caches}, {"logits": logits, **caches})  # compiles, donating
    mine = {n: jax.device_put(b.read()) for n, b in caches.items()}
    for n, b in caches.items():
        b.write(mine[n])
    expected = {n: np.asarray(a).copy() for n, a in mine.items()}
    model.run_by_name("decode", {**_decode_feeds(1), **caches}, {"logits": logits, **caches})
    assert not any(a.is_deleted() for a in mine.values())
    for n, a in mine.items():
        np.testing.assert_array_equal(np.asarray(a), expected[n])
    view = next(iter(caches.values())).read()  # a host copy: later runs never write into it
    before = view.copy()
    model.run_by_name("decode", {**_decode_feeds(2), **caches}, {"logits": logits, **caches})
    np.testing.assert_array_equal(view, before)


def test_an_event_of_a_run_whose_outputs_a_later_run_consumed_still_waits(fresh_decoder):
    model, caches, logits = fresh_decoder
    events = [model.run_async("decode", {**_decode_feeds(s), **caches}, {"logits": logits, **caches})
              for s in range(3)]
    assert all(e.wait() for e in events) and all(e.is_ready() for e in events)


def test_a_buffer_whose_in_place_run_failed_says_so(fresh_decoder, monkeypatch):
    """A run that consumed a cache buffer and then failed leaves it without data: reading it is a clear error, and
    writing new data makes it usable again."""
    model, caches, logits = fresh_decoder
    model.run_by_name("decode", {**_decode_feeds(0), **caches}, {"logits": logits, **caches})
    backend = model._backend(model._signature("decode"))
    original = backend._call

    def consume_then_fail(executable, args, consumed):
        for i in consumed:
            args[i].delete()
        raise RuntimeError("injected failure")

    monkeypatch.setattr(backend, "_call", consume_then_fail)
    with pytest.raises(RuntimeError, match="injected"):
        model.run_by_name("decode", {**_decode_feeds(1), **caches}, {"logits": logits, **caches})
    buffer = next(iter(caches.values()))
    with pytest.raises(litegpu.TensorBufferError, match="failed after taking it"):
        buffer.read()
    monkeypatch.setattr(backend, "_call", original)
    for b in caches.values():
        b.write(np.zeros(b.shape, b.dtype))
    model.run_by_name("decode", {**_decode_feeds(0), **caches}, {"logits": logits, **caches})
    assert np.isfinite(logits.read()).all()


def test_looped_layers_carry_their_caches_stacked_through_the_device_loop(monkeypatch):
    """A decoder deep enough for the layer loop (backends.xla.layer_scan): the device loop carries each cache slot as
    one stack for the whole generation, and the tokens are still the official interpreter's."""
    from litegpu.backends.xla.generate import DecodeLoop

    config = dm.DecoderConfig(**{**CONFIG, "layers": 4})
    data = to_bytes(dm.build_decoder(config))
    model = litegpu.CompiledModel.from_buffer(data, options=ON_XLA)
    groups = []
    original = DecodeLoop.run

    def spy(self, caches, *args, **kwargs):
        groups.append((len(self.groups), [tuple(c.shape) for c in caches]))
        return original(self, caches, *args, **kwargs)

    monkeypatch.setattr(DecodeLoop, "run", spy)
    prompt = [3, 1, 4, 1, 5]
    assert litegpu.generate(model, prompt, 9, chunk_tokens=4) == official_generate(data, config, prompt, 9)
    stack = (config.layers, 1, config.max_len, config.width)
    assert groups and all(n == 2 and shapes == [stack, stack] for n, shapes in groups)  # k and v, one stack each


def test_layers_update_their_caches_inside_the_stack_and_the_caches_keep_the_loops_layout(monkeypatch):
    """Each layer's DYNAMIC_UPDATE_SLICE writes straight into the carried stack (XLA otherwise copied a layer's
    cache out and back every step), and the caches are carried in the layout the loop's program takes: XLA GPU
    picks the positions minor for the int4 decoder's values; XLA CPU keeps the default, so a transposed layout is
    forced here.  The stacks are laid out so before the first chunk and back after the last: the tokens of two
    generations in a row are still the official interpreter's."""
    from jax.experimental.layout import Layout

    from litegpu.backends.xla import tracer as xla_tracer
    from litegpu.backends.xla.generate import DecodeLoop

    transposed = Layout(major_to_minor=(0, 1, 3, 2))
    monkeypatch.setattr(DecodeLoop, "carried_layout", staticmethod(lambda: transposed))
    into_stack, layouts = [], []
    update, run = xla_tracer._XlaRunner._update_into_stack, DecodeLoop.run

    def spy_update(self, *args, **kwargs):
        into_stack.append(args[1].opcode_name)
        return update(self, *args, **kwargs)

    def spy_run(self, caches, *args, **kwargs):
        layouts.extend(c.format.layout for c in caches)
        return run(self, caches, *args, **kwargs)

    monkeypatch.setattr(xla_tracer._XlaRunner, "_update_into_stack", spy_update)
    monkeypatch.setattr(DecodeLoop, "run", spy_run)
    config = dm.DecoderConfig(**{**CONFIG, "layers": 4})
    data = to_bytes(dm.build_decoder(config))
    model = litegpu.CompiledModel.from_buffer(data, options=ON_XLA)
    for prompt in ([3, 1, 4, 1, 5], [2, 7, 1, 8]):
        assert litegpu.generate(model, prompt, 9, chunk_tokens=4) == official_generate(data, config, prompt, 9)
    assert into_stack and set(into_stack) == {"DYNAMIC_UPDATE_SLICE"}
    assert layouts and all(layout.major_to_minor == transposed.major_to_minor for layout in layouts)
