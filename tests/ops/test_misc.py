from dataclasses import replace

import numpy as np
import pytest

from litegpu.errors import LiteGpuError, ModelFormatError
from litegpu.ir import read_model
from litegpu.ir.builder import ModelBuilder
from litegpu.ir.load import freeze
from litegpu.ir.save import to_bytes
from litegpu.ops.misc import densify
from litegpu.ops.registry import Target, find
from oracle import check_op_model, run_official, run_ours


def csr(segments, indices):
    return {"format": "SPARSE_CSR", "array_segments_type": "Int32Vector",
            "array_segments": {"values": np.array(segments, np.int32)},
            "array_indices_type": "Int32Vector", "array_indices": {"values": np.array(indices, np.int32)}}


def dense(size):
    return {"format": "DENSE", "dense_size": size}


def densify_model(values, shape, sparsity):
    b = ModelBuilder()
    w = b.constant("w", np.asarray(values))
    y = b.tensor("y", shape, b.tensors[w].dtype)
    b.op("DENSIFY", [w], [y])
    b.output(y)
    m = b.build()
    t = replace(m.main.tensors[w], shape=tuple(shape), sparsity=freeze(sparsity))
    sg = replace(m.main, tensors=tuple(t if i == w else x for i, x in enumerate(m.main.tensors)))
    return read_model(to_bytes(replace(m, subgraphs=(sg,))))


SPARSE_CASES = [
    # row-major CSR
    ([1, 2, 3, 4], (3, 4), {"traversal_order": [0, 1], "dim_metadata": [dense(3), csr([0, 2, 2, 4], [0, 3, 1, 2])]}),
    # column-major CSR
    ([5, 6, 7], (3, 4), {"traversal_order": [1, 0], "dim_metadata": [dense(4), csr([0, 1, 1, 3, 3], [2, 0, 1])]}),
    # all dense levels
    (list(range(1, 7)), (2, 3), {"traversal_order": [0, 1], "dim_metadata": [dense(2), dense(3)]}),
    # 1x4 blocks along dim 1 of a 3x8 matrix: block rows CSR, dense inside a block
    (list(range(1, 13)), (3, 8), {"traversal_order": [0, 1, 2], "block_map": [1],
                                  "dim_metadata": [dense(3), csr([0, 1, 2, 3], [1, 0, 1]), dense(4)]}),
    # 2x2 blocks of a 4x4 matrix
    (list(range(1, 9)), (4, 4), {"traversal_order": [0, 1, 2, 3], "block_map": [0, 1],
                                 "dim_metadata": [dense(2), csr([0, 1, 2], [1, 0]), dense(2), dense(2)]}),
]


@pytest.mark.parametrize("dtype", [np.float32, np.int8])
@pytest.mark.parametrize("values, shape, sparsity", SPARSE_CASES)
def test_densify_matches_official(values, shape, sparsity, dtype):
    model = densify_model(np.array(values, dtype), shape, sparsity)
    expected = run_official(to_bytes(model), [])[0]
    t = model.main.tensors[model.main.operators[0].inputs[0]]
    got = densify(t.raw.view(dtype), shape, t.sparsity, "DENSIFY (#0)")
    np.testing.assert_array_equal(got, expected)
    assert got.dtype == expected.dtype


def test_densify_runs_in_a_model():
    values, shape, sparsity = SPARSE_CASES[0]
    model = densify_model(np.array(values, np.float32), shape, sparsity)
    got = run_ours(model, [], xla=False)[0]
    np.testing.assert_array_equal(got, run_official(to_bytes(model), [])[0])


def test_densify_rejects_inconsistent_sparsity():
    sparsity = freeze({"traversal_order": [0, 1], "dim_metadata": [dense(3)]})
    with pytest.raises(ModelFormatError, match=r"DENSIFY \(#0\): sparsity has traversal_order"):
        densify(np.ones(3, np.float32), (3, 4), sparsity, "DENSIFY (#0)")
    sparsity = freeze({"traversal_order": [0, 1], "dim_metadata": [dense(3), csr([0, 2, 2, 4], [0, 3, 1, 2])]})
    with pytest.raises(ModelFormatError, match="more values than the 3 stored"):
        densify(np.ones(3, np.float32), (3, 4), sparsity, "DENSIFY (#0)")


# --------------------------------------------------------------------------- UNIQUE

def unique_model(n, dtype, idx_type):
    b = ModelBuilder()
    x = b.input("x", (n,), dtype)
    y = b.tensor("y", (0,), dtype)
    idx = b.tensor("idx", (n,), idx_type)
    b.op("UNIQUE", [x], [y, idx], idx_out_type=idx_type.upper())
    b.output(y, idx)
    return b.build()


@pytest.mark.parametrize("dtype", ["float32", "int8", "int16", "uint8", "int32", "int64"])
@pytest.mark.parametrize("idx_type", ["int32", "int64"])
@pytest.mark.parametrize("n", [1, 9, 40])
def test_unique_matches_official(dtype, idx_type, n):
    x = np.random.default_rng(n).integers(0, 6, n).astype(dtype)
    check_op_model(unique_model(n, dtype, idx_type), [x], xla=False)


def test_unique_is_cpu_only_and_wants_1d():
    model = read_model(to_bytes(unique_model(4, "int32", "int32")))
    assert find("UNIQUE").unsupported_reason(model.main.operators[0], model.main, Target.XLA_CPU)
    b = ModelBuilder()
    x = b.input("x", (2, 2), "int32")
    y, idx = b.tensor("y", (0,), "int32"), b.tensor("idx", (4,), "int32")
    b.op("UNIQUE", [x], [y, idx])
    b.output(y, idx)
    with pytest.raises(LiteGpuError, match=r"UNIQUE \(#0\): input must be 1-D"):
        run_ours(read_model(to_bytes(b.build())), [np.zeros((2, 2), np.int32)], xla=False)


def test_uint8_index_vectors_arrive_as_bytes_and_still_densify():
    """Real sparse models (MediaPipe pose_detection) store CSR indices as Uint8Vector, which the IR keeps as bytes."""
    from litegpu.ops.misc import _index_vector

    assert list(_index_vector({"array_indices": {"values": b"\x00\x09\x0d"}}, "array_indices")) == [0, 9, 13]
    assert list(_index_vector({"array_indices": {"values": (0, 300)}}, "array_indices")) == [0, 300]
