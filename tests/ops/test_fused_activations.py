"""Every fused activation on every op with the field, against the official builtin kernels.

The official kernels treat ``fused_activation_function`` three ways: most clamp to the range of
``CalculateActivationRange`` (only RELU, RELU_N1_TO_1, RELU6; TANH and SIGN_BIT compute nothing), some refuse
values (FULLY_CONNECTED float / integer: TANH, SIGN_BIT; CONCATENATION and L2_NORMALIZATION: anything but
NONE), and the hybrid FULLY_CONNECTED applies the function itself.  Each case here asserts that litegpu does
what the official interpreter does: the same numbers on both backends (integers bit for bit), or a
``LiteGpuError`` where the official interpreter refuses the model.
"""

from __future__ import annotations

import numpy as np
import pytest

from litegpu.errors import LiteGpuError
from litegpu.ir import read_model
from litegpu.ir.builder import quantization
from litegpu.ir.save import to_bytes
from oracle import assert_close, one_op_model, random_input, run_official, run_ours

ACTIVATIONS = ["NONE", "RELU", "RELU_N1_TO_1", "RELU6", "TANH", "SIGN_BIT"]
WEIGHTS = np.random.default_rng(3).uniform(-1, 1, (4, 3, 3, 2)).astype(np.float32)


def quant(dtype: str, scale: float):
    return None if dtype in ("float32", "hybrid") else quantization(scale, 0)


def operand(shape, dtype: str, seed: int) -> np.ndarray:
    if dtype in ("float32", "hybrid"):
        return random_input(shape, np.float32, seed)
    span = {"int8": 12, "int16": 3000}[dtype]
    return random_input(shape, dtype, seed, low=-span, high=span)


def weights(values: np.ndarray, dtype: str):
    return ("const", values if dtype == "float32" else np.round(values * 100).astype(np.int8))


def bias(dtype: str, n: int):
    return ("const", np.zeros(n, np.float32 if dtype in ("float32", "hybrid") else np.int32))


def binary(op, dtype, activation):
    return one_op_model(op, [operand((2, 3), dtype, 1), operand((1, 3), dtype, 2)], [((2, 3), dtype)],
                        input_quant=[quant(dtype, 0.05), quant(dtype, 0.07)], output_quant=quant(dtype, 0.1),
                        fused_activation_function=activation)


def conv(op, dtype, activation):
    w = WEIGHTS if op == "CONV_2D" else WEIGHTS[:1]
    extra = {"depth_multiplier": 1} if op == "DEPTHWISE_CONV_2D" else {}
    out_channels = w.shape[0] if op == "CONV_2D" else 2
    return one_op_model(op, [operand((1, 5, 5, 2), dtype, 1), weights(w, dtype), bias(dtype, out_channels)],
                        [((1, 5, 5, out_channels), dtype)],
                        input_quant=[quant(dtype, 0.05), quant(dtype, 0.01), quant(dtype, 0.0005)],
                        output_quant=quant(dtype, 0.1), padding="SAME", stride_w=1, stride_h=1,
                        fused_activation_function=activation, **extra)


def transpose_conv(activation):
    rng = np.random.default_rng(4)
    return one_op_model("TRANSPOSE_CONV", [("const", np.array([1, 8, 8, 3], np.int32)),
                                           ("const", rng.standard_normal((3, 3, 3, 2)).astype(np.float32)),
                                           operand((1, 4, 4, 2), "float32", 1),
                                           ("const", rng.standard_normal(3).astype(np.float32))],
                        [((1, 8, 8, 3), "float32")], padding="SAME", stride_h=2, stride_w=2,
                        fused_activation_function=activation)


def conv3d(activation):
    rng = np.random.default_rng(5)
    return one_op_model("CONV_3D", [operand((1, 3, 4, 4, 2), "float32", 1),
                                    ("const", rng.standard_normal((2, 2, 2, 2, 3)).astype(np.float32))],
                        [((1, 3, 4, 4, 3), "float32")], padding="SAME", stride_d=1, stride_h=1, stride_w=1,
                        dilation_d_factor=1, dilation_h_factor=1, dilation_w_factor=1,
                        fused_activation_function=activation)


def fully_connected(dtype, activation):
    w = WEIGHTS.reshape(4, -1)[:, :6]
    if dtype == "hybrid":
        return one_op_model("FULLY_CONNECTED", [operand((2, 6), "float32", 1), weights(w, "int8"), bias(dtype, 4)],
                            [((2, 4), "float32")], input_quant={1: quantization(0.01, 0)},
                            fused_activation_function=activation)
    return one_op_model("FULLY_CONNECTED", [operand((2, 6), dtype, 1), weights(w, dtype), bias(dtype, 4)],
                        [((2, 4), dtype)], input_quant=[quant(dtype, 0.05), quant(dtype, 0.01), quant(dtype, 0.0005)],
                        output_quant=quant(dtype, 0.1), fused_activation_function=activation)


def pool(op, dtype, activation):
    return one_op_model(op, [operand((1, 4, 4, 2), dtype, 1)], [((1, 2, 2, 2), dtype)],
                        input_quant=[quant(dtype, 0.05)], output_quant=quant(dtype, 0.05), padding="VALID",
                        stride_w=2, stride_h=2, filter_width=2, filter_height=2, fused_activation_function=activation)


def concatenation(dtype, activation):
    return one_op_model("CONCATENATION", [operand((2, 3), dtype, 1), operand((2, 3), dtype, 2)], [((4, 3), dtype)],
                        input_quant=[quant(dtype, 0.05), quant(dtype, 0.05)], output_quant=quant(dtype, 0.05), axis=0,
                        fused_activation_function=activation)


def l2_normalization(dtype, activation):
    return one_op_model("L2_NORMALIZATION", [operand((2, 3), dtype, 1)], [((2, 3), dtype)],
                        fused_activation_function=activation)


CASES = (
    [(op, dt, lambda a, op=op, dt=dt: binary(op, dt, a))
     for op in ("ADD", "SUB", "MUL", "DIV") for dt in ("float32", "int8", "int16")]
    + [(op, dt, lambda a, op=op, dt=dt: conv(op, dt, a))
       for op in ("CONV_2D", "DEPTHWISE_CONV_2D") for dt in ("float32", "int8")]
    + [("TRANSPOSE_CONV", "float32", transpose_conv), ("CONV_3D", "float32", conv3d)]
    + [("FULLY_CONNECTED", dt, lambda a, dt=dt: fully_connected(dt, a)) for dt in ("float32", "int8", "hybrid")]
    + [(op, dt, lambda a, op=op, dt=dt: pool(op, dt, a))
       for op, dts in (("AVERAGE_POOL_2D", ("float32", "int8")), ("MAX_POOL_2D", ("float32", "int8")),
                       ("L2_POOL_2D", ("float32",))) for dt in dts]
    + [("CONCATENATION", dt, lambda a, dt=dt: concatenation(dt, a)) for dt in ("float32", "int8")]
    + [("L2_NORMALIZATION", "float32", lambda a: l2_normalization("float32", a))]
)


def official_or_none(data: bytes, feeds) -> list[np.ndarray] | None:
    """The official outputs, or None where the official interpreter refuses the model."""
    try:
        return run_official(data, feeds)
    except (RuntimeError, ValueError):
        return None


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("op,dtype,make", CASES, ids=[f"{op}-{dt}" for op, dt, _ in CASES])
def test_fused_activation_does_what_the_official_kernel_does(op, dtype, make, activation):
    model, feeds = make(activation)
    data = to_bytes(model)
    expected = official_or_none(data, feeds)
    ours = read_model(data)
    for name, xla in (("reference", False), ("xla", True)):
        if expected is None:
            with pytest.raises(LiteGpuError):
                run_ours(ours, feeds, xla)
            continue
        got = run_ours(ours, feeds, xla)
        assert_close(got[0], expected[0], 1e-5, 0 if expected[0].dtype.kind in "iu" else 1e-5,
                     f"{op} {dtype} {activation} on {name}")


def test_the_activations_that_compute_nothing_would_change_these_results():
    """Not vacuous: the inputs reach values where tanh and sign bit differ from the identity."""
    model, feeds = binary("ADD", "float32", "TANH")
    total = feeds[0] + feeds[1]
    assert np.abs(np.tanh(total) - total).max() > 0.5 and (total < 0).any()
