import numpy as np
import pytest

from litegpu.backends import ReferenceBackend
from litegpu.errors import LiteGpuError
from litegpu.ir import read_model
from litegpu.ir.builder import ModelBuilder
from litegpu.ir.save import to_bytes
from oracle import check_op_model, random_input, run_official


def one_op_model(name, inputs, out_shape, out_dtype, **options):
    """``inputs``: (value, is_constant) pairs; runtime inputs are fed in order."""
    b = ModelBuilder()
    ids, feeds = [], []
    for i, (value, constant) in enumerate(inputs):
        value = np.asarray(value)
        if constant:
            ids.append(b.constant(f"c{i}", value))
        else:
            ids.append(b.input(f"x{i}", value.shape, str(value.dtype)))
            feeds.append(value)
    y = b.tensor("y", out_shape, out_dtype)
    b.op(name, ids, [y], **options)
    b.output(y)
    return b.build(), feeds


@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("ids, data_shape", [
    ([0, 0, 1, 2, 2], (5, 3)),
    ([0, 1, 2], (3,)),
    ([0, 0], (2, 2, 2)),
])
def test_segment_sum(dtype, ids, data_shape):
    data = random_input(data_shape, dtype, seed=1)
    out_shape = (max(ids) + 1,) + data_shape[1:]
    model, feeds = one_op_model("SEGMENT_SUM", [(data, False), (np.array(ids, np.int32), True)], out_shape, dtype)
    check_op_model(model, feeds)


@pytest.mark.parametrize("op", ["UNSORTED_SEGMENT_SUM", "UNSORTED_SEGMENT_PROD", "UNSORTED_SEGMENT_MAX",
                                "UNSORTED_SEGMENT_MIN"])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("ids, data_shape, num_segments", [
    ([3, 0, 1, 0, 3], (5, 2), 5),           # segments 2 and 4 are empty
    ([[1, 0], [0, 2]], (2, 2, 3), 3),       # multi-dimensional ids
    ([1, -1, 0, 2], (4,), 3),               # negative ids are dropped
])
def test_unsorted_segment(op, dtype, ids, data_shape, num_segments):
    data = random_input(data_shape, dtype, seed=2, low=-2, high=2)
    ids = np.array(ids, np.int32)
    out_shape = (num_segments,) + data_shape[ids.ndim:]
    model, feeds = one_op_model(op, [(data, False), (ids, False), (np.array([num_segments], np.int32), True)],
                                out_shape, dtype)
    check_op_model(model, feeds, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(4,), (2, 3), (2, 1, 2)])
@pytest.mark.parametrize("dtype", ["float32", "int32", "int64", "uint8", "int8"])
def test_matrix_diag(shape, dtype):
    x = random_input(shape, dtype, seed=3, low=0, high=5)
    model, feeds = one_op_model("MATRIX_DIAG", [(x, False)], shape + shape[-1:], dtype)
    check_op_model(model, feeds)


@pytest.mark.parametrize("shape", [(3, 3), (2, 3, 4), (4, 2), (2, 1, 1, 5)])
@pytest.mark.parametrize("dtype", ["float32", "int32", "int64", "uint8", "int8"])
def test_matrix_set_diag(shape, dtype):
    x = random_input(shape, dtype, seed=4, low=0, high=5)
    diag = random_input(shape[:-2] + (min(shape[-2:]),), dtype, seed=5, low=0, high=5)
    model, feeds = one_op_model("MATRIX_SET_DIAG", [(x, False), (diag.astype(dtype), False)], shape, dtype)
    check_op_model(model, feeds)


@pytest.mark.parametrize("shape, seq_dim, batch_dim, lengths", [
    ((3, 5), 1, 0, [5, 0, 2]),
    ((5, 3), 0, 1, [1, 3, 5]),
    ((2, 4, 3), 1, 0, [4, 3]),
    ((2, 3, 4), 2, 0, [2, 4]),
    ((4, 2, 3), 0, 2, [4, 1, 3]),
])
@pytest.mark.parametrize("dtype", ["float32", "int32", "int64", "uint8", "int16"])
def test_reverse_sequence(shape, seq_dim, batch_dim, lengths, dtype):
    x = random_input(shape, dtype, seed=6)
    model, feeds = one_op_model("REVERSE_SEQUENCE", [(x, False), (np.array(lengths, np.int32), False)], shape,
                                dtype, seq_dim=seq_dim, batch_dim=batch_dim)
    check_op_model(model, feeds)


@pytest.mark.parametrize("indices, shape, values", [
    ([[0, 1], [2, 0], [1, 3]], [3, 4], [1.5, -2.0, 7.0]),
    ([[0, 1], [2, 0]], [3, 4], 9.0),                # a scalar value for every index
    ([0, 4, 2], [6], [1.0, 2.0, 3.0]),              # 1-D indices
    ([[1, 0, 1]], [2, 2, 2], [4.0]),
])
@pytest.mark.parametrize("dtype", ["float32", "int32", "int64", "int8", "uint8"])
@pytest.mark.parametrize("constant_indices, index_dtype", [(True, np.int32), (False, np.int32), (False, np.int64)])
def test_sparse_to_dense(indices, shape, values, dtype, constant_indices, index_dtype):
    inputs = [(np.array(indices, index_dtype), constant_indices), (np.array(shape, np.int32), True),
              (np.array(values).astype(dtype), False), (np.array(-1).astype(dtype), False)]
    model, feeds = one_op_model("SPARSE_TO_DENSE", inputs, tuple(shape), dtype)
    check_op_model(model, feeds)


@pytest.mark.parametrize("dtype", ["float32", "int32", "int64"])
@pytest.mark.parametrize("boundaries", [[-1.0, 0.0, 1.5, 2.0], [0.5], []])
def test_bucketize(dtype, boundaries):
    x = random_input((3, 7), dtype, seed=7)
    x.reshape(-1)[:len(boundaries)] = np.array(boundaries).astype(dtype)  # values equal to a boundary
    model, feeds = one_op_model("BUCKETIZE", [(x, False)], (3, 7), "int32", boundaries=boundaries)
    check_op_model(model, feeds)


def assert_both_reject(model, feeds, match):
    """The official runtime and our reference backend both refuse the inputs."""
    data = to_bytes(model)
    with pytest.raises(RuntimeError, match=match):
        run_official(data, feeds)
    with pytest.raises(LiteGpuError, match=match):
        ReferenceBackend(read_model(data)).run(feeds)


@pytest.mark.parametrize("ids", [[0, 0, 2], [1, 1, 2], [0, 2, 1]])
def test_segment_sum_rejects_gaps_and_unsorted_ids(ids):
    data = random_input((3, 2), seed=8)
    model, feeds = one_op_model("SEGMENT_SUM", [(data, False), (np.array(ids, np.int32), True)], (3, 2), "float32")
    assert_both_reject(model, feeds, "SEGMENT_SUM")


def test_unsorted_segment_rejects_id_past_num_segments():
    data = random_input((3,), seed=9)
    inputs = [(data, False), (np.array([0, 3, 1], np.int32), False), (np.array([3], np.int32), True)]
    model, feeds = one_op_model("UNSORTED_SEGMENT_MAX", inputs, (3,), "float32")
    assert_both_reject(model, feeds, "UNSORTED_SEGMENT_MAX")
