"""The compile cache seen through CompiledModel: hits, misses, rebuilds, refusals."""

import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import litegpu
from litegpu.errors import CacheError
from litegpu.ir.builder import ModelBuilder
from litegpu.ir.save import write_model


def small_model(path, scale=2.0, dynamic=False):
    b = ModelBuilder()
    shape = (1, 4)
    x = b.input("x", shape, shape_signature=(-1, 4) if dynamic else None)
    c = b.constant("c", np.full((4,), scale, np.float32))
    y = b.tensor("y", shape, shape_signature=(-1, 4) if dynamic else None)
    b.op("MUL", [x, c], [y])
    b.output(y)
    write_model(b.build(), path)
    return path


BUILTIN, FAST = litegpu.CpuKernelMode.BUILTIN, litegpu.CpuKernelMode.XNNPACK


def run_once(path, cache_dir, precision="fp32", token=None, batch=1, kernel_mode=BUILTIN, cpu_precision="fp32",
             threads=1):
    """One start: the XLA engine's cache by default (kernel_mode=BUILTIN), OpenVINO's with FAST."""
    options = litegpu.Options(litegpu.HardwareAccelerator.CPU, serialization_dir=str(cache_dir), model_token=token,
                              gpu_options=litegpu.GpuOptions(precision=precision),
                              cpu_options=litegpu.CpuOptions(num_threads=threads, kernel_mode=kernel_mode,
                                                             precision=cpu_precision))
    model = litegpu.CompiledModel.from_file(str(path), options=options)
    if batch != 1:
        model.resize_input_tensor(0, [batch, 4], strict=False)
    inputs, outputs = model.create_input_buffers(0), model.create_output_buffers(0)
    inputs[0].write(np.ones((batch, 4), np.float32))
    model.run_by_index(0, inputs, outputs)
    return outputs[0].read()


def entries(cache_dir):
    return sorted(p.name for p in cache_dir.glob("*.bin"))


def test_second_start_hits_and_gives_same_result(tmp_path):
    path = small_model(tmp_path / "m.tflite")
    first = run_once(path, tmp_path / "c")
    filled = entries(tmp_path / "c")
    assert len(filled) == 1
    assert np.array_equal(run_once(path, tmp_path / "c"), first)
    assert entries(tmp_path / "c") == filled


@pytest.mark.parametrize("change", ["model", "precision", "shape", "token"])
def test_any_change_misses(tmp_path, change):
    path = small_model(tmp_path / "m.tflite", dynamic=True)
    run_once(path, tmp_path / "c")
    before = set(entries(tmp_path / "c"))
    if change == "model":
        y = run_once(small_model(tmp_path / "m.tflite", scale=3.0, dynamic=True), tmp_path / "c")
        assert np.allclose(y, 3.0)  # never the stale program
    elif change == "precision":
        run_once(path, tmp_path / "c", precision="fp16")
    elif change == "shape":
        run_once(path, tmp_path / "c", batch=3)
    else:
        run_once(path, tmp_path / "c", token="other-token")
    assert set(entries(tmp_path / "c")) > before


def test_version_change_misses(tmp_path, monkeypatch):
    path = small_model(tmp_path / "m.tflite")
    run_once(path, tmp_path / "c")
    before = set(entries(tmp_path / "c"))
    monkeypatch.setattr(litegpu.runtime.compiled_model, "litegpu_version", lambda: "99.0")
    run_once(path, tmp_path / "c")
    assert set(entries(tmp_path / "c")) > before


def damage_entry(entry, how):
    """Cut an entry in half, or flip bits in its middle."""
    blob = bytearray(entry.read_bytes())
    if how == "truncate":
        blob = blob[: len(blob) // 2]
    else:
        blob[len(blob) // 2] ^= 0x5A
    entry.write_bytes(bytes(blob))


@pytest.mark.parametrize("damage", ["truncate", "corrupt"])
def test_damaged_entry_is_rebuilt(tmp_path, damage):
    path = small_model(tmp_path / "m.tflite")
    expected = run_once(path, tmp_path / "c")
    (entry,) = (tmp_path / "c").glob("*.bin")
    damage_entry(entry, damage)
    with pytest.warns(RuntimeWarning, match="discarding"):
        got = run_once(path, tmp_path / "c")
    assert np.array_equal(got, expected)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert litegpu.backends.cache.CompileCache(tmp_path / "c").verify() == []


@pytest.mark.parametrize("token", ["../../etc/passwd", "a/b", "..", "x" * 200])
def test_hostile_model_token_is_refused(tmp_path, token):
    with pytest.raises(CacheError):
        litegpu.Options(litegpu.HardwareAccelerator.CPU, serialization_dir=str(tmp_path), model_token=token)


def test_two_processes_starting_together_on_an_empty_cache(tmp_path):
    path = small_model(tmp_path / "m.tflite")
    script = textwrap.dedent(f"""
        import numpy as np, litegpu
        options = litegpu.Options(litegpu.HardwareAccelerator.CPU, serialization_dir={str(tmp_path / 'c')!r})
        model = litegpu.CompiledModel.from_file({str(path)!r}, options=options)
        print(float(model.run({{"x": np.ones((1, 4), np.float32)}})["y"].sum()))
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()[-2000:]
        assert out.decode().strip().splitlines()[-1] == "8.0"


# ---- the OpenVINO engine's entries: its compiled blob and its answer on which ops it converts ----

openvino = pytest.importorskip("openvino")


def test_openvino_second_start_hits_and_gives_same_result(tmp_path, without_litert):
    path = small_model(tmp_path / "m.tflite")
    first = run_once(path, tmp_path / "c", kernel_mode=FAST)
    filled = entries(tmp_path / "c")
    assert len(filled) == 2  # the support answer and the compiled blob
    assert np.array_equal(run_once(path, tmp_path / "c", kernel_mode=FAST), first)
    assert entries(tmp_path / "c") == filled
    assert np.allclose(first, 2.0)


@pytest.mark.parametrize("change", ["model", "cpu_precision", "threads", "shape", "token"])
def test_openvino_any_change_misses(tmp_path, change, without_litert):
    path = small_model(tmp_path / "m.tflite", dynamic=True)
    run_once(path, tmp_path / "c", kernel_mode=FAST)
    before = set(entries(tmp_path / "c"))
    if change == "model":
        y = run_once(small_model(tmp_path / "m.tflite", scale=3.0, dynamic=True), tmp_path / "c", kernel_mode=FAST)
        assert np.allclose(y, 3.0)  # never the stale blob
    elif change == "cpu_precision":
        run_once(path, tmp_path / "c", kernel_mode=FAST, cpu_precision="bf16")
    elif change == "threads":
        run_once(path, tmp_path / "c", kernel_mode=FAST, threads=2)
    elif change == "shape":
        y = run_once(path, tmp_path / "c", kernel_mode=FAST, batch=3)
        assert y.shape == (3, 4)
    else:
        run_once(path, tmp_path / "c", kernel_mode=FAST, token="other-token")
    assert set(entries(tmp_path / "c")) > before


@pytest.mark.parametrize("damage", ["truncate", "corrupt"])
def test_openvino_damaged_entries_are_rebuilt(tmp_path, damage, without_litert):
    path = small_model(tmp_path / "m.tflite")
    expected = run_once(path, tmp_path / "c", kernel_mode=FAST)
    for entry in (tmp_path / "c").glob("*.bin"):
        damage_entry(entry, damage)
    with pytest.warns(RuntimeWarning, match="discarding"):
        got = run_once(path, tmp_path / "c", kernel_mode=FAST)
    assert np.array_equal(got, expected)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert litegpu.backends.cache.CompileCache(tmp_path / "c").verify() == []


def test_openvino_blob_it_cannot_import_is_discarded(tmp_path, monkeypatch, without_litert):
    """An entry with a valid checksum that OpenVINO refuses (another build wrote it) is rebuilt, not trusted."""
    from litegpu.backends import openvino as engine

    path = small_model(tmp_path / "m.tflite")
    expected = run_once(path, tmp_path / "c", kernel_mode=FAST)

    def refuse(*args, **kwargs):
        raise RuntimeError("blob from another OpenVINO build")

    monkeypatch.setattr(engine._core(), "import_model", refuse, raising=False)
    with pytest.warns(RuntimeWarning, match="could not import"):
        got = run_once(path, tmp_path / "c", kernel_mode=FAST)
    assert np.array_equal(got, expected)
