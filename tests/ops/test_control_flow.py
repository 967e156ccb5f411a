import dataclasses

import numpy as np
import pytest

from litegpu.backends import ReferenceBackend
from litegpu.errors import LiteGpuError, ModelExecutionError, UnsupportedOpError
from litegpu.ir import Options
from litegpu.ir.builder import ModelBuilder
from oracle import check_op_model, run_ours


def counting_loop(limit_as_input=False, body_op="MUL"):
    """while i < limit: i += 1; x = x (*|+) x, with i, x (and maybe limit) as model inputs."""
    b = ModelBuilder()
    i = b.input("i", (), "int32")
    x = b.input("x", (3,))
    limit = b.input("limit", (), "int32") if limit_as_input else b.constant("limit", np.array(5, np.int32))
    cond = b.subgraph("cond")
    ci, cx, cl = cond.input("i", (), "int32"), cond.input("x", (3,)), cond.input("limit", (), "int32")
    keep_going = cond.tensor("keep_going", (), "bool")
    cond.op("LESS", [ci, cl], [keep_going])
    cond.output(keep_going)
    body = b.subgraph("body")
    bi, bx, bl = body.input("i", (), "int32"), body.input("x", (3,)), body.input("limit", (), "int32")
    one = body.constant("one", np.array(1, np.int32))
    ni, nx = body.tensor("i_next", (), "int32"), body.tensor("x_next", (3,))
    body.op("ADD", [bi, one], [ni])
    body.op(body_op, [bx, bx], [nx])
    body.output(ni, nx, bl)
    oi, ox, ol = b.tensor("i_out", (), "int32"), b.tensor("x_out", (3,)), b.tensor("limit_out", (), "int32")
    b.op("WHILE", [i, x, limit], [oi, ox, ol], cond_subgraph_index=cond.index, body_subgraph_index=body.index)
    b.output(oi, ox)
    return b.build()


@pytest.mark.parametrize("start", [0, 3, 5, 9])
@pytest.mark.parametrize("body_op", ["MUL", "ADD"])
def test_while_counting_loop(start, body_op):
    x = np.array([0.5, -1.0, 1.25], np.float32)
    out = check_op_model(counting_loop(body_op=body_op), [np.array(start, np.int32), x])
    assert out[0] == max(start, 5)


@pytest.mark.parametrize("limit", [0, 1, 4, 12])
def test_while_trip_count_from_an_input(limit):
    x = np.array([1.0, 2.0, -3.0], np.float32)
    check_op_model(counting_loop(limit_as_input=True, body_op="ADD"),
                   [np.array(0, np.int32), x, np.array(limit, np.int32)])


def growing_loop():
    """while i < 3: i += 1; x = concat(x, x): the carried shape changes every iteration."""
    b = ModelBuilder()
    i = b.input("i", (), "int32")
    x = b.input("x", (2,))
    limit = b.constant("limit", np.array(3, np.int32))
    cond = b.subgraph("cond")
    ci, cx = cond.input("i", (), "int32"), cond.input("x", (2,), shape_signature=(-1,))
    cl = cond.input("limit", (), "int32")
    k = cond.tensor("k", (), "bool")
    cond.op("LESS", [ci, cl], [k])
    cond.output(k)
    body = b.subgraph("body")
    bi, bx = body.input("i", (), "int32"), body.input("x", (2,), shape_signature=(-1,))
    bl = body.input("limit", (), "int32")
    one = body.constant("one", np.array(1, np.int32))
    ni, nx = body.tensor("i_next", (), "int32"), body.tensor("x_next", (4,), shape_signature=(-1,))
    body.op("ADD", [bi, one], [ni])
    body.op("CONCATENATION", [bx, bx], [nx], axis=0)
    body.output(ni, nx, bl)
    oi, ox = b.tensor("i_out", (), "int32"), b.tensor("x_out", (2,), shape_signature=(-1,))
    ol = b.tensor("limit_out", (), "int32")
    b.op("WHILE", [i, x, limit], [oi, ox, ol], cond_subgraph_index=cond.index, body_subgraph_index=body.index)
    b.output(ox)
    return b.build()


def test_while_with_growing_shapes_runs_on_the_reference_backend_only():
    model = growing_loop()
    x = np.array([1.0, 2.0], np.float32)
    out = check_op_model(model, [np.array(0, np.int32), x], xla=False)
    assert out[0].shape == (16,)
    with pytest.raises(UnsupportedOpError, match=r"WHILE \(#0\).*shapes"):
        run_ours(model, [np.array(0, np.int32), x], xla=True)


def test_while_keeps_passed_through_shapes_static():
    # The body reshapes with a shape tensor that travels through the loop unchanged:
    # under XLA it must stay a known value, not become a loop-carried array.
    b = ModelBuilder()
    i = b.input("i", (), "int32")
    x = b.input("x", (2, 3))
    shape = b.constant("shape", np.array([3, 2], np.int32))
    back = b.constant("back", np.array([2, 3], np.int32))
    cond = b.subgraph("cond")
    ci, cx, cs, cb = (cond.input("i", (), "int32"), cond.input("x", (2, 3)), cond.input("s", (2,), "int32"),
                      cond.input("b", (2,), "int32"))
    limit = cond.constant("limit", np.array(4, np.int32))
    k = cond.tensor("k", (), "bool")
    cond.op("LESS", [ci, limit], [k])
    cond.output(k)
    body = b.subgraph("body")
    bi, bx, bs, bb = (body.input("i", (), "int32"), body.input("x", (2, 3)), body.input("s", (2,), "int32"),
                      body.input("b", (2,), "int32"))
    one = body.constant("one", np.array(1, np.int32))
    ni, r, t, nx = (body.tensor("i_next", (), "int32"), body.tensor("r", (3, 2)), body.tensor("t", (3, 2)),
                    body.tensor("x_next", (2, 3)))
    body.op("ADD", [bi, one], [ni])
    body.op("RESHAPE", [bx, bs], [r])
    body.op("ADD", [r, r], [t])
    body.op("RESHAPE", [t, bb], [nx])
    body.output(ni, nx, bs, bb)
    outs = [b.tensor(n, s, d) for n, s, d in [("oi", (), "int32"), ("ox", (2, 3), "float32"),
                                              ("os", (2,), "int32"), ("ob", (2,), "int32")]]
    b.op("WHILE", [i, x, shape, back], outs, cond_subgraph_index=cond.index, body_subgraph_index=body.index)
    b.output(outs[1])
    out = check_op_model(b.build(), [np.array(1, np.int32), np.arange(6, dtype=np.float32).reshape(2, 3)])
    np.testing.assert_array_equal(out[0], np.arange(6).reshape(2, 3) * 8)


def test_while_body_updates_a_resource_variable():
    # The body adds x to a variable (set to 0 by CALL_ONCE) on every iteration; the loop runs while i < 3.
    model, _ = accumulating_loop(start=np.zeros(2, np.float32), loop_output="i")
    out = check_op_model(model, [np.array(1, np.int32), np.array([1.5, -2], np.float32)])
    np.testing.assert_array_equal(out[1], [3, -4])


def branching_model(cond_constant=None):
    """IF cond: x + y else: x * y."""
    b = ModelBuilder()
    c = b.input("c", (), "bool") if cond_constant is None else b.constant("c", np.array(cond_constant))
    x, y = b.input("x", (2, 3)), b.input("y", (2, 3))
    branches = []
    for name, op in [("then", "ADD"), ("else", "MUL")]:
        sg = b.subgraph(name)
        sx, sy = sg.input("x", (2, 3)), sg.input("y", (2, 3))
        out = sg.tensor("out", (2, 3))
        sg.op(op, [sx, sy], [out])
        sg.output(out)
        branches.append(sg.index)
    out = b.tensor("out", (2, 3))
    b.op("IF", [c, x, y], [out], then_subgraph_index=branches[0], else_subgraph_index=branches[1])
    b.output(out)
    return b.build()


@pytest.mark.parametrize("cond", [True, False])
def test_if_chooses_a_branch(cond):
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal((2, 3)).astype(np.float32) for _ in range(2))
    out = check_op_model(branching_model(), [np.array(cond), x, y])
    np.testing.assert_allclose(out[0], x + y if cond else x * y, rtol=1e-6)


@pytest.mark.parametrize("cond", [True, False])
def test_if_with_a_constant_condition(cond):
    rng = np.random.default_rng(1)
    x, y = (rng.standard_normal((2, 3)).astype(np.float32) for _ in range(2))
    check_op_model(branching_model(cond_constant=cond), [x, y])


def test_if_condition_must_be_a_single_value():
    b = ModelBuilder()
    c = b.input("c", (2,), "bool")
    x = b.input("x", (1,))
    sg = b.subgraph("branch")
    sx = sg.input("x", (1,))
    sg.output(sx)
    out = b.tensor("out", (1,))
    b.op("IF", [c, x], [out], then_subgraph_index=sg.index, else_subgraph_index=sg.index)
    b.output(out)
    with pytest.raises(ModelExecutionError, match=r"IF \(#0\).*single boolean"):
        ReferenceBackend(b.build()).run([np.array([True, False]), np.ones(1, np.float32)])


def call_model(op_name, composite_name=None, **options):
    b = ModelBuilder()
    x, y = b.input("x", (4,)), b.input("y", (4,))
    callee = b.subgraph("callee")
    cx, cy = callee.input("x", (4,)), callee.input("y", (4,))
    s, p = callee.tensor("s", (4,)), callee.tensor("p", (4,))
    callee.op("ADD", [cx, cy], [s])
    callee.op("MUL", [s, cy], [p])
    callee.output(p, s)
    p_out, s_out = b.tensor("p", (4,)), b.tensor("s", (4,))
    key = "subgraph" if op_name == "CALL" else "decomposition_subgraph_index"
    index = b.op(op_name, [x, y], [p_out, s_out], **{key: callee.index}, **options)
    if composite_name:  # ModelBuilder.op's own `name` parameter hides the option of that name
        op = b.operators[index]
        b.operators[index] = dataclasses.replace(op, options=Options({**op.options, "name": composite_name}))
    b.output(p_out, s_out)
    return b.build()


def test_stablehlo_composite_runs_its_decomposition():
    x = np.array([1, 2, 3, 4], np.float32)
    y = np.array([0.5, -1, 2, 0], np.float32)
    out = check_op_model(call_model("STABLEHLO_COMPOSITE", composite_name="test.add_mul", version=1), [x, y])
    np.testing.assert_allclose(out[0], (x + y) * y)


@pytest.mark.parametrize("xla", [False, True])
def test_call_runs_its_subgraph(xla):
    # The official runtime has no CALL kernel; the expected values are computed here.
    x = np.array([1, 2, 3, 4], np.float32)
    y = np.array([0.5, -1, 2, 0], np.float32)
    p, s = run_ours(call_model("CALL"), [x, y], xla)
    np.testing.assert_allclose(p, (x + y) * y)
    np.testing.assert_allclose(s, x + y)


def test_call_with_the_wrong_number_of_inputs_names_the_op():
    b = ModelBuilder()
    x = b.input("x", (1,))
    callee = b.subgraph("callee")
    cx, cy = callee.input("x", (1,)), callee.input("y", (1,))
    callee.output(cx)
    out = b.tensor("out", (1,))
    b.op("CALL", [x], [out], subgraph=callee.index)
    b.output(out)
    with pytest.raises(LiteGpuError, match=r"CALL \(#0\).*subgraph 1 has 2 inputs.*expected 1 inputs"):
        ReferenceBackend(b.build()).run([np.ones(1, np.float32)])


# ---- a reduced GPU precision: float32 tensors held as float16 through loops, branches and calls --------

def affine_loop():
    """while i < 4: i += 1; x = x * 0.5 + 0.25: the body's float constants are float16 under fp16."""
    b = ModelBuilder()
    i, x = b.input("i", (), "int32"), b.input("x", (3,))
    cond = b.subgraph("cond")
    ci, _ = cond.input("i", (), "int32"), cond.input("x", (3,))
    k = cond.tensor("k", (), "bool")
    cond.op("LESS", [ci, cond.constant("limit", np.array(4, np.int32))], [k])
    cond.output(k)
    body = b.subgraph("body")
    bi, bx = body.input("i", (), "int32"), body.input("x", (3,))
    ni, half, nx = body.tensor("i_next", (), "int32"), body.tensor("half", (3,)), body.tensor("x_next", (3,))
    body.op("ADD", [bi, body.constant("one", np.array(1, np.int32))], [ni])
    body.op("MUL", [bx, body.constant("k", np.full(3, 0.5, np.float32))], [half])
    body.op("ADD", [half, body.constant("c", np.full(3, 0.25, np.float32))], [nx])
    body.output(ni, nx)
    oi, ox = b.tensor("oi", (), "int32"), b.tensor("ox", (3,))
    b.op("WHILE", [i, x], [oi, ox], cond_subgraph_index=cond.index, body_subgraph_index=body.index)
    b.output(oi, ox)
    return b.build(), [np.array(0, np.int32), np.array([1.0, -2.0, 8.0], np.float32)]


def accumulating_loop(start=np.array([0.5, 1.0], np.float32), loop_output: str = "x"):
    """CALL_ONCE sets a variable to ``start``; the loop body adds x to it while i < 3.  Outputs: the
    loop's ``i`` or ``x`` (``loop_output``), then the variable."""
    b = ModelBuilder()
    i, x = b.input("i", (), "int32"), b.input("x", (2,))
    init = b.subgraph("init")
    ih = init.tensor("h", (), "resource")
    init.op("VAR_HANDLE", [], [ih], container="", shared_name="total")
    init.op("ASSIGN_VARIABLE", [ih, init.constant("start", start)], [])
    cond = b.subgraph("cond")
    ci, _ = cond.input("i", (), "int32"), cond.input("x", (2,))
    k = cond.tensor("k", (), "bool")
    cond.op("LESS", [ci, cond.constant("limit", np.array(3, np.int32))], [k])
    cond.output(k)
    body = b.subgraph("body")
    bi, bx = body.input("i", (), "int32"), body.input("x", (2,))
    h = body.tensor("h", (), "resource")
    body.op("VAR_HANDLE", [], [h], container="", shared_name="total")
    old, new, ni = body.tensor("old", (2,)), body.tensor("new", (2,)), body.tensor("i_next", (), "int32")
    body.op("READ_VARIABLE", [h], [old])
    body.op("ADD", [old, bx], [new])
    body.op("ASSIGN_VARIABLE", [h, new], [])
    body.op("ADD", [bi, body.constant("one", np.array(1, np.int32))], [ni])
    body.output(ni, bx)
    b.op("CALL_ONCE", [], [], init_subgraph_index=init.index)
    oi, ox = b.tensor("oi", (), "int32"), b.tensor("ox", (2,))
    b.op("WHILE", [i, x], [oi, ox], cond_subgraph_index=cond.index, body_subgraph_index=body.index)
    mh, total = b.tensor("mh", (), "resource"), b.tensor("total", (2,))
    b.op("VAR_HANDLE", [], [mh], container="", shared_name="total")
    b.op("READ_VARIABLE", [mh], [total])
    b.output(oi if loop_output == "i" else ox, total)
    return b.build(), [np.array(0, np.int32), np.array([1.5, -2], np.float32)]


def constant_or_scaled_branch():
    """IF c: x * 3 else: a constant: one branch's result is traced, the other's a static weight."""
    b = ModelBuilder()
    c, x = b.input("c", (), "bool"), b.input("x", (2,))
    then = b.subgraph("then")
    tx, ty = then.input("x", (2,)), then.tensor("y", (2,))
    then.op("MUL", [tx, then.constant("three", np.full(2, 3, np.float32))], [ty])
    then.output(ty)
    other = b.subgraph("else")
    other.input("x", (2,))
    other.output(other.constant("fixed", np.array([0.25, -4], np.float32)))
    out = b.tensor("out", (2,))
    b.op("IF", [c, x], [out], then_subgraph_index=then.index, else_subgraph_index=other.index)
    b.output(out)
    return b.build(), [np.array(True), np.array([0.5, -1], np.float32)]


def calling_model():
    built = call_model("CALL")
    return built, [np.array([1, 2, 3, 4], np.float32), np.array([0.5, -1, 2, 0], np.float32)]


@pytest.mark.parametrize("precision", ["fp16", "fp16_fp32_accum"])
@pytest.mark.parametrize("build", [affine_loop, accumulating_loop, constant_or_scaled_branch, calling_model])
def test_control_flow_under_a_reduced_gpu_precision(build, precision):
    # WHILE used to cast its carry back to the declared float32, meeting the body's float16 weights.
    from litegpu.backends.xla.backend import XlaBackend

    model, inputs = build()
    reference, backend = ReferenceBackend(model), XlaBackend(model, precision=precision)
    for run in range(2):  # the second run continues from the variables of the first (CALL_ONCE done)
        want = reference.run(list(inputs))
        got = [np.asarray(y) for y in backend.run(list(inputs))]
        for g, w in zip(got, want):
            assert g.dtype == w.dtype, f"run {run}"
            np.testing.assert_allclose(g, w, rtol=2e-3, atol=1e-3, err_msg=f"run {run}")
