"""STABLEHLO_* ops: against the official interpreter where it has a kernel, else against numpy."""

import numpy as np
import pytest

from litegpu.errors import LiteGpuError
from litegpu.ir import read_model
from litegpu.ir.builder import ModelBuilder
from litegpu.ir.save import to_bytes
from oracle import assert_close, check_op_model, random_input, run_ours


def one_op(name, inputs, out_shape, out_dtype="float32", n_out=1, **options):
    """A model of one op; ``inputs`` are arrays (graph inputs) or ('const', array)."""
    b = ModelBuilder()
    idx, feeds = [], []
    for i, x in enumerate(inputs):
        if isinstance(x, tuple):
            idx.append(b.constant(f"c{i}", x[1]))
        else:
            idx.append(b.input(f"x{i}", x.shape, "bool" if x.dtype == np.bool_ else str(x.dtype)))
            feeds.append(x)
    outs = [b.tensor(f"y{k}", out_shape, out_dtype) for k in range(n_out)]
    b.op(name, idx, outs, **options)
    b.output(*outs)
    return b, feeds


def check_expected(model, feeds, expected, atol=1e-5):
    """Our reference and XLA backends both give ``expected`` (ops the official runtime lacks)."""
    model = read_model(to_bytes(model))
    expected = expected if isinstance(expected, list) else [expected]
    for xla in (False, True):
        got = run_ours(model, feeds, xla)
        for g, e in zip(got, expected):
            assert_close(g, np.asarray(e), 1e-5, atol if np.asarray(e).dtype.kind == "f" else 0,
                         f"{'xla' if xla else 'reference'}")


# --- elementwise ------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["ADD", "MULTIPLY", "MAXIMUM", "MINIMUM"])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_binary_matches_official(name, dtype):
    x, y = random_input((2, 3, 4), dtype, seed=1), random_input((2, 3, 4), dtype, seed=2)
    b, feeds = one_op("STABLEHLO_" + name, [x, y], x.shape, dtype)
    check_op_model(b.build(), feeds)


@pytest.mark.parametrize("dtype", ["int32", "int8", "bool"])
def test_and_matches_official(dtype):
    x, y = random_input((3, 5), dtype, seed=1), random_input((3, 5), dtype, seed=2)
    b, feeds = one_op("STABLEHLO_AND", [x, y], x.shape, dtype)
    check_op_model(b.build(), feeds)


@pytest.mark.parametrize("dtype", ["int32", "int8", "int16"])
def test_shift_left_matches_official(dtype):
    bits = np.dtype(dtype).itemsize * 8
    x = np.array([1, -3, 7, 5, 1, 2, 3], dtype)
    s = np.array([0, 1, 2, bits - 1, bits, bits + 3, -1], dtype)
    b, feeds = one_op("STABLEHLO_SHIFT_LEFT", [x, s], x.shape, dtype)
    check_op_model(b.build(), feeds)


X = np.array([-2.5, -1.0, -0.4, 0.3, 1.0, 2.7], np.float32)
Y = np.array([1.5, -0.5, 2.0, 0.7, 3.0, -1.2], np.float32)
XI = np.array([-7, -7, 7, 7, 0, 9], np.int32)
YI = np.array([2, -2, 2, -2, 3, 4], np.int32)

UNARY = {
    "ABS": np.abs, "NEGATE": np.negative, "COSINE": np.cos, "EXPONENTIAL": np.exp, "FLOOR": np.floor,
    "LOGISTIC": lambda x: 1 / (1 + np.exp(-x)), "TANH": np.tanh, "CBRT": np.cbrt,
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_float(name):
    b, feeds = one_op("STABLEHLO_" + name, [X], X.shape)
    check_expected(b.build(), feeds, UNARY[name](X).astype(np.float32))


@pytest.mark.parametrize("name,fn", [("LOG", np.log), ("RSQRT", lambda x: 1 / np.sqrt(x))])
def test_unary_positive(name, fn):
    x = np.abs(X) + 0.1
    b, feeds = one_op("STABLEHLO_" + name, [x], x.shape)
    check_expected(b.build(), feeds, fn(x).astype(np.float32))


@pytest.mark.parametrize("name,fn", [("SUBTRACT", np.subtract), ("DIVIDE", np.divide), ("REMAINDER", np.fmod),
                                     ("POWER", lambda x, y: np.power(np.abs(x), y))])
def test_binary_float(name, fn):
    x = np.abs(X) if name == "POWER" else X
    b, feeds = one_op("STABLEHLO_" + name, [x, Y], X.shape)
    check_expected(b.build(), feeds, fn(x, Y).astype(np.float32))


@pytest.mark.parametrize("name,expected", [
    ("DIVIDE", [-3, 3, 3, -3, 0, 2]),      # truncates toward zero
    ("REMAINDER", [-1, -1, 1, 1, 0, 1]),   # sign of the dividend
    ("SUBTRACT", [-9, -5, 5, 9, -3, 5]),
    ("OR", list(np.bitwise_or(XI, YI))),
    ("ABS", [7, 7, 7, 7, 0, 9]),
])
def test_integer_semantics(name, expected):
    ins = [XI] if name == "ABS" else [XI, YI]
    b, feeds = one_op("STABLEHLO_" + name, ins, XI.shape, "int32")
    check_expected(b.build(), feeds, np.array(expected, np.int32))


@pytest.mark.parametrize("direction", ["EQ", "NE", "GE", "GT", "LE", "LT"])
def test_compare(direction):
    y = Y.copy()
    y[1] = X[1]
    b, feeds = one_op("STABLEHLO_COMPARE", [X, y], X.shape, "bool",
                      comparison_direction=f"STABLEHLO_COMPARISON_DIRECTION_{direction}")
    fn = {"EQ": np.equal, "NE": np.not_equal, "GE": np.greater_equal, "GT": np.greater,
          "LE": np.less_equal, "LT": np.less}[direction]
    check_expected(b.build(), feeds, fn(X, y))


def test_select_and_clamp():
    pred = X > 0
    b, feeds = one_op("STABLEHLO_SELECT", [pred, X, Y], X.shape)
    check_expected(b.build(), feeds, np.where(pred, X, Y))
    lo, hi = np.array(-1.0, np.float32), np.array(1.5, np.float32)
    b, feeds = one_op("STABLEHLO_CLAMP", [lo, X, hi], X.shape)
    check_expected(b.build(), feeds, np.clip(X, -1.0, 1.5))


@pytest.mark.parametrize("x,dtype,expected", [
    (X, "int32", [-2, -1, 0, 0, 1, 2]),
    (X, "bool", [True] * 6),
    (XI, "float32", XI.astype(np.float32)),
    (XI, "int8", XI.astype(np.int8)),
])
def test_convert(x, dtype, expected):
    b, feeds = one_op("STABLEHLO_CONVERT", [x], x.shape, dtype)
    check_expected(b.build(), feeds, np.array(expected).astype(dtype))


# --- shapes -----------------------------------------------------------------------------

A = np.arange(24, dtype=np.float32).reshape(2, 3, 4)


def test_reshape_and_transpose():
    b, feeds = one_op("STABLEHLO_RESHAPE", [A], (4, 6))
    check_expected(b.build(), feeds, A.reshape(4, 6))
    b, feeds = one_op("STABLEHLO_TRANSPOSE", [A], (4, 2, 3), permutation=[2, 0, 1])
    check_expected(b.build(), feeds, A.transpose(2, 0, 1))


@pytest.mark.parametrize("operand,dims,shape", [
    ((3,), [1], (2, 3, 4)),
    ((4, 3), [2, 1], (2, 3, 4)),        # unsorted dims transpose the operand
    ((1, 4), [0, 2], (5, 3, 4)),        # size-1 dims stretch
    ((), [], (2, 2)),
])
def test_broadcast_in_dim(operand, dims, shape):
    x = random_input(operand)
    b, feeds = one_op("STABLEHLO_BROADCAST_IN_DIM", [x], shape, broadcast_dimensions=dims)
    order = np.argsort(dims)
    expanded = [1] * len(shape)
    for i, d in enumerate(sorted(dims)):
        expanded[d] = x.transpose(order).shape[i]
    check_expected(b.build(), feeds, np.broadcast_to(x.transpose(order).reshape(expanded), shape))


def test_concatenate_and_slice():
    b, feeds = one_op("STABLEHLO_CONCATENATE", [A, A + 1], (2, 6, 4), dimension=1)
    check_expected(b.build(), feeds, np.concatenate([A, A + 1], 1))
    b, feeds = one_op("STABLEHLO_SLICE", [A], (1, 2, 2), start_indices=[1, 0, 1], limit_indices=[2, 3, 4],
                      strides=[1, 2, 2])
    check_expected(b.build(), feeds, A[1:2, 0:3:2, 1:4:2])


@pytest.mark.parametrize("starts", [(0, 1, 1), (1, 2, 3), (-4, 5, 9)])  # out of range starts are clamped
def test_dynamic_slice_and_update(starts):
    s = [np.array(v, np.int32) for v in starts]
    b, feeds = one_op("STABLEHLO_DYNAMIC_SLICE", [A, *s], (1, 2, 2), slice_sizes=[1, 2, 2])
    c = [min(max(v, 0), d - n) for v, d, n in zip(starts, A.shape, (1, 2, 2))]
    check_expected(b.build(), feeds, A[c[0]:c[0] + 1, c[1]:c[1] + 2, c[2]:c[2] + 2])
    u = -np.ones((1, 2, 2), np.float32)
    b, feeds = one_op("STABLEHLO_DYNAMIC_UPDATE_SLICE", [A, u, *s], A.shape)
    want = A.copy()
    want[c[0]:c[0] + 1, c[1]:c[1] + 2, c[2]:c[2] + 2] = u
    check_expected(b.build(), feeds, want)


@pytest.mark.parametrize("low,high,interior", [
    ([1, 0, 2], [0, 1, 1], [0, 0, 0]),
    ([0, 1, 0], [1, 0, 2], [1, 0, 2]),
    ([-1, 0, -1], [0, -1, 1], [0, 1, 1]),   # negative edges crop
])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_pad_matches_official(low, high, interior, dtype):
    x = random_input((2, 3, 4), dtype)
    shape = [lo + hi + d + max(d - 1, 0) * i for lo, hi, d, i in zip(low, high, x.shape, interior)]
    b, feeds = one_op("STABLEHLO_PAD", [x, ("const", np.array(7, dtype))], shape, dtype,
                      edge_padding_low=low, edge_padding_high=high, interior_padding=interior)
    check_op_model(b.build(), feeds)


@pytest.mark.parametrize("dim,dtype", [(0, "int32"), (1, "float32")])
def test_iota(dim, dtype):
    b, feeds = one_op("STABLEHLO_IOTA", [], (3, 4), dtype, iota_dimension=dim)
    want = np.broadcast_to(np.arange((3, 4)[dim]).reshape([-1, 1] if dim == 0 else [1, -1]), (3, 4))
    check_expected(b.build(), feeds, want.astype(dtype))


# --- dot_general -------------------------------------------------------------------------

@pytest.mark.parametrize("lhs,rhs,lb,rb,lc,rc,spec", [
    ((3, 4), (4, 5), [], [], [1], [0], "ij,jk->ik"),
    ((2, 3, 4), (2, 5, 4), [0], [0], [2], [2], "bij,bkj->bik"),
    ((4, 2, 3), (3, 2, 5), [1], [1], [2], [0], "ibj,jbk->bik"),
    ((4, 2, 3), (3, 4, 5), [], [], [0, 2], [1, 0], "ibj,jik->bk"),
])
def test_dot_general(lhs, rhs, lb, rb, lc, rc, spec):
    x, y = random_input(lhs, seed=3), random_input(rhs, seed=4)
    want = np.einsum(spec, x.astype(np.float64), y.astype(np.float64)).astype(np.float32)
    b, feeds = one_op("STABLEHLO_DOT_GENERAL", [x, y], want.shape, lhs_batching_dimensions=lb,
                      rhs_batching_dimensions=rb, lhs_contracting_dimensions=lc, rhs_contracting_dimensions=rc,
                      precision_config=["HIGHEST"])
    check_expected(b.build(), feeds, want, atol=1e-4)


# --- regions: reduce, reduce_window, scatter, sort, while, case ------------------------------

def binary_body(b, op, dtype="float32", n=1):
    """A body subgraph taking 2n scalars: ``op`` over the first pair (or a two-op body for n=2)."""
    sg = b.subgraph("body")
    args = [sg.input(f"a{i}", (), dtype) for i in range(2 * n)]
    outs = []
    if op == "second":
        sg.output(args[1])
        return sg.index
    if op == "add_then_max":  # not a recognised monoid: runs through run_subgraph
        t = sg.tensor("t", (), dtype)
        sg.op("STABLEHLO_ADD", [args[0], args[1]], [t])
        outs.append(sg.tensor("o0", (), dtype))
        sg.op("STABLEHLO_MAXIMUM", [t, args[0]], [outs[0]])
    else:
        for k in range(n):
            outs.append(sg.tensor(f"o{k}", (), dtype))
            sg.op(op, [args[k], args[k + n]], [outs[k]])
    sg.output(*outs)
    return sg.index


REDUCERS = {"STABLEHLO_ADD": np.add, "STABLEHLO_MAXIMUM": np.maximum, "STABLEHLO_MINIMUM": np.minimum,
            "STABLEHLO_MULTIPLY": np.multiply}


@pytest.mark.parametrize("body", sorted(REDUCERS) + ["add_then_max"])
@pytest.mark.parametrize("dims", [[1], [0, 2]])
def test_reduce(body, dims):
    x = random_input((2, 3, 4), seed=5, low=0.5, high=1.5)
    init = np.float32(1.0)
    kept = [d for d in range(3) if d not in dims]
    b = ModelBuilder()
    xi = b.input("x", x.shape)
    c = b.constant("init", np.array(init))
    y = b.tensor("y", [x.shape[d] for d in kept])
    index = binary_body(b, body)
    b.op("STABLEHLO_REDUCE", [xi, c], [y], dimensions=dims, body_subgraph_index=index)
    b.output(y)
    if body == "add_then_max":  # positive inputs: max(acc + v, acc) == acc + v, a plain sum
        want = init + x.sum(axis=tuple(dims), dtype=np.float64)
    else:
        want = REDUCERS[body](init, REDUCERS[body].reduce(x.astype(np.float64), axis=tuple(dims)))
    check_expected(b.build(), [x], want.astype(np.float32), atol=1e-4)


@pytest.mark.parametrize("body", ["STABLEHLO_ADD", "STABLEHLO_MAXIMUM"])
@pytest.mark.parametrize("window,strides,base,wdil,padding", [
    ([1, 2, 2, 1], [1, 2, 2, 1], [1, 1, 1, 1], [1, 1, 1, 1], [0] * 8),
    ([1, 3, 3, 1], [1, 1, 2, 1], [1, 1, 1, 1], [1, 1, 1, 1], [0, 0, 1, 1, 1, 1, 0, 0]),
    ([1, 2, 2, 1], [1, 1, 1, 1], [1, 2, 1, 1], [1, 1, 2, 1], [0, 0, 0, 1, 1, 0, 0, 0]),
])
def test_reduce_window_matches_official(body, window, strides, base, wdil, padding):
    x = random_input((1, 5, 6, 2), seed=6)
    dilated = [(d - 1) * bd + 1 for d, bd in zip(x.shape, base)]
    padded = [d + padding[2 * i] + padding[2 * i + 1] for i, d in enumerate(dilated)]
    out = [(p - ((w - 1) * wd + 1)) // s + 1 for p, w, wd, s in zip(padded, window, wdil, strides)]
    b = ModelBuilder()
    xi = b.input("x", x.shape)
    c = b.constant("init", np.array(0.0 if body == "STABLEHLO_ADD" else -np.inf, np.float32))
    y = b.tensor("y", out)
    index = binary_body(b, body)
    b.op("STABLEHLO_REDUCE_WINDOW", [xi, c], [y], window_dimensions=window, window_strides=strides,
         base_dilations=base, window_dilations=wdil, padding=padding, body_subgraph_index=index)
    b.output(y)
    check_op_model(b.build(), [x])


GATHERS = [
    # x shape, indices, offset_dims, collapsed, start_index_map, index_vector_dim, slice_sizes, out shape
    ((5, 3), [[0], [4], [2]], [1], [0], [0], 1, [1, 3], (3, 3)),              # rows, like GATHER axis 0
    ((4, 5), [[1, 2], [3, 4], [0, 0]], [1], [0], [0, 1], 1, [1, 2], (3, 2)),   # clamped 2-wide windows
    ((3, 4, 2), [[[2], [0]]], [2, 3], [0], [0], 2, [1, 4, 2], (1, 2, 4, 2)),
]


@pytest.mark.parametrize("shape,indices,offset,collapsed,smap,ivd,sizes,out", GATHERS)
def test_gather_matches_official(shape, indices, offset, collapsed, smap, ivd, sizes, out):
    x = random_input(shape, seed=7)
    b = ModelBuilder()
    xi = b.input("x", shape)
    ii = b.input("i", np.shape(indices), "int32")
    y = b.tensor("y", out)
    b.op("STABLEHLO_GATHER", [xi, ii], [y], offset_dims=offset, collapsed_slice_dims=collapsed,
         start_index_map=smap, index_vector_dim=ivd, slice_sizes=sizes)
    b.output(y)
    check_op_model(b.build(), [x, np.array(indices, np.int32)])


@pytest.mark.parametrize("body", ["STABLEHLO_ADD", "STABLEHLO_MAXIMUM"])
@pytest.mark.parametrize("indices", [[[0], [2], [0]], [[3], [-1], [4]]])   # repeats; out of range is skipped
def test_scatter_rows_matches_official(body, indices):
    x = random_input((4, 3), seed=8)
    u = random_input((3, 3), seed=9)
    b = ModelBuilder()
    xi, ii, ui = b.input("x", x.shape), b.input("i", (3, 1), "int32"), b.input("u", u.shape)
    y = b.tensor("y", x.shape)
    index = binary_body(b, body)
    b.op("STABLEHLO_SCATTER", [xi, ii, ui], [y], update_window_dims=[1], inserted_window_dims=[0],
         scatter_dims_to_operand_dims=[0], index_vector_dim=1, update_computation_subgraph_index=index)
    b.output(y)
    check_op_model(b.build(), [x, np.array(indices, np.int32), u])


def test_scatter_replace_unique():
    x = random_input((4, 3), seed=8)
    u = random_input((2, 3), seed=9)
    b = ModelBuilder()
    xi, ii, ui = b.input("x", x.shape), b.input("i", (2, 1), "int32"), b.input("u", u.shape)
    y = b.tensor("y", x.shape)
    index = binary_body(b, "second")
    b.op("STABLEHLO_SCATTER", [xi, ii, ui], [y], update_window_dims=[1], inserted_window_dims=[0],
         scatter_dims_to_operand_dims=[0], index_vector_dim=1, update_computation_subgraph_index=index)
    b.output(y)
    check_op_model(b.build(), [x, np.array([[3], [1]], np.int32), u])


@pytest.mark.parametrize("direction,swap", [("LT", False), ("GT", False), ("LT", True)])
def test_sort_two_operands(direction, swap):
    keys = np.array([[3, 1, 2, 1, 5], [0, -2, 7, 7, 1]], np.int32)
    vals = random_input(keys.shape, seed=10)
    b = ModelBuilder()
    ki, vi = b.input("k", keys.shape, "int32"), b.input("v", vals.shape)
    yk, yv = b.tensor("yk", keys.shape, "int32"), b.tensor("yv", vals.shape)
    sg = b.subgraph("cmp")
    args = [sg.input("k0", (), "int32"), sg.input("k1", (), "int32"), sg.input("v0", ()), sg.input("v1", ())]
    out = sg.tensor("o", (), "bool")
    sg.op("STABLEHLO_COMPARE", [args[1], args[0]] if swap else [args[0], args[1]], [out],
          comparison_direction=f"STABLEHLO_COMPARISON_DIRECTION_{direction}")
    sg.output(out)
    b.op("STABLEHLO_SORT", [ki, vi], [yk, yv], dimension=1, is_stable=True, comparator_subgraph_index=sg.index)
    b.output(yk, yv)
    descending = (direction == "GT") != swap
    order = np.argsort(-keys if descending else keys, axis=1, kind="stable")
    check_expected(b.build(), [keys, vals],
                   [np.take_along_axis(keys, order, 1), np.take_along_axis(vals, order, 1)])


def test_while_counts_to_limit():
    b = ModelBuilder()
    xi = b.input("x", (), "int32")
    y = b.tensor("y", (), "int32")
    cond = b.subgraph("cond")
    ci = cond.input("c", (), "int32")
    co = cond.tensor("lt", (), "bool")
    cond.op("STABLEHLO_COMPARE", [ci, cond.constant("ten", np.array(10, np.int32))], [co],
            comparison_direction="STABLEHLO_COMPARISON_DIRECTION_LT")
    cond.output(co)
    body = b.subgraph("body")
    bi = body.input("c", (), "int32")
    bo = body.tensor("n", (), "int32")
    body.op("STABLEHLO_ADD", [bi, body.constant("three", np.array(3, np.int32))], [bo])
    body.output(bo)
    b.op("STABLEHLO_WHILE", [xi], [y], cond_subgraph_index=cond.index, body_subgraph_index=body.index)
    b.output(y)
    check_expected(b.build(), [np.array(1, np.int32)], np.array(10, np.int32))  # 1, 4, 7, 10


@pytest.mark.parametrize("index", [0, 1, 2, 7, -1])   # out of range runs the last branch
def test_case_matches_official(index):
    b = ModelBuilder()
    ii, xi = b.input("i", (), "int32"), b.input("x", (3,))
    y = b.tensor("y", (3,))
    branches = []
    for k, op in enumerate(["STABLEHLO_ADD", "STABLEHLO_MULTIPLY", "STABLEHLO_MAXIMUM"]):
        sg = b.subgraph(f"branch{k}")
        a = sg.input("a", (3,))
        o = sg.tensor("o", (3,))
        sg.op(op, [a, a], [o])
        sg.output(o)
        branches.append(sg.index)
    b.op("STABLEHLO_CASE", [ii, xi], [y], branch_subgraph_indices=branches)
    b.output(y)
    check_op_model(b.build(), [np.array(index, np.int32), random_input((3,), seed=11)])


# --- bad inputs ---------------------------------------------------------------------------

@pytest.mark.parametrize("name,inputs,shape,options", [
    ("STABLEHLO_TRANSPOSE", [A], (4, 3, 2), {"permutation": [0, 0, 1]}),
    ("STABLEHLO_SLICE", [A], (1, 1, 1), {"start_indices": [0, 0], "limit_indices": [1, 1], "strides": [1, 1]}),
    ("STABLEHLO_BROADCAST_IN_DIM", [A], (2, 3, 5), {"broadcast_dimensions": [0, 1, 2]}),
    ("STABLEHLO_CONCATENATE", [A, A], (2, 3, 8), {"dimension": 3}),
])
def test_bad_options_raise_clear_errors(name, inputs, shape, options):
    b, feeds = one_op(name, inputs, shape, **options)
    model = read_model(to_bytes(b.build()))
    for xla in (False, True):
        with pytest.raises(LiteGpuError, match=name):
            run_ours(model, feeds, xla)


# --- convolution ---------------------------------------------------------------------------

CONVS = [
    # lhs shape, rhs shape, lhs/rhs/out specs (batch|out-feat, feature|in-feat, spatial...), options
    ((1, 6, 7, 3), (3, 3, 3, 4), (0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2), {}),                  # NHWC/HWIO
    ((2, 3, 7, 6), (4, 3, 2, 3), (0, 1, 2, 3), (0, 1, 2, 3), (0, 1, 2, 3),
     {"window_strides": [2, 1], "padding": [1, 0, 2, 1], "rhs_dilation": [1, 2]}),
    ((1, 5, 5, 4), (3, 3, 2, 6), (0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2),
     {"feature_group_count": 2, "lhs_dilation": [2, 1], "padding": [-1, 1, 0, 0], "window_reversal": [True, False]}),
    ((4, 5, 3), (3, 3, 6), (0, 2, 1), (2, 1, 0), (1, 2, 0), {"batch_group_count": 2}),             # 1-D
]


@pytest.mark.parametrize("lhs,rhs,ls,rs,os,opts", CONVS)
def test_convolution(lhs, rhs, ls, rs, os, opts):
    jax = pytest.importorskip("jax")
    x, w = random_input(lhs, seed=12), random_input(rhs, seed=13)
    n = len(lhs) - 2
    strides = opts.get("window_strides", [1] * n)
    pads = opts.get("padding", [0] * 2 * n)
    wj = np.flip(w, [rs[2 + i] for i, r in enumerate(opts.get("window_reversal", [False] * n)) if r])
    want = np.asarray(jax.lax.conv_general_dilated(
        x, wj, strides, list(zip(pads[0::2], pads[1::2])),
        opts.get("lhs_dilation", [1] * n), opts.get("rhs_dilation", [1] * n),
        dimension_numbers=jax.lax.ConvDimensionNumbers(ls, rs, os),
        feature_group_count=opts.get("feature_group_count", 1), batch_group_count=opts.get("batch_group_count", 1),
        precision=jax.lax.Precision.HIGHEST))
    b, feeds = one_op("STABLEHLO_CONVOLUTION", [x, w], want.shape, input_batch_dimension=ls[0],
                      input_feature_dimension=ls[1], input_spatial_dimensions=list(ls[2:]),
                      kernel_output_feature_dimension=rs[0], kernel_input_feature_dimension=rs[1],
                      kernel_spatial_dimensions=list(rs[2:]), output_batch_dimension=os[0],
                      output_feature_dimension=os[1], output_spatial_dimensions=list(os[2:]), **opts)
    check_expected(b.build(), feeds, want, atol=1e-4)
