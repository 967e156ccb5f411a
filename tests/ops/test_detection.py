from dataclasses import replace

import numpy as np
import pytest
from flatbuffers import flexbuffers

from litegpu.errors import LiteGpuError, UnsupportedOpError
from litegpu.ir import read_model
from litegpu.ir.builder import ModelBuilder, quantization
from litegpu.ir.save import to_bytes
from litegpu.ops.detection import StdPriorityQueue, decreasing_partial_argsort
from litegpu.ops.registry import Target, find
from oracle import assert_close, check_op_model, run_official, run_ours


def random_boxes(n, seed, degenerate=0):
    rng = np.random.default_rng(seed)
    centre = rng.uniform(0, 10, (n, 2))
    size = rng.uniform(0.5, 4, (n, 2))
    boxes = np.concatenate([centre - size / 2, centre + size / 2], axis=1)
    # NMS accepts either corner order
    flip = rng.random(n) < 0.3
    boxes[flip] = boxes[flip][:, [2, 3, 0, 1]]
    boxes[:degenerate, 2:] = boxes[:degenerate, :2]  # zero area
    return boxes.astype(np.float32)


def nms_model(version, n, max_output, iou, score, sigma=None, constant_max=True):
    b = ModelBuilder()
    boxes = b.input("boxes", (n, 4))
    scores = b.input("scores", (n,))
    size = (b.constant("max", np.array(max_output, np.int32)) if constant_max
            else b.input("max", (), "int32"))
    ins = [boxes, scores, size, b.constant("iou", np.array(iou, np.float32)),
           b.constant("score", np.array(score, np.float32))]
    length = max_output if constant_max else 0
    if version == 5:
        ins.append(b.constant("sigma", np.array(sigma, np.float32)))
        outs = [b.tensor("idx", (length,), "int32"), b.tensor("sel", (length,)), b.tensor("n", (), "int32")]
    else:
        outs = [b.tensor("idx", (length,), "int32"), b.tensor("n", (), "int32")]
    b.op(f"NON_MAX_SUPPRESSION_V{version}", ins, outs)
    b.output(*outs)
    return b.build()


NMS_CASES = [  # n, max_output, iou, score threshold, tie scores, degenerate boxes
    (20, 10, 0.5, 0.0, False, 0),
    (30, 30, 0.3, 0.4, False, 0),
    (12, 5, 0.7, -1.0, True, 0),
    (16, 8, 0.5, 0.2, False, 2),      # zero-area boxes are selected again and again
    (10, 0, 0.5, 0.0, False, 0),
    (1, 3, 0.5, 0.0, False, 0),
]


@pytest.mark.parametrize("n, max_output, iou, score, ties, degenerate", NMS_CASES)
def test_nms_v4_matches_official(n, max_output, iou, score, ties, degenerate):
    rng = np.random.default_rng(n)
    scores = (rng.integers(0, 4, n) / 4 if ties else rng.random(n)).astype(np.float32)
    check_op_model(nms_model(4, n, max_output, iou, score), [random_boxes(n, n, degenerate), scores])


@pytest.mark.parametrize("sigma", [0.0, 0.5, 2.0])
@pytest.mark.parametrize("n, max_output, iou, score, ties, degenerate", NMS_CASES)
def test_nms_v5_matches_official(n, max_output, iou, score, ties, degenerate, sigma):
    rng = np.random.default_rng(n + 1)
    scores = (rng.integers(0, 4, n) / 4 if ties else rng.random(n)).astype(np.float32)
    check_op_model(nms_model(5, n, max_output, iou, score, sigma), [random_boxes(n, n + 1, degenerate), scores])


def test_nms_v5_runtime_max_output_size_gives_the_count_as_length():
    n = 15
    model = nms_model(5, n, 0, 0.4, 0.1, 0.0, constant_max=False)
    inputs = [random_boxes(n, 3), np.random.default_rng(3).random(n).astype(np.float32), np.array(7, np.int32)]
    expected = run_official(to_bytes(model), inputs)
    got = run_ours(read_model(to_bytes(model)), inputs, xla=False)
    assert got[0].shape[0] == int(got[2]) <= 7
    for g, e in zip(got, expected):
        assert_close(g, e, 1e-6, 1e-6, "runtime max_output_size")
    assert find("NON_MAX_SUPPRESSION_V5").unsupported_reason(
        read_model(to_bytes(model)).main.operators[0], read_model(to_bytes(model)).main, Target.XLA_CPU)


def test_nms_leaves_gpu_to_cpu_and_checks_inputs():
    model = read_model(to_bytes(nms_model(4, 5, 3, 0.5, 0.0)))
    op, sg = model.main.operators[0], model.main
    assert find("NON_MAX_SUPPRESSION_V4").unsupported_reason(op, sg, Target.XLA_GPU) == "output shape depends on data"
    assert find("NON_MAX_SUPPRESSION_V4").unsupported_reason(op, sg, Target.XLA_CPU) is None
    with pytest.raises(LiteGpuError, match=r"NON_MAX_SUPPRESSION_V4 \(#0\): scores must have shape \[5\]"):
        run_ours(model, [random_boxes(5, 0), np.zeros(4, np.float32)], xla=False)


# --------------------------------------------------------------------------- libstdc++ tie order

def test_priority_queue_and_partial_sort_follow_libstdcxx_for_ties():
    # Hand-traced with libstdc++'s push_heap/pop_heap: equal keys do not come out in insertion order.
    q = StdPriorityQueue(lambda a, b: a[0] < b[0])
    for item in [(1, "a"), (1, "b"), (1, "c"), (1, "d")]:
        q.push(item)
    popped = []
    while len(q):
        popped.append(q.top()[1])
        q.pop()
    assert popped == ["a", "c", "b", "d"]
    values = np.array([1, 1, 1, 1, 1], np.float32)
    assert list(decreasing_partial_argsort(values, 1)) == [0]  # ArgMaxVector: the first maximum
    no_ties = np.array([0.3, 0.9, 0.1, 0.5], np.float32)
    assert list(decreasing_partial_argsort(no_ties, 3)) == [1, 3, 0]


# --------------------------------------------------------------------------- TFLite_Detection_PostProcess

def anchors_for(n, seed):
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.uniform(0.1, 0.9, (n, 2)), rng.uniform(0.05, 0.4, (n, 2))], axis=1).astype(np.float32)


def postprocess_model(n, classes, background, options, quantized=False):
    b = ModelBuilder()
    cols = classes + background
    if quantized:
        enc = b.input("enc", (1, n, 4), "uint8", quantization=quantization(0.05, 128))
        pred = b.input("pred", (1, n, cols), "uint8", quantization=quantization(1 / 255, 0))
        anchors_q = np.clip(np.round(anchors_for(n, 1) / 0.004), 0, 255).astype(np.uint8)
        anc = b.constant("anchors", anchors_q, quantization=quantization(0.004, 0))
    else:
        enc = b.input("enc", (1, n, 4))
        pred = b.input("pred", (1, n, cols))
        anc = b.constant("anchors", anchors_for(n, 1))
    total = options["max_detections"] * options["max_classes_per_detection"]
    outs = [b.tensor("boxes", (1, total, 4)), b.tensor("classes", (1, total)), b.tensor("scores", (1, total)),
            b.tensor("num", (1,))]
    b.op("TFLite_Detection_PostProcess", [enc, pred, anc], outs, custom_options=bytes(flexbuffers.Dumps(options)))
    b.output(*outs)
    return b.build()


def base_options(**kw):
    opts = {"max_detections": 6, "max_classes_per_detection": 1, "detections_per_class": 4,
            "use_regular_nms": False, "nms_score_threshold": 0.3, "nms_iou_threshold": 0.5, "num_classes": 3,
            "y_scale": 10.0, "x_scale": 10.0, "h_scale": 5.0, "w_scale": 5.0}
    opts.update(kw)
    return opts


def compare_postprocess(model, inputs, options):
    expected = run_official(to_bytes(model), inputs)
    count = int(expected[3][0])
    # the fast path leaves slots it does not fill untouched; compare the filled ones
    filled = count * options["max_classes_per_detection"] if not options["use_regular_nms"] else count
    if not options["use_regular_nms"] and options["max_classes_per_detection"] > options["num_classes"]:
        per = options["max_classes_per_detection"]
        filled_slots = [k * per + c for k in range(count) for c in range(options["num_classes"])]
    else:
        filled_slots = list(range(filled))
    parsed = read_model(to_bytes(model))
    for xla in (False, True):
        got = run_ours(parsed, inputs, xla=xla)
        assert_close(got[3], expected[3], 0, 0, "num_detections")
        for i in range(3):
            assert_close(got[i][0][filled_slots], expected[i][0][filled_slots], 1e-6, 1e-6, f"output {i}")
    return count


POSTPROCESS_CASES = [
    dict(),
    dict(max_classes_per_detection=2),
    dict(max_classes_per_detection=5),           # more than num_classes
    dict(use_regular_nms=True),
    dict(use_regular_nms=True, detections_per_class=1, max_detections=4),
    dict(nms_iou_threshold=0.2, nms_score_threshold=0.0),
    dict(max_detections=0),
]


@pytest.mark.parametrize("background", [0, 1])
@pytest.mark.parametrize("overrides", POSTPROCESS_CASES)
def test_detection_postprocess_matches_official(overrides, background):
    n = 40
    options = base_options(**overrides)
    rng = np.random.default_rng(2)
    enc = rng.normal(0, 2, (1, n, 4)).astype(np.float32)
    pred = rng.random((1, n, 3 + background)).astype(np.float32)
    count = compare_postprocess(postprocess_model(n, 3, background, options), [enc, pred], options)
    if options["max_detections"]:
        assert count > 0  # the case exercises selection


@pytest.mark.parametrize("regular", [False, True])
def test_detection_postprocess_quantized_inputs(regular):
    n = 30
    options = base_options(use_regular_nms=regular, max_classes_per_detection=2)
    rng = np.random.default_rng(4)
    enc = rng.integers(60, 200, (1, n, 4)).astype(np.uint8)
    pred = rng.integers(0, 256, (1, n, 4)).astype(np.uint8)  # quantized scores tie often
    assert compare_postprocess(postprocess_model(n, 3, 1, options, quantized=True), [enc, pred], options) > 0


def test_detection_postprocess_tied_scores_order_like_official():
    n = 24
    options = base_options(max_classes_per_detection=3, num_classes=4, max_detections=8)
    rng = np.random.default_rng(5)
    enc = rng.normal(0, 2, (1, n, 4)).astype(np.float32)
    pred = (rng.integers(0, 4, (1, n, 5)) / 4 + 0.25).astype(np.float32)
    compare_postprocess(postprocess_model(n, 4, 1, options), [enc, pred], options)


def test_detection_postprocess_bad_options_name_the_op():
    model = read_model(to_bytes(postprocess_model(4, 3, 1, base_options())))
    bad = {k: v for k, v in base_options().items() if k != "num_classes"}
    op = model.main.operators[0]
    sg = replace(model.main, operators=(replace(op, custom_options=bytes(flexbuffers.Dumps(bad))),))
    broken = replace(model, subgraphs=(sg,))
    inputs = [np.zeros((1, 4, 4), np.float32), np.zeros((1, 4, 4), np.float32)]
    with pytest.raises(LiteGpuError, match=r"TFLite_Detection_PostProcess \(#0\): custom options lack 'num_classes'"):
        run_ours(broken, inputs, xla=False)
    assert run_ours(model, inputs, xla=False)[3][0] == 0


# --------------------------------------------------------------------------- WHERE

@pytest.mark.parametrize("dtype", ["bool", "float32", "int32", "int64", "int8", "uint8", "uint32"])
@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 3, 2)])
def test_where_matches_official(dtype, shape):
    rng = np.random.default_rng(6)
    x = (rng.random(shape) < 0.4) if dtype == "bool" else (rng.integers(1, 3, shape) * (rng.random(shape) < 0.5))
    x = np.asarray(x).astype(dtype)
    x.reshape(-1)[0] = 1  # the official Python binding cannot read an empty result
    b = ModelBuilder()
    xi = b.input("x", shape, dtype)
    y = b.tensor("y", (0, len(shape)), "int64")
    b.op("WHERE", [xi], [y])
    b.output(y)
    check_op_model(b.build(), [x], xla=False)


@pytest.mark.parametrize("shape", [(0, 3), (4, 2)])
def test_where_with_no_true_element_gives_zero_rows(shape):
    b = ModelBuilder()
    xi = b.input("x", shape)
    y = b.tensor("y", (0, 2), "int64")
    b.op("WHERE", [xi], [y])
    b.output(y)
    got = run_ours(read_model(to_bytes(b.build())), [np.zeros(shape, np.float32)], xla=False)[0]
    assert got.shape == (0, 2) and got.dtype == np.int64


def test_where_rejects_a_scalar_condition():
    b = ModelBuilder()
    xi = b.input("x", (), "bool")
    y = b.tensor("y", (0, 0), "int64")
    b.op("WHERE", [xi], [y])
    b.output(y)
    with pytest.raises(LiteGpuError, match=r"WHERE \(#0\): the condition must have rank > 0"):
        run_ours(read_model(to_bytes(b.build())), [np.array(True)], xla=False)


def test_where_is_cpu_only():
    b = ModelBuilder()
    xi = b.input("x", (3,), "bool")
    y = b.tensor("y", (0, 1), "int64")
    b.op("WHERE", [xi], [y])
    b.output(y)
    model = read_model(to_bytes(b.build()))
    assert find("WHERE").unsupported_reason(model.main.operators[0], model.main, Target.XLA_CPU)
    with pytest.raises(UnsupportedOpError, match=r"WHERE \(#0\)"):
        run_ours(model, [np.array([True, False, True])], xla=True)
