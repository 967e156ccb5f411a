import numpy as np
import pytest

from litegpu.backends import ReferenceBackend
from litegpu.errors import ModelExecutionError
from litegpu.ir import read_model
from litegpu.ir.builder import ModelBuilder, quantization
from litegpu.ir.save import to_bytes
from litegpu.ops import Target, find
from oracle import assert_close, check_op_model, litert, run_official, run_ours, run_ours_builtin, same_bits


def run_official_reference_kernels(data, inputs):
    """The official interpreter with its reference kernels (BUILTIN_REF)."""
    interp = litert.Interpreter(model_content=data,
                                experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF)
    interp.allocate_tensors()
    for d, x in zip(interp.get_input_details(), inputs):
        interp.set_tensor(d["index"], x)
    interp.invoke()
    return [interp.get_tensor(d["index"]) for d in interp.get_output_details()]


def check_exact_against_reference_kernels(model, inputs):
    """Exact agreement with the official reference kernels; close to the default (optimized) ones:
    their x86 SIMD blocks round exact halves to even when quantizing, requantize 8-bit values
    with a single rounding instead of two, and dequantize as ``q * scale - zero_point * scale``."""
    data = to_bytes(model)
    expected = run_official_reference_kernels(data, inputs)
    ours = read_model(data)
    for xla in (False, True):
        for got, want in zip(run_ours(ours, inputs, xla), expected):
            assert_close(got, want, 0, 0, "xla" if xla else "reference")
    check_op_model(model, inputs, int_atol=1)


def one_op(name, x_shape, x_dtype, y_dtype, x_quant=None, y_quant=None, constant=None):
    b = ModelBuilder()
    if constant is None:
        x = b.input("x", x_shape, x_dtype, quantization=x_quant)
    else:
        x = b.constant("x", constant, x_dtype, quantization=x_quant)
    y = b.tensor("y", x_shape, y_dtype, quantization=y_quant)
    b.op(name, [x], [y])
    b.output(y)
    return b.build()


def ints(shape, dtype, seed=0):
    info = np.iinfo(dtype)
    return np.random.default_rng(seed).integers(info.min, info.max, shape, endpoint=True).astype(dtype)


# ---- DEQUANTIZE ---------------------------------------------------------------

@pytest.mark.parametrize("dtype, scale, zero_point", [
    ("int8", 0.05, 0), ("int8", 0.3721, -17), ("uint8", 0.0039, 128), ("uint8", 1.7, 3),
    ("int16", 0.00012, 0), ("int16", 2.5e-5, 0),
])
@pytest.mark.parametrize("shape", [(2, 3, 5), (17,), (1,)])
def test_dequantize_per_tensor(dtype, scale, zero_point, shape):
    model = one_op("DEQUANTIZE", shape, dtype, "float32", quantization(scale, zero_point))
    check_exact_against_reference_kernels(model, [ints(shape, dtype)])


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_dequantize_per_channel(dtype, axis):
    shape = (3, 4, 5)
    rng = np.random.default_rng(axis)
    scales = rng.uniform(0.001, 2, shape[axis])
    zps = rng.integers(-5, 5, shape[axis]) + (128 if dtype == "uint8" else 0)
    model = one_op("DEQUANTIZE", shape, dtype, "float32", quantization(scales, zps, axis=axis))
    check_exact_against_reference_kernels(model, [ints(shape, dtype, axis)])


def dequantize_then_add(shape, dtype, quant, weights=None):
    b = ModelBuilder()
    q = b.input("q", shape, dtype, quantization=quant) if weights is None else \
        b.constant("q", weights, dtype, quantization=quant)
    x, real, y = b.input("x", shape), b.tensor("real", shape), b.tensor("y", shape)
    b.op("DEQUANTIZE", [q], [real])
    b.op("ADD", [real, x], [y])
    b.output(y)
    return b.build()


@pytest.mark.parametrize("dtype, scale, zero_point", [("int8", 0.3721, -17), ("uint8", 0.0039, 128), ("int8", 0.05, 0)])
@pytest.mark.parametrize("where", ["run time", "weights (folded at load)"])
def test_dequantize_in_builtin_mode_is_the_builtin_kernel_bit_for_bit(dtype, scale, zero_point, where):
    """The builtin kernels' per-tensor DEQUANTIZE (their optimized kernel's blocks of 8 as ``q * scale`` plus
    ``-zero_point * scale``, each rounded; the tail as the reference kernel) in BUILTIN mode, bit for bit, and
    the ADD reading it not fused with its product into a multiply-add (an ulp off in a third of the values)."""
    shape = (5, 201)  # 125 blocks of 8 and a tail of 5
    q = ints(shape, dtype)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    model = dequantize_then_add(shape, dtype, quantization(scale, zero_point), None if where == "run time" else q)
    inputs = [q, x] if where == "run time" else [x]
    want = run_official(to_bytes(model), inputs)[0]
    same = same_bits(run_ours_builtin(model, inputs)[0], want)
    assert same.all(), f"{int((~same).sum())} of {same.size} values differ"


def test_dequantize_float16_weights():
    w = np.random.default_rng(0).standard_normal((300, 4)).astype(np.float16)  # big: an XLA parameter
    b = ModelBuilder()
    x = b.input("x", (300, 4))
    c = b.constant("w16", w)
    wf = b.tensor("w", (300, 4))
    y = b.tensor("y", (300, 4))
    b.op("DEQUANTIZE", [c], [wf])
    b.op("ADD", [x, wf], [y])
    b.output(y)
    x_in = np.zeros((300, 4), np.float32)
    got = check_op_model(b.build(), [x_in], rtol=0, atol=0)[0]
    np.testing.assert_array_equal(got, w.astype(np.float32))


def test_dequantize_float16_input():
    x = np.array([[0.1, -65504, 6e-8, np.inf], [np.nan, 1.0, -0.0, 3.14]], np.float16)
    check_op_model(one_op("DEQUANTIZE", x.shape, "float16", "float32"), [x], rtol=0, atol=0)


def test_dequantize_int4_constant_per_channel():
    w = np.random.default_rng(0).integers(-8, 8, (4, 6)).astype(np.int8)
    model = one_op("DEQUANTIZE", w.shape, "int4", "float32", quantization([0.5, 0.25, 0.1, 2.0], 0), constant=w)
    got = check_op_model(model, [], rtol=0, atol=0)[0]
    np.testing.assert_allclose(got, w * np.array([[0.5], [0.25], [0.1], [2.0]], np.float32), rtol=1e-7)


def test_dequantize_int16_needs_zero_point_zero():
    model = one_op("DEQUANTIZE", (3,), "int16", "float32", quantization(0.1, 7))
    with pytest.raises(ModelExecutionError, match=r"DEQUANTIZE \(#0\).*zero point"):
        ReferenceBackend(model).run([np.zeros(3, np.int16)])


def test_dequantize_without_scale_names_the_op():
    model = one_op("DEQUANTIZE", (3,), "int8", "float32")
    with pytest.raises(ModelExecutionError, match=r"DEQUANTIZE \(#0\).*no quantization scale"):
        ReferenceBackend(model).run([np.zeros(3, np.int8)])


# ---- QUANTIZE from float -------------------------------------------------------

def halves_and_extremes(scale, zero_point, n=50, seed=0):
    """Values on the exact rounding boundaries (x / scale = k + 0.5) and their neighbours."""
    rng = np.random.default_rng(seed)
    k = rng.integers(-300, 300, n) - zero_point
    mid = ((k + 0.5) * np.float64(np.float32(scale))).astype(np.float32)
    return np.concatenate([mid, np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(-np.inf)),
                           rng.uniform(-1000, 1000, 40).astype(np.float32),
                           np.array([0, -0.0, 1e-30, 3e9, -3e9, 1e38, -1e38], np.float32)])


@pytest.mark.parametrize("dtype, scale, zero_point", [
    ("int8", 0.5, 0), ("int8", 0.0371, -7), ("int8", 1.3, 100), ("uint8", 0.25, 128), ("uint8", 0.019, 3),
    ("int16", 0.001, 0), ("int16", 0.37, 0),
])
def test_quantize_float_per_tensor(dtype, scale, zero_point):
    x = halves_and_extremes(scale, zero_point)
    model = one_op("QUANTIZE", x.shape, "float32", dtype, y_quant=quantization(scale, zero_point))
    check_exact_against_reference_kernels(model, [x])


@pytest.mark.parametrize("dtype, zero_point", [("int8", -5), ("int8", 5), ("uint8", 100), ("int16", 0)])
def test_quantize_non_finite_follows_the_official_int32_cast(dtype, zero_point):
    # The official kernel casts to int32 before adding the zero point: NaN and +inf
    # become INT32_MIN, and a negative zero point wraps that around to the maximum.
    x = np.array([np.inf, -np.inf, np.nan, 2.2e9, -2.2e9, 1.0], np.float32)
    model = one_op("QUANTIZE", x.shape, "float32", dtype, y_quant=quantization(0.5, zero_point))
    check_exact_against_reference_kernels(model, [x])


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16"])
@pytest.mark.parametrize("axis", [0, 2])
def test_quantize_float_per_channel(dtype, axis):
    shape = (3, 2, 4)
    scales = np.array([0.5, 0.25, 0.1, 0.037][:shape[axis]])
    zps = 0 if dtype == "int16" else [1, -2, 3, 0][:shape[axis]]
    if dtype == "uint8":
        zps = [128, 100, 3, 7][:shape[axis]]
    x = np.random.default_rng(axis).integers(-80, 80, shape).astype(np.float32) * 0.125
    model = one_op("QUANTIZE", shape, "float32", dtype, y_quant=quantization(scales, zps, axis=axis))
    check_exact_against_reference_kernels(model, [x])


# ---- QUANTIZE between quantized types (fixed-point requantization) ----------

REQUANTIZE_CASES = [
    ("int8", "int8"), ("int8", "uint8"), ("uint8", "int8"), ("uint8", "uint8"),
    ("int16", "int8"), ("int16", "int16"), ("int16", "int32"), ("int32", "int8"), ("int32", "int16"),
]


def zero_point_for(dtype, rng):
    if dtype in ("int16", "int32"):
        return 0
    return int(rng.integers(0, 255)) if dtype == "uint8" else int(rng.integers(-128, 127))


@pytest.mark.parametrize("src, dst", REQUANTIZE_CASES)
@pytest.mark.parametrize("ratio", [0.013, 0.5, 0.77, 1.0, 1.9, 7.3])
def test_requantize(src, dst, ratio):
    rng = np.random.default_rng(int(ratio * 1000))
    in_scale = 0.02
    in_zp, out_zp = zero_point_for(src, rng), zero_point_for(dst, rng)
    if (src, dst) == ("int16", "int16"):
        in_zp = out_zp = 0
    x = ints((6, 50), np.int8 if src == "int8" else np.uint8 if src == "uint8" else np.int16)
    if src == "int32":
        x = rng.integers(-3000, 3000, (6, 50)).astype(np.int32)
    model = one_op("QUANTIZE", x.shape, src, dst, quantization(in_scale, in_zp),
                   quantization(in_scale / ratio, out_zp))
    if src in ("int8", "uint8"):
        # the 8-bit requantization of the builtin (optimized) kernels rounds half up, unlike BUILTIN_REF's
        check_op_model(model, [x])
    else:
        check_exact_against_reference_kernels(model, [x])


def test_requantize_shift_by_128_between_int8_and_uint8():
    x = ints((300,), np.int8)
    model = one_op("QUANTIZE", x.shape, "int8", "uint8", quantization(0.1, -3), quantization(0.1, 125))
    got = check_op_model(model, [x])[0]
    np.testing.assert_array_equal(got, (x.astype(np.int32) + 128).astype(np.uint8))


@pytest.mark.parametrize("src, dst", [("float32", "int32"), ("int8", "int16"), ("uint8", "int32"),
                                      ("int32", "int32"), ("float16", "int8")])
def test_quantize_unsupported_type_pairs_are_reported(src, dst):
    model = one_op("QUANTIZE", (3,), src, dst, quantization(0.1, 0) if src != "float32" else None,
                   quantization(0.1, 0))
    sg = model.subgraphs[0]
    reason = find("QUANTIZE").unsupported_reason(sg.operators[0], sg, Target.XLA_CPU)
    assert reason and src in reason


# --- requantization over its type pairs and scale ratios -------------------------------------------
# Ratios below 1/2 put ties on the right shift, where the 8-bit kernel's half-up rounding and gemmlowp's
# half-away-from-zero rounding differ by one unit (a quarter of the values at 0.37).

REQUANTIZE_PAIRS = [("int8", "int8"), ("uint8", "uint8"), ("int8", "uint8"), ("uint8", "int8"),
                    ("int16", "int16"), ("int16", "int8"), ("int16", "int32"), ("int32", "int8"), ("int32", "int16")]
RATIOS = [0.003, 0.06, 0.11, 0.26, 0.37, 0.5, 0.7, 1.0, 1.3, 1.9, 3.7]
ZERO_POINTS = {"int8": -5, "uint8": 130, "int16": 0, "int32": 0}


@pytest.mark.parametrize("ratio", RATIOS)
@pytest.mark.parametrize("src,dst", REQUANTIZE_PAIRS)
def test_requantization_matches_official_bit_for_bit(src, dst, ratio):
    from oracle import full_range, one_op_model

    x = full_range((2048,), src, 4) if src != "int32" else \
        np.random.default_rng(4).integers(-200_000, 200_000, 2048).astype(np.int32)
    in_scale = 0.05
    in_zero_point = ZERO_POINTS[src] if src != dst else 3 * (src != "int16")
    model, feeds = one_op_model("QUANTIZE", [x], [((2048,), dst)], input_quant=[quantization(in_scale, in_zero_point)],
                                output_quant=quantization(in_scale / ratio, ZERO_POINTS[dst]))
    check_op_model(model, feeds)


def test_a_run_time_dequantize_stands_apart_from_its_consumers_only_when_traced_for_iree():
    """IREE 3.13 computed a run-time DEQUANTIZE fused into the matrix product reading it wrongly: traced for IREE
    (``without_xla_steering``) its result is behind an optimization barrier; XLA's programs have none."""
    import jax
    import jax.numpy as jnp

    from litegpu.backends.xla.backend import XlaBackend
    from litegpu.ir.builder import ModelBuilder, quantization
    from litegpu.ops._common import without_xla_steering

    b = ModelBuilder()
    q = b.input("q", (2, 4), "int8", quantization=quantization([0.5], [3]))
    f = b.tensor("f", (2, 4))
    b.op("DEQUANTIZE", [q], [f])
    b.output(f)
    backend = XlaBackend(b.build())
    spec = [jax.ShapeDtypeStruct((2, 4), jnp.int8)]

    def text() -> str:  # the traced program's StableHLO
        return jax.jit(lambda x: backend.trace(backend.params, {}, [x])[0]).lower(*spec).as_text()

    assert "optimization_barrier" not in text()
    with without_xla_steering():
        assert "optimization_barrier" in text()
    x = np.array([[0, 1, 2, 3], [-128, 127, 5, 6]], np.int8)
    np.testing.assert_array_equal(np.asarray(backend.run([x])[0]), (x.astype(np.float32) - 3) * 0.5)
