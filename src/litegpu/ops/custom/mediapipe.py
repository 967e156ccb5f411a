"""MediaPipe's custom ops (``mediapipe/util/tflite/operations``).

The official Python package cannot run models that use them ("unresolved
custom op"); the semantics here follow MediaPipe's CPU kernels, including
their quirks:

* MaxPoolingWithArgmax2D stores the argmax as a float ``tap + 0.1`` (tap =
  ``y * filter_width + x`` inside the window) and starts its running maximum at
  the lowest finite float, so NaN and -inf never win and an all-(-inf) window
  yields the lowest float with index 0.1.
* MaxUnpooling2D truncates those floats back to int; when two inputs land on
  the same output pixel the later one (in N, H, W, C order) wins.
* Versions: the CPU resolver registers TransformTensorBilinear,
  TransformLandmarks and Landmarks2TransformMatrix at version 2; version 1
  (GPU delegate only) has other options and is dispatched on ``op.version``.
* The transform ops compute batch 0 only in MediaPipe (other batches are left
  unwritten); here every batch uses the first matrix.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import ModelExecutionError, ModelFormatError
from .._custom_options import (TFLITE_ACTIVATION, TFLITE_PADDING, flex_options, int_list, optional, require,
                              struct_options)
from ..registry import Op, OpContext, register

F32_LOWEST = float(np.finfo(np.float32).min)
F32_MAX = float(np.finfo(np.float32).max)

POOL_PARAMS = ("padding", "stride_width", "stride_height", "filter_width", "filter_height", "activation")
TRANSPOSE_CONV_PARAMS = ("padding", "stride_width", "stride_height")


def _check_rank(ctx: OpContext, value: Any, rank: int, what: str) -> None:
    if value.ndim != rank:
        raise ModelExecutionError(f"{ctx.op}: {what} must have rank {rank}, got shape {tuple(value.shape)}")


def _padding_name(ctx: OpContext, code: int) -> str:
    if code not in TFLITE_PADDING or code == 0:
        raise ModelFormatError(f"{ctx.op}: padding code {code} in its custom options is not SAME (1) or VALID (2)")
    return TFLITE_PADDING[code]


def _positive_strides(ctx: OpContext, params: dict[str, int], *names: str) -> None:
    for name in names:
        if params[name] <= 0:
            raise ModelFormatError(f"{ctx.op}: {name} in its custom options must be positive, got {params[name]}")


# --------------------------------------------------------------------------- Convolution2DTransposeBias

def _transpose_conv_geometry(ctx: OpContext, x_shape: tuple, w_shape: tuple) -> tuple:
    """((pad_before_h, pad_total_h), (pad_before_w, pad_total_w)), (out_h, out_w), (sh, sw)."""
    p = struct_options(ctx.op, "TfLiteTransposeConvParams", TRANSPOSE_CONV_PARAMS)
    _positive_strides(ctx, p, "stride_width", "stride_height")
    same = _padding_name(ctx, p["padding"]) == "SAME"
    strides = (p["stride_height"], p["stride_width"])
    pads, out = [], []
    for in_size, k, s in zip(x_shape[1:3], w_shape[1:3], strides):
        # MediaPipe's own SAME rule (not TRANSPOSE_CONV's): it shrinks the output.
        total = max(0, k - (in_size - 1) % s - 1) if same else 0
        pads.append((total // 2, total))
        out.append(s * (in_size - 1) + k - total)
    return pads, tuple(out), strides


@register("Convolution2DTransposeBias", custom=True)
class Convolution2DTransposeBias(Op):
    """Transpose convolution with bias; weights are OHWI ([out, kh, kw, in])."""

    dtypes = ("float32",)

    def _validate(self, ctx: OpContext, x: Any, w: Any, bias: Any) -> None:
        if bias is None:
            raise ModelExecutionError(f"{ctx.op}: takes 3 inputs (input, weights, bias), the bias is missing")
        _check_rank(ctx, x, 4, "input")
        _check_rank(ctx, w, 4, "weights")
        _check_rank(ctx, bias, 1, "bias")
        if x.shape[3] != w.shape[3]:
            raise ModelExecutionError(f"{ctx.op}: input has {x.shape[3]} channels but the weights "
                                      f"{tuple(w.shape)} expect {w.shape[3]}")
        if bias.shape[0] != w.shape[0]:
            raise ModelExecutionError(f"{ctx.op}: bias has {bias.shape[0]} values, the weights have "
                                      f"{w.shape[0]} output channels")

    def reference(self, ctx: OpContext, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
        self._validate(ctx, x, w, bias)
        ((pt, _), (pl, _)), (oh, ow), (sh, sw) = _transpose_conv_geometry(ctx, x.shape, w.shape)
        n, h, wd, _ = x.shape
        cout, kh, kw, _ = w.shape
        # Every input pixel scatters a kh x kw patch; accumulate tap by tap into an
        # unpadded canvas, then crop the padding away.
        canvas = np.zeros((n, (h - 1) * sh + kh, (wd - 1) * sw + kw, cout), np.float32)
        xf, wf = x.astype(np.float32), w.astype(np.float32)
        for i in range(kh):
            for j in range(kw):
                canvas[:, i: i + (h - 1) * sh + 1: sh, j: j + (wd - 1) * sw + 1: sw, :] += xf @ wf[:, i, j, :].T
        return canvas[:, pt: pt + oh, pl: pl + ow, :] + bias.astype(np.float32)

    def lower(self, ctx: OpContext, x: Any, w: Any, bias: Any = None) -> Any:
        self._validate(ctx, x, w, bias)
        jnp, lax = ctx.xp, ctx.lax
        ((pt, tt), (pl, tl)), _, strides = _transpose_conv_geometry(ctx, x.shape, w.shape)
        kh, kw = w.shape[1], w.shape[2]
        # A transpose conv is a conv of the stride-dilated input with the flipped kernel.
        padding = [(kh - 1 - pt, kh - 1 - (tt - pt)), (kw - 1 - pl, kw - 1 - (tl - pl))]
        y = lax.conv_general_dilated(x, jnp.flip(w, (1, 2)), window_strides=(1, 1), padding=padding,
                                     lhs_dilation=strides, dimension_numbers=("NHWC", "OHWI", "NHWC"),
                                     precision=lax.Precision.HIGHEST)
        return y + bias


# --------------------------------------------------------------------------- pooling with argmax

def _pool_params(ctx: OpContext) -> dict[str, int]:
    p = struct_options(ctx.op, "TfLitePoolParams", POOL_PARAMS)
    _positive_strides(ctx, p, "stride_width", "stride_height", "filter_width", "filter_height")
    return p


def _activation_range(ctx: OpContext, code: int) -> tuple[float, float]:
    name = TFLITE_ACTIVATION.get(code)
    if name is None:
        raise ModelFormatError(f"{ctx.op}: activation code {code} in its custom options is unknown")
    return {"RELU": (0.0, F32_MAX), "RELU6": (0.0, 6.0), "RELU_N1_TO_1": (-1.0, 1.0)}.get(name, (F32_LOWEST, F32_MAX))


@register("MaxPoolingWithArgmax2D", custom=True)
class MaxPoolingWithArgmax2D(Op):
    """Max pool that also returns, as float32, the window position of each maximum."""

    dtypes = ("float32",)

    def compute(self, ctx: OpContext, x: Any) -> tuple[Any, Any]:
        xp = ctx.xp
        _check_rank(ctx, x, 4, "input")
        p = _pool_params(ctx)
        padding = _padding_name(ctx, p["padding"])
        kh, kw, sh, sw = p["filter_height"], p["filter_width"], p["stride_height"], p["stride_width"]
        n, h, w, c = x.shape
        if padding == "SAME":
            oh, ow = -(-h // sh), -(-w // sw)
        else:
            oh, ow = (h - kh + sh) // sh, (w - kw + sw) // sw
        oh, ow = max(oh, 0), max(ow, 0)
        pt = max(0, ((oh - 1) * sh + kh - h) // 2)
        pl = max(0, ((ow - 1) * sw + kw - w) // 2)
        # The kernel's running max starts at the lowest float and only moves on a
        # strict '>', so NaN, -inf and padding can never be picked.
        clean = xp.where(x > F32_LOWEST, x, xp.float32(F32_LOWEST)).astype(xp.float32)
        span_h, span_w = (oh - 1) * sh + kh, (ow - 1) * sw + kw
        padded = xp.pad(clean, ((0, 0), (pt, max(0, span_h - h - pt)), (pl, max(0, span_w - w - pl)), (0, 0)),
                        constant_values=F32_LOWEST)
        taps = xp.stack([padded[:, i: i + (oh - 1) * sh + 1: sh, j: j + (ow - 1) * sw + 1: sw, :]
                         for i in range(kh) for j in range(kw)])
        best = taps.max(axis=0)
        first = xp.argmax((taps == best) & (taps > F32_LOWEST), axis=0)
        lo, hi = _activation_range(ctx, p["activation"])
        out = xp.clip(best, xp.float32(lo), xp.float32(hi))
        return out, first.astype(xp.float32) + xp.float32(0.1)


@register("MaxUnpooling2D", custom=True)
class MaxUnpooling2D(Op):
    """Scatters each value to the window position its (float) argmax names; the rest is 0."""

    dtypes = ("float32",)

    def _targets(self, ctx: OpContext, x: Any, indices: Any) -> tuple[Any, tuple[int, ...]]:
        xp = ctx.xp
        _check_rank(ctx, x, 4, "input")
        _check_rank(ctx, indices, 4, "indices")
        if tuple(indices.shape) != tuple(x.shape):
            raise ModelExecutionError(f"{ctx.op}: indices shape {tuple(indices.shape)} differs from the input's "
                                      f"{tuple(x.shape)}")
        p = _pool_params(ctx)
        kh, kw, sh, sw = p["filter_height"], p["filter_width"], p["stride_height"], p["stride_width"]
        n, h, w, c = x.shape
        oh, ow = h * kh, w * kw
        pt = max(0, ((h - 1) * sh + kh - oh) // 2)
        pl = max(0, ((w - 1) * sw + kw - ow) // 2)
        # C's float->int truncates toward zero, and its % and / keep the dividend's sign.
        idx = xp.trunc(indices).astype(xp.int64)
        dx = xp.fmod(idx, kw)
        dy = (idx - dx) // kw
        iy = xp.arange(h).reshape(1, h, 1, 1)
        ix = xp.arange(w).reshape(1, 1, w, 1)
        ty = iy * sh - pt + dy
        tx = ix * sw - pl + dx
        inside = (ty >= 0) & (ty < oh) & (tx >= 0) & (tx < ow)
        nn = xp.arange(n).reshape(n, 1, 1, 1)
        cc = xp.arange(c).reshape(1, 1, 1, c)
        flat = ((nn * oh + ty) * ow + tx) * c + cc
        out_size = n * oh * ow * c
        return xp.where(inside, flat, out_size).reshape(-1), (n, oh, ow, c)

    def reference(self, ctx: OpContext, x: np.ndarray, indices: np.ndarray) -> np.ndarray:
        target, shape = self._targets(ctx, x, indices)
        size = int(np.prod(shape))
        keep = target < size
        # The last writer wins: keep the highest input position per output pixel.
        winner = np.full(size, -1, np.int64)
        np.maximum.at(winner, target[keep], np.flatnonzero(keep))
        values = x.reshape(-1)
        out = np.where(winner >= 0, values[np.maximum(winner, 0)], np.float32(0))
        return out.astype(np.float32).reshape(shape)

    def lower(self, ctx: OpContext, x: Any, indices: Any) -> Any:
        jnp = ctx.xp
        target, shape = self._targets(ctx, x, indices)
        size = int(np.prod(shape))
        order = jnp.arange(target.shape[0])
        winner = jnp.full(size, -1, order.dtype).at[target].max(order, mode="drop")
        values = x.reshape(-1)
        return jnp.where(winner >= 0, values[jnp.maximum(winner, 0)], 0.0).astype(jnp.float32).reshape(shape)


# --------------------------------------------------------------------------- landmark / transform ops

def _matrix(xp: Any, rows: list[list[Any]]) -> Any:
    return xp.stack([xp.stack([xp.asarray(e, dtype=xp.float32) for e in row]) for row in rows])


def _subset_pairs(ctx: OpContext, values: list[int], key: str) -> list[int]:
    """Flattened (a, b) pairs; an odd trailing index pairs with itself, as MediaPipe parses it."""
    pairs = [(values[2 * i], values[2 * i + 1]) for i in range(len(values) // 2)]
    if len(values) % 2:
        pairs.append((values[-1], values[-1]))
    if not pairs:
        raise ModelFormatError(f"{ctx.op}: custom option {key!r} is empty")
    flat = [i for pair in pairs for i in pair]
    if min(flat) < 0:
        raise ModelFormatError(f"{ctx.op}: custom option {key!r} has a negative landmark index")
    return flat


def _check_landmark_indices(ctx: OpContext, count: int, **indices: int | list[int]) -> None:
    for name, value in indices.items():
        for i in np.atleast_1d(value):
            if not 0 <= int(i) < count:
                raise ModelExecutionError(f"{ctx.op}: {name} {int(i)} is outside the {count} landmarks of the input")


@register("Landmarks2TransformMatrix", custom=True)
class Landmarks2TransformMatrix(Op):
    """A 4x4 crop transform from landmarks (rotation from two landmarks, box from a subset)."""

    dtypes = ("float32",)

    def compute(self, ctx: OpContext, landmarks: Any) -> Any:
        opts = flex_options(ctx.op)
        return self._v1(ctx, opts, landmarks) if ctx.op.version == 1 else self._v2(ctx, opts, landmarks)

    def _v2(self, ctx: OpContext, opts: dict, landmarks: Any) -> Any:
        xp, op = ctx.xp, ctx.op
        _check_rank(ctx, landmarks, 3, "landmarks")
        subset = _subset_pairs(ctx, int_list(op, opts, "subset_idxs"), "subset_idxs")
        left, right = require(op, opts, "left_rotation_idx", int), require(op, opts, "right_rotation_idx", int)
        out_h, out_w = require(op, opts, "output_height", int), require(op, opts, "output_width", int)
        scale_x, scale_y = require(op, opts, "scale_x", float), require(op, opts, "scale_y", float)
        target = require(op, opts, "target_rotation_radians", float)
        if out_h <= 0 or out_w <= 0 or scale_x <= 0 or scale_y <= 0:
            raise ModelFormatError(f"{op}: output size {out_h}x{out_w} and scale ({scale_x}, {scale_y}) "
                                   "must be positive")
        points = landmarks.reshape(-1, 3).astype(xp.float32)
        _check_landmark_indices(ctx, points.shape[0], left_rotation_idx=left, right_rotation_idx=right,
                                subset_idxs=subset)
        delta = points[right] - points[left]
        rotation = xp.float32(target) - xp.arctan2(delta[1], delta[0])
        c, s = xp.cos(rotation), xp.sin(rotation)
        chosen = points[np.asarray(subset)]
        rx = c * chosen[:, 0] - s * chosen[:, 1]
        ry = s * chosen[:, 0] + c * chosen[:, 1]
        max_x, min_x, max_y, min_y = rx.max(), rx.min(), ry.max(), ry.min()
        crop_w, crop_h = max_x - min_x, max_y - min_y
        mid_x, mid_y = (min_x + max_x) / 2, (min_y + max_y) / 2
        # back through the inverse rotation, R(-r)
        crop_x = c * mid_x + s * mid_y
        crop_y = -s * mid_x + c * mid_y
        sx = scale_x * crop_w / out_w
        sy = scale_y * crop_h / out_h
        # shift(crop) @ R(-r) @ scale @ shift(-out/2), multiplied out.
        a00, a01, a10, a11 = c * sx, s * sy, -s * sx, c * sy
        tx = crop_x - (a00 * out_w + a01 * out_h) / 2
        ty = crop_y - (a10 * out_w + a11 * out_h) / 2
        m = _matrix(xp, [[a00, a01, 0.0, tx], [a10, a11, 0.0, ty], [0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]])
        return m.reshape(1, 4, 4)

    def _v1(self, ctx: OpContext, opts: dict, landmarks: Any) -> Any:
        xp, op = ctx.xp, ctx.op
        _check_rank(ctx, landmarks, 4, "landmarks")
        if tuple(landmarks.shape[:3]) != (1, 1, 1):
            raise ModelExecutionError(f"{op}: version 1 expects landmarks of shape [1, 1, 1, 3*N], "
                                      f"got {tuple(landmarks.shape)}")
        dims = require(op, opts, "dimensions", int)
        lm_range = require(op, opts, "landmarks_range", int)
        mult = require(op, opts, "bbox_size_multiplier", float)
        left, right = require(op, opts, "left_rotation_idx", int), require(op, opts, "right_rotation_idx", int)
        in_hw, out_hw = int_list(op, opts, "input_hw"), int_list(op, opts, "output_hw")
        subset = _subset_pairs(ctx, int_list(op, opts, "subset"), "subset")
        if (dims != 3 or lm_range <= 0 or mult == 0 or len(in_hw) != 2 or len(out_hw) != 2
                or min(in_hw) <= 0 or min(out_hw) <= 0):
            raise ModelFormatError(f"{op}: invalid options (dimensions {dims} must be 3, landmarks_range "
                                   f"{lm_range} > 0, bbox_size_multiplier {mult} != 0, input_hw {in_hw} and "
                                   f"output_hw {out_hw} positive pairs)")
        points = landmarks.reshape(-1, 3).astype(xp.float32)
        _check_landmark_indices(ctx, points.shape[0], left_rotation_idx=left, right_rotation_idx=right,
                                subset=subset)
        delta = points[right] - points[left]
        alpha = -xp.arctan(delta[1] / delta[0])
        c, s = xp.cos(alpha), xp.sin(alpha)
        chosen = points[np.asarray(subset)]
        rx = chosen[:, 0] * c - chosen[:, 1] * s
        ry = chosen[:, 0] * s + chosen[:, 1] * c
        # the kernel's running extremes start at +-100000
        max_x, max_y = xp.maximum(rx.max(), -100000.0), xp.maximum(ry.max(), -100000.0)
        min_x, min_y = xp.minimum(rx.min(), 100000.0), xp.minimum(ry.min(), 100000.0)
        box_w, box_h = (max_x - min_x) * mult, (max_y - min_y) * mult
        mid_x, mid_y = (max_x + min_x) / 2, (max_y + min_y) / 2
        # middle rotated by -alpha
        rmid_x = mid_x * c + mid_y * s
        rmid_y = -mid_x * s + mid_y * c
        scale = _matrix(xp, [[box_w / lm_range, 0.0, 0.0], [0.0, box_h / lm_range, 0.0], [0.0, 0.0, 1.0]])
        rotation = _matrix(xp, [[c, s, rmid_x / lm_range * 2 - 1], [-s, c, rmid_y / lm_range * 2 - 1],
                                [0.0, 0.0, 1.0]])
        (ih, iw), (oh, ow) = in_hw, out_hw
        to_relative = _matrix(xp, [[2.0 / (ow - 1.0), 0.0, -1.0], [0.0, 2.0 / (oh - 1.0), -1.0], [0.0, 0.0, 1.0]])
        to_absolute = _matrix(xp, [[(iw - 1.0) / 2, 0.0, (iw - 1.0) / 2], [0.0, (ih - 1.0) / 2, (ih - 1.0) / 2],
                                   [0.0, 0.0, 1.0]])
        itm = to_absolute @ rotation @ scale @ to_relative
        m = _matrix(xp, [[itm[0, 0], itm[0, 1], 0.0, itm[0, 2]], [itm[1, 0], itm[1, 1], 0.0, itm[1, 2]],
                         [itm[2, 0], itm[2, 1], itm[2, 2], 0.0], [0.0, 0.0, 0.0, 1.0]])
        return m.reshape(1, 4, 4)


def _first_two_rows(ctx: OpContext, matrix: Any) -> Any:
    if matrix.size < 8:
        raise ModelExecutionError(f"{ctx.op}: the transform matrix has {matrix.size} values, expected a 4x4 matrix")
    return matrix.reshape(-1)[:8].astype(ctx.xp.float32)


@register("TransformLandmarks", custom=True)
class TransformLandmarks(Op):
    """Applies the first two rows of a 4x4 matrix to (x, y) of each landmark; z passes through."""

    dtypes = ("float32",)

    def compute(self, ctx: OpContext, landmarks: Any, matrix: Any) -> Any:
        xp = ctx.xp
        m = _first_two_rows(ctx, matrix)
        if ctx.op.version == 1:
            _check_rank(ctx, landmarks, 4, "landmarks")
            opts = flex_options(ctx.op)
            dims = optional(ctx.op, opts, "dimensions", int, 3)
            scale = optional(ctx.op, opts, "scale", float, 1.0)
            if scale == 0:
                raise ModelFormatError(f"{ctx.op}: custom option 'scale' must not be 0")
        else:
            _check_rank(ctx, landmarks, 3, "landmarks")
            dims, scale = ctx.output(0).shape[-1] if ctx.output(0).shape else landmarks.shape[-1], 1.0
        if dims not in (2, 3) or landmarks.shape[-1] % dims:
            raise ModelExecutionError(f"{ctx.op}: landmarks of {landmarks.shape[-1]} values per position cannot "
                                      f"hold points of {dims} dimensions (2 or 3)")
        points = landmarks.reshape(landmarks.shape[:-1] + (landmarks.shape[-1] // dims, dims))
        x, y = points[..., 0], points[..., 1]
        zero = xp.float32(0)
        # the kernel's dot product with (x, y, 0, 1), summed left to right
        new_x = ((m[0] * x + m[1] * y) + m[2] * zero) + m[3] * xp.float32(scale)
        new_y = ((m[4] * x + m[5] * y) + m[6] * zero) + m[7] * xp.float32(scale)
        parts = [new_x, new_y] + ([points[..., 2]] if dims == 3 else [])
        return xp.stack(parts, axis=-1).reshape(landmarks.shape)


@register("TransformTensorBilinear", custom=True)
class TransformTensorBilinear(Op):
    """Samples the input bilinearly at each output pixel mapped through a 4x4 matrix (0 outside)."""

    dtypes = ("float32",)

    def compute(self, ctx: OpContext, x: Any, matrix: Any) -> Any:
        xp = ctx.xp
        _check_rank(ctx, x, 4, "input")
        out_shape = ctx.output(0).shape
        if len(out_shape) != 4:
            raise ModelExecutionError(f"{ctx.op}: output must have rank 4, the model declares {list(out_shape)}")
        self._check_options(ctx)
        n, h, w, c = x.shape
        oh, ow, oc = out_shape[1], out_shape[2], out_shape[3]
        if oc > c:
            raise ModelExecutionError(f"{ctx.op}: output has {oc} channels, the input only {c}")
        m = _first_two_rows(ctx, matrix)
        mx = [m[0], m[1], m[2], m[3]]
        my = [m[4], m[5], m[6], m[7]]
        if ctx.op.version != 1:
            # version 2 samples pixel centres: the kernel corrects the matrix in double
            mx[3] = (mx[3].astype(xp.float64) + (mx[0] * 0.5 + mx[1] * 0.5 - 0.5)).astype(xp.float32)
            my[3] = (my[3].astype(xp.float64) + (my[0] * 0.5 + my[1] * 0.5 - 0.5)).astype(xp.float32)
        gy, gx = xp.meshgrid(xp.arange(oh, dtype=xp.float32), xp.arange(ow, dtype=xp.float32), indexing="ij")
        # coordinates in float, as the kernel's float4 dot product
        tx = ((mx[0] * gx + mx[1] * gy) + mx[2] * xp.float32(0)) + mx[3]
        ty = ((my[0] * gx + my[1] * gy) + my[2] * xp.float32(0)) + my[3]
        inside = (tx >= 0) & (tx <= w - 1) & (ty >= 0) & (ty <= h - 1)
        fx, fy = xp.floor(tx), xp.floor(ty)
        # the kernel blends in double; the reference does too, XLA stays in float32
        blend = xp.float64 if ctx.lax is None else xp.float32
        rx, ry = (tx - fx)[..., None].astype(blend), (ty - fy)[..., None].astype(blend)
        x0, y0 = fx.astype(xp.int32), fy.astype(xp.int32)
        image = x[..., :oc].astype(xp.float32)

        def read(yy: Any, xx: Any) -> Any:
            ok = (yy >= 0) & (xx >= 0) & (yy < h) & (xx < w)
            values = image[:, xp.clip(yy, 0, h - 1), xp.clip(xx, 0, w - 1), :]
            return xp.where(ok[None, ..., None], values, xp.float32(0)).astype(blend)

        upper = ((1 - rx) * read(y0, x0) + rx * read(y0, x0 + 1)).astype(xp.float32).astype(blend)
        lower = ((1 - rx) * read(y0 + 1, x0) + rx * read(y0 + 1, x0 + 1)).astype(xp.float32).astype(blend)
        result = (ry * lower + (1 - ry) * upper).astype(xp.float32)
        return xp.where(inside[None, ..., None], result, xp.float32(0))

    @staticmethod
    def _check_options(ctx: OpContext) -> None:
        if ctx.op.version == 1 and ctx.op.custom_options:
            mode = flex_options(ctx.op).get("mode", "bilinear")
            if mode != "bilinear":
                raise ModelFormatError(f"{ctx.op}: mode {mode!r} is not supported, only 'bilinear'")
