"""The classic Interpreter: same methods, return formats and errors as ai_edge_litert's, same results."""

import warnings

import numpy as np
import pytest
from conftest import add_model, conv_model, two_signature_model

import litegpu as lg

official = pytest.importorskip("ai_edge_litert.interpreter")

RESOLVERS = ["AUTO", "BUILTIN_REF", "BUILTIN_WITHOUT_DEFAULT_DELEGATES"]
MODELS = {"add": add_model, "two_signatures": two_signature_model, "conv": conv_model}


def _pair(data, resolver="AUTO", **kwargs):
    ours = lg.Interpreter(model_content=data, experimental_op_resolver_type=lg.OpResolverType[resolver], **kwargs)
    theirs = official.Interpreter(model_content=data,
                                  experimental_op_resolver_type=official.OpResolverType[resolver], **kwargs)
    return ours, theirs


def _assert_details_equal(ours, theirs):
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert a.keys() == b.keys()
        for key in b:
            if key == "quantization_parameters":
                for k in b[key]:
                    np.testing.assert_array_equal(a[key][k], b[key][k])
            elif isinstance(b[key], np.ndarray):
                assert a[key].dtype == b[key].dtype
                np.testing.assert_array_equal(a[key], b[key])
            else:
                assert a[key] == b[key], key


@pytest.mark.parametrize("make", MODELS.values(), ids=MODELS.keys())
def test_details_and_signatures_match(make):
    ours, theirs = _pair(make())
    for it in (ours, theirs):
        it.allocate_tensors()
    _assert_details_equal(ours.get_input_details(), theirs.get_input_details())
    _assert_details_equal(ours.get_output_details(), theirs.get_output_details())
    assert ours.get_signature_list() == theirs.get_signature_list()
    assert ours._get_full_signature_list() == theirs._get_full_signature_list()
    assert ours.num_subgraphs() == theirs.num_subgraphs()
    ours_named = {d["name"]: d for d in ours.get_tensor_details()}
    for d in theirs.get_tensor_details():
        _assert_details_equal([ours_named[d["name"]]], [d])


@pytest.mark.parametrize("resolver", RESOLVERS)
@pytest.mark.parametrize("make", MODELS.values(), ids=MODELS.keys())
def test_invoke_matches(make, resolver):
    ours, theirs = _pair(make(), resolver)
    rng = np.random.default_rng(3)
    for it in (ours, theirs):
        it.allocate_tensors()
    for d in theirs.get_input_details():
        x = rng.normal(size=d["shape"]).astype(d["dtype"])
        ours.set_tensor(d["index"], x)
        theirs.set_tensor(d["index"], x)
    ours.invoke()
    theirs.invoke()
    for d in theirs.get_output_details():
        np.testing.assert_allclose(ours.get_tensor(d["index"]), theirs.get_tensor(d["index"]), rtol=1e-5, atol=1e-5)


def test_signature_runner_matches(two_sig_bytes):
    ours, theirs = _pair(two_sig_bytes)
    a, b = np.ones((2, 3), np.float32), np.arange(6, dtype=np.float32).reshape(2, 3)
    for key, kwargs in (("sum", {"lhs": a, "rhs": b}), ("scale", {"u": np.arange(4, dtype=np.float32)})):
        got, want = ours.get_signature_runner(key)(**kwargs), theirs.get_signature_runner(key)(**kwargs)
        assert got.keys() == want.keys()
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])
        _assert_details_equal(list(ours.get_signature_runner(key).get_input_details().values()),
                              list(theirs.get_signature_runner(key).get_input_details().values()))


def test_signature_runner_errors(two_sig_bytes, add_bytes):
    it = lg.Interpreter(model_content=two_sig_bytes)
    with pytest.raises(ValueError, match="2 Signatures"):
        it.get_signature_runner()
    with pytest.raises(lg.SignatureError, match="Invalid signature_key"):
        it.get_signature_runner("nope")
    runner = it.get_signature_runner("sum")
    with pytest.raises(lg.SignatureError, match="number of inputs"):
        runner(lhs=np.ones((2, 3), np.float32))
    with pytest.raises(lg.SignatureError, match="Invalid Input name"):
        runner(lhs=np.ones((2, 3), np.float32), other=np.ones((2, 3), np.float32))
    assert lg.Interpreter(model_content=add_bytes).get_signature_list() == {}


def test_resize_then_allocate_like_the_official(add_bytes):
    ours, theirs = _pair(add_bytes)
    for it in (ours, theirs):
        it.allocate_tensors()
        it.resize_tensor_input(0, [3, 4])
    for it in (ours, theirs):
        with pytest.raises(ValueError, match="unallocated"):
            it.set_tensor(0, np.ones((3, 4), np.float32))
        with pytest.raises(RuntimeError, match="not ready"):
            it.invoke()
        it.allocate_tensors()
    _assert_details_equal(ours.get_input_details(), theirs.get_input_details())
    _assert_details_equal(ours.get_output_details(), theirs.get_output_details())
    with pytest.raises(lg.InvalidArgumentError, match="unknown dimensions"):
        ours.resize_tensor_input(1, [3, 4], strict=True)


@pytest.mark.parametrize("value,message", [
    (np.ones((1, 4)), "Got value of type FLOAT64 but expected type FLOAT32 for input 0, name: x"),
    (np.ones((2, 4), np.float32), "Dimension mismatch. Got 2 but expected 1 for dimension 0 of input 0."),
    (np.ones((4,), np.float32), "Dimension mismatch. Got 1 but expected 2 for input 0."),
])
def test_set_tensor_errors_match_official_messages(add_bytes, value, message):
    ours, theirs = _pair(add_bytes)
    for it in (ours, theirs):
        it.allocate_tensors()
        with pytest.raises(ValueError) as info:
            it.set_tensor(0, value)
        assert message in str(info.value)


def test_tensor_gives_a_live_view(add_bytes):
    it = lg.Interpreter(model_content=add_bytes)
    it.allocate_tensors()
    x, y, out = it.tensor(0), it.tensor(1), it.tensor(2)
    for k in range(3):
        x().fill(k)
        y().fill(1)
        it.invoke()
        np.testing.assert_array_equal(out(), k + 1)


def test_preserve_all_tensors_exposes_intermediates(two_sig_bytes):
    data = two_sig_bytes
    ours = lg.Interpreter(model_content=data, experimental_preserve_all_tensors=True)
    theirs = official.Interpreter(model_content=data, experimental_preserve_all_tensors=True,
                                  experimental_op_resolver_type=official.OpResolverType.BUILTIN_REF)
    for it in (ours, theirs):
        it.allocate_tensors()
        it.set_tensor(0, np.full((2, 3), 2, np.float32))
        it.set_tensor(1, np.full((2, 3), 5, np.float32))
        it.invoke()
    for d in theirs.get_tensor_details():
        np.testing.assert_array_equal(ours.get_tensor(d["index"]), theirs.get_tensor(d["index"]))


def test_intermediates_without_preserve_raise_a_clear_error():
    from litegpu.ir.builder import ModelBuilder
    from litegpu.ir.save import to_bytes

    b = ModelBuilder()
    x = b.input("x", (2,))
    h = b.tensor("hidden", (2,))
    y = b.tensor("y", (2,))
    b.op("ADD", [x, x], [h])
    b.op("MUL", [h, h], [y])
    b.output(y)
    it = lg.Interpreter(model_content=to_bytes(b.build()))
    it.allocate_tensors()
    it.set_tensor(0, np.array([1, 2], np.float32))
    it.invoke()
    np.testing.assert_array_equal(it.get_tensor(2), [4, 16])
    with pytest.raises(lg.InvalidArgumentError, match="experimental_preserve_all_tensors"):
        it.get_tensor(1)
    with pytest.raises(ValueError, match="Invalid tensor index 9"):
        it.get_tensor(9)


def test_constructor_arguments_like_the_official(add_bytes, tmp_path):
    path = tmp_path / "m.tflite"
    path.write_bytes(add_bytes)
    assert lg.Interpreter(model_path=str(path), num_threads=2).num_subgraphs() == 1
    with pytest.raises(ValueError, match="must be specified"):
        lg.Interpreter()
    with pytest.raises(ValueError, match="both"):
        lg.Interpreter(model_path=str(path), model_content=add_bytes)
    with pytest.raises(ValueError, match="num_threads should >= 1"):
        lg.Interpreter(model_content=add_bytes, num_threads=0)
    with pytest.warns(UserWarning, match="experimental_delegates"):
        lg.Interpreter(model_content=add_bytes, experimental_delegates=[object()])
    # the official enum is accepted as is
    it = lg.Interpreter(model_content=add_bytes, experimental_op_resolver_type=official.OpResolverType.BUILTIN_REF)
    assert it._use_reference


OFFICIAL_INTERPRETER_EXAMPLE = '''
import numpy as np
from ai_edge_litert.interpreter import Interpreter
interpreter = Interpreter(model_path=model_path)
interpreter.allocate_tensors()
input_details = interpreter.get_input_details()
output_details = interpreter.get_output_details()
for d in input_details:
    interpreter.set_tensor(d["index"], np.ones(d["shape"], dtype=d["dtype"]))
interpreter.invoke()
result = [interpreter.get_tensor(d["index"]) for d in output_details]
'''


def test_official_interpreter_example_runs_after_swapping_the_import(tmp_path, conv_bytes):
    path = tmp_path / "conv.tflite"
    path.write_bytes(conv_bytes)
    theirs, ours = {"model_path": str(path)}, {"model_path": str(path)}
    exec(OFFICIAL_INTERPRETER_EXAMPLE, theirs)
    exec(OFFICIAL_INTERPRETER_EXAMPLE.replace("from ai_edge_litert.interpreter import", "from litegpu import"), ours)
    np.testing.assert_allclose(ours["result"][0], theirs["result"][0], rtol=1e-5, atol=1e-5)


def test_real_two_signature_model_through_signature_runners(two_signatures_path):
    reference = np.load(str(two_signatures_path).replace(".tflite", ".reference.npz"))
    it = lg.Interpreter(model_path=str(two_signatures_path))
    for key in ("decode", "encode"):
        runner = it.get_signature_runner(key)
        inputs = {n: reference[f"{key}/in/{n}"] for n in it.get_signature_list()[key]["inputs"]}
        for name, value in runner(**inputs).items():
            np.testing.assert_allclose(value, reference[f"{key}/out_ref/{name}"], rtol=1e-5, atol=1e-5)
