import numpy as np
import pytest

from litegpu.ir.builder import ModelBuilder
from oracle import check_consecutive_runs as check_two_runs, check_op_model


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


def lstm_weights(b, rng, prefix, features, units, cifg=False, peephole=False, projection=False, proj_bias=True):
    """The 16 weight inputs of the LSTM schema (after x, before the states); -1 where absent."""
    out_units = 3 if projection else units

    def const(name, shp, present=True):
        return b.constant(prefix + name, weights(rng, shp)) if present else -1

    ins = [const(f"w_{g}", (units, features), g != "i" or not cifg) for g in "ifco"]
    ins += [const(f"r_{g}", (units, out_units), g != "i" or not cifg) for g in "ifco"]
    ins += [const(f"p_{g}", (units,), peephole and (g != "i" or not cifg)) for g in "ifo"]
    ins += [const(f"b_{g}", (units,), g != "i" or not cifg) for g in "ifco"]
    ins += [const("proj_w", (out_units, units), projection), const("proj_b", (out_units,), projection and proj_bias)]
    return ins, out_units


@pytest.mark.parametrize("variant", sorted(LSTM_VARIANTS))
@pytest.mark.parametrize("activation", ["TANH", "RELU"])
def test_lstm_single_step_op(variant, activation):
    opts = dict(LSTM_VARIANTS[variant])
    cell_clip, proj_clip = opts.pop("cell_clip", 0.0), opts.pop("proj_clip", 0.0)
    rng = np.random.default_rng(4)
    b = ModelBuilder()
    batch, features, units = 2, 3, 5
    x = b.input("x", (batch, features))
    ins, out_units = lstm_weights(b, rng, "", features, units, **opts)
    ins += [b.tensor("h", (batch, out_units), is_variable=True), b.tensor("c", (batch, units), is_variable=True)]
    y = b.tensor("y", (batch, out_units))
    b.op("LSTM", [x] + ins, [y], fused_activation_function=activation, cell_clip=cell_clip, proj_clip=proj_clip,
         kernel_type="FULL")
    b.output(y)
    check_two_runs(b.build(), [[weights(rng, (batch, features), 1.0)] for _ in range(3)])


BIDI_LSTM_VARIANTS = {
    "basic": ({}, {}),
    "cifg_peephole": ({"cifg": True, "peephole": True}, {"cifg": True, "peephole": True}),
    # the official kernel requires both directions to have the same output size
    "projection": ({"projection": True}, {"projection": True, "proj_bias": False}),
}


@pytest.mark.parametrize("variant", sorted(BIDI_LSTM_VARIANTS))
@pytest.mark.parametrize("time_major", [True, False])
@pytest.mark.parametrize("merge_outputs", [False, True])
def test_bidirectional_lstm(variant, time_major, merge_outputs):
    fw_opts, bw_opts = BIDI_LSTM_VARIANTS[variant]
    rng = np.random.default_rng(5)
    # The official batch-major merged kernel offsets batch b's state by b * (fw + bw units), past the end
    # of the state tensor (lstm_eval.cc EvalFloat): its results for batch > 1 are undefined.
    batch = 1 if merge_outputs and not time_major else 2
    time, features, units = 4, 3, 4
    shape = (time, batch, features) if time_major else (batch, time, features)
    b = ModelBuilder()
    x = b.input("x", shape)
    fw, fw_out = lstm_weights(b, rng, "fw_", features, units, **fw_opts)
    bw, bw_out = lstm_weights(b, rng, "bw_", features, units, **bw_opts)
    states = [b.tensor("fw_h", (batch, fw_out), is_variable=True), b.tensor("fw_c", (batch, units), is_variable=True),
              b.tensor("bw_h", (batch, bw_out), is_variable=True), b.tensor("bw_c", (batch, units), is_variable=True)]
    ins = [x] + fw + bw + states + [-1] * 9
    assert len(ins) == 48
    if merge_outputs:
        outs = [b.tensor("y", shape[:2] + (fw_out + bw_out,))]
    else:
        outs = [b.tensor("y_fw", shape[:2] + (fw_out,)), b.tensor("y_bw", shape[:2] + (bw_out,))]
    b.op("BIDIRECTIONAL_SEQUENCE_LSTM", ins, outs, time_major=time_major, merge_outputs=merge_outputs,
         fused_activation_function="TANH", cell_clip=0.5 if variant == "basic" else 0.0)
    b.output(*outs)
    check_two_runs(b.build(), [[weights(rng, shape, 1.0)] for _ in range(2)])


@pytest.mark.parametrize("time_major", [False, True])
@pytest.mark.parametrize("merge_outputs", [False, True])
@pytest.mark.parametrize("activation", ["TANH", "RELU"])
def test_bidirectional_rnn(time_major, merge_outputs, activation):
    rng = np.random.default_rng(6)
    batch, time, features, units = 2, 3, 3, 4
    shape = (time, batch, features) if time_major else (batch, time, features)
    b = ModelBuilder()
    x = b.input("x", shape)
    ins = [x]
    for d in ("fw", "bw"):
        ins += [b.constant(f"{d}_w", weights(rng, (units, features))), b.constant(f"{d}_r", weights(rng, (units, units))),
                b.constant(f"{d}_b", weights(rng, (units,))), b.tensor(f"{d}_h", (batch, units), is_variable=True)]
    ins += [-1] * 3
    if merge_outputs:
        outs = [b.tensor("y", shape[:2] + (2 * units,))]
    else:
        outs = [b.tensor("y_fw", shape[:2] + (units,)), b.tensor("y_bw", shape[:2] + (units,))]
    b.op("BIDIRECTIONAL_SEQUENCE_RNN", ins, outs, time_major=time_major, merge_outputs=merge_outputs,
         fused_activation_function=activation)
    b.output(*outs)
    check_two_runs(b.build(), [[weights(rng, shape, 1.0)] for _ in range(2)])


@pytest.mark.parametrize("activation", ["TANH", "RELU", "NONE"])
@pytest.mark.parametrize("batch", [1, 3])
def test_rnn_single_step_op(activation, batch):
    rng = np.random.default_rng(7)
    b = ModelBuilder()
    x = b.input("x", (batch, 3))
    ins = [x, b.constant("w", weights(rng, (4, 3))), b.constant("r", weights(rng, (4, 4))),
           b.constant("b", weights(rng, (4,))), b.tensor("h", (batch, 4), is_variable=True)]
    y = b.tensor("y", (batch, 4))
    b.op("RNN", ins, [y], fused_activation_function=activation)
    b.output(y)
    check_two_runs(b.build(), [[weights(rng, (batch, 3), 1.0)] for _ in range(3)])


@pytest.mark.parametrize("rank, filters, memory, bias, activation", [
    (1, 4, 3, True, "NONE"),
    (2, 6, 4, True, "RELU"),
    (1, 2, 1, False, "NONE"),
    (3, 3, 2, False, "RELU6"),
])
def test_svdf(rank, filters, memory, bias, activation):
    rng = np.random.default_rng(8)
    batch, features, units = 2, 3, filters // rank
    b = ModelBuilder()
    x = b.input("x", (batch, features))
    ins = [x, b.constant("wf", weights(rng, (filters, features))), b.constant("wt", weights(rng, (filters, memory))),
           b.constant("b", weights(rng, (units,))) if bias else -1,
           b.tensor("state", (batch, filters * memory), is_variable=True)]
    y = b.tensor("y", (batch, units))
    b.op("SVDF", ins, [y], rank=rank, fused_activation_function=activation)
    b.output(y)
    check_two_runs(b.build(), [[weights(rng, (batch, features), 1.0)] for _ in range(4)])


# ---- a reduced GPU precision hands the float kernels float16 weights ------------------------------------

def single_step_rnn_model():
    rng = np.random.default_rng(9)
    b = ModelBuilder()
    x = b.input("x", (2, 3))
    ins = [x, b.constant("w", weights(rng, (4, 3))), b.constant("r", weights(rng, (4, 4))),
           b.constant("b", weights(rng, (4,))), b.tensor("h", (2, 4), is_variable=True)]
    y = b.tensor("y", (2, 4))
    b.op("RNN", ins, [y], fused_activation_function="TANH")
    b.output(y)
    return b.build(), (2, 3)


def single_step_lstm_model():
    rng = np.random.default_rng(10)
    b = ModelBuilder()
    x = b.input("x", (2, 3))
    ins, out_units = lstm_weights(b, rng, "", 3, 4, peephole=True, projection=True)
    ins += [b.tensor("h", (2, out_units), is_variable=True), b.tensor("c", (2, 4), is_variable=True)]
    y = b.tensor("y", (2, out_units))
    b.op("LSTM", [x] + ins, [y], fused_activation_function="TANH", kernel_type="FULL")
    b.output(y)
    return b.build(), (2, 3)


def bidirectional_model(op):
    rng = np.random.default_rng(11)
    batch, time, features, units = 2, 3, 3, 4
    shape = (batch, time, features)
    b = ModelBuilder()
    x = b.input("x", shape)
    if op == "BIDIRECTIONAL_SEQUENCE_LSTM":
        fw, _ = lstm_weights(b, rng, "fw_", features, units)
        bw, _ = lstm_weights(b, rng, "bw_", features, units, cifg=True)
        states = [b.tensor(n, (batch, units), is_variable=True) for n in ("fw_h", "fw_c", "bw_h", "bw_c")]
        ins = [x] + fw + bw + states + [-1] * 9
    else:
        ins = [x]
        for d in ("fw", "bw"):
            ins += [b.constant(f"{d}_w", weights(rng, (units, features))),
                    b.constant(f"{d}_r", weights(rng, (units, units))),
                    b.constant(f"{d}_b", weights(rng, (units,))), b.tensor(f"{d}_h", (batch, units), is_variable=True)]
        ins += [-1] * 3
    y = b.tensor("y", shape[:2] + (2 * units,))
    b.op(op, ins, [y], time_major=False, merge_outputs=True, fused_activation_function="TANH")
    b.output(y)
    return b.build(), shape


def svdf_model():
    rng = np.random.default_rng(12)
    b = ModelBuilder()
    x = b.input("x", (2, 3))
    ins = [x, b.constant("wf", weights(rng, (4, 3))), b.constant("wt", weights(rng, (4, 3))),
           b.constant("b", weights(rng, (2,))), b.tensor("state", (2, 12), is_variable=True)]
    y = b.tensor("y", (2, 2))
    b.op("SVDF", ins, [y], rank=2, fused_activation_function="NONE")
    b.output(y)
    return b.build(), (2, 3)


REDUCED_PRECISION_MODELS = {
    "UNIDIRECTIONAL_SEQUENCE_RNN": lambda: rnn_model(2, 3, 3, 4, False, "TANH"),
    "UNIDIRECTIONAL_SEQUENCE_LSTM": lambda: lstm_model(2, 3, 3, 4, False, peephole=True, projection=True),
    "RNN": single_step_rnn_model,
    "LSTM": single_step_lstm_model,
    "BIDIRECTIONAL_SEQUENCE_RNN": lambda: bidirectional_model("BIDIRECTIONAL_SEQUENCE_RNN"),
    "BIDIRECTIONAL_SEQUENCE_LSTM": lambda: bidirectional_model("BIDIRECTIONAL_SEQUENCE_LSTM"),
    "SVDF": svdf_model,
}


@pytest.mark.parametrize("precision", ["fp16", "fp16_fp32_accum"])
@pytest.mark.parametrize("op", sorted(REDUCED_PRECISION_MODELS))
def test_float_recurrent_ops_take_the_float16_weights_of_a_reduced_precision(op, precision):
    # fp16 holds float32 weights as float16; the kernels took only float32 (or hybrid int8) weights.
    from litegpu.backends import ReferenceBackend
    from litegpu.backends.xla.backend import XlaBackend

    model, shape = REDUCED_PRECISION_MODELS[op]()
    rng = np.random.default_rng(13)
    reference, backend = ReferenceBackend(model), XlaBackend(model, precision=precision)
    for run in range(2):  # the state the first run leaves is where the second one starts
        x = weights(rng, shape, 1.0)
        for got, want in zip(backend.run([x]), reference.run([x])):
            got = np.asarray(got)
            assert got.dtype == want.dtype == np.float32
            np.testing.assert_allclose(got, want, rtol=0, atol=5e-3 * max(1.0, float(np.abs(want).max())),
                                       err_msg=f"{op} {precision} run {run}")
