"""Full-integer SVDF (int8 input and feature weights, int16 time weights and state, int32 bias, int8
output; svdf.cc ``EvalIntegerSVDF``) against the official interpreter, bit-exact, over consecutive runs
(the int16 state carries from one run to the next)."""

import numpy as np
import pytest
from oracle import check_consecutive_runs, check_op_model, run_official

from litegpu.backends import ReferenceBackend
from litegpu.errors import LiteGpuError
from litegpu.ir import read_model
from litegpu.ir.builder import ModelBuilder, quantization
from litegpu.ir.save import to_bytes


def svdf_model(*, batch=2, features=5, filters=4, rank=2, memory=3, bias=True, activation="RELU", seed=0,
               state_zp=0, feature_gain=1.0, output_gain=1.0, time_dtype=np.int16, time_weights=None):
    """One int8 SVDF with random weights; ``feature_gain`` / ``output_gain`` scale the two effective
    multipliers (large ones saturate the int16 state / the int8 output)."""
    rng = np.random.default_rng(seed)
    b = ModelBuilder()
    units = filters // rank
    s_in, s_wf, s_state, s_out = 0.03, 0.01, 0.003 / feature_gain, float(rng.uniform(0.01, 0.03))
    s_wt = float(rng.uniform(0.5, 1.5)) * 1e-6 * s_out / s_state * output_gain
    x = b.input("x", (batch, features), "int8", quantization=quantization(s_in, int(rng.integers(-30, 30))))
    wf = b.constant("wf", rng.integers(-127, 128, (filters, features)).astype(np.int8),
                    quantization=quantization(s_wf, 0))
    wt_info = np.iinfo(time_dtype)
    if time_weights is None:
        time_weights = rng.integers(wt_info.min + 1, wt_info.max, (filters, memory))
    wt = b.constant("wt", np.asarray(time_weights).astype(time_dtype),
                    quantization=quantization(s_wt, 0))
    ins = [x, wf, wt]
    ins.append(b.constant("b", rng.integers(-30_000_000, 30_000_000, units).astype(np.int32),
                          quantization=quantization(s_state * s_wt, 0)) if bias else -1)
    ins.append(b.tensor("state", (batch, filters * memory), "int16", quantization=quantization(s_state, state_zp),
                        is_variable=True))
    y = b.tensor("y", (batch, units), "int8", quantization=quantization(s_out, int(rng.integers(-20, 20))))
    b.op("SVDF", ins, [y], rank=rank, fused_activation_function=activation)
    b.output(y)
    return b.build()


def int8_inputs(shape, runs, seed):
    rng = np.random.default_rng(seed + 100)
    return [[rng.integers(-128, 128, shape).astype(np.int8)] for _ in range(runs)]


@pytest.mark.parametrize("rank", [1, 2])
@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("bias", [True, False])
def test_integer_svdf_matches_official_over_runs(rank, batch, bias):
    model = svdf_model(batch=batch, rank=rank, filters=2 * rank, bias=bias, seed=rank + 2 * batch)
    check_consecutive_runs(model, int8_inputs((batch, 5), 5, seed=rank), atol=0)


@pytest.mark.parametrize("seed, shape", [
    (0, {"features": 8, "filters": 6, "rank": 3, "memory": 4}),
    (1, {"features": 1, "filters": 3, "rank": 1, "memory": 1}),   # memory 1: the state is only the newest column
    (2, {"features": 16, "filters": 8, "rank": 2, "memory": 10, "batch": 3}),
    (3, {"features": 4, "filters": 4, "rank": 4, "memory": 2, "batch": 1}),  # one unit summing four filters
])
def test_integer_svdf_shapes_and_seeds(seed, shape):
    model = svdf_model(seed=seed, **shape)
    check_consecutive_runs(model, int8_inputs((shape.get("batch", 2), shape["features"]), 4, seed), atol=0)


@pytest.mark.parametrize("feature_gain, output_gain", [(40.0, 1.0), (1.0, 50.0), (0.02, 0.05)])
def test_integer_svdf_saturation_matches_official(feature_gain, output_gain):
    """The newest state column saturates to int16, the output to int8 (and tiny gains round to the zero point)."""
    model = svdf_model(feature_gain=feature_gain, output_gain=output_gain, seed=5)
    check_consecutive_runs(model, int8_inputs((2, 5), 4, 5), atol=0)


def test_integer_svdf_int32_accumulator_wraps_like_official():
    """Saturated state columns times maximal time weights overflow the int32 time product: it wraps."""
    model = svdf_model(features=2, filters=2, rank=1, memory=6, feature_gain=100.0, time_weights=np.full((2, 6), 32767),
                       bias=False, seed=9)
    x = np.array([[127, 127], [-128, -128]], np.int8)
    check_consecutive_runs(model, [[x], [x], [-x - 1], [x], [x], [x], [x]], atol=0)


def test_integer_svdf_ignores_the_state_zero_point_like_official():
    """The state starts at 0 (ResetVariableTensor fills only int8 variables with their zero point) and
    the kernel never reads the state's zero point."""
    model = svdf_model(state_zp=37, seed=6)
    check_consecutive_runs(model, int8_inputs((2, 5), 3, 6), atol=0)


def test_integer_svdf_single_run_extremes():
    model = svdf_model(seed=7, batch=2)
    x = np.array([[-128, 127, -128, 127, 0], [127, 127, 127, 127, 127]], np.int8)
    check_op_model(model, [x])


@pytest.mark.parametrize("activation", ["NONE", "RELU6"])
def test_integer_svdf_without_relu_is_refused_like_official(activation):
    """The official Eval demands RELU for the integer kernel (and then does not apply it)."""
    data = to_bytes(svdf_model(activation=activation))
    x = int8_inputs((2, 5), 1, 0)[0]
    with pytest.raises(Exception, match="kTfLiteActRelu"):
        run_official(data, x)
    with pytest.raises(LiteGpuError, match="RELU"):
        ReferenceBackend(read_model(data)).run(x)


def test_integer_svdf_relu_is_not_applied():
    """Outputs below the output zero point come out: a test that would fail if we clamped at 0."""
    model = svdf_model(seed=8, output_gain=5.0)
    zero_point = model.subgraphs[0].tensors[model.subgraphs[0].outputs[0]].quantization.zero_point[0]
    got = [check_op_model(model, x)[0] for x in int8_inputs((2, 5), 3, 8)]
    assert min(int(g.min()) for g in got) < zero_point


def test_integer_svdf_int8_time_weights_are_refused():
    model = svdf_model(time_dtype=np.int8)
    with pytest.raises(LiteGpuError, match="time weights"):
        ReferenceBackend(model).run(int8_inputs((2, 5), 1, 0)[0])
