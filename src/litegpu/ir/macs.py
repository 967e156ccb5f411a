"""How much arithmetic a run of a model does: the multiply-accumulates of its matrix products and convolutions.

The planner weighs engines with it (which runs are worth their own partition, which models are timed) and the
official interpreter's engine picks its thread count by it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from .load import entry_subgraphs
from .model import Model, Operator, Subgraph


def model_macs(model: Model) -> int:
    """Multiply-accumulates of one run over the entry subgraphs (matrix products and convolutions)."""
    return sum(ops_macs(model.subgraphs[i], range(len(model.subgraphs[i].operators))) for i in entry_subgraphs(model))


def ops_macs(sg: Subgraph, op_indices: Iterable[int]) -> int:
    """Multiply-accumulates of these ops of ``sg``."""
    return sum(multiply_accumulates(sg, sg.operators[i]) for i in op_indices)


def multiply_accumulates(sg: Subgraph, op: Operator) -> int:
    """Multiply-accumulates of a matrix product or convolution (0 for other ops): its output elements
    times the length of the sum behind each."""
    name = op.opcode_name
    if name not in ("CONV_2D", "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV", "CONV_3D", "FULLY_CONNECTED",
                    "BATCH_MATMUL"):
        return 0
    try:
        out = math.prod(sg.tensors[op.outputs[0]].shape)
        if name == "TRANSPOSE_CONV":
            w = sg.tensors[op.inputs[1]].shape            # (cout, kh, kw, cin)
            x = sg.tensors[op.inputs[2]].shape
            return math.prod(x) * w[0] * w[1] * w[2]
        w = sg.tensors[op.inputs[1]].shape
        if name == "CONV_2D":                             # (cout, kh, kw, cin)
            return out * w[1] * w[2] * w[3]
        if name == "CONV_3D":                             # (kd, kh, kw, cin, cout)
            return out * w[0] * w[1] * w[2] * w[3]
        if name == "DEPTHWISE_CONV_2D":                   # (1, kh, kw, cout)
            return out * w[1] * w[2]
        if name == "FULLY_CONNECTED":                     # (units, k)
            return out * w[-1]
        x = sg.tensors[op.inputs[0]].shape                # BATCH_MATMUL
        return out * (x[-2] if op.options.get("adj_x") else x[-1])
    except (IndexError, TypeError):
        return 0
