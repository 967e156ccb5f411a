"""CompiledModel: queries agree with the official package, runs agree with the official outputs,
and what litegpu adds (async runs, events, device-resident outputs, quick API, precision) works."""

import threading
import time
import warnings

import numpy as np
import pytest
from conftest import add_model, conv_model, official_compiled_model, two_signature_model

import litegpu as lg
from litegpu import HardwareAccelerator as HA

# Tests of the XLA engine's own behaviour (device arrays, per-shape programs, precision, shared weights)
# ask for it: the default CPU path gives float models to OpenVINO.
XLA_CPU = lg.Options(HA.CPU, cpu_options=lg.CpuOptions(kernel_mode=lg.CpuKernelMode.BUILTIN))


def xla_options(**gpu):
    return lg.Options(HA.CPU, cpu_options=lg.CpuOptions(kernel_mode=lg.CpuKernelMode.BUILTIN),
                      gpu_options=lg.GpuOptions(**gpu))

PLACEHOLDER = "<placeholder signature>"
QUERY_MODELS = {"no_signature": add_model, "two_signatures": two_signature_model, "conv": conv_model}


@pytest.mark.parametrize("make", QUERY_MODELS.values(), ids=QUERY_MODELS.keys())
def test_queries_match_the_official_package(make):
    data = make()
    ours, theirs = lg.CompiledModel.from_buffer(data), official_compiled_model(data)
    assert ours.get_signature_list() == theirs.get_signature_list()
    assert ours.get_num_signatures() == theirs.get_num_signatures()
    for i in range(theirs.get_num_signatures()):
        sig = theirs.get_signature_by_index(i)
        assert ours.get_signature_by_index(i) == sig
        assert ours.get_signature_index(sig["key"]) == theirs.get_signature_index(sig["key"]) == i
        assert ours.get_input_tensor_details(sig["key"]) == theirs.get_input_tensor_details(sig["key"])
        assert ours.get_output_tensor_details(sig["key"]) == theirs.get_output_tensor_details(sig["key"])
        for j in range(len(sig["inputs"])):
            assert ours.get_input_buffer_requirements(j, i) == theirs.get_input_buffer_requirements(j, i)
    assert ours.get_signature_index("no such signature") == theirs.get_signature_index("no such signature") == -1
    assert ours.is_fully_accelerated() is True


def _random_inputs(model, signature_index, seed=0):
    rng = np.random.default_rng(seed)
    key = model.get_signature_by_index(signature_index)["key"]
    return [rng.normal(size=d["shape"]).astype(d["dtype"]) for d in model.get_input_tensor_details(key).values()]


@pytest.mark.parametrize("make", QUERY_MODELS.values(), ids=QUERY_MODELS.keys())
def test_run_by_index_matches_the_official_package(make):
    data = make()
    ours, theirs = lg.CompiledModel.from_buffer(data), official_compiled_model(data)
    for s in range(theirs.get_num_signatures()):
        xs = _random_inputs(ours, s, seed=s)
        expected_out = theirs.create_output_buffers(s)
        official_in = theirs.create_input_buffers(s)
        for buf, x in zip(official_in, xs):
            buf.write(x)
        theirs.run_by_index(s, official_in, expected_out)
        inputs, outputs = ours.create_input_buffers(s), ours.create_output_buffers(s)
        for buf, x in zip(inputs, xs):
            buf.write(x)
        ours.run_by_index(s, inputs, outputs)
        for got, want in zip(outputs, expected_out):
            n = int(np.prod(got.shape))
            np.testing.assert_allclose(got.read(), want.read(n, got.dtype).reshape(got.shape), rtol=1e-5, atol=1e-5)


def test_run_by_name_uses_signature_names(two_sig_bytes):
    model = lg.CompiledModel.from_buffer(two_sig_bytes)
    a, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.ones((2, 3), np.float32)
    ins = {"lhs": lg.TensorBuffer.create_from_host_memory(a), "rhs": lg.TensorBuffer.create_from_host_memory(b)}
    outs = {"total": model.create_output_buffer_by_name("sum", "total"),
            "diff": model.create_output_buffer_by_name("sum", "diff")}
    model.run_by_name("sum", ins, outs)
    np.testing.assert_array_equal(outs["total"].read(), a + b)
    np.testing.assert_array_equal(outs["diff"].read(), a - b)
    u = model.create_input_buffer_by_name("scale", "u")
    u.write(np.array([1, 2, 3, 4], np.float32))
    p = model.create_output_buffer_by_name("scale", "p")
    model.run_by_name("scale", {"u": u}, {"p": p})
    np.testing.assert_array_equal(p.read(), [3, 6, 9, 12])


def test_host_memory_output_buffer_receives_results_in_place(add_bytes):
    model = lg.CompiledModel.from_buffer(add_bytes)
    out = np.zeros((1, 4), np.float32)
    ins = [lg.TensorBuffer.create_from_host_memory(np.full((1, 4), v, np.float32)) for v in (1, 2)]
    model.run_by_index(0, ins, [lg.TensorBuffer.create_from_host_memory(out)])
    np.testing.assert_array_equal(out, 3)


def test_run_async_returns_an_event_and_outputs_chain_on_device(add_bytes):
    model = lg.CompiledModel.from_buffer(add_bytes, options=XLA_CPU)
    ins, outs = model.create_input_buffers(0), model.create_output_buffers(0)
    ins[0].write(np.ones((1, 4), np.float32))
    ins[1].write(np.full((1, 4), 2, np.float32))
    event = model.run_async(0, ins, outs)
    assert isinstance(event, lg.Event)
    assert event.wait(timeout=30) is True and event.is_ready()
    assert outs[0].is_on_device  # the run's output stays a device array
    acc = outs[0]
    for _ in range(3):  # a KV-cache-like loop: the output feeds the next run without a host copy
        nxt = model.create_output_buffers(0)[0]
        model.run_async(0, [acc, ins[1]], [nxt])
        assert nxt._data() is not None and nxt.is_on_device
        acc = nxt
    np.testing.assert_array_equal(acc.read(), np.full((1, 4), 9, np.float32))


def test_a_run_waits_on_a_host_event_attached_to_its_input(add_bytes):
    model = lg.CompiledModel.from_buffer(add_bytes)
    ins, outs = model.create_input_buffers(0), model.create_output_buffers(0)

    def produce():
        time.sleep(0.2)
        ins[0].write(np.full((1, 4), 5, np.float32))

    ins[0].event = lg.Event.from_callable(produce)
    model.run_by_index(0, ins, outs)
    np.testing.assert_array_equal(outs[0].read(), 5)


def test_event_wait_with_timeout_reports_unfinished_work():
    release = threading.Event()
    event = lg.Event.from_callable(release.wait)
    assert not event.is_ready()
    assert event.wait(timeout=0.05) is False
    release.set()
    assert event.wait(timeout=5) is True and event.is_ready()


def test_quick_api_takes_and_returns_numpy(two_sig_bytes, add_bytes):
    model = lg.CompiledModel.from_buffer(two_sig_bytes)
    a, b = np.ones((2, 3), np.float32), np.full((2, 3), 4, np.float32)
    total, diff = model(a, b)
    assert isinstance(total, np.ndarray) and total.shape == (2, 3)
    np.testing.assert_array_equal(total, 5)
    np.testing.assert_array_equal(diff, -3)
    result = model.run({"u": np.ones(4, np.float32)}, signature_key="scale")
    assert list(result) == ["p"]
    np.testing.assert_array_equal(result["p"], 3)
    np.testing.assert_array_equal(model(u=[1, 2, 3, 4], signature_key="scale"), [3, 6, 9, 12])
    dynamic = lg.CompiledModel.from_buffer(add_bytes)  # x's batch is -1: any batch runs, compiled per shape
    np.testing.assert_array_equal(dynamic(np.ones((5, 4), np.float32), np.ones((1, 4), np.float32)),
                                  np.full((5, 4), 2))


def test_resize_follows_official_strict_and_non_strict_rules(add_bytes):
    ours, theirs = lg.CompiledModel.from_buffer(add_bytes), official_compiled_model(add_bytes)
    cases = [(0, [3, 4], True), (1, [1, 4], True), (0, [2, 4], False)]
    for index, dims, strict in cases:
        ours.resize_input_tensor(index, dims, strict=strict)
        theirs.resize_input_tensor(index, dims, strict=strict)
        assert ours.get_input_tensor_details(PLACEHOLDER) == theirs.get_input_tensor_details(PLACEHOLDER)
        assert ours.get_output_tensor_details(PLACEHOLDER) == theirs.get_output_tensor_details(PLACEHOLDER)
    with pytest.raises(lg.InvalidArgumentError, match="shape signature"):
        ours.resize_input_tensor(1, [3, 4])          # y is static: strict refuses
    with pytest.raises(Exception):
        theirs.resize_input_tensor(1, [3, 4])
    ours.resize_input_tensor(1, [2, 4], strict=False)  # non-strict forces it
    ins = ours.create_input_buffers(0)
    assert [b.shape for b in ins] == [(2, 4), (2, 4)]
    ins[0].write(np.ones((2, 4), np.float32))
    ins[1].write(np.ones((2, 4), np.float32))
    outs = ours.create_output_buffers(0)
    assert outs[0].shape == (2, 4)
    ours.run_by_index(0, ins, outs)
    np.testing.assert_array_equal(outs[0].read(), 2)


def test_each_new_shape_compiles_once_and_is_cached(add_bytes):
    model = lg.CompiledModel.from_buffer(add_bytes, options=XLA_CPU)
    y = np.ones((1, 4), np.float32)
    for batch in (1, 3, 1, 3, 3):
        model(np.ones((batch, 4), np.float32), y)
    backend = model._backends[0]
    assert {k[0][0] for k in backend.compiled_shapes} == {(1, 4), (3, 4)}
    assert len(backend._by_shape) == 2  # one compiled executable per input shape


def test_gpu_or_cpu_falls_back_with_one_warning_and_gpu_alone_fails(add_bytes):
    if "gpu" in lg.Environment.platforms():
        pytest.skip("this machine has a GPU")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = lg.CompiledModel.from_buffer(add_bytes, hardware_accel=HA.GPU | HA.CPU)
    assert len(caught) == 1 and "no GPU" in str(caught[0].message)
    assert model.accelerator == "CPU" and not model.is_fully_accelerated()
    np.testing.assert_array_equal(model(np.ones((1, 4), np.float32), np.ones((1, 4), np.float32)), 2)
    with pytest.raises(lg.AcceleratorUnavailableError, match="GPU"):
        lg.CompiledModel.from_buffer(add_bytes, hardware_accel=HA.GPU)


def test_npu_is_a_clear_error_and_npu_or_cpu_runs_on_cpu(add_bytes):
    with pytest.raises(lg.AcceleratorUnavailableError, match="NPU"):
        lg.CompiledModel.from_buffer(add_bytes, hardware_accel=HA.NPU)
    with pytest.warns(UserWarning, match="NPU"):
        model = lg.CompiledModel.from_buffer(add_bytes, hardware_accel=HA.NPU | HA.CPU)
    assert model.accelerator == "CPU"


@pytest.mark.parametrize("precision,low,high", [("fp32", 0, 1e-5), ("fp16", 1e-4, 5e-2),
                                                 ("fp16_fp32_accum", 1e-5, 5e-2)])
def test_precision_policy(conv_bytes, precision, low, high):
    x = np.random.default_rng(1).normal(size=(1, 8, 8, 16)).astype(np.float32)
    exact = lg.CompiledModel.from_buffer(conv_bytes, options=XLA_CPU)(x)
    got = lg.CompiledModel.from_buffer(conv_bytes, options=xla_options(precision=precision))(x)
    assert got.dtype == np.float32
    err = np.abs(got - exact).max()
    assert low <= err <= high, f"{precision}: max error {err}"


def test_fp16_holds_weights_on_the_device_in_half_precision(conv_bytes):
    model = lg.CompiledModel.from_buffer(conv_bytes, options=xla_options(precision="fp16"))
    model(np.zeros((1, 8, 8, 16), np.float32))
    assert {str(p.dtype) for p in model._state.params.values()} == {"float16"}


def test_signatures_share_one_copy_of_the_weights(two_sig_bytes):
    model = lg.CompiledModel.from_buffer(two_sig_bytes, options=XLA_CPU)
    model(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32))
    model(np.ones(4, np.float32), signature_key="scale")
    assert model._backends[0].state is model._backends[1].state


def test_runs_from_several_threads_agree(conv_bytes):
    model = lg.CompiledModel.from_buffer(conv_bytes)
    xs = [np.random.default_rng(i).normal(size=(1, 8, 8, 16)).astype(np.float32) for i in range(4)]
    expected = [model(x) for x in xs]
    results = [None] * 16

    def work(k):
        results[k] = model(xs[k % 4])

    threads = [threading.Thread(target=work, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k, r in enumerate(results):
        np.testing.assert_array_equal(r, expected[k % 4])


def test_context_manager_closes(add_bytes):
    with lg.CompiledModel.from_buffer(add_bytes) as model:
        assert model.get_num_signatures() == 1
    with pytest.raises(lg.ClosedError):
        model.get_num_signatures()


def test_model_exposes_ir_and_static_plan(two_sig_bytes):
    model = lg.Model.from_buffer(two_sig_bytes)
    assert [s.key for s in model.signatures] == ["sum", "scale"]
    assert model.ir.subgraphs[1].name == "scale"
    plan = model.plan(HA.GPU | HA.CPU)
    assert plan.accelerator == "GPU" and plan.fully_accelerated
    assert plan.summary() == "3 operations will run on the GPU, and the remaining 0 on the CPU"


OFFICIAL_EXAMPLE = '''
import numpy as np
from ai_edge_litert.compiled_model import CompiledModel
from ai_edge_litert.hardware_accelerator import HardwareAccelerator
from ai_edge_litert.tensor_buffer import TensorBuffer

model = CompiledModel.from_file(model_path, hardware_accel=HardwareAccelerator.CPU)
signatures = model.get_signature_list()
signature_key = list(signatures)[0]
signature_index = model.get_signature_index(signature_key)
input_buffers = model.create_input_buffers(signature_index)
output_buffers = model.create_output_buffers(signature_index)
for buffer, (name, details) in zip(input_buffers, model.get_input_tensor_details(signature_key).items()):
    buffer.write(np.full(details["shape"], 1.5, dtype=details["dtype"]))
model.run_by_index(signature_index, input_buffers, output_buffers)
results = {}
for buffer, (name, details) in zip(output_buffers, model.get_output_tensor_details(signature_key).items()):
    num_elements = int(np.prod(details["shape"]))
    results[name] = buffer.read(num_elements, np.float32).reshape(details["shape"])
input_map = {name: model.create_input_buffer_by_name(signature_key, name) for name in signatures[signature_key]["inputs"]}
for name, buffer in input_map.items():
    buffer.write(np.full(model.get_input_tensor_details(signature_key)[name]["shape"], 2.0, dtype=np.float32))
output_map = {name: model.create_output_buffer_by_name(signature_key, name) for name in signatures[signature_key]["outputs"]}
model.run_by_name(signature_key, input_map, output_map)
for name, buffer in output_map.items():
    results[name + "_by_name"] = buffer.read(int(np.prod(buffer.get_tensor_details()["shape"])), np.float32)
host = np.zeros(4, dtype=np.float32)
results["host_details"] = TensorBuffer.create_from_host_memory(host).get_tensor_details()
'''


def test_official_example_runs_unchanged_after_swapping_the_import(tmp_path, two_sig_bytes):
    pytest.importorskip("ai_edge_litert.compiled_model")
    path = tmp_path / "model.tflite"
    path.write_bytes(two_sig_bytes)
    official, ours = {"model_path": str(path)}, {"model_path": str(path)}
    exec(OFFICIAL_EXAMPLE, official)
    ported = (OFFICIAL_EXAMPLE.replace("from ai_edge_litert.compiled_model import", "from litegpu import")
              .replace("from ai_edge_litert.hardware_accelerator import", "from litegpu import")
              .replace("from ai_edge_litert.tensor_buffer import", "from litegpu import"))
    assert "ai_edge_litert" not in ported
    exec(ported, ours)
    assert official["results"].keys() == ours["results"].keys()
    for name, value in official["results"].items():
        if isinstance(value, np.ndarray):
            np.testing.assert_allclose(ours["results"][name], value, rtol=1e-6, err_msg=name)
        else:
            assert ours["results"][name] == value


def test_real_two_signature_model_matches_reference(two_signatures_path):
    reference = np.load(str(two_signatures_path).replace(".tflite", ".reference.npz"))
    model = lg.CompiledModel.from_file(two_signatures_path)
    assert model.get_signature_by_index(0)["key"] == "decode"
    for key in ("decode", "encode"):
        inputs = {n: reference[f"{key}/in/{n}"] for n in model.get_signature_list()[key]["inputs"]}
        got = model.run(inputs, signature_key=key)
        for name, value in got.items():
            np.testing.assert_allclose(value, reference[f"{key}/out_ref/{name}"], rtol=1e-5, atol=1e-5)


def test_signature_order_differs_from_subgraph_order():
    """A SignatureDef may list inputs and outputs in another order than the subgraph (converters do)."""
    from litegpu.ir.builder import ModelBuilder
    from litegpu.ir.save import to_bytes

    b = ModelBuilder()
    a = b.input("a", (2,), shape_signature=(-1,))
    c = b.input("c", (2,), shape_signature=(-1,))
    d = b.tensor("d", (2,))
    s = b.tensor("s", (2,))
    b.op("SUB", [a, c], [d])
    b.op("ADD", [a, c], [s])
    b.output(d, s)
    b.signature("f", inputs={"aa": c, "zz": a}, outputs={"bb": s, "yy": d})
    data = to_bytes(b.build())
    ours, theirs = lg.CompiledModel.from_buffer(data), official_compiled_model(data)
    assert ours.get_signature_list() == theirs.get_signature_list() == {"f": {"inputs": ["zz", "aa"],
                                                                               "outputs": ["yy", "bb"]}}
    assert ours.get_output_tensor_details("f") == theirs.get_output_tensor_details("f")
    c_value, a_value = np.array([1, 2], np.float32), np.array([10, 20], np.float32)
    got = ours.run({"aa": c_value, "zz": a_value}, "f")
    np.testing.assert_array_equal(got["bb"], [11, 22])
    np.testing.assert_array_equal(got["yy"], [9, 18])
    ins, outs = theirs.create_input_buffers(0), theirs.create_output_buffers(0)
    ins[0].write(a_value)
    ins[1].write(c_value)
    theirs.run_by_index(0, ins, outs)
    np.testing.assert_array_equal(outs[0].read(2, np.float32), got["yy"])
    ours.resize_input_tensor(0, [3])
    ours.resize_input_tensor(1, [3])
    assert [d["shape"] for d in ours.get_output_tensor_details("f").values()] == [[3], [3]]


# ---- inputs from other libraries (torch, cupy, jax) through DLPack --------------------------------

class ForeignArray:
    """Another library's array as litegpu sees a torch tensor: DLPack, and a dtype numpy does not know."""

    def __init__(self, array):
        self._array, self.shape, self.dtype = array, array.shape, f"foreign.{array.dtype.name}"

    def __dlpack__(self, *args, **kwargs):
        return self._array.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def test_quick_api_and_input_maps_take_dlpack_arrays(two_sig_bytes):
    model = lg.CompiledModel.from_buffer(two_sig_bytes)
    a, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.full((2, 3), 4, np.float32)
    total, diff = model(ForeignArray(a), ForeignArray(b))
    np.testing.assert_array_equal(total, a + b)
    np.testing.assert_array_equal(diff, a - b)
    np.testing.assert_array_equal(model.run({"rhs": ForeignArray(b), "lhs": a}, signature_key="sum")["total"], a + b)
    outs = {"total": model.create_output_buffer_by_name("sum", "total"),
            "diff": model.create_output_buffer_by_name("sum", "diff")}
    model.run_by_name("sum", {"lhs": ForeignArray(a), "rhs": ForeignArray(b)}, outs)
    np.testing.assert_array_equal(outs["diff"].read(), a - b)
    model.run_by_index(0, [ForeignArray(b), ForeignArray(a)], [outs["total"], outs["diff"]])
    np.testing.assert_array_equal(outs["diff"].read(), b - a)


def test_dlpack_host_inputs_are_read_in_place(two_sig_bytes):
    model = lg.CompiledModel.from_buffer(two_sig_bytes)
    s = model._signature("sum")
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert np.shares_memory(model._quick_input(s, 0, ForeignArray(a)), a)
    assert np.shares_memory(model._input_value(s, 0, ForeignArray(a))[0], a)


def test_jax_arrays_stay_device_arrays_into_a_run(two_sig_bytes):
    jnp = pytest.importorskip("jax.numpy")
    model = lg.CompiledModel.from_buffer(two_sig_bytes)
    u = jnp.arange(4, dtype=jnp.float32)
    assert model._quick_input(model._signature("scale"), 0, u) is u
    np.testing.assert_array_equal(model(u=u, signature_key="scale"), [0, 3, 6, 9])


@pytest.mark.parametrize("lhs, match", [
    (np.ones((2, 3), np.float64), "input 'lhs' of signature 'sum' is float32.*got float64"),
    (np.ones((3, 2), np.float32), r"input 'lhs' of signature 'sum' has shape \[2, 3\].*got \[3, 2\]"),
])
def test_dlpack_inputs_of_the_wrong_dtype_or_shape_are_refused(two_sig_bytes, lhs, match):
    model = lg.CompiledModel.from_buffer(two_sig_bytes)
    rhs = np.ones((2, 3), np.float32)
    with pytest.raises(lg.TensorBufferError, match=match):
        model(ForeignArray(lhs), rhs)
    outs = model.create_output_buffers("sum")
    with pytest.raises(lg.TensorBufferError, match=match):
        model.run_by_index(0, [ForeignArray(lhs), rhs], outs)


def test_quick_api_takes_torch_tensors(two_sig_bytes):
    torch = pytest.importorskip("torch")
    model = lg.CompiledModel.from_buffer(two_sig_bytes)
    np.testing.assert_array_equal(model(u=torch.arange(4, dtype=torch.float32), signature_key="scale"), [0, 3, 6, 9])


@pytest.mark.parametrize("mode", [None, lg.CpuKernelMode.BUILTIN], ids=["fast", "exact"])
def test_eight_threads_hundred_runs_each_every_output_correct(conv_bytes, mode):
    """One CompiledModel shared by 8 threads, 100 runs each (the quick API and buffers alternately), every
    output checked against a single-threaded run of the same input, on the OpenVINO and the XLA engine."""
    options = lg.Options(HA.CPU, cpu_options=lg.CpuOptions(num_threads=2, kernel_mode=mode))
    model = lg.CompiledModel.from_buffer(conv_bytes, options=options)
    xs = [np.random.default_rng(i).normal(size=(1, 8, 8, 16)).astype(np.float32) for i in range(8)]
    expected = [model(x) for x in xs]
    failures: list[str] = []

    def work(k):
        ins, outs = model.create_input_buffers(0), model.create_output_buffers(0)
        for n in range(100):
            x = xs[(k + n) % 8]
            if n % 2:
                got = model(x)
            else:
                ins[0].write(x)
                model.run_by_index(0, ins, outs)
                got = outs[0].read()
            if not np.array_equal(got, expected[(k + n) % 8]):
                failures.append(f"thread {k} run {n}")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[:5]


def test_builtin_kernels_sum_float_ops_in_the_official_order_and_the_fast_path_does_not():
    """CpuKernelMode.BUILTIN gives the builtin kernels' float bits (MEAN over 576 values: Eigen's packet order),
    cached apart from the fast path's programs; the fast path keeps XLA's own, faster order."""
    from oracle import const, one_op_model, run_official
    from litegpu.ir.save import to_bytes

    x = (np.random.default_rng(3).normal(size=(1, 32, 576)) ** 2 * 30).astype(np.float32)
    model, _ = one_op_model("MEAN", [x, const([-1])], [((1, 32, 1), "float32")], keep_dims=True)
    want = run_official(to_bytes(model), [x])[0]
    builtin = lg.CompiledModel.from_model(model, options=XLA_CPU)
    assert np.array_equal(list(builtin.run([x]).values())[0], want)
    assert builtin._state.official_float_order
    plain = lg.CompiledModel.from_model(model, HA.CPU)
    assert not plain._official_float_order
    np.testing.assert_allclose(list(plain.run([x]).values())[0], want, rtol=1e-6)
