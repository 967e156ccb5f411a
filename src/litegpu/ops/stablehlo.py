"""The STABLEHLO_* builtin ops: StableHLO kept as-is in a .tflite file.

Most are thin: StableHLO is what XLA speaks, so the lowering is the matching
``jax.lax`` call and the reference kernel is numpy with StableHLO's rules
(no implicit broadcasting beyond scalars, integer division truncates, shifts
past the bit width give 0, dynamic slice starts are clamped, scatter windows
that fall out of bounds are skipped).

Region-carrying ops (REDUCE, REDUCE_WINDOW, SCATTER, SORT) name a body
subgraph.  The common bodies (one ADD/MAX/MIN/MUL/AND/OR over the two
arguments, or "return the update") are recognised and mapped to the native
reduction; any other body is run through ``ctx.run_subgraph``, vectorised
over whole arrays in the reference kernel (the body is elementwise by
construction: it combines scalars).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import ModelExecutionError, UnsupportedOpError
from ..ir import numpy_dtype
from .control_flow import While
from .registry import Op, OpContext, register

FLOAT = ("float32", "float16")
INTS = ("int8", "int16", "int32", "int64", "uint8")
NUMERIC = FLOAT + INTS
ANY = NUMERIC + ("bool",)


def _ints(values: Any) -> list[int]:
    return [] if values is None else [int(v) for v in np.asarray(values).reshape(-1)]


def _out_dtype(ctx: OpContext, i: int = 0) -> np.dtype:
    return numpy_dtype(ctx.output(i).dtype)


def _fail(ctx: OpContext, message: str) -> ModelExecutionError:
    return ModelExecutionError(f"{ctx.op}: {message}")


# --- elementwise ---------------------------------------------------------------------


class _Elementwise(Op):
    dtypes = NUMERIC

    @staticmethod
    def fn(xp: Any, *args: Any) -> Any:
        raise NotImplementedError

    def compute(self, ctx: OpContext, *args: Any) -> Any:
        return self.fn(ctx.xp, *args)


def _is_int(x: Any) -> bool:
    return np.dtype(x.dtype).kind in "iu"


def _divide(xp: Any, x: Any, y: Any) -> Any:
    if not _is_int(x):
        return x / y
    # StableHLO integer division truncates toward zero, like C; x / 0 is left to the platform
    safe = xp.where(y == 0, 1, y)
    q = xp.abs(x) // xp.abs(safe)
    return xp.where((x < 0) != (safe < 0), -q, q).astype(x.dtype)


def _remainder(xp: Any, x: Any, y: Any) -> Any:
    if not _is_int(x):
        return xp.fmod(x, y)
    # the sign follows the dividend, like C's %
    safe = xp.where(y == 0, 1, y)
    return (x - _divide(xp, x, safe) * safe).astype(x.dtype)


def _shift_left(xp: Any, x: Any, y: Any) -> Any:
    # The official kernel is C's << on the promoted type (int or int64) as x86 runs it: the count
    # is taken modulo that width (1 << 32 == 1), narrow types are truncated back.
    wide = np.int64 if np.dtype(x.dtype).itemsize == 8 else np.int32
    bits = np.dtype(wide).itemsize * 8
    count = xp.bitwise_and(y.astype(wide), bits - 1)
    return xp.left_shift(x.astype(wide), count).astype(x.dtype)


def _logistic(xp: Any, x: Any) -> Any:
    return (1 / (1 + xp.exp(-x))).astype(x.dtype)


def _rsqrt(xp: Any, x: Any) -> Any:
    return (1 / xp.sqrt(x)).astype(x.dtype)


ELEMENTWISE: dict[str, tuple[Callable[..., Any], tuple[str, ...]]] = {
    "ADD": (lambda xp, x, y: x + y if x.dtype != np.bool_ else x | y, ANY),
    "SUBTRACT": (lambda xp, x, y: x - y, NUMERIC),
    "MULTIPLY": (lambda xp, x, y: x * y if x.dtype != np.bool_ else x & y, ANY),
    "DIVIDE": (_divide, NUMERIC),
    "REMAINDER": (_remainder, NUMERIC),
    "MAXIMUM": (lambda xp, x, y: xp.maximum(x, y), ANY),
    "MINIMUM": (lambda xp, x, y: xp.minimum(x, y), ANY),
    "POWER": (lambda xp, x, y: xp.power(x, y), FLOAT),
    "AND": (lambda xp, x, y: xp.bitwise_and(x, y), INTS + ("bool",)),
    "OR": (lambda xp, x, y: xp.bitwise_or(x, y), INTS + ("bool",)),
    "SHIFT_LEFT": (_shift_left, INTS),
    "ABS": (lambda xp, x: xp.abs(x), NUMERIC),
    "NEGATE": (lambda xp, x: -x, NUMERIC),
    "COSINE": (lambda xp, x: xp.cos(x), FLOAT),
    "EXPONENTIAL": (lambda xp, x: xp.exp(x), FLOAT),
    "FLOOR": (lambda xp, x: xp.floor(x), FLOAT),
    "LOG": (lambda xp, x: xp.log(x), FLOAT),
    "LOGISTIC": (_logistic, FLOAT),
    "RSQRT": (_rsqrt, FLOAT),
    "TANH": (lambda xp, x: xp.tanh(x), FLOAT),
    "CBRT": (lambda xp, x: xp.cbrt(x), FLOAT),
}


def _register_elementwise() -> None:
    for short, (function, types) in ELEMENTWISE.items():
        cls = type(f"Stablehlo{short.title().replace('_', '')}", (_Elementwise,),
                   {"fn": staticmethod(function), "dtypes": types, "__doc__": f"StableHLO {short.lower()}."})
        register(f"STABLEHLO_{short}")(cls)


_register_elementwise()

_COMPARISONS = {
    "EQ": lambda x, y: x == y, "NE": lambda x, y: x != y, "GE": lambda x, y: x >= y,
    "GT": lambda x, y: x > y, "LE": lambda x, y: x <= y, "LT": lambda x, y: x < y,
}


@register("STABLEHLO_COMPARE")
class StablehloCompare(Op):
    dtypes = ANY

    def compute(self, ctx: OpContext, x: Any, y: Any) -> Any:
        direction = str(ctx.options.comparison_direction).rsplit("_", 1)[-1]
        if direction not in _COMPARISONS:
            raise _fail(ctx, f"unknown comparison direction {ctx.options.comparison_direction}")
        if str(ctx.options.compare_type).endswith("TOTAL_ORDER"):
            raise UnsupportedOpError(f"{ctx.op}: FLOAT_TOTAL_ORDER comparison is not supported")
        return _COMPARISONS[direction](x, y)


@register("STABLEHLO_SELECT")
class StablehloSelect(Op):
    dtypes = ("bool",)

    def compute(self, ctx: OpContext, pred: Any, on_true: Any, on_false: Any) -> Any:
        return ctx.xp.where(pred, on_true, on_false)


@register("STABLEHLO_CLAMP")
class StablehloClamp(Op):
    dtypes = NUMERIC

    def compute(self, ctx: OpContext, low: Any, x: Any, high: Any) -> Any:
        return ctx.xp.minimum(ctx.xp.maximum(x, low), high)


@register("STABLEHLO_CONVERT")
class StablehloConvert(Op):
    dtypes = ANY

    def compute(self, ctx: OpContext, x: Any) -> Any:
        target = _out_dtype(ctx)
        if target == np.bool_:
            return x != 0
        if np.dtype(x.dtype).kind == "f" and target.kind in "iu":
            x = ctx.xp.trunc(x)  # float to int rounds toward zero
        return x.astype(target)


# --- shapes ----------------------------------------------------------------------------


@register("STABLEHLO_RESHAPE")
class StablehloReshape(Op):
    dtypes = ANY

    def compute(self, ctx: OpContext, x: Any) -> Any:
        shape = ctx.output(0).shape
        if int(np.prod(shape)) != int(np.prod(x.shape)):
            raise _fail(ctx, f"cannot reshape {tuple(x.shape)} to {shape}")
        return ctx.xp.reshape(x, shape)


@register("STABLEHLO_BROADCAST_IN_DIM")
class StablehloBroadcastInDim(Op):
    dtypes = ANY

    def compute(self, ctx: OpContext, x: Any) -> Any:
        xp, shape = ctx.xp, ctx.output(0).shape
        dims = _ints(ctx.options.broadcast_dimensions)
        if len(dims) != x.ndim or any(not 0 <= d < len(shape) for d in dims) or len(set(dims)) != len(dims):
            raise _fail(ctx, f"broadcast_dimensions {dims} must map the {x.ndim} operand dims into "
                             f"distinct dims of the rank-{len(shape)} output")
        for i, d in enumerate(dims):
            if x.shape[i] not in (1, shape[d]):
                raise _fail(ctx, f"operand dim {i} of size {x.shape[i]} cannot broadcast to {shape[d]}")
        order = list(np.argsort(dims))
        x = xp.transpose(x, order)  # operand dims in increasing output position
        expanded = [1] * len(shape)
        for i, d in enumerate(sorted(dims)):
            expanded[d] = x.shape[i]
        return xp.broadcast_to(xp.reshape(x, expanded), shape)


@register("STABLEHLO_CONCATENATE")
class StablehloConcatenate(Op):
    dtypes = ANY

    def compute(self, ctx: OpContext, *xs: Any) -> Any:
        axis = int(ctx.options.dimension)
        if not 0 <= axis < xs[0].ndim:
            raise _fail(ctx, f"dimension {axis} is out of range for rank {xs[0].ndim}")
        return ctx.xp.concatenate(xs, axis=axis)


@register("STABLEHLO_SLICE")
class StablehloSlice(Op):
    dtypes = ANY

    def compute(self, ctx: OpContext, x: Any) -> Any:
        start, limit = _ints(ctx.options.start_indices), _ints(ctx.options.limit_indices)
        strides = _ints(ctx.options.strides) or [1] * x.ndim
        if not len(start) == len(limit) == len(strides) == x.ndim:
            raise _fail(ctx, f"start/limit/strides need {x.ndim} entries each")
        for s, l, d in zip(start, limit, x.shape):
            if not 0 <= s <= l <= d:
                raise _fail(ctx, f"slice [{s}, {l}) is outside a dim of size {d}")
        return x[tuple(slice(s, l, st) for s, l, st in zip(start, limit, strides))]


def _clamped_starts(ctx: OpContext, starts: Sequence[Any], sizes: Sequence[int], shape: Sequence[int]) -> list[Any]:
    xp = ctx.xp
    return [xp.clip(xp.reshape(s, ()).astype(np.int64 if ctx.lax is None else np.int32), 0, d - n)
            for s, n, d in zip(starts, sizes, shape)]


@register("STABLEHLO_DYNAMIC_SLICE")
class StablehloDynamicSlice(Op):
    dtypes = ANY

    def _sizes(self, ctx: OpContext, x: Any, starts: Sequence[Any]) -> list[int]:
        sizes = _ints(ctx.options.slice_sizes)
        if len(sizes) != x.ndim or len(starts) != x.ndim:
            raise _fail(ctx, f"needs {x.ndim} start indices and slice sizes, got {len(starts)} and {len(sizes)}")
        if any(not 0 <= n <= d for n, d in zip(sizes, x.shape)):
            raise _fail(ctx, f"slice_sizes {sizes} do not fit the operand shape {tuple(x.shape)}")
        return sizes

    def reference(self, ctx: OpContext, x: Any, *starts: Any) -> Any:
        sizes = self._sizes(ctx, x, starts)
        begin = [int(s) for s in _clamped_starts(ctx, starts, sizes, x.shape)]
        return x[tuple(slice(b, b + n) for b, n in zip(begin, sizes))]

    def lower(self, ctx: OpContext, x: Any, *starts: Any) -> Any:
        sizes = self._sizes(ctx, x, starts)
        return ctx.lax.dynamic_slice(x, _clamped_starts(ctx, starts, sizes, x.shape), sizes)


@register("STABLEHLO_DYNAMIC_UPDATE_SLICE")
class StablehloDynamicUpdateSlice(Op):
    dtypes = ANY

    def _check(self, ctx: OpContext, x: Any, update: Any, starts: Sequence[Any]) -> None:
        if update.ndim != x.ndim or len(starts) != x.ndim:
            raise _fail(ctx, f"needs a rank-{x.ndim} update and {x.ndim} start indices")
        if any(u > d for u, d in zip(update.shape, x.shape)):
            raise _fail(ctx, f"update {tuple(update.shape)} is larger than the operand {tuple(x.shape)}")

    def reference(self, ctx: OpContext, x: Any, update: Any, *starts: Any) -> Any:
        self._check(ctx, x, update, starts)
        begin = [int(s) for s in _clamped_starts(ctx, starts, update.shape, x.shape)]
        out = np.array(x, copy=True)
        out[tuple(slice(b, b + n) for b, n in zip(begin, update.shape))] = update
        return out

    def lower(self, ctx: OpContext, x: Any, update: Any, *starts: Any) -> Any:
        self._check(ctx, x, update, starts)
        return ctx.lax.dynamic_update_slice(x, update.astype(x.dtype),
                                            _clamped_starts(ctx, starts, update.shape, x.shape))


def _pad_numpy(x: np.ndarray, value: Any, low: Sequence[int], high: Sequence[int], interior: Sequence[int]) -> np.ndarray:
    """lax.pad in numpy: interior padding first, then edges (negative edges crop)."""
    dilated_shape = [d + max(d - 1, 0) * i for d, i in zip(x.shape, interior)]
    dilated = np.full(dilated_shape, value, x.dtype)
    dilated[tuple(slice(None, None, i + 1) for i in interior)] = x
    grown = np.pad(dilated, [(max(lo, 0), max(hi, 0)) for lo, hi in zip(low, high)], constant_values=value)
    return grown[tuple(slice(max(-lo, 0), n - max(-hi, 0)) for lo, hi, n in zip(low, high, grown.shape))]


@register("STABLEHLO_PAD")
class StablehloPad(Op):
    dtypes = ANY

    def _config(self, ctx: OpContext, x: Any) -> tuple[list[int], list[int], list[int]]:
        low, high = _ints(ctx.options.edge_padding_low), _ints(ctx.options.edge_padding_high)
        interior = _ints(ctx.options.interior_padding) or [0] * x.ndim
        if not len(low) == len(high) == len(interior) == x.ndim:
            raise _fail(ctx, f"needs {x.ndim} low/high/interior paddings")
        if any(i < 0 for i in interior):
            raise _fail(ctx, f"interior padding {interior} must not be negative")
        return low, high, interior

    def reference(self, ctx: OpContext, x: Any, value: Any) -> Any:
        low, high, interior = self._config(ctx, x)
        return _pad_numpy(np.asarray(x), np.asarray(value).reshape(()), low, high, interior)

    def lower(self, ctx: OpContext, x: Any, value: Any) -> Any:
        low, high, interior = self._config(ctx, x)
        value = ctx.xp.reshape(value, ()).astype(x.dtype)
        return ctx.lax.pad(x, value, list(zip(low, high, interior)))


@register("STABLEHLO_IOTA")
class StablehloIota(Op):
    dtypes = ANY

    def input_dtype(self, op, subgraph):
        return subgraph.tensors[op.outputs[0]].dtype

    def compute(self, ctx: OpContext) -> Any:
        xp, shape = ctx.xp, ctx.output(0).shape
        dim = int(ctx.options.iota_dimension)
        if not 0 <= dim < len(shape):
            raise _fail(ctx, f"iota_dimension {dim} is out of range for rank {len(shape)}")
        line = xp.arange(shape[dim], dtype=_out_dtype(ctx))
        return xp.broadcast_to(xp.reshape(line, [-1 if i == dim else 1 for i in range(len(shape))]), shape)


@register("STABLEHLO_TRANSPOSE")
class StablehloTranspose(Op):
    dtypes = ANY

    def compute(self, ctx: OpContext, x: Any) -> Any:
        perm = _ints(ctx.options.permutation)
        if sorted(perm) != list(range(x.ndim)):
            raise _fail(ctx, f"permutation {perm} is not a permutation of {x.ndim} dims")
        return ctx.xp.transpose(x, perm)


# --- dot_general ------------------------------------------------------------------------


@register("STABLEHLO_DOT_GENERAL")
class StablehloDotGeneral(Op):
    dtypes = NUMERIC

    def _dims(self, ctx: OpContext, lhs: Any, rhs: Any) -> tuple[list[int], list[int], list[int], list[int]]:
        o = ctx.options
        lb, rb = _ints(o.lhs_batching_dimensions), _ints(o.rhs_batching_dimensions)
        lc, rc = _ints(o.lhs_contracting_dimensions), _ints(o.rhs_contracting_dimensions)
        if len(lb) != len(rb) or len(lc) != len(rc):
            raise _fail(ctx, "lhs and rhs need as many batching and as many contracting dimensions")
        for a, b in zip(lb + lc, rb + rc):
            if not (0 <= a < lhs.ndim and 0 <= b < rhs.ndim) or lhs.shape[a] != rhs.shape[b]:
                raise _fail(ctx, f"lhs dim {a} and rhs dim {b} must exist and agree in size "
                                 f"(lhs {tuple(lhs.shape)}, rhs {tuple(rhs.shape)})")
        return lb, rb, lc, rc

    def reference(self, ctx: OpContext, lhs: Any, rhs: Any) -> Any:
        lb, rb, lc, rc = self._dims(ctx, lhs, rhs)
        lf = [d for d in range(lhs.ndim) if d not in lb + lc]
        rf = [d for d in range(rhs.ndim) if d not in rb + rc]
        size = lambda x, dims: int(np.prod([x.shape[d] for d in dims], dtype=np.int64))
        acc = np.float64 if lhs.dtype.kind == "f" else np.int64
        a = np.transpose(lhs, lb + lf + lc).reshape(size(lhs, lb), size(lhs, lf), size(lhs, lc)).astype(acc)
        b = np.transpose(rhs, rb + rc + rf).reshape(size(rhs, rb), size(rhs, rc), size(rhs, rf)).astype(acc)
        out_shape = [lhs.shape[d] for d in lb] + [lhs.shape[d] for d in lf] + [rhs.shape[d] for d in rf]
        return np.matmul(a, b).reshape(out_shape).astype(_out_dtype(ctx))

    def lower(self, ctx: OpContext, lhs: Any, rhs: Any) -> Any:
        lb, rb, lc, rc = self._dims(ctx, lhs, rhs)
        lax = ctx.lax
        return lax.dot_general(lhs, rhs, ((lc, rc), (lb, rb)), precision=lax.Precision.HIGHEST,
                               preferred_element_type=_out_dtype(ctx))


# --- convolution ------------------------------------------------------------------------


@register("STABLEHLO_CONVOLUTION")
class StablehloConvolution(Op):
    """Full dimension numbers, dilations, groups and window reversal.

    The reference kernel works in a canonical layout (batch, feature, spatial...)
    and sums one kernel tap at a time over a strided view of the padded input."""

    dtypes = FLOAT + ("int32", "int64")

    def _config(self, ctx: OpContext, lhs: Any, rhs: Any) -> dict:
        o = ctx.options
        spatial = _ints(o.input_spatial_dimensions)
        n = len(spatial)
        c = dict(
            lhs_spec=[int(o.input_batch_dimension), int(o.input_feature_dimension)] + spatial,
            rhs_spec=[int(o.kernel_output_feature_dimension), int(o.kernel_input_feature_dimension)]
            + _ints(o.kernel_spatial_dimensions),
            out_spec=[int(o.output_batch_dimension), int(o.output_feature_dimension)]
            + _ints(o.output_spatial_dimensions),
            strides=_ints(o.window_strides) or [1] * n,
            padding=_ints(o.padding) or [0] * (2 * n),
            lhs_dilation=_ints(o.lhs_dilation) or [1] * n,
            rhs_dilation=_ints(o.rhs_dilation) or [1] * n,
            reversal=[bool(v) for v in np.asarray(o.window_reversal if o.window_reversal is not None else [],
                                                   bool).reshape(-1)] or [False] * n,
            groups=int(o.feature_group_count or 1), batch_groups=int(o.batch_group_count or 1))
        for key in ("lhs_spec", "rhs_spec", "out_spec"):
            if sorted(c[key]) != list(range(n + 2)):
                raise _fail(ctx, f"{key} {c[key]} is not a layout of a rank-{n + 2} tensor")
        if lhs.ndim != n + 2 or rhs.ndim != n + 2:
            raise _fail(ctx, f"lhs and rhs must have rank {n + 2}")
        for key in ("strides", "lhs_dilation", "rhs_dilation", "reversal"):
            if len(c[key]) != n:
                raise _fail(ctx, f"{key} needs {n} entries")
        if len(c["padding"]) != 2 * n:
            raise _fail(ctx, f"padding needs {2 * n} entries")
        features, out_features = lhs.shape[c["lhs_spec"][1]], rhs.shape[c["rhs_spec"][0]]
        if features != rhs.shape[c["rhs_spec"][1]] * c["groups"] or out_features % (c["groups"] * c["batch_groups"]):
            raise _fail(ctx, f"{features} input features do not fit the kernel {tuple(rhs.shape)} with "
                             f"feature_group_count {c['groups']}")
        if c["groups"] > 1 and c["batch_groups"] > 1:
            raise UnsupportedOpError(f"{ctx.op}: feature and batch groups together are not supported")
        return c

    def reference(self, ctx: OpContext, lhs: Any, rhs: Any) -> Any:
        c = self._config(ctx, lhs, rhs)
        acc = np.float64 if lhs.dtype.kind == "f" else np.int64
        x = np.transpose(lhs, c["lhs_spec"]).astype(acc)
        w = np.transpose(rhs, c["rhs_spec"]).astype(acc)
        w = np.flip(w, [2 + i for i, r in enumerate(c["reversal"]) if r])
        pads = c["padding"]
        x = _pad_numpy(x, acc(0), [0, 0] + pads[0::2], [0, 0] + pads[1::2],
                       [0, 0] + [d - 1 for d in c["lhs_dilation"]])
        taps = w.shape[2:]
        out_sp = [max((s - ((k - 1) * d + 1)) // st + 1, 0)
                  for s, k, d, st in zip(x.shape[2:], taps, c["rhs_dilation"], c["strides"])]
        g, bg = c["groups"], c["batch_groups"]
        n, o = x.shape[0], w.shape[0]
        out = np.zeros((n // bg, o, *out_sp), acc)
        for tap in np.ndindex(*taps):
            view = x[(slice(None), slice(None)) + tuple(
                slice(t * d, t * d + (m - 1) * st + 1, st)
                for t, d, m, st in zip(tap, c["rhs_dilation"], out_sp, c["strides"]))]
            k = w[(slice(None), slice(None)) + tap]
            if bg > 1:  # batch groups: the lhs batch splits, each part meets its block of output features
                v = view.reshape(bg, n // bg, *view.shape[1:])
                out += np.einsum("bnc...,boc->nbo...", v, k.reshape(bg, o // bg, -1)).reshape(out.shape)
            else:
                v = view.reshape(n, g, -1, *out_sp)
                out += np.einsum("ngi...,goi->ngo...", v, k.reshape(g, o // g, -1)).reshape(out.shape)
        perm = [0] * out.ndim
        for canonical, position in enumerate(c["out_spec"]):
            perm[position] = canonical
        return np.transpose(out, perm).astype(_out_dtype(ctx))

    def lower(self, ctx: OpContext, lhs: Any, rhs: Any) -> Any:
        c = self._config(ctx, lhs, rhs)
        lax = ctx.lax
        flipped = [i for i, r in zip(c["rhs_spec"][2:], c["reversal"]) if r]
        if flipped:
            rhs = ctx.xp.flip(rhs, flipped)
        dn = lax.ConvDimensionNumbers(tuple(c["lhs_spec"]), tuple(c["rhs_spec"]), tuple(c["out_spec"]))
        pads = c["padding"]
        return lax.conv_general_dilated(
            lhs, rhs, c["strides"], list(zip(pads[0::2], pads[1::2])), c["lhs_dilation"], c["rhs_dilation"],
            dimension_numbers=dn, feature_group_count=c["groups"], batch_group_count=c["batch_groups"],
            precision=lax.Precision.HIGHEST, preferred_element_type=_out_dtype(ctx))


# --- bodies of reduce / reduce_window / scatter ----------------------------------------

_MONOIDS = {"STABLEHLO_ADD": "add", "ADD": "add", "STABLEHLO_MAXIMUM": "max", "MAXIMUM": "max",
            "STABLEHLO_MINIMUM": "min", "MINIMUM": "min", "STABLEHLO_MULTIPLY": "mul", "MUL": "mul",
            "STABLEHLO_AND": "and", "STABLEHLO_OR": "or", "LOGICAL_AND": "and", "LOGICAL_OR": "or"}


def _body_kind(ctx: OpContext, index: int, n_args: int) -> str | None:
    """'add'/'max'/... when the body is one such op over (acc, value); 'second' when it returns its
    second argument (scatter's replace); None for anything else."""
    if not 0 < index < len(ctx.model.subgraphs):
        raise _fail(ctx, f"body subgraph {index} does not exist")
    sg = ctx.model.subgraphs[index]
    if len(sg.inputs) != n_args:
        raise _fail(ctx, f"body subgraph {index} takes {len(sg.inputs)} arguments, expected {n_args}")
    if n_args == 2 and len(sg.outputs) == 1 and not sg.operators and sg.outputs[0] == sg.inputs[1]:
        return "second"
    if n_args != 2 or len(sg.operators) != 1:
        return None
    op = sg.operators[0]
    if op.outputs != sg.outputs or sorted(op.inputs) != sorted(sg.inputs) or op.options.get(
            "fused_activation_function", "NONE") not in (None, "NONE"):
        return None
    return _MONOIDS.get(op.opcode_name)


def _combine(xp: Any, kind: str, a: Any, b: Any) -> Any:
    if kind == "add":
        return a + b if a.dtype != np.bool_ else a | b
    if kind == "mul":
        return a * b if a.dtype != np.bool_ else a & b
    if kind == "max":
        return xp.maximum(a, b)
    if kind == "min":
        return xp.minimum(a, b)
    if kind == "and":
        return xp.bitwise_and(a, b)
    if kind == "or":
        return xp.bitwise_or(a, b)
    return b  # "second"


def _combiner(ctx: OpContext, index: int, n: int) -> Callable[[list[Any], list[Any]], list[Any]]:
    """f(accs, values) -> accs for ``n`` reduced operands, elementwise over whole arrays."""
    kind = _body_kind(ctx, index, 2 * n)
    if kind is not None:
        return lambda accs, vals: [_combine(ctx.xp, kind, accs[0], vals[0])]

    def run_body(accs: list[Any], vals: list[Any]) -> list[Any]:
        results = ctx.run_subgraph(index, list(accs) + list(vals))
        return [ctx.xp.asarray(r).astype(a.dtype) for r, a in zip(results, accs)]
    return run_body


def _lax_computation(ctx: OpContext, index: int, n: int) -> Callable[..., Any]:
    lax = ctx.lax
    kind = _body_kind(ctx, index, 2 * n)
    native = {"add": lax.add, "max": lax.max, "min": lax.min, "mul": lax.mul,
              "and": lax.bitwise_and, "or": lax.bitwise_or}
    if kind in native and n == 1:
        return native[kind]

    def body(accs: Any, vals: Any) -> Any:
        accs, vals = (list(accs), list(vals)) if n > 1 else ([accs], [vals])
        results = [ctx.xp.asarray(r).astype(a.dtype) for r, a in
                   zip(ctx.run_subgraph(index, accs + vals), accs)]
        return tuple(results) if n > 1 else results[0]
    return body


@register("STABLEHLO_REDUCE")
class StablehloReduce(Op):
    dtypes = ANY

    def _split(self, ctx: OpContext, args: Sequence[Any]) -> tuple[list[Any], list[Any], list[int]]:
        n = len(args) // 2
        if len(args) != 2 * n or n == 0:
            raise _fail(ctx, f"needs as many init values as operands, got {len(args)} inputs")
        operands, inits = list(args[:n]), list(args[n:])
        dims = sorted(_ints(ctx.options.dimensions))
        if any(not 0 <= d < operands[0].ndim for d in dims):
            raise _fail(ctx, f"dimensions {dims} are out of range for rank {operands[0].ndim}")
        return operands, inits, dims

    def reference(self, ctx: OpContext, *args: Any) -> list[Any]:
        operands, inits, dims = self._split(ctx, args)
        combine = _combiner(ctx, int(ctx.options.body_subgraph_index), len(operands))
        kept = [d for d in range(operands[0].ndim) if d not in dims]
        kept_shape = [operands[0].shape[d] for d in kept]
        # reduced dims first, flattened: the body folds one row at a time into the accumulators
        rows = [np.transpose(x, dims + kept).reshape(-1, *kept_shape) for x in operands]
        accs = [np.broadcast_to(np.asarray(i).reshape(()), kept_shape).astype(x.dtype)
                for i, x in zip(inits, operands)]
        for r in range(rows[0].shape[0]):
            accs = combine(accs, [row[r] for row in rows])
        return [np.asarray(a) for a in accs]

    def lower(self, ctx: OpContext, *args: Any) -> Any:
        operands, inits, dims = self._split(ctx, args)
        xp = ctx.xp
        inits = [xp.reshape(i, ()).astype(x.dtype) for i, x in zip(inits, operands)]
        computation = _lax_computation(ctx, int(ctx.options.body_subgraph_index), len(operands))
        if len(operands) == 1:
            return ctx.lax.reduce(operands[0], inits[0], computation, dims)
        return list(ctx.lax.reduce(tuple(operands), tuple(inits), computation, dims))


@register("STABLEHLO_REDUCE_WINDOW")
class StablehloReduceWindow(Op):
    dtypes = ANY

    def _config(self, ctx: OpContext, args: Sequence[Any]) -> tuple:
        n = len(args) // 2
        if len(args) != 2 * n or n == 0:
            raise _fail(ctx, f"needs as many init values as operands, got {len(args)} inputs")
        operands, inits = list(args[:n]), list(args[n:])
        rank, o = operands[0].ndim, ctx.options
        window = _ints(o.window_dimensions)
        strides = _ints(o.window_strides) or [1] * rank
        base = _ints(o.base_dilations) or [1] * rank
        wdil = _ints(o.window_dilations) or [1] * rank
        padding = _ints(o.padding) or [0] * (2 * rank)
        if not len(window) == len(strides) == len(base) == len(wdil) == rank or len(padding) != 2 * rank:
            raise _fail(ctx, f"window options need {rank} entries each (padding {2 * rank})")
        pads = list(zip(padding[0::2], padding[1::2]))
        return operands, inits, window, strides, base, wdil, pads

    def reference(self, ctx: OpContext, *args: Any) -> list[Any]:
        operands, inits, window, strides, base, wdil, pads = self._config(ctx, args)
        combine = _combiner(ctx, int(ctx.options.body_subgraph_index), len(operands))
        inits = [np.asarray(i).reshape(()).astype(x.dtype) for i, x in zip(inits, operands)]
        padded = [_pad_numpy(np.asarray(x), i, [p[0] for p in pads], [p[1] for p in pads], [b - 1 for b in base])
                  for x, i in zip(operands, inits)]
        shape = padded[0].shape
        out_shape = [max((s - ((w - 1) * d + 1)) // st + 1, 0)
                     for s, w, d, st in zip(shape, window, wdil, strides)]
        accs = [np.full(out_shape, i, x.dtype) for i, x in zip(inits, operands)]
        for offset in np.ndindex(*window):
            index = tuple(slice(k * d, k * d + (n - 1) * st + 1, st)
                          for k, d, n, st in zip(offset, wdil, out_shape, strides))
            accs = combine(accs, [p[index] for p in padded])
        return [np.asarray(a) for a in accs]

    def lower(self, ctx: OpContext, *args: Any) -> Any:
        operands, inits, window, strides, base, wdil, pads = self._config(ctx, args)
        xp, lax = ctx.xp, ctx.lax
        inits = [xp.reshape(i, ()).astype(x.dtype) for i, x in zip(inits, operands)]
        computation = _lax_computation(ctx, int(ctx.options.body_subgraph_index), len(operands))
        if len(operands) == 1:
            return lax.reduce_window(operands[0], inits[0], computation, window, strides, pads, base, wdil)
        return list(lax.reduce_window(tuple(operands), tuple(inits), computation, window, strides, pads,
                                      base, wdil))


# --- gather / scatter -------------------------------------------------------------------


def _index_vectors(indices: np.ndarray, index_vector_dim: int) -> tuple[np.ndarray, tuple[int, ...]]:
    """(batch..., k) index vectors and the batch shape."""
    if index_vector_dim == indices.ndim:
        indices = indices[..., None]
    else:
        indices = np.moveaxis(indices, index_vector_dim, -1)
    return indices, indices.shape[:-1]


@register("STABLEHLO_GATHER")
class StablehloGather(Op):
    dtypes = ANY

    def _config(self, ctx: OpContext, x: Any, indices: Any) -> tuple:
        o = ctx.options
        offset_dims, collapsed = _ints(o.offset_dims), _ints(o.collapsed_slice_dims)
        start_map, sizes = _ints(o.start_index_map), _ints(o.slice_sizes)
        ivd = int(o.index_vector_dim)
        if len(sizes) != x.ndim or any(not 0 <= s <= d for s, d in zip(sizes, x.shape)):
            raise _fail(ctx, f"slice_sizes {sizes} do not fit the operand {tuple(x.shape)}")
        k = 1 if ivd == indices.ndim else indices.shape[ivd]
        if len(start_map) != k or any(sizes[d] > 1 for d in collapsed):
            raise _fail(ctx, f"start_index_map {start_map} must have {k} entries and collapsed dims size 1")
        return offset_dims, collapsed, start_map, sizes, ivd

    def reference(self, ctx: OpContext, x: Any, indices: Any) -> Any:
        offset_dims, collapsed, start_map, sizes, ivd = self._config(ctx, x, indices)
        vectors, batch_shape = _index_vectors(np.asarray(indices).astype(np.int64), ivd)
        window_shape = [s for d, s in enumerate(sizes) if d not in collapsed]
        result = np.empty((*batch_shape, *window_shape), x.dtype)
        for b in np.ndindex(*batch_shape):
            start = [0] * x.ndim
            for k, d in enumerate(start_map):
                start[d] = int(np.clip(vectors[b][k], 0, x.shape[d] - sizes[d]))
            block = x[tuple(slice(s, s + n) for s, n in zip(start, sizes))]
            result[b] = block.reshape(window_shape)
        # batch dims fill the output positions that offset_dims leave free, in order
        out_rank = len(batch_shape) + len(window_shape)
        batch_pos = [d for d in range(out_rank) if d not in offset_dims]
        return np.moveaxis(result, list(range(out_rank)), batch_pos + offset_dims)

    def lower(self, ctx: OpContext, x: Any, indices: Any) -> Any:
        offset_dims, collapsed, start_map, sizes, ivd = self._config(ctx, x, indices)
        lax = ctx.lax
        if ivd != indices.ndim:  # jax wants the index vector last
            indices = ctx.xp.moveaxis(indices, ivd, -1)
        dn = lax.GatherDimensionNumbers(offset_dims=tuple(offset_dims), collapsed_slice_dims=tuple(collapsed),
                                        start_index_map=tuple(start_map))
        return lax.gather(x, indices, dn, tuple(sizes), indices_are_sorted=bool(ctx.options.indices_are_sorted),
                          mode=lax.GatherScatterMode.CLIP)


@register("STABLEHLO_SCATTER")
class StablehloScatter(Op):
    dtypes = ANY

    def _split(self, ctx: OpContext, args: Sequence[Any]) -> tuple[list[Any], Any, list[Any]]:
        n = (len(args) - 1) // 2
        if len(args) != 2 * n + 1 or n == 0:
            raise _fail(ctx, f"needs operands, indices and as many updates as operands, got {len(args)} inputs")
        return list(args[:n]), args[n], list(args[n + 1:])

    def reference(self, ctx: OpContext, *args: Any) -> list[Any]:
        operands, indices, updates = self._split(ctx, args)
        o = ctx.options
        window_dims, inserted = _ints(o.update_window_dims), _ints(o.inserted_window_dims)
        to_operand = _ints(o.scatter_dims_to_operand_dims)
        combine = _combiner(ctx, int(o.update_computation_subgraph_index), len(operands))
        vectors, batch_shape = _index_vectors(np.asarray(indices).astype(np.int64), int(o.index_vector_dim))
        outs = [np.array(x, copy=True) for x in operands]
        upd_rank = updates[0].ndim
        scatter_pos = [d for d in range(upd_rank) if d not in window_dims]
        # updates as (batch..., window...)
        ups = [np.moveaxis(np.asarray(u), scatter_pos + window_dims, list(range(upd_rank))) for u in updates]
        window_shape = ups[0].shape[len(scatter_pos):]
        full_window = list(window_shape)
        for d in sorted(inserted):
            full_window.insert(d, 1)
        rank = outs[0].ndim
        for b in np.ndindex(*batch_shape):
            start = [0] * rank
            for k, d in enumerate(to_operand):
                start[d] = int(vectors[b][k])
            if any(s < 0 or s + n > dim for s, n, dim in zip(start, full_window, outs[0].shape)):
                continue  # StableHLO skips a window that does not fit
            where = tuple(slice(s, s + n) for s, n in zip(start, full_window))
            current = [out[where] for out in outs]
            news = combine(current, [u[b].reshape(full_window) for u in ups])
            for out, new in zip(outs, news):
                out[where] = new
        return outs

    def lower(self, ctx: OpContext, *args: Any) -> Any:
        operands, indices, updates = self._split(ctx, args)
        o, lax, xp = ctx.options, ctx.lax, ctx.xp
        index = int(o.update_computation_subgraph_index)
        kind = _body_kind(ctx, index, 2 * len(operands))
        ivd = int(o.index_vector_dim)
        if ivd == indices.ndim:
            indices = indices[..., None]
        elif ivd != indices.ndim - 1:
            indices = xp.moveaxis(indices, ivd, -1)
        dn = lax.ScatterDimensionNumbers(update_window_dims=tuple(_ints(o.update_window_dims)),
                                         inserted_window_dims=tuple(_ints(o.inserted_window_dims)),
                                         scatter_dims_to_operand_dims=tuple(_ints(o.scatter_dims_to_operand_dims)))
        native = {"second": lax.scatter, "add": lax.scatter_add, "max": lax.scatter_max,
                  "min": lax.scatter_min, "mul": lax.scatter_mul}
        if len(operands) != 1 or kind not in native:
            raise UnsupportedOpError(f"{ctx.op}: only replace/add/max/min/mul update bodies of one "
                                     "operand have an XLA lowering")
        return native[kind](operands[0], indices, updates[0].astype(operands[0].dtype), dn,
                            indices_are_sorted=bool(o.indices_are_sorted), unique_indices=bool(o.unique_indices),
                            mode=lax.GatherScatterMode.FILL_OR_DROP)


# --- sort / while / case ----------------------------------------------------------------


def _sort_direction(ctx: OpContext, index: int, n: int) -> bool:
    """True for descending: the comparator must be a single GT/LT of (lhs0, rhs0)."""
    sg = ctx.model.subgraphs[index] if 0 < index < len(ctx.model.subgraphs) else None
    if sg is None or len(sg.inputs) != 2 * n or len(sg.operators) != 1:
        raise UnsupportedOpError(f"{ctx.op}: only comparators made of one COMPARE of the first operand's "
                                 "pair are supported")
    op = sg.operators[0]
    direction = str(op.options.get("comparison_direction", "")).rsplit("_", 1)[-1]
    if op.opcode_name not in ("STABLEHLO_COMPARE",) or direction not in ("GT", "LT", "GE", "LE"):
        raise UnsupportedOpError(f"{ctx.op}: comparator {op.opcode_name} {direction} is not supported")
    lhs_first = tuple(op.inputs) == (sg.inputs[0], sg.inputs[1])
    if not lhs_first and tuple(op.inputs) != (sg.inputs[1], sg.inputs[0]):
        raise UnsupportedOpError(f"{ctx.op}: the comparator must compare the first operand's pair")
    return (direction in ("GT", "GE")) == lhs_first


@register("STABLEHLO_SORT")
class StablehloSort(Op):
    dtypes = NUMERIC

    def compute(self, ctx: OpContext, *operands: Any) -> list[Any]:
        xp = ctx.xp
        axis = int(ctx.options.dimension)
        if not -operands[0].ndim <= axis < operands[0].ndim:
            raise _fail(ctx, f"dimension {axis} is out of range for rank {operands[0].ndim}")
        descending = _sort_direction(ctx, int(ctx.options.comparator_subgraph_index), len(operands))
        key = operands[0]
        if descending:  # a stable descending order: ascending on a reversed order key
            key = ~key if _is_int(key) else -key
        order = xp.argsort(key, axis=axis, stable=True) if ctx.lax is not None else \
            np.argsort(key, axis=axis, kind="stable")
        return [xp.take_along_axis(x, order, axis=axis) for x in operands]


@register("STABLEHLO_WHILE")
class StablehloWhile(While):
    """Same options (cond/body subgraph indices) and semantics as WHILE."""


@register("STABLEHLO_CASE")
class StablehloCase(Op):
    dtypes = ("int32",)

    def _branches(self, ctx: OpContext) -> list[int]:
        branches = _ints(ctx.options.branch_subgraph_indices)
        if not branches or any(not 0 < b < len(ctx.model.subgraphs) for b in branches):
            raise _fail(ctx, f"branch subgraphs {branches} do not all exist")
        return branches

    def _run_chosen(self, ctx: OpContext, branches: list[int], index: Any, operands: Sequence[Any]) -> list[Any]:
        i = int(np.asarray(index).reshape(()))
        chosen = branches[i] if 0 <= i < len(branches) else branches[-1]  # out of range: the last
        return [ctx.xp.asarray(r).astype(_out_dtype(ctx, k))
                for k, r in enumerate(ctx.run_subgraph(chosen, list(operands)))]

    def reference(self, ctx: OpContext, index: Any, *operands: Any) -> list[Any]:
        return self._run_chosen(ctx, self._branches(ctx), index, operands)

    def lower(self, ctx: OpContext, index: Any, *operands: Any) -> list[Any]:
        xp, lax = ctx.xp, ctx.lax
        branches = self._branches(ctx)
        if isinstance(index, np.ndarray):  # known while tracing: trace only that branch
            return self._run_chosen(ctx, branches, index, operands)
        # lax.switch clamps a negative index to 0, StableHLO sends it to the last branch
        i = xp.reshape(index, ()).astype(np.int32)
        i = xp.where((i < 0) | (i >= len(branches)), len(branches) - 1, i)

        def branch(b: int) -> Callable[[tuple], tuple]:
            return lambda ops: tuple(xp.asarray(r).astype(_out_dtype(ctx, k))
                                     for k, r in enumerate(ctx.run_subgraph(b, list(ops))))
        return list(lax.switch(i, [branch(b) for b in branches], tuple(operands)))
