"""litegpu.generate on the official interpreter (issue 26): the KV cache stays in the interpreter's tensors
between steps (``backends.litert.CarriedState``), the tokens those of the official interpreter stepped by
hand, and other users of the same model (another generation, a plain run, a reset) do not disturb it."""

import warnings

import numpy as np
import pytest

import litegpu
from litegpu.ir.save import to_bytes
from oracle import load_bench_module

pytest.importorskip("ai_edge_litert.interpreter")

from litegpu.backends import litert as litert_backend  # noqa: E402

dm = load_bench_module("decoder_model")
CONFIG = dict(layers=2, width=64, heads=4, vocab=128, max_len=40, prefill_len=8)
ON_LITERT = litegpu.Options(litegpu.HardwareAccelerator.CPU,
                            cpu_options=litegpu.CpuOptions(engines=("litert",)))
ON_XLA = litegpu.Options(litegpu.HardwareAccelerator.CPU,
                         cpu_options=litegpu.CpuOptions(kernel_mode=litegpu.CpuKernelMode.BUILTIN))
PROMPT = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3]  # longer than one prefill of 8: two chunks, the second padded


@pytest.fixture(scope="module")
def data():
    return to_bytes(dm.build_decoder(dm.DecoderConfig(**CONFIG)))


@pytest.fixture
def model(data):
    model = litegpu.CompiledModel.from_buffer(data, options=ON_LITERT)
    assert set(model.plan.ops_per_engine()) == {"litert"}
    return model


@pytest.fixture(scope="module")
def expected(data):
    """Greedy tokens from XLA's exact kernels, the cache passed through buffers: an independent path."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = litegpu.CompiledModel.from_buffer(data, options=ON_XLA)
    return litegpu.generate(reference, PROMPT, 20, chunk_tokens=0)


def count_calls(monkeypatch, name: str) -> list:
    calls = []
    real = getattr(litert_backend.LiteRtExecutable, name)

    def counted(self, *args, **kwargs):
        calls.append(self.op_range.subgraph)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(litert_backend.LiteRtExecutable, name, counted)
    return calls


def test_the_cache_stays_in_the_interpreter_and_the_tokens_are_right(model, expected, monkeypatch):
    carrying, plain = count_calls(monkeypatch, "run_carrying"), count_calls(monkeypatch, "run_arrays")
    evictions = []
    real_evict = litert_backend.CarriedState.evict
    monkeypatch.setattr(litert_backend.CarriedState, "evict", lambda self: (evictions.append(1), real_evict(self)))
    assert litegpu.generate(model, PROMPT, 20) == expected
    # every step carried the cache (two prefill chunks of 8, then 19 decode steps); none went through buffers
    assert carrying.count(0) == 2 and len(carrying) == 2 + 19 and plain == []
    # it left the interpreter once, when the decode signature first ran after the prefill (to allocate it)
    assert len(evictions) == 1


def test_sampling_on_the_interpreter_is_the_buffers_path_s(model, monkeypatch):
    sampled = litegpu.generate(model, PROMPT, 12, temperature=0.8, seed=5)
    monkeypatch.setattr("litegpu.runtime.generate._CarriedCache.for_loop", classmethod(lambda cls, loop: None))
    assert litegpu.generate(model, PROMPT, 12, temperature=0.8, seed=5) == sampled


def test_interleaved_generations_keep_their_own_caches(model, expected):
    first = litegpu.generate_stream(model, PROMPT, 20)
    other_prompt = [7, 7, 2]
    second = litegpu.generate_stream(model, other_prompt, 20)
    got_first, got_second = [], []
    for a, b in zip(first, second):
        got_first.append(a)
        got_second.append(b)
    assert got_first == expected
    assert got_second == litegpu.generate(model, other_prompt, 20)


def test_plain_runs_and_resets_between_steps_leave_the_cache_alone(model, expected):
    decode_inputs = {n: np.zeros(d["shape"], d["dtype"]) for n, d in model.get_input_tensor_details("decode").items()}
    got = []
    for k, token in enumerate(litegpu.generate_stream(model, PROMPT, 20)):
        got.append(token)
        if k == 3:
            model.run(decode_inputs, "decode")  # the decode subgraph's tensors are overwritten
        if k == 6:
            model.reset_all_variables()  # a new interpreter
    assert got == expected
