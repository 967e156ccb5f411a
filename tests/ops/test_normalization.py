import numpy as np
import pytest
from oracle import (
    assert_builtin_bits,
    assert_reference_rejects,
    check_built,
    check_op_model,
    one_op_model,
    random_input,
)

from litegpu.backends import ReferenceBackend
from litegpu.errors import LiteGpuError
from litegpu.ir.builder import ModelBuilder


def unary_model(name, shape, **options):
    b = ModelBuilder()
    x = b.input("x", shape)
    y = b.tensor("y", shape)
    b.op(name, [x], [y], **options)
    b.output(y)
    return b.build()


@pytest.mark.parametrize("shape", [(10,), (3, 7), (2, 3, 5), (2, 2, 3, 4), (1, 2, 1, 2, 6), (4, 1)])
@pytest.mark.parametrize("beta", [1.0, 0.5, 2.5])
def test_softmax_matches_official(shape, beta):
    check_op_model(unary_model("SOFTMAX", shape, beta=beta), [random_input(shape, low=-10, high=10)])


def test_softmax_large_logits_do_not_overflow():
    x = np.array([[1000.0, 999.0, -1000.0, 0.0]], np.float32)
    check_op_model(unary_model("SOFTMAX", x.shape, beta=1.0), [x])


@pytest.mark.parametrize("shape", [(10,), (3, 7), (2, 3, 5), (2, 2, 3, 4)])
def test_log_softmax_matches_official(shape):
    check_op_model(unary_model("LOG_SOFTMAX", shape), [random_input(shape, low=-10, high=10)])


@pytest.mark.parametrize("shape", [(6,), (3, 7), (2, 3, 5), (2, 2, 3, 4)])
def test_l2_normalization_matches_official(shape):
    check_op_model(unary_model("L2_NORMALIZATION", shape), [random_input(shape)])


@pytest.mark.parametrize("shape", [(2, 24), (2, 3, 37)])
def test_float_l2_normalization_equals_the_builtin_kernel_bit_for_bit(shape):
    """The builtin kernel sums the squares in order, each rounded (held-out two_signatures' embedding was 5e-8
    off): the numpy reference and BUILTIN mode take that order."""
    assert_builtin_bits(unary_model("L2_NORMALIZATION", shape), [random_input(shape, seed=3)])


def test_l2_normalization_of_zero_and_tiny_vectors():
    # norms below the 1e-6 epsilon are clamped to it, so tiny vectors shrink rather than normalise
    x = np.array([[0, 0, 0], [1e-8, 0, 0], [3, 4, 0]], np.float32)
    check_op_model(unary_model("L2_NORMALIZATION", x.shape), [x])


@pytest.mark.parametrize("activation,supported", [("NONE", True), ("RELU", False)])
def test_l2_normalization_supports_only_no_activation(activation, supported):
    from litegpu.ops import Target, find

    sg = unary_model("L2_NORMALIZATION", (2, 5), fused_activation_function=activation).subgraphs[0]
    reason = find("L2_NORMALIZATION").unsupported_reason(sg.operators[0], sg, Target.XLA_CPU)
    assert (reason is None) == supported


@pytest.mark.parametrize("radius,bias,alpha,beta", [
    (2, 1.0, 1e-1, 0.75), (0, 2.0, 0.5, 0.5), (5, 1.0, 1e-2, 1.0), (1, 0.5, 1.0, 0.3)])
def test_local_response_normalization_matches_official(radius, bias, alpha, beta):
    shape = (2, 3, 4, 7)
    model = unary_model("LOCAL_RESPONSE_NORMALIZATION", shape, radius=radius, bias=bias, alpha=alpha, beta=beta)
    check_op_model(model, [random_input(shape)])


def test_local_response_normalization_rejects_non_4d_input():
    model = unary_model("LOCAL_RESPONSE_NORMALIZATION", (3, 7), radius=1, bias=1.0, alpha=1.0, beta=0.5)
    with pytest.raises(LiteGpuError, match="LOCAL_RESPONSE_NORMALIZATION.*rank 4"):
        ReferenceBackend(model).run([random_input((3, 7))])


# --- 8-bit SOFTMAX: the official optimized lookup-table kernel, exact ---------------------------

from litegpu.ir.builder import quantization


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("in_scale,beta", [(0.1, 1.0), (0.02, 1.0), (0.5, 0.7), (0.05, 2.0)])
@pytest.mark.parametrize("shape", [(1, 1000), (3, 7), (2, 3, 17)])
def test_quantized_softmax_matches_official(dtype, in_scale, beta, shape):
    zp_in, zp_out = (-5, -128) if dtype == "int8" else (120, 0)
    b = ModelBuilder()
    x = b.input("x", shape, dtype, quantization=quantization(in_scale, zp_in))
    y = b.tensor("y", shape, dtype, quantization=quantization(1 / 256, zp_out))
    b.op("SOFTMAX", [x], [y], beta=beta)
    b.output(y)
    check_op_model(b.build(), [random_input(shape, dtype, seed=len(shape))])



@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_quantized_softmax_over_attention_rows_is_exact(dtype):
    """x86's 8-bit SOFTMAX is optimized_ops::Softmax with a float32 exp table and a float32 row sum (the uint16
    table is aarch64's): an int8 Keras transformer's second attention softmax (its scales, rows of 128) was
    1 LSB off in the uint16-table form, in 16 of these 65,536 elements."""
    rng = np.random.default_rng(0)
    x = np.clip(np.round(rng.normal(0, 30, (1, 4, 128, 128))), -128, 127).astype(np.int16)
    zp_in, zp_out = (4, -128) if dtype == "int8" else (132, 0)
    x = (x + (0 if dtype == "int8" else 128)).astype(dtype)
    model, _ = one_op_model("SOFTMAX", [x], [(x.shape, dtype)], beta=1.0,
                            input_quant=[quantization(0.037395186722278595, zp_in)],
                            output_quant=quantization(1 / 256, zp_out))
    check_op_model(model, [x])

# --- 8-bit L2_NORMALIZATION: optimized uint8 / reference int8 kernels, gemmlowp inverse sqrt, exact ---

L2_OUTPUT_ZERO_POINT = {"int8": 0, "uint8": 128}


def l2norm_8bit(x, in_zp, out_q=None):
    dtype = x.dtype.name
    out_q = out_q or quantization(1 / 128, L2_OUTPUT_ZERO_POINT[dtype])
    return one_op_model("L2_NORMALIZATION", [x], [(x.shape, dtype, out_q)], input_quant=[quantization(0.3, in_zp)])


def l2_rows(dtype, shape, spread=None):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(len(shape))
    if spread is None:
        return rng.integers(info.min, info.max + 1, size=shape).astype(dtype)
    centre = (info.min + info.max) // 2
    return np.clip(rng.integers(centre - spread, centre + spread + 1, size=shape), info.min, info.max).astype(dtype)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("shape,spread,in_zp_offset", [
    ((4, 16), None, 0), ((2, 3, 5, 7), None, 37), ((64, 3), 2, 0), ((6, 1), None, -20),
    ((3, 300), None, 0), ((8, 4), 1, 37),
])
def test_8bit_l2_normalization(dtype, shape, spread, in_zp_offset):
    info = np.iinfo(dtype)
    check_built(l2norm_8bit(l2_rows(dtype, shape, spread), (info.min + info.max) // 2 + in_zp_offset))


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_8bit_l2_normalization_of_tiny_and_extreme_rows(dtype):
    # sums of squares 0, 1, 2, 4 and the largest: the fixed-point inverse square root's edge cases
    zp = L2_OUTPUT_ZERO_POINT[dtype]
    x = np.full((6, 5), zp, np.int64)
    x[1, 0] += 1
    x[2, :2] += 1
    x[3, 3] -= 2
    x[4, :] = np.iinfo(dtype).min
    x[5, :] = np.iinfo(dtype).max
    check_built(l2norm_8bit(x.astype(dtype), zp))


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_8bit_l2_normalization_needs_the_fixed_output_quantization(dtype):
    x = l2_rows(dtype, (2, 4))
    out_q = quantization(1 / 64, L2_OUTPUT_ZERO_POINT[dtype])
    assert_reference_rejects(l2norm_8bit(x, L2_OUTPUT_ZERO_POINT[dtype], out_q), "L2_NORMALIZATION")


@pytest.mark.parametrize("shape,beta,spread", [
    ((9, 1000), 1.0, 20),     # attention-like rows
    ((3, 7, 37), 0.5, 60),    # rows starting off 16-byte boundaries; n % 4 == 1: one exp by glibc's expf
    ((5, 576), 1.0, 100),     # probabilities below float32's normal range (subnormal)
    ((2, 3), 2.5, 3),         # rows shorter than a packet
])
def test_float_softmax_is_bit_exact(shape, beta, spread):
    """optimized_ops::Softmax: float32 (x - max) * beta, Eigen's packet exp (glibc's expf for the last n % 4),
    row sums in Eigen's vectorized order, times 1 / sum."""
    from oracle import assert_builtin_bits
    x = random_input(shape, seed=3, low=-spread, high=spread)
    x.reshape(-1)[:3] = [np.inf, -np.inf, 1e-40]
    model = unary_model("SOFTMAX", shape, beta=beta)
    assert_builtin_bits(model, [x], fast_atol=1e-7)  # XLA's exp and sum on the fast path: an ulp or so away
