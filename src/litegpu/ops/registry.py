"""The op registry: one class per op, holding everything about it.

An op module defines a subclass of :class:`Op` and registers it::

    @register("ADD")
    class Add(Op):
        dtypes = ("float32", "int32", "int64")

        def compute(self, ctx, x, y):          # used by both backends
            return fused_activation(ctx.xp, x + y, ctx.options.fused_activation_function)

``compute`` is written against ``ctx.xp`` (numpy for the reference backend,
``jax.numpy`` inside the XLA backend), so one body serves both where the
semantics allow.  An op overrides ``reference`` (exact numpy semantics) and/or
``lower`` (the fast XLA lowering, with ``ctx.lax`` available) when they must
differ: integer paths, lowerings chosen by measurement, control flow.
``supports`` says whether an accelerator can run one concrete op (dtypes,
options, shapes), returning ``None`` or the reason it cannot.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ..errors import UnsupportedOpError

if TYPE_CHECKING:  # annotations only: a warm start, which imports the op targets, does not load the IR's classes
    from ..ir import Model, Operator, Options, Subgraph, Tensor


class Target(enum.Enum):
    """What an op is being run by: exact numpy, XLA on a CPU or GPU, or OpenVINO / the official
    interpreter on the CPU (which convert ops themselves: ops have no kernels for them, their backend
    modules ask the engine)."""

    REFERENCE = "reference"
    XLA_CPU = "xla_cpu"
    XLA_GPU = "xla_gpu"
    OPENVINO = "openvino"
    LITERT = "litert"  # the official interpreter (XNNPACK), given whole models: ``backends.litert``
    IREE = "iree"      # GPU partitions compiled by IREE for Vulkan / Metal (``backends.iree``), traced with XLA_GPU's rules

    @property
    def is_xla(self) -> bool:
        return self in (Target.XLA_CPU, Target.XLA_GPU)


class OpContext:
    """What a kernel may know about the op it runs: the IR, and the backend's services."""

    def __init__(self, op: Operator, subgraph: Subgraph, model: Model, backend: Any, target: Target):
        self.op = op
        self.subgraph = subgraph
        self.model = model
        self.backend = backend
        self.target = target
        if target.is_xla:
            import jax.numpy as jnp
            from jax import lax

            self.xp, self.lax = jnp, lax
        else:
            self.xp, self.lax = np, None

    @property
    def options(self) -> Options:
        return self.op.options

    @property
    def official_float_order(self) -> bool:
        """Whether float kernels sum and round in the builtin kernels' order, bit for bit (in-order BATCH_MATMUL,
        Eigen's MEAN, RSQRT as 1/sqrt): the numpy reference always; XLA on the CPU where the builtin kernels were
        asked for (``CpuKernelMode.BUILTIN``: its backend says ``official_float_order``).  Elsewhere the faster
        orders of XLA, an ulp or so away (harmless alone; an LLM's hybrid layers can turn an ulp into a step)."""
        if self.target is Target.REFERENCE:
            return True
        return self.target is Target.XLA_CPU and bool(getattr(self.backend, "official_float_order", False))

    @property
    def builtin_kernels(self) -> bool:
        """Whether the op stands for the official builtin kernels' optimized code where it departs from their
        reference kernels (DEQUANTIZE's SIMD blocks): XLA on the CPU in ``CpuKernelMode.BUILTIN`` and what that
        mode folds at load (their backends say ``official_float_order``).  The numpy reference otherwise follows
        the reference kernels (``OpResolverType.BUILTIN_REF``)."""
        return self.target in (Target.XLA_CPU, Target.REFERENCE) and \
            bool(getattr(self.backend, "official_float_order", False))

    def input(self, i: int) -> Tensor | None:
        """IR tensor of input ``i`` (None when the optional input is omitted)."""
        if i >= len(self.op.inputs) or self.op.inputs[i] < 0:
            return None
        return self.subgraph.tensors[self.op.inputs[i]]

    def output(self, i: int) -> Tensor:
        return self.subgraph.tensors[self.op.outputs[i]]

    @property
    def num_inputs(self) -> int:
        return len(self.op.inputs)

    def constant(self, i: int) -> np.ndarray | None:
        """The values of input ``i`` if it is a constant in the model (for shapes, axes...)."""
        t = self.input(i)
        return None if t is None else t.data

    def static(self, value: Any) -> np.ndarray:
        """A value needed at trace time (a shape, an axis): a numpy array or an error."""
        if isinstance(value, np.ndarray):
            return value
        try:
            return np.asarray(value)
        except Exception:  # a jax tracer: the value is only known when the model runs
            raise UnsupportedOpError(f"{self.op}: needs a value known before running (a constant or a "
                                     "shape computation), but it depends on the model's inputs") from None

    def run_subgraph(self, index: int, inputs: Sequence[Any]) -> list[Any]:
        """Run another subgraph of the model (WHILE, IF, CALL, composites)."""
        return self.backend.run_subgraph(index, list(inputs))

    def run_model(self, model: Model, index: int, inputs: Sequence[Any]) -> list[Any]:
        """Run subgraph ``index`` of another model with this op's target (circle's RUN_MODEL)."""
        return self.backend.run_model(model, index, list(inputs))

    @property
    def variables(self) -> dict:
        """Resource-variable storage of the running model (VAR_HANDLE / READ_VARIABLE / ASSIGN_VARIABLE)."""
        return self.backend.variables


class Op:
    """Base class of every op; subclasses are singletons in the registry."""

    name: ClassVar[str] = ""
    # dtypes of the op's (first) input for which it is implemented on any backend
    dtypes: ClassVar[tuple[str, ...]] = ("float32",)
    # Ops whose output shape depends on input values run on CPU only.
    data_dependent_shape: ClassVar[bool] = False
    # False for ops that cannot be traced by XLA at all (strings, hash tables).
    xla: ClassVar[bool] = True

    def compute(self, ctx: OpContext, *inputs: Any) -> Any:
        raise NotImplementedError(f"{self.name} defines neither compute nor reference/lower")

    def reference(self, ctx: OpContext, *inputs: Any) -> Any:
        return self.compute(ctx, *inputs)

    def lower(self, ctx: OpContext, *inputs: Any) -> Any:
        return self.compute(ctx, *inputs)

    def builtin_lowering(self, op: Operator, subgraph: Subgraph, g: Any) -> bool:
        """Emit ``op`` as TFLite builtin ops, for the engines that read TFLite only (the official interpreter,
        OpenVINO): circle-only ops define it where builtin ops compute the same thing in float32.  ``g`` is the
        rewriter's emitter (``compile.circle_lowering``): ``g.constant(values)`` and ``g.op(name, inputs, shape,
        output=None, **options)`` return tensor indices, the last op writing ``op``'s own output.  Return False,
        having emitted nothing, where this op instance has no lowering (the op then stays as it is)."""
        return False

    def input_dtype(self, op: Operator, subgraph: Subgraph) -> str | None:
        for i in op.inputs:
            if i >= 0:
                return subgraph.tensors[i].dtype
        return subgraph.tensors[op.outputs[0]].dtype if op.outputs else None

    def unsupported_reason(self, op: Operator, subgraph: Subgraph, target: Target) -> str | None:
        """None if ``target`` can run this op instance, else a short reason."""
        dtype = self.input_dtype(op, subgraph)
        if dtype is not None and dtype not in self.dtypes:
            return f"input type {dtype} is not supported (supported: {', '.join(self.dtypes)})"
        if target.is_xla and not self.xla:
            return "has no XLA lowering"
        if target is Target.XLA_GPU and self.data_dependent_shape:
            return "output shape depends on data"
        return None


_BUILTIN: dict[str, Op] = {}
_CUSTOM: dict[str, Op] = {}
# Ops litegpu knows and deliberately does not run, with the reason (``refuse``): a model using them is refused
# with that reason rather than with a bare "not implemented".
_REFUSED: dict[str, str] = {}


def register(name: str, *, custom: bool = False) -> Callable[[type[Op]], type[Op]]:
    def decorate(cls: type[Op]) -> type[Op]:
        table = _CUSTOM if custom else _BUILTIN
        if name in table:
            raise RuntimeError(f"op {name} is registered twice")
        instance = cls()
        instance.name = name
        table[name] = instance
        return cls
    return decorate


def refuse(name: str, reason: str) -> None:
    """Record why builtin op ``name`` is not implemented (from the op module that documents the finding)."""
    if name in _BUILTIN or name in _REFUSED:
        raise RuntimeError(f"op {name} is registered or refused twice")
    _REFUSED[name] = reason


def refusal(name: str) -> str | None:
    """Why builtin op ``name`` is deliberately not implemented (None: no recorded reason)."""
    _ensure_loaded()
    return _REFUSED.get(name)


def _ensure_loaded() -> None:
    from . import _catalog  # noqa: F401  (imports every op module once)


def lookup(op: Operator) -> Op:
    _ensure_loaded()
    impl = (_CUSTOM if op.is_custom else _BUILTIN).get(op.opcode_name)
    if impl is None:
        kind = "custom op" if op.is_custom else "op"
        why = None if op.is_custom else _REFUSED.get(op.opcode_name)
        raise UnsupportedOpError(f"{kind} {op.opcode_name} (#{op.index}) is not implemented by litegpu"
                                 + (f": {why}" if why else ""))
    return impl


def find(name: str, custom: bool = False) -> Op | None:
    _ensure_loaded()
    return (_CUSTOM if custom else _BUILTIN).get(name)


def builtin_ops() -> dict[str, Op]:
    _ensure_loaded()
    return dict(_BUILTIN)


def custom_ops() -> dict[str, Op]:
    _ensure_loaded()
    return dict(_CUSTOM)


def unregister_custom(name: str) -> None:
    _CUSTOM.pop(name, None)
