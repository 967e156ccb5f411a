"""Resource variables: state that persists across runs of one model instance.

VAR_HANDLE names a variable by (container, shared_name); its resource tensor
carries a small int32 id, the variable's position among the model's distinct
names, so that the id alone (a static numpy value, also while tracing) finds
the variable again.  Values live in ``ctx.variables`` (the backend's
``GraphRunner.variables``) under ``("variable", container, shared_name)``; the
XLA backend threads that dict through its program as inputs and outputs.

CALL_ONCE runs its init subgraph once per model instance.  Its "done" marker is
a key in ``ctx.variables``, decided by the key's presence at trace time: under
``jax.jit`` the dict's keys are part of the program's static structure, so the
first run traces the initialisation and later runs trace without it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ModelExecutionError
from ..ir import Model
from .registry import Op, OpContext, register

_NAME_TABLES: dict[int, tuple[Model, list[tuple[str, str]]]] = {}


def _variable_names(model: Model) -> list[tuple[str, str]]:
    """The distinct (container, shared_name) pairs of the model, in order of appearance."""
    cached = _NAME_TABLES.get(id(model))
    if cached is not None and cached[0] is model:
        return cached[1]
    names: list[tuple[str, str]] = []
    for sg in model.subgraphs:
        for op in sg.operators:
            if op.opcode_name == "VAR_HANDLE":
                name = _handle_name(op.options)
                if name not in names:
                    names.append(name)
    if len(_NAME_TABLES) > 64:  # models come and go; this is only a cache
        _NAME_TABLES.clear()
    _NAME_TABLES[id(model)] = (model, names)
    return names


def _handle_name(options: Any) -> tuple[str, str]:
    return (options.get("container") or "", options.get("shared_name") or "")


def _variable_key(ctx: OpContext, handle: Any) -> tuple[str, str, str]:
    names = _variable_names(ctx.model)
    resource_id = int(np.asarray(ctx.static(handle)).reshape(-1)[0])
    if not 0 <= resource_id < len(names):
        raise ModelExecutionError(f"{ctx.op}: resource id {resource_id} names no VAR_HANDLE of the model")
    return ("variable", *names[resource_id])


def call_once_key(init_subgraph_index: int) -> tuple[str, int]:
    """Where CALL_ONCE records that an init subgraph has run (one record per subgraph, as TFLite)."""
    return ("call_once", int(init_subgraph_index))


class _StatefulOp(Op):
    # Resource tensors and variables of any numeric type pass through these ops.
    dtypes = ("resource", "float32", "float16", "int8", "uint8", "int16", "int32", "int64", "bool")


@register("VAR_HANDLE")
class VarHandle(_StatefulOp):
    def compute(self, ctx: OpContext) -> np.ndarray:
        name = _handle_name(ctx.options)
        return np.asarray(_variable_names(ctx.model).index(name), np.int32)


@register("READ_VARIABLE")
class ReadVariable(_StatefulOp):
    def compute(self, ctx: OpContext, handle: Any) -> Any:
        key = _variable_key(ctx, handle)
        if key not in ctx.variables:
            raise ModelExecutionError(f"{ctx.op}: variable {key[2]!r} (container {key[1]!r}) is read before "
                                      "anything assigned it")
        return ctx.variables[key]


@register("ASSIGN_VARIABLE")
class AssignVariable(_StatefulOp):
    def reference(self, ctx: OpContext, handle: Any, value: Any) -> tuple:
        # A copy: the stored state must not alias a tensor a later kernel could reuse.
        ctx.variables[_variable_key(ctx, handle)] = np.array(value, copy=True)
        return ()

    def lower(self, ctx: OpContext, handle: Any, value: Any) -> tuple:
        ctx.variables[_variable_key(ctx, handle)] = value
        return ()


@register("CALL_ONCE")
class CallOnce(_StatefulOp):
    def input_dtype(self, op, subgraph):  # takes no tensors at all
        return None

    def compute(self, ctx: OpContext) -> tuple:
        index = ctx.options.init_subgraph_index
        if not 0 <= index < len(ctx.model.subgraphs):
            raise ModelExecutionError(f"{ctx.op}: init subgraph {index} does not exist "
                                      f"(the model has {len(ctx.model.subgraphs)})")
        key = call_once_key(index)
        if key not in ctx.variables:
            ctx.run_subgraph(index, [])
            ctx.variables[key] = np.asarray(True)
        return ()
