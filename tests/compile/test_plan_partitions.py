"""Partial delegation plans (litegpu.compile.plan): partitions, boundaries, reasons and the warnings."""

import logging
import warnings

import numpy as np
import pytest

import litegpu as lg
from litegpu import HardwareAccelerator as HA
from litegpu.compile import Accelerator, PartialDelegationWarning, plan
from litegpu.ir.builder import ModelBuilder
from litegpu.ops import Target

GPU_SIDE, CPU_SIDE = ("GPU", Target.XLA_GPU), ("CPU", Target.REFERENCE)


def detector_model(num_where: int = 1):
    """Two convolutions -> reshape -> NON_MAX_SUPPRESSION_V4 -> GATHER, and scores > 0.6 -> WHERE.

    Ops: 0 conv(boxes) 1 conv(scores) 2 logistic 3 reshape(boxes) 4 reshape(scores) 5 NMS 6 gather
    7 greater 8 where (9.. more WHEREs on the same mask).
    """
    rng = np.random.default_rng(3)
    b = ModelBuilder()
    image = b.input("image", (1, 8, 8, 3))
    feat = b.tensor("box_features", (1, 8, 8, 4))
    logits = b.tensor("logits", (1, 8, 8, 1))
    probs = b.tensor("probs", (1, 8, 8, 1))
    boxes = b.tensor("boxes", (64, 4))
    scores = b.tensor("scores", (64,))
    b.op("CONV_2D", [image, b.constant("wb", rng.normal(size=(4, 3, 3, 3)).astype(np.float32)),
                     b.constant("bb", np.array([0, 0, 2, 2], np.float32))], [feat],
         padding="SAME", stride_w=1, stride_h=1)
    b.op("CONV_2D", [image, b.constant("ws", rng.normal(size=(1, 3, 3, 3)).astype(np.float32)),
                     b.constant("bs", np.zeros(1, np.float32))], [logits], padding="SAME", stride_w=1, stride_h=1)
    b.op("LOGISTIC", [logits], [probs])
    b.op("RESHAPE", [feat, b.constant("shape4", np.array([64, 4], np.int32))], [boxes])
    b.op("RESHAPE", [probs, b.constant("shape1", np.array([64], np.int32))], [scores])
    selected = b.tensor("selected", (8,), "int32")
    valid = b.tensor("valid", (), "int32")
    b.op("NON_MAX_SUPPRESSION_V4", [boxes, scores, b.constant("max", np.array(8, np.int32)),
                                    b.constant("iou", np.array(0.5, np.float32)),
                                    b.constant("thr", np.array(0.3, np.float32))], [selected, valid])
    picked = b.tensor("picked", (8, 4))
    b.op("GATHER", [boxes, selected], [picked], axis=0)
    mask = b.tensor("mask", (64,), "bool")
    b.op("GREATER", [scores, b.constant("cut", np.array(0.6, np.float32))], [mask])
    hits = [b.tensor(f"hits{k}", (0, 1), "int64", shape_signature=(-1, 1)) for k in range(num_where)]
    for h in hits:
        b.op("WHERE", [mask], [h])
    b.output(picked, valid, *hits)
    return b.build()


def detector_image(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(1, 8, 8, 3)).astype(np.float32)


def quiet_plan(model, flags=HA.GPU | HA.CPU, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return plan(model, flags, **kwargs)


def test_detector_plan_keeps_convolutions_on_gpu_and_sends_nms_and_where_to_cpu():
    p = quiet_plan(detector_model())
    assert [((q.device, q.target), q.op_indices) for q in p.partitions] == [
        (GPU_SIDE, (0, 1, 2, 3, 4, 7)), (CPU_SIDE, (5, 8)), (GPU_SIDE, (6,))]
    assert (p.accelerator, p.is_split, p.fully_accelerated) == ("GPU", True, False)
    assert p.partitions[0].accelerator == HA.GPU and p.partitions[1].accelerator == Accelerator.CPU
    reasons = {(r.opcode, r.op_index): r.reason for r in p.partitions[1].reasons}
    assert reasons == {("NON_MAX_SUPPRESSION_V4", 5): "output shape depends on data",
                       ("WHERE", 8): "output shape depends on data"}
    assert p.partitions[0].reasons == () and (p.ops_on("GPU"), p.ops_on(HA.CPU)) == (7, 2)
    assert p.summary() == "7 operations will run on the GPU, and the remaining 2 on the CPU (2 on the numpy reference)"


def test_boundaries_list_each_crossing_tensor_once_with_its_size():
    model = detector_model()
    p = quiet_plan(model)
    sg = model.main
    crossing = {sg.tensors[b.tensor].name: (b.producer, b.consumers, b.nbytes, b.shape, b.dtype)
                for b in p.boundaries}
    assert crossing == {"boxes": (0, (1, 2), 64 * 4 * 4, (64, 4), "float32"),
                        "scores": (0, (1,), 64 * 4, (64,), "float32"),
                        "mask": (0, (1,), 64, (64,), "bool"),
                        "selected": (1, (2,), 8 * 4, (8,), "int32")}
    # boxes reach the CPU once; the second GPU partition reads the GPU copy it already has
    assert p.transfer_bytes() == 1024 + 256 + 64 + 32
    names = lambda ts: sorted(sg.tensors[t].name for t in ts)  # noqa: E731
    assert names(p.partitions[1].inputs) == ["boxes", "mask", "scores"]
    assert names(p.partitions[1].outputs) == ["hits0", "selected", "valid"]
    assert names(p.partitions[2].inputs) == ["boxes", "selected"]


def test_warnings_name_each_refused_op_kind_once_then_the_counts(caplog):
    with caplog.at_level(logging.WARNING, logger="litegpu"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan(detector_model(num_where=3), HA.GPU | HA.CPU)
    expected = ["op NON_MAX_SUPPRESSION_V4 (#5) cannot be handled by the GPU: output shape depends on data",
                "op WHERE (#8) cannot be handled by the GPU: output shape depends on data (and 2 more WHERE ops)",
                "7 operations will run on the GPU, and the remaining 4 on the CPU (4 on the numpy reference)"]
    assert [str(w.message) for w in caught] == expected
    assert all(issubclass(w.category, PartialDelegationWarning) for w in caught)
    assert [r.getMessage() for r in caplog.records] == expected


def test_model_plan_warns_only_when_asked():
    from litegpu.ir.save import to_bytes

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = lg.Model.from_buffer(to_bytes(detector_model())).plan(HA.GPU | HA.CPU)
    assert len(p.partitions) == 3


def test_a_gpu_op_stored_after_an_independent_cpu_op_joins_the_earlier_gpu_partition():
    b = ModelBuilder()
    x = b.input("x", (6,))
    h, m, w, y = b.tensor("h", (6,)), b.tensor("m", (6,), "bool"), b.tensor("w", (0, 1), "int64"), b.tensor("y", (6,))
    b.op("ADD", [x, x], [h])                                               # 0 GPU
    b.op("GREATER", [h, b.constant("z", np.zeros(6, np.float32))], [m])    # 1 GPU
    b.op("WHERE", [m], [w])                                                # 2 CPU
    b.op("MUL", [h, h], [y])                                               # 3 GPU, independent of 2
    b.output(w, y)
    p = quiet_plan(b.build())
    assert [q.op_indices for q in p.partitions] == [(0, 1, 3), (2,)]


def test_cpu_island_of_xla_capable_ops_runs_on_xla_cpu():
    b = ModelBuilder()
    boxes, scores = b.input("boxes", (5, 4)), b.input("scores", (5,))
    doubled = b.tensor("doubled", (5,))
    idx, n = b.tensor("idx", (3,), "int32"), b.tensor("n", (), "int32")
    b.op("ADD", [scores, scores], [doubled])
    b.op("NON_MAX_SUPPRESSION_V4", [boxes, doubled, b.constant("max", np.array(3, np.int32)),
                                    b.constant("iou", np.array(0.5, np.float32)),
                                    b.constant("thr", np.array(0.0, np.float32))], [idx, n])
    b.output(idx, n)
    p = quiet_plan(b.build())
    assert [(q.device, q.target, q.op_indices) for q in p.partitions] == [
        ("GPU", Target.XLA_GPU, (0,)), ("CPU", Target.XLA_CPU, (1,))]


def test_an_op_calling_a_subgraph_with_a_refused_op_falls_back_with_the_inner_reason():
    b = ModelBuilder()
    x = b.input("x", (4,))
    h, y = b.tensor("h", (4,)), b.tensor("y", (0, 1), "int64")
    body = b.subgraph("body")
    bx = body.input("bx", (4,))
    by = body.tensor("by", (0, 1), "int64")
    body.op("WHERE", [bx], [by])
    body.output(by)
    b.op("ADD", [x, x], [h])
    b.op("CALL", [h], [y], subgraph=1)
    b.output(y)
    model = b.build()
    p = quiet_plan(model)
    assert [(q.device, q.op_indices) for q in p.partitions] == [("GPU", (0,)), ("CPU", (1,))]
    (refused,) = p.unsupported
    assert refused.opcode == "CALL" and "calls subgraph 1, where WHERE (#0)" in refused.reason


def test_fully_supported_and_cpu_only_plans_stay_whole():
    model = detector_model()
    cpu = quiet_plan(model, HA.CPU, cpu_kernels="builtin")
    assert (cpu.is_split, cpu.target, len(cpu.partitions)) == (False, Target.REFERENCE, 1)
    b = ModelBuilder()
    x = b.input("x", (3,))
    y = b.tensor("y", (3,))
    b.op("ADD", [x, x], [y])
    b.output(y)
    gpu = quiet_plan(b.build())
    assert (gpu.is_split, gpu.fully_accelerated, gpu.boundaries) == (False, True, ())


def test_mobilenet_is_one_gpu_partition_and_fully_accelerated(shared_models):
    model = lg.Model.from_file(shared_models / "mobilenet_v3_small_float32.tflite")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = model.plan(HA.GPU | HA.CPU, warn=True)
    (only,) = p.partitions
    assert (only.device, only.target, p.fully_accelerated, p.unsupported) == ("GPU", Target.XLA_GPU, True, ())
    assert len(only.op_indices) == len(model.ir.main.operators) == p.ops_on("GPU")
