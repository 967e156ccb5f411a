"""Model Explorer node data (litegpu.compile.node_data), checked against Model Explorer itself: its own data classes
(``model_explorer.node_data_builder``) and the graph its TFLite adapter builds from the same file."""

from __future__ import annotations

import dataclasses
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from litegpu.compile import CPU, GPU, plan
from litegpu.compile.float_view import float_view
from litegpu.compile.node_data import DISTANCE_THRESHOLDS, graph_ids, time_node_data, values_node_data
from litegpu.compile.rewrites import rewrite_for_xla
from litegpu.errors import InvalidArgumentError
from litegpu.ir import called_subgraphs, entry_subgraphs, read_model
from litegpu.ir.builder import ModelBuilder
from litegpu.ir.save import write_model
from model_explorer_support import adapter_graphs, check_against_model_explorer, file_model

HELDOUT = Path(__file__).resolve().parents[1] / "heldout" / "models"
# a WHILE body rewritten for XLA (ops renumbered), ops without outputs (ASSIGN_VARIABLE), two signatures,
# a quantized model (its float view renumbers ops)
HELDOUT_MODELS = ("gru_float32", "streaming_float32", "two_signatures_float32", "while_loop_float32",
                  "mobilenet_v2_035_96_int8")


def model_paths(shared_models: Path) -> list[Path]:
    return sorted(shared_models.glob("*.tflite")) + [HELDOUT / f"{name}.tflite" for name in HELDOUT_MODELS]


def running_subgraphs(model) -> set[int]:
    """The entry subgraphs and those their ops call, transitively."""
    found, todo = set(), list(entry_subgraphs(model))
    while todo:
        index = todo.pop()
        if index not in found:
            found.add(index)
            todo.extend(c for op in model.subgraphs[index].operators for c in called_subgraphs(op))
    return found


def quiet_plan(model, flags, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return plan(model, flags, warn=False, **kwargs)


@pytest.mark.parametrize("flags", [CPU, GPU | CPU], ids=["cpu", "gpu_cpu"])
def test_plan_node_data_has_model_explorers_ids_and_every_op(shared_models, flags):
    for path in model_paths(shared_models):
        model = file_model(path)
        planned = rewrite_for_xla(model)  # what CompiledModel plans: ops renumbered where a rewrite applies
        data = dataclasses.replace(quiet_plan(planned, flags, cpu_kernels="builtin"), file_model=model).node_data()
        assert set(data) == {"engine", "partition", "fallback"}
        engine = data["engine"]
        for index in running_subgraphs(model):
            ops = {(index, op.index) for op in model.subgraphs[index].operators}
            assert ops <= set(engine.values), f"{path.name}: ops without an engine: {sorted(ops - set(engine.values))}"
        assert check_against_model_explorer(engine, path) >= len(engine.values) - 1
        check_against_model_explorer(data["partition"], path)
        check_against_model_explorer(data["fallback"], path)


@pytest.mark.parametrize("name", ["mobilenet_v2_035_96_int8", "resnet_effnet_int8"])
def test_the_float_view_of_a_quantized_model_is_shown_on_the_files_ops(name):
    """The float view renumbers the ops, and keeps no integer copy of a MAX_POOL_2D's result (resnet_effnet):
    every op of the file is still found, on the GPU."""
    path = HELDOUT / f"{name}.tflite"
    model = read_model(path)
    view = float_view(model)
    assert len(view.subgraphs[0].operators) != len(model.subgraphs[0].operators)  # renumbered
    data = dataclasses.replace(quiet_plan(view, GPU | CPU), file_model=model).node_data()
    assert set(data["engine"].values) == {(0, op.index) for op in model.subgraphs[0].operators}
    assert set(data["engine"].values.values()) == {"XLA GPU"}
    check_against_model_explorer(data["engine"], path)


def test_ops_a_rewrite_replaced_say_so_and_the_bodies_run_with_their_while():
    path = HELDOUT / "gru_float32.tflite"  # TensorListSetItem's SLICE / SLICE / CONCATENATION in the WHILE body
    model = read_model(path)
    data = dataclasses.replace(quiet_plan(rewrite_for_xla(model), CPU, cpu_kernels="builtin"),
                               file_model=model).node_data()
    gone = {k for k, v in data["engine"].values.items() if v.startswith("not run")}
    # the two slices, and the ops that computed their begin and size (the step write itself is now a
    # DYNAMIC_UPDATE_SLICE writing the concatenation's output tensor: that op is found)
    assert {k[0] for k in gone} == {2}
    assert sorted(model.subgraphs[2].operators[i].opcode_name for _, i in gone) == [
        "CONCATENATION", "RESHAPE", "SLICE", "SLICE"]
    assert {data["partition"].values[(s, 0)] for s in (1, 2, 3, 4)} == {0}  # bodies: the WHILE's partition
    assert not data["fallback"].values


def test_a_gpu_plan_names_the_ops_that_fell_back_and_why():
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_plan_partitions import detector_model

    model = detector_model()
    data = quiet_plan(model, GPU | CPU).node_data()
    assert data["fallback"].values == {(0, 5): "output shape depends on data", (0, 8): "output shape depends on data"}
    assert data["engine"].values[(0, 5)] == "numpy reference CPU" and data["engine"].values[(0, 0)] == "XLA GPU"
    assert [data["partition"].values[(0, i)] for i in (0, 5, 6)] == [0, 1, 2]
    # neighbouring partitions of one engine in two shades, one colour per engine otherwise
    colors = data["partition"].colors
    assert colors[(0, 0)] == data["engine"].colors[(0, 0)] != colors[(0, 6)]


def test_a_fast_cpu_plan_says_why_each_op_is_off_openvino(shared_models, without_litert):
    from litegpu.backends.engine import EngineSettings
    from litegpu.backends.registry import fast_cpu_engines

    path = shared_models / "mediapipe_selfie_segmentation.tflite"
    model = read_model(path)
    p = quiet_plan(model, CPU, engines=fast_cpu_engines(EngineSettings(), str(path)))
    fallback = p.node_data()["fallback"].values
    assert "TFLite frontend" in fallback[(0, 244)]  # the custom Convolution2DTransposeBias
    assert "DEQUANTIZE" in fallback[(0, 242)]      # its weights, dequantized beside it
    assert "too little work" in fallback[(0, 245)]  # the LOGISTIC after it: a partition of its own would not pay
    assert {p.node_data()["engine"].values[k] for k in fallback} == {"XLA CPU"}
    check_against_model_explorer(p.node_data()["fallback"], path)


def test_graph_ids_follow_the_adapter_for_unnamed_and_shared_names(tmp_path):
    b = ModelBuilder()
    b.name = ""  # subgraph 0 unnamed, then: unnamed, two of one name
    for sg in (b, b.subgraph(""), b.subgraph("body"), b.subgraph("body")):
        x = sg.input("x", (2,))
        y = sg.tensor("y", (2,))
        sg.op("ADD", [x, x], [y])
        sg.output(y)
    path = tmp_path / "names.tflite"
    write_model(b.build(), path)
    model = read_model(path)
    assert graph_ids(model) == tuple(g["id"] for _, g in sorted(adapter_graphs(path).items()))
    data = values_node_data("x", {(sg.index, 0): float(sg.index) for sg in model.subgraphs}, model)
    assert graph_ids(model) == ("main", "subgraph_1", "body", "body")
    assert data.to_dict()["body"]["results"] == {"0": {"value": 2.0}}  # the first subgraph of a shared name
    check_against_model_explorer(data, path)


def test_values_keep_finite_numbers_and_thresholds_stay_json(tmp_path):
    b = ModelBuilder()
    x = b.input("x", (2,))
    ys = [b.tensor(f"y{k}", (2,)) for k in range(3)]
    for y in ys:
        b.op("RELU", [x], [y])
    b.output(*ys)
    model = b.build()
    data = values_node_data("d", {(0, 0): 0.5, (0, 1): float("nan"), (0, 2): float("inf")}, model,
                            thresholds=DISTANCE_THRESHOLDS)
    written = data.save(tmp_path / "d.json").read_text()
    assert '"0"' in written and '"1"' not in written and "Infinity" not in written
    assert data.to_dict()["main"]["thresholds"][-1]["value"] == 1e300


def test_profile_records_become_a_time_overlay():
    b = ModelBuilder()
    x = b.input("x", (2,))
    y, z = b.tensor("y", (2,)), b.tensor("z", (2,))
    b.op("RELU", [x], [y])
    b.op("ADD", [y, b.constant("one", np.ones(2, np.float32))], [z])
    b.output(z)
    profile = {"subgraph": 0, "ops": [{"index": 1, "op": "ADD", "kind": "timed", "ms": 0.25},
                                      {"index": 0, "op": "RELU", "kind": "folded", "ms": 0.0}]}
    data = time_node_data(profile, b.build())
    assert data.to_dict()["main"]["results"] == {"1": {"value": 0.25}}
    assert data.to_dict()["main"]["gradient"][0]["stop"] == 0.0


def test_a_plan_without_its_model_says_so():
    p = quiet_plan(ModelBuilder().build(), CPU)
    with pytest.raises(InvalidArgumentError, match="without its model"):
        dataclasses.replace(p, model=None).node_data()
