"""Control flow: WHILE, IF, CALL and STABLEHLO_COMPOSITE run other subgraphs.

The reference kernels are plain python (loop, branch, call).  The XLA lowerings
trace subgraphs into ``lax.while_loop`` / ``lax.cond``:

* numpy values (shapes, resource handles, constants) stay static: IF closes
  over them, WHILE keeps those the body passes through unchanged out of the
  loop carry, so shape arithmetic inside the body still folds;
* resource variables written inside a loop body or a branch are threaded
  through the carry / the branch results, since the traced functions must
  not write the enclosing trace's variable store;
* XLA needs loop-invariant shapes: a body that changes a shape (a growing
  tensor) cannot be lowered and is reported as such.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ..errors import ModelExecutionError, UnsupportedOpError
from ..ir import Tensor, numpy_dtype
from .registry import Op, OpContext, register

ANY_DTYPE = ("float32", "float16", "int8", "uint8", "int16", "int32", "int64", "bool", "resource")


def _check_subgraph(ctx: OpContext, index: int, what: str, n_inputs: int, n_outputs: int | None) -> None:
    if not 0 < index < len(ctx.model.subgraphs):
        raise ModelExecutionError(f"{ctx.op}: {what} subgraph {index} does not exist "
                                  f"(the model has {len(ctx.model.subgraphs)})")
    sg = ctx.model.subgraphs[index]
    if len(sg.inputs) != n_inputs or (n_outputs is not None and len(sg.outputs) != n_outputs):
        expected = f"{n_inputs} inputs" + (f" and {n_outputs} outputs" if n_outputs is not None else "")
        raise ModelExecutionError(f"{ctx.op}: {what} subgraph {index} has {len(sg.inputs)} inputs and "
                                  f"{len(sg.outputs)} outputs, expected {expected}")


def _is_static(value: Any) -> bool:
    return value is None or isinstance(value, np.ndarray)


@contextlib.contextmanager
def _variable_scope(ctx: OpContext, variables: dict) -> Iterator[dict]:
    """Run a traced function against its own copy of the variable store, restoring the outer one."""
    store = ctx.variables
    saved = dict(store)
    store.clear()
    store.update(variables)
    try:
        yield store
    finally:
        store.clear()
        store.update(saved)


# What a reduced GPU precision (``litegpu.compile.precision``) holds float32 tensors in.
_PRECISION_FLOATS = (np.dtype(np.float16), np.dtype(np.float32))


def _held_dtype(t: Tensor, value: Any) -> np.dtype:
    """The dtype a value of ``t`` keeps through a loop, a branch or a call.

    Under a reduced GPU precision the XLA backend holds every tensor the model declares float32
    (the called subgraph's weights and results included) in float16, and hands kernels such tensors
    in the precision's compute dtype.  A float of a float32 tensor therefore keeps the dtype it
    arrives in: cast back to float32 it would meet the body's float16 weights (mixed types in
    MUL/ADD) and undo the precision.  Everything else takes its declared dtype.
    """
    declared = np.dtype(numpy_dtype(t.dtype))
    dtype = getattr(value, "dtype", None)
    if t.dtype == "float32" and dtype is not None and np.dtype(dtype) in _PRECISION_FLOATS:
        return np.dtype(dtype)
    return declared


def _as_output_dtype(ctx: OpContext, values: Sequence[Any]) -> list[Any]:
    """Cast traced results to the op's output dtypes as the backend holds them (``_held_dtype``), so that
    both sides of a loop or branch agree."""
    out = []
    for i, v in enumerate(values):
        t = ctx.output(i)
        if t.dtype in ("resource", "variant", "string") or v is None:
            out.append(v)
        elif isinstance(v, np.ndarray):  # static values stay numpy, so later shape arithmetic folds
            out.append(v.astype(_held_dtype(t, v), copy=False))
        else:
            out.append(ctx.xp.asarray(v).astype(_held_dtype(t, v)))
    return out


def _truth(ctx: OpContext, cond: Any) -> bool:
    value = np.asarray(cond)
    if value.size != 1:
        raise ModelExecutionError(f"{ctx.op}: the condition must be a single boolean, got shape {value.shape}")
    return bool(value.reshape(-1)[0])


@register("WHILE")
class While(Op):
    dtypes = ANY_DTYPE

    def _subgraphs(self, ctx: OpContext, n: int) -> tuple[int, int]:
        cond, body = ctx.options.cond_subgraph_index, ctx.options.body_subgraph_index
        _check_subgraph(ctx, cond, "cond", n, 1)
        _check_subgraph(ctx, body, "body", n, n)
        return cond, body

    def reference(self, ctx: OpContext, *values: Any) -> list[Any]:
        cond, body = self._subgraphs(ctx, len(values))
        values = list(values)
        while _truth(ctx, ctx.run_subgraph(cond, values)[0]):
            values = list(ctx.run_subgraph(body, values))
        return values

    def lower(self, ctx: OpContext, *values: Any) -> list[Any]:
        jnp, lax = ctx.xp, ctx.lax
        cond, body = self._subgraphs(ctx, len(values))
        body_sg = ctx.model.subgraphs[body]
        # A static value the body hands back unchanged stays out of the carry.
        passthrough = [body_sg.outputs[i] == body_sg.inputs[i] for i in range(len(values))]
        static = {i: v for i, v in enumerate(values) if _is_static(v) and passthrough[i]}
        for i, v in enumerate(values):
            if i not in static and ctx.input(i).dtype in ("resource", "variant", "string"):
                raise UnsupportedOpError(f"{ctx.op}: loop value {i} ({ctx.input(i).dtype}) changes in the body "
                                         "and cannot be carried by an XLA loop")
        carried = [i for i in range(len(values)) if i not in static]

        def full(dynamic: Sequence[Any]) -> list[Any]:
            merged = dict(static)
            merged.update(zip(carried, dynamic))
            return [merged[i] for i in range(len(values))]

        def cond_fn(carry: tuple) -> Any:
            dynamic, variables = carry
            with _variable_scope(ctx, variables):
                result = ctx.run_subgraph(cond, full(dynamic))[0]
            return jnp.reshape(jnp.asarray(result), ()).astype(bool)

        def body_fn(carry: tuple) -> tuple:
            dynamic, variables = carry
            with _variable_scope(ctx, variables) as store:
                results = ctx.run_subgraph(body, full(dynamic))
                new_variables = dict(store)
            new_dynamic = tuple(jnp.asarray(results[i]).astype(d.dtype) for i, d in zip(carried, dynamic))
            return new_dynamic, new_variables

        start = tuple(jnp.asarray(values[i]).astype(_held_dtype(ctx.input(i), values[i])) for i in carried)
        try:
            final, variables = lax.while_loop(cond_fn, body_fn, (start, dict(ctx.variables)))
        except TypeError as e:  # the body's results differ in shape or dtype from its inputs
            raise UnsupportedOpError(f"{ctx.op}: XLA needs loop values whose shapes do not change across "
                                     f"iterations ({e})") from None
        ctx.variables.update(variables)
        return _as_output_dtype(ctx, full(final))


@register("IF")
class If(Op):
    dtypes = ("bool",)

    def _branches(self, ctx: OpContext, n: int) -> tuple[int, int]:
        then_index, else_index = ctx.options.then_subgraph_index, ctx.options.else_subgraph_index
        n_out = len(ctx.op.outputs)
        _check_subgraph(ctx, then_index, "then", n, n_out)
        _check_subgraph(ctx, else_index, "else", n, n_out)
        return then_index, else_index

    def reference(self, ctx: OpContext, cond: Any, *operands: Any) -> list[Any]:
        then_index, else_index = self._branches(ctx, len(operands))
        return ctx.run_subgraph(then_index if _truth(ctx, cond) else else_index, list(operands))

    def lower(self, ctx: OpContext, cond: Any, *operands: Any) -> list[Any]:
        jnp, lax = ctx.xp, ctx.lax
        then_index, else_index = self._branches(ctx, len(operands))
        if _is_static(cond):  # known while tracing: only one branch is traced
            chosen = then_index if _truth(ctx, cond) else else_index
            return _as_output_dtype(ctx, ctx.run_subgraph(chosen, list(operands)))
        traced = [i for i, v in enumerate(operands) if not _is_static(v)]

        def branch(index: int):
            def run(dynamic: tuple, variables: dict) -> tuple:
                merged = list(operands)
                for i, v in zip(traced, dynamic):
                    merged[i] = v
                with _variable_scope(ctx, variables) as store:
                    results = _as_output_dtype(ctx, ctx.run_subgraph(index, merged))
                    return tuple(jnp.asarray(r) for r in results), dict(store)
            return run

        predicate = jnp.reshape(jnp.asarray(cond), ()).astype(bool)
        try:
            results, variables = lax.cond(predicate, branch(then_index), branch(else_index),
                                          tuple(operands[i] for i in traced), dict(ctx.variables))
        except TypeError as e:  # branches disagree on shapes or on which variables exist
            raise UnsupportedOpError(f"{ctx.op}: XLA needs both branches to give the same shapes "
                                     f"and variables ({e})") from None
        ctx.variables.update(variables)
        return list(results)


class _Call(Op):
    dtypes = ANY_DTYPE
    index_option = ""

    def input_dtype(self, op, subgraph):  # a call may take no inputs at all
        return None

    def compute(self, ctx: OpContext, *operands: Any) -> list[Any]:
        index = ctx.options[self.index_option]
        _check_subgraph(ctx, index, "called", len(operands), len(ctx.op.outputs))
        return ctx.run_subgraph(index, list(operands))


@register("CALL")
class Call(_Call):
    index_option = "subgraph"


@register("STABLEHLO_COMPOSITE")
class StablehloComposite(_Call):
    """A named composite (``odml.rms_norm``...) runs its decomposition subgraph."""

    index_option = "decomposition_subgraph_index"
