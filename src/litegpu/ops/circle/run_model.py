"""Circle's RUN_MODEL (code -8): run another model of the same package, by a signature.

ONE's definition (circle schema 0.10, ``RunModelOptions{location, signature}``; onert's
``CircleLoader::loadRunModel``): ``location`` is a path relative to the folder of the model that holds the op
(an nnpackage keeps its models together in one folder), and the model's type is its extension.  onert inlines
only "tvn" models (an NPU binary, run as its Bulk op); litegpu runs the models it reads, ``.circle`` and
``.tflite``:

- the callee is entered by its signature named ``signature``, the op's inputs and outputs taken in the
  signature's order; an empty ``signature`` enters its first subgraph, inputs and outputs in that subgraph's
  order (a model without signature defs, as onert's primary subgraph);
- the callee runs on the caller's target (numpy, or traced into the caller's XLA program, its weights
  constants of that program).

Refused, naming the op and the file: a caller not read from a file (no folder to resolve ``location`` in), a
location that is absolute or leaves the caller's folder (not the same package), a missing file, another
type (tvn), a model that calls itself, an unknown signature, inputs or outputs that do not match it.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import numpy as np

from ...errors import ModelExecutionError, UnsupportedOpError
from ...ir import Model, numpy_dtype, read_model
from ..registry import Op, OpContext, register

RUNNABLE = (".circle", ".tflite")


def _static_reason(op: Any) -> str | None:
    """What the options alone say (the caller's folder is known only when running)."""
    location = op.options.get("location") or ""
    if not location:
        return "no location (RUN_MODEL names the model to run by a path in the caller's folder)"
    if os.path.isabs(location):
        return f"location {location!r} is absolute (RUN_MODEL runs models of the same package, by a relative path)"
    extension = os.path.splitext(location)[1].lower()
    if extension not in RUNNABLE:
        kind = "an NPU binary, which onert inlines as its Bulk op" if extension == ".tvn" else "a type it does not read"
        return (f"location {location!r}: litegpu runs .circle and .tflite models, not {extension or 'no extension'} "
                f"({kind})")
    return None


@functools.lru_cache(maxsize=16)
def _read(path: str, mtime_ns: int, size: int) -> Model:
    """The callee, read once per file version (the op runs at every call, traced or not)."""
    return read_model(path)


def _entry(ctx: OpContext, callee: Model, path: str) -> tuple[int, list[int], list[int]]:
    """(subgraph index, positions in the subgraph's inputs of the op's inputs, positions in its outputs of the
    op's outputs) of the callee's entry named by ``signature``."""
    key = ctx.options.get("signature") or ""
    if not key:
        sg = callee.subgraphs[0]
        return 0, list(range(len(sg.inputs))), list(range(len(sg.outputs)))
    signature = next((s for s in callee.signatures if s.key == key), None)
    if signature is None:
        known = ", ".join(repr(s.key) for s in callee.signatures) or "none"
        raise UnsupportedOpError(f"{ctx.op}: {path} has no signature {key!r} (signatures: {known})")
    sg = callee.subgraphs[signature.subgraph_index]
    inputs = [list(sg.inputs).index(t.tensor_index) for t in signature.inputs]
    outputs = [list(sg.outputs).index(t.tensor_index) for t in signature.outputs]
    return signature.subgraph_index, inputs, outputs


def _callee(ctx: OpContext) -> tuple[Model, str]:
    reason = _static_reason(ctx.op)
    if reason is not None:
        raise UnsupportedOpError(f"{ctx.op}: {reason}")
    caller = ctx.model.source
    if not os.path.isfile(caller):
        raise UnsupportedOpError(f"{ctx.op}: the model was not read from a file ({caller}), so RUN_MODEL's location "
                                 f"{ctx.options.location!r} has no folder to be resolved in")
    folder = os.path.dirname(os.path.abspath(caller))
    path = os.path.normpath(os.path.join(folder, ctx.options.location))
    if os.path.commonpath([folder, path]) != folder:
        raise UnsupportedOpError(f"{ctx.op}: location {ctx.options.location!r} leaves the folder of {caller} "
                                 "(RUN_MODEL runs models of the same package)")
    if path == os.path.abspath(caller):
        raise UnsupportedOpError(f"{ctx.op}: {caller} calls itself")
    if not os.path.isfile(path):
        raise UnsupportedOpError(f"{ctx.op}: {caller} runs {path}, which does not exist")
    stat = os.stat(path)
    return _read(path, stat.st_mtime_ns, stat.st_size), path


@register("RUN_MODEL")
class RunModel(Op):
    # the callee's ops decide which types they take
    dtypes = ("float32", "float16", "int8", "uint8", "int16", "int32", "int64", "bool")

    def unsupported_reason(self, op, subgraph, target):
        return super().unsupported_reason(op, subgraph, target) or _static_reason(op)

    def compute(self, ctx: OpContext, *inputs: Any) -> Any:
        callee, path = _callee(ctx)
        index, in_positions, out_positions = _entry(ctx, callee, path)
        sg = callee.subgraphs[index]
        if len(inputs) != len(in_positions) or len(ctx.op.outputs) != len(out_positions):
            raise ModelExecutionError(f"{ctx.op}: {len(inputs)} inputs and {len(ctx.op.outputs)} outputs, but the "
                                      f"entry {ctx.options.get('signature') or '(first subgraph)'!r} of {path} takes "
                                      f"{len(in_positions)} and gives {len(out_positions)}")
        for i, (x, position) in enumerate(zip(inputs, in_positions)):
            want = sg.tensors[sg.inputs[position]]
            if want.dtype not in self.dtypes or np.dtype(x.dtype) != numpy_dtype(want.dtype):
                raise ModelExecutionError(f"{ctx.op}: input {i} is {x.dtype}, {path} takes {want.dtype} there")
        ordered: list[Any] = [None] * len(sg.inputs)
        for x, position in zip(inputs, in_positions):
            ordered[position] = x
        results = ctx.run_model(callee, index, ordered)
        return [results[p] for p in out_positions]
