"""Cutting a run of ops out of a model: the sub-model computes what those ops compute in the whole model."""

import numpy as np
import pytest

from litegpu.backends.graph import GraphRunner
from litegpu.errors import InvalidArgumentError
from litegpu.ir import read_model
from litegpu.ir.builder import ModelBuilder
from litegpu.ir.extract import extract_ops, port_tensor_index, tensor_port_name
from litegpu.ir.save import to_bytes
from litegpu.ops import Target


def chain_model():
    """x -> ADD c1 -> MUL c2 -> RESHAPE (shape input, empty new_shape) -> SUB c3 -> y; c3 is unused by ops 0..2."""
    b = ModelBuilder()
    x = b.input("x", (2, 3))
    c1 = b.constant("c1", np.full((2, 3), 1.0, np.float32))
    c2 = b.constant("c2", np.full((2, 3), 3.0, np.float32))
    shape = b.constant("shape", np.array([3, 2], np.int32))
    c3 = b.constant("c3", np.full((3, 2), 0.5, np.float32))
    a, m, r, y = (b.tensor(n, s) for n, s in (("a", (2, 3)), ("m", (2, 3)), ("r", (3, 2)), ("y", (3, 2))))
    b.op("ADD", [x, c1], [a])
    b.op("MUL", [a, c2], [m])
    b.op("RESHAPE", [m, shape], [r], new_shape=())
    b.op("SUB", [r, c3], [y])
    b.output(y)
    return read_model(to_bytes(b.build())), (x, a, m, r, y)


def test_a_middle_run_computes_what_it_computes_in_the_whole_model():
    model, (x, a, m, r, y) = chain_model()
    values = {}
    GraphRunner(model, Target.REFERENCE, observe=lambda sg, t, v: values.__setitem__(t, np.asarray(v))) \
        .run_subgraph(0, [np.arange(6, dtype=np.float32).reshape(2, 3)])
    sub = read_model(to_bytes(extract_ops(model, 0, (1, 2), (a,), (r,))))  # written and read back
    (got,) = GraphRunner(sub, Target.REFERENCE).run_subgraph(0, [values[a]])
    np.testing.assert_array_equal(got, values[r])
    originals = [port_tensor_index(t.name) for t in sub.main.tensors]
    assert None not in originals and {a, m, r} <= set(originals)
    assert [model.main.tensors[i].shape for i in originals] == [t.shape for t in sub.main.tensors]


def test_only_the_buffers_the_ops_read_are_kept_and_empty_new_shape_is_left_out():
    model, (x, a, m, r, y) = chain_model()
    sub = extract_ops(model, 0, (1, 2), (a,), (r,))
    kept = {bytes(b.data) for b in sub.buffers if b.data is not None and b.size}
    assert np.full((2, 3), 3.0, np.float32).tobytes() in kept          # c2
    assert np.full((3, 2), 0.5, np.float32).tobytes() not in kept      # c3: read only by the SUB left out
    (reshape,) = [op for op in sub.main.operators if op.opcode_name == "RESHAPE"]
    assert "new_shape" not in reshape.options  # other readers take a stored empty vector as the shape


def test_port_names_map_back_to_tensor_indices():
    assert port_tensor_index(tensor_port_name(17)) == 17
    assert port_tensor_index("serving_default_x:0") is None


def test_an_op_calling_a_subgraph_cannot_be_cut_out():
    b = ModelBuilder()
    x = b.input("x", (2,))
    y = b.tensor("y", (2,))
    b.op("CALL", [x], [y], subgraph=1)
    b.output(y)
    body = b.subgraph("body")
    bx = body.input("bx", (2,))
    body.output(bx)
    model = read_model(to_bytes(b.build()))
    with pytest.raises(InvalidArgumentError, match="calls another subgraph"):
        extract_ops(model, 0, (0,), (x,), (y,))


def test_blockwise_weights_keep_their_scales_in_the_sub_model():
    """Blockwise scales are no op's input: the weights' quantization details name them, by tensor index."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ops"))
    from test_matmul_quantized import blockwise_model

    model = read_model(to_bytes(blockwise_model((2, 64), 8, 32)))
    sg = model.subgraphs[0]
    fc = sg.operators[0]
    sub = extract_ops(model, 0, [0], [fc.inputs[0]], list(fc.outputs))
    weights = sub.subgraphs[0].tensors[sub.subgraphs[0].operators[0].inputs[1]]
    scales = sub.subgraphs[0].tensors[int(weights.quantization.details["scales"])]
    original = sg.tensors[int(sg.tensors[fc.inputs[1]].quantization.details["scales"])]
    assert scales.name == tensor_port_name(original.index)
    np.testing.assert_array_equal(scales.data, original.data)
    x = np.random.default_rng(5).normal(size=(2, 64)).astype(np.float32)
    (whole,) = GraphRunner(model, Target.REFERENCE).run_subgraph(0, [x])
    (part,) = GraphRunner(sub, Target.REFERENCE).run_subgraph(0, [x])
    np.testing.assert_array_equal(part, whole)
