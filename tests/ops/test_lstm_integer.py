"""Full-integer LSTM (int8 activations and weights, int16 cell state, int32 biases; lstm_eval.cc
EvalInteger8x8_16) against the official interpreter, bit-exact, through UNIDIRECTIONAL_SEQUENCE_LSTM and
LSTM.  The models are laid out as the official converter makes them (tests/heldout lstm_fused_int8):
per-tensor symmetric int8 weights, int32 biases, a power-of-two cell scale, gate intermediates 0-3 without
quantization and intermediate 4 carrying the hidden (output) scale and zero point."""

import numpy as np
import pytest
from oracle import check_consecutive_runs, check_op_model

from litegpu.backends import ReferenceBackend
from litegpu.errors import LiteGpuError, UnsupportedOpError
from litegpu.ir.builder import ModelBuilder, quantization
from litegpu.ops import Target, find
from litegpu.ops import _fixedpoint as fp

CONVERTER = {"features": 8, "units": 32, "time": 12}  # the held-out model's first layer


def lstm_model(*, batch=1, time=4, features=5, units=6, time_major=False, cifg=False, peephole=False,
               projection=0, cell_exponent=-14, cell_clip=10.0, proj_clip=0.0, seed=0,
               op="UNIDIRECTIONAL_SEQUENCE_LSTM", state_inputs=False, intermediates=5, per_channel=False,
               layer_norm=False, cell_scale=None):
    """(model, input shape, state shapes) of one full-integer LSTM with random weights."""
    rng = np.random.default_rng(seed)
    b = ModelBuilder()
    n_output = projection or units
    out_q = quantization(0.006, int(rng.integers(-20, 20)))
    if op == "LSTM":
        shape, y_shape = (batch, features), (batch, n_output)
    else:
        shape = (time, batch, features) if time_major else (batch, time, features)
        y_shape = shape[:2] + (n_output,)
    x = b.input("x", shape, "int8", quantization=quantization(0.025, int(rng.integers(-20, 20))))

    def weights(name, rows, cols, present=True):
        if not present:
            return -1
        scale = rng.uniform(0.004, 0.01, rows) if per_channel else float(rng.uniform(0.004, 0.01))
        return b.constant(name, rng.integers(-127, 128, (rows, cols)).astype(np.int8),
                          quantization=quantization(scale, 0))

    def vector(name, dtype, size, bound, scale, present=True):
        if not present:
            return -1
        return b.constant(name, rng.integers(-bound, bound, size).astype(dtype), quantization=quantization(scale, 0))

    has = {g: g != "i" or not cifg for g in "ifco"}
    ins = [x] + [weights(f"w_{g}", units, features, has[g]) for g in "ifco"]
    ins += [weights(f"r_{g}", units, n_output, has[g]) for g in "ifco"]
    ins += [vector(f"p_{g}", np.int16, units, 3000, float(rng.uniform(1e-5, 1e-4)), peephole and has[g])
            for g in "ifo"]
    ins += [vector(f"b_{g}", np.int32, units, 3000, 1e-4, has[g]) for g in "ifco"]
    if projection:
        ins += [weights("proj_w", n_output, units), vector("proj_b", np.int32, n_output, 500, 1e-4)]
    else:
        ins += [-1, -1]
    state = b.input if state_inputs else b.tensor
    h = state("h", (batch, n_output), "int8", quantization=out_q, is_variable=True)
    c_q = quantization(cell_scale if cell_scale is not None else 2.0 ** cell_exponent, 0)
    c = state("c", (batch, units), "int16", quantization=c_q, is_variable=True)
    ins += [h, c]
    # with layer norm the gate scales come from intermediates 0-3 and the biases go to the layer norm
    ins += [vector(f"ln_{g}", np.int16, units, 32767, float(rng.uniform(2e-5, 6e-5)), layer_norm and has[g])
            for g in "ifco"]
    gate_intermediates = [b.tensor(f"inter{k}", (0,), "int16", quantization=quantization(float(rng.uniform(2e-4, 1e-3)), 0))
                          if layer_norm else b.tensor(f"inter{k}", (0,), "float32") for k in range(intermediates - 1)]
    hidden_q = quantization(0.007, 3) if projection else out_q
    hidden = b.tensor("hidden", (0,), "int8", quantization=hidden_q)
    y = b.tensor("y", y_shape, "int8", quantization=out_q)
    options = {"fused_activation_function": "TANH", "cell_clip": cell_clip, "proj_clip": proj_clip}
    if op != "LSTM":
        options["time_major"] = time_major
    b.op(op, ins, [y], intermediates=gate_intermediates[:4] + [hidden] + gate_intermediates[4:], **options)
    b.output(y)
    return b.build(), shape, ((batch, n_output), (batch, units))


def int8_input(shape, seed):
    return np.random.default_rng(seed + 100).integers(-128, 128, shape).astype(np.int8)


def random_states(state_shapes, seed):
    rng = np.random.default_rng(seed + 200)
    (h_shape, c_shape) = state_shapes
    return [rng.integers(-128, 128, h_shape).astype(np.int8), rng.integers(-32768, 32768, c_shape).astype(np.int16)]


@pytest.mark.parametrize("seed", [0, 1])
def test_converter_configuration(seed):
    """The held-out model's layout: batch 1, batch-major, 12 steps, 2^-14 cell scale, cell clip 10."""
    model, shape, _ = lstm_model(seed=seed, **CONVERTER)
    check_op_model(model, [int8_input(shape, seed)])


@pytest.mark.parametrize("batch,time_major,seed", [(3, False, 3), (3, True, 4), (1, True, 5)])
def test_batch_and_layout(batch, time_major, seed):
    model, shape, _ = lstm_model(batch=batch, time_major=time_major, seed=seed)
    check_op_model(model, [int8_input(shape, seed)])


@pytest.mark.parametrize("time_major", [False, True])
def test_nonzero_initial_state(time_major):
    """The states fed as (variable) model inputs: any int8 output state and int16 cell state."""
    model, shape, states = lstm_model(batch=2, time_major=time_major, state_inputs=True, seed=7)
    check_op_model(model, [int8_input(shape, 7)] + random_states(states, 7))


def test_state_carries_over_runs():
    """The second run starts from the states the first left; the first from the output state's zero
    point (ResetVariableTensor fills int8 variables with it) and a zero cell state."""
    model, shape, _ = lstm_model(batch=2, seed=8)
    check_consecutive_runs(model, [[int8_input(shape, 8)], [int8_input(shape, 9)]], atol=0)


VARIANTS = {
    "cifg": {"cifg": True},
    "peephole": {"peephole": True},
    "cifg_peephole_time_major": {"cifg": True, "peephole": True, "time_major": True},
    "projection": {"projection": 4},
    "projection_clip": {"projection": 4, "proj_clip": 0.3},
    # the peephole runs over the first n_output cells: per row batch-major, over the flat batch time-major
    "peephole_projection": {"peephole": True, "projection": 4, "proj_clip": 0.3},
    "peephole_projection_time_major": {"peephole": True, "projection": 4, "time_major": True},
    "cell_2^-15": {"cell_exponent": -15},
    "cell_2^-11_clip": {"cell_exponent": -11, "cell_clip": 0.7},
    "no_clip": {"cell_clip": 0.0},
    # integer layer norm (PortableApplyLayerNorm): gate scales from intermediates 0-3
    "layer_norm": {"layer_norm": True, "units": 8},
    "layer_norm_cifg_peephole_projection": {"layer_norm": True, "units": 8, "cifg": True, "peephole": True,
                                            "projection": 4, "time_major": True},
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_variants(variant):
    model, shape, _ = lstm_model(batch=3, seed=11, **VARIANTS[variant])
    check_op_model(model, [int8_input(shape, 11)])


def test_large_cell_values_saturate_tanh():
    """Cell scale 2^-9: tanh(c) with 6 integer bits, where gemmlowp's exp flushes arguments below -32."""
    model, shape, states = lstm_model(batch=2, cell_exponent=-9, cell_clip=0.0, state_inputs=True, seed=12)
    check_op_model(model, [int8_input(shape, 12)] + random_states(states, 12))


@pytest.mark.parametrize("variant", [{}, {"peephole": True, "projection": 4, "cifg": True}])
def test_lstm_single_step(variant):
    model, shape, states = lstm_model(op="LSTM", batch=3, state_inputs=True, seed=13, **variant)
    check_op_model(model, [int8_input(shape, 13)] + random_states(states, 13))


def test_layer_norm_width_not_a_power_of_two():
    """The official integer variance uses 2^20 / n_cell (truncated): kept as is."""
    model, shape, states = lstm_model(batch=3, units=6, layer_norm=True, state_inputs=True, seed=22)
    check_op_model(model, [int8_input(shape, 22)] + random_states(states, 3))


@pytest.mark.parametrize("kwargs,error,match", [
    ({"intermediates": 12}, UnsupportedOpError, "8x8_8"),
    ({"cell_exponent": -8}, LiteGpuError, r"2\^-8 is outside"),
    ({"per_channel": True}, LiteGpuError, "one scale"),
])
def test_refused(kwargs, error, match):
    model, shape, _ = lstm_model(**kwargs)
    with pytest.raises(error, match=match):
        ReferenceBackend(model).run([int8_input(shape, 0)])


def test_8x8_8_kernel_is_refused_when_planning():
    model, _, _ = lstm_model(op="LSTM", intermediates=12)
    op = find("LSTM")
    sg = model.subgraphs[0]
    assert "8x8_8" in op.unsupported_reason(sg.operators[0], sg, Target.XLA_CPU)


def test_refuses_a_cell_scale_that_is_not_a_power_of_two():
    model, shape, _ = lstm_model(cell_scale=3e-5)
    with pytest.raises(LiteGpuError, match="power of two"):
        ReferenceBackend(model).run([int8_input(shape, 0)])


@pytest.mark.parametrize("integer_bits", range(7))
def test_gemmlowp_tanh_table_is_tanh(integer_bits):
    """A sanity bound (the differential tests pin the exact values): within 4e-4 of tanh, odd, 0 at 0."""
    table = fp.gemmlowp_tanh16_table(integer_bits).astype(np.int64)
    x = np.arange(-32768, 32768) / 2.0 ** (15 - integer_bits)
    assert np.abs(table / 32768 - np.tanh(x)).max() < 4e-4
    assert table[32768] == 0 and np.array_equal(table[32769:], -table[1:32768][::-1])


def test_gemmlowp_logistic_table_is_logistic():
    table = fp.gemmlowp_logistic16_table(3).astype(np.int64)
    x = np.arange(-32768, 32768) / 4096.0
    assert np.abs(table / 32768 - 1 / (1 + np.exp(-x))).max() < 2e-4
    assert table[32768] == 16384
