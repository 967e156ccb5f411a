"""Hybrid (dynamic-range) recurrent layers: int8 weights with one scale, float activations, against
the official interpreter (lstm_eval.cc EvalHybrid, kernel_utils.cc RnnBatchStep, svdf.cc EvalHybridSVDF).
Each model runs twice: the second run continues from the state the first one left."""

import numpy as np
import pytest
from oracle import check_consecutive_runs

from litegpu.backends import ReferenceBackend
from litegpu.errors import LiteGpuError
from litegpu.ir.builder import ModelBuilder, quantization

WEIGHT_SCALE = 0.5 / 127


def check_two_runs(model, inputs_per_run):
    """Float results of integer products are held to 1e-5 of the output magnitude."""
    check_consecutive_runs(model, inputs_per_run, 1e-5, 1e-5, atol_of_magnitude=True)


def int8_weight(b, rng, name, shape, scale=WEIGHT_SCALE, per_channel=False):
    scales = np.full(shape[0], scale) if per_channel else scale
    return b.constant(name, rng.integers(-127, 128, shape).astype(np.int8), quantization=quantization(scales, 0))


def float_weight(b, rng, name, shape):
    return b.constant(name, (rng.standard_normal(shape) * 0.5).astype(np.float32))


def inputs(shape, runs, seed, zero_row_at=None):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(runs):
        x = rng.uniform(-1.5, 1.5, shape).astype(np.float32)
        if zero_row_at is not None:
            x[zero_row_at] = 0.0  # a zero row quantizes to zeros with scale 1
        out.append([x])
    return out


def lstm_weights(b, rng, prefix, features, units, cifg=False, peephole=False, projection=False):
    out_units = 3 if projection else units

    def w(name, shp, present=True):
        return int8_weight(b, rng, prefix + name, shp) if present else -1

    ins = [w(f"w_{g}", (units, features), g != "i" or not cifg) for g in "ifco"]
    ins += [w(f"r_{g}", (units, out_units), g != "i" or not cifg) for g in "ifco"]
    ins += [w(f"p_{g}", (units,), peephole and (g != "i" or not cifg)) for g in "ifo"]
    ins += [float_weight(b, rng, f"{prefix}b_{g}", (units,)) if g != "i" or not cifg else -1 for g in "ifco"]
    ins += [w("proj_w", (out_units, units), projection),
            float_weight(b, rng, prefix + "proj_b", (out_units,)) if projection else -1]
    return ins, out_units


LSTM_VARIANTS = {
    "basic": {},
    "cifg_peephole": {"cifg": True, "peephole": True},
    "projection": {"projection": True},
}


@pytest.mark.parametrize("variant,asymmetric,time_major", [
    ("basic", False, False), ("basic", True, True),
    ("cifg_peephole", True, False), ("cifg_peephole", False, True),
    ("projection", False, False), ("projection", True, True),
])
def test_hybrid_unidirectional_lstm(variant, asymmetric, time_major):
    rng = np.random.default_rng(1)
    batch, time, features, units = 2, 3, 5, 4
    shape = (time, batch, features) if time_major else (batch, time, features)
    b = ModelBuilder()
    x = b.input("x", shape)
    ins, out_units = lstm_weights(b, rng, "", features, units, **LSTM_VARIANTS[variant])
    ins = [x] + ins + [b.tensor("h", (batch, out_units), is_variable=True),
                       b.tensor("c", (batch, units), is_variable=True)] + [-1] * 4
    y = b.tensor("y", shape[:2] + (out_units,))
    b.op("UNIDIRECTIONAL_SEQUENCE_LSTM", ins, [y], time_major=time_major, fused_activation_function="TANH",
         cell_clip=0.8 if variant == "basic" else 0.0, proj_clip=0.6 if variant == "projection" else 0.0,
         asymmetric_quantize_inputs=asymmetric)
    b.output(y)
    check_two_runs(b.build(), inputs(shape, 2, seed=2, zero_row_at=(0, 0) if time_major else (0,)))


@pytest.mark.parametrize("asymmetric", [False, True])
def test_hybrid_lstm_single_step(asymmetric):
    rng = np.random.default_rng(3)
    batch, features, units = 3, 4, 5
    b = ModelBuilder()
    x = b.input("x", (batch, features))
    ins, out_units = lstm_weights(b, rng, "", features, units, peephole=True, projection=True)
    ins = [x] + ins + [b.tensor("h", (batch, out_units), is_variable=True),
                       b.tensor("c", (batch, units), is_variable=True)]
    y = b.tensor("y", (batch, out_units))
    b.op("LSTM", ins, [y], fused_activation_function="TANH", kernel_type="FULL",
         asymmetric_quantize_inputs=asymmetric)
    b.output(y)
    check_two_runs(b.build(), inputs((batch, features), 3, seed=4))


@pytest.mark.parametrize("asymmetric", [True])
def test_hybrid_bidirectional_lstm(asymmetric):
    rng = np.random.default_rng(5)
    batch, time, features, units = 2, 3, 4, 4
    shape = (time, batch, features)
    b = ModelBuilder()
    x = b.input("x", shape)
    fw, _ = lstm_weights(b, rng, "fw_", features, units)
    bw, _ = lstm_weights(b, rng, "bw_", features, units, cifg=True)
    states = [b.tensor(n, (batch, units), is_variable=True) for n in ("fw_h", "fw_c", "bw_h", "bw_c")]
    outs = [b.tensor("y_fw", shape[:2] + (units,)), b.tensor("y_bw", shape[:2] + (units,))]
    b.op("BIDIRECTIONAL_SEQUENCE_LSTM", [x] + fw + bw + states + [-1] * 9, outs, time_major=True,
         merge_outputs=False, fused_activation_function="TANH", asymmetric_quantize_inputs=asymmetric)
    b.output(*outs)
    check_two_runs(b.build(), inputs(shape, 2, seed=6))


@pytest.mark.parametrize("op", ["UNIDIRECTIONAL_SEQUENCE_RNN", "RNN"])
@pytest.mark.parametrize("asymmetric", [False, True])
def test_hybrid_rnn(op, asymmetric):
    rng = np.random.default_rng(7)
    batch, time, features, units = 2, 4, 3, 5
    shape = (batch, time, features) if op != "RNN" else (batch, features)
    b = ModelBuilder()
    x = b.input("x", shape)
    ins = [x, int8_weight(b, rng, "w", (units, features)), int8_weight(b, rng, "r", (units, units)),
           float_weight(b, rng, "bias", (units,)), b.tensor("h", (batch, units), is_variable=True)]
    y = b.tensor("y", shape[:-1] + (units,))
    b.op(op, ins, [y], fused_activation_function="TANH", asymmetric_quantize_inputs=asymmetric)
    b.output(y)
    check_two_runs(b.build(), inputs(shape, 3, seed=8))


@pytest.mark.parametrize("asymmetric, rank, filters, memory, bias", [(False, 1, 4, 3, True), (True, 2, 6, 2, False)])
def test_hybrid_svdf(asymmetric, rank, filters, memory, bias):
    rng = np.random.default_rng(9)
    batch, features = 2, 5
    b = ModelBuilder()
    x = b.input("x", (batch, features))
    ins = [x, int8_weight(b, rng, "wf", (filters, features)), int8_weight(b, rng, "wt", (filters, memory)),
           float_weight(b, rng, "b", (filters // rank,)) if bias else -1,
           b.tensor("state", (batch, filters * memory), is_variable=True)]
    y = b.tensor("y", (batch, filters // rank))
    b.op("SVDF", ins, [y], rank=rank, fused_activation_function="RELU", asymmetric_quantize_inputs=asymmetric)
    b.output(y)
    check_two_runs(b.build(), inputs((batch, features), 4, seed=10, zero_row_at=1))


def test_hybrid_rnn_refuses_per_channel_weights():
    rng = np.random.default_rng(11)
    b = ModelBuilder()
    x = b.input("x", (1, 3))
    ins = [x, int8_weight(b, rng, "w", (4, 3), per_channel=True), int8_weight(b, rng, "r", (4, 4)),
           float_weight(b, rng, "bias", (4,)), b.tensor("h", (1, 4), is_variable=True)]
    y = b.tensor("y", (1, 4))
    b.op("RNN", ins, [y], fused_activation_function="TANH")
    b.output(y)
    with pytest.raises(LiteGpuError, match="per-channel int8"):
        ReferenceBackend(b.build()).run([np.ones((1, 3), np.float32)])
