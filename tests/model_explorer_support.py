"""Model Explorer's own view of a model, for the tests of its node data (``litegpu[explore]``): the graphs its
TFLite adapter builds and its node-data classes."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import pytest

from litegpu.compile.node_data import NodeData
from litegpu.ir import read_model


def model_explorer_module(name: str):
    """A module of Model Explorer (``litegpu[explore]``), imported without PyTorch where no test has imported it
    yet: its package imports PyTorch for a PyTorch adapter when it can (8 of the 10 s it takes), and reads it as
    absent otherwise."""
    hide_torch = "model_explorer" not in sys.modules and "torch" not in sys.modules
    if hide_torch:
        sys.modules["torch"] = None  # type: ignore[assignment]  (an import of it raises ImportError)
    try:
        return pytest.importorskip(name, reason="Model Explorer is not installed (litegpu[explore])")
    finally:
        if hide_torch:
            del sys.modules["torch"]


file_model = functools.lru_cache(maxsize=None)(read_model)


@functools.lru_cache(maxsize=None)
def adapter_graphs(path: Path) -> dict[int, dict]:
    """Subgraph index -> the graph Model Explorer's TFLite adapter builds (the one it uses for .tflite files)."""
    adapter = model_explorer_module("model_explorer.builtin_tflite_flatbuffer_adapter")
    collections = adapter.BuiltinTfliteFlatbufferAdapter().convert(str(path), {})["graphCollections"]
    return {g["subgraphIndex"]: g for c in collections for g in c.graphs}


def output_tensors(node: dict) -> set[int]:
    return {int(a["value"]) for m in node.get("outputsMetadata", []) for a in m["attrs"] if a["key"] == "tensor_index"}


def as_model_explorer_data(graph_data: dict):
    """``graph_data`` parsed strictly (no unknown field, every type as annotated) into Model Explorer's own
    GraphNodeData.  String values (an engine, a reason) stand as numbers for the parse: the web app takes any value
    (``NodeDataProviderResultData.value: any``), the Python data class annotates numbers only."""
    dacite = pytest.importorskip("dacite")
    GraphNodeData = model_explorer_module("model_explorer.node_data_builder").GraphNodeData

    assert all(isinstance(r["value"], (int, float, str)) for r in graph_data["results"].values())
    numeric = {**graph_data, "results": {k: {**r, "value": 0 if isinstance(r["value"], str) else r["value"]}
                                         for k, r in graph_data["results"].items()}}
    return dacite.from_dict(GraphNodeData, numeric, config=dacite.Config(strict=True))


def check_against_model_explorer(data: NodeData, path: Path) -> int:
    """Every graph's data parses as Model Explorer's GraphNodeData, every node id names an op node of the adapter's
    graph of that id, of the op's kind and writing the op's outputs; returns the values checked."""
    model = file_model(path)
    graphs = adapter_graphs(path)
    by_id = {g["id"]: (index, g) for index, g in sorted(graphs.items(), reverse=True)}  # the first of a name wins
    checked = 0
    for graph_id, graph_data in data.to_dict().items():
        parsed = as_model_explorer_data(graph_data)
        assert parsed.name == data.name and len(parsed.results) == len(graph_data["results"])
        assert graph_id in by_id, f"{path.name}: graph {graph_id!r} is not in Model Explorer's graphs"
        index, graph = by_id[graph_id]
        nodes = {n["id"]: n for n in graph["nodes"]}
        sg = model.subgraphs[index]
        for node_id, result in graph_data["results"].items():
            assert node_id in nodes, f"{path.name}: graph {graph_id!r} has no node {node_id!r}"
            node, op = nodes[node_id], sg.operators[int(node_id)]
            assert node["label"].lower() == op.opcode_name.lower(), (path.name, node_id, node["label"], op)
            assert output_tensors(node) == {t for t in op.outputs if t >= 0}, (path.name, node_id)
            assert "value" in result
            checked += 1
    return checked
