"""The compile cache seen through CompiledModel: hits, misses, rebuilds, refusals."""

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

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


def test_changed_code_misses(tmp_path, monkeypatch):
    """A source checkout edited without a version change (an editable install) compiles again."""
    path = small_model(tmp_path / "m.tflite")
    run_once(path, tmp_path / "c")
    before = set(entries(tmp_path / "c"))
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "a.py").write_text("x = 1\n")
    first = litegpu.runtime.compiled_model.litegpu_code_fingerprint(str(package))
    (package / "a.py").write_text("x = 22\n")  # another size, another fingerprint
    assert litegpu.runtime.compiled_model.litegpu_code_fingerprint.__wrapped__(str(package)) != first
    monkeypatch.setattr(litegpu.runtime.compiled_model, "litegpu_code_fingerprint", lambda: first)
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


# ---- on by default ----------------------------------------------------------------------------------

def default_start(path, **options):
    """A start as a new user's script makes it: no serialization_dir (the XLA engine's programs, for entries)."""
    model = litegpu.CompiledModel.from_file(str(path), options=litegpu.Options(
        litegpu.HardwareAccelerator.CPU, cpu_options=litegpu.CpuOptions(kernel_mode=BUILTIN), **options))
    return model.run({"x": np.ones((1, 4), np.float32)})["y"]


def test_the_cache_is_on_by_default_in_the_user_cache_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("LITEGPU_CACHE_DIR", str(tmp_path / "user-cache"))
    path = small_model(tmp_path / "m.tflite")
    first = default_start(path)
    filled = entries(tmp_path / "user-cache")
    assert filled  # the compiled program, with nothing asked for
    assert np.array_equal(default_start(path), first) and entries(tmp_path / "user-cache") == filled


@pytest.mark.parametrize("off", ["option", "environment"])
def test_the_cache_turns_off(tmp_path, monkeypatch, off):
    monkeypatch.setenv("LITEGPU_CACHE_DIR", "" if off == "environment" else str(tmp_path / "user-cache"))
    path = small_model(tmp_path / "m.tflite")
    assert np.allclose(default_start(path, **({"compile_cache": False} if off == "option" else {})), 2.0)
    assert not (tmp_path / "user-cache").exists()


def test_compile_cache_takes_a_bool():
    with pytest.raises(litegpu.InvalidArgumentError, match="compile_cache"):
        litegpu.Options(compile_cache="no")
    assert "compile_cache=False" in repr(litegpu.Options(compile_cache=False))


def test_a_default_cache_that_cannot_be_made_warns_and_the_model_still_runs(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("LITEGPU_CACHE_DIR", str(blocker / "cache"))
    path = small_model(tmp_path / "m.tflite")
    with pytest.warns(RuntimeWarning, match="running without it"):
        assert np.allclose(default_start(path), 2.0)


def test_a_cache_directory_named_that_cannot_be_made_is_an_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(CacheError, match="cannot create"):
        run_once(small_model(tmp_path / "m.tflite"), blocker / "cache")


def test_the_interpreter_keeps_its_programs_in_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LITEGPU_CACHE_DIR", str(tmp_path / "user-cache"))
    path = small_model(tmp_path / "m.tflite")

    def interpret():
        interpreter = litegpu.Interpreter(model_path=str(path))
        interpreter.allocate_tensors()
        interpreter.set_tensor(interpreter.get_input_details()[0]["index"], np.ones((1, 4), np.float32))
        interpreter.invoke()
        return interpreter.get_tensor(interpreter.get_output_details()[0]["index"])

    first = interpret()
    filled = entries(tmp_path / "user-cache")
    assert filled and np.array_equal(interpret(), first) and entries(tmp_path / "user-cache") == filled


def test_a_model_from_bytes_is_keyed_by_its_bytes_not_written_out_again(tmp_path, monkeypatch):
    from litegpu.ir import save

    data = small_model(tmp_path / "m.tflite").read_bytes()
    written = []
    real = save.to_bytes
    monkeypatch.setattr(save, "to_bytes", lambda *a, **k: written.append(1) or real(*a, **k))
    options = litegpu.Options(litegpu.HardwareAccelerator.CPU, serialization_dir=str(tmp_path / "c"),
                              cpu_options=litegpu.CpuOptions(kernel_mode=BUILTIN))
    litegpu.CompiledModel.from_buffer(data, options=options).run({"x": np.ones((1, 4), np.float32)})
    assert written == [] and entries(tmp_path / "c")


_CROWD = """
import json, sys, numpy as np, litegpu
from litegpu.backends import cache
stored = []
real = cache.CompileCache.store
cache.CompileCache.store = lambda self, key, payload, meta=None: stored.append(key) or real(self, key, payload, meta)
options = litegpu.Options(litegpu.HardwareAccelerator.CPU, cpu_options=litegpu.CpuOptions({kernels}))
model = litegpu.CompiledModel.from_file(sys.argv[1], options=options)
y = model.run({{"x": np.ones((1, 4), np.float32)}})["y"]
print(json.dumps({{"y": y.tolist(), "stored": stored}}))
"""


def crowd(path, directory, processes, kernels):
    """``processes`` processes started at once on one empty cache: each one's output and the keys it stored."""
    env = {**os.environ, "LITEGPU_CACHE_DIR": str(directory)}
    script = _CROWD.format(kernels=kernels)
    children = [subprocess.Popen([sys.executable, "-c", script, str(path)], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env=env) for _ in range(processes)]
    results = []
    for child in children:
        out, err = child.communicate(timeout=600)
        assert child.returncode == 0, err[-2000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def assert_each_entry_made_once(results, directory):
    stored = [key for r in results for key in r["stored"]]
    assert stored and len(stored) == len(set(stored))  # no entry computed by two processes
    assert sorted(set(stored)) == sorted(p.stem for p in Path(directory).glob("*.bin"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert litegpu.backends.cache.CompileCache(directory).verify() == []


def test_processes_starting_together_compute_each_entry_once(tmp_path):
    """The official interpreter's thread count is timed on a small model: one process times it, the others wait
    for its verdict and read it."""
    from litegpu.backends.engine import physical_cores

    if physical_cores() < 2:
        pytest.skip("one core: no thread count to time")
    path = small_model(tmp_path / "m.tflite")
    results = crowd(path, tmp_path / "c", 3, "")  # the default engines
    assert all(np.allclose(r["y"], 2.0) for r in results)
    assert_each_entry_made_once(results, tmp_path / "c")


@pytest.mark.slow
@pytest.mark.parametrize("kernels", ["", "kernel_mode=litegpu.CpuKernelMode.BUILTIN", 'engines=("openvino",)'])
def test_eight_processes_starting_together_on_an_empty_cache(tmp_path, kernels):
    path = small_model(tmp_path / "m.tflite")
    results = crowd(path, tmp_path / "c", 8, kernels)
    assert all(np.allclose(r["y"], 2.0) for r in results)
    assert_each_entry_made_once(results, tmp_path / "c")


# ---- the OpenVINO engine's entries: its compiled blob and its answer on which ops it converts ----

openvino = pytest.importorskip("openvino")


def test_openvino_second_start_hits_and_gives_same_result(tmp_path, without_litert):
    path = small_model(tmp_path / "m.tflite")
    first = run_once(path, tmp_path / "c", kernel_mode=FAST)
    filled = entries(tmp_path / "c")
    assert len(filled) == 3  # the support answer, the compiled blob and the warm start's record
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
