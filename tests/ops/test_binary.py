import numpy as np
import pytest

from litegpu.backends import ReferenceBackend
from litegpu.errors import ModelExecutionError
from litegpu.ir import read_model
from litegpu.ir.builder import ModelBuilder
from litegpu.ir.save import to_bytes
from oracle import check_op_model, random_input, run_official

RANK6_BROADCAST = ((1, 1, 1, 1, 1, 5), (2, 3, 1, 4, 1, 1))
SHAPE_PAIRS = [
    ((), ()), ((), (2, 3)), ((3,), ()), ((1,), (5,)), ((2, 3), (2, 3)), ((2, 1, 3), (4, 1)),
    ((4, 1, 1, 3), (1, 2, 5, 1)), RANK6_BROADCAST, ((0, 3), (1, 3)), ((0, 3), (0, 3)),
]


def binary_model(op, shapes, dtype, *, n_inputs=2, **options):
    b = ModelBuilder()
    xs = [b.input(f"x{i}", s, dtype) for i, s in enumerate(shapes[:n_inputs])]
    y = b.tensor("y", np.broadcast_shapes(*shapes), dtype)
    b.op(op, xs, [y], **options)
    b.output(y)
    return b.build()


def operands(op, shapes, dtype, seed=0):
    """Inputs in each op's domain: nonzero divisors, non-negative integer exponents, positive float bases."""
    x = random_input(shapes[0], dtype, seed=seed)
    y = random_input(shapes[1], dtype, seed=seed + 1)
    is_int = np.dtype(dtype).kind == "i"
    if op in ("DIV", "FLOOR_DIV", "FLOOR_MOD"):
        y = np.where(y == 0, np.asarray(3, dtype), y).astype(dtype)
        if not is_int:  # keep quotients away from integer boundaries where floor() is ill-conditioned
            y = np.where(np.abs(y) < 0.25, np.asarray(0.5, dtype), y).astype(dtype)
    if op == "POW":
        if is_int:
            x = random_input(shapes[0], dtype, seed=seed, low=-0.4, high=0.4)
            y = random_input(shapes[1], dtype, seed=seed + 1, low=0, high=0.5)
        else:
            x = random_input(shapes[0], dtype, seed=seed, low=0.1, high=3)
    return [x, y]


DTYPES = {
    "ADD": ["float32", "float16", "int32", "int64"],
    "SUB": ["float32", "int32", "int64"],
    "MUL": ["float32", "float16", "int32", "int64"],
    "DIV": ["float32", "int32"],
    "POW": ["float32", "int32"],
    "MAXIMUM": ["float32", "float16", "int16", "int32", "int64"],
    "MINIMUM": ["float32", "float16", "int16", "int32", "int64"],
    "SQUARED_DIFFERENCE": ["float32", "int32"],
    "FLOOR_DIV": ["float32", "int8", "int16", "int32"],
    "FLOOR_MOD": ["float32", "int8", "int16", "int32", "int64"],
    "ATAN2": ["float32", "float16", "float64"],
}


def tolerance(dtype):
    return {"rtol": 2e-3, "atol": 2e-3} if dtype == "float16" else {}


@pytest.mark.parametrize("op,dtype", [(op, d) for op, ds in DTYPES.items() for d in ds])
def test_each_type_matches_official(op, dtype):
    shapes = ((2, 4, 3), (2, 4, 3)) if op == "ATAN2" else ((2, 1, 3), (4, 1))
    check_op_model(binary_model(op, shapes, dtype), operands(op, shapes, dtype), **tolerance(dtype))


@pytest.mark.parametrize("shapes", SHAPE_PAIRS, ids=str)
@pytest.mark.parametrize("op,dtype", [("ADD", "float32"), ("DIV", "float32"), ("FLOOR_MOD", "int32"),
                                      ("MAXIMUM", "float32"), ("POW", "float32")])
def test_broadcasting_shapes_match_official(op, dtype, shapes):
    check_op_model(binary_model(op, shapes, dtype), operands(op, shapes, dtype, seed=3))


@pytest.mark.parametrize("activation", ["RELU", "RELU6", "RELU_N1_TO_1"])
@pytest.mark.parametrize("op,dtype", [("ADD", "float32"), ("SUB", "float32"), ("MUL", "float32"),
                                      ("DIV", "float32"), ("ADD", "int32"), ("DIV", "int32")])
def test_fused_activation_matches_official(op, dtype, activation):
    shapes = ((3, 4), (4,))
    xs = operands(op, shapes, dtype, seed=5)
    check_op_model(binary_model(op, shapes, dtype, fused_activation_function=activation), xs)


def pair(op, x, y, dtype="float32"):
    x, y = np.asarray(x, dtype), np.asarray(y, dtype)
    return binary_model(op, (x.shape, y.shape), dtype), [x, y]


INF, NAN, BIG = np.inf, np.nan, 3e38
SPECIAL_CASES = {
    # float ADD/SUB/MUL/DIV clamp to +-FLT_MAX: the activation range of "NONE"
    "add_overflow": ("ADD", [INF, -INF, BIG, NAN, BIG], [1, 1, BIG, 1, -BIG]),
    "sub_overflow": ("SUB", [INF, -INF, -BIG, NAN], [1, 1, BIG, 1]),
    "mul_overflow": ("MUL", [INF, BIG, BIG, 0], [1, 2, -2, INF]),
    "div_by_zero_float": ("DIV", [1, -1, 0, INF], [0, 0, 0, 2]),
    "squared_difference_no_clamp": ("SQUARED_DIFFERENCE", [INF, BIG, NAN], [1, -BIG, 0]),
    "maximum_nan_goes_to_second": ("MAXIMUM", [NAN, 1, NAN, -0.0], [1, NAN, NAN, 0.0]),
    "minimum_nan_goes_to_second": ("MINIMUM", [NAN, 1, NAN, 2], [1, NAN, NAN, -INF]),
    "floor_mod_float_signs": ("FLOOR_MOD", [7.5, -7.5, 7.5, -7.5, 0, 6, INF, 1], [2, 2, -2, -2, 3, 3, 1, 0]),
    "floor_div_float_signs": ("FLOOR_DIV", [7.5, -7.5, 7.5, -7.5, 0, 6, -1e-7], [2, 2, -2, -2, 3, 3, 5]),
    "pow_float_special": ("POW", [2, -3, -2, 0, 0, INF, 1], [0.5, 3, 0.5, 0, -1, -1, NAN]),
    "atan2_quadrants": ("ATAN2", [1, 1, -1, -1, 0, 0, INF], [1, -1, 1, -1, 0, -1, 1]),
}
INT_CASES = {
    "div_truncates": ("DIV", [7, -7, 7, -7, 0, 5, 6, -6], [2, 2, -2, -2, 3, -5, 4, 4]),
    "floor_div_rounds_down": ("FLOOR_DIV", [7, -7, 7, -7, 0, 5, 6, -6], [2, 2, -2, -2, 3, -5, 4, 4]),
    "floor_mod_takes_divisor_sign": ("FLOOR_MOD", [7, -7, 7, -7, 0, 5, 6, -6], [2, 2, -2, -2, 3, -5, 4, 4]),
    "pow_int_wraps": ("POW", [2, -3, 5, 0, 7, -1], [10, 3, 0, 0, 12, 7]),
    "add_int_wraps": ("ADD", [2**31 - 1, -2**31], [1, -1]),
}


@pytest.mark.parametrize("case", sorted(SPECIAL_CASES))
def test_float_special_values_match_official(case):
    op, x, y = SPECIAL_CASES[case]
    check_op_model(*pair(op, x, y))


@pytest.mark.parametrize("op", ["ADD", "MUL"])
def test_float16_overflow_clamps_to_float16_max_like_official(op):
    check_op_model(*pair(op, [60000, INF, 1, -60000], [60000, 1, NAN, -60000], "float16"))


@pytest.mark.parametrize("case", sorted(INT_CASES))
def test_int_semantics_match_official(case):
    op, x, y = INT_CASES[case]
    check_op_model(*pair(op, x, y, "int32"))


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("dtype,shape", [("float32", (2, 3)), ("int32", (5,)), ("float32", ()),
                                         ("float32", (0, 2))])
def test_add_n_matches_official(n, dtype, shape):
    xs = [random_input(shape, dtype, seed=i) for i in range(n)]
    check_op_model(binary_model("ADD_N", [shape] * n, dtype, n_inputs=n), xs)


def test_add_n_clamps_overflow_like_official():
    xs = [np.array([BIG, INF, NAN], np.float32), np.array([BIG, 1, 1], np.float32)]
    check_op_model(binary_model("ADD_N", [(3,)] * 2, "float32"), xs)


ERROR_CASES = {
    "div_int_by_zero": ("DIV", "int32", [[4, 5], [1, 0]]),
    "floor_div_int_by_zero": ("FLOOR_DIV", "int32", [[4, 5], [0, 2]]),
    "floor_div_float_by_zero": ("FLOOR_DIV", "float32", [[4, 5], [0, 2]]),
    "floor_mod_int_by_zero": ("FLOOR_MOD", "int32", [[4, 5], [2, 0]]),
    "pow_negative_int_exponent": ("POW", "int32", [[4, 5], [2, -1]]),
    "atan2_shapes_differ": ("ATAN2", "float32", [[[1, 2], [3, 4]], [1, 2]]),
}


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_errors_where_official_fails(case):
    op, dtype, (x, y) = ERROR_CASES[case]
    x, y = np.asarray(x, dtype), np.asarray(y, dtype)
    b = ModelBuilder()
    ins = [b.input("x", x.shape, dtype), b.input("y", y.shape, dtype)]
    out = b.tensor("out", x.shape, dtype)
    b.op(op, ins, [out])
    b.output(out)
    data = to_bytes(b.build())
    with pytest.raises(RuntimeError):
        run_official(data, [x, y])
    with pytest.raises(ModelExecutionError, match=op):
        ReferenceBackend(read_model(data)).run([x, y])


def test_shapes_that_do_not_broadcast_are_an_error():
    model = binary_model("ADD", ((2, 3), (3,)), "float32")
    with pytest.raises(ModelExecutionError, match="do not broadcast"):
        ReferenceBackend(model).run([np.zeros((2, 3), np.float32), np.zeros((4,), np.float32)])


# --- quantized (int8 / uint8) ADD and MUL: the official integer kernels, exact ---------------

from litegpu.ir.builder import quantization  # noqa: E402

QUANTIZED_BINARY_CASES = [  # (x scale, zp), (y scale, zp), (out scale, zp), shapes
    ((0.05, -3), (0.05, -3), (0.1, 2), (2, 3, 4), (2, 3, 4)),
    ((0.013, 10), (0.2, -50), (0.07, -1), (1, 4, 4, 3), (1, 1, 1, 3)),
    ((0.5, 0), (0.004, 7), (0.02, -128), (3, 1), (1, 5)),
]


@pytest.mark.parametrize("op", ["ADD", "MUL"])
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("activation", ["NONE", "RELU6"])
@pytest.mark.parametrize("qx,qy,qo,sx,sy", QUANTIZED_BINARY_CASES)
def test_quantized_add_and_mul_match_official(op, dtype, activation, qx, qy, qo, sx, sy):
    offset = 128 if dtype == "uint8" else 0
    b = ModelBuilder()
    x = b.input("x", sx, dtype, quantization=quantization(qx[0], qx[1] + offset))
    y = b.input("y", sy, dtype, quantization=quantization(qy[0], qy[1] + offset))
    out = b.tensor("out", np.broadcast_shapes(sx, sy), dtype,
                   quantization=quantization(qo[0], min(qo[1] + offset, 255)))
    b.op(op, [x, y], [out], fused_activation_function=activation)
    b.output(out)
    check_op_model(b.build(), [random_input(sx, dtype, seed=1), random_input(sy, dtype, seed=2)])


# --- quantized SUB, int16 ADD / SUB, SQUARED_DIFFERENCE, MAXIMUM / MINIMUM ----------------------

def quantized_binary(op, dtype, qx, qy, qo, sx, sy, **options):
    b = ModelBuilder()
    x = b.input("x", sx, dtype, quantization=quantization(*qx))
    y = b.input("y", sy, dtype, quantization=quantization(*qy))
    out = b.tensor("out", np.broadcast_shapes(sx, sy), dtype, quantization=quantization(*qo))
    b.op(op, [x, y], [out], **options)
    b.output(out)
    return b.build()


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("activation", ["NONE", "RELU6"])
@pytest.mark.parametrize("qx,qy,qo,sx,sy", QUANTIZED_BINARY_CASES)
def test_quantized_sub_matches_official(dtype, activation, qx, qy, qo, sx, sy):
    offset = 128 if dtype == "uint8" else 0
    model = quantized_binary("SUB", dtype, (qx[0], qx[1] + offset), (qy[0], qy[1] + offset),
                             (qo[0], min(qo[1] + offset, 255)), sx, sy, fused_activation_function=activation)
    check_op_model(model, [random_input(sx, dtype, seed=1), random_input(sy, dtype, seed=2)])


INT16_SCALES = {  # x, y, output scales (zero points 0)
    "general": (0.0007, 0.0011, 0.002),
    "pot_second_finer": (2 ** -10, 2 ** -12, 2 ** -10),
    "pot_first_finer": (2 ** -13, 2 ** -10, 2 ** -10),
}


@pytest.mark.parametrize("pot_option", [True, False])
@pytest.mark.parametrize("scales", sorted(INT16_SCALES))
@pytest.mark.parametrize("op", ["ADD", "SUB"])
def test_int16_add_and_sub_match_official(op, scales, pot_option):
    # power-of-two scales take the saturating Add16 / Sub16 kernel unless pot_scale_int16 is off;
    # the official int16 power-of-two ADD aborts when it broadcasts, so ADD keeps one shape
    sx, sy = ((2, 3, 4), (2, 3, 4)) if op == "ADD" else ((2, 3, 4), (3, 1))
    s1, s2, so = INT16_SCALES[scales]
    activation = "RELU" if pot_option else "NONE"
    model = quantized_binary(op, "int16", (s1, 0), (s2, 0), (so, 0), sx, sy, pot_scale_int16=pot_option,
                             fused_activation_function=activation)
    xs = [random_input(sx, "int16", seed=1, low=-4000, high=4000), random_input(sy, "int16", seed=2, low=-4000, high=4000)]
    check_op_model(model, xs)


RESNET50_16X8_ADD = (0.0002946257882285863, 0.00023227925703395158, 0.0002946257882285863)


@pytest.mark.parametrize("scales,x,y", [
    (RESNET50_16X8_ADD, [-4650], [6226]),  # a 16x8 ResNet50's residual ADD: the scalar path rounds twice
    ((1.0, 1.5 * 2 ** -15, 2 ** -13), [0], [-2, 2, -6, 6, -10, -3, -1, 1, -14, 14, -18, 18, 10]),  # no shift
    ((1.0, 1.5 * 2 ** -17, 2 ** -13), [0], [-5, -4, -3, -2, -1, 1, 2, 3, 5, 7, -7, 9, -9]),  # a right shift first
])
def test_int16_add_rescales_whole_blocks_of_16_as_the_vector_path_does(scales, x, y):
    # the first 32 of 40 elements take the optimized kernel's vector path, the last 8 its scalar one; each case
    # gives different numbers on the two paths (before: the scalar path everywhere, 1 LSB off in the blocks)
    s1, s2, so = scales
    model = quantized_binary("ADD", "int16", (s1, 0), (s2, 0), (so, 0), (40,), (40,), pot_scale_int16=False)
    check_op_model(model, [np.resize(x, 40).astype(np.int16), np.resize(y, 40).astype(np.int16)])


DENSENET121_INT8_ADD = ((0.07964323461055756, -1), (0.037775859236717224, 6), (0.027179855853319168, -128))


@pytest.mark.parametrize("x_shape,y_shape", [((1, 3, 20), (1, 3, 20)), ((1, 3, 20), (1, 1, 20)),
                                             ((1, 1, 20), (1, 3, 20)), ((2, 3, 20), (20,))])
def test_int8_add_rescales_whole_blocks_of_16_of_each_row_as_the_vector_path_does(x_shape, y_shape):
    # 55 + 25 at a full-integer DenseNet121's per-channel ADD: 62 on the vector path, 63 on the scalar one; without
    # broadcast the blocks run over the whole tensor (48 of 60 elements), with a row broadcast over each row (16
    # of 20)
    qx, qy, qo = DENSENET121_INT8_ADD
    model = quantized_binary("ADD", "int8", qx, qy, qo, x_shape, y_shape, fused_activation_function="RELU")
    check_op_model(model, [np.full(x_shape, 55, np.int8), np.full(y_shape, 25, np.int8)])


# four pairs (float32 scales) that the two-shift vector path (a truncating shift after the high multiply) and the scalar path (a
# rounding one) take to neighbouring outputs at these scales, e.g. -17 + -16: -15 in a block of 8, -14 past it
TWO_SHIFT_ADD = ((0.0312, -18), (0.0345, -20), (0.0376, -19))
TWO_SHIFT_PAIRS = ([-17, -13, -9, -5], [-16, 0, 16, 32])


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("x_shape,y_shape", [((4, 1), (4, 12)), ((4, 12), (4, 1)), ((1,), (4, 12)),
                                             ((4, 12), (4, 12)), ((4, 1, 12), (4, 3, 12))])
def test_8bit_add_takes_the_vector_paths_blocks_of_8_with_two_shifts(dtype, x_shape, y_shape):
    # a scalar or last-dimension broadcast runs AddScalarBroadcast (int8 and uint8: blocks of 8 of each row), uint8
    # without it AddElementwise (blocks of 8); both rescale with two shifts, where int8's AddElementwise (blocks of
    # 16) takes one; before, the scalar path everywhere: 1 LSB off in the blocks
    offset = 128 if dtype == "uint8" else 0
    qx, qy, qo = ((s, z + offset) for s, z in TWO_SHIFT_ADD)
    model = quantized_binary("ADD", dtype, qx, qy, qo, x_shape, y_shape)
    pairs = [np.array(v) + offset for v in TWO_SHIFT_PAIRS]  # the k-th pair along the first dimension
    if 1 in (x_shape[0], y_shape[0]):
        pairs = [v[:1] for v in pairs]
    x, y = (np.broadcast_to(v.reshape(-1, *[1] * (len(shape) - 1)), shape).astype(dtype)
            for v, shape in zip(pairs, (x_shape, y_shape)))
    check_op_model(model, [x, y])


@pytest.mark.parametrize("x_shape,y_shape", [((20,), (20,)), ((2, 10), (2, 1))])
def test_8bit_add_vector_path_wraps_at_16_bits_like_official(x_shape, y_shape):
    # an output scale far finer than the inputs': the vector path narrows the sum to int16 (wrapping) where the
    # scalar path saturates (127 + 127 at 0.5 is 127,000 units of 0.001)
    model = quantized_binary("ADD", "int8", (0.5, 0), (0.5, 0), (0.001, 0), x_shape, y_shape)
    check_op_model(model, [np.full(x_shape, 127, np.int8), np.full(y_shape, 127, np.int8)])


def test_int16_pot_add_saturates_like_official():
    x = np.array([32767, -32768, 30000, -30000, 5], np.int16)
    y = np.array([32767, -32768, 30000, 1, -7], np.int16)
    check_op_model(quantized_binary("ADD", "int16", (2 ** -12, 0), (2 ** -13, 0), (2 ** -12, 0), (5,), (5,)), [x, y])


@pytest.mark.parametrize("qx,qy,qo,sx,sy", QUANTIZED_BINARY_CASES)
def test_int8_squared_difference_matches_official(qx, qy, qo, sx, sy):
    model = quantized_binary("SQUARED_DIFFERENCE", "int8", qx, qy, (qo[0] * 3, qo[1]), sx, sy)
    check_op_model(model, [random_input(sx, "int8", seed=1, low=-13, high=13),
                           random_input(sy, "int8", seed=2, low=-13, high=13)])


@pytest.mark.parametrize("op", ["MAXIMUM", "MINIMUM"])
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_quantized_maximum_minimum_compare_raw_values_like_official(op, dtype):
    # different input scales: the official kernel ignores quantization and compares raw integers
    offset = 128 if dtype == "uint8" else 0
    model = quantized_binary(op, dtype, (0.05, 3 + offset), (0.2, -5 + offset), (0.1, offset), (2, 3, 4), (3, 1))
    check_op_model(model, [random_input((2, 3, 4), dtype, seed=1, low=-13, high=13),
                           random_input((3, 1), dtype, seed=2, low=-13, high=13)])


# --- int16 MUL (16x8 quantization): symmetric, MultiplyByQuantizedMultiplier on the int32 product ----

INT16_MUL_SCALES = {  # x, y, output scales (zero points 0): rescale below and above 1
    "shrinking": (0.0007, 0.0011, 0.002),
    "growing": (0.01, 0.03, 1e-5),
    "pot": (2 ** -10, 2 ** -12, 2 ** -15),
}


@pytest.mark.parametrize("activation", ["NONE", "RELU", "RELU6"])
@pytest.mark.parametrize("shapes", [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (3, 1)), ((1, 4, 4, 8), (1, 1, 1, 8))], ids=str)
@pytest.mark.parametrize("scales", sorted(INT16_MUL_SCALES))
def test_int16_mul_matches_official(scales, shapes, activation):
    (sx, sy), (s1, s2, so) = shapes, INT16_MUL_SCALES[scales]
    model = quantized_binary("MUL", "int16", (s1, 0), (s2, 0), (so, 0), sx, sy, fused_activation_function=activation)
    xs = [random_input(sx, "int16", seed=1, low=-4000, high=4000), random_input(sy, "int16", seed=2, low=-4000, high=4000)]
    check_op_model(model, xs)


def test_int16_mul_extremes_saturate_like_official():
    # -32768 * -32768 = 2^30 is the largest product: still exact in int32
    x = np.array([32767, -32768, -32768, 30000, -1, 0], np.int16)
    y = np.array([32767, -32768, 32767, -30000, 1, 5], np.int16)
    check_op_model(quantized_binary("MUL", "int16", (0.001, 0), (0.002, 0), (0.01, 0), (6,), (6,)), [x, y])


def test_int16_mul_with_zero_point_is_refused_like_official():
    x = random_input((4,), "int16", seed=1)
    data = to_bytes(quantized_binary("MUL", "int16", (0.001, 3), (0.002, 0), (0.01, 0), (4,), (4,)))
    with pytest.raises(RuntimeError):
        run_official(data, [x, x])
    with pytest.raises(ModelExecutionError, match="MUL.*zero points 0"):
        ReferenceBackend(read_model(data)).run([x, x])


# --- quantized DIV (uint8 / int8 / int16): div.cc's fixed-point DivElementwise, exact ---------------

QUANTIZED_DIV_SCALES = {  # x, y, output (scale, zero point) for uint8; int8 zero points are 128 lower
    "moderate": ((0.05, 131), (0.02, 135), (0.1, 138)),
    "wide_ratio": ((0.5, 128), (0.003, 130), (0.9, 0)),
    # a tiny output multiplier: rounding shifts of 32 to 66 bits, past the int32 width
    "tiny_multiplier": ((1e-7, 125), (5.0, 135), (10.0, 118)),
}


def every_pair(dtype, divisor_zero_point):
    """All dividends (a column) and all divisors but the zero point (a row)."""
    values = np.arange(np.iinfo(dtype).min, np.iinfo(dtype).max + 1).astype(dtype)
    return values[:, None], values[values != divisor_zero_point]


@pytest.mark.parametrize("activation", ["NONE", "RELU6"])
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("scales", sorted(QUANTIZED_DIV_SCALES))
def test_quantized_div_every_pair_matches_official(scales, dtype, activation):
    offset = 0 if dtype == "uint8" else -128
    qx, qy, qo = ((s, z + offset) for s, z in QUANTIZED_DIV_SCALES[scales])
    x, y = every_pair(dtype, qy[1])
    # broadcast (BroadcastDivSlow) and elementwise (Div) over the same 255 * 256 pairs
    check_op_model(quantized_binary("DIV", dtype, qx, qy, qo, x.shape, y.shape, fused_activation_function=activation),
                   [x, y])
    x, y = np.broadcast_arrays(x, y)
    check_op_model(quantized_binary("DIV", dtype, qx, qy, qo, (x.size,), (x.size,)), [x.ravel(), y.ravel()])


@pytest.mark.parametrize("shapes", [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (3, 1)), ((4,), ()), ((1, 5), (3, 1))], ids=str)
def test_uint8_div_broadcasting_and_relu_match_official(shapes):
    sx, sy = shapes
    model = quantized_binary("DIV", "uint8", (0.05, 120), (0.01, 128), (0.04, 30), sx, sy, fused_activation_function="RELU")
    y = random_input(sy, "uint8", seed=2, low=0, high=25.5)
    y = np.where(y == 128, np.uint8(129), y).astype(np.uint8)  # the official kernel refuses zero divisors
    check_op_model(model, [random_input(sx, "uint8", seed=1, low=0, high=25.5), y])


def test_uint8_div_small_dividends_over_large_divisors_like_official():
    """The official rounding shift passes 32 bits for these: 0 / 200 comes out as zp + 1 and a tiny
    positive quotient saturates (gemmlowp's RoundingDivideByPOT with its count taken mod 32)."""
    x = np.array([3, 3, 4, 2, 4], np.uint8)
    y = np.array([207, 8, 255, 255, 100], np.uint8)
    got = check_op_model(quantized_binary("DIV", "uint8", (0.05, 3), (0.02, 7), (0.1, 10), (5,), (5,)), [x, y])[0]
    assert got[:3].tolist() == [11, 10, 255]


@pytest.mark.parametrize("scales", [((1e-3, 0), (2e-3, 0), (1e-3, 0)), ((3e-4, 5), (1e-2, -7), (2e-3, 11))], ids=str)
@pytest.mark.parametrize("shapes", [((512,), (512,)), ((64, 1), (64,))], ids=str)
def test_int16_div_matches_official(scales, shapes):
    (qx, qy, qo), (sx, sy) = scales, shapes
    x = random_input(sx, "int16", seed=1, low=-3276.8, high=3276.7)
    x.reshape(-1)[:3] = [0, 1, -1]
    for low, high in ((-3276.8, 3276.7), (-30, 30)):  # full range, then divisors near zero
        y = random_input(sy, "int16", seed=2, low=low, high=high)
        y = np.where(y == qy[1], np.int16(qy[1] + 1), y).astype(np.int16)
        check_op_model(quantized_binary("DIV", "int16", qx, qy, qo, sx, sy, fused_activation_function="RELU"), [x, y])


@pytest.mark.parametrize("dtype, zero_point", [("uint8", 7), ("int8", -3), ("int16", 0)])
def test_quantized_div_by_the_zero_point_fails_like_official(dtype, zero_point):
    """A divisor equal to its zero point is a real 0: the official Eval fails (CheckNonZero)."""
    x = np.array([4, 5, 6], dtype)
    y = np.array([9, zero_point, 1], dtype)
    data = to_bytes(quantized_binary("DIV", dtype, (0.01, 0), (0.02, zero_point), (0.01, 0), (3,), (3,)))
    with pytest.raises(RuntimeError, match="zero_point"):
        run_official(data, [x, y])
    with pytest.raises(ModelExecutionError, match="DIV.*division by 0"):
        ReferenceBackend(read_model(data)).run([x, y])


def test_quantized_div_with_a_huge_scale_ratio_is_refused():
    # the official final shift would be a left shift by a negative count (undefined behaviour)
    model = quantized_binary("DIV", "uint8", (10.0, 0), (1e-3, 0), (1e-3, 0), (2,), (2,))
    with pytest.raises(ModelExecutionError, match="too large"):
        ReferenceBackend(model).run([np.array([1, 2], np.uint8), np.array([3, 4], np.uint8)])
