"""A run of one subgraph's ops, the unit the planner gives an engine: in a module of its own, importing nothing of
the IR, so that an engine rebuilding a whole-subgraph executable on a warm start (``Engine.from_file_record``) does
not load the IR's classes or the graph walker."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OpRange:
    """Ops of one subgraph run as a unit, and the tensors crossing its edges (read from before it,
    needed after it)."""

    subgraph: int
    op_indices: tuple[int, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]

    def __str__(self) -> str:
        ops = self.op_indices
        span = f"ops #{ops[0]}..#{ops[-1]}" if ops else "no ops"
        return f"subgraph {self.subgraph} {span}"
