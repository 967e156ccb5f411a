"""Every bad input of the runtime raises the right LiteGpuError subclass with a useful message."""

import numpy as np
import pytest

import litegpu as lg
from litegpu import HardwareAccelerator as HA

PLACEHOLDER = "<placeholder signature>"


@pytest.fixture
def model(two_sig_bytes):
    return lg.CompiledModel.from_buffer(two_sig_bytes)


@pytest.mark.parametrize("call,error,match", [
    (lambda m: m.get_signature_by_index(2), lg.SignatureError, "out of range"),   # the official aborts here
    (lambda m: m.get_signature_by_index(-1), lg.SignatureError, "out of range"),
    (lambda m: m.get_input_tensor_details("nope"), lg.SignatureError, "no signature 'nope'"),
    (lambda m: m.get_output_tensor_details("nope"), lg.SignatureError, "no signature"),
    (lambda m: m.create_input_buffers(5), lg.SignatureError, "out of range"),
    (lambda m: m.create_output_buffers("nope"), lg.SignatureError, "no signature"),
    (lambda m: m.create_input_buffer_by_name("sum", "zzz"), lg.SignatureError, "no input 'zzz'"),
    (lambda m: m.create_output_buffer_by_name("sum", "zzz"), lg.SignatureError, "no output 'zzz'"),
    (lambda m: m.get_input_buffer_requirements(7, 0), lg.SignatureError, "input index 7"),
    (lambda m: m.resize_input_tensor(0, [2, 3], signature_index=9), lg.SignatureError, "out of range"),
    (lambda m: m.resize_input_tensor(0, [2, -3], strict=False), lg.InvalidArgumentError, "negative"),
    (lambda m: m.resize_input_tensor(0, [4, 3]), lg.InvalidArgumentError, "shape signature"),
    (lambda m: m.resize_input_tensor_by_name("sum", "nope", [2, 3]), lg.SignatureError, "no input"),
    (lambda m: m.run({"lhs": np.ones((2, 3), np.float32)}, "sum"), lg.SignatureError, "rhs"),
    (lambda m: m(np.ones((2, 3), np.float64), np.ones((2, 3), np.float64)), lg.TensorBufferError, "float64"),
    (lambda m: m(np.ones((3, 3), np.float32), np.ones((2, 3), np.float32)), lg.TensorBufferError, "shape"),
    (lambda m: m(np.ones((2, 3), np.float32)), lg.SignatureError, "takes 2 input"),
])
def test_bad_calls(model, call, error, match):
    with pytest.raises(error, match=match):
        call(model)


def test_run_by_name_with_unknown_or_missing_names(model):
    ins = {n: model.create_input_buffer_by_name("sum", n) for n in ("lhs", "rhs")}
    outs = {n: model.create_output_buffer_by_name("sum", n) for n in ("total", "diff")}
    with pytest.raises(lg.SignatureError, match="unknown: \\['typo'\\]"):
        model.run_by_name("sum", {"lhs": ins["lhs"], "typo": ins["rhs"]}, outs)
    with pytest.raises(lg.SignatureError, match="missing: \\['rhs'\\]"):
        model.run_by_name("sum", {"lhs": ins["lhs"]}, outs)
    with pytest.raises(lg.SignatureError, match="missing: \\['diff'\\]"):
        model.run_by_name("sum", ins, {"total": outs["total"]})
    with pytest.raises(lg.SignatureError, match="no signature"):
        model.run_by_name("nope", ins, outs)


def test_run_by_index_with_wrong_buffers(model):
    ins, outs = model.create_input_buffers(0), model.create_output_buffers(0)
    with pytest.raises(lg.SignatureError, match="takes 2 input"):
        model.run_by_index(0, ins[:1], outs)
    with pytest.raises(lg.SignatureError, match="2 output"):
        model.run_by_index(0, ins, outs[:1])
    with pytest.raises(lg.TensorBufferError, match="'lhs'.*int32"):
        model.run_by_index(0, [lg.TensorBuffer.create((2, 3), np.int32), ins[1]], outs)
    with pytest.raises(lg.TensorBufferError, match="'lhs'.*resize_input_tensor"):
        model.run_by_index(0, [lg.TensorBuffer.create((3, 2)), ins[1]], outs)
    with pytest.raises(lg.TensorBufferError, match="'total'.*int8"):
        model.run_by_index(0, ins, [lg.TensorBuffer.create((2, 3), np.int8), outs[1]])
    with pytest.raises(lg.TensorBufferError, match="host memory"):
        model.run_by_index(0, ins, [lg.TensorBuffer.create_from_host_memory(np.zeros((3, 2), np.float32)), outs[1]])
    with pytest.raises(lg.SignatureError, match="out of range"):
        model.run_by_index(3, ins, outs)


@pytest.mark.parametrize("method,args", [
    ("get_signature_list", ()), ("get_num_signatures", ()), ("get_signature_index", ("sum",)),
    ("create_input_buffers", (0,)), ("run_by_index", (0, [], [])), ("is_fully_accelerated", ()),
    ("reset_all_variables", ()), ("get_input_tensor_details", ("sum",)),
])
def test_use_after_close(model, method, args):
    model.close()
    with pytest.raises(lg.ClosedError, match="closed"):
        getattr(model, method)(*args)


def test_options_and_hardware_accel_together_is_an_error_like_the_official(add_bytes):
    with pytest.raises(ValueError, match="either options or hardware_accel"):
        lg.CompiledModel.from_buffer(add_bytes, hardware_accel=HA.CPU, options=lg.Options())


def test_options_given_in_hardware_accels_place_are_taken_as_the_options(add_bytes):
    model = lg.CompiledModel.from_buffer(add_bytes, lg.Options(HA.CPU, cpu_options=lg.CpuOptions(num_threads=2)))
    assert model.options.cpu_options.num_threads == 2


@pytest.mark.parametrize("make,error", [
    (lambda: lg.GpuOptions(precision="fp8"), lg.InvalidArgumentError),
    (lambda: lg.Options(hardware_accelerators=0), lg.InvalidArgumentError),
    (lambda: lg.Options(hardware_accelerators="gpu please"), lg.InvalidArgumentError),
    (lambda: lg.Options(hardware_accelerators=lg.CpuOptions()), lg.InvalidArgumentError),
    (lambda: lg.Options(model_token="../../etc/passwd"), lg.CacheError),
    (lambda: lg.CpuOptions(num_threads=-1), lg.InvalidArgumentError),
])
def test_bad_options(make, error):
    with pytest.raises(error):
        make()


@pytest.mark.parametrize("data", [b"", b"TFL3", b"\x00" * 64, b"garbage" * 100])
def test_bad_model_bytes_raise_model_format_error(data):
    with pytest.raises(lg.ModelFormatError):
        lg.CompiledModel.from_buffer(data)


def test_truncated_model_file_raises_model_format_error(tmp_path, conv_bytes):
    path = tmp_path / "truncated.tflite"
    path.write_bytes(conv_bytes[: len(conv_bytes) // 2])
    with pytest.raises(lg.ModelFormatError):
        lg.CompiledModel.from_file(path)
    with pytest.raises(lg.ModelFormatError):
        lg.Interpreter(model_path=str(path))


def test_unimplemented_op_is_reported_when_the_model_loads():
    from litegpu.ir.builder import ModelBuilder
    from litegpu.ir.save import to_bytes

    b = ModelBuilder()
    x = b.input("x", (2,))
    y = b.tensor("y", (2,))
    b.op("NoSuchCustomOp", [x], [y], custom_options=b"")
    b.output(y)
    data = to_bytes(b.build())
    with pytest.raises(lg.UnsupportedOpError, match="NoSuchCustomOp"):
        lg.CompiledModel.from_buffer(data)
    with pytest.raises(lg.UnsupportedOpError, match="NoSuchCustomOp"):
        lg.Interpreter(model_content=data)


def test_errors_are_litegpu_errors_and_builtin_kinds():
    assert issubclass(lg.SignatureError, (lg.LiteGpuError, KeyError, ValueError))
    assert issubclass(lg.TensorBufferError, ValueError)
    assert issubclass(lg.ClosedError, RuntimeError)
    assert issubclass(lg.AcceleratorUnavailableError, RuntimeError)
