"""The builtin kernels' float32 LOGISTIC, TANH, EXP, GELU and SOFTMAX exponential, and their float sums in depth
order, bit for bit.

What the official x86-64 wheel (ai-edge-litert) computes, measured against it on every float32 of the ranges
that matter and on edge values (0, subnormals, +-inf, NaN, the clamps):

- Eigen is compiled for SSE: 4-float packets, no FMA (every product rounded before the add).  An element-wise
  Eigen expression over a contiguous tensor runs its packet function on the first ``n // 4 * 4`` elements and
  its scalar function on the last ``n % 4`` (tensors start 64-byte aligned in the official arena, so there is
  no unaligned head).
- LOGISTIC (optimized_ops::Logistic, ``scalar_logistic_op<float>``): packets clamp x at 16.6355324, halve it,
  exponentiate with a degree-5 Cephes polynomial, square, and return ``e / (1 + e)`` (0 below -104); the
  scalar tail is ``e = expf(min(x, 16.6355324)); e / (1 + e)``.
- TANH (optimized_ops::Tanh, Eigen's fast ``ptanh_float``, the same for packets and scalars): x clamped to
  +-7.90738964 (the value without FMA), ``(x + x^3 p(x^2)) / q(x^2)`` with a [9/8] rational approximation.
- EXP (reference_ops::Exp: ``std::exp`` per element): glibc's ``expf`` (a 32-entry table of 2^(k/32) and a
  cubic in double precision).  Its FMA variant is matched bit for bit by the double-precision evaluation below,
  which splits 1/ln2 so that the reduction ``x/ln2*32 - k`` is exact (checked on all 2.2e9 floats in
  (-103.97, 88.72) against this machine's glibc 2.36).
- SOFTMAX's exponential (optimized_ops::Softmax: ``out_mat.array().exp()``): Eigen's ``pexp_float`` of the
  release the wheel was built with (``floor(x log2(e) + 1/2)``, Cephes' two-part ln 2, a degree-6 polynomial,
  ``pldexp``); later Eigen releases round a handful of inputs differently (e.g. -25.993019f).
- GELU (reference_ops::Gelu, ``approximate`` false): Eigen's ``(0.5 * x) * (x * -M_SQRT1_2).erfc()`` with its
  rational ``generic_fast_erfc<float>`` (not libm's erfc, which the 8-bit kernels' tables use).

XLA on the CPU flushes subnormal float32 results to zero and may contract a multiply and an add into one fused
multiply-add: the float32 steps go through ``_rounded`` (no contraction), and every step whose result can be
subnormal is computed in float64 and rounded to the float32 grid by hand (``_f32_grid``), the output built
from its bits (``_to_f32``).  Elsewhere than ``OpContext.official_float_order`` the ops keep XLA's own forms.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from ._common import computed_once, rounded_apart
from ._fixedpoint import divide_f32_exactly
from .reduce import _rounded

PACKET = 4  # SSE: float32 packets of 4
f32, f64 = np.float32, np.float64


def _packet_and_tail(ctx: Any, x: Any, packet_fn: Any, scalar_fn: Any) -> Any:
    """``packet_fn`` on the flat tensor's first n // 4 * 4 elements, ``scalar_fn`` on the rest."""
    xp = ctx.xp
    flat = xp.reshape(x, (-1,))
    n = flat.shape[0]
    if n == 0:
        return x
    split = n // PACKET * PACKET
    parts = ([packet_fn(flat[:split])] if split else []) + ([scalar_fn(flat[split:])] if split < n else [])
    out = parts[0] if len(parts) == 1 else xp.concatenate(parts)
    return xp.reshape(out, x.shape)


def _f32_grid(ctx: Any, v: Any) -> Any:
    """float64 ``v`` rounded to the nearest float32 (subnormals included, ties to even), kept in float64."""
    if ctx.lax is None:
        with np.errstate(all="ignore"):
            return v.astype(f32).astype(f64)
    xp, lax = ctx.xp, ctx.lax
    normal = lax.reduce_precision(v, exponent_bits=8, mantissa_bits=23)  # flushes float32's subnormals
    tiny = xp.abs(v) < 2.0 ** -126
    steps = lax.round(xp.where(tiny, v, 0.0) * 2.0 ** 149, lax.RoundingMethod.TO_NEAREST_EVEN)
    return xp.where(tiny, steps * 2.0 ** -149, normal)


def _to_f32(ctx: Any, v: Any) -> Any:
    """float64 values on the float32 grid (``_f32_grid``) as float32, subnormals built from their bits."""
    if ctx.lax is None:
        return v.astype(f32)
    xp, lax = ctx.xp, ctx.lax
    tiny = xp.abs(v) < 2.0 ** -126
    steps = xp.where(tiny, xp.abs(v) * 2.0 ** 149, 0.0).astype(xp.int32)
    bits = xp.where(xp.signbit(v), steps | np.int32(-2 ** 31), steps)
    return xp.where(tiny, lax.bitcast_convert_type(bits, xp.float32), v.astype(xp.float32))


def _to_f64(ctx: Any, x: Any) -> Any:
    """float32 ``x`` as float64, exactly, subnormals included (XLA CPU's conversion reads them as zero)."""
    xp = ctx.xp
    wide = x.astype(xp.float64)
    if ctx.lax is None:
        return wide
    bits = ctx.lax.bitcast_convert_type(x, xp.int32)
    steps = (bits & np.int32(0x7fffffff)).astype(xp.float64) * 2.0 ** -149
    subnormal = (bits & np.int32(0x7f800000)) == 0
    return xp.where(subnormal, xp.where(bits < 0, -steps, steps), wide)


# float type -> (its integer of the same width, exponent bias, mantissa bits)
_POW2_LAYOUT = {np.dtype(f64): (np.int64, 1023, 52), np.dtype(f32): (np.int32, 127, 23)}


def _pow2(ctx: Any, m: Any, dtype: Any = f64) -> Any:
    """2^m as ``dtype`` (float64: integer-valued m in [-1022, 1023]; float32: in [-126, 127]), built from its
    bits, exactly."""
    xp = ctx.xp
    integer, bias, mantissa = _POW2_LAYOUT[np.dtype(dtype)]
    biased = (m.astype(integer) + bias) << mantissa
    if ctx.lax is None:
        return biased.view(dtype)
    return ctx.lax.bitcast_convert_type(biased, dtype)


def _divide_on_grid(ctx: Any, a: Any, b: Any) -> Any:
    """float32 a / b (both float64 on the float32 grid) correctly rounded, subnormal quotients included:
    53 bits are enough for a double-rounded quotient to equal the float32 one."""
    with np.errstate(all="ignore"):
        return _f32_grid(ctx, a / b)


# --- glibc expf -------------------------------------------------------------------------------------------

_EXP2F_TABLE = np.array([
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51,
    0x3fef72b83c7d517b, 0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d,
    0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429, 0x3feea47eb03a5585,
    0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d,
    0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069,
    0x3fef5818dcfba487, 0x3fef7c97337b9b5f, 0x3fefa4afa2a490da, 0x3fefd0765b6e4540], np.uint64).view(np.int64)
_INV_LN2_32 = float.fromhex("0x1.71547652b82fep+0") * 32
_EXPF_POLY = (float.fromhex("0x1.c6af84b912394p-5") / 32 ** 3, float.fromhex("0x1.ebfce50fac4f3p-3") / 32 ** 2,
              float.fromhex("0x1.62e42ff0c52d6p-1") / 32)
_EXPF_OVERFLOW = float(float.fromhex("0x1.62e42ep6"))    # above: +inf
_EXPF_UNDERFLOW = float(float.fromhex("-0x1.9fe368p6"))  # below: 0


def _split_inv_ln2() -> tuple[float, float]:
    bits = np.array([_INV_LN2_32], f64).view(np.int64)[0] & ~np.int64((1 << 24) - 1)
    hi = float(np.array([bits], np.int64).view(f64)[0])  # 29 significant bits: hi * x is exact
    return hi, _INV_LN2_32 - hi


_INV_LN2_32_HI, _INV_LN2_32_LO = _split_inv_ln2()


def glibc_expf64(ctx: Any, x: Any) -> Any:
    """glibc's ``expf`` of float32 ``x`` (any shape), as float64 on the float32 grid."""
    xp, r_ = ctx.xp, (lambda v: _rounded(ctx, v))
    xd = x.astype(xp.float64)
    finite = xp.clip(xp.where(xp.isfinite(xd), xd, 0.0), -200.0, 200.0)  # beyond: the selects at the end
    z = r_(_INV_LN2_32 * finite)
    kd = xp.round(z) if ctx.lax is None else ctx.lax.round(z, ctx.lax.RoundingMethod.TO_NEAREST_EVEN)
    # the reduction z - k with z exact: glibc's FMA variant computes InvLn2N * x - kd in one rounding
    r = (r_(_INV_LN2_32_HI * finite) - kd) + r_(_INV_LN2_32_LO * finite)
    k = kd.astype(xp.int64)
    t = xp.take(xp.asarray(_EXP2F_TABLE), k & 31) + (k << 47)
    s = t.view(f64) if ctx.lax is None else ctx.lax.bitcast_convert_type(t, xp.float64)
    c0, c1, c2 = _EXPF_POLY
    p = r_(c0 * r) + c1
    r2 = r * r
    y = r_(c2 * r) + 1.0
    y = r_(p * r2) + y
    y = _f32_grid(ctx, y * s)
    y = xp.where(xd > _EXPF_OVERFLOW, np.inf, xp.where(xd < _EXPF_UNDERFLOW, 0.0, y))
    return xp.where(xp.isnan(xd), xd, y)


def glibc_expf(ctx: Any, x: Any) -> Any:
    """The EXP kernel (reference_ops::Exp): glibc's ``expf`` of every element, float32."""
    return _to_f32(ctx, glibc_expf64(ctx, x))


# --- Eigen's float32 packet functions (SSE, no FMA) ---------------------------------------------------------

def _nan_min(xp: Any, x: Any, bound: float) -> Any:
    """pmin(x, bound) as Eigen's SSE packets compute it (NaN stays NaN)."""
    return xp.where(xp.isnan(x), x, xp.minimum(x, f32(bound)))


_LOGISTIC_EXP_HI = 16.6355324  # "the first point where the interpolant is exactly one"
_LOGISTIC_POLY = (4.1898667812347412109375e-2, 0.49999141693115234375,       # even: p4, p2
                  8.33471305668354034423828125e-3, 0.16666877269744873046875)  # odd: p5, p3
_LOG2E, _LN2_C1, _LN2_C2 = 1.44269504088896341, -0.693359375, 2.12194440e-4


def _logistic_packets(ctx: Any, x: Any) -> Any:
    """scalar_logistic_op<float>::packetOp: exp(x / 2) squared, then e / (1 + e); 0 below -104."""
    xp, r_ = ctx.xp, (lambda v: _rounded(ctx, v))
    with np.errstate(all="ignore"):
        h = _nan_min(xp, x, _LOGISTIC_EXP_HI) * f32(0.5)
        m = xp.floor(r_(h * f32(_LOG2E)) + f32(0.5))
        r = r_(m * f32(_LN2_C1)) + h
        r = r_(m * f32(_LN2_C2)) + r
        r2 = r * r
        p4, p2, p5, p3 = (f32(c) for c in _LOGISTIC_POLY)
        even = r_(r2 * p4) + p2
        odd = r_(r2 * p5) + p3
        p = r_(r * odd) + even
        p = r_(r2 * p) + (r + f32(1))
        # exp(h) = p * 2^m, exact in float32 (m >= -76 where it is used: x >= -104)
        m = xp.where(xp.isnan(m), f32(0), xp.maximum(m, f32(-126)))
        e = p * _pow2(ctx, m, f32)
        # e^2 and e^2 / (1 + e^2) in float32, each rounded (correctly rounded where the results are normal).
        # Below e = 2^-63 the square is subnormal, which XLA CPU flushes and the official kernel keeps; there
        # 1 + e^2 rounds to 1, so the quotient is the square itself: taken from float64 (exact) onto the float32
        # subnormal grid.  (All in float64 cost about 3 ns an element: EfficientNet's swish in BUILTIN mode.)
        e2 = r_(e * e)
        y = e2 / (f32(1) + e2)
        tiny = e < f32(2.0 ** -63)
        y = xp.where(tiny, _subnormal_square(ctx, xp.where(tiny, e, f32(0))), y)
        y = xp.where(x < f32(-104), f32(0), y)
        return xp.where(xp.isnan(x), x, y)


def _subnormal_square(ctx: Any, e: Any) -> Any:
    """e * e as float32 for float32 e below 2^-63 (a subnormal or zero result, ties to even), which float32
    arithmetic on XLA CPU would flush to zero: the exact square in float64, then its steps of 2^-149."""
    xp = ctx.xp
    wide = e.astype(xp.float64)
    if ctx.lax is None:
        with np.errstate(all="ignore"):
            return (wide * wide).astype(f32)
    steps = ctx.lax.round(wide * wide * 2.0 ** 149, ctx.lax.RoundingMethod.TO_NEAREST_EVEN).astype(xp.int32)
    return ctx.lax.bitcast_convert_type(steps, xp.float32)


def _logistic_scalars(ctx: Any, x: Any) -> Any:
    """scalar_logistic_op<float>::operator(): e = expf(min(x, 16.6355324)); e / (1 + e)."""
    e = glibc_expf64(ctx, _nan_min(ctx.xp, x, _LOGISTIC_EXP_HI))
    with np.errstate(all="ignore"):
        return _to_f32(ctx, _divide_on_grid(ctx, e, _f32_grid(ctx, 1.0 + e)))


def logistic(ctx: Any, x: Any) -> Any:
    """optimized_ops::Logistic on float32: Eigen's packets, then its scalar function on the last n % 4."""
    return _packet_and_tail(ctx, x, lambda v: _logistic_packets(ctx, v), lambda v: _logistic_scalars(ctx, v))


_TANH_CLAMP = 7.90738964080810547  # without FMA (8.01773357 with)
_TANH_ALPHA = (1.394553628e-8, 2.102733560e-5, 3.520756727e-3, 1.340216100e-1)
_TANH_BETA = (8.015776984e-7, 3.326951409e-4, 2.597254514e-2, 4.673548340e-1, 1.0)


def tanh(ctx: Any, x: Any) -> Any:
    """optimized_ops::Tanh on float32: Eigen's fast ptanh_float (packets and scalars alike)."""
    xp, r_ = ctx.xp, (lambda v: _rounded(ctx, v))
    with np.errstate(all="ignore"):
        c = _TANH_CLAMP
        v = xp.where(xp.isnan(x), x, xp.clip(x, f32(-c), f32(c)))
        x2 = v * v
        x3 = x2 * v
        p = f32(_TANH_ALPHA[0])
        for a in _TANH_ALPHA[1:]:
            p = r_(p * x2) + f32(a)
        q = f32(_TANH_BETA[0])
        for b in _TANH_BETA[1:]:
            q = r_(q * x2) + f32(b)
        p = r_(x3 * p) + v
        y = _to_f32(ctx, _divide_on_grid(ctx, p.astype(xp.float64), q.astype(xp.float64)))
        # below 2^-20 the official result is x itself, subnormals too (which XLA's arithmetic would flush)
        return xp.where(xp.abs(x) < f32(2.0 ** -20), x, y)


_EXP_HI, _EXP_LO = 88.723, -104.0
_EXP_POLY = (1.37449637986719608306884765625e-3, 4.166965186595916748046875e-2,  # even: p6, p4
             8.36894474923610687255859375e-3, 0.16666518151760101318359375,     # odd: p5, p3
             0.49999988079071044921875)                                         # p2


def _eigen_exp_packets64(ctx: Any, x: Any) -> Any:
    """pexp_float<Packet4f, IsFinite=false>, as float64 on the float32 grid."""
    xp, r_ = ctx.xp, (lambda v: _rounded(ctx, v))
    with np.errstate(all="ignore"):
        v = _nan_min(xp, x, _EXP_HI)
        m = xp.floor(r_(v * f32(_LOG2E)) + f32(0.5))
        r = r_(m * f32(_LN2_C1)) + v
        r = r_(m * f32(_LN2_C2)) + r
        r2 = r * r
        p6, p4, p5, p3, p2 = (f32(c) for c in _EXP_POLY)
        even = r_(r2 * p6) + p4
        odd = r_(r2 * p5) + p3
        even = r_(r2 * even) + p2
        y = r_(r * odd) + even
        y = r_(r2 * y) + (r + f32(1))
        m = xp.where(xp.isfinite(m), m, f32(0))
        # pldexp: y * 2^m rounded once (subnormal and infinite results included)
        e = _f32_grid(ctx, y.astype(xp.float64) * _pow2(ctx, m))
        e = xp.where(x < f32(_EXP_LO), 0.0, xp.where(x == np.inf, np.inf, e))
        return xp.where(xp.isnan(x), x.astype(xp.float64), e)


def eigen_exp64(ctx: Any, x: Any) -> Any:
    """``array.exp()`` of a contiguous float32 tensor (SOFTMAX's exponential), float64 on the float32 grid:
    Eigen's packets, then ``std::exp`` (glibc's expf) on the last n % 4 elements."""
    return _packet_and_tail(ctx, x, lambda v: _eigen_exp_packets64(ctx, v), lambda v: glibc_expf64(ctx, v))


# --- Eigen's erfc (GELU) --------------------------------------------------------------------------------------
# GELU's float kernel (reference_ops::Gelu) is the Eigen array expression ``0.5 * x * (x * -M_SQRT1_2).erfc()``;
# Eigen's float erfc (``generic_fast_erfc<float>``, unchanged since Eigen's November 2024 rewrite) is a
# rational approximation, the same code for packets and scalars except their exp (Eigen's ``pexp`` in packets,
# ``std::exp`` in the scalar tail): for |x| <= 1, 1 + x S(x^2); above, exp(-x^2) (with the low part of x^2,
# exact by Dekker's product without FMA) times P(1/x^2) / (x Q(1/x^2)), plus 2 for negative x.  The steps from
# exp(-x^2) on can be subnormal (past x = 9.3), which XLA's float32 would flush: they are computed in float64 and
# rounded to the float32 grid (``_f32_grid``, exact for a single +, -, * or / of float32 operands).  Matched bit
# for bit on 100,003 inputs (tests/ops/test_activations.py); 4 ms of CPU for 262,144 elements in BUILTIN mode
# against XLA's erfc's 1 ms (every step in float64 took 17 ms).
_ERFC_CLAMP = 11.0
_ERFC_SMALL = (5.61802298761904239654541015625e-04, -4.91381669417023658752441406250e-03,
               2.67075151205062866210937500000e-02, -1.12800106406211853027343750000e-01,
               3.76122951507568359375000000000e-01, -1.12837910652160644531250000000e+00)
_ERFC_NUMERATOR = (1.0208116471767425537109375e-01, 4.2920666933059692382812500e-01,
                   3.2379078865051269531250000e-01, 5.3971976041793823242187500e-02)
_ERFC_DENOMINATOR = (1.7251677811145782470703125e-02, 3.9137163758277893066406250e-01, 1.0,
                     6.2173241376876831054687500e-01, 9.5662862062454223632812500e-02)
_GELU_ERFC_SCALE = float(f32(-0.70710678118654752440))  # static_cast<float>(-M_SQRT1_2)


def _horner(ctx: Any, x: Any, coefficients: tuple) -> Any:
    """Eigen's ``ppolevl`` (highest degree first) in float32 without FMA: every product rounded."""
    p = ctx.xp.full_like(x, f32(coefficients[0]))
    for c in coefficients[1:]:
        p = _rounded(ctx, p * x) + f32(c)
    return p


def _eigen_erfc64(ctx: Any, x: Any, exp64: Any) -> Any:
    """``generic_fast_erfc<float>`` of float32 ``x``, float64 on the float32 grid; ``exp64`` the float32 exp.
    The steps that cannot be subnormal run in float32 (divisions correctly rounded, through float64); those
    that can (from exp(-x^2) on) in float64 on the float32 grid."""
    xp, r_, grid = ctx.xp, (lambda v: _rounded(ctx, v)), (lambda v: _f32_grid(ctx, v))
    with np.errstate(all="ignore"):
        v = xp.clip(x, f32(-_ERFC_CLAMP), f32(_ERFC_CLAMP))
        v2 = r_(v * v)
        small = r_(v * _horner(ctx, v2, _ERFC_SMALL)) + f32(1)
        v64 = v.astype(xp.float64)
        v2_low = v64 * v64 - v2.astype(xp.float64)  # exact (Dekker's product): a float32's square has 48 bits
        e = exp64(ctx, -v2)
        z = grid(e - grid(e * v2_low))
        q2 = divide_f32_exactly(xp, f32(1), v2)
        ratio = divide_f32_exactly(xp, _horner(ctx, q2, _ERFC_NUMERATOR), r_(v * _horner(ctx, q2, _ERFC_DENOMINATOR)))
        large = grid(grid(z * ratio.astype(xp.float64)) + xp.where(v < 0, 2.0, 0.0))
        return xp.where(v2 > 1, large, small.astype(xp.float64))


def gelu(ctx: Any, x: Any) -> Any:
    """reference_ops::Gelu on float32 (``approximate`` false): ``(0.5 * x) * erfc(x * -M_SQRT1_2)`` with Eigen's
    erfc, its packets on the first n // 4 * 4 elements and its scalar form on the rest."""
    arg = x * f32(_GELU_ERFC_SCALE)
    erfc = _packet_and_tail(ctx, arg, lambda v: _eigen_erfc64(ctx, v, _eigen_exp_packets64),
                            lambda v: _eigen_erfc64(ctx, v, glibc_expf64))
    with np.errstate(all="ignore"):
        half = _f32_grid(ctx, 0.5 * _to_f64(ctx, x))
        return _to_f32(ctx, _f32_grid(ctx, half * erfc))


# --- glibc sinf / cosf --------------------------------------------------------------------------------------
# SIN and COS are std::sin / std::cos per element (elementwise.cc): glibc's sinf / cosf, evaluated in double
# (range reduction by n pi/2 below 120, by a 192-bit 4/pi table above, then a polynomial).  glibc's FMA variant
# is matched by splitting pi/2 so that x - n pi/2 is exact and rounding every other product: equal to this
# machine's glibc 2.36 on every float32 below 120 and on every 16th above.

_HALF_PI = float.fromhex("0x1.921FB54442D18p0")
_HALF_PI_INV_2_24 = float.fromhex("0x1.45F306DC9C883p+23")  # 2/pi * 2^24
_PI_2_M62 = float.fromhex("0x1.921FB54442D18p-62")         # 2pi * 2^-64
_COS_POLY = tuple(float.fromhex(c) for c in ("0x1p0", "-0x1.ffffffd0c621cp-2", "0x1.55553e1068f19p-5",
                                             "-0x1.6c087e89a359dp-10", "0x1.99343027bf8c3p-16"))
_SIN_POLY = tuple(float.fromhex(c) for c in ("-0x1.555545995a603p-3", "0x1.1107605230bc4p-7",
                                             "-0x1.994eb3774cf24p-13"))
_INV_PIO4 = np.array([
    0xa2, 0xa2f9, 0xa2f983, 0xa2f9836e, 0xf9836e4e, 0x836e4e44, 0x6e4e4415, 0x4e441529,
    0x441529fc, 0x1529fc27, 0x29fc2757, 0xfc2757d1, 0x2757d1f5, 0x57d1f534, 0xd1f534dd, 0xf534ddc0,
    0x34ddc0db, 0xddc0db62, 0xc0db6295, 0xdb629599, 0x6295993c, 0x95993c43, 0x993c4390, 0x3c439041], np.uint64)


def _split_half_pi() -> tuple[float, float]:
    bits = np.array([_HALF_PI], f64).view(np.int64)[0] & ~np.int64((1 << 8) - 1)
    hi = float(np.array([bits], np.int64).view(f64)[0])  # 45 significant bits: n * hi is exact for n < 2^8
    return hi, _HALF_PI - hi


_HALF_PI_HI, _HALF_PI_LO = _split_half_pi()


def _abstop12(value: float) -> int:
    return int((np.array([value], f32).view(np.uint32)[0] >> 20) & 0x7ff)


def _bits(ctx: Any, x: Any, dtype: Any) -> Any:
    return x.view(dtype) if ctx.lax is None else ctx.lax.bitcast_convert_type(x, dtype)


def _reduce_large(ctx: Any, xi: Any) -> tuple[Any, Any]:
    """glibc's reduce_large: (x mod pi/2 as double, quadrant) from the float's bits, in 64-bit integers."""
    xp = ctx.xp
    xi = xi.astype(xp.uint64)
    table = xp.asarray(_INV_PIO4)
    index = ((xi >> 26) & 15).astype(xp.int32)
    mantissa = ((xi & 0xffffff) | 0x800000) << ((xi >> 23) & 7)
    res0 = (mantissa * xp.take(table, index)) & 0xffffffff
    res1 = mantissa * xp.take(table, index + 4)
    res2 = mantissa * xp.take(table, index + 8)
    res0 = ((res2 >> 32) | (res0 << 32)) + res1
    n = (res0 + (1 << 61)) >> 62
    res0 = res0 - (n << 62)
    return _bits(ctx, res0, xp.int64).astype(xp.float64) * _PI_2_M62, n.astype(xp.int32)


def glibc_sincosf(ctx: Any, x: Any, cosine: bool) -> Any:
    """glibc's ``sinf`` (or ``cosf``) of float32 ``x``, float32."""
    xp, r_ = ctx.xp, (lambda v: _rounded(ctx, v))
    with np.errstate(all="ignore"):
        bits = _bits(ctx, x, xp.uint32)
        top = (bits >> 20) & 0x7ff
        xd = x.astype(xp.float64)
        small = top < _abstop12(float(np.float32(float.fromhex("0x1.921FB6p-1"))))
        medium = ~small & (top < _abstop12(120.0))
        # |x| < 120: n = round(x 2/pi) by glibc's scaled truncation, x - n pi/2 exactly
        xm = xp.where(medium, xd, 0.0)
        n_medium = ((r_(xm * _HALF_PI_INV_2_24)).astype(xp.int32) + 0x800000) >> 24
        reduced = (xm - n_medium.astype(xp.float64) * _HALF_PI_HI) - r_(n_medium.astype(xp.float64) * _HALF_PI_LO)
        large_x, n_large = _reduce_large(ctx, bits)
        negative = (bits >> 31).astype(xp.int32)
        quadrant = xp.where(small, 0, xp.where(medium, n_medium, n_large))        # picks the polynomial
        signs = xp.where(small, 0, xp.where(medium, n_medium, n_large + negative))  # sign and table
        r = xp.where(small, xd, xp.where(medium, reduced, large_x))
        r = xp.where((signs & 3) == 1, -r, xp.where((signs & 3) == 2, -r, r))      # sign[4] = {1, -1, -1, 1}
        r2 = r * r
        s1, s2, s3 = _SIN_POLY
        r3 = r * r2
        sine = (r + r_(r3 * s1)) + r_((r3 * r2) * (s2 + r_(r2 * s3)))
        c0, c1, c2, c3, c4 = _COS_POLY
        r4 = r2 * r2
        cos = ((c0 + r_(r2 * c1)) + r_(r4 * c2)) + r_((r4 * r2) * (c3 + r_(r2 * c4)))
        cos = xp.where((signs & 2) != 0, -cos, cos)  # the second table: the negated cosine polynomial
        use_cos = ((quadrant ^ 1) & 1) != 0 if cosine else (quadrant & 1) != 0
        y = xp.where(use_cos, cos, sine).astype(xp.float32)
        tiny = top < _abstop12(2.0 ** -12)
        y = xp.where(tiny, xp.ones_like(x) if cosine else x, y)
        return xp.where(top >= 0x7f8, xp.full_like(x, np.nan), y)


# The official float BATCH_MATMUL and CONV_2D (its im2col GEMM) sum each output over the depth in order, every
# product rounded to float32 before it is added (no fused multiply-add): measured bit for bit on x86 against the
# builtin kernels, depths 2 to 4096, one to 64 rows (tests/ops/test_matmul.py, tests/ops/test_conv.py).  A GEMM's other summation orders are within a few ulps of it,
# which is harmless alone, but an LLM's attention (Q.K^T, P.V) feeds hybrid FULLY_CONNECTEDs that quantize their
# input rows to int8: an ulp there moves an element across a rounding boundary now and then, and a 576-wide
# SmolLM with sharp weights carried one such flip to 0.9 % of the largest logit (dynamic_int8) and 4 % of the
# KV cache (dynamic_int4_block32).  The XLA form takes this many depth steps per loop iteration.
DEPTH_ORDER_UNROLL = 16


# The in-order sum makes a pass over the output per depth step: affordable for attention's products (a 576-wide
# LLM's prefill of 32 tokens: 4.7 M multiply-adds), not for big ones (a [30000, 30000] product took 5x the
# memory of XLA's dot and hours).  Past this many multiply-adds the builtin mode takes XLA's dot, an ulp or so
# away from the official sum.  The price, measured on Keras InceptionV3 float32 (BENCHMARKS.md, "The fidelity
# sweep with the final code"): 2.1e-5 of its largest output here, 1.6e-5 at 2^28, bit for bit at 2^30 (every
# convolution in order), whose first call took 52 s CPU against 33 s and whose steady call 2.1x; so CONV_2D takes
# the builtin order past this limit only where it counts, in a CNN's stem (``conv._in_the_stem``).
IN_ORDER_MAX_MACS = 1 << 26


def in_order_affordable(x: Any, y: Any) -> bool:
    """Whether x [..., M, K] @ y [..., K, N] is summed in depth order (``sum_in_depth_order``)."""
    batch = np.broadcast_shapes(tuple(x.shape[:-2]), tuple(y.shape[:-2]))
    return int(np.prod(batch)) * x.shape[-2] * x.shape[-1] * y.shape[-1] <= IN_ORDER_MAX_MACS


def sum_in_depth_order(xp: Any, lax: Any, x: Any, y: Any) -> Any:
    """x [..., M, K] @ y [..., K, N] (batch dims broadcast) as the official float kernel sums it:
    ``acc = acc + x[..., k] * y[k, ...]`` for k = 0 .. K-1, each product rounded first."""
    shape = np.broadcast_shapes(x.shape[:-2], y.shape[:-2]) + (x.shape[-2], y.shape[-1])
    if xp is np:
        acc = np.zeros(shape, np.float32)
        for k in range(x.shape[-1]):
            acc = acc + x[..., :, k:k + 1] * y[..., k:k + 1, :]
        return acc

    # the depth axis first, once: each step then reads a contiguous column (read across the rows, every step
    # gathered it with a stride of the depth).  A loop over blocks of DEPTH_ORDER_UNROLL steps written out in the
    # body (XLA fuses them into one pass over the output), the last partial block after it: 1.3-1.9x faster
    # than fori_loop's own unrolling on 1x1 convolutions (XLA CPU, 2 cores).
    by_depth = xp.moveaxis(computed_once(xp, lax, x), -1, 0)  # each element is read once per output column
    depth = x.shape[-1]

    def add(acc: Any, columns: Any, rows: Any, count: int) -> Any:
        for u in range(count):
            # XLA CPU contracts a multiply feeding an add into one fused multiply-add (rounded once); a select
            # between them (NaN stays NaN) keeps the product rounded on its own, as the official kernel has it.
            # Reduce-precision, bit casts, float64 products and optimization barriers did not (measured).
            product = rounded_apart(xp, lax, columns[u][..., None] * lax.index_in_dim(rows, u, axis=rows.ndim - 2))
            acc = acc + product
        return acc

    unroll = DEPTH_ORDER_UNROLL
    blocks = depth // unroll

    def block(b: Any, acc: Any) -> Any:
        columns = lax.dynamic_slice_in_dim(by_depth, b * unroll, unroll, axis=0)
        rows = lax.dynamic_slice_in_dim(y, b * unroll, unroll, axis=y.ndim - 2)
        return add(acc, columns, rows, unroll)

    acc = xp.zeros(shape, xp.float32)
    if blocks:
        acc = lax.fori_loop(0, blocks, block, acc)
    rest = depth - blocks * unroll
    if rest:
        acc = add(acc, by_depth[blocks * unroll:], lax.slice_in_dim(y, blocks * unroll, depth, axis=y.ndim - 2), rest)
    return acc


# Eigen's GEMM splits the depth into blocks that fit its L1 cache (GeneralBlockPanelKernel.h,
# evaluateProductBlockingSizesHeuristic, one thread) and sums each block apart, in registers from zero, before it
# adds it to the output: a depth past max_kc = ((L1 - mr * nr * 4) / (4 * (mr + nr))) rounded down to a multiple
# of 8 is summed in blocks.  The x86 wheel's SSE kernel has mr = 8, nr = 4; the L1 size is the CPU's, as Eigen
# reads it (cpuid): 48 KiB here gives max_kc 1016, measured on 1x1 convolutions (depth 1016 in one block, 1024 in
# blocks of 520, 1200 of 608, 2500 of 840) and InceptionV3's 5x5 convolutions over 48 channels (depth 1200).
_EIGEN_MR, _EIGEN_NR, _EIGEN_PEELING = 8, 4, 8
_DEFAULT_L1_BYTES = 32 * 1024  # where the CPU's L1 data cache cannot be read (not Linux): x86's most common


def eigen_depth_block(depth: int) -> int:
    """The depth of Eigen's blocks for a GEMM over ``depth`` on this CPU (``depth`` itself: one block)."""
    max_kc = max(((_l1_data_cache_bytes() - _EIGEN_MR * _EIGEN_NR * 4) // (4 * (_EIGEN_MR + _EIGEN_NR)))
                 & ~(_EIGEN_PEELING - 1), 1)
    if depth <= max_kc:
        return depth
    if depth % max_kc == 0:
        return max_kc
    # as large a last block as can be for the same number of blocks
    return max_kc - _EIGEN_PEELING * ((max_kc - 1 - depth % max_kc) // (_EIGEN_PEELING * (depth // max_kc + 1)))


@cache
def _l1_data_cache_bytes() -> int:
    """One core's L1 data cache in bytes, as Linux reports it (what Eigen reads with cpuid)."""
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level, kind, size = ((index / name).read_text().strip() for name in ("level", "type", "size"))
        except OSError:
            continue
        if level == "1" and kind in ("Data", "Unified"):
            digits, unit = (size[:-1], size[-1]) if size[-1:] in ("K", "M") else (size, "")
            if digits.isdigit():
                return int(digits) * {"K": 1024, "M": 1024 * 1024}.get(unit, 1)
    return _DEFAULT_L1_BYTES


# The lanes of Eigen's float packets on the x86 wheel (SSE: 4); its matrix-vector product keeps one packet of
# partial sums per output.
GEMV_LANES = 4


def sum_as_the_builtin_gemm(xp: Any, lax: Any, x: Any, y: Any) -> Any:
    """x [M, K] @ y [K, N] as the builtin float FULLY_CONNECTED and CONV_2D sum it on x86 (``cpu_backend_gemm``,
    which takes Eigen there; measured bit for bit): in depth order (``sum_in_depth_order``) within each of
    Eigen's depth blocks (``eigen_depth_block``), each block's sum then added to the output in turn; except a
    matrix by a vector (M or N is 1: one row of input, one unit, one output pixel), which Eigen's GEMV sums in
    ``GEMV_LANES`` lanes, lane j over the steps k = j mod 4 in order, every product rounded; then the lanes
    ``(l0 + l2) + (l1 + l3)``; then the last K mod 4 products in order."""
    if x.shape[-2] != 1 and y.shape[-1] != 1:
        depth = x.shape[-1]
        block = eigen_depth_block(depth)
        if block >= depth:
            return sum_in_depth_order(xp, lax, x, y)
        acc = xp.zeros((x.shape[-2], y.shape[-1]), xp.float32)  # Eigen sets the output to zero, then adds
        for start in range(0, depth, block):
            acc = acc + sum_in_depth_order(xp, lax, x[:, start:start + block], y[start:start + block])
        return acc
    depth = x.shape[-1]
    packed = depth - depth % GEMV_LANES
    acc = xp.zeros((x.shape[-2], y.shape[-1]), xp.float32)
    if packed:
        # each lane a depth-order sum of its own: the lanes as a batch dimension
        x_lanes = xp.moveaxis(x[:, :packed].reshape(x.shape[0], packed // GEMV_LANES, GEMV_LANES), -1, 0)
        y_lanes = xp.moveaxis(y[:packed].reshape(packed // GEMV_LANES, GEMV_LANES, y.shape[-1]), 1, 0)
        lanes = sum_in_depth_order(xp, lax, x_lanes, y_lanes)
        acc = (lanes[0] + lanes[2]) + (lanes[1] + lanes[3])
    for k in range(packed, depth):
        acc = acc + rounded_apart(xp, lax, x[:, k:k + 1] * y[k:k + 1, :])
    return acc
