"""Programs compiled ahead of need (``backends.xla.ahead``): the decode loop's and the batched step's next KV-cache
bucket is compiled on the background thread before the step that reaches it, with the same tokens; a failed compile
is raised by that step; nothing is left running after close.  Compiles are counted by thread, nothing waits on a clock."""

import threading
from pathlib import Path

import numpy as np
import pytest

from litegpu.backends.xla import generate as xla_generate
from litegpu.backends.xla.ahead import AHEAD_ENV, COMPILE_AHEAD, CompileAhead
from litegpu.backends.xla.backend import XlaBackend
from litegpu.backends.xla.batched_decode import COUNTER, POSITION, BatchedDecode
from litegpu.backends.xla.generate import DecodeLoop, decode_layout
from litegpu.errors import ModelExecutionError
from litegpu.ir import read_model

MODEL = Path(__file__).parents[2] / "heldout" / "litert_torch" / "smollm_tiny_transposed_kv.tflite"


@pytest.fixture
def counted(monkeypatch):
    """(a decode loop with buckets of 16, 24, ... rows of its 64-row cache, in chunks of 4; the compiles of its
    programs as (cache rows, thread name), in order), on a backend of its own (no programs of other tests)."""
    monkeypatch.delenv(AHEAD_ENV, raising=False)
    model = read_model(str(MODEL))
    sig = next(s for s in model.signatures if s.key == "decode")
    backend = XlaBackend(model, sig.subgraph_index, "cpu")
    compiles: list[tuple[int | None, str]] = []
    made = DecodeLoop._compiled

    def counting(loop, rows):
        compiles.append((rows, threading.current_thread().name))
        return made(loop, rows)

    monkeypatch.setattr(DecodeLoop, "_compiled", counting)
    loop = DecodeLoop(backend, decode_layout(model), chunk=4, smallest_rows=16)
    assert loop.buckets == (16, 24, 32, 48, 64)
    rng = np.random.default_rng(0)
    start = loop.unstacked([rng.normal(size=shape).astype(dtype) for shape, dtype in loop.cache_specs()])
    yield loop, compiles, start
    assert COMPILE_AHEAD.wait(timeout=120)


def _decode(loop, start, positions):
    """The tokens of chunks from each of ``positions``, from the caches ``start`` (one array a layer)."""
    caches, tokens, token = loop.carried(list(start)), [], 5
    for position in positions:
        out, caches, token, _ = loop.run(caches, token, position, position, loop.chunk)
        tokens += np.asarray(out).tolist()
    return tokens


def test_the_next_bucket_is_compiled_in_the_background_before_the_step_that_needs_it(counted, monkeypatch):
    loop, compiles, start = counted
    first = _decode(loop, start, [8])   # rows up to 12: the 16-row bucket
    assert compiles[:2] == [(None, "MainThread"), (16, "MainThread")]
    assert COMPILE_AHEAD.wait(timeout=120)
    assert compiles[2:] == [(24, "litegpu-compile-ahead")]
    ahead = xla_generate._PROGRAMS[loop.backend][loop._index(24)]
    assert ahead.done() and ahead.exception() is None  # compiled, before the step comes
    tokens = _decode(loop, start, [8, 14])   # 14 + 4 rows: the 24-row bucket, not compiled by the step
    assert all(thread != "MainThread" for rows, thread in compiles if rows == 24)
    assert COMPILE_AHEAD.wait(timeout=120)
    assert [rows for rows, _ in compiles] == [None, 16, 24, 32]   # each once; the 32-row one ahead too
    assert tokens[:4] == first

    programs = xla_generate._PROGRAMS[loop.backend]
    programs.pop(loop._index(32))
    monkeypatch.setenv(AHEAD_ENV, "0")   # off: each program is compiled by the step that needs it
    loop._compile_next_bucket(24, None)
    assert loop._index(32) not in programs and COMPILE_AHEAD.wait(timeout=120)


def test_a_compile_that_failed_ahead_is_raised_by_the_step_that_needs_the_program(counted, monkeypatch):
    loop, compiles, start = counted
    made = DecodeLoop._compiled

    def failing(self, rows):
        if rows == 24:
            raise ModelExecutionError("compiling the 24-row bucket failed")
        return made(self, rows)

    monkeypatch.setattr(DecodeLoop, "_compiled", failing)
    _decode(loop, start, [8])
    assert COMPILE_AHEAD.wait(timeout=120)
    with pytest.raises(ModelExecutionError, match="24-row bucket failed"):
        _decode(loop, start, [14])
    with pytest.raises(ModelExecutionError, match="24-row bucket failed"):  # tried again by the next step
        _decode(loop, start, [14])


def test_the_batched_step_compiles_its_next_bucket_ahead_and_takes_it_with_the_same_tokens(monkeypatch):
    monkeypatch.delenv(AHEAD_ENV, raising=False)
    model = read_model(str(MODEL))
    sig = next(s for s in model.signatures if s.key == "decode")
    layout = decode_layout(model)
    compiles: list[tuple[int | None, str]] = []
    made = BatchedDecode._compiled

    def counting(batched, slots, sampled, rows):
        compiles.append((rows, threading.current_thread().name))
        return made(batched, slots, sampled, rows)

    monkeypatch.setattr(BatchedDecode, "_compiled", counting)
    rng = np.random.default_rng(1)
    per_layer = [rng.normal(size=shape).astype(dtype) for shape, dtype in
                 ((layout.input_specs[at][0], layout.input_specs[at][1]) for at, _ in layout.caches)]

    def run(batched, positions):
        state = batched.empty(2)
        for slot in (0, 1):
            state = batched.insert(state, slot, batched.stacked(per_layer), 5 + slot)
        tokens = []
        for position in positions:
            fed = np.zeros((4, 2), np.int32)
            fed[POSITION], fed[COUNTER] = (position, position - 1), (0, 0)
            picked, state = batched.step(state, fed, np.zeros((2, 2), np.float32), False)
            tokens.append(np.asarray(picked).tolist())
        return tokens

    ahead = BatchedDecode(XlaBackend(model, sig.subgraph_index, "cpu"), layout, steps=2, smallest_rows=16)
    first = run(ahead, [8])   # rows up to 10: the 16-row bucket
    assert COMPILE_AHEAD.wait(timeout=120)
    assert (24, "litegpu-compile-ahead") in compiles and (24, "MainThread") not in compiles
    tokens = run(ahead, [8, 14])   # 14 + 2 rows: the 24-row bucket, taken from the background
    assert COMPILE_AHEAD.wait(timeout=120)
    assert [rows for rows, _ in compiles].count(24) == 1 and (24, "MainThread") not in compiles
    assert tokens[0] == first[0]

    monkeypatch.setenv(AHEAD_ENV, "0")   # off: the step that reaches a bucket compiles it, with the same tokens
    compiles.clear()
    alone = BatchedDecode(XlaBackend(model, sig.subgraph_index, "cpu"), layout, steps=2, smallest_rows=16)
    assert run(alone, [8, 14]) == tokens
    assert all(thread == "MainThread" for _, thread in compiles) and COMPILE_AHEAD.wait(timeout=120)


def test_close_cancels_what_has_not_started_and_waits_for_what_runs():
    ahead = CompileAhead("test-compile-ahead")
    started, release = threading.Event(), threading.Event()

    def running():
        started.set()
        release.wait()
        return "compiled"

    first = ahead.submit(running)
    second = ahead.submit(lambda: "never")
    assert started.wait(timeout=60)
    closing = threading.Thread(target=ahead.close)
    closing.start()
    release.set()
    closing.join(timeout=60)
    assert not closing.is_alive()
    assert first.result() == "compiled" and second.cancelled()
    assert ahead.submit(lambda: "after close") is None
    assert not any(t.name == "test-compile-ahead" for t in threading.enumerate())
