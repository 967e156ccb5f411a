"""Elementwise binary arithmetic with broadcasting and fused activations.

Semantics follow the official kernels, including two details that are easy to
miss:

* ADD, SUB, MUL, DIV and ADD_N clamp float results to the activation range,
  and with no activation that range is [-FLT_MAX, FLT_MAX]: an overflow gives
  +-FLT_MAX, never inf (NaN stays NaN).  Ops without a fused activation
  (SQUARED_DIFFERENCE, POW, ...) do produce inf.
* Integer DIV truncates toward zero (C semantics); FLOOR_DIV / FLOOR_MOD round
  toward -inf.  A zero divisor is an error for integer DIV / FLOOR_DIV /
  FLOOR_MOD and for float FLOOR_DIV (float DIV and FLOOR_MOD give inf / NaN).
  The reference backend raises on those; XLA cannot fail at run time and
  returns XLA's values instead.  Quantized DIV (uint8, int8, int16) fails on a
  divisor equal to its zero point.
* Integer POW is computed in double precision, as ``std::pow`` does; results
  out of the type's range become INT_MIN (what x86 makes of them).
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from ..errors import ModelExecutionError
from . import _quantized as qz
from . import _fixedpoint as fp
from ._quantized import QUANTIZED_8BIT
from ._common import fused_activation
from .registry import Op, OpContext, register

FLOAT_AND_INT = ("float32", "float16", "int32", "int64")


def broadcast_shape(ctx: OpContext, *values: Any) -> tuple[int, ...]:
    """The numpy-style broadcast of the inputs' shapes, or an error naming the op."""
    shapes = [tuple(np.shape(v)) for v in values]
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ModelExecutionError(f"{ctx.op}: input shapes {' and '.join(map(str, shapes))} "
                                  "do not broadcast") from None


def check_same_dtype(ctx: OpContext, *values: Any) -> None:
    dtypes = {np.dtype(v.dtype) for v in values}
    if len(dtypes) > 1:
        raise ModelExecutionError(f"{ctx.op}: inputs must have one type, got {', '.join(map(str, dtypes))}")


def is_float(x: Any) -> bool:
    return np.issubdtype(np.dtype(x.dtype), np.floating)


def is_traced(x: Any) -> bool:
    return not isinstance(x, (np.ndarray, np.generic))


# Fused activations: the official float and integer kernels build a clamp range (CalculateActivationRange /
# ...Quantized), which knows only RELU, RELU_N1_TO_1 and RELU6; TANH and SIGN_BIT compute no activation at all.
# common.fused_activation and _quantized.activation_range follow that (tests/ops/test_fused_activations.py).
def clamp_to_activation_range(xp: Any, x: Any, activation: str | None) -> Any:
    """The official ``ActivationFunctionWithMinMax``: float results never leave the finite range."""
    x = fused_activation(xp, x, activation)
    if is_float(x):
        limit = np.finfo(np.dtype(x.dtype)).max
        x = xp.clip(x, -limit, limit)
    return x


def raise_on_zero_divisor(ctx: OpContext, y: Any) -> None:
    """The official kernel fails on a zero divisor; only a concrete (reference) value can be checked."""
    if not is_traced(y) and np.any(np.asarray(y) == 0):
        raise ModelExecutionError(f"{ctx.op}: division by 0")


class _Binary(Op):
    """Two same-typed inputs, broadcast; subclasses define ``apply``."""

    dtypes = FLOAT_AND_INT
    # Whether the official kernel passes the result through its activation range.
    clamps_result = False

    def apply(self, xp: Any, x: Any, y: Any) -> Any:
        raise NotImplementedError

    def validate(self, ctx: OpContext, x: Any, y: Any) -> None:
        """Data checks the official kernel makes (reference backend only)."""

    # The affine-quantized kernel, for ops that have one (ADD, SUB, MUL, SQUARED_DIFFERENCE), and
    # the input types it takes. Others that accept int8 (FLOOR_DIV, MAXIMUM, ...) compute on the
    # raw integers, as the official kernels do.
    quantized: Any = None
    quantized_dtypes: tuple[str, ...] = QUANTIZED_8BIT

    def compute(self, ctx: OpContext, x: Any, y: Any) -> Any:
        check_same_dtype(ctx, x, y)
        broadcast_shape(ctx, x, y)
        if self.quantized is not None and ctx.input(0).dtype in self.quantized_dtypes:
            return self.quantized(ctx, x, y)
        self.validate(ctx, x, y)
        with np.errstate(all="ignore"):
            result = self.apply(ctx.xp, x, y)
            if self.clamps_result:
                activation = ctx.options.get("fused_activation_function", "NONE")
                if activation in (None, "NONE") and is_traced(result) and self.stays_finite(ctx):
                    return result
                result = clamp_to_activation_range(ctx.xp, result, activation)
        return result

    def stays_finite(self, ctx: OpContext) -> bool:
        """Whether the result is finite whatever the run, so that the clamp to the finite range changes nothing
        and can be left out of the program (MUL only, see there)."""
        return False


@register("ADD")
class Add(_Binary):
    dtypes = FLOAT_AND_INT + QUANTIZED_8BIT + ("int16",)
    quantized_dtypes = QUANTIZED_8BIT + ("int16",)
    clamps_result = True

    def quantized(self, ctx, x, y):
        return _quantized_add_or_sub(ctx, ctx.xp, x, y, subtract=False)

    def apply(self, xp, x, y):
        return x + y


@register("SUB")
class Sub(_Binary):
    dtypes = FLOAT_AND_INT + QUANTIZED_8BIT + ("int16",)
    quantized_dtypes = QUANTIZED_8BIT + ("int16",)
    clamps_result = True

    def quantized(self, ctx, x, y):
        return _quantized_add_or_sub(ctx, ctx.xp, x, y, subtract=True)

    def apply(self, xp, x, y):
        return x - y


@register("MUL")
class Mul(_Binary):
    dtypes = FLOAT_AND_INT + QUANTIZED_8BIT + ("int16",)
    quantized_dtypes = QUANTIZED_8BIT + ("int16",)
    clamps_result = True

    def quantized(self, ctx, x, y):
        if ctx.input(0).dtype == "int16":
            _require_symmetric_int16(ctx)
        return _quantized_mul(ctx, ctx.xp, x, y)

    def apply(self, xp, x, y):
        return x * y

    def stays_finite(self, ctx: OpContext) -> bool:
        """Both factors are bounded by what the model holds (a constant, or the DEQUANTIZE of a constant: the
        GPU's float view scales its int8 weights so, ``compile.float_view``) and their product cannot overflow.
        Left out, the clamp lets XLA GPU fuse the scaling into the matrix product that reads the weight."""
        bounds = [_static_bound(ctx, i) for i in range(2)]
        return all(b is not None for b in bounds) and bounds[0] * bounds[1] < float(np.finfo(np.float32).max)


def _static_bound(ctx: OpContext, i: int) -> float | None:
    """A bound on |input i| known before running: a finite constant's largest magnitude, or for the output of a
    DEQUANTIZE of a constant, the widest integer of its type less its zero point times its largest scale."""
    t = ctx.input(i)
    made_by = _producer(ctx, t.index)
    while made_by is not None and made_by.opcode_name in ("RESHAPE", "SQUEEZE", "EXPAND_DIMS"):  # same values
        t = ctx.subgraph.tensors[made_by.inputs[0]]
        made_by = _producer(ctx, t.index)
    if t.raw is not None and t.raw.size and t.dtype in ("float32", "float16"):
        data = np.asarray(t.data, np.float64)
        bound = float(np.max(np.abs(data))) if data.size else 0.0
        return bound if np.isfinite(bound) else None
    if made_by is None or made_by.opcode_name != "DEQUANTIZE":
        return None
    source = ctx.subgraph.tensors[made_by.inputs[0]]
    q = source.quantization
    if source.raw is None or not source.raw.size or q is None or not q.scale or source.dtype not in _INTEGER_RANGE:
        return None
    low, high = _INTEGER_RANGE[source.dtype]
    zero = max(abs(int(z)) for z in (q.zero_point or (0,)))
    return float(max(abs(low), high) + zero) * float(np.max(np.abs(np.asarray(q.scale, np.float64))))


# id(subgraph) -> (a weak reference to it, {tensor: the op that makes it}): built once per subgraph traced
_PRODUCERS: dict[int, tuple[Any, dict]] = {}


def _producer(ctx: OpContext, index: int) -> Any:
    sg = ctx.subgraph
    entry = _PRODUCERS.get(id(sg))
    if entry is None or entry[0]() is not sg:
        made = {t: op for op in sg.operators for t in op.outputs if t >= 0}
        try:
            entry = (weakref.ref(sg), made)
        except TypeError:  # not weakly referable: not cached
            return made.get(index)
        _PRODUCERS[id(sg)] = entry
    return entry[1].get(index)


_INTEGER_RANGE = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767), "int4": (-8, 7),
                  "uint4": (0, 15)}


# --- quantized ADD, SUB, MUL, SQUARED_DIFFERENCE: the official integer kernels ----------

# ADD and SUB move both inputs to a common scale 2^20 (int16: 2^15) times finer than twice the
# larger input scale (add.cc, sub.cc): enough headroom that the rescaled sum stays exact in int32.
_ADD_LEFT_SHIFT = {"int8": 20, "uint8": 20, "int16": 15}


def _rescaled_inputs(ctx: OpContext, xp: Any, x: Any, y: Any, left_shift: int) -> tuple[Any, Any, float, float]:
    """Both inputs, zero-point centred, shifted left and rescaled to the common scale
    twice_max / 2^left_shift; also returns (twice the larger input scale, output scale)."""
    s1, z1 = qz.scale_and_zero_point(ctx, ctx.input(0), "first input")
    s2, z2 = qz.scale_and_zero_point(ctx, ctx.input(1), "second input")
    so, _ = qz.scale_and_zero_point(ctx, ctx.output(0), "output")
    twice_max = 2.0 * max(s1, s2)
    m1, e1 = fp.quantize_multiplier(s1 / twice_max)
    m2, e2 = fp.quantize_multiplier(s2 / twice_max)
    a = fp.multiply_by_quantized_multiplier(xp, (x.astype(xp.int64) - z1) << left_shift, m1, e1)
    b = fp.multiply_by_quantized_multiplier(xp, (y.astype(xp.int64) - z2) << left_shift, m2, e2)
    return a, b, twice_max, so


def _quantized_add_or_sub(ctx: OpContext, xp: Any, x: Any, y: Any, *, subtract: bool) -> Any:
    dtype = ctx.input(0).dtype
    if dtype == "int16" and _pot_scales_int16(ctx):
        return _pot_int16_add_or_sub(ctx, xp, x, y, subtract)
    left_shift = _ADD_LEFT_SHIFT[dtype]
    a, b, twice_max, so = _rescaled_inputs(ctx, xp, x, y, left_shift)
    in_block = None
    if not subtract:
        a, b, in_block = _add_vector_blocks(ctx, xp, x, y, (a, b))
    _, zo = qz.scale_and_zero_point(ctx, ctx.output(0), "output")
    # (1 << shift) * scale is a float32 product in the official code (exact: a power of two)
    mo, eo = fp.quantize_multiplier(twice_max / float(np.float32((1 << left_shift) * np.float32(so))))
    raw = fp.wrap_int32(xp, a - b if subtract else a + b)
    out = fp.multiply_by_quantized_multiplier(xp, raw, mo, eo)
    if in_block is not None and dtype != "int16":
        # the 8-bit vector paths narrow the rescaled sum to int16 and add the zero point there, both wrapping,
        # before they saturate to 8 bits: an output scale far finer than the inputs' wraps where the scalar clamps
        out = xp.where(in_block, _wrap_int16(xp, _wrap_int16(xp, out) + zo), out + zo)
    else:
        out = out + zo
    low, high = qz.activation_range(ctx.options.get("fused_activation_function", "NONE"), so, zo,
                                    ctx.output(0).dtype)
    return xp.clip(out, low, high)


# The optimized 8-bit and int16 ADD (optimized_ops / optimized_integer_ops add.h) hand each row of the output to a
# kernel with a vector path, NEON code that the x86 wheel runs through NEON_2_SSE, on whole blocks of the row, and
# the scalar reference arithmetic on the rest of it.  The vector paths rescale the inputs in one of two ways:
# "one shift": the left shift and the multiplier's exponent in one shift (a truncating right shift where their sum
#     is negative), then one rounding doubling high multiply;
# "two shifts": the left shift, the rounding doubling high multiply, then the exponent as a truncating right shift;
# where the scalar path rounds twice (the high multiply, then a rounding divide by the exponent's power of two).
# (kernel, dtype) -> (block, rescaling); the kernels (``_add_kernel_rows``): "whole" and "rows" (AddElementwise on
# the whole tensor without a broadcast, on the rows of a broadcast's innermost shared dimensions), "scalar"
# (AddScalarBroadcast: one element of an input against a row of the other's, where the broadcast reaches the last
# dimension).  Measured against the official kernels on every pair of 8-bit inputs; an int16 broadcast runs the
# scalar path throughout.
_ADD_VECTOR_PATHS = {("whole", "int8"): (16, "one shift"), ("rows", "int8"): (16, "one shift"),
                     ("whole", "int16"): (16, "one shift"),
                     ("whole", "uint8"): (8, "two shifts"), ("rows", "uint8"): (8, "two shifts"),
                     ("scalar", "int8"): (8, "two shifts"), ("scalar", "uint8"): (8, "two shifts")}


def _add_vector_blocks(ctx: OpContext, xp: Any, x: Any, y: Any,
                       scalar: tuple[Any, Any]) -> tuple[Any, Any, np.ndarray | None]:
    """Both inputs at the common scale as the optimized ADD rescales them: on its vector path where it runs
    (``_ADD_VECTOR_PATHS``), else as ``scalar`` has them (the reference arithmetic); and where the vector path
    runs (None: nowhere)."""
    dtype = ctx.input(0).dtype
    out_shape = tuple(np.broadcast_shapes(tuple(x.shape), tuple(y.shape)))
    kernel, row = _add_kernel_rows(tuple(x.shape), tuple(y.shape), out_shape)
    if (kernel, dtype) not in _ADD_VECTOR_PATHS:
        return scalar[0], scalar[1], None
    block, rescaling = _ADD_VECTOR_PATHS[kernel, dtype]
    if row < block:
        return scalar[0], scalar[1], None
    in_block = (np.arange(int(np.prod(out_shape, dtype=np.int64))) % row < row // block * block).reshape(out_shape)
    quantization = [qz.scale_and_zero_point(ctx, ctx.input(i), name) for i, name in enumerate(("first input",
                                                                                            "second input"))]
    twice_max = 2.0 * max(scale for scale, _ in quantization)
    left_shift = _ADD_LEFT_SHIFT[dtype]
    out = []
    for value, (scale, zero_point), rescaled in zip((x, y), quantization, scalar):
        multiplier, exponent = fp.quantize_multiplier(scale / twice_max)
        centred = value.astype(xp.int64) - zero_point
        if rescaling == "one shift":
            shift = left_shift + exponent
            shifted = centred << shift if shift >= 0 else centred >> -shift
            vector = fp.saturating_rounding_doubling_high_mul(xp, shifted, multiplier)
        else:
            vector = fp.saturating_rounding_doubling_high_mul(xp, centred << left_shift, multiplier)
            vector = vector << exponent if exponent >= 0 else vector >> -exponent
        out.append(xp.where(in_block, vector, rescaled))
    return out[0], out[1], in_block


def _wrap_int16(xp: Any, x: Any) -> Any:
    """``x`` narrowed to int16 as vmovn / a 16-bit add do: modulo 2^16."""
    return ((x + 32768) & 0xFFFF) - 32768


def _add_kernel_rows(x_shape: tuple, y_shape: tuple, out_shape: tuple) -> tuple[str, int]:
    """Which kernel the optimized ADD hands the output's rows to, and their length (``ProcessBroadcastShapes``
    and ``BroadcastAddFivefold``): without a broadcast AddElementwise on the whole tensor ("whole"); with a
    broadcast that five loops describe, AddElementwise on the innermost dimensions both inputs share (y4, "rows"),
    or AddScalarBroadcast on the dimensions one input broadcasts along (y3, "scalar") where there are none;
    "generic" (the reference kernel) else."""
    n = len(out_shape)
    a = (1,) * (n - len(x_shape)) + tuple(x_shape)
    b = (1,) * (n - len(y_shape)) + tuple(y_shape)
    total = int(np.prod(out_shape, dtype=np.int64))
    if a == b:
        return "whole", total
    differs = [i for i in range(n) if a[i] != b[i]]
    if 1 not in (a[differs[-1]], b[differs[-1]]):
        return "generic", total
    if b[differs[-1]] == 1:  # the input that broadcasts along the innermost differing dimension goes first
        a, b = b, a
    y = [1] * 5
    i = n - 1
    for slot, test in ((4, lambda i: a[i] == b[i]), (3, lambda i: a[i] == 1), (2, lambda i: a[i] == b[i]),
                       (1, lambda i: b[i] == 1), (0, lambda i: a[i] == b[i])):
        while i >= 0 and test(i):
            y[slot] *= max(a[i], b[i])
            i -= 1
    if i >= 0:
        return "generic", total
    return ("rows", y[4]) if y[4] > 1 else ("scalar", y[3])


def _checked_log2(scale: float) -> int | None:
    """``CheckedLog2``: the rounded log2 of a scale that is (within 1e-3) a power of two, else None."""
    log2 = np.float32(np.log(np.float32(scale))) * np.float32(1.0 / np.log(np.float32(2.0)))
    rounded = fp.round_half_away(float(log2))
    return int(rounded) if abs(float(log2) - rounded) < 1e-3 else None


def _pot_scales_int16(ctx: OpContext) -> bool:
    """int16 ADD / SUB take the power-of-two kernel when pot_scale_int16 (default true) is set
    and all three scales are powers of two; otherwise the general rescaling one."""
    if not ctx.options.get("pot_scale_int16", True):
        return False
    tensors = (ctx.input(0), ctx.input(1), ctx.output(0))
    return all(t.quantization is not None and t.quantization.scale and
               _checked_log2(t.quantization.scale[0]) is not None for t in tensors)


def _pot_int16_add_or_sub(ctx: OpContext, xp: Any, x: Any, y: Any, subtract: bool) -> Any:
    """The LSTM-style int16 kernel (Add16 / Sub16): symmetric power-of-two scales, one input
    at the output's scale and the other a rounding right shift away; saturating int16 sum."""
    logs = [_checked_log2(t.quantization.scale[0]) for t in (ctx.input(0), ctx.input(1), ctx.output(0))]
    shifts = (logs[0] - logs[2], logs[1] - logs[2])
    zero_points = [qz.scale_and_zero_point(ctx, t, "int16")[1] for t in (ctx.input(0), ctx.input(1), ctx.output(0))]
    if any(zero_points) or max(shifts) > 0 or 0 not in shifts or min(shifts) < -31:
        raise ModelExecutionError(f"{ctx.op}: power-of-two int16 needs zero points 0 and one input at the "
                                  f"output's scale, the other finer; got scale exponents {logs}")
    a = fp.rounding_divide_by_pot(xp, x.astype(xp.int64), -shifts[0])
    b = fp.rounding_divide_by_pot(xp, y.astype(xp.int64), -shifts[1])
    out = xp.clip(a - b if subtract else a + b, -32768, 32767)
    so = float(np.float32(ctx.output(0).quantization.scale[0]))
    low, high = qz.activation_range(ctx.options.get("fused_activation_function", "NONE"), so, 0, "int16")
    return xp.clip(out, low, high)


def _quantized_squared_difference(ctx: OpContext, xp: Any, x: Any, y: Any) -> Any:
    """squared_difference.cc (int8): inputs rescaled to a common scale 2^7 finer than twice the
    larger one, the difference squared in int32, rescaled by twice_max^2 / (2^14 * out_scale);
    clamped to int8 (there is no fused activation)."""
    left_shift = 7
    a, b, twice_max, so = _rescaled_inputs(ctx, xp, x, y, left_shift)
    _, zo = qz.scale_and_zero_point(ctx, ctx.output(0), "output")
    mo, eo = fp.quantize_multiplier(twice_max * twice_max / float(np.float32((1 << 2 * left_shift) * np.float32(so))))
    diff = a - b
    out = fp.multiply_by_quantized_multiplier(xp, fp.wrap_int32(xp, diff * diff), mo, eo) + zo
    return xp.clip(out, -128, 127)


def _require_symmetric_int16(ctx: OpContext) -> None:
    """mul.cc takes int16 only symmetric: with zero points the int32 product of two int16 values
    could overflow, so the official kernel refuses them rather than widening."""
    zero_points = [qz.scale_and_zero_point(ctx, t, "int16")[1] for t in (ctx.input(0), ctx.input(1), ctx.output(0))]
    if any(zero_points):
        raise ModelExecutionError(f"{ctx.op}: int16 inputs and output need zero points 0, got {zero_points}")


def _quantized_mul(ctx: OpContext, xp: Any, x: Any, y: Any) -> Any:
    s1, z1 = qz.scale_and_zero_point(ctx, ctx.input(0), "first input")
    s2, z2 = qz.scale_and_zero_point(ctx, ctx.input(1), "second input")
    so, zo = qz.scale_and_zero_point(ctx, ctx.output(0), "output")
    multiplier, shift = fp.quantize_multiplier(s1 * s2 / so)
    product = (x.astype(xp.int64) - z1) * (y.astype(xp.int64) - z2)
    out = fp.multiply_by_quantized_multiplier(xp, product, multiplier, shift) + zo
    low, high = qz.activation_range(ctx.options.get("fused_activation_function", "NONE"), so, zo,
                                    ctx.output(0).dtype)
    return xp.clip(out, low, high)


@register("DIV")
class Div(_Binary):
    """Quantized inputs (uint8, int8, int16) take div.cc's fixed-point kernel (``DivElementwise``):
    a divisor equal to its zero point is an error, as an integer zero divisor is."""
    dtypes = ("float32", "float16", "int32") + QUANTIZED_8BIT + ("int16",)
    quantized_dtypes = QUANTIZED_8BIT + ("int16",)
    clamps_result = True

    def quantized(self, ctx, x, y):
        return _quantized_div(ctx, ctx.xp, x, y)

    def validate(self, ctx, x, y):
        if not is_float(y):
            raise_on_zero_divisor(ctx, y)

    def apply(self, xp, x, y):
        if is_float(x):
            return x / y
        return _truncating_int_div(xp, x, y)


# --- quantized DIV (div.cc, reference_ops::DivElementwise) -----------------------------------------

def _quantized_div(ctx: OpContext, xp: Any, x: Any, y: Any) -> Any:
    """The quotient of the zero-point-centred inputs times s1 / (s2 * so) (a float32 ratio, as Prepare
    computes it), plus the output zero point, clamped to the activation range.

    The official Eval refuses a divisor equal to its zero point (CheckNonZero); the reference backend
    raises too, XLA (which cannot fail at run time) gives the activation bound of the dividend's sign."""
    dtype = ctx.input(0).dtype
    s1, z1 = qz.scale_and_zero_point(ctx, ctx.input(0), "first input")
    s2, z2 = qz.scale_and_zero_point(ctx, ctx.input(1), "second input")
    so, zo = qz.scale_and_zero_point(ctx, ctx.output(0), "output")
    if not is_traced(y) and np.any(np.asarray(y) == z2):
        raise ModelExecutionError(f"{ctx.op}: division by 0 (a divisor equal to its zero point {z2})")
    low, high = qz.activation_range(ctx.options.get("fused_activation_function", "NONE"), so, zo, dtype)
    numerator = x.astype(xp.int64) - z1
    denominator = y.astype(xp.int64) - z2
    multiplier, shift = fp.quantize_multiplier(float(np.float32(s1) / (np.float32(s2) * np.float32(so))))
    # the final rounding shift must stay a right shift for every dividend (C would shift by a negative count)
    max_shift = 15 if dtype == "int16" else 23
    if shift > max_shift:
        raise ModelExecutionError(f"{ctx.op}: the scale ratio input1 / (input2 * output) = {s1 / (s2 * so):g} "
                                  f"is too large for the official quantized kernel (at most 2^{max_shift})")
    out = _fixed_point_quotient(xp, numerator, denominator, multiplier, shift) + zo
    out = xp.where(denominator == 0, xp.where(numerator >= 0, high, low), out)
    return xp.clip(out, low, high)


def _reciprocal(xp: Any, d: Any) -> tuple[Any, Any]:
    """``GetReciprocal(d, 31, &shift)`` of positive int32 ``d``: 1/d as a Q0.31 value in (1/2, 1] and the
    shift, from gemmlowp's ``one_over_one_plus_x_for_x_in_0_1`` (three Newton-Raphson steps in Q2.29)."""
    mul = fp.saturating_rounding_doubling_high_mul
    leading_zeros = 32 - fp.bit_length(xp, d)
    shift = 31 - leading_zeros
    a = ((d << leading_zeros) & 0xFFFFFFFF) - (1 << 31)  # d normalised to [1, 2), minus one, Q0.31
    half_denominator = (a + (1 << 31)) // 2  # RoundingHalfSum(a, One): a non-negative sum
    x = fp.wrap_int32(xp, 1515870810 + mul(xp, half_denominator, -1010580540))  # 48/17 - 32/17 * d
    for _ in range(3):
        error = fp.wrap_int32(xp, (1 << 29) - mul(xp, half_denominator, x))
        x = fp.wrap_int32(xp, x + fp.saturating_shift_left(xp, mul(xp, x, error), 2))
    return fp.saturating_shift_left(xp, x, 1), shift


def _fixed_point_quotient(xp: Any, numerator: Any, denominator: Any, multiplier: int, shift: int) -> Any:
    """``DivElementwise`` before the zero point: the signs moved to the numerator, the numerator shifted
    up by its headroom, times the divisor's reciprocal, then rescaled by the output multiplier with one
    rounding shift that undoes the headroom and the reciprocal's exponent."""
    negative = denominator < 0
    numerator = xp.where(negative, -numerator, numerator)
    denominator = xp.maximum(xp.abs(denominator), 1)  # 0 (refused above) stands in as 1
    inverse, reciprocal_shift = _reciprocal(xp, denominator)
    headroom = 31 - fp.bit_length(xp, xp.where(numerator < 0, -numerator - 1, numerator))  # CountLeadingSignBits
    mul = fp.saturating_rounding_doubling_high_mul
    unscaled = mul(xp, numerator << headroom, inverse)
    total_shift = shift - reciprocal_shift - headroom
    return _rounding_divide_by_pot_as_compiled(xp, mul(xp, unscaled, multiplier), -total_shift)


def _rounding_divide_by_pot_as_compiled(xp: Any, x: Any, exponent: Any) -> Any:
    """gemmlowp's ``RoundingDivideByPOT`` of int32 values as the x86 build computes it for any exponent.

    A small dividend over a large divisor asks for exponents of 32 and more: the mask
    ``(1ll << exponent) - 1`` is a 64-bit shift (count taken mod 64) truncated to int32, and the
    int32 ``x >> exponent`` takes its count mod 32.  So a zero quotient comes out as 1 and a nonzero
    one barely shifted (it saturates): measured on the official uint8 kernel, e.g. 0 / 200 -> zp + 1."""
    exponent = xp.asarray(exponent, xp.int64)
    mask = fp.wrap_int32(xp, (xp.asarray(1, xp.int64) << (exponent & 63)) - 1)
    remainder = x & mask
    threshold = (mask >> 1) + xp.where(x < 0, 1, 0)
    return (x >> (exponent & 31)) + xp.where(remainder > threshold, 1, 0)


def _truncating_int_div(xp: Any, x: Any, y: Any) -> Any:
    # Floor division rounds toward -inf; C rounds toward zero, which differs when
    # the signs differ and the division is inexact.
    q = x // y
    inexact_negative = (q * y != x) & ((x < 0) != (y < 0))
    return xp.where(inexact_negative, q + 1, q)


@register("FLOOR_DIV")
class FloorDiv(_Binary):
    dtypes = ("float32", "float16", "int32", "int16", "int8")

    def validate(self, ctx, x, y):
        raise_on_zero_divisor(ctx, y)

    def apply(self, xp, x, y):
        return xp.floor(x / y) if is_float(x) else xp.floor_divide(x, y)


@register("FLOOR_MOD")
class FloorMod(_Binary):
    dtypes = ("float32", "float16", "int32", "int64", "int16", "int8")

    def validate(self, ctx, x, y):
        if not is_float(y):
            raise_on_zero_divisor(ctx, y)

    def apply(self, xp, x, y):
        # The official kernel's formula: the truncated remainder, moved into y's sign.
        trunc_mod = xp.fmod(x, y)
        wrong_sign = (trunc_mod != 0) & ((y < 0) != (trunc_mod < 0))
        return xp.where(wrong_sign, trunc_mod + y, trunc_mod)


@register("POW")
class Pow(_Binary):
    dtypes = ("float32", "float16", "int32")

    def validate(self, ctx, x, y):
        if not is_float(y) and not is_traced(y) and np.any(np.asarray(y) < 0):
            raise ModelExecutionError(f"{ctx.op}: integer POW does not support negative exponents")

    def apply(self, xp, x, y):
        if is_float(x):
            return xp.power(x, y)
        return _int_from_double(xp, xp.power(x.astype(np.float64), y.astype(np.float64)), x.dtype)


def _int_from_double(xp: Any, value: Any, dtype: Any) -> Any:
    # The official int POW is std::pow on doubles converted back to int; on x86 an
    # out-of-range conversion yields the "integer indefinite" value, INT_MIN.
    info = np.iinfo(dtype)
    in_range = (value >= info.min) & (value <= info.max)
    return xp.where(in_range, xp.where(in_range, value, 0).astype(dtype), np.asarray(info.min, dtype))


@register("MAXIMUM")
class Maximum(_Binary):
    # int8 / uint8 compare the raw values: the official kernel ignores the quantization
    dtypes = ("float32", "float16", "int32", "int64", "int16", "int8", "uint8")

    def apply(self, xp, x, y):
        # Not xp.maximum: the official `a > b ? a : b` returns b when a is NaN.
        return xp.where(x > y, x, y)


@register("MINIMUM")
class Minimum(_Binary):
    dtypes = ("float32", "float16", "int32", "int64", "int16", "int8", "uint8")

    def apply(self, xp, x, y):
        return xp.where(x < y, x, y)


@register("SQUARED_DIFFERENCE")
class SquaredDifference(_Binary):
    dtypes = ("float32", "float16", "int32", "int8")
    quantized_dtypes = ("int8",)

    def quantized(self, ctx, x, y):
        return _quantized_squared_difference(ctx, ctx.xp, x, y)

    def apply(self, xp, x, y):
        d = x - y
        return d * d


@register("ATAN2")
class Atan2(_Binary):
    """atan2(input 0, input 1); the official kernel does not broadcast."""

    dtypes = ("float32", "float16", "float64")

    def validate(self, ctx, y, x):
        if np.shape(y) != np.shape(x):
            raise ModelExecutionError(f"{ctx.op}: inputs must have one shape, got {np.shape(y)} and {np.shape(x)}")

    def apply(self, xp, y, x):
        return xp.arctan2(y, x)


@register("ADD_N")
class AddN(Op):
    dtypes = ("float32", "float16", "int32")

    def compute(self, ctx: OpContext, *inputs: Any) -> Any:
        if len(inputs) < 2:
            raise ModelExecutionError(f"{ctx.op}: needs at least two inputs, got {len(inputs)}")
        check_same_dtype(ctx, *inputs)
        shapes = {tuple(np.shape(v)) for v in inputs}
        if len(shapes) > 1:
            raise ModelExecutionError(f"{ctx.op}: all inputs must have one shape, got {sorted(shapes)}")
        with np.errstate(all="ignore"):
            total = inputs[0]
            for v in inputs[1:]:
                total = total + v
            return clamp_to_activation_range(ctx.xp, total, "NONE")
