"""Helpers several op modules share: fused activations, padding arithmetic."""

from __future__ import annotations

from typing import Any


def fused_activation(xp: Any, x: Any, name: str | None) -> Any:
    """Apply a TFLite ``ActivationFunctionType`` to a float result."""
    if name in (None, "NONE"):
        return x
    if name == "RELU":
        return xp.maximum(x, 0)
    if name == "RELU6":
        return xp.clip(x, 0, 6)
    if name == "RELU_N1_TO_1":
        return xp.clip(x, -1, 1)
    if name == "TANH":
        return xp.tanh(x)
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
