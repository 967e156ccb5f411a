"""Batched runs of batch-1 models: N examples through one signature as one XLA program.

Most ``.tflite`` files are exported with batch 1, and their graphs often hard-code it (a RESHAPE to
``[1, 1024]``), so resizing the input does not work.  litegpu owns the lowering: the signature's traced
function is ``jax.vmap``-ed over an example axis, which turns any batch-1 program into a true batched one,
whatever its reshapes.

    batched = model.batched()                 # CompiledModel -> BatchedModel
    probs = batched(images)                   # images: [N, 224, 224, 3] for a [1, 224, 224, 3] input

Shapes: an input whose example shape starts with 1 takes ``[N, ...rest]`` (the 1 is the example axis);
any other input takes ``[N, *example_shape]``.  Outputs follow the same rule.  Each new N compiles once
(cached per N).  Batched runs use the XLA engine (the exact kernels: results equal per-example runs, floats
to rounding, integers exactly), on the model's accelerator.

Data parallel: ``model.batched(devices=...)`` (``"all"``, a count, device indices or JAX devices of the
model's platform) splits the examples evenly across the devices (``NamedSharding`` over a one-axis mesh; N
must divide evenly), with the weights replicated on each; the outputs come back in order.  Inputs that are
already JAX arrays, sharded over those devices or not, are passed as they are, never gathered to the host.

Models whose examples are not independent refuse with ``BatchingError`` naming the op: resource variables
and variable tensors (state carried between runs), ops whose output shape depends on the data (NMS, WHERE,
UNIQUE, ...) and Python custom ops (host callbacks).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError, LiteGpuError, TensorBufferError
from ..ir import Model, numpy_dtype
from ..ops import Target

# Ops whose examples could not be computed independently in one program.
_STATE_OPS = frozenset({"VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE", "CALL_ONCE", "RANDOM_UNIFORM",
                        "RANDOM_STANDARD_NORMAL", "MULTINOMIAL", "HASHTABLE", "HASHTABLE_FIND", "HASHTABLE_IMPORT",
                        "HASHTABLE_SIZE", "STABLEHLO_RNG_BIT_GENERATOR"})


class BatchingError(LiteGpuError, ValueError):
    """The model cannot be batched (state, data-dependent shapes, host callbacks), or the batch is malformed."""


def batching_refusal(model: Model, subgraph: int) -> str | None:
    """Why ``subgraph`` (and what it calls) cannot be vmapped, naming the first op; None when it can."""
    from ..compile.plan import called_subgraphs
    from ..ops import lookup
    from ..ops.custom.python_ops import PythonCustomOp

    seen: set[int] = set()
    pending = [subgraph]
    while pending:
        index = pending.pop()
        if index in seen:
            continue
        seen.add(index)
        sg = model.subgraphs[index]
        variable = next((t for t in sg.tensors if t.is_variable), None)
        if variable is not None:
            return f"variable tensor {variable.name!r} of subgraph {index} carries state between runs"
        for op in sg.operators:
            where = f"op {op} of subgraph {index}"
            if op.opcode_name in _STATE_OPS:
                return f"{where} reads or writes state kept between runs"
            impl = lookup(op)
            if isinstance(impl, PythonCustomOp):
                return f"{where} is a Python custom op (a host callback)"
            reason = impl.unsupported_reason(op, sg, Target.XLA_CPU)
            if reason is not None:
                return f"{where} cannot be traced by XLA: {reason}"
            pending.extend(called_subgraphs(model, op))
    return None


def resolve_devices(devices: Any, platform: str) -> list[Any] | None:
    """The JAX devices named by ``devices`` ("all", a count, indices or devices); None for one device."""
    if devices is None:
        return None
    from ..backends.device_arrays import jax_module

    available = jax_module().devices(platform)
    if isinstance(devices, str):
        if devices != "all":
            raise InvalidArgumentError(f"devices={devices!r}: use 'all', a count, device indices or JAX devices")
        return list(available)
    if isinstance(devices, int) and not isinstance(devices, bool):
        if not 1 <= devices <= len(available):
            raise InvalidArgumentError(f"devices={devices}: this machine has {len(available)} {platform} device(s)")
        return list(available[:devices])
    chosen = []
    for d in devices:
        if isinstance(d, int) and not isinstance(d, bool):
            if not 0 <= d < len(available):
                raise InvalidArgumentError(f"device index {d} is out of range: {len(available)} {platform} device(s)")
            chosen.append(available[d])
        elif getattr(d, "platform", None) == available[0].platform:
            chosen.append(d)
        else:
            raise InvalidArgumentError(f"{d!r} is not a {platform} device index or JAX device")
    if not chosen or len(set(chosen)) != len(chosen):
        raise InvalidArgumentError(f"devices={devices!r}: name each device once")
    return chosen


class BatchedModel:
    """N examples per run through a batch-1 ``CompiledModel`` (see the module doc).  Thread-safe."""

    def __init__(self, compiled: Any, devices: Any = None):
        self._compiled = compiled
        self._programs: dict[tuple, Any] = {}
        self._lock = threading.Lock()
        self._backends: dict[int, Any] = {}
        self._xla: Any = None
        self.devices = resolve_devices(devices, compiled._platform)
        self._replicated: dict[int, Any] = {}

    def _shardings(self) -> tuple[Any, Any] | None:
        """(replicated, split along the example axis) over the devices, or None on one device."""
        if self.devices is None:
            return None
        from jax.sharding import Mesh, NamedSharding, PartitionSpec

        mesh = Mesh(np.array(self.devices), ("examples",))
        return NamedSharding(mesh, PartitionSpec()), NamedSharding(mesh, PartitionSpec("examples"))

    def _params(self, signature: Any, backend: Any) -> Any:
        """The weights, replicated once on every device in data parallel."""
        shardings = self._shardings()
        if shardings is None:
            return backend.params
        if signature.index not in self._replicated:
            self._replicated[signature.index] = backend.jax.device_put(backend.params, shardings[0])
        return self._replicated[signature.index]

    # ---- what runs -------------------------------------------------------------------------
    def _backend(self, signature: Any) -> Any:
        if signature.index not in self._backends:
            refusal = batching_refusal(self._compiled._xla_model, signature.subgraph)
            if refusal is not None:
                raise BatchingError(f"{self._compiled.model.source}: signature {signature.key!r} cannot be batched: "
                                    f"{refusal}")
            self._backends[signature.index] = self._engine().compile_subgraph(
                self._compiled._xla_model, signature.subgraph, self._engine().settings)
        return self._backends[signature.index]

    def _engine(self) -> Any:
        """The exact kernels' engine on the model's device, holding the batched programs' own copy of the weights
        (made once)."""
        if self._xla is None:
            from ..backends import registry
            from ..backends.engine import EngineSettings

            compiled = self._compiled
            self._xla = registry.engine(registry.name_of(Target.XLA_CPU),
                                        EngineSettings(precision=compiled.options.precision or "fp32"),
                                        device=compiled.environment.device,
                                        official_float_order=compiled._official_float_order).placed(
                compiled._platform, Target.XLA_GPU if compiled._platform == "gpu" else Target.XLA_CPU)
        return self._xla

    def _program(self, backend: Any, key: tuple) -> Any:
        if key not in self._programs:
            jax = backend.jax

            def one_example(params: dict, inputs: list) -> list:
                outputs, _ = backend._trace(params, {}, inputs)
                return outputs

            program = jax.vmap(one_example, in_axes=(None, 0))
            shardings = self._shardings()
            if shardings is None:
                self._programs[key] = jax.jit(program)
            else:
                replicated, split = shardings
                self._programs[key] = jax.jit(program, in_shardings=(replicated, split), out_shardings=split)
        return self._programs[key]

    # ---- running ---------------------------------------------------------------------------
    def run(self, inputs: Mapping[str, Any] | Sequence[Any], signature_key: str | int = 0) -> dict[str, np.ndarray]:
        """Inputs by name (or in signature order) with a leading example axis; outputs by name, likewise."""
        compiled = self._compiled
        s = compiled._signature(signature_key)
        if isinstance(inputs, Mapping):
            unknown = [k for k in inputs if k not in s.input_names]
            missing = [n for n in s.input_names if n not in inputs]
            if unknown or missing:
                raise InvalidArgumentError(f"signature {s.key!r} takes inputs {s.input_names}; unknown {unknown}, "
                                           f"missing {missing}")
            inputs = [inputs[n] for n in s.input_names]
        if not isinstance(inputs, Sequence) or len(inputs) != len(s.inputs):
            raise InvalidArgumentError(f"signature {s.key!r} takes {len(s.inputs)} input(s) {s.input_names}")
        sg = compiled._xla_model.subgraphs[s.subgraph]
        examples, count = [], None
        for (name, t), value in zip(s.inputs, inputs):
            array, n = self._as_examples(name, sg.tensors[t], value)
            if count is not None and n != count:
                raise BatchingError(f"input {name!r} holds {n} examples, an earlier input {count}")
            count = n
            examples.append((t, array))
        by_tensor = dict(examples)
        ordered = [by_tensor[t] for t in sg.inputs]
        if self.devices is not None and count % len(self.devices):
            raise BatchingError(f"{count} examples do not split evenly over {len(self.devices)} devices")
        with self._lock:
            backend = self._backend(s)
            key = (s.index, tuple((tuple(a.shape), np.dtype(a.dtype).str) for a in ordered))
            program = self._program(backend, key)
            params = self._params(s, backend)
        results = program(params, ordered)
        produced = dict(zip(sg.outputs, results))
        return {name: self._from_examples(sg.tensors[t], np.asarray(produced[t])) for name, t in s.outputs}

    def __call__(self, *inputs: Any, signature_key: str | int = 0, **named: Any) -> Any:
        if inputs and named:
            raise InvalidArgumentError("pass the inputs either by position or by name, not both")
        result = self.run(named if named else list(inputs), signature_key)
        values = tuple(result.values())
        return values[0] if len(values) == 1 else values

    @staticmethod
    def _as_examples(name: str, t: Any, value: Any) -> tuple[Any, int]:
        """``value`` as [N, *example_shape] (a leading 1 of the example shape is the example axis); JAX arrays
        stay where they are."""
        from ..backends.device_arrays import is_device_array

        array = value if is_device_array(value) else np.asarray(value)
        dtype = np.dtype(numpy_dtype(t.dtype))
        if np.dtype(array.dtype) != dtype:
            raise TensorBufferError(f"input {name!r} is {dtype.name}; got {np.dtype(array.dtype).name}")
        example = tuple(t.shape)
        if tuple(array.shape[1:]) == example and array.ndim == len(example) + 1:
            return array, array.shape[0]
        if example and example[0] == 1 and array.ndim == len(example) and tuple(array.shape[1:]) == example[1:]:
            return array.reshape((array.shape[0],) + example), array.shape[0]
        wanted = f"[N, {', '.join(map(str, example[1:]))}]" if example and example[0] == 1 else f"[N, {list(example)}]"
        raise BatchingError(f"input {name!r}: one example is {list(example)}, so a batch is {wanted}; got "
                            f"{list(array.shape)}")

    @staticmethod
    def _from_examples(t: Any, array: np.ndarray) -> np.ndarray:
        example = tuple(t.shape)
        if example and example[0] == 1 and array.shape[1:2] == (1,):
            return array.reshape((array.shape[0],) + array.shape[2:])
        return array


__all__ = ["BatchedModel", "BatchingError", "batching_refusal", "resolve_devices"]
