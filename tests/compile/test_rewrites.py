import warnings

import numpy as np
import pytest
from oracle import assert_close, check_op_model, random_input, run_official

from litegpu import CompiledModel, CpuKernelMode, CpuOptions, HardwareAccelerator, Options
from litegpu.compile.rewrites import rewrite_for_xla
from litegpu.ir import read_model
from litegpu.ir.builder import ModelBuilder
from litegpu.ir.save import to_bytes
from litegpu.ops import Target

T, B, H = 5, 2, 3


def step_write_loop(axis=0, extent=-1, variant="exact"):
    """while i < limit: seq[i] = tanh(inputs[i]) along ``axis``, written as the TF converter writes a
    TensorListSetItem: SLICE(seq, 0, [i, ..]), SLICE(seq, [i + 1, 0, ..], -1), CONCATENATION.

    ``extent`` is what the slices give for the other dimensions (-1 or the full size); ``variant``
    changes one thing so that the pattern is no longer exact (a near miss)."""
    shape = (T, B, H) if axis == 0 else (B, T, H)
    rank = len(shape)
    b = ModelBuilder()
    seq0, xs = b.input("seq", shape), b.input("xs", shape)
    limit = b.input("limit", (), "int32")
    zero = b.constant("zero", np.array(0, np.int32))
    cond = b.subgraph("cond")
    ci, _, _, cl = (cond.input("i", (), "int32"), cond.input("seq", shape), cond.input("xs", shape),
                    cond.input("limit", (), "int32"))
    go = cond.tensor("go", (), "bool")
    cond.op("LESS", [ci, cl], [go])
    cond.output(go)

    body = b.subgraph("body")
    i, seq, x, lim = (body.input("i", (), "int32"), body.input("seq", shape), body.input("xs", shape),
                      body.input("limit", (), "int32"))
    one = body.constant("one", np.array(1, np.int32))
    after_offset = body.constant("two", np.array(2, np.int32)) if variant == "begin_after_is_i_plus_2" else one
    shape1 = body.constant("shape1", np.array([1], np.int32))
    next_i, after_i = body.tensor("next_i", (), "int32"), body.tensor("after_i", (), "int32")
    body.op("ADD", [i, one], [next_i])
    body.op("ADD", [i, after_offset], [after_i])

    def vector(name, counter, others):
        """[others.., counter, others..] with ``counter`` at ``axis``, as the converter builds it."""
        c = body.tensor(f"{name}_counter", (1,), "int32")
        body.op("RESHAPE", [counter, shape1], [c])
        parts = ([body.constant(f"{name}_head", np.array(others[:axis], np.int32))] if axis else []) + [c] + \
            ([body.constant(f"{name}_tail", np.array(others[axis + 1:], np.int32))] if axis < rank - 1 else [])
        out = body.tensor(name, (rank,), "int32")
        body.op("CONCATENATION", parts, [out], axis=0)
        return out

    full = [extent if extent == -1 else d for d in shape]
    if variant == "partial_extent":
        full = [1 if j != axis else d for j, d in enumerate(full)]
    before_counter = lim if variant == "other_counter" else i
    size_before = vector("size_before", before_counter, full)
    begin_after = vector("begin_after", after_i, [0] * rank)
    dynamic = tuple(-1 if j == axis else d for j, d in enumerate(shape))
    one_step = tuple(1 if j == axis else d for j, d in enumerate(shape))
    before = body.tensor("before", one_step, shape_signature=dynamic)
    after = body.tensor("after", one_step, shape_signature=dynamic)
    body.op("SLICE", [seq, body.constant("zeros", np.zeros(rank, np.int32)), size_before], [before])
    body.op("SLICE", [x if variant == "other_source" else seq, begin_after,
                      body.constant("to_end", np.full(rank, -1, np.int32))], [after])

    xi, yi = body.tensor("x_i", (B, H)), body.tensor("y_i", (B, H))
    step = body.tensor("step", one_step)
    body.op("GATHER", [x, i], [xi], axis=axis)
    body.op("TANH", [xi], [yi])
    body.op("RESHAPE", [yi, body.constant("step_shape", np.array(one_step, np.int32))], [step])
    new_seq = body.tensor("new_seq", shape)
    body.op("CONCATENATION", [before, step, after], [new_seq], axis=axis - rank if axis else 0)
    body.output(next_i, new_seq, x, lim)

    outs = [b.tensor("i_out", (), "int32"), b.tensor("seq_out", shape), b.tensor("xs_out", shape),
            b.tensor("limit_out", (), "int32")]
    b.op("WHILE", [zero, seq0, xs, limit], outs, cond_subgraph_index=cond.index, body_subgraph_index=body.index)
    b.output(outs[1])
    return read_model(to_bytes(b.build()))


def loop_inputs(axis, limit):
    shape = (T, B, H) if axis == 0 else (B, T, H)
    return [random_input(shape, seed=1), random_input(shape, seed=2), np.array(limit, np.int32)]


def body_ops(model):
    return model.op_histogram(2)


@pytest.mark.parametrize("axis, extent", [(0, -1), (0, "full"), (1, -1)])
@pytest.mark.parametrize("limit", [0, 3, T])
def test_step_write_becomes_a_dynamic_update_slice_with_the_official_results(axis, extent, limit):
    model = step_write_loop(axis, extent)
    inputs = loop_inputs(axis, limit)
    rewritten = rewrite_for_xla(model)
    ops = body_ops(rewritten)
    assert ops.get("DYNAMIC_UPDATE_SLICE") == 1 and "SLICE" not in ops, ops
    assert ops.get("CONCATENATION", 0) == 1, ops  # the begin vector stays; the size vector was only for the slice
    expected = run_official(to_bytes(model), inputs)
    written = np.moveaxis(inputs[0].copy(), axis, 0)
    written[:limit] = np.tanh(np.moveaxis(inputs[1], axis, 0)[:limit])
    assert_close(expected[0], np.moveaxis(written, 0, axis), 1e-6, 1e-6, "the loop's meaning")
    # The rewritten model, run by the official interpreter, our reference kernels and XLA: all as the original.
    assert_close(check_op_model(rewritten, inputs)[0], expected[0], 0, 0, "the rewritten model, officially")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback to the reference backend
        compiled = CompiledModel.from_model(model, options=Options(HardwareAccelerator.CPU, cpu_options=CpuOptions(
            kernel_mode=CpuKernelMode.BUILTIN)))
    assert compiled.plan.target is Target.XLA_CPU
    assert_close(compiled(*inputs), expected[0], 1e-5, 1e-5, "CompiledModel on XLA")
    assert compiled.model is model  # the reference side and the API keep the original


def test_the_original_form_is_what_xla_cannot_trace():
    """Why the rewrite exists: the XLA backend refuses the original loop (so the tests above are not vacuous)."""
    from oracle import run_ours

    from litegpu.errors import UnsupportedOpError

    with pytest.raises(UnsupportedOpError, match="SLICE"):
        run_ours(step_write_loop(), loop_inputs(0, 3), xla=True)


@pytest.mark.parametrize("variant", ["other_source", "other_counter", "begin_after_is_i_plus_2", "partial_extent"])
def test_near_misses_are_left_alone(variant):
    model = step_write_loop(variant=variant)
    assert rewrite_for_xla(model) is model


def test_models_without_the_pattern_are_returned_as_they_are():
    b = ModelBuilder()
    x, y = b.input("x", (T, B)), b.tensor("y", (2 * T + 1, B))
    b.op("CONCATENATION", [x, b.constant("row", np.ones((1, B), np.float32)), x], [y], axis=0)
    b.output(y)
    model = b.build()
    assert rewrite_for_xla(model) is model


def test_rewrite_keeps_tensor_indices_and_the_main_subgraph():
    model = step_write_loop()
    rewritten = rewrite_for_xla(model)
    assert rewritten.subgraphs[0] == model.subgraphs[0] and rewritten.subgraphs[1] == model.subgraphs[1]
    old, new = model.subgraphs[2], rewritten.subgraphs[2]
    assert new.tensors[:len(old.tensors)] == old.tensors and (new.inputs, new.outputs) == (old.inputs, old.outputs)
    assert [op.index for op in new.operators] == list(range(len(new.operators)))


@pytest.mark.parametrize("limit", [0, 3, T])
def test_the_interpreter_runs_the_loop_on_xla_as_compiled_model_does(limit):
    """The classic Interpreter plans and compiles the rewritten model too (it raised on SLICE before)."""
    from litegpu import Interpreter

    model = step_write_loop()
    inputs = loop_inputs(0, limit)
    expected = run_official(to_bytes(model), inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback to the reference backend
        interpreter = Interpreter(model_content=to_bytes(model))
    interpreter.allocate_tensors()
    assert not interpreter._use_reference
    for detail, value in zip(interpreter.get_input_details(), inputs):
        interpreter.set_tensor(detail["index"], value)
    interpreter.invoke()
    got = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    assert_close(got, expected[0], 1e-5, 1e-5, "Interpreter on XLA")
