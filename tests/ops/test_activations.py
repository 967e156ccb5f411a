import numpy as np
import pytest

from litegpu.backends import ReferenceBackend
from litegpu.errors import ModelExecutionError
from litegpu.ir.builder import ModelBuilder
from oracle import check_op_model, random_input

SHAPES = [(), (1,), (2, 3, 4), (1, 2, 1, 3, 1, 2), (0, 3)]
ACTIVATIONS = ["RELU", "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1", "LOGISTIC", "TANH", "ELU", "HARD_SWISH", "GELU",
               "LEAKY_RELU"]
SPECIAL = np.array([np.inf, -np.inf, 0.0, -0.0, 1e-30, -3.0, 3.0, 6.0, -1.0, 1.0, 20.0, -20.0, 90.0, -90.0],
                   np.float32)


def activation_model(op, shape, dtype="float32", **options):
    b = ModelBuilder()
    x = b.input("x", shape, dtype)
    y = b.tensor("y", shape, dtype)
    b.op(op, [x], [y], **options)
    b.output(y)
    return b.build()


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("op", ACTIVATIONS)
def test_activation_matches_official(op, shape):
    x = random_input(shape, seed=1, low=-8, high=8)
    check_op_model(activation_model(op, shape), [x])


@pytest.mark.parametrize("op", ACTIVATIONS)
def test_special_values_match_official(op):
    check_op_model(activation_model(op, SPECIAL.shape), [SPECIAL])


@pytest.mark.parametrize("op", ["LOGISTIC", "TANH"])
def test_float16_matches_official(op):
    x = random_input((4, 5), "float16", seed=2, low=-6, high=6)
    check_op_model(activation_model(op, x.shape, "float16"), [x], rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("approximate", [False, True])
def test_gelu_forms_match_official(approximate):
    x = np.concatenate([random_input((50,), seed=3, low=-6, high=6), SPECIAL])
    check_op_model(activation_model("GELU", x.shape, approximate=approximate), [x])


@pytest.mark.parametrize("alpha", [0.0, 0.2, -0.5, 1.5])
def test_leaky_relu_alpha_matches_official(alpha):
    x = random_input((3, 4), seed=4)
    check_op_model(activation_model("LEAKY_RELU", x.shape, alpha=alpha), [x])


def prelu_model(x_shape, alpha_shape):
    b = ModelBuilder()
    x = b.input("x", x_shape)
    a = b.input("alpha", alpha_shape)
    y = b.tensor("y", x_shape)
    b.op("PRELU", [x, a], [y])
    b.output(y)
    return b.build()


@pytest.mark.parametrize("x_shape,alpha_shape", [
    ((1, 4, 4, 3), (3,)), ((1, 4, 4, 3), (1, 1, 3)), ((2, 5, 3), (5, 3)), ((2, 3), (2, 3)), ((4,), ()),
    ((2, 3, 4), (3, 1)), ((0, 3), (3,)),
], ids=str)
def test_prelu_alpha_broadcasting_matches_official(x_shape, alpha_shape):
    x = random_input(x_shape, seed=5)
    alpha = random_input(alpha_shape, seed=6, low=-1, high=1)
    check_op_model(prelu_model(x_shape, alpha_shape), [x, alpha])


def test_prelu_with_constant_alpha_matches_official():
    b = ModelBuilder()
    x = b.input("x", (1, 3, 3, 2))
    a = b.constant("alpha", np.array([[[0.25, -2.0]]], np.float32))
    y = b.tensor("y", (1, 3, 3, 2))
    b.op("PRELU", [x, a], [y])
    b.output(y)
    check_op_model(b.build(), [random_input((1, 3, 3, 2), seed=8)])


def test_prelu_alpha_larger_than_input_is_an_error():
    model = prelu_model((3,), (2, 3))
    with pytest.raises(ModelExecutionError, match="PRELU"):
        ReferenceBackend(model).run([np.zeros(3, np.float32), np.zeros((2, 3), np.float32)])


# --- quantized HARD_SWISH: the official 16-bit fixed-point recipe, exact ------------------------

from litegpu.ir.builder import quantization  # noqa: E402


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("qin,qout", [((0.05, -10), (0.03, -100)), ((0.02, 0), (0.02, 0)),
                                      ((0.2, 30), (0.09, -60)), ((0.006, -128), (0.0035, -120))])
def test_quantized_hard_swish_matches_official(dtype, qin, qout):
    offset = 128 if dtype == "uint8" else 0
    b = ModelBuilder()
    x = b.input("x", (4, 64), dtype, quantization=quantization(qin[0], qin[1] + offset))
    y = b.tensor("y", (4, 64), dtype, quantization=quantization(qout[0], qout[1] + offset))
    b.op("HARD_SWISH", [x], [y])
    b.output(y)
    every_value = np.arange(256).reshape(4, 64) - (128 if dtype == "int8" else 0)
    check_op_model(b.build(), [every_value.astype(dtype)])


EDGES = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-40, -3e-39, 1e-30, 16.6355324, 16.7, -87.0,
                  -88.5, -103.9, -104.0, -104.1, -110.0, 7.9073896, -7.9073896, 8.0, 1e3, -1e3, 3.4e38, -3.4e38],
                 np.float32)


@pytest.mark.parametrize("op", ["LOGISTIC", "TANH"])
@pytest.mark.parametrize("n", [50003, 6, 3])  # Eigen's 4-float packets, then its scalar function on n % 4
def test_float_logistic_and_tanh_are_bit_exact(op, n):
    """optimized_ops::Logistic / Tanh are Eigen's SSE approximations (LOGISTIC: SiLU's sigmoid in LLM
    feed-forward layers, whose hybrid layers can turn an ulp into an int8 quantization step)."""
    from oracle import assert_builtin_bits, one_op_model
    rng = np.random.default_rng(n)
    x = np.concatenate([rng.uniform(-20, 20, 40000), rng.uniform(-110, -80, 5000), rng.uniform(-1, 1, 5000) * 1e-37,
                        EDGES]).astype(np.float32)
    x = x[rng.permutation(x.size)][:n]
    if n >= 6:
        x[-6:] = [np.nan, -np.inf, 3e-39, -97.0, 16.7, 0.0]  # the scalar tail too
    model, _ = one_op_model(op, [x], [(x.shape, "float32")])
    assert_builtin_bits(model, [x], fast_atol=1e-6)  # XLA's own forms on the fast path: an ulp or so away


@pytest.mark.parametrize("n", [100003, 7])  # Eigen's 4-float packets, then its scalar erfc (std::exp) on n % 4
def test_float_gelu_is_bit_exact(n):
    """reference_ops::Gelu is Eigen's rational erfc, not libm's: XLA's and glibc's erfc are an ulp off it in a
    third of the elements, which a dynamic-range FULLY_CONNECTED after it turned into 3e-3 of a Keras
    transformer's output.  Inputs over both of its branches (|x| / sqrt 2 either side of 1) and into the
    subnormal outputs (x below -13)."""
    from oracle import assert_builtin_bits, one_op_model
    rng = np.random.default_rng(n)
    x = np.concatenate([rng.uniform(-6, 6, 60000), rng.normal(0, 1.5, 20000), rng.uniform(-20, 20, 20000),
                        rng.uniform(-1, 1, 3000) * 1e-3, EDGES]).astype(np.float32)
    x = x[rng.permutation(x.size)][:n]
    x[-7:] = [np.nan, -np.inf, 3e-39, -13.7, 1.4142135, -1.4142137, 0.0]  # the scalar tail too
    model, _ = one_op_model("GELU", [x], [(x.shape, "float32")])
    assert_builtin_bits(model, [x], fast_atol=1e-6)


@pytest.mark.parametrize("shape", [(2, 5, 7, 3), (1, 112, 112, 16)])
def test_float_hard_swish_equals_the_builtin_kernel_bit_for_bit(shape):
    """The builtin kernel scales by 1/6 first in its blocks of 4, last in the tail (2 * 5 * 7 * 3 = 210: a tail
    of 2): the numpy reference and BUILTIN mode take that order."""
    from oracle import assert_builtin_bits

    x = (random_input(shape, seed=2) * 5).astype(np.float32)
    assert_builtin_bits(activation_model("HARD_SWISH", shape), [x])
