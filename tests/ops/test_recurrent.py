import numpy as np
import pytest

from litegpu.backends import ReferenceBackend
from litegpu.ir import read_model
from litegpu.ir.builder import ModelBuilder
from litegpu.ir.save import to_bytes
from oracle import assert_close, check_op_model, litert


def check_two_runs(model, inputs_per_run, rtol=1e-5, atol=1e-5):
    """The recurrent state is a variable tensor: a second run continues from the first one's state."""
    data = to_bytes(model)
    interp = litert.Interpreter(model_content=data)
    interp.allocate_tensors()
    expected = []
    for inputs in inputs_per_run:
        for d, x in zip(interp.get_input_details(), inputs):
            interp.set_tensor(d["index"], x)
        interp.invoke()
        expected.append(interp.get_tensor(interp.get_output_details()[0]["index"]).copy())
    from litegpu.backends.xla import XlaBackend

    ours = read_model(data)
    for name, backend in [("reference", ReferenceBackend(ours)), ("xla", XlaBackend(ours))]:
        for run, (inputs, want) in enumerate(zip(inputs_per_run, expected)):
            got = np.asarray(backend.run(list(inputs))[0])
            assert_close(got, want, rtol, atol, f"{name} run {run}")


def weights(rng, shape, scale=0.5):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def rnn_model(batch, time, features, units, time_major, activation):
    rng = np.random.default_rng(0)
    b = ModelBuilder()
    shape = (time, batch, features) if time_major else (batch, time, features)
    x = b.input("x", shape)
    w = b.constant("w", weights(rng, (units, features)))
    r = b.constant("r", weights(rng, (units, units)))
    bias = b.constant("bias", weights(rng, (units,)))
    h = b.tensor("h", (batch, units), is_variable=True)
    y = b.tensor("y", shape[:2] + (units,))
    b.op("UNIDIRECTIONAL_SEQUENCE_RNN", [x, w, r, bias, h], [y], time_major=time_major,
         fused_activation_function=activation)
    b.output(y)
    return b.build(), shape


@pytest.mark.parametrize("time_major", [False, True])
@pytest.mark.parametrize("activation", ["TANH", "RELU", "NONE"])
@pytest.mark.parametrize("batch, time", [(1, 1), (2, 5)])
def test_rnn(time_major, activation, batch, time):
    model, shape = rnn_model(batch, time, 3, 4, time_major, activation)
    rng = np.random.default_rng(1)
    check_two_runs(model, [[weights(rng, shape, 1.0)] for _ in range(2)])


LSTM_VARIANTS = {
    "basic": {},
    "cifg": {"cifg": True},
    "peephole": {"peephole": True},
    "projection": {"projection": True},
    "clipped": {"cell_clip": 0.3, "proj_clip": 0.2, "projection": True},
    "cifg_peephole_projection_no_bias": {"cifg": True, "peephole": True, "projection": True, "proj_bias": False},
}


def lstm_model(batch, time, features, units, time_major, cifg=False, peephole=False, projection=False,
               proj_bias=True, cell_clip=0.0, proj_clip=0.0):
    rng = np.random.default_rng(2)
    out_units = 3 if projection else units
    b = ModelBuilder()
    shape = (time, batch, features) if time_major else (batch, time, features)
    x = b.input("x", shape)

    def const(name, shp, present=True):
        return b.constant(name, weights(rng, shp)) if present else -1

    ins = [x]
    ins += [const(f"w_{g}", (units, features), g != "i" or not cifg) for g in "ifco"]
    ins += [const(f"r_{g}", (units, out_units), g != "i" or not cifg) for g in "ifco"]
    ins += [const(f"p_{g}", (units,), peephole and (g != "i" or not cifg)) for g in "ifo"]
    ins += [const(f"b_{g}", (units,), g != "i" or not cifg) for g in "ifco"]
    ins += [const("proj_w", (out_units, units), projection), const("proj_b", (out_units,), projection and proj_bias)]
    ins += [b.tensor("h", (batch, out_units), is_variable=True), b.tensor("c", (batch, units), is_variable=True)]
    ins += [-1] * 4
    y = b.tensor("y", shape[:2] + (out_units,))
    b.op("UNIDIRECTIONAL_SEQUENCE_LSTM", ins, [y], time_major=time_major, fused_activation_function="TANH",
         cell_clip=cell_clip, proj_clip=proj_clip)
    b.output(y)
    return b.build(), shape


@pytest.mark.parametrize("variant", sorted(LSTM_VARIANTS))
@pytest.mark.parametrize("time_major", [False, True])
def test_lstm(variant, time_major):
    model, shape = lstm_model(2, 4, 3, 5, time_major, **LSTM_VARIANTS[variant])
    rng = np.random.default_rng(3)
    check_two_runs(model, [[weights(rng, shape, 1.0)] for _ in range(2)])


def test_lstm_single_step_batch_one():
    model, shape = lstm_model(1, 1, 2, 2, False)
    check_op_model(model, [np.array([[[0.3, -0.7]]], np.float32)])
