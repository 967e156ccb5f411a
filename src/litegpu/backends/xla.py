"""The XLA backend: a subgraph traced into one ``jax.jit`` program, compiled once per input shape.

Large float constants (weights) are passed to the program as device-resident
parameters rather than embedded in it: compiling stays fast, and weights are
transferred to the accelerator once.  Small and integer constants stay numpy
values so that shapes, axes and paddings are static for XLA.
Resource variables are threaded through the program as inputs and outputs.

Weights and variables live in an :class:`XlaState` that all signatures of one
compiled model share (TFLite shares resource variables between subgraphs, and
sharing the weights keeps one copy on the device).

Runs return device arrays without waiting (JAX dispatches asynchronously), so
a GPU run's outputs stay on the GPU and feed the next run without a host copy.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import AcceleratorUnavailableError, InvalidArgumentError, ModelExecutionError
from ..ir import Model, Subgraph, Tensor, numpy_dtype
from ..ops import Target
from .graph import STATEFUL_OPS, GraphRunner, OpRange

# Float constants with more elements than this become program parameters.
PARAM_MIN_ELEMENTS = 256
# Ops on constants only (DEQUANTIZE of float16 weights, DENSIFY of sparse ones) run once at load while the
# results fit in this many bytes; past it (a multi-GB float16 LLM) they stay in the program, so host memory
# holds the weights once, in their stored dtype.
FOLD_BUDGET_BYTES = 512 << 20
FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")


@functools.lru_cache(maxsize=1)
def jax_module() -> Any:
    import jax

    # TFLite has int64 and float64 tensors; without x64 jax would silently narrow them.
    jax.config.update("jax_enable_x64", True)
    return jax


def available_platforms() -> set[str]:
    jax = jax_module()
    found = set()
    for platform in ("cpu", "gpu"):
        try:
            if jax.devices(platform):
                found.add(platform)
        except RuntimeError:
            pass
    return found


def _jaxlib_version() -> str:
    import jaxlib

    return getattr(jaxlib, "__version__", "unknown")


def device_for(platform: str) -> Any:
    jax = jax_module()
    try:
        return jax.devices(platform)[0]
    except RuntimeError:
        raise AcceleratorUnavailableError(f"no {platform.upper()} device is visible to JAX on this machine") from None


def is_device_array(value: Any) -> bool:
    """A jax array (without importing jax when nobody has)."""
    return type(value).__module__.startswith("jax") and hasattr(value, "block_until_ready")


def _is_param(t: Tensor) -> bool:
    return t.data is not None and t.dtype in FLOAT_DTYPES and t.num_elements > PARAM_MIN_ELEMENTS


# (storage, compute) dtype of float32 tensors per precision name; ``litegpu.compile.precision``
# documents and validates the names (it sits above this module, so it is not imported here).
_PRECISION_DTYPES = {
    "fp32": (np.dtype(np.float32), np.dtype(np.float32)),
    "fp16": (np.dtype(np.float16), np.dtype(np.float16)),
    "fp16_fp32_accum": (np.dtype(np.float16), np.dtype(np.float32)),
}


class _Precision:
    def __init__(self, precision: Any):
        self.name = str(getattr(precision, "name", precision or "fp32")).lower()
        if self.name not in _PRECISION_DTYPES:
            raise InvalidArgumentError(f"unknown precision {self.name!r}; expected one of "
                                       f"{', '.join(_PRECISION_DTYPES)}")
        self.storage_dtype, self.compute_dtype = _PRECISION_DTYPES[self.name]
        self.is_reduced = self.name != "fp32"


class _PolicyRunner(GraphRunner):
    """Holds float32 tensors in the policy's storage type and computes ops in its compute type."""

    def __init__(self, *args: Any, storage: np.dtype, compute: np.dtype, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.storage, self.compute = storage, compute

    def _value(self, sg: Subgraph, values: dict, index: int) -> Any:
        value = super()._value(sg, values, index)
        if (index >= 0 and self.compute != self.storage and sg.tensors[index].dtype == "float32"
                and getattr(value, "dtype", None) == self.storage):
            return value.astype(self.compute)
        return value

    def _as_output(self, t: Tensor, value: Any, target: Target) -> Any:  # type: ignore[override]
        value = GraphRunner._as_output(t, value, target)
        if t.dtype == "float32" and self.storage != np.float32:
            return value.astype(self.storage)
        return value


class XlaState:
    """Device-resident weights and resource variables of one model on one device."""

    def __init__(self, model: Model, device: Any, storage: np.dtype = np.dtype(np.float32)):
        self.device = device
        self.storage = np.dtype(storage)
        self.param_key: dict[tuple[int, int], str] = {}  # (subgraph, tensor) -> params key
        self.params = self._device_params(model)
        self.folded: dict[tuple[int, int], str] = {}      # (subgraph, tensor) -> params key of a folded op output
        self._fold_constant_ops(model)
        self._drop_unread_params(model)
        self.variables: dict = {}

    def _device_params(self, model: Model) -> dict[str, Any]:
        """One device array per weight buffer: tensors of several subgraphs (a ``prefill`` and a
        ``decode`` signature) that share a buffer share the array.  On the CPU a 64-byte aligned
        float32 buffer of the memory map becomes the device array without a copy."""
        jax = jax_module()
        params: dict[str, Any] = {}
        for sg in model.subgraphs:
            for t in sg.tensors:
                if not _is_param(t):
                    continue
                shared = t.buffer > 0 and t.sparsity is None
                key = f"buffer {t.buffer} {t.dtype}{list(t.shape)}" if shared else f"{sg.index}:{t.index}"
                self.param_key[(sg.index, t.index)] = key
                if key not in params:
                    value = np.ascontiguousarray(t.data)
                    if t.dtype == "float32" and self.storage != np.float32:
                        value = value.astype(self.storage)
                    params[key] = jax.device_put(value, self.device)
        return params


    def _fold_constant_ops(self, model: Model) -> None:
        """Run, once and with the reference kernels, every op whose inputs are all constants and whose
        outputs are big enough to be parameters; their outputs become device parameters, so the program
        reads float32 weights instead of dequantizing float16 (or densifying sparse) weights every run."""
        jax = jax_module()
        runner = GraphRunner(model, Target.REFERENCE)
        spent = 0
        for sg in model.subgraphs:
            known: dict[int, Any] = {}
            for op in sg.operators:
                if op.opcode_name in STATEFUL_OPS or not op.outputs or not all(
                        i < 0 or i in known or sg.tensors[i].data is not None for i in op.inputs):
                    continue
                outs = [sg.tensors[t] for t in op.outputs if t >= 0]
                size = sum(t.num_elements * np.dtype(numpy_dtype(t.dtype)).itemsize
                           for t in outs if t.dtype not in ("resource", "variant", "string"))
                if not outs or any(t.dtype not in FLOAT_DTYPES or t.num_elements <= PARAM_MIN_ELEMENTS
                                   for t in outs) or spent + size > FOLD_BUDGET_BYTES:
                    continue
                try:
                    runner._run_op(sg, op.index, known)
                except Exception:  # not foldable here (the op will report it when the program runs)
                    continue
                spent += size
                for t in outs:
                    value = np.asarray(known[t.index])
                    if t.dtype == "float32" and self.storage != np.float32:
                        value = value.astype(self.storage)
                    key = f"{sg.index}:{t.index}"
                    self.params[key] = jax.device_put(value, self.device)
                    self.folded[(sg.index, t.index)] = key

    def _drop_unread_params(self, model: Model) -> None:
        """Weights that only folded ops read (the float16 originals) need not stay on the device."""
        still_read: set[str] = set(self.folded.values())
        for sg in model.subgraphs:
            read = set(sg.outputs)
            for op in sg.operators:
                if not op.outputs or not all(t < 0 or (sg.index, t) in self.folded for t in op.outputs):
                    read.update(op.inputs)
            still_read.update(self.param_key[(sg.index, t)] for t in read if (sg.index, t) in self.param_key)
        for key in [k for k in self.params if k not in still_read]:
            del self.params[key]
        self.param_key = {where: key for where, key in self.param_key.items() if key in self.params}


def _shape_key(arrays: Sequence[Any]) -> tuple:
    return tuple((tuple(np.shape(a)), str(a.dtype)) for a in arrays)


class XlaBackend:
    """One subgraph of a model compiled by XLA for one device; compiled once per input shape.

    ``precision`` is "fp32" (default), "fp16" or "fp16_fp32_accum" (see
    ``litegpu.compile.precision``).  Pass ``state`` to share weights and
    variables with the other signatures of the same model.
    """

    def __init__(self, model: Model, subgraph_index: int = 0, platform: str = "cpu", dtype_policy: Any = None, *,
                 precision: Any = None, state: XlaState | None = None, cache: Any = None,
                 cache_key: dict | None = None, op_range: OpRange | None = None):
        self.jax = jax_module()
        self.model = model
        self.subgraph_index = subgraph_index
        # With an op range, the program runs only those ops (one partition of a delegation plan).
        self.op_range = op_range
        self.platform = platform
        self.policy = _Precision(precision if precision is not None else dtype_policy)
        self.device = state.device if state is not None else device_for(platform)
        self.target = Target.XLA_GPU if platform == "gpu" else Target.XLA_CPU
        self.state = state if state is not None else XlaState(model, self.device, self.policy.storage_dtype)
        self.compiled_shapes: set[tuple] = set()
        self._shapes: dict[tuple, list[tuple[tuple[int, ...], np.dtype]]] = {}
        self._program = self.jax.jit(self._trace)
        # With a compile cache, compiled executables are serialized to disk and a later process
        # loads them instead of tracing and compiling (see litegpu.compile.cache).
        self.cache = cache
        self.cache_key = dict(cache_key or {})
        self._executables: dict[str, Any] = {}

    @staticmethod
    def storage_dtype(precision: Any) -> np.dtype:
        """How float32 weights are held under ``precision``."""
        return _Precision(precision).storage_dtype

    @property
    def subgraph(self) -> Subgraph:
        return self.model.subgraphs[self.subgraph_index]

    @property
    def params(self) -> dict[str, Any]:
        return self.state.params

    @property
    def variables(self) -> dict:
        return self.state.variables

    @variables.setter
    def variables(self, value: dict) -> None:
        self.state.variables = value

    def _to_storage(self, x: Any, t: Tensor) -> Any:
        return x.astype(self.policy.storage_dtype) if t.dtype == "float32" and self.policy.is_reduced else x

    def _to_boundary(self, y: Any, t: Tensor) -> Any:
        if t.dtype in ("resource", "variant", "string"):
            return y
        dtype = numpy_dtype(t.dtype)
        return y if y.dtype == dtype else y.astype(dtype)

    def _trace(self, params: dict, variables: dict, inputs: list) -> tuple[list, dict]:
        sg = self.subgraph

        def constant(sg_index: int, t: Tensor) -> Any:
            key = self.state.param_key.get((sg_index, t.index))
            value = params.get(key) if key is not None else None
            if value is not None:
                return value
            return self._to_storage(t.data, t)

        precomputed = {where: params[key] for where, key in self.state.folded.items()}
        runner = _PolicyRunner(self.model, self.target, constant=constant, variables=dict(variables),
                               storage=self.policy.storage_dtype, compute=self.policy.compute_dtype,
                               precomputed=precomputed)
        edge_in, edge_out = (sg.inputs, sg.outputs) if self.op_range is None else (
            self.op_range.inputs, self.op_range.outputs)
        inputs = [self._to_storage(x, sg.tensors[t]) for x, t in zip(inputs, edge_in)]
        if self.op_range is None:
            outputs = runner.run_subgraph(self.subgraph_index, inputs)
        else:
            outputs = runner.run_ops(self.op_range, inputs)
        outputs = [self._to_boundary(y, sg.tensors[t]) for y, t in zip(outputs, edge_out)]
        return outputs, runner.variables

    def _place(self, inputs: Sequence[Any]) -> list[Any]:
        """Host arrays go to the program as they are: jit copies them to the device in one C++
        call, which is much cheaper per run than a ``device_put`` per input.  Device arrays on
        another device (a GPU output fed to a CPU program, say) are moved explicitly."""
        placed = []
        for x in inputs:
            if is_device_array(x):
                placed.append(x if self.device in x.devices() else self.jax.device_put(x, self.device))
            else:
                placed.append(np.asarray(x))
        return placed

    def run(self, inputs: Sequence[Any]) -> list[Any]:
        """Run on device arrays or numpy; returns device arrays (dispatch is asynchronous)."""
        args = self._place(inputs)
        self.compiled_shapes.add(_shape_key(args))
        program = self._program if self.cache is None else self._cached_executable(args)
        outputs, self.variables = program(self.params, self.variables, args)
        return outputs

    def _executable_key(self, args: Sequence[Any]) -> str:
        from ..compile.cache import make_key

        def layout(values: Any) -> list:
            return [(tuple(v.shape), str(v.dtype)) for v in values]

        variables = sorted((repr(k), tuple(np.shape(v)), str(v.dtype)) for k, v in self.variables.items())
        return make_key({**self.cache_key, "subgraph": self.subgraph_index, "platform": self.platform,
                         "device_kind": getattr(self.device, "device_kind", self.platform),
                         "precision": repr(self.policy.storage_dtype) + repr(self.policy.compute_dtype),
                         "inputs": layout(args), "variables": variables,
                         "jax": self.jax.__version__, "jaxlib": _jaxlib_version(),
                         **({"ops": list(self.op_range.op_indices)} if self.op_range is not None else {})})

    def _cached_executable(self, args: Sequence[Any]) -> Any:
        key = self._executable_key(args)
        executable = self._executables.get(key)
        if executable is None:
            executable = self._load_executable(key)
        if executable is None:
            executable = self._program.lower(self.params, self.variables, args).compile()
            self._store_executable(key, executable, args)
        self._executables[key] = executable
        return executable

    def _load_executable(self, key: str) -> Any:
        import pickle

        from jax.experimental import serialize_executable

        blob = self.cache.load(key)
        if blob is None:
            return None
        try:
            payload, in_tree, out_tree = pickle.loads(blob)
            return serialize_executable.deserialize_and_load(payload, in_tree, out_tree)
        except Exception as e:  # checksummed, yet not loadable here (e.g. a changed runtime): rebuild it
            self.cache.discard(key, f"cannot be loaded ({type(e).__name__}: {e})")
            return None

    def _store_executable(self, key: str, executable: Any, args: Sequence[Any]) -> None:
        import pickle

        from jax.experimental import serialize_executable

        try:
            payload, in_tree, out_tree = serialize_executable.serialize(executable)
        except Exception:  # some platforms cannot serialize; the in-memory executable still runs
            return
        self.cache.store(key, pickle.dumps((payload, in_tree, out_tree)),
                         {"model": self.cache_key.get("model_token"), "subgraph": self.subgraph_index,
                          "platform": self.platform, "inputs": [tuple(a.shape) for a in args]})

    def output_shapes(self, input_shapes: Sequence[tuple[tuple[int, ...], Any]]) -> list[tuple[tuple[int, ...], np.dtype]]:
        """Output (shape, dtype) for inputs of these (shape, dtype), by tracing only (no compile, no run)."""
        key = tuple((tuple(int(d) for d in s), str(np.dtype(d))) for s, d in input_shapes)
        if key not in self._shapes:
            specs = [self.jax.ShapeDtypeStruct(s, np.dtype(d)) for s, d in key]
            try:
                outputs, _ = self.jax.eval_shape(self._trace, self.params, self.variables, specs)
            except ModelExecutionError:
                raise
            except Exception as e:
                raise ModelExecutionError(f"{self.model.source}: subgraph {self.subgraph_index} cannot take inputs "
                                          f"of shapes {[s for s, _ in key]}: {type(e).__name__}: {e}") from e
            self._shapes[key] = [(tuple(o.shape), np.dtype(o.dtype)) for o in outputs]
        return list(self._shapes[key])

    def reset_variables(self) -> None:
        self.variables = {}
