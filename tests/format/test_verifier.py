"""The verifier against a corpus of corrupted files.

Every corrupted file must either read as a valid model (a flip inside weight
bytes, say, changes values but not structure) or raise ModelFormatError:
never another exception, never a hang.  Targeted corruptions (wrong
identifier, truncation inside the FlatBuffer, offsets past the end, indices
out of range, cycles, overflowing shapes) must always raise.  The big corpus
is marked slow; a fast subset runs by default.
"""

from __future__ import annotations

import contextlib
import signal
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from litegpu.errors import LiteGpuError, ModelFormatError
from litegpu.format import decode_model, encode_model
from litegpu.ir import Model, read_model
from litegpu.ir.builder import ModelBuilder
from litegpu.ir.save import to_bytes

CASE_SECONDS = 5.0
EXTREMES = (0, 0x7FFFFFFF, 0xFFFFFFFF, 0x80000000)


class Hang(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Turn a hang into a test failure (SIGALRM; the tests run in the main thread)."""
    def on_alarm(signum, frame):
        raise Hang(f"read took more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def read_outcome(data: bytes) -> Model | ModelFormatError:
    """The model, or the ModelFormatError; any other exception (or a hang) propagates."""
    with time_limit(CASE_SECONDS):
        try:
            return read_model(data)
        except ModelFormatError as e:
            return e


def check_corpus(cases: Iterator[tuple[str, bytes]], must_raise: bool) -> dict[str, int]:
    counts = {"raised": 0, "read": 0}
    failures = []
    for what, data in cases:
        try:
            outcome = read_outcome(data)
        except Exception as e:  # noqa: BLE001  (what this test exists to catch)
            failures.append(f"{what}: {type(e).__name__}: {e}")
            continue
        if isinstance(outcome, ModelFormatError):
            counts["raised"] += 1
            assert str(outcome), what
        else:
            counts["read"] += 1
            if must_raise:
                failures.append(f"{what}: read without error")
            else:
                _inspect_survives(data, what, failures)
    assert not failures, f"{len(failures)} bad outcomes, first ones:\n" + "\n".join(failures[:10])
    return counts


def _inspect_survives(data: bytes, what: str, failures: list[str]) -> None:
    """A corrupted file that reads must also inspect without crashing the CLI."""
    from litegpu.cli.inspect_cmd import summarize

    try:
        with time_limit(CASE_SECONDS):
            summarize(data)
    except LiteGpuError:
        pass
    except Exception as e:  # noqa: BLE001
        failures.append(f"{what} (inspect): {type(e).__name__}: {e}")


# --- source models -----------------------------------------------------------------------------

def builder_model_bytes() -> bytes:
    b = ModelBuilder()
    x = b.input("x", (1, 4, 4, 2))
    w = b.constant("w", np.ones((3, 1, 1, 2), np.float32))
    y = b.tensor("y", (1, 4, 4, 3))
    z = b.tensor("z", (1, 4, 4, 3))
    b.op("CONV_2D", [x, w, -1], [y], padding="SAME", stride_w=1, stride_h=1)
    b.op("RELU", [y], [z])
    b.output(z)
    b.signature("serving")
    b.add_metadata("min_runtime_version", b"1.0")
    return to_bytes(b.build())


def structural_positions(data: bytes) -> np.ndarray:
    """Byte positions outside constant data: where corruption changes structure."""
    raw = decode_model(data)
    mask = np.ones(len(data), bool)
    base = np.frombuffer(raw.buffer, np.uint8).ctypes.data
    for b in raw.root.get("buffers") or []:
        if b.get("data") is not None and b["data"].size:
            start = b["data"].ctypes.data - base
            mask[start:start + b["data"].size] = False
    return np.flatnonzero(mask)


# --- corpora -----------------------------------------------------------------------------------

def truncations(data: bytes, count: int) -> Iterator[tuple[str, bytes]]:
    end = decode_model(data).flatbuffer_end
    lengths = set(range(0, min(64, end))) | {end - 1, end - 2, end - 4, end // 2}
    lengths |= {int(x) for x in np.geomspace(64, end - 1, num=count)}
    for n in sorted(lengths):
        if 0 <= n < end:
            yield f"truncated to {n} bytes", data[:n]


def byte_flips(data: bytes, count: int, seed: int) -> Iterator[tuple[str, bytes]]:
    rng = np.random.default_rng(seed)
    positions = structural_positions(data)
    for _ in range(count):
        buf = bytearray(data)
        pos = int(rng.choice(positions))
        bit = int(rng.integers(8))
        buf[pos] ^= 1 << bit
        yield f"bit {bit} of byte {pos} flipped", bytes(buf)


def extreme_values(data: bytes, stride: int) -> Iterator[tuple[str, bytes]]:
    positions = structural_positions(data)
    aligned = positions[(positions % 4 == 0)]
    for pos in aligned[::stride]:
        if pos + 4 > len(data):
            continue
        for value in EXTREMES:
            buf = bytearray(data)
            struct.pack_into("<I", buf, int(pos), value)
            yield f"0x{value:08x} written at byte {pos}", bytes(buf)


# --- targeted corruptions (decoded tables edited, then re-encoded) -----------------------------

Edit = Callable[[dict], None]


def _set(path: str, value) -> Edit:
    """An edit setting root[...path...] = value; path like 'subgraphs.0.tensors.0.shape'."""
    def edit(root: dict) -> None:
        *parents, last = path.split(".")
        node = root
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return edit


def _cycle(root: dict) -> None:
    """Two ops feeding each other: op 0 reads op 1's output and op 1 reads op 0's."""
    ops = root["subgraphs"][0]["operators"]
    ops[0]["inputs"] = np.array([int(ops[1]["outputs"][0])] + [int(i) for i in ops[0]["inputs"][1:]], np.int32)
    ops[1]["inputs"] = np.array([int(ops[0]["outputs"][0])] + [int(i) for i in ops[1]["inputs"][1:]], np.int32)


def _drop_subgraphs(root: dict) -> None:
    root["subgraphs"] = []


def _large_custom_options_past_end(root: dict) -> None:
    op = root["subgraphs"][0]["operators"][0]
    op["large_custom_options_offset"], op["large_custom_options_size"] = 1 << 33, 16


TARGETED: dict[str, Edit] = {
    "tensor buffer index out of range": _set("subgraphs.0.tensors.1.buffer", 10_000),
    "op input index out of range": _set("subgraphs.0.operators.0.inputs", np.array([0, 999, -1], np.int32)),
    "op input index -2": _set("subgraphs.0.operators.0.inputs", np.array([0, -2, -1], np.int32)),
    "op output index out of range": _set("subgraphs.0.operators.0.outputs", np.array([77], np.int32)),
    "opcode index out of range": _set("subgraphs.0.operators.0.opcode_index", 50),
    "subgraph input out of range": _set("subgraphs.0.inputs", np.array([1234], np.int32)),
    "subgraph output out of range": _set("subgraphs.0.outputs", np.array([-1], np.int32)),
    "signature subgraph out of range": _set("signature_defs.0.subgraph_index", 3),
    "signature tensor out of range": _set("signature_defs.0.inputs.0.tensor_index", 4096),
    "metadata buffer out of range": _set("metadata.0.buffer", 99),
    "buffer offset past the end": _set("buffers.1", {"offset": 1 << 30, "size": 32}),
    "buffer size past the end": _set("buffers.1", {"offset": 4096, "size": 1 << 40}),
    "buffer offset+size overflows 64 bits": _set("buffers.1", {"offset": (1 << 64) - 16, "size": 32}),
    "buffer inside the FlatBuffer": _set("buffers.1", {"offset": 8, "size": 24}),
    "cycle between two ops": _cycle,
    "shape overflows": _set("subgraphs.0.tensors.0.shape", np.array([2**31 - 1] * 6, np.int32)),
    "negative dimension": _set("subgraphs.0.tensors.0.shape", np.array([1, -4, 4, 2], np.int32)),
    "rank 100": _set("subgraphs.0.tensors.0.shape", np.ones(100, np.int32)),
    "shape_signature rank mismatch": _set("subgraphs.0.tensors.0.shape_signature", np.array([-1, 4], np.int32)),
    "constant size does not match shape": _set("subgraphs.0.tensors.1.shape", np.array([3, 1, 1, 5], np.int32)),
    "unknown tensor type": _set("subgraphs.0.tensors.0.type", 99),
    "per-channel scales do not match dimension": _set("subgraphs.0.tensors.1.quantization",
                                                      {"scale": np.ones(7, np.float32),
                                                       "zero_point": np.zeros(7, np.int64)}),
    "quantized_dimension out of range": _set("subgraphs.0.tensors.1.quantization",
                                             {"scale": np.ones(3, np.float32), "zero_point": np.zeros(3, np.int64),
                                              "quantized_dimension": 9}),
    "large custom options past the end": _large_custom_options_past_end,
    "no subgraphs": _drop_subgraphs,
}


def targeted_bytes(edit: Edit) -> bytes:
    raw = decode_model(builder_model_bytes())
    root = raw.root
    edit(root)
    return bytes(encode_model(root))


def test_builder_model_is_valid():
    """The corpus's seed reads cleanly, so every failure below is the corruption's."""
    assert isinstance(read_outcome(builder_model_bytes()), Model)


@pytest.mark.parametrize("what", sorted(TARGETED))
def test_targeted_corruption_raises(what):
    check_corpus(iter([(what, targeted_bytes(TARGETED[what]))]), must_raise=True)


def test_subgraph_calling_itself_raises(shared_models):
    raw = decode_model(shared_models / "microwakeword_okay_nabu.tflite")
    for op in raw.root["subgraphs"][0]["operators"]:
        if op["builtin_options_type"] == "CallOnceOptions":
            op["builtin_options"]["init_subgraph_index"] = 0
    check_corpus(iter([("CALL_ONCE of its own subgraph", bytes(encode_model(raw.root)))]), must_raise=True)


def test_called_subgraph_out_of_range_raises(shared_models):
    raw = decode_model(shared_models / "microwakeword_okay_nabu.tflite")
    for op in raw.root["subgraphs"][0]["operators"]:
        if op["builtin_options_type"] == "CallOnceOptions":
            op["builtin_options"]["init_subgraph_index"] = 7
    check_corpus(iter([("CALL_ONCE of subgraph 7", bytes(encode_model(raw.root)))]), must_raise=True)


@pytest.mark.parametrize("identifier", [b"TFL2", b"\0\0\0\0", b"tfl3", b"PK\x03\x04"])
def test_wrong_identifier_raises(identifier):
    data = bytearray(builder_model_bytes())
    data[4:8] = identifier
    with pytest.raises(ModelFormatError, match="identifier"):
        read_model(bytes(data))


@pytest.mark.parametrize("source", ["empty", "missing", "directory", "text"])
def test_bad_paths_raise(tmp_path, source):
    path = tmp_path / "model.tflite"
    if source == "empty":
        path.write_bytes(b"")
    elif source == "directory":
        path.mkdir()
    elif source == "text":
        path.write_text("this is not a model\n" * 10)
    with pytest.raises(ModelFormatError, match="model.tflite"):
        read_model(path)


def test_extended_layout_truncated_in_its_buffers_raises(shared_models, tmp_path):
    from litegpu.ir.save import write_model

    path = tmp_path / "ext.tflite"
    write_model(read_model(shared_models / "two_signatures_float32.tflite"), path, extended_buffers=True)
    data = path.read_bytes()
    end = decode_model(data).flatbuffer_end
    cases = ((f"extended file truncated to {n}", data[:n]) for n in range(end, len(data) - 16, 997))
    counts = check_corpus(cases, must_raise=True)
    assert counts["raised"] > 5


# --- fast subset on the builder model ----------------------------------------------------------

def test_truncations_fast():
    counts = check_corpus(truncations(builder_model_bytes(), 40), must_raise=True)
    assert counts["raised"] > 40


def test_byte_flips_fast():
    counts = check_corpus(byte_flips(builder_model_bytes(), 150, seed=1), must_raise=False)
    assert counts["raised"] > 30  # structure bytes: many flips must be caught


def test_extreme_values_fast():
    counts = check_corpus(extreme_values(builder_model_bytes(), stride=3), must_raise=False)
    assert counts["raised"] > 40


# --- the big corpus on real models --------------------------------------------------------------

# model -> (bit flips, 4-byte offsets): fewer cases for the bigger model keep the slow run in minutes.
SLOW_MODELS = {"two_signatures_float32": (300, 300), "microwakeword_okay_nabu": (300, 300),
               "mediapipe_face_detection_short_range": (300, 200), "mobilenet_v3_small_int8": (100, 60)}


def _model_bytes(shared_models: Path, name: str) -> bytes:
    return (shared_models / f"{name}.tflite").read_bytes()


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SLOW_MODELS))
def test_truncations_corpus(shared_models, name):
    check_corpus(truncations(_model_bytes(shared_models, name), 150), must_raise=True)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SLOW_MODELS))
def test_byte_flips_corpus(shared_models, name):
    flips, _ = SLOW_MODELS[name]
    counts = check_corpus(byte_flips(_model_bytes(shared_models, name), flips, seed=7), must_raise=False)
    # Many structural bytes are values (scales, names): only a share of flips can be caught.
    assert counts["raised"] >= max(2, flips // 50)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SLOW_MODELS))
def test_extreme_values_corpus(shared_models, name):
    data = _model_bytes(shared_models, name)
    _, offsets = SLOW_MODELS[name]
    stride = max(1, len(structural_positions(data)) // 4 // offsets)
    counts = check_corpus(extreme_values(data, stride), must_raise=False)
    assert counts["raised"] >= offsets // 4
