"""Per-op values for Google AI Edge's Model Explorer ("node data"): what ran where, how long, how far off.

Model Explorer (``pip install ai-edge-model-explorer``) draws a ``.tflite`` graph and overlays node data: a JSON
value per node, coloured by the value (its own ``bgColor``, a gradient or thresholds).  Node data for a whole
model is keyed by graph id, then by node id.  Values are numbers, or strings for what is a name (an engine, a
reason): the web app takes any value (``NodeDataProviderResultData.value: any``), shows a string as it is and
counts each one on group nodes, where its Python data class annotates numbers only.

Model Explorer's TFLite adapter names each subgraph's graph by the subgraph's name ("main" for an unnamed
subgraph 0, "subgraph_<i>" for another unnamed one) and each op's node by the op's index in its subgraph;
``tests/compile/test_node_data.py`` checks both against the adapter itself on the shared models.  Two subgraphs of
one name share a graph id in Model Explorer too: the first keeps it here.

A plan's partitions index the model it was made on, which a rewrite may have renumbered (the float view of a
quantized model, XLA's rewrites, circle-only ops lowered to builtins); those rewrites keep tensor indices, so an
op of the file is found in the planned model as the op that writes the same output tensor.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..backends import registry
from ..ir import Model, called_subgraphs, entry_subgraphs

# an op of the file that the model the engines run has not (DYNAMIC_UPDATE_SLICE took its place: compile.rewrites)
REWRITTEN = ("not run: a rewrite replaced it", "#eeeeee")
FALLBACK_COLOR = "#e53935"
# A time overlay runs from white (the fastest op) to red (the slowest).
TIME_GRADIENT = ((0.0, "#ffffff"), (1.0, "#d32f2f"))
# Distance from the builtin kernels (relative, see ``runtime.op_distance``): each colour up to its bound.
DISTANCE_THRESHOLDS = ((0.0, "#e0e0e0"), (1e-6, "#a5d6a7"), (1e-4, "#fff176"), (1e-2, "#ffb74d"),
                       (float("inf"), "#e53935"))


def graph_ids(model: Model) -> tuple[str, ...]:
    """The graph id Model Explorer's TFLite adapter gives each subgraph."""
    return tuple(sg.name or ("main" if sg.index == 0 else f"subgraph_{sg.index}") for sg in model.subgraphs)


def node_id(op_index: int) -> str:
    """The node id Model Explorer's TFLite adapter gives an op: its index in its subgraph."""
    return str(op_index)


@dataclass(frozen=True)
class NodeData:
    """One overlay: a value per op of the file, keyed (subgraph, op index), with its colouring."""

    name: str
    graphs: tuple[str, ...]                           # graph id of each subgraph (``graph_ids``)
    values: Mapping[tuple[int, int], float | int | str]
    colors: Mapping[tuple[int, int], str] = field(default_factory=dict)   # a value's own background
    gradient: tuple[tuple[float, str], ...] = ()      # (stop 0..1, colour) for numbers without their own
    thresholds: tuple[tuple[float, str], ...] = ()    # (upper bound, colour) for numbers without their own
    labels: bool = False    # string values: each group node lists its share of each value (a legend of sorts)

    def to_dict(self) -> dict[str, Any]:
        """Model Explorer's ``ModelNodeData`` as JSON: graph id -> ``GraphNodeData``."""
        first = {}  # graph id -> the subgraph that keeps it: the first of that name
        for sg, graph_id in enumerate(self.graphs):
            first.setdefault(graph_id, sg)
        out: dict[str, Any] = {}
        for (sg, op), value in sorted(self.values.items(), key=lambda kv: kv[0]):
            if first[self.graphs[sg]] != sg:
                continue
            graph = out.setdefault(self.graphs[sg], {"name": self.name, "results": {}})
            result: dict[str, Any] = {"value": value}
            if (sg, op) in self.colors:
                result["bgColor"] = self.colors[(sg, op)]
            graph["results"][node_id(op)] = result
        for graph in out.values():
            if self.gradient:
                graph["gradient"] = [{"stop": s, "bgColor": c} for s, c in self.gradient]
            if self.thresholds:
                graph["thresholds"] = [{"value": _finite(v), "bgColor": c} for v, c in self.thresholds]
            if self.labels:
                graph["showExpandedSummaryOnGroupNode"] = graph["showLabelCountColumnsInChildrenStatsTable"] = True
        return out

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    def save(self, path: str | os.PathLike) -> Path:
        """Write the JSON file Model Explorer loads (``--node_data_paths``), atomically."""
        from ..format.file import write_bytes

        write_bytes(path, self.to_json(indent=1).encode())
        return Path(path)


def _finite(value: float) -> float:
    return value if value != float("inf") else 1e300


def values_node_data(name: str, values: Mapping[tuple[int, int], float], model: Model, *,
                     gradient: tuple = (), thresholds: tuple = ()) -> NodeData:
    """Numbers per (subgraph, op index) of ``model`` (the file's) as an overlay coloured by a gradient or
    thresholds; non-finite numbers are left out (JSON has none)."""
    kept = {k: float(v) for k, v in values.items() if v == v and abs(v) != float("inf")}
    return NodeData(name, graph_ids(model), kept, gradient=gradient, thresholds=thresholds)


def time_node_data(profile: Mapping[str, Any], model: Model, name: str = "time (ms)") -> NodeData:
    """The per-op times of ``litegpu bench --profile`` (``bench_cmd.profile_ops``: its ``subgraph`` and ``ops``
    records) as an overlay; ops folded into constants or not timed are left out."""
    sg = int(profile.get("subgraph", 0))
    times = {(sg, int(r["index"])): round(float(r["ms"]), 4) for r in profile["ops"] if r["kind"] == "timed"}
    return values_node_data(name, times, model, gradient=TIME_GRADIENT)


# ---- the plan ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Placement:
    """Where one op of the file runs: its partition (an index into ``plan.partitions``; None where a rewrite
    removed the op) and why it is not on the plan's preferred engine (None where it is)."""

    partition: int | None
    reason: str | None = None


def placements(plan: Any, planned: Model, file_model: Model) -> dict[tuple[int, int], Placement]:
    """(subgraph, op index in the file) -> its Placement under ``plan`` (a ``DelegationPlan`` made on
    ``planned``); the ops of a subgraph that an op calls (WHILE bodies, IF branches) run where that op does."""
    part = {(p.subgraph_index, i): k for k, p in enumerate(plan.partitions) for i in p.op_indices}
    why = {(u.subgraph, u.op_index): u.reason for u in plan.unsupported}
    why.update({(u.subgraph, u.op_index): u.reason for p in plan.partitions for u in p.reasons})
    for index in entry_subgraphs(planned):
        _callees_run_with_their_caller(planned, index, part)
    running = {s for s, _ in part}
    found: dict[tuple[int, int], Placement] = {}
    for sg in file_model.subgraphs:
        if sg.index >= len(planned.subgraphs):
            break
        twin = planned.subgraphs[sg.index]
        producer = twin.producers()
        by_name = {t.name: t.index for t in twin.tensors[len(sg.tensors):]}  # the tensors a rewrite added
        for op in sg.operators:
            index = _planned_op(op, sg, twin, producer, by_name)
            key = (sg.index, index)
            if index is None or key not in part:
                if index is None and sg.index in running:
                    found[(sg.index, op.index)] = Placement(None)
                continue
            found[(sg.index, op.index)] = Placement(part[key], why.get(key))
    return found


def _callees_run_with_their_caller(model: Model, index: int, part: dict[tuple[int, int], int]) -> None:
    for op in model.subgraphs[index].operators:
        k = part.get((index, op.index))
        for callee in called_subgraphs(op) if k is not None else ():
            if (callee, 0) in part or not model.subgraphs[callee].operators:
                continue
            part.update({(callee, o.index): k for o in model.subgraphs[callee].operators})
            _callees_run_with_their_caller(model, callee, part)


def _planned_op(op: Any, sg: Any, twin: Any, producer: dict[int, int], by_name: dict[str, int]) -> int | None:
    """The op of the planned subgraph that computes ``op``: the writer of one of its outputs, or of its float
    result where the float view keeps no integer copy of it (``<name>/float``, ``<name>/dequantized``: see
    ``compile.float_view``), or for an op without outputs (ASSIGN_VARIABLE) the op of the same kind reading the
    same tensors."""
    for t in op.outputs:
        if t >= 0 and t in producer:
            return producer[t]
    for t in op.outputs:
        for suffix in ("/float", "/dequantized"):
            twin_tensor = by_name.get(f"{sg.tensors[t].name}{suffix}") if t >= 0 else None
            if twin_tensor in producer:
                return producer[twin_tensor]
    if not any(t >= 0 for t in op.outputs):
        return next((q.index for q in twin.operators
                     if q.opcode_name == op.opcode_name and q.inputs == op.inputs), None)
    return None


def engine_label(partition: Any) -> tuple[str, str]:
    """What the overlay says of a partition's ops, and its colour: the engine's own (``EngineInfo.overlay``)."""
    return registry.overlay(partition.engine, partition.device) or (f"{partition.engine} {partition.device}", "#bdbdbd")


def plan_node_data(plan: Any, planned: Model, file_model: Model) -> dict[str, NodeData]:
    """The plan's overlays: "engine" (engine and device of each op), "partition" (its partition's index, in its
    engine's colour, the partitions of one engine in two shades by turns) and "fallback" (why an op is not on the
    plan's preferred engine, for the ops that are not)."""
    where = placements(plan, planned, file_model)
    ids = graph_ids(file_model)
    # the k-th partition of an engine in the k-th shade of its colour, two shades in turn
    turn = {k: sum(q.engine == p.engine and q.device == p.device for q in plan.partitions[:k]) % 2
            for k, p in enumerate(plan.partitions)}
    engine, engine_colors, partition, partition_colors, fallback = {}, {}, {}, {}, {}
    for key, placed in where.items():
        if placed.partition is None:
            engine[key], engine_colors[key] = REWRITTEN
        else:
            p = plan.partitions[placed.partition]
            engine[key], engine_colors[key] = engine_label(p)
            partition[key] = placed.partition
            partition_colors[key] = _shade(engine_colors[key], turn[placed.partition])
        if placed.reason is not None:
            fallback[key] = placed.reason
    return {"engine": NodeData("engine", ids, engine, engine_colors, labels=True),
            "partition": NodeData("partition", ids, partition, partition_colors),
            "fallback": NodeData("fallback", ids, fallback, {k: FALLBACK_COLOR for k in fallback})}


def _shade(color: str, darker: int) -> str:
    """``color`` (#rrggbb), or a darker shade of it."""
    if not darker:
        return color
    r, g, b = (int(color[i:i + 2], 16) for i in (1, 3, 5))
    return "#" + "".join(f"{int(c * 0.7):02x}" for c in (r, g, b))


__all__ = ["DISTANCE_THRESHOLDS", "NodeData", "Placement", "TIME_GRADIENT", "graph_ids",
           "node_id", "placements", "plan_node_data", "time_node_data", "values_node_data"]
