"""litegpu batch: a folder of examples to Parquet, bad examples skipped with their ids, killed and resumed."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pq = pytest.importorskip("pyarrow.parquet")

from litegpu.cli.batch_cmd import run_local  # noqa: E402

MODEL = Path(__file__).resolve().parents[2] / "src" / "litegpu" / "models" / "mediapipe_face_detection_short_range.tflite"


def write_examples(folder: Path, count: int) -> dict[str, np.ndarray]:
    folder.mkdir(parents=True, exist_ok=True)
    examples = {}
    for i in range(count):
        x = np.random.default_rng(i).uniform(-1, 1, (1, 128, 128, 3)).astype(np.float32)
        np.save(folder / f"ex{i:04d}.npy", x)
        examples[f"ex{i:04d}"] = x
    return examples


def test_every_example_becomes_a_row_and_bad_ones_are_reported(tmp_path):
    import litegpu

    examples = write_examples(tmp_path / "in", 6)
    np.save(tmp_path / "in" / "wrong_shape.npy", np.zeros((2, 3), np.float32))
    (tmp_path / "in" / "garbage.npy").write_bytes(b"not a numpy file")
    counts = run_local(MODEL, tmp_path / "in", tmp_path / "out.parquet", part_size=4, progress=False,
                       accelerator="cpu")
    assert counts["ran"] == 6 and counts["bad"] == 2 and counts["rows"] == 6
    table = pq.read_table(tmp_path / "out.parquet")
    shapes = json.loads(table.schema.metadata[b"litegpu.shapes"])
    model = litegpu.CompiledModel.from_file(str(MODEL))
    for row in table.to_pylist():
        want = model.run({"input": examples[row["id"]]})
        for name, value in want.items():
            # the batch and this model may each time a different engine (XNNPACK, OpenVINO): fp32 summation
            # orders apart, measured up to 4e-7 of the output's largest magnitude
            np.testing.assert_allclose(np.asarray(row[name], np.float32).reshape(shapes[name]), value, rtol=1e-5,
                                       atol=1e-5 * float(np.abs(value).max()))
    errors = [json.loads(line) for line in (tmp_path / "out.parquet.errors.jsonl").read_text().splitlines()]
    assert {e["id"] for e in errors} == {"wrong_shape", "garbage"}
    assert not (tmp_path / "out.parquet.parts").exists()


def test_a_run_killed_halfway_resumes_and_writes_every_row_exactly_once(tmp_path):
    write_examples(tmp_path / "in", 300)
    out = tmp_path / "out.parquet"
    command = [sys.executable, "-m", "litegpu.cli.main", "batch", str(MODEL), str(tmp_path / "in"), str(out),
               "--part-size", "1", "--accelerator", "cpu"]
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    parts = out.with_name(out.name + ".parts")
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and len(list(parts.glob("part-*.parquet"))) < 5:
        assert first.poll() is None, "the run ended before it could be interrupted"
        time.sleep(0.002)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=60)
    committed = len(list(parts.glob("part-*.parquet")))
    assert 5 <= committed < 300 and not out.exists()
    second = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-2000:]
    assert f"{committed} done before" in second.stdout
    ids = pq.read_table(out, columns=["id"]).column("id").to_pylist()
    assert len(ids) == 300 and set(ids) == {f"ex{i:04d}" for i in range(300)}
    assert not parts.exists() and not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())


def test_a_missing_input_folder_is_one_clear_line(tmp_path, capsys):
    from litegpu.cli.main import main

    assert main(["batch", str(MODEL), str(tmp_path / "nowhere"), str(tmp_path / "o.parquet")]) == 2
    assert "no such file or folder" in capsys.readouterr().err
