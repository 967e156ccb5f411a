"""Models with their weights after the FlatBuffer: the pack round trip on the LLM-style decoder, and
(slow) a decoder past 2.5 GB loaded and run through litegpu against the official interpreter."""

from __future__ import annotations

import gc
import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

import litegpu
from litegpu.cli.main import main as cli_main
from oracle import load_bench_module
from litegpu.format import decode_model
from litegpu.ir import read_model
from litegpu.ir.save import write_model

litert = pytest.importorskip("ai_edge_litert.interpreter")
BUILTIN = litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES


dm = load_bench_module("decoder_model")


def extended_offsets(path: Path) -> list[int]:
    raw = decode_model(path)
    return [b["offset"] for b in raw.root["buffers"] if (b.get("offset") or 0) > 1]


def official_steps(source: str | bytes, config, prompt: list[int], decode_tokens: list[int]) -> list[np.ndarray]:
    """Logits of a padded prefill, then of one decode step per token, with the official interpreter."""
    kwargs = {"model_content": source} if isinstance(source, bytes) else {"model_path": source}
    interp = litert.Interpreter(experimental_op_resolver_type=BUILTIN, **kwargs)
    prefill, decode = interp.get_signature_runner("prefill"), interp.get_signature_runner("decode")
    caches = dm.empty_caches(config)

    def run(runner, tokens, pos):
        out = runner(tokens=np.asarray([tokens], np.int32), input_pos=np.asarray([pos], np.int32), **caches)
        caches.update({k: v for k, v in out.items() if k != "logits"})
        return out["logits"][0]

    padded = prompt + [0] * (config.prefill_len - len(prompt))
    results = [run(prefill, padded, 0)]
    for i, token in enumerate(decode_tokens):
        results.append(run(decode, [token], len(prompt) + i))
    return results


@pytest.mark.parametrize("weights", ["float32", "float16", "int8", "int4"])
def test_pack_round_trips_the_decoder_through_both_layouts(tmp_path, capsys, weights):
    config = dm.DecoderConfig(weights=weights, layers=2, width=64, vocab=128, max_len=16, prefill_len=4)
    inline, extended, again = tmp_path / "inline.tflite", tmp_path / "extended.tflite", tmp_path / "again.tflite"
    write_model(dm.build_decoder(config), inline, extended_buffers=False)
    assert cli_main(["pack", str(inline), str(extended), "--extended-buffers"]) == 0
    assert cli_main(["pack", str(extended), str(again), "--inline"]) == 0
    capsys.readouterr()
    assert not extended_offsets(inline) and not extended_offsets(again)
    offsets = extended_offsets(extended)
    assert offsets and all(o % 16 == 0 for o in offsets)
    first, middle, last = (read_model(p) for p in (inline, extended, again))
    assert first == middle == last
    for a, b in zip(first.subgraphs, middle.subgraphs):
        for ta, tb in zip(a.tensors, b.tensors):
            assert (ta.raw is None) == (tb.raw is None) and (ta.raw is None or ta.raw.tobytes() == tb.raw.tobytes())
    assert again.read_bytes() == inline.read_bytes()  # the writer is deterministic
    prompt, follow = [5, 9, 2], [7, 1]
    want = official_steps(str(inline), config, prompt, follow)
    got = official_steps(str(extended), config, prompt, follow)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g, w)


def _free_bytes(path: Path) -> int:
    return shutil.disk_usage(path).free


def _available_memory() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


BIG = dict(width=2048, heads=16, vocab=32000, max_len=64, prefill_len=8, weights="float32")
BIG_BYTES = int(2.6e9)


@pytest.fixture(scope="module")
def big_decoder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("big")
    if _free_bytes(folder) < 2 * BIG_BYTES:
        pytest.skip(f"needs {2 * BIG_BYTES / 1e9:.1f} GB free disk in {folder}")
    # Making it holds the weights once; the two runtimes then need about 1x (official, builtin
    # kernels) and, until the loader aliases every weight, up to 3.6x (litegpu) of the file.
    if _available_memory() < 5 * BIG_BYTES:
        pytest.skip(f"needs about {5 * BIG_BYTES / 1e9:.0f} GB of available memory")
    config = dm.config_for_bytes(BIG_BYTES, **BIG)
    path = folder / "decoder_2.6gb.tflite"
    dm.write_decoder(config, path)   # past the inline limit: weights after the FlatBuffer on its own
    gc.collect()
    yield config, path
    path.unlink()


@pytest.mark.slow
def test_decoder_past_2_5_gb_matches_the_official_interpreter(big_decoder):
    config, path = big_decoder
    size = os.path.getsize(path)
    assert size > 2.5e9
    raw = decode_model(path)
    assert raw.flatbuffer_end < 1 << 20 and min(extended_offsets(path)) >= raw.flatbuffer_end
    del raw

    prompt = [11, 200, 3000, 5]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = litegpu.CompiledModel.from_file(path, litegpu.HardwareAccelerator.CPU)
    tokens = litegpu.generate(model, prompt, 4)
    # The official run replays our tokens, so its logits must pick them too.
    ours_prefill = model.run({"tokens": np.asarray([prompt + [0] * (config.prefill_len - len(prompt))], np.int32),
                              "input_pos": np.zeros(1, np.int32), **dm.empty_caches(config)}, "prefill")["logits"][0]
    model.close()
    del model
    gc.collect()

    official = official_steps(str(path), config, prompt, tokens[:-1])
    np.testing.assert_allclose(ours_prefill, official[0], rtol=1e-4, atol=1e-4)
    picked = [int(np.argmax(official[0][len(prompt) - 1]))] + [int(np.argmax(l[0])) for l in official[1:]]
    assert tokens == picked
