"""The ``litegpu`` command, called in-process through ``main([...])``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from litegpu.cli.main import main
from litegpu.ir import read_model
from litegpu.ir.builder import ModelBuilder
from litegpu.ir.opcodes import builtin_names
from litegpu.ir.save import to_bytes

ALL_MODELS = [
    "mediapipe_face_detection_short_range", "mediapipe_hand_landmark_lite", "mediapipe_selfie_segmentation",
    "microwakeword_okay_nabu", "mobilenet_v3_small_float32", "mobilenet_v3_small_int8",
    "transformer_encoder_float32", "two_signatures_float32",
]


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("name", ALL_MODELS)
def test_inspect_json_reads_every_shared_model(shared_models, capsys, name):
    code, out, err = run_cli(capsys, "inspect", str(shared_models / f"{name}.tflite"), "--json")
    assert code == 0, err
    info = json.loads(out)
    model = read_model(shared_models / f"{name}.tflite")
    assert [t["index"] for t in info["inputs"]] == list(model.main.inputs)
    assert [t["index"] for t in info["outputs"]] == list(model.main.outputs)
    assert [s["key"] for s in info["signatures"]] == [s.key for s in model.signatures]
    assert [sum(sg["ops"].values()) for sg in info["subgraphs"]] == [len(sg.operators) for sg in model.subgraphs]
    assert info["file_bytes"] == (shared_models / f"{name}.tflite").stat().st_size
    assert 0 < info["constant_bytes"] <= info["file_bytes"]
    assert [m["name"] for m in info["metadata"]] == [m.name for m in model.metadata]


def test_inspect_json_details(shared_models, capsys):
    _, out, _ = run_cli(capsys, "inspect", str(shared_models / "two_signatures_float32.tflite"), "--json")
    info = json.loads(out)
    decode, encode = info["signatures"]
    assert decode["key"] == "decode" and decode["subgraph"] == 0
    assert [t["name"] for t in decode["inputs"]] == ["code", "scale"]
    assert decode["inputs"][1] == {"name": "scale", "index": 1, "shape": [1], "shape_signature": None,
                                   "dtype": "int32", "quantization": None, "tensor_name": "decode_scale:0"}
    assert encode["subgraph"] == 1 and [t["name"] for t in encode["outputs"]] == ["code"]
    assert info["subgraphs"][1]["ops"] == {"FULLY_CONNECTED": 1}
    assert info["dtypes"]["float32"]["constants"] == 4
    assert {"name": "min_runtime_version", "buffer": info["metadata"][0]["buffer"], "bytes": 16,
            "value": "1.14.0"} in info["metadata"]
    assert info["custom_ops"] == []


def test_inspect_quantization_summary(shared_models, capsys):
    _, out, _ = run_cli(capsys, "inspect", str(shared_models / "mobilenet_v3_small_int8.tflite"), "--json")
    info = json.loads(out)
    assert info["inputs"][0]["dtype"] == "int8"
    assert info["inputs"][0]["quantization"].startswith("scale=0.00784")
    assert "int8" in info["dtypes"] and info["dtypes"]["int8"]["constant_bytes"] > 100_000


def test_inspect_custom_op_raw_struct_options(shared_models, capsys):
    _, out, _ = run_cli(capsys, "inspect", str(shared_models / "mediapipe_selfie_segmentation.tflite"), "--json")
    (custom,) = json.loads(out)["custom_ops"]
    assert custom["name"] == "Convolution2DTransposeBias" and custom["count"] == 1
    assert custom["options"] == [{"raw_bytes": 12, "preview": "01 00 00 00 02 00 00 00 02 00 00 00"}]


def test_inspect_custom_op_flexbuffer_options(tmp_path, capsys):
    from flatbuffers import flexbuffers

    b = ModelBuilder()
    x = b.input("x", (2,))
    y = b.tensor("y", (2,))
    b.op("MyOp", [x], [y], custom_options=bytes(flexbuffers.Dumps({"alpha": 0.5, "mode": "fast", "k": [1, 2]})))
    b.output(y)
    path = tmp_path / "custom.tflite"
    path.write_bytes(to_bytes(b.build()))
    _, out, _ = run_cli(capsys, "inspect", str(path), "--json")
    (custom,) = json.loads(out)["custom_ops"]
    assert custom["options"] == [{"alpha": 0.5, "mode": "fast", "k": [1, 2]}]
    code, out, _ = run_cli(capsys, "inspect", str(path))
    assert code == 0 and "MyOp" in out and "fast" in out


def test_inspect_tables(shared_models, capsys):
    code, out, _ = run_cli(capsys, "inspect", str(shared_models / "microwakeword_okay_nabu.tflite"))
    assert code == 0
    for text in ("Inputs", "Signature 'serving_default'", "CALL_ONCE", "Tensor types", "int8", "min_runtime_version"):
        assert text in out


def test_dump_prints_tables_and_previews_bytes(shared_models, capsys):
    code, out, _ = run_cli(capsys, "dump", str(shared_models / "two_signatures_float32.tflite"))
    assert code == 0
    assert out.startswith("# ") and "\nModel:\n" in out
    for text in ("builtin_code: 9 (FULLY_CONNECTED)", 'signature_key: "encode"', "shape: [1, 32]",
                 "builtin_options_type: \"FullyConnectedOptions\"", 'name: "min_runtime_version"'):
        assert text in out
    # 16 KB of weights are shown as location + size + a preview, never in full.
    assert "<16384 bytes at bytes " in out or "<8192 bytes at bytes " in out
    assert len(out) < 60_000


def test_dump_shows_buffers_after_the_flatbuffer(shared_models, tmp_path, capsys):
    packed = tmp_path / "ext.tflite"
    assert run_cli(capsys, "pack", str(shared_models / "two_signatures_float32.tflite"), str(packed),
                   "--extended-buffers")[0] == 0
    code, out, _ = run_cli(capsys, "dump", str(packed))
    assert code == 0 and "bytes after the FlatBuffer at bytes " in out


def test_ops_json_shape(capsys):
    code, out, _ = run_cli(capsys, "ops", "--json")
    assert code == 0
    table = json.loads(out)
    assert set(table) == {"builtin", "custom"}
    assert table["builtin"]["CONV_2D"]["cpu"] is True and "float32" in table["builtin"]["CONV_2D"]["dtypes"]
    for entry in table["builtin"].values():
        # formats: .tflite and .circle, or circle only; refused: why an op litegpu knows is not run (BCQ ops)
        assert set(entry) - {"refused"} == {"cpu", "gpu", "dtypes", "formats"}
        assert "refused" not in entry or not (entry["cpu"] or entry["gpu"])
    for entry in table["custom"].values():
        assert set(entry) == {"cpu", "gpu", "dtypes"}
    # Every schema op is listed, implemented or not.
    names = set(builtin_names().values()) - {"CUSTOM", "PLACEHOLDER_FOR_GREATER_OP_CODES"}
    assert names <= set(table["builtin"])
    from litegpu.ops import builtin_ops

    implemented = builtin_ops()
    for name in names - set(implemented):
        assert {k: table["builtin"][name][k] for k in ("cpu", "gpu", "dtypes")} == \
            {"cpu": False, "gpu": False, "dtypes": []}, name
    for name, op in implemented.items():
        assert table["builtin"][name]["dtypes"] == list(op.dtypes)
        if op.data_dependent_shape or not op.xla:
            assert table["builtin"][name]["gpu"] is False, name


def test_ops_table(capsys):
    code, out, _ = run_cli(capsys, "ops")
    assert code == 0 and "CONV_2D" in out and "unsupported" in out


@pytest.mark.parametrize("layout", [[], ["--inline"], ["--extended-buffers"], ["--threshold", "100"]])
def test_pack_round_trips(shared_models, tmp_path, capsys, layout):
    src = shared_models / "two_signatures_float32.tflite"
    dst = tmp_path / "out.tflite"
    code, out, err = run_cli(capsys, "pack", str(src), str(dst), *layout)
    assert code == 0, err
    assert "wrote" in out and read_model(dst) == read_model(src)


def test_pack_rejects_both_layouts(shared_models, tmp_path, capsys):
    code, _, err = run_cli(capsys, "pack", str(shared_models / "two_signatures_float32.tflite"),
                           str(tmp_path / "o.tflite"), "--inline", "--extended-buffers")
    assert code == 2 and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("command", ["inspect", "dump", "pack", "run"])
@pytest.mark.parametrize("problem", ["missing", "garbage", "truncated", "directory"])
def test_bad_file_is_one_line_and_exit_2(shared_models, tmp_path, capsys, command, problem):
    path = tmp_path / "bad.tflite"
    if problem == "garbage":
        path.write_bytes(b"not a model at all" * 20)
    elif problem == "truncated":
        path.write_bytes((shared_models / "two_signatures_float32.tflite").read_bytes()[:5000])
    elif problem == "directory":
        path.mkdir()
    argv = [command, str(path)] + ([str(tmp_path / "out.tflite")] if command == "pack" else [])
    code, out, err = run_cli(capsys, *argv)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "bad.tflite" in lines[0] and "Traceback" not in err, err
    assert lines[0].startswith(f"litegpu {command}: ")


@pytest.mark.parametrize("argv", [["inspect"], ["dump"], ["pack", "only-one.tflite"], [], ["frobnicate"]])
def test_missing_arguments_are_one_line_and_exit_2(capsys, argv):
    code, _, err = run_cli(capsys, *argv)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_help_exits_0(capsys):
    code, out, _ = run_cli(capsys, "--help")
    assert code == 0 and "inspect" in out and "run" in out


def test_run_input_spec_errors(tmp_path, capsys):
    from litegpu.cli.run_cmd import parse_inputs
    from litegpu.errors import InvalidArgumentError

    good = tmp_path / "x.npy"
    np.save(good, np.zeros((1, 2), np.float32))
    assert parse_inputs([f"x={good}"])["x"].shape == (1, 2)
    for spec in ("no-equals", "=x.npy", f"x={tmp_path / 'missing.npy'}"):
        with pytest.raises(InvalidArgumentError):
            parse_inputs([spec])


def test_bundled_model_is_in_the_package():
    from litegpu.cli.run_cmd import bundled_model

    assert bundled_model().is_file() and read_model(bundled_model()).main.operators


def test_run_with_signature_and_input(shared_models, tmp_path, capsys):
    x = tmp_path / "x.npy"
    np.save(x, np.full((1, 64), 0.5, np.float32))
    code, out, err = run_cli(capsys, "run", str(shared_models / "two_signatures_float32.tflite"),
                             "--signature", "encode", "--input", f"x={x}", "--runs", "2")
    assert code == 0, err
    assert "signature 'encode'" in out and "code: shape [1, 32] float32" in out
    assert "x: shape [1, 64] float32  [0.5, 0.5" in out
    assert "latency: first run" in out and "median of 2 runs" in out


@pytest.mark.parametrize("argv,message", [
    (["--signature", "nope"], "no signature 'nope'"),
    (["--input", "missing_name=x.npy"], "--input missing_name"),
    (["--accelerator", "tpu"], "--accelerator"),
])
def test_run_argument_errors_are_one_line(shared_models, capsys, argv, message):
    code, _, err = run_cli(capsys, "run", str(shared_models / "two_signatures_float32.tflite"), *argv)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_cache_ls_verify_clear(tmp_path, capsys):
    from litegpu.backends.cache import CompileCache, make_key

    cache = CompileCache(tmp_path)
    good, bad = make_key({"a": 1}), make_key({"b": 2})
    cache.store(good, b"x" * 100, {"model": "m1"})
    cache.store(bad, b"y" * 100, {"model": "m2"})
    (tmp_path / f"{bad}.bin").write_bytes(b"broken")
    assert main(["cache", "ls", str(tmp_path)]) == 0
    assert "2 entries" in capsys.readouterr().out
    assert main(["cache", "verify", str(tmp_path)]) == 1
    assert "1 bad entries removed" in capsys.readouterr().out
    assert main(["cache", "verify", str(tmp_path)]) == 0
    assert main(["cache", "clear", str(tmp_path)]) == 0
    assert "removed 1 entries" in capsys.readouterr().out


def test_cache_on_missing_directory(tmp_path, capsys):
    assert main(["cache", "ls", str(tmp_path / "nope")]) == 2


# ---- delegation reports (inspect --accelerator / --mobile-gpu) ---------------------------------

def _detector_file(tmp_path):
    import importlib.util

    from litegpu.ir.save import write_model

    source = Path(__file__).resolve().parents[1] / "compile" / "test_plan_partitions.py"
    spec = importlib.util.spec_from_file_location("_plan_partitions_models", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    path = tmp_path / "detector.tflite"
    write_model(module.detector_model(), path)
    return path


def test_inspect_accelerator_gpu_prints_partitions_fallbacks_and_boundaries(tmp_path, capsys):
    code, out, err = run_cli(capsys, "inspect", str(_detector_file(tmp_path)), "--accelerator", "gpu")
    assert code == 0 and err == ""  # the report says it all: no warnings on stderr
    text = " ".join(out.split())
    assert "7 operations will run on the GPU, and the remaining 2 on the CPU (2 on the numpy reference)" in text
    assert "Partitions (3)" in out and "NON_MAX_SUPPRESSION_V4" in text and "WHERE" in text
    assert "NON_MAX_SUPPRESSION_V4 │ #5 │ output shape depends on data" in text
    assert "boxes (4) │ [64, 4] │ float32 │ 1024 │ 0 -> 1, 2" in text
    assert "1.3 KiB moved between devices per run" in text


def test_inspect_accelerator_json(tmp_path, capsys):
    code, out, _ = run_cli(capsys, "inspect", str(_detector_file(tmp_path)), "--accelerator", "gpu,cpu", "--json")
    plan = json.loads(out)["plan"]
    assert [(p["accelerator"], p["op_indices"]) for p in plan["partitions"]] == [
        ("GPU", [0, 1, 2, 3, 4, 7]), ("CPU", [5, 8]), ("GPU", [6])]
    assert {f["op"] for f in plan["fallbacks"]} == {"NON_MAX_SUPPRESSION_V4", "WHERE"}
    assert plan["transfer_bytes"] == 1376 and not plan["fully_accelerated"]
    code, out, _ = run_cli(capsys, "inspect", str(_detector_file(tmp_path)), "--accelerator", "cpu", "--json")
    # the CPU plan names each partition's engine: the official interpreter takes this small model whole
    # (rather than XLA alone, which would also need numpy for WHERE)
    assert {p["engine"] for p in json.loads(out)["plan"]["partitions"]} == {"litert"}


def test_inspect_cpu_engines_without_the_official_interpreter(tmp_path, capsys, without_litert):
    code, out, _ = run_cli(capsys, "inspect", str(_detector_file(tmp_path)), "--accelerator", "cpu", "--json")
    # XLA, numpy for WHERE (the convolutions are too small to pay OpenVINO's two partition edges)
    assert {p["engine"] for p in json.loads(out)["plan"]["partitions"]} == {"xla", "reference"}


def test_inspect_mobile_gpu(tmp_path, shared_models, capsys):
    code, out, _ = run_cli(capsys, "inspect", str(_detector_file(tmp_path)), "--mobile-gpu")
    text = " ".join(out.split())
    assert code == 0 and "fully delegated: no" in text
    assert "GREATER │ #7 │ 1 │ Not supported logical op case." in text
    assert "WHERE │ #8 │ 1 │ Operation is not supported." in text
    code, out, _ = run_cli(capsys, "inspect", str(shared_models / "mobilenet_v3_small_float32.tflite"),
                           "--mobile-gpu", "--json")
    assert json.loads(out)["mobile_gpu"] == {"fully_delegated": True, "summary": "all 109 operations will run "
                                             "on the GPU", "ops": 109, "delegated_ops": 109, "unsupported": []}


def test_inspect_accelerator_rejects_unknown_names(tmp_path, capsys):
    code, _, err = run_cli(capsys, "inspect", str(_detector_file(tmp_path)), "--accelerator", "tpu")
    assert code == 2 and "--accelerator 'tpu'" in err


def test_doctor_lists_engines_and_devices(capsys):
    code, out, _ = run_cli(capsys, "doctor", "--json")
    info = json.loads(out)
    engines = {e["engine"]: e for e in info["engines"]}
    assert code == 0 and set(engines) == {"litert", "openvino", "xla", "iree", "reference"}
    assert engines["reference"]["available"] and engines["xla"]["available"]
    assert info["devices"][0]["device"] == "CPU"
    assert {"Vulkan", "Intel GPU"} <= {d["device"].split(" ")[0] if d["device"].startswith("Vulkan") else d["device"]
                                       for d in info["devices"]}
    assert info["gpu"]
    code, out, _ = run_cli(capsys, "doctor")
    assert code == 0 and "Engines" in out and "Devices" in out


def test_doctor_lists_the_vulkan_devices_and_what_iree_does_with_them(capsys):
    from litegpu.backends.iree.engine import missing_package
    from litegpu.backends.iree.vulkan import vulkan_devices

    code, out, _ = run_cli(capsys, "doctor", "--json")
    info = json.loads(out)
    rows = [d for d in info["devices"] if d["device"].startswith("Vulkan")]
    (iree_row,) = [e for e in info["engines"] if e["engine"] == "iree"]
    if not vulkan_devices():
        assert len(rows) == 1 and rows[0]["engines"] == "-" and "mesa-vulkan-drivers" in rows[0]["install"]
        assert not iree_row["available"]
        if missing_package() is None:  # installed: no pip hint, the device is what is missing
            assert iree_row["status"] == "installed; no hardware Vulkan device"
            assert "litegpu[vulkan]" not in iree_row["install"] and "Vulkan" in iree_row["install"]
        else:
            assert "litegpu[vulkan]" in iree_row["install"]
        return
    assert [r["device"] for r in rows] == [f"Vulkan {d.index}" for d in vulkan_devices()]
    for row, device in zip(rows, vulkan_devices()):
        assert device.name in row["detail"]
        if device.is_software and missing_package() is None:
            assert 'GpuOptions(engine="iree")' in row["engines"]  # software: only when asked for by name
    if all(d.is_software for d in vulkan_devices()):
        assert not iree_row["available"] and "software" in iree_row["detail"]
        if missing_package() is None:
            assert iree_row["status"] == "installed; no hardware Vulkan device"
            assert "litegpu[vulkan]" not in iree_row["install"]
        assert "GPU plans run on" not in info["gpu"] or "XLA" in info["gpu"]


def test_doctor_explains_intel_gpus_from_the_pci_bus(tmp_path):
    """No Intel GPU on the test machines: the detection is checked on a made-up sysfs tree, and on this machine's
    own (whose answer must agree with what OpenVINO sees)."""
    from litegpu.backends.openvino import IntelGpuReport, intel_gpu_report, intel_gpus_on_pci

    for name, vendor, kind in (("0000:00:02.0", "0x8086", "0x030000"), ("0000:00:1f.3", "0x8086", "0x040300"),
                               ("0000:01:00.0", "0x10de", "0x030200")):
        (tmp_path / name).mkdir()
        for field, value in (("vendor", vendor), ("device", "0x46a6"), ("class", kind)):
            (tmp_path / name / field).write_text(value + "\n")
    assert intel_gpus_on_pci(str(tmp_path)) == ["0000:00:02.0 (device 0x46a6)"]  # not the audio device, not NVIDIA
    assert "intel-opencl-icd" in IntelGpuReport(("0000:00:02.0 (device 0x46a6)",), ()).explain()
    assert "sees GPU.0" in IntelGpuReport(("x",), ("GPU.0: Intel Arc",)).explain()
    assert intel_gpus_on_pci(str(tmp_path / "missing")) == []
    report = intel_gpu_report()
    if not report.hardware:
        assert report.explain().startswith("no Intel GPU") or report.openvino


def test_doctor_says_how_to_add_a_missing_engine(capsys, monkeypatch):
    from litegpu.backends import openvino as engine

    monkeypatch.setattr(engine.OpenVinoEngine, "available", lambda self: False)
    code, out, _ = run_cli(capsys, "doctor", "--json")
    (row,) = [e for e in json.loads(out)["engines"] if e["engine"] == "openvino"]
    assert not row["available"] and row["install"] == "pip install openvino"
    code, out, _ = run_cli(capsys, "doctor")
    assert "pip install openvino" in out


def test_inspect_devices_estimates_the_weights_per_device_without_the_devices(capsys):
    model = Path(__file__).resolve().parents[1] / "heldout" / "litert_torch" / "smollm_tiny_int4_block32.tflite"
    code, out, _ = run_cli(capsys, "inspect", str(model), "--devices", "4", "--json")
    assert code == 0
    weights = json.loads(out)["weights"]
    split = [w for w in weights["weights"] if w["axis"] is not None]
    assert split and all(w["dtype"] == "int4" and w["axis"] == 0 for w in split)
    quarter = weights["sharded_bytes"] / 4 + weights["replicated_bytes"]
    assert quarter - len(split) <= weights["estimated_bytes_per_device"] <= quarter
    code, out, _ = run_cli(capsys, "inspect", str(model), "--devices", "4")
    assert "split on axis 0 (FULLY_CONNECTED weights [out, in]; packed int4, split by rows)" in out.replace("\n", " ")


def test_run_says_whose_numbers_a_dynamic_range_model_gives(tmp_path, capsys):
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backends"))
    from test_litert import bfloat16_exact, blockwise_model, with_scales

    path = tmp_path / "int4.tflite"
    path.write_bytes(to_bytes(with_scales(read_model(to_bytes(blockwise_model((3, 256), 16, 32))), bfloat16_exact)))
    code, out, err = run_cli(capsys, "run", str(path), "--runs", "1")
    assert code == 0, err
    assert "engines: 1 op on LiteRT (XNNPACK)" in out and "numbers: dynamic-range (hybrid) ops" in out
    assert "--kernel-mode builtin" in out
    code, out, err = run_cli(capsys, "run", str(path), "--runs", "1", "--kernel-mode", "builtin")
    assert code == 0, err
    assert "on XLA" in out and "numbers:" not in out


# ---- the first five minutes (issue 35) -------------------------------------------------------------

def test_run_on_the_bundled_model_says_its_outputs_match_the_official_runtime(capsys):
    code, out, err = run_cli(capsys, "run", "--runs", "1")
    assert code == 0, err
    assert "reference: the outputs match the official runtime's" in out
    assert "inputs: the reference's (mediapipe_face_detection_short_range.reference.npz)" in out
    assert "<placeholder signature>" not in out and "(no signatures: inputs and outputs by tensor name)" in out


def test_run_says_when_outputs_differ_from_the_reference_and_exits_1(tmp_path, capsys):
    b = ModelBuilder()
    x, y = b.input("x", (1, 4)), b.tensor("y", (1, 4))
    b.op("MUL", [x, b.constant("c", np.full((4,), 2.0, np.float32))], [y])
    b.output(y)
    (tmp_path / "double.tflite").write_bytes(to_bytes(b.build()))
    x_value = np.arange(4, dtype=np.float32).reshape(1, 4)
    np.savez(tmp_path / "double.reference.npz", **{"-/in/x": x_value, "-/out/y": x_value * 2})
    code, out, _ = run_cli(capsys, "run", str(tmp_path / "double.tflite"), "--runs", "0")
    assert code == 0 and "the outputs match" in out
    np.savez(tmp_path / "double.reference.npz", **{"-/in/x": x_value, "-/out/y": x_value * 3})
    code, out, _ = run_cli(capsys, "run", str(tmp_path / "double.tflite"), "--runs", "0")
    assert code == 1 and "DO NOT match" in out and "DIFFERS" in out


def test_run_takes_numpys_default_float64_for_a_float32_input(tmp_path, capsys):
    array = tmp_path / "x.npy"
    np.save(array, np.random.default_rng(0).uniform(-1, 1, (1, 128, 128, 3)))  # float64
    code, out, err = run_cli(capsys, "run", "--input", f"input={array}", "--runs", "0")
    assert code == 0, err
    assert "inputs: given" in out and "shape [1, 128, 128, 3] float32" in out


def test_run_refuses_an_input_of_another_kind_or_out_of_range():
    from litegpu.cli.run_cmd import as_input
    from litegpu.errors import InvalidArgumentError

    assert as_input("x", np.array([1, 2], np.int64), "int8").dtype == np.int8
    with pytest.raises(InvalidArgumentError, match="outside the input's int8"):
        as_input("x", np.array([1, 300]), "int8")
    with pytest.raises(InvalidArgumentError, match="another kind of number"):
        as_input("x", np.array([1.5]), "int32")


def test_run_without_a_gpu_speaks_the_command_lines_language(capsys, monkeypatch):
    from litegpu.runtime import environment

    monkeypatch.setattr(environment.Environment, "platforms", staticmethod(lambda: {"cpu"}))
    monkeypatch.setenv("LITEGPU_IREE_VULKAN", "0")
    code, _, err = run_cli(capsys, "run", "--accelerator", "gpu", "--runs", "0")
    if code == 0:
        pytest.skip("a GPU is present")
    assert code == 2 and "--accelerator gpu,cpu" in err and "HardwareAccelerator" not in err, err


@pytest.mark.parametrize("argv", [["run", "--runs", "-3"], ["bench", "x.tflite", "--warmup", "-1"],
                                  ["generate", "x.litertlm", "--prompt", "hi", "--max-tokens", "0"]])
def test_negative_counts_are_usage_errors(capsys, argv):
    code, _, err = run_cli(capsys, *argv)
    assert code == 2 and "is less than" in err


def test_dump_names_the_op_of_each_operator_code(capsys):
    from litegpu import bundled_model

    code, out, _ = run_cli(capsys, "dump", str(bundled_model()))
    assert code == 0
    assert "[0]: CONV_2D\n      deprecated_builtin_code: 3 (CONV_2D)" in out
    assert 'builtin_code: "ADD"' not in out and "builtin_code: 0 (ADD, the field's default" in out


def test_pack_prints_no_blank_line_and_writes_files_others_may_read(tmp_path, capsys):
    import os
    import stat

    from litegpu import bundled_model

    old = os.umask(0o022)
    try:
        code, out, _ = run_cli(capsys, "pack", str(bundled_model()), str(tmp_path / "packed.tflite"))
    finally:
        os.umask(old)
    assert code == 0 and out.startswith("wrote ")
    assert stat.S_IMODE((tmp_path / "packed.tflite").stat().st_mode) == 0o644


def test_cache_ls_shows_engine_source_size_and_last_use_and_prune_bounds_it(tmp_path, capsys):
    from litegpu.backends.cache import CompileCache, make_key

    cache = CompileCache(tmp_path)
    cache.store(make_key({"a": 1}), b"x" * 3000, {"engine": "xla", "what": "compiled program",
                                                  "source": "/models/face.tflite"})
    cache.store(make_key({"b": 2}), b"y" * 3000, {"engine": "litert", "what": "engine choice",
                                                  "source": "/models/hand.tflite"})
    code, out, _ = run_cli(capsys, "cache", "ls", str(tmp_path))
    assert code == 0
    assert "xla, compiled program  /models/face.tflite" in out and "3.0 KiB" in out and "last used 20" in out
    assert run_cli(capsys, "cache", "prune", str(tmp_path), "--max-size", "4K")[0] == 0
    assert len(list(cache.entries())) == 1
    assert run_cli(capsys, "cache", "ls", str(tmp_path), "--max-size", "4K")[0] == 2  # prune's option only


def test_cache_ls_looks_at_the_default_cache(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LITEGPU_CACHE_DIR", str(tmp_path / "c"))
    code, out, _ = run_cli(capsys, "cache", "ls")
    assert code == 0 and "nothing cached yet" in out
    monkeypatch.setenv("LITEGPU_CACHE_DIR", "")
    code, out, _ = run_cli(capsys, "cache", "ls")
    assert code == 0 and "the compile cache is off" in out


def test_commands_that_run_models_default_to_the_cpu_and_say_so():
    from litegpu.cli.main import build_parser

    parser = build_parser()
    for argv in (["run"], ["bench", "m.tflite"], ["batch", "m", "i", "o"], ["generate", "m", "--prompt", "p"],
                 ["chat", "m"]):
        assert parser.parse_args(argv).accelerator == "cpu", argv
    assert "cpu (the default)" in parser._subparsers._group_actions[0].choices["batch"].format_help()


def test_bench_creates_its_cache_directory_private(tmp_path, capsys):
    import stat

    from litegpu import bundled_model

    code, _, err = run_cli(capsys, "bench", str(bundled_model()), "--runs", "1", "--warmup", "0", "--cache-dir",
                           str(tmp_path / "bench-cache"))
    assert code == 0, err
    assert stat.S_IMODE((tmp_path / "bench-cache").stat().st_mode) == 0o700
