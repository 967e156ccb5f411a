"""Helpers several op modules share: fused activations, padding arithmetic."""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Iterator
from typing import Any

import numpy as np


def fused_activation(xp: Any, x: Any, name: str | None) -> Any:
    """A TFLite ``fused_activation_function`` as the official builtin kernels apply it to a result.

    Most kernels (ADD / SUB / MUL / DIV, CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV, the pools, ...) turn the
    activation into a clamp range with ``CalculateActivationRange``, which knows only RELU, RELU_N1_TO_1 and
    RELU6: every other value (TANH, SIGN_BIT, ...) yields the full range, so the official result carries no
    activation at all.  We match that (measured against the builtin kernels for every op with the field).
    Kernels that apply the activation function itself (the recurrent ones, the hybrid FULLY_CONNECTED) use
    :func:`applied_activation`; kernels that refuse some values say so in their op module."""
    if name == "RELU":
        return xp.maximum(x, 0)
    if name == "RELU6":
        return xp.clip(x, 0, 6)
    if name == "RELU_N1_TO_1":
        return xp.clip(x, -1, 1)
    return x


def applied_activation(xp: Any, x: Any, name: str | None) -> Any:
    """The official ``ApplyActivationToVector`` (RNN, LSTM, SVDF, hybrid FULLY_CONNECTED): the function itself."""
    if name in (None, "NONE", "RELU", "RELU6", "RELU_N1_TO_1"):
        return fused_activation(xp, x, name)
    if name == "TANH":
        return xp.tanh(x)
    if name == "SIGMOID":
        return 1 / (1 + xp.exp(-x))
    if name == "SIGN_BIT":
        return xp.signbit(x).astype(x.dtype)
    raise ValueError(f"unknown fused activation {name!r}")


def same_padding(in_size: int, kernel: int, stride: int, dilation: int = 1) -> tuple[int, int]:
    """(before, after) padding of TFLite's SAME: the odd extra pixel goes after."""
    effective = (kernel - 1) * dilation + 1
    out = (in_size + stride - 1) // stride
    total = max((out - 1) * stride + effective - in_size, 0)
    return total // 2, total - total // 2


def conv_output_size(in_size: int, kernel: int, stride: int, dilation: int, padding: str) -> int:
    effective = (kernel - 1) * dilation + 1
    if padding == "SAME":
        return (in_size + stride - 1) // stride
    return (in_size - effective + stride) // stride


def explicit_padding(padding: str, in_hw: tuple[int, int], kernel_hw: tuple[int, int],
                     strides: tuple[int, int], dilations: tuple[int, int] = (1, 1)) -> list[tuple[int, int]]:
    if padding == "VALID":
        return [(0, 0), (0, 0)]
    return [same_padding(in_hw[i], kernel_hw[i], strides[i], dilations[i]) for i in range(2)]


def float32_steps(lax: Any, x: Any) -> Any:
    """Round float64 values to float32 precision, keeping float64: one float32 C operation,
    emulated exactly (a float64 +, - or * of float32 values, then this, is the float32
    result).  Under XLA (``lax`` given) a convert round trip could be folded away and a
    multiply-add fused into an FMA, so the rounding is an explicit ``reduce_precision``."""
    if lax is not None:
        return lax.reduce_precision(x, 8, 23)
    import numpy as np

    return np.asarray(x, np.float64).astype(np.float32).astype(np.float64)


def constant_tensor(ctx: Any, index: int) -> Any:
    """A constant tensor that an op reads without taking it as an input (the scales named by
    blockwise quantization details).  Under XLA the backend gives its device parameter where it
    has one, so that a big constant is not baked into the program; otherwise the model's data."""
    reader = getattr(ctx.backend, "read_constant", None)
    if ctx.target.is_xla and reader is not None:
        return reader(ctx.subgraph, index)
    return ctx.subgraph.tensors[index].data


def stored_weight(ctx: Any, i: int) -> Any:
    """Input ``i`` as the XLA CPU backend stores it when it is a weight parameter (int4 still packed two
    values a byte, nothing converted), for kernels that convert it slice by slice inside a loop; None
    elsewhere (numpy, GPUs, weights split over devices, values that are not parameters)."""
    reader = getattr(ctx.backend, "stored_weight", None)
    index = ctx.op.inputs[i] if i < len(ctx.op.inputs) else -1
    if reader is None or index < 0 or getattr(ctx.target, "name", "") != "XLA_CPU":
        return None
    return reader(ctx.subgraph, index)


def unpack_sub_byte(xp: Any, packed: Any, bits: int, signed: bool) -> Any:
    """Values of ``bits`` bits packed along the last axis of uint8 ``packed`` (element i in the low bits
    first, as TFLite packs int4): the last axis grows by 8 / bits; sign-extended when ``signed``."""
    shifts = xp.arange(0, 8, bits, dtype=xp.uint8)
    values = ((packed[..., None] >> shifts) & xp.uint8((1 << bits) - 1)).reshape(
        *packed.shape[:-1], packed.shape[-1] * (8 // bits))
    if not signed:
        return values
    sign = xp.int8(1 << (bits - 1))
    return (values.astype(xp.int8) ^ sign) - sign


# ``computed_once`` and ``tie_to`` steer XLA's scheduler.  An engine that compiles litegpu's StableHLO with
# another compiler (IREE) traces without them (``without_xla_steering``): that compiler needs no steering, and
# IREE 3.13 never finished compiling the integer division that ``computed_once`` makes of an int64 tensor.
_XLA_STEERING = contextvars.ContextVar("litegpu_xla_steering", default=True)


@contextlib.contextmanager
def while_set(variable: contextvars.ContextVar, value: Any) -> Iterator[None]:
    """``variable`` holds ``value`` inside the block (a tracing mode: see ``without_xla_steering``)."""
    token = variable.set(value)
    try:
        yield
    finally:
        variable.reset(token)


def without_xla_steering() -> contextlib.AbstractContextManager:
    """Trace ops without the hints meant for XLA's scheduler (``computed_once``, ``tie_to`` are then identities)."""
    return while_set(_XLA_STEERING, False)


def rounded_apart(xp: Any, lax: Any, x: Any) -> Any:
    """``x`` unchanged, but XLA CPU cannot contract the multiply that made it into a later add as one fused
    multiply-add (a select between them; NaN stays NaN): the official kernels round every step.  numpy: ``x``."""
    if lax is None:
        return x
    return lax.select(lax.ne(x, x), xp.full_like(x, np.nan), x)


def apart_for_iree(lax: Any, x: Any) -> Any:
    """``x`` unchanged; traced for IREE (``without_xla_steering``), behind an optimization barrier, which IREE
    does not fuse across.  IREE 3.13 computed a run-time DEQUANTIZE fused into the FULLY_CONNECTED or
    BATCH_MATMUL reading it wrongly (an int8 transformer's float view 1.3 off on lavapipe, each op alone exact;
    ``tests/gpu``): the float activation is materialized instead (XLA needs no barrier and gets none)."""
    if lax is None or _XLA_STEERING.get():
        return x
    return lax.optimization_barrier(x)


def opaque_zero(xp: Any, lax: Any, x: Any) -> Any:
    """A float32 -0.0 that XLA computes from the first element of ``x`` and cannot fold away, so
    what reads it runs after ``x`` exists.  y + (-0.0) == y for every float y (-0.0 and NaN
    included); the NaN that an inf or NaN element would give is replaced, so it is always -0.0.
    Under ``jax.vmap`` it is made from the first example alone and stays one scalar: a weight tied to it
    (``tie_to``) is still one weight for all examples, not a copy per example."""
    probe = x.reshape(-1)[0]
    if xp.issubdtype(probe.dtype, xp.complexfloating):
        probe = lax.real(probe)
    return _unbatched_zero()(probe.astype(xp.float32))


@functools.cache
def _unbatched_zero() -> Any:
    """``opaque_zero`` of a float32 scalar, whose batching rule takes the first example's value."""
    import jax.numpy as jnp
    from jax import custom_batching, lax

    @custom_batching.custom_vmap
    def zero_of(probe: Any) -> Any:
        zero = lax.neg(lax.abs(probe) * jnp.float32(0))
        return lax.select(lax.ne(zero, zero), jnp.float32(-0.0), zero)  # NaN -> -0.0

    @zero_of.def_vmap
    def _first_example(axis_size: int, in_batched: list, probe: Any) -> tuple[Any, bool]:
        return zero_of(probe[0] if in_batched[0] else probe), False

    return zero_of


def computed_once(xp: Any, lax: Any, x: Any) -> Any:
    """``x`` unchanged (an exact division by a run-time one), as a value XLA CPU materializes.
    XLA CPU fuses a producer of cheap elementwise ops into every consumer and recomputes it for each element
    the consumer reads, and a division is an op it does not duplicate (an optimization barrier does not stop
    it: XLA CPU removes barriers before fusion).  A matrix-vector product whose matrix is converted (int8
    weights widened) pulled the ops that make the vector into its loop (5x slower decode steps measured); the
    builtin kernels' in-order sums over a depth or a filter's taps read each element many times, and two in a
    row recomputed each other's work (MediaPipe's back-camera face detector in BUILTIN mode: 50x the time of
    its ops run one by one).  numpy: ``x``."""
    if xp is np or x.size == 0 or not _XLA_STEERING.get():
        return x
    one = (xp.float32(1) - opaque_zero(xp, lax, x)).astype(x.dtype)
    return lax.div(x, one)


def tie_to(xp: Any, lax: Any, value: Any, zero: Any) -> Any:
    """``value``, bit for bit, but computed by XLA after the run-time value that ``zero`` (an
    ``opaque_zero``, or None for no tie) was made from: XLA schedules values that depend only on
    parameters (weights converted from float16, int8, int4) at the program's start, all at once.
    Floats are tied through their bits, since XLA CPU flushes subnormals in float arithmetic."""
    if zero is None or not _XLA_STEERING.get():
        return value
    if value.dtype == xp.bool_:
        return lax.bitwise_or(value, zero != 0)
    if xp.issubdtype(value.dtype, xp.complexfloating):
        return lax.complex(tie_to(xp, lax, lax.real(value), zero), tie_to(xp, lax, lax.imag(value), zero))
    if xp.issubdtype(value.dtype, xp.floating):
        bits = xp.dtype(f"int{8 * value.dtype.itemsize}")
        tied = lax.add(lax.bitcast_convert_type(value, bits), lax.convert_element_type(zero, bits))
        return lax.bitcast_convert_type(tied, value.dtype)
    return lax.add(value, lax.convert_element_type(zero, value.dtype))
