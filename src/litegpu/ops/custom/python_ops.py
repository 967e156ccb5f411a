"""Custom ops written in Python: ``register_custom_op(name, fn, shape_fn=None, jax_fn=None)``.

``fn`` is a numpy callable: it runs the op on the CPU (the numpy reference
backend, or from inside an XLA CPU program through a host callback when the
output shapes are known before running).  ``jax_fn`` is the same op written
with ``jax.numpy``: with it the op is traced into the compiled program, so it
runs on the GPU too; without it a GPU plan puts the op on the CPU.

Both are called with the op's input arrays (None for an omitted optional input)
and, when they take an ``options`` argument, the op's custom options parsed: a
dict for a FlexBuffer map, the raw bytes otherwise, None when there are none.
They return one array or a tuple of arrays, cast to the model's output types.
``shape_fn(*input_shapes, options=...)`` returns the output shape (or a list of
them) for ops whose output shapes the model leaves dynamic.

Nothing is registered at import: this module only holds the machinery.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...errors import InvalidArgumentError, ModelExecutionError, ModelFormatError
from ...ir import Operator, Subgraph, numpy_dtype
from ...ir.dtypes import DTYPE_NAMES
from .._custom_options import flex_options
from ..registry import Op, OpContext, Target, find, register, unregister_custom


def parsed_options(op: Operator) -> dict | bytes | None:
    """A custom op's options: a FlexBuffer map as a dict, other bytes as bytes, None when absent."""
    data = op.custom_options
    if not data:
        return None
    if op.custom_options_format == "FLEXBUFFERS":
        try:
            return flex_options(op)
        except ModelFormatError:
            pass
    return bytes(data)


@functools.lru_cache(maxsize=None)
def _takes_options(fn: Callable) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature
        return False
    return any(p.name == "options" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def _call(fn: Callable, inputs: Sequence[Any], op: Operator) -> Any:
    return fn(*inputs, options=parsed_options(op)) if _takes_options(fn) else fn(*inputs)


class PythonCustomOp(Op):
    """Base of the ops made by ``register_custom_op``; each registration makes a subclass."""

    dtypes = DTYPE_NAMES
    fn: Callable | None = None
    shape_fn: Callable | None = None
    jax_fn: Callable | None = None

    def unsupported_reason(self, op: Operator, subgraph: Subgraph, target: Target) -> str | None:
        reason = super().unsupported_reason(op, subgraph, target)
        if reason is not None or self.jax_fn is not None:
            return reason
        if target is Target.XLA_GPU:
            return "custom op registered from Python without a GPU lowering (pass jax_fn= to register_custom_op)"
        if target is Target.XLA_CPU and self.shape_fn is None and not _static_outputs(op, subgraph):
            return "custom op registered from Python with dynamic output shapes and no shape_fn"
        return None

    def reference(self, ctx: OpContext, *inputs: Any) -> Any:
        return _call(type(self).fn, inputs, ctx.op)

    def lower(self, ctx: OpContext, *inputs: Any) -> Any:
        if self.jax_fn is not None:
            return _call(type(self).jax_fn, inputs, ctx.op)
        return self._host_callback(ctx, inputs)

    def _host_callback(self, ctx: OpContext, inputs: Sequence[Any]) -> Any:
        """Run ``fn`` on the host from inside an XLA CPU program (static output shapes only)."""
        import jax

        specs = tuple(jax.ShapeDtypeStruct(shape, np.dtype(dtype)) for shape, dtype in self._output_specs(ctx, inputs))
        present = [i for i, x in enumerate(inputs) if x is not None]

        def host(*arrays: np.ndarray) -> tuple:
            full: list[Any] = [None] * len(inputs)
            for i, a in zip(present, arrays):
                full[i] = np.asarray(a)
            out = self.reference(ctx, *full)
            out = out if isinstance(out, (tuple, list)) else (out,)
            return tuple(np.asarray(o).astype(s.dtype).reshape(s.shape) for o, s in zip(out, specs))

        result = jax.pure_callback(host, specs, *[inputs[i] for i in present])
        return result if len(result) > 1 else result[0]

    def _output_specs(self, ctx: OpContext, inputs: Sequence[Any]) -> list[tuple[tuple[int, ...], Any]]:
        outputs = [ctx.output(i) for i in range(len(ctx.op.outputs))]
        dtypes = [np.dtype(numpy_dtype(t.dtype)) for t in outputs]
        if self.shape_fn is None:
            return [(t.shape, d) for t, d in zip(outputs, dtypes)]
        shapes = _call(type(self).shape_fn, [None if x is None else tuple(x.shape) for x in inputs], ctx.op)
        if not shapes or isinstance(shapes[0], (int, np.integer)):
            shapes = [shapes]
        if len(shapes) != len(outputs):
            raise ModelExecutionError(f"{ctx.op}: shape_fn gave {len(shapes)} shapes for {len(outputs)} outputs")
        return [(tuple(int(d) for d in s), d) for s, d in zip(shapes, dtypes)]


def _static_outputs(op: Operator, subgraph: Subgraph) -> bool:
    for t in op.outputs:
        if t >= 0 and (subgraph.tensors[t].is_dynamic or not subgraph.tensors[t].has_rank):
            return False
    return True


def register_custom_op(name: str, fn: Callable, shape_fn: Callable | None = None,
                       jax_fn: Callable | None = None) -> PythonCustomOp:
    """Make the custom op ``name`` (its custom code in the model) runnable; see the module doc.

    Registering a name again replaces the earlier Python registration; names of
    custom ops litegpu implements itself (MediaPipe's, TFLite_Detection_PostProcess) are refused.
    """
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"a custom op name is a non-empty string (the model's custom code), not {name!r}")
    for what, f in (("fn", fn), ("shape_fn", shape_fn), ("jax_fn", jax_fn)):
        if f is not None and not callable(f):
            raise InvalidArgumentError(f"register_custom_op({name!r}): {what} must be callable, got {type(f).__name__}")
    if fn is None:
        raise InvalidArgumentError(f"register_custom_op({name!r}): fn (the numpy implementation) is required")
    existing = find(name, custom=True)
    if existing is not None:
        if not isinstance(existing, PythonCustomOp):
            raise InvalidArgumentError(f"custom op {name!r} is implemented by litegpu itself and cannot be replaced")
        unregister_custom(name)
    attrs = {"fn": staticmethod(fn), "shape_fn": staticmethod(shape_fn) if shape_fn else None,
             "jax_fn": staticmethod(jax_fn) if jax_fn else None, "__doc__": f"Python custom op {name}"}
    cls = type(f"PythonCustomOp[{name}]", (PythonCustomOp,), attrs)
    register(name, custom=True)(cls)
    return find(name, custom=True)  # type: ignore[return-value]


def unregister_custom_op(name: str) -> None:
    """Forget a custom op registered from Python (others are left alone)."""
    if isinstance(find(name, custom=True), PythonCustomOp):
        unregister_custom(name)
