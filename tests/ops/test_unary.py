import numpy as np
import pytest
from oracle import check_op_model, random_input

from litegpu.ir.builder import ModelBuilder

SHAPES = [(), (1,), (2, 3, 4), (1, 2, 1, 3, 1, 2), (0, 3)]
POSITIVE_DOMAIN = {"LOG", "SQRT", "RSQRT"}
DTYPES = {
    "ABS": ["float32", "int32"], "NEG": ["float32", "float16", "int32", "int64"], "EXP": ["float32"],
    "LOG": ["float32"], "SQRT": ["float32"], "RSQRT": ["float32"], "SQUARE": ["float32"],
    "SIN": ["float32", "float16"], "COS": ["float32", "float16"], "FLOOR": ["float32", "float16"],
    "CEIL": ["float32"], "ROUND": ["float32", "float16"], "SIGN": ["float32", "float64", "int32"],
    "ZEROS_LIKE": ["float32", "int32", "int64"],
}


def unary_model(op, shape, dtype, **options):
    b = ModelBuilder()
    x = b.input("x", shape, dtype)
    y = b.tensor("y", shape, dtype)
    b.op(op, [x], [y], **options)
    b.output(y)
    return b.build()


def operand(op, shape, dtype, seed=0):
    if op in POSITIVE_DOMAIN:
        return random_input(shape, dtype, seed=seed, low=0.01, high=5)
    if op == "ROUND":  # many exact .5 ties, both parities
        return (random_input(shape, "int32", seed=seed) / 4).astype(dtype)
    return random_input(shape, dtype, seed=seed)


def tolerance(dtype):
    return {"rtol": 2e-3, "atol": 2e-3} if dtype == "float16" else {}


@pytest.mark.parametrize("op,dtype", [(op, d) for op, ds in DTYPES.items() for d in ds])
def test_each_type_matches_official(op, dtype):
    shape = (3, 5)
    check_op_model(unary_model(op, shape, dtype), [operand(op, shape, dtype)], **tolerance(dtype))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("op", ["RSQRT", "NEG", "ROUND", "EXP"])
def test_shapes_match_official(op, shape):
    check_op_model(unary_model(op, shape, "float32"), [operand(op, shape, "float32", seed=7)])


SPECIAL = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-30, -2.5, 2.5, 0.5, -0.5, 1.5, 100.0], np.float32)


@pytest.mark.parametrize("op", sorted(op for op in DTYPES if op != "ZEROS_LIKE"))
def test_special_values_match_official(op):
    check_op_model(unary_model(op, SPECIAL.shape, "float32"), [SPECIAL])


def test_sin_cos_of_large_arguments_match_official():
    x = np.array([100.0, -250.5, 1000.25, 3.14159265], np.float32)
    for op in ("SIN", "COS"):
        check_op_model(unary_model(op, x.shape, "float32"), [x])


def test_int_abs_and_neg_wrap_at_the_minimum_like_official():
    x = np.array([np.iinfo(np.int32).min, -5, 0, 7], np.int32)
    for op in ("ABS", "NEG"):
        check_op_model(unary_model(op, x.shape, "int32"), [x])


# --- quantized ABS (int8 / int16) and LOG (int8), exact ------------------------------------------

from oracle import assert_reference_rejects, check_built, one_op_model

from litegpu.ir.builder import quantization

INT8_EVERY_VALUE = np.arange(-128, 128).reshape(4, 64).astype(np.int8)


@pytest.mark.parametrize("qin,qout", [((0.05, -10), (0.05, -10)), ((0.05, -10), (0.03, -100)), ((0.02, 0), (0.04, 0)),
                                      ((0.006, -128), (0.0035, 127)), ((0.1, 127), (0.01, -128))], ids=str)
def test_quantized_int8_abs_matches_official(qin, qout):
    x = INT8_EVERY_VALUE
    check_built(one_op_model("ABS", [x], [(x.shape, "int8", quantization(*qout))], input_quant=[quantization(*qin)]))


@pytest.mark.parametrize("scales", [(0.001, 0.001), (0.001, 0.0007), (0.002, 0.01)], ids=str)
def test_quantized_int16_abs_matches_official(scales):
    x = np.concatenate([[-32768, -32767, -1, 0, 1, 32767], np.linspace(-32768, 32767, 250).round()]).astype(np.int16)
    check_built(one_op_model("ABS", [x], [(x.shape, "int16", quantization(scales[1], 0))],
                             input_quant=[quantization(scales[0], 0)]))


def test_unquantized_int16_abs_matches_official():
    x = np.array([-32768, -32767, -5, 0, 7, 32767], np.int16)
    check_op_model(unary_model("ABS", x.shape, "int16"), [x])


@pytest.mark.parametrize("qin,qout", [((0.05, -10), (0.03, -100)), ((0.02, 0), (0.04, 0)), ((0.006, -128), (0.05, 127)),
                                      ((0.1, 127), (0.02, -128)), ((1.5, -3), (0.03, 20))], ids=str)
def test_quantized_int8_log_matches_official(qin, qout):
    x = INT8_EVERY_VALUE
    check_built(one_op_model("LOG", [x], [(x.shape, "int8", quantization(*qout))], input_quant=[quantization(*qin)]))


def test_quantized_int16_abs_needs_zero_points_of_zero():
    x = np.array([-3, 4], np.int16)
    built = one_op_model("ABS", [x], [(x.shape, "int16", quantization(0.1, 0))], input_quant=[quantization(0.1, 5)])
    assert_reference_rejects(built, "ABS")


def test_float_rsqrt_is_bit_exact():
    """RSQRT is 1.f / std::sqrt(f) in the builtin kernel (two roundings); XLA's rsqrt is an ulp off now and then,
    enough to move RMSNorm's output across an int8 rounding boundary of the hybrid layers after it."""
    from oracle import assert_builtin_bits
    x = (np.random.default_rng(0).random(50000) * 1000 + 1e-3).astype(np.float32)
    model, _ = one_op_model("RSQRT", [x], [(x.shape, "float32")])
    assert_builtin_bits(model, [x])


def test_float_exp_is_bit_exact():
    """EXP is reference_ops::Exp, std::exp per element: glibc's expf (subnormal results, +-inf, NaN too)."""
    from oracle import assert_builtin_bits
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-105, 89, 50000), rng.uniform(-1, 1, 2000),
                        [0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 88.72, 88.73, -103.97, -104, -87.5, 3e38, -3e38]])
    x = x.astype(np.float32)
    model, _ = one_op_model("EXP", [x], [(x.shape, "float32")])
    assert_builtin_bits(model, [x], fast_atol=1e-37)  # XLA's exp on the fast path: an ulp off, subnormals flushed


@pytest.mark.parametrize("op", ["SIN", "COS"])
def test_float_sin_and_cos_are_bit_exact(op):
    """SIN / COS are std::sin / std::cos per element: glibc's sinf / cosf (RoPE's angles in LLMs, whose ulps the
    hybrid layers after them can turn into int8 quantization steps); both range reductions (below and above 120)."""
    from oracle import assert_builtin_bits
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.uniform(-130, 130, 40000), rng.uniform(-1, 1, 4000), rng.uniform(-1e6, 1e6, 6000),
                        [0, -0.0, 1e-45, -1e-40, 2 ** -12, np.inf, -np.inf, np.nan, 119.99, 120, -120, 3e38]])
    x = x.astype(np.float32)
    model, _ = one_op_model(op, [x], [(x.shape, "float32")])
    assert_builtin_bits(model, [x], fast_exact=True)  # XLA's own sin / cos: glibc's bits too (measured)
