"""A warm start without the IR (runtime.warm_start): a second start of a model the official interpreter runs whole
reads neither the model into the IR nor plans it, and gives what a first start gives; a changed file, changed
options or changed litegpu code miss."""

import os

import numpy as np
import pytest

import litegpu
from litegpu import ir
from litegpu.errors import ModelFormatError
from litegpu.ir.builder import ModelBuilder
from litegpu.ir.save import write_model
from litegpu.runtime import compiled_model

pytest.importorskip("ai_edge_litert")


def small_model(path, scale=2.0):
    b = ModelBuilder()
    x = b.input("x", (1, 4), shape_signature=(-1, 4))
    c = b.constant("c", np.full((4,), scale, np.float32))
    y = b.tensor("y", (1, 4), shape_signature=(-1, 4))
    b.op("MUL", [x, c], [y])
    b.output(y)
    write_model(b.build(), path)
    return str(path)


@pytest.fixture
def reads(monkeypatch):
    """How many times a model file is read into the IR."""
    count = []
    real = ir.read_model
    monkeypatch.setattr(ir, "read_model", lambda *a, **k: count.append(a) or real(*a, **k))
    return count


def options(cache_dir, threads=1):
    return litegpu.Options(cpu_options=litegpu.CpuOptions(num_threads=threads), serialization_dir=str(cache_dir))


def start(path, cache_dir, threads=1):
    model = litegpu.CompiledModel.from_file(path, options=options(cache_dir, threads))
    return model, model.run({"x": np.arange(4, dtype=np.float32)[None]})


def test_a_second_start_reads_no_ir_and_gives_the_same_results(tmp_path, reads):
    path = small_model(tmp_path / "m.tflite")
    cold, first = start(path, tmp_path / "c")
    assert len(reads) == 1 and cold._warm is None
    warm, second = start(path, tmp_path / "c")
    assert len(reads) == 1 and warm._warm is not None  # no IR read, no plan made
    assert np.array_equal(first["y"], second["y"]) and np.array_equal(second["y"], [[0, 2, 4, 6]])
    for ask in ("get_signature_list", "get_num_signatures"):
        assert getattr(warm, ask)() == getattr(cold, ask)()
    assert warm.get_input_tensor_details(0) == cold.get_input_tensor_details(0)
    assert warm.get_output_tensor_details(0) == cold.get_output_tensor_details(0)
    assert [b.read().shape for b in warm.create_output_buffers(0)] == [(1, 4)]
    warm.resize_input_tensor(0, [3, 4])  # the shape signature's -1, from the record
    assert warm.run([np.ones((3, 4), np.float32)])["y"].shape == (3, 4)
    assert warm.get_output_tensor_details(0)["y"]["shape"] == [3, 4]
    with pytest.raises(litegpu.TensorBufferError):
        warm.run([np.ones((1, 5), np.float32)])
    assert len(reads) == 1
    # what needs the IR reads it then: the same plan, the same report
    assert warm.plan.engine_summary() == cold.plan.engine_summary() and warm.plan == cold.plan
    assert warm.accelerator == "CPU" and warm.is_fully_accelerated() == cold.is_fully_accelerated()
    assert len(warm.model.subgraphs[0].operators) == 1 and len(reads) == 2


def test_a_changed_file_options_or_litegpu_code_miss(tmp_path, reads, monkeypatch):
    path = small_model(tmp_path / "m.tflite")
    start(path, tmp_path / "c")
    small_model(path, scale=3.0)  # the same size, other bytes
    model, out = start(path, tmp_path / "c")
    assert model._warm is None and np.array_equal(out["y"], [[0, 3, 6, 9]])
    assert start(path, tmp_path / "c")[0]._warm is not None
    assert start(path, tmp_path / "c", threads=2)[0]._warm is None  # other options: planned again
    monkeypatch.setattr(compiled_model, "litegpu_code_fingerprint", lambda: "edited sources")
    assert start(path, tmp_path / "c")[0]._warm is None


def test_a_file_changed_after_a_warm_start_is_an_error_when_its_ir_is_read(tmp_path):
    path = small_model(tmp_path / "m.tflite")
    start(path, tmp_path / "c")
    warm, _ = start(path, tmp_path / "c")
    small_model(path, scale=5.0)
    with pytest.raises(ModelFormatError, match="changed"):
        warm.model


def test_a_corrupt_file_still_fails_at_load(tmp_path):
    path = small_model(tmp_path / "m.tflite")
    start(path, tmp_path / "c")
    data = bytearray(open(path, "rb").read())
    with open(path, "wb") as f:
        f.write(bytes(data[: len(data) // 2]))
    with pytest.raises(litegpu.LiteGpuError):
        litegpu.CompiledModel.from_file(path, options=options(tmp_path / "c"))


def test_no_record_without_the_cache_or_off_the_plain_path(tmp_path, reads):
    path = small_model(tmp_path / "m.tflite")
    for _ in range(2):
        model = litegpu.CompiledModel.from_file(path, options=litegpu.Options(compile_cache=False))
        model.run([np.ones((1, 4), np.float32)])
        assert model._warm is None
    builtin = litegpu.Options(cpu_options=litegpu.CpuOptions(kernel_mode=litegpu.CpuKernelMode.BUILTIN),
                              serialization_dir=str(tmp_path / "b"))
    for _ in range(2):
        model = litegpu.CompiledModel.from_file(path, options=builtin)
        model.run([np.ones((1, 4), np.float32)])
        assert model._warm is None  # XLA's program is cached, the IR still read
    assert len(reads) == 4 and os.path.isfile(path)


def test_a_warm_start_resets_variables_and_reports_the_weights_as_a_first_start(tmp_path):
    path = small_model(tmp_path / "m.tflite")
    cold, _ = start(path, tmp_path / "c")
    warm, _ = start(path, tmp_path / "c")
    warm.reset_all_variables()
    assert np.array_equal(warm(np.ones((1, 4), np.float32)), [[2, 2, 2, 2]])
    assert warm.weight_placement() == cold.weight_placement()
    warm.close()
    with pytest.raises(litegpu.ClosedError):
        warm.run([np.ones((1, 4), np.float32)])


def test_every_signature_of_a_real_model_runs_warm_as_cold(tmp_path, shared_models):
    path = str(shared_models / "two_signatures_float32.tflite")
    cache = tmp_path / "c"
    cold = litegpu.CompiledModel.from_file(path, options=options(cache))
    warm = None
    rng = np.random.default_rng(0)
    for index in range(cold.get_num_signatures()):
        details = cold.get_input_tensor_details(index)
        inputs = {n: rng.uniform(-1, 1, d["shape"]).astype(d["dtype"]) for n, d in details.items()}
        expected = cold.run(inputs, index)
        warm = warm or litegpu.CompiledModel.from_file(path, options=options(cache))
        assert warm._warm is not None and warm.get_input_tensor_details(index) == details
        got = warm.run(inputs, cold.get_signature_by_index(index)["key"])
        assert got.keys() == expected.keys() and all(np.array_equal(got[k], expected[k]) for k in got)
    assert warm.get_signature_list() == cold.get_signature_list() and "_ir" not in warm.__dict__


def test_a_warm_start_imports_neither_the_planner_the_ir_classes_nor_the_file_decoder(tmp_path):
    import json
    import subprocess
    import sys

    path = small_model(tmp_path / "m.tflite")
    start(path, tmp_path / "c")
    heavy = ("litegpu.compile.plan", "litegpu.format", "litegpu.ir.load", "litegpu.ir.model", "litegpu.backends.graph",
             "litegpu.ops._catalog", "litegpu.ops.custom.python_ops")
    probe = (f"import json, sys, numpy as np, litegpu\n"
             f"m = litegpu.CompiledModel.from_file({path!r}, options=litegpu.Options(cpu_options=litegpu.CpuOptions("
             f"num_threads=1), serialization_dir={str(tmp_path / 'c')!r}))\n"
             f"y = m(np.ones((1, 4), np.float32))\n"
             f"print(json.dumps([m._warm is not None, y.tolist(), [n for n in {heavy!r} if n in sys.modules]]))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [True, [[2.0, 2.0, 2.0, 2.0]], []]


def test_a_file_replaced_between_the_lookup_and_the_read_leaves_no_record(tmp_path, monkeypatch):
    path = small_model(tmp_path / "m.tflite")  # the bytes looked up
    original = open(path, "rb").read()
    real = compiled_model.read

    def replaced_first(source):
        small_model(path, scale=4.0)  # another process rewrites the file just after the lookup
        return real(source)

    monkeypatch.setattr(compiled_model, "read", replaced_first)
    model, out = start(path, tmp_path / "c")
    assert np.array_equal(out["y"], [[0, 4, 8, 12]])
    monkeypatch.setattr(compiled_model, "read", real)
    with open(path, "wb") as f:
        f.write(original)
    # no record under the bytes looked up, which described the other file: planned again
    model, out = start(path, tmp_path / "c")
    assert model._warm is None and np.array_equal(out["y"], [[0, 2, 4, 6]])
    assert start(path, tmp_path / "c")[0]._warm is not None


def test_a_process_on_fewer_cores_plans_again(tmp_path, monkeypatch):
    from litegpu.backends import engine

    path = small_model(tmp_path / "m.tflite")
    start(path, tmp_path / "c")
    monkeypatch.setattr(engine, "physical_cores", lambda: 64)  # another machine sharing the cache, or pinned
    assert start(path, tmp_path / "c")[0]._warm is None


def test_a_record_of_another_engine_version_is_made_again(tmp_path, monkeypatch):
    from litegpu.backends.litert import LiteRtEngine

    path = small_model(tmp_path / "m.tflite")
    start(path, tmp_path / "c")
    monkeypatch.setattr(LiteRtEngine, "version", lambda self: "0.0 (upgraded)")
    with pytest.warns(RuntimeWarning, match="warm-start record"):  # discarded, and recorded again for it
        assert start(path, tmp_path / "c")[0]._warm is None
    assert start(path, tmp_path / "c")[0]._warm is not None


def two_output_model(path):
    """y2 = x + 1 produced after y1 = 3x, but listed first: OpenVINO's partition names its outputs in another
    order than the subgraph's."""
    b = ModelBuilder()
    x = b.input("x", (1, 4), shape_signature=(-1, 4))
    y1 = b.tensor("y1", (1, 4), shape_signature=(-1, 4))
    y2 = b.tensor("y2", (1, 4), shape_signature=(-1, 4))
    b.op("MUL", [x, b.constant("three", np.full((4,), 3.0, np.float32))], [y1])
    b.op("ADD", [x, b.constant("one", np.ones((4,), np.float32))], [y2])
    b.output(y2)
    b.output(y1)
    write_model(b.build(), path)
    return str(path)


def test_a_model_planned_on_openvino_starts_warm_from_its_compiled_blob(tmp_path, reads):
    pytest.importorskip("openvino")
    path = two_output_model(tmp_path / "m.tflite")
    on_openvino = litegpu.Options(cpu_options=litegpu.CpuOptions(engines=("openvino",), num_threads=1),
                                  serialization_dir=str(tmp_path / "c"))
    x = np.arange(4, dtype=np.float32)[None]
    cold = litegpu.CompiledModel.from_file(path, options=on_openvino)
    assert cold._warm is None and cold.plan.engine_summary().endswith("on OpenVINO in 1 partition")
    expected = cold.run({"x": x})
    reads.clear()
    warm = litegpu.CompiledModel.from_file(path, options=on_openvino)
    assert warm._warm is not None and warm._warm.engine.name == "openvino" and not reads
    got = warm.run({"x": x})
    assert list(got) == list(expected) and all(np.array_equal(got[k], expected[k]) for k in got)
    assert warm._warm.executable(0).loaded_from_cache  # the blob imported, not compiled again
    bigger = np.arange(12, dtype=np.float32).reshape(3, 4)  # a new shape: compiled from the file
    warm.resize_input_tensor(0, (3, 4))
    assert np.array_equal(warm.run({"x": bigger})["y1"], bigger * 3) and not reads
    assert warm.plan.engine_summary() == cold.plan.engine_summary()  # the IR read when asked


def test_a_warm_start_on_openvino_whose_blob_was_evicted_compiles_it_again(tmp_path):
    pytest.importorskip("openvino")
    from litegpu.backends.cache import CompileCache

    path = two_output_model(tmp_path / "m.tflite")
    on_openvino = litegpu.Options(cpu_options=litegpu.CpuOptions(engines=("openvino",), num_threads=1),
                                  serialization_dir=str(tmp_path / "c"))
    litegpu.CompiledModel.from_file(path, options=on_openvino).run({"x": np.ones((1, 4), np.float32)})
    cache = CompileCache(str(tmp_path / "c"))
    for entry in cache.entries():
        if entry.engine == "openvino" and entry.what == "compiled program":
            cache.discard(entry.key, "evicted by the test")
    warm = litegpu.CompiledModel.from_file(path, options=on_openvino)
    assert warm._warm is not None and not warm._warm.executable(0).loaded_from_cache
    out = warm.run({"x": np.ones((1, 4), np.float32)})
    assert np.array_equal(out["y2"], [[2, 2, 2, 2]]) and np.array_equal(out["y1"], [[3, 3, 3, 3]])


def test_the_same_options_object_given_again_finds_the_record(tmp_path):
    # a cold start fills in the options' defaults that it reads (the GPU options): the record's key ignores them
    path = small_model(tmp_path / "m.tflite")
    same = options(tmp_path / "c")
    cold = litegpu.CompiledModel.from_file(path, options=same)
    cold.run({"x": np.ones((1, 4), np.float32)})
    assert cold._warm is None and same._gpu_options is not None
    assert litegpu.CompiledModel.from_file(path, options=same)._warm is not None
