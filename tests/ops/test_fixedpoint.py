import math

import numpy as np
import pytest

from litegpu.ops import _fixedpoint as fp


@pytest.mark.parametrize("real, expected", [
    (0.0, (0, 0)),
    (1.0, (1 << 30, 1)),
    (0.5, (1 << 30, 0)),
    (0.75, (3 << 29, 0)),
    (3.0, (3 << 29, 2)),
    (1.0 - 2.0 ** -40, (1 << 30, 1)),   # q * 2^31 rounds up to 2^31: renormalised
    (2.0 ** -33, (0, 0)),               # shift below -31 flushes to zero
    (2.0 ** -31, (1 << 30, -30)),
])
def test_quantize_multiplier(real, expected):
    assert fp.quantize_multiplier(real) == expected


def test_quantize_multiplier_approximates_its_input():
    for real in np.random.default_rng(0).uniform(1e-6, 100, 200):
        m, shift = fp.quantize_multiplier(float(real))
        assert 1 << 30 <= m < 1 << 31
        assert math.isclose(m * 2.0 ** (shift - 31), real, rel_tol=2 ** -30)


@pytest.mark.parametrize("x, exponent, expected", [
    (5, 1, 3), (-5, 1, -3), (3, 1, 2), (-3, 1, -2), (4, 1, 2), (-4, 1, -2),
    (7, 2, 2), (-6, 2, -2), (6, 2, 2), (0, 5, 0), (12345, 0, 12345),
])
def test_rounding_divide_by_pot_rounds_half_away_from_zero(x, exponent, expected):
    assert int(fp.rounding_divide_by_pot(np, x, exponent)) == expected


@pytest.mark.parametrize("a, b, expected", [
    (3, 1 << 30, 2),            # 1.5 rounds up
    (-3, 1 << 30, -1),          # -1.5 rounds up too (the nudge is asymmetric)
    (1 << 30, 1 << 30, 1 << 29),
    (fp.INT32_MIN, fp.INT32_MIN, fp.INT32_MAX),   # the one overflowing case saturates
    (fp.INT32_MIN, fp.INT32_MAX, -fp.INT32_MAX),
])
def test_saturating_rounding_doubling_high_mul(a, b, expected):
    assert int(fp.saturating_rounding_doubling_high_mul(np, a, b)) == expected


@pytest.mark.parametrize("x, multiplier, shift, expected", [
    (3, 1 << 30, 0, 2),
    (5, 1 << 30, -1, 2),        # 1.25 -> 2: the official kernel rounds twice
    (100, 1 << 30, 1, 100),
    (-100, 3 << 29, 2, -300),
    (1 << 19, 1 << 30, 12, -(1 << 30)),  # x << left_shift wraps to INT32_MIN as in C
])
def test_multiply_by_quantized_multiplier(x, multiplier, shift, expected):
    assert int(fp.multiply_by_quantized_multiplier(np, x, multiplier, shift)) == expected


@pytest.mark.parametrize("x, multiplier, shift, expected", [
    (3, 1 << 30, 0, 2), (-3, 1 << 30, 0, -1), (1 << 40, 1 << 30, -20, 1 << 19),
])
def test_multiply_by_quantized_multiplier_int64(x, multiplier, shift, expected):
    assert int(fp.multiply_by_quantized_multiplier_int64(np, x, multiplier, shift)) == expected


def test_per_channel_multipliers_broadcast():
    m, s = fp.quantize_multipliers([0.5, 0.25, 3.0])
    assert m.dtype == s.dtype == np.int32
    x = np.array([[10, 10, 10], [-7, -7, -7]])
    got = fp.multiply_by_quantized_multiplier(np, x, m, s)
    np.testing.assert_array_equal(got, [[5, 3, 30], [-3, -2, -21]])


@pytest.mark.parametrize("values, expected", [
    ([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, -0.49999997, 3.0, -0.0], [1, 2, 3, -1, -3, 0, 0, 3, 0]),
])
def test_round_half_away_from_zero(values, expected):
    got = fp.round_half_away_from_zero(np, np.array(values, np.float32))
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, expected)


def test_float_to_int32_like_x86():
    x = np.array([1.0, -5.0, np.nan, np.inf, -np.inf, 3e9, -3e9, 2.0 ** 31 - 128], np.float32)
    got = fp.float_to_int32_like_x86(np, x)
    np.testing.assert_array_equal(got, [1, -5] + [fp.INT32_MIN] * 5 + [2 ** 31 - 128])


def test_jax_agrees_with_numpy():
    from litegpu.backends.xla.device import jax_module

    jnp = jax_module().numpy
    rng = np.random.default_rng(3)
    x = rng.integers(-40000, 40000, 500)
    m, s = fp.quantize_multipliers(rng.uniform(1e-4, 8, 500))
    want = fp.multiply_by_quantized_multiplier(np, x, m, s)
    got = fp.multiply_by_quantized_multiplier(jnp, jnp.asarray(x), jnp.asarray(m), jnp.asarray(s))
    np.testing.assert_array_equal(np.asarray(got), want)
    f = (rng.integers(-50, 50, 500) + 0.5).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(fp.round_half_away_from_zero(jnp, jnp.asarray(f))),
                                  fp.round_half_away_from_zero(np, f))


def test_row_quantization_under_xla_divides_as_c_does():
    """AsymmetricQuantizeFloats divides in double; rows whose two zero-point candidates straddle -0.5 by 1e-14
    got a zero point one off under XLA CPU, which had turned range / 255.0 into a multiplication by the rounded
    reciprocal, and rmin / scale and rmax / scale into multiplications by one reciprocal (a real-width int4
    block-256 prefill: 5 % of its KV cache off the builtin kernels)."""
    from litegpu.backends.xla.device import jax_module
    from litegpu.ops import _quantized as q

    jax = jax_module()
    high = np.float32(11.293918)
    row = np.linspace(-high, high, 512, dtype=np.float32)
    rows = (row[None, :] * np.linspace(0.5, 1, 32, dtype=np.float32)[:, None]).astype(np.float32)
    want = q.quantize_rows(np, rows, True)
    with fp.exact_divisions():  # as XLA CPU programs are traced
        got = jax.jit(lambda v: q.quantize_rows(jax.numpy, v, True))(rows)
        quotients = jax.jit(lambda v: fp.divide_f64_exactly(jax.numpy, v, 255.0))(rows.astype(np.float64))
    for name, g, w in zip(("values", "scales", "zero points"), got, want):
        np.testing.assert_array_equal(np.asarray(g), w, err_msg=name)
    np.testing.assert_array_equal(np.asarray(quotients), rows.astype(np.float64) / 255.0)
