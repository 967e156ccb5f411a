"""The command line on .circle files: inspect, dump, run, bench, ops, and pack both ways."""

from __future__ import annotations

import json

import numpy as np
import pytest

from litegpu.cli.main import main
from litegpu.format import CIRCLE
from litegpu.ir import read_model
from litegpu.ir.builder import ModelBuilder
from litegpu.ir.save import to_bytes


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _rms_model():
    b = ModelBuilder()
    x = b.input("x", (1, 4, 8))
    gamma = b.constant("gamma", np.linspace(0.5, 1.5, 8, dtype=np.float32))
    y = b.tensor("y", (1, 4, 8))
    b.op("RMS_NORM", [x, gamma], [y], epsilon=1e-6)
    b.output(y)
    return b.build()


def _fc_model():
    b = ModelBuilder()
    x = b.input("x", (2, 8))
    w = b.constant("w", np.random.default_rng(0).normal(size=(4, 8)).astype(np.float32))
    y = b.tensor("y", (2, 4))
    b.op("FULLY_CONNECTED", [x, w, -1], [y], fused_activation_function="RELU")
    b.output(y)
    return b.build()


@pytest.fixture
def rms_circle(tmp_path):
    path = tmp_path / "rms.circle"
    path.write_bytes(to_bytes(_rms_model(), CIRCLE))
    return path


def test_inspect_names_the_format_and_circle_ops(capsys, rms_circle):
    code, out, err = run_cli(capsys, "inspect", str(rms_circle), "--json")
    assert code == 0, err
    info = json.loads(out)
    assert info["format"] == "circle" and info["subgraphs"][0]["ops"] == {"RMS_NORM": 1}
    code, out, _ = run_cli(capsys, "inspect", str(rms_circle), "--accelerator", "cpu")
    assert code == 0 and "RMS_NORM" in out  # run by XLA, or lowered for the fast engines, as the plan says
    code, out, _ = run_cli(capsys, "inspect", str(rms_circle), "--accelerator", "cpu", "--json")
    plan = json.loads(out)["plan"]
    lowered_engines = {q["engine"] for q in plan["partitions"]} & {"litert", "openvino"}
    assert plan["circle_ops_lowered"] == (["RMS_NORM"] if lowered_engines else [])


def test_dump_shows_circle_fields(capsys, rms_circle):
    code, out, _ = run_cli(capsys, "dump", str(rms_circle))
    assert code == 0
    assert out.startswith(f"# {rms_circle}: circle (CIR0)")
    assert "deprecated_builtin_code: -6" in out and 'builtin_options_type: "RmsNormOptions"' in out
    assert 'compression_type: "NONE"' in out


def test_run_and_bench_a_circle_file(capsys, rms_circle):
    code, out, err = run_cli(capsys, "run", str(rms_circle), "--runs", "2")
    assert code == 0, err
    assert "outputs:" in out and "shape [1, 4, 8]" in out
    code, out, err = run_cli(capsys, "bench", str(rms_circle), "--runs", "2", "--warmup", "0")
    assert code == 0, err


def test_ops_lists_circle_ops(capsys):
    code, out, _ = run_cli(capsys, "ops", "--json")
    builtin = json.loads(out)["builtin"]
    for name in ("RMS_NORM", "INSTANCE_NORM", "ROPE", "GRU", "ATTENTION"):
        assert builtin[name]["formats"] == ["circle"] and builtin[name]["cpu"] and builtin[name]["gpu"]
    assert builtin["CONV_2D"]["formats"] == ["tflite", "circle"]
    code, out, _ = run_cli(capsys, "ops")
    assert "circle only" in out


@pytest.mark.parametrize("layout", [[], ["--extended-buffers"]])
def test_pack_tflite_to_circle_and_back(capsys, tmp_path, layout):
    src = tmp_path / "fc.tflite"
    src.write_bytes(to_bytes(_fc_model()))
    code, out, err = run_cli(capsys, "pack", str(src), str(tmp_path / "fc.circle"), *layout)
    assert code == 0, err
    assert "(circle)" in out and "tflite" in out
    code, _, err = run_cli(capsys, "pack", str(tmp_path / "fc.circle"), str(tmp_path / "back.tflite"))
    assert code == 0, err
    models = [read_model(p) for p in (src, tmp_path / "fc.circle", tmp_path / "back.tflite")]
    assert [m.file_format for m in models] == ["tflite", "circle", "tflite"]
    assert models[0] == models[1] == models[2]


def test_pack_format_flag_overrides_the_suffix(capsys, tmp_path):
    src = tmp_path / "fc.tflite"
    src.write_bytes(to_bytes(_fc_model()))
    code, _, err = run_cli(capsys, "pack", str(src), str(tmp_path / "out.bin"), "--format", "circle")
    assert code == 0, err
    assert read_model(tmp_path / "out.bin").file_format == "circle"


def test_pack_refuses_circle_only_ops_as_tflite(capsys, rms_circle, tmp_path):
    dst = tmp_path / "rms.tflite"
    code, _, err = run_cli(capsys, "pack", str(rms_circle), str(dst))
    assert code == 2
    assert err.startswith("litegpu pack: ") and "op RMS_NORM (code -6) has no place in a .tflite file" in err
    assert not dst.exists()


def test_unknown_identifier_is_one_line_exit_2(capsys, tmp_path):
    bad = tmp_path / "bad.circle"
    bad.write_bytes(b"\x10\x00\x00\x00CIRX" + b"\x00" * 32)
    code, _, err = run_cli(capsys, "inspect", str(bad))
    assert code == 2 and "expected b'TFL3' (.tflite) or b'CIR0' (.circle)" in err and str(bad) in err
