"""Issue 27: a .circle past 2 GB written by litegpu (weights after the FlatBuffer, ``Buffer.offset`` an
absolute file offset, 16-byte aligned), read back by litegpu and by circle-schema's parser with the same
offsets, run with peak memory at most 1.3x the file, and giving the official interpreter's logits for the
same model written as .tflite (slow: two files of 2.2 GB)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from oracle import load_bench_module
from test_big_models import _available_memory, _free_bytes, official_steps

from litegpu.format import decode_model
from litegpu.ir import read_model
from litegpu.ir.save import write_model

dm = load_bench_module("decoder_model")
SIZE = int(2.2e9)
PEAK_OVER_FILE = 1.3
# Run in a child process, so that its peak resident memory is this run's alone.
_RUN_AND_MEASURE = """
import resource, sys, numpy as np, litegpu
sys.path.insert(0, sys.argv[3])
import decoder_model as dm
config = dm.DecoderConfig(**eval(sys.argv[2]))
model = litegpu.CompiledModel.from_file(sys.argv[1], litegpu.HardwareAccelerator.CPU)
tokens = np.asarray([[11, 200, 3000, 5] + [0] * (config.prefill_len - 4)], np.int32)
logits = model.run({"tokens": tokens, "input_pos": np.zeros(1, np.int32), **dm.empty_caches(config)},
                   "prefill")["logits"][0]
np.save(sys.argv[4], logits)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


@pytest.mark.slow
def test_circle_past_2_gb(tmp_path):
    if _free_bytes(tmp_path) < 2.2 * SIZE:
        pytest.skip(f"needs {2.2 * SIZE / 1e9:.1f} GB free disk in {tmp_path}")
    if _available_memory() < 3 * SIZE:
        pytest.skip(f"needs about {3 * SIZE / 1e9:.0f} GB of available memory")
    config = dm.config_for_bytes(SIZE, width=2048, heads=16, vocab=32000, max_len=64, prefill_len=8)
    path = tmp_path / "decoder.circle"
    dm.write_decoder(config, path)  # past the inline limit: the extended layout on its own
    gc.collect()
    size = os.path.getsize(path)
    assert size > 2**31

    raw = decode_model(path)
    assert raw.file_format.name == "circle" and raw.flatbuffer_end < 1 << 20
    ours = [(b.get("offset") or 0, b.get("size") or 0) for b in raw.root["buffers"]]
    used = [(o, s) for o, s in ours if o > 1]
    assert used and all(o % 16 == 0 and o >= raw.flatbuffer_end and o + s <= size for o, s in used)
    assert max(o for o, _ in used) > 2**31  # offsets past what a 32-bit FlatBuffer offset could reach
    del raw

    circle_model = pytest.importorskip("circle_schema.v0_10.circle.Model")
    with open(path, "rb") as f:
        head = f.read(1 << 20)  # the FlatBuffer part: the parser reads offsets, never the weights
    theirs = circle_model.Model.GetRootAs(head, 0)
    assert [(theirs.Buffers(i).Offset(), theirs.Buffers(i).Size()) for i in range(theirs.BuffersLength())] == ours

    child = subprocess.run([sys.executable, "-c", _RUN_AND_MEASURE, str(path), repr(config.__dict__),
                            str(Path(dm.__file__).parent), str(tmp_path / "logits.npy")],
                           capture_output=True, text=True, timeout=1800)
    assert child.returncode == 0, child.stderr[-2000:]
    peak = int(child.stdout.strip().splitlines()[-1])
    assert peak <= PEAK_OVER_FILE * size, f"peak {peak / 1e9:.2f} GB for a {size / 1e9:.2f} GB file"

    as_tflite = tmp_path / "decoder.tflite"
    write_model(read_model(path), as_tflite)
    path.unlink()
    official = official_steps(str(as_tflite), config, [11, 200, 3000, 5], [])
    np.testing.assert_allclose(np.load(tmp_path / "logits.npy"), official[0], rtol=1e-4, atol=1e-4)
