import numpy as np
import pytest

from litegpu.backends import ReferenceBackend
from oracle import assert_reference_rejects, check_built, const, one_op_model, random_input

DTYPES = ["float32", "float16", "int8", "uint8", "int16", "int32", "int64", "bool"]


one_op = one_op_model


def check(op, inputs, outputs, **options):
    return check_built(one_op(op, inputs, outputs, **options))


def check_inferring_shape(op, inputs, dtype, **options):
    """Declare the output with the shape our reference computes (the official runtime resizes it anyway)."""
    model, feeds = one_op(op, inputs, [((1,), dtype)], **options)
    shape = ReferenceBackend(model).run(feeds)[0].shape
    return check(op, inputs, [(shape, dtype)], **options)


def assert_rejected(op, inputs, outputs, **options):
    assert_reference_rejects(one_op(op, inputs, outputs, **options), match=op)


# ---- SLICE

@pytest.mark.parametrize("begin,size,out", [([0, 1, 0], [2, 2, 4], (2, 2, 4)), ([1, 0, 2], [-1, -1, -1], (1, 3, 2)),
                                            ([0, 3, 0], [2, 0, 1], (2, 0, 1)), ([1, 2, 3], [1, 1, 1], (1, 1, 1))])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_slice(begin, size, out, index_dtype):
    check("SLICE", [random_input((2, 3, 4)), const(begin, index_dtype), const(size, index_dtype)], [(out, "float32")])


@pytest.mark.parametrize("dtype", DTYPES)
def test_slice_dtypes(dtype):
    check("SLICE", [random_input((3, 4), dtype), const([1, 1]), const([2, -1])], [((2, 3), dtype)])


def test_slice_rejects_out_of_range():
    assert_rejected("SLICE", [random_input((3, 4)), const([2, 0]), const([2, 1])], [((2, 1), "float32")])


# ---- STRIDED_SLICE

def strided_slice_cases(n=40, seed=7):
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(n):
        begin = rng.integers(-6, 7, 3).tolist()
        end = rng.integers(-6, 7, 3).tolist()
        strides = [int(rng.choice([-3, -2, -1, 1, 2, 3])) for _ in range(3)]
        masks = dict(begin_mask=int(rng.integers(0, 8)), end_mask=int(rng.integers(0, 8)),
                     shrink_axis_mask=int(rng.choice([0, 0, 1, 2, 4])))
        cases.append((begin, end, strides, masks))
    return cases


@pytest.mark.parametrize("begin,end,strides,masks", strided_slice_cases())
def test_strided_slice_random_grid(begin, end, strides, masks):
    x = random_input((4, 5, 6))
    if masks["shrink_axis_mask"]:
        axis = masks["shrink_axis_mask"].bit_length() - 1
        begin[axis] = begin[axis] % x.shape[axis]  # a shrunk index must exist
        masks["begin_mask"] &= ~masks["shrink_axis_mask"]
        # The official loop still steps a shrunk axis by its stride: a negative one writes nothing.
        strides[axis] = abs(strides[axis])
    check_inferring_shape("STRIDED_SLICE", [x, const(begin), const(end), const(strides)], "float32", **masks)


@pytest.mark.parametrize("begin,end,strides,masks", [
    ([0, 1], [0, 3], [1, 1], dict(ellipsis_mask=1)),                    # [..., 1:3]
    ([1, 0], [2, 0], [1, 1], dict(ellipsis_mask=2)),                    # [1:2, ...]
    ([0, 1, 0], [0, 3, 0], [1, 1, 1], dict(ellipsis_mask=1, end_mask=4, begin_mask=4)),
    ([0, 0], [0, 0], [1, 1], dict(new_axis_mask=1, ellipsis_mask=2)),   # [None, ...]
    ([0, 0, 1], [1, 0, 3], [1, 1, 1], dict(new_axis_mask=2, end_mask=2)),
    ([1, 0, 0, 2], [2, 1, 0, 4], [1, 1, 1, 1], dict(new_axis_mask=2, shrink_axis_mask=1, begin_mask=4,
                                                     end_mask=4)),
    ([-1], [0], [1], dict(shrink_axis_mask=1)),                         # x[-1]
    ([0, -1], [0, 0], [1, 1], dict(ellipsis_mask=1, shrink_axis_mask=2)),  # x[..., -1]
    ([0], [0], [-1], dict(begin_mask=1, end_mask=1)),                   # x[::-1]
    ([3, 4], [-10, -10], [-2, -3], {}),
    ([1], [3], [1], {}),                                                # fewer indices than dims
])
def test_strided_slice_masks(begin, end, strides, masks):
    check_inferring_shape("STRIDED_SLICE", [random_input((4, 5, 6)), const(begin), const(end), const(strides)],
                          "float32", **masks)


@pytest.mark.parametrize("begin,size,strides,shrink", [
    ([1, 0, 2], [2, 5, 3], [1, 1, 1], 0),
    ([-3, 1, 0], [2, 3, 6], [1, 2, 3], 0),
    ([2, 0, 0], [1, 5, 2], [1, 1, 1], 1),
])
def test_strided_slice_offset(begin, size, strides, shrink):
    check_inferring_shape("STRIDED_SLICE", [random_input((4, 5, 6)), const(begin), const(size), const(strides)],
                          "float32", offset=True, shrink_axis_mask=shrink)


@pytest.mark.parametrize("begin,expected_shape", [([1, 0, 2], (2, 5, 3)), ([-3, 0, 1], (2, 5, 3))])
def test_strided_slice_offset_with_computed_begin(begin, expected_shape):
    # offset=True makes the sizes static, so the begin may be a model input (a dynamic slice in XLA).
    check("STRIDED_SLICE", [random_input((4, 5, 6)), np.array(begin, np.int32), const([2, 5, 3]),
                            const([1, 1, 1])], [(expected_shape, "float32")], offset=True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_slice_dtypes(dtype):
    check("STRIDED_SLICE", [random_input((4, 6), dtype), const([1, 5]), const([4, 0]), const([2, -2])],
          [((2, 3), dtype)])


def test_strided_slice_rejects_zero_stride():
    assert_rejected("STRIDED_SLICE", [random_input((4,)), const([0]), const([2]), const([0])], [((2,), "float32")])


# ---- GATHER

@pytest.mark.parametrize("x_shape,idx_shape,axis,batch_dims", [
    ((5,), (3,), 0, 0), ((4, 3), (2, 2), 0, 0), ((4, 3), (5,), 1, 0), ((4, 3), (5,), -1, 0),
    ((2, 4, 3), (), 1, 0), ((2, 4, 3), (2, 3), 1, 1), ((2, 3, 4, 2), (2, 3, 5), 2, 2),
    ((2, 3, 4, 2), (2, 5), 2, 1), ((2, 4, 3), (2, 3), -2, -1),
])
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_gather(x_shape, idx_shape, axis, batch_dims, index_dtype):
    rng = np.random.default_rng(3)
    a = axis % len(x_shape)
    indices = rng.integers(0, x_shape[a], idx_shape).astype(index_dtype)
    bd = batch_dims % len(idx_shape) if batch_dims < 0 else batch_dims
    out = x_shape[:a] + idx_shape[bd:] + x_shape[a + 1:]
    check("GATHER", [random_input(x_shape), indices], [(out, "float32")], axis=axis, batch_dims=batch_dims)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gather_dtypes(dtype):
    check("GATHER", [random_input((4, 3), dtype), const([3, 0, 0])], [((3, 3), dtype)])


@pytest.mark.parametrize("bad", [[0, 4], [-1, 0]])
def test_gather_rejects_out_of_range_indices(bad):
    assert_rejected("GATHER", [random_input((4, 3)), const(bad)], [((2, 3), "float32")])


# ---- GATHER_ND

@pytest.mark.parametrize("x_shape,indices", [
    ((3, 4), [[0, 1], [2, 3]]), ((3, 4), [[2], [0]]), ((2, 3, 4), [[[1, 2]], [[0, 0]]]),
    ((2, 3, 4), [[1, 2, 3]]), ((5,), [[4], [0], [4]]),
])
@pytest.mark.parametrize("dtype", ["float32", "int8", "int64", "bool"])
def test_gather_nd(x_shape, indices, dtype):
    indices = np.asarray(indices, np.int32)
    out = indices.shape[:-1] + x_shape[indices.shape[-1]:]
    check("GATHER_ND", [random_input(x_shape, dtype), indices], [(out, dtype)])


def test_gather_nd_rejects_out_of_range():
    assert_rejected("GATHER_ND", [random_input((3, 4)), const([[3, 0]])], [((1,), "float32")])


# ---- SCATTER_ND

@pytest.mark.parametrize("shape,indices,upd_shape", [
    ((8,), [[4], [3], [1], [7]], (4,)),
    ((4, 3), [[0], [2]], (2, 3)),
    ((4, 3), [[0, 1], [3, 2], [0, 1]], (3,)),        # a duplicate index: the updates add up
    ((2, 3, 2), [[[1, 0], [0, 2]]], (1, 2, 2)),
])
@pytest.mark.parametrize("dtype", ["float32", "int32", "int64"])
def test_scatter_nd(shape, indices, upd_shape, dtype):
    updates = random_input(upd_shape, dtype, seed=4)
    check("SCATTER_ND", [const(indices), updates, const(shape)], [(shape, dtype)])


def test_scatter_nd_rejects_out_of_range():
    assert_rejected("SCATTER_ND", [const([[4]]), random_input((1,)), const([4])], [((4,), "float32")])


# ---- DYNAMIC_UPDATE_SLICE

@pytest.mark.parametrize("start", [[0, 0], [1, 2], [3, 3], [-1, 1], [5, -7]])  # out-of-range starts are clamped
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_dynamic_update_slice(start, index_dtype):
    check("DYNAMIC_UPDATE_SLICE", [random_input((4, 5)), random_input((2, 3), seed=1),
                                   np.asarray(start, index_dtype)], [((4, 5), "float32")])


@pytest.mark.parametrize("dtype", DTYPES)
def test_dynamic_update_slice_dtypes(dtype):
    check("DYNAMIC_UPDATE_SLICE", [random_input((1, 6, 2), dtype), random_input((1, 2, 2), dtype, seed=1),
                                   const([0, 3, 0])], [((1, 6, 2), dtype)])


# ---- REVERSE_V2

@pytest.mark.parametrize("axes", [[0], [1], [-1], [2], [0, 1], [1, 2]])
@pytest.mark.parametrize("dtype", ["float32", "int8", "int64", "bool"])
def test_reverse_v2(axes, dtype):
    check("REVERSE_V2", [random_input((2, 3, 4), dtype), const(axes)], [((2, 3, 4), dtype)])


# ---- EMBEDDING_LOOKUP

@pytest.mark.parametrize("table_shape", [(5, 3), (4, 2, 3)])
def test_embedding_lookup(table_shape):
    ids = np.array([1, 0, table_shape[0] - 1, 1], np.int32)
    check("EMBEDDING_LOOKUP", [ids, random_input(table_shape)], [((4,) + table_shape[1:], "float32")])


def test_embedding_lookup_rejects_out_of_range():
    assert_rejected("EMBEDDING_LOOKUP", [np.array([5], np.int32), random_input((5, 2))], [((1, 2), "float32")])


# ---- ONE_HOT

@pytest.mark.parametrize("idx_shape,axis", [((4,), -1), ((4,), 0), ((2, 3), -1), ((2, 3), 1), ((2, 3), 0)])
@pytest.mark.parametrize("dtype,on,off", [("float32", 1.0, 0.0), ("int32", 5, -2), ("int64", 3, 0),
                                          ("bool", True, False), ("int8", 7, 1)])
def test_one_hot(idx_shape, axis, dtype, on, off):
    rng = np.random.default_rng(0)
    indices = rng.integers(-1, 5, idx_shape).astype(np.int32)  # -1 and 4 are off the table of depth 4
    rank = len(idx_shape) + 1
    a = rank - 1 if axis == -1 else axis
    out = idx_shape[:a] + (4,) + idx_shape[a:]
    check("ONE_HOT", [indices, const(4), const(on, dtype), const(off, dtype)], [(out, dtype)], axis=axis)


def test_one_hot_int64_indices():
    check("ONE_HOT", [np.array([0, 2, 1], np.int64), const(3), const(1.0, np.float32), const(0.0, np.float32)],
          [((3, 3), "float32")], axis=-1)


# ---- computed begins under XLA (a WHILE loop's counter): dynamic slices with a static shape

@pytest.mark.parametrize("begin,size", [([0, 0, 0], [2, 5, 6]), ([2, 1, 3], [2, 3, 3]), ([3, 4, 5], [1, 1, 1]),
                                        ([1, 2, 0], [0, 2, 6]), ([0, 0, 0], [4, 5, 6])])
@pytest.mark.parametrize("dtype", ["float32", "int8", "int64"])
def test_slice_with_computed_begin(begin, size, dtype):
    # begin is a model input, so the XLA backend traces it and lowers a lax.dynamic_slice
    check("SLICE", [random_input((4, 5, 6), dtype), np.array(begin, np.int32), const(size)], [(tuple(size), dtype)])


def test_slice_with_computed_begin_and_size_minus_one_is_unsupported_under_xla():
    from litegpu.backends.xla.backend import XlaBackend
    from litegpu.errors import UnsupportedOpError

    model, feeds = one_op("SLICE", [random_input((4, 5)), np.array([1, 0], np.int32), const([-1, 5])],
                          [((3, 5), "float32")])
    with pytest.raises(UnsupportedOpError, match="SLICE.*size -1"):
        XlaBackend(model).run(feeds)


@pytest.mark.parametrize("begin,masks", [
    ([2, 0, 0], dict(shrink_axis_mask=1, begin_mask=6, end_mask=6)),        # x[i]: a TensorArray read
    ([-1, 0, 0], dict(shrink_axis_mask=1, begin_mask=6, end_mask=6)),       # negative: from the end
    ([0, 3, 4], dict(shrink_axis_mask=6, begin_mask=1, end_mask=1)),        # x[:, i, j]
    ([1, 2, 5], dict(shrink_axis_mask=7)),                                  # one element
    ([3, 0, 2], dict(shrink_axis_mask=5, begin_mask=3, end_mask=2)),        # begin-masked shrink takes 0
])
def test_strided_slice_with_computed_index(begin, masks):
    x = random_input((4, 5, 6))
    check_inferring_shape("STRIDED_SLICE", [x, np.array(begin, np.int32), np.array([v + 1 for v in begin], np.int32),
                                            const([1, 1, 1])], "float32", **masks)


def test_strided_slice_with_computed_index_and_reversed_whole_axis():
    check_inferring_shape("STRIDED_SLICE", [random_input((4, 5, 6)), np.array([1, 0, 0], np.int32),
                                            const([2, 0, 0]), const([1, -1, 2])], "float32",
                          shrink_axis_mask=1, begin_mask=6, end_mask=6)
