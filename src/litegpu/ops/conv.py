"""CONV_2D: 2-D convolution, NHWC input, OHWI filter, optional bias, fused activation.

Grouped convolution (input channels a multiple of the filter's) follows the
official kernel.  The reference forms the output tap by tap (exact float
semantics, no im2col memory blow-up); the XLA lowering is
``lax.conv_general_dilated``, except 1x1 stride-1 filters, which run as a
matrix product (same speed on XLA CPU, and fewer layout changes).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .common import explicit_padding, fused_activation
from .registry import Op, OpContext, register


def _geometry(ctx: OpContext, x_shape: tuple, w_shape: tuple) -> tuple:
    o = ctx.options
    strides = (o.stride_h, o.stride_w)
    dilations = (o.dilation_h_factor, o.dilation_w_factor)
    pads = explicit_padding(o.padding, (x_shape[1], x_shape[2]), (w_shape[1], w_shape[2]), strides, dilations)
    return strides, dilations, pads


@register("CONV_2D")
class Conv2D(Op):
    dtypes = ("float32", "float16")

    def reference(self, ctx: OpContext, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
        (sh, sw), (dh, dw), ((pt, pb), (pl, pr)) = _geometry(ctx, x.shape, w.shape)
        n, h, wd, cin = x.shape
        cout, kh, kw, cin_g = w.shape
        groups = cin // cin_g
        xp = np.pad(x.astype(np.float32), ((0, 0), (pt, pb), (pl, pr), (0, 0)))
        oh = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1
        ow = (wd + pl + pr - (kw - 1) * dw - 1) // sw + 1
        out = np.zeros((n, oh, ow, cout), np.float32)
        wf = w.astype(np.float32)
        per_group = cout // groups
        for g in range(groups):
            xs = xp[..., g * cin_g:(g + 1) * cin_g]
            wg = wf[g * per_group:(g + 1) * per_group]
            for i in range(kh):
                for j in range(kw):
                    patch = xs[:, i * dh: i * dh + (oh - 1) * sh + 1: sh, j * dw: j * dw + (ow - 1) * sw + 1: sw, :]
                    out[..., g * per_group:(g + 1) * per_group] += patch @ wg[:, i, j, :].T
        if bias is not None:
            out += bias.astype(np.float32)
        return fused_activation(np, out, ctx.options.fused_activation_function).astype(x.dtype)

    def lower(self, ctx: OpContext, x: Any, w: Any, bias: Any = None) -> Any:
        jnp, lax = ctx.xp, ctx.lax
        strides, dilations, pads = _geometry(ctx, x.shape, w.shape)
        cout, kh, kw, cin_g = w.shape
        if kh == kw == 1 and strides == (1, 1) and cin_g == x.shape[-1]:
            y = jnp.einsum("nhwc,oc->nhwo", x, w[:, 0, 0, :], precision=lax.Precision.HIGHEST)
        else:
            y = lax.conv_general_dilated(
                x, w, window_strides=strides, padding=pads, rhs_dilation=dilations,
                dimension_numbers=("NHWC", "OHWI", "NHWC"), feature_group_count=x.shape[-1] // cin_g,
                precision=lax.Precision.HIGHEST)
        if bias is not None:
            y = y + bias
        return fused_activation(jnp, y, ctx.options.fused_activation_function)
