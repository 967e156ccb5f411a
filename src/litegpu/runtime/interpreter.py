"""The classic TFLite Interpreter API, with the methods and semantics of ``ai_edge_litert.interpreter``.

    interpreter = Interpreter(model_path="m.tflite")
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    y = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])

Kernels: ``OpResolverType.AUTO``/``BUILTIN`` run the XLA CPU program,
``BUILTIN_REF``/``BUILTIN_WITHOUT_DEFAULT_DELEGATES`` the numpy reference
backend (TFLite's builtin reference semantics).  With
``experimental_preserve_all_tensors=True`` the reference backend keeps every
intermediate tensor, readable through ``get_tensor``: run the official
interpreter and this one side by side to find the first op that differs.
Errors are ``ValueError``/``RuntimeError`` subclasses, as in the official package.
Compiled programs go to the compile cache (``backends.cache``: on by default, ``LITEGPU_CACHE_DIR=""`` turns it
off), so a second process loads them instead of compiling again.
"""

from __future__ import annotations

import enum
import threading
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import ir
from ..compile import CPU, plan
from ..compile.rewrites import rewrite_for_xla
from ..errors import InvalidArgumentError, ModelExecutionError, SignatureError
from ..ir import numpy_dtype
from ..ops import Target
from .model import read


class OpResolverType(enum.Enum):
    AUTO = 0
    BUILTIN = 1
    BUILTIN_REF = 2
    BUILTIN_WITHOUT_DEFAULT_DELEGATES = 3


_REFERENCE_RESOLVERS = {"BUILTIN_REF", "BUILTIN_WITHOUT_DEFAULT_DELEGATES"}


def _resolver_name(value: Any) -> str:
    """Our OpResolverType, the official one (same member names) or its name."""
    name = getattr(value, "name", value)
    if name not in OpResolverType.__members__:
        raise InvalidArgumentError(f"Unrecognized passed in op resolver type: {value}")
    return str(name)


def _type_name(dtype: np.dtype) -> str:
    """TFLite's spelling in error messages (FLOAT32, INT8, BOOL...)."""
    return {"bool": "BOOL"}.get(dtype.name, dtype.name.upper())


class Interpreter:
    """Interpreter for TFLite models (``ai_edge_litert.interpreter.Interpreter``'s API).

    Not thread-safe, like the official class: use one per thread, or a CompiledModel.
    """

    def __init__(self, model_path: Any = None, model_content: bytes | None = None,
                 experimental_delegates: Any = None, num_threads: int | None = None,
                 experimental_op_resolver_type: Any = OpResolverType.AUTO,
                 experimental_preserve_all_tensors: bool = False, **experimental: Any):
        resolver = _resolver_name(experimental_op_resolver_type)
        if num_threads is not None:
            if not isinstance(num_threads, int):
                raise InvalidArgumentError("type of num_threads should be int")
            if num_threads < 1:
                raise InvalidArgumentError("num_threads should >= 1")
        if model_path and model_content:
            raise InvalidArgumentError("Can't both provide `model_path` and `model_content`")
        if not model_path and not model_content:
            raise InvalidArgumentError("`model_path` or `model_content` must be specified.")
        if experimental_delegates:
            warnings.warn("litegpu ignores experimental_delegates (TFLite delegate libraries); use "
                          "litegpu.CompiledModel with HardwareAccelerator.GPU to run on a GPU", stacklevel=2)
        self._model: ir.Model = read(model_path if model_path else model_content)
        self._content = None if model_path else model_content  # hashed for the cache key, never written out
        self._preserve = bool(experimental_preserve_all_tensors)
        self._use_reference = resolver in _REFERENCE_RESOLVERS or self._preserve
        # XLA runs the model as CompiledModel's CPU plan sees it (rewritten for tracing: e.g. a WHILE-loop RNN's
        # run-time SLICEs become DYNAMIC_UPDATE_SLICE), so both APIs run the same models on the same backend.
        # The rewrite keeps tensor indices, so every index this API hands out still names the same tensor.
        self._xla_model: ir.Model = self._model if self._use_reference else rewrite_for_xla(self._model)
        # the Interpreter's backend is XLA or numpy, so it asks for the exact kernels' plan (not OpenVINO's)
        if not self._use_reference and plan(self._xla_model, CPU, warn=True,
                                            cpu_kernels="builtin").target is Target.REFERENCE:
            self._use_reference = True
        self._lock = threading.RLock()
        # the engines that run it, by the rules of their kernels (the exact XLA kernels, or numpy), each holding
        # the model's weights and variables, and their programs by subgraph
        self._engines: dict[Target, Any] = {}
        self._programs: dict[tuple[Target, int], Any] = {}
        self._observed: dict[tuple[int, int], Any] = {}  # the tensors a numpy run computed (preserve_all_tensors)
        main = self._model.subgraphs[0]
        self._input_shapes: dict[int, tuple[int, ...]] = {t: main.tensors[t].shape for t in main.inputs}
        self._values: dict[tuple[int, int], np.ndarray] = {}
        self._allocated = False
        self._signature_defs = self.get_signature_list()

    # ---- backends ---------------------------------------------------------------------------
    def _program(self, subgraph: int, rules: Target) -> Any:
        """The program of ``subgraph`` on the engine of ``rules`` (XLA's exact kernels, or numpy), made once."""
        key = (rules, subgraph)
        if key not in self._programs:
            from ..backends import registry
            from ..backends.engine import EngineSettings

            if rules not in self._engines:

                # the builtin kernels, as the official Interpreter's default: their float order too
                self._engines[rules] = registry.engine(
                    registry.name_of(rules), official_float_order=True,
                    observe=self._observe if rules is Target.REFERENCE and self._preserve else None)
            numpy = rules is Target.REFERENCE
            cache, cache_key = (None, {}) if numpy else self._compile_cache()
            self._programs[key] = self._engines[rules].compile_subgraph(
                self._model if numpy else self._xla_model, subgraph, EngineSettings(), cache, cache_key)
        return self._programs[key]

    def _observe(self, subgraph: int, tensor: int, value: Any) -> None:
        self._observed[(subgraph, tensor)] = value

    def _compile_cache(self) -> tuple[Any, dict]:
        """The default compile cache and this model's key in it (the Interpreter's programs kept apart from
        CompiledModel's); (None, {}) where the cache is off."""
        from ..backends.cache import fingerprint, open_default_cache
        from .compiled_model import model_cache_key

        cache = open_default_cache()
        if cache is None:
            return None, {}
        digest = fingerprint(self._content) if self._content is not None else None
        return cache, {**model_cache_key(self._model, digest), "api": "Interpreter", "float_order": "builtin kernels"}

    def _execute(self, subgraph: int, inputs: list[np.ndarray]) -> list[np.ndarray]:
        with self._lock:
            if self._use_reference:
                self._observed.clear()
                outputs = self._program(subgraph, Target.REFERENCE).run(inputs)
                for (sg, t), value in self._observed.items():
                    self._values[(sg, t)] = np.asarray(value)
                return [np.asarray(y) for y in outputs]
            return [np.asarray(y) for y in self._program(subgraph, Target.XLA_CPU).run(inputs)]

    def _output_shapes(self) -> list[tuple[int, ...]]:
        main = self._model.subgraphs[0]
        declared = [main.tensors[t].shape for t in main.inputs]
        current = [self._input_shapes[t] for t in main.inputs]
        if current != declared:
            try:
                # shape inference traces the exact kernels' program, it never runs it
                shapes = self._program(0, Target.XLA_CPU).output_shapes(
                    [(s, numpy_dtype(main.tensors[t].dtype)) for s, t in zip(current, main.inputs)])
                return [s for s, _ in shapes]
            except Exception:
                pass  # the shapes will be known after invoke
        return [main.tensors[t].shape for t in main.outputs]

    # ---- tensors ----------------------------------------------------------------------------
    def allocate_tensors(self) -> None:
        main = self._model.subgraphs[0]
        for t in main.inputs:
            shape, dtype = self._input_shapes[t], numpy_dtype(main.tensors[t].dtype)
            old = self._values.get((0, t))
            if old is None or old.shape != shape:
                self._values[(0, t)] = np.zeros(shape, dtype)
        for t, shape in zip(main.outputs, self._output_shapes()):
            old = self._values.get((0, t))
            if old is None or old.shape != tuple(shape):
                self._values[(0, t)] = np.zeros(shape, numpy_dtype(main.tensors[t].dtype))
        self._allocated = True

    def _subgraph(self, subgraph_index: int) -> ir.Subgraph:
        n = len(self._model.subgraphs)
        if not isinstance(subgraph_index, (int, np.integer)) or not 0 <= int(subgraph_index) < n:
            raise InvalidArgumentError(f"subgraph_index is out of range: {subgraph_index} for the model, "
                                       f"which has {n} subgraphs.")
        return self._model.subgraphs[int(subgraph_index)]

    def _tensor(self, tensor_index: Any, subgraph_index: int = 0) -> ir.Tensor:
        sg = self._subgraph(subgraph_index)
        try:
            index = int(tensor_index)
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"a tensor index is an int, got {tensor_index!r}") from None
        if not 0 <= index < len(sg.tensors):
            raise InvalidArgumentError(f"Invalid tensor index {index} exceeds max tensor index {len(sg.tensors)}")
        return sg.tensors[index]

    def _shape_of(self, t: ir.Tensor, subgraph_index: int) -> tuple[int, ...]:
        if subgraph_index == 0 and t.index in self._input_shapes:
            return tuple(self._input_shapes[t.index])
        value = self._values.get((subgraph_index, t.index))
        return tuple(value.shape) if value is not None else tuple(t.shape)

    def _get_tensor_details(self, tensor_index: int, subgraph_index: int) -> dict[str, Any]:
        t = self._tensor(tensor_index, subgraph_index)
        q = t.quantization
        scales = np.asarray(q.scale if q else (), np.float32)
        zero_points = np.asarray(q.zero_point if q else (), np.int32)
        per_tensor = (float(scales[0]), int(zero_points[0]) if zero_points.size else 0) if scales.size == 1 else (0.0, 0)
        block_size = 0
        if q is not None and q.details is not None:
            block_size = int(q.details.get("block_size", 0) or 0)
        shape = self._shape_of(t, subgraph_index)
        shape_signature = t.shape_signature if t.shape_signature is not None else t.shape
        if not t.is_dynamic and shape != tuple(t.shape):
            shape_signature = shape  # the official runtime reports a static tensor's new shape here too (measured)
        return {
            "name": t.name,
            "index": t.index,
            "shape": np.array(shape, np.int32),
            "shape_signature": np.array(shape_signature, np.int32),
            "dtype": np.dtype(numpy_dtype(t.dtype)).type if t.dtype not in ("string", "resource", "variant")
            else np.object_,
            "quantization": per_tensor,
            "quantization_parameters": {
                "scales": scales, "zero_points": zero_points,
                "quantized_dimension": int(q.quantized_dimension) if q else 0, "block_size": block_size,
            },
            "sparsity_parameters": {},
        }

    def num_subgraphs(self) -> int:
        return len(self._model.subgraphs)

    def get_tensor_details(self, subgraph_index: int = 0) -> list[dict[str, Any]]:
        sg = self._subgraph(subgraph_index)
        return [self._get_tensor_details(t.index, sg.index) for t in sg.tensors]

    def get_input_details(self) -> list[dict[str, Any]]:
        return [self._get_tensor_details(t, 0) for t in self._model.subgraphs[0].inputs]

    def get_output_details(self) -> list[dict[str, Any]]:
        return [self._get_tensor_details(t, 0) for t in self._model.subgraphs[0].outputs]

    def set_tensor(self, tensor_index: int, value: Any) -> None:
        """Copy ``value`` into a tensor; its dtype and shape must be the tensor's (no conversion)."""
        t = self._tensor(tensor_index, 0)
        if not self._allocated:
            raise InvalidArgumentError("Cannot set tensor: Tensor is unallocated. Try calling allocate_tensors() first")
        value = np.asarray(value)
        expected = np.dtype(numpy_dtype(t.dtype))
        if value.dtype != expected:
            raise InvalidArgumentError(f"Cannot set tensor: Got value of type {_type_name(value.dtype)} but expected "
                                       f"type {_type_name(expected)} for input {t.index}, name: {t.name} ")
        shape = self._shape_of(t, 0)
        if value.ndim != len(shape):
            raise InvalidArgumentError(f"Cannot set tensor: Dimension mismatch. Got {value.ndim} but expected "
                                       f"{len(shape)} for input {t.index}.")
        for axis, (got, want) in enumerate(zip(value.shape, shape)):
            if got != want:
                raise InvalidArgumentError(f"Cannot set tensor: Dimension mismatch. Got {got} but expected {want} "
                                           f"for dimension {axis} of input {t.index}.")
        current = self._values.get((0, t.index))
        if current is not None and current.shape == value.shape and current.flags.writeable:
            np.copyto(current, value)  # keeps arrays handed out by tensor() valid
        else:
            self._values[(0, t.index)] = np.array(value, copy=True)

    def resize_tensor_input(self, input_index: int, tensor_size: Any, strict: bool = False) -> None:
        """Resize input ``input_index`` (a tensor index); call allocate_tensors() before setting it."""
        main = self._model.subgraphs[0]
        if int(input_index) not in self._input_shapes:
            raise InvalidArgumentError(f"tensor {input_index} is not an input of the model; inputs are "
                                       f"{list(main.inputs)}")
        t = main.tensors[int(input_index)]
        try:
            dims = [int(d) for d in np.asarray(tensor_size).reshape(-1)]
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"a tensor size is a sequence of ints, got {tensor_size!r}") from None
        if any(d < 0 for d in dims):
            raise InvalidArgumentError(f"ResizeInputTensor: dimensions of {t.name!r} must be >= 0, got {dims}")
        if strict:
            signature = t.shape_signature if t.shape_signature is not None else t.shape
            if len(dims) != len(signature) or any(s >= 0 and d != s for d, s in zip(dims, signature)):
                raise InvalidArgumentError(
                    f"ResizeInputTensorStrict only allows mutating unknown dimensions identified by -1: tensor "
                    f"{t.name!r} has shape signature {list(signature)}, asked for {dims}")
        self._input_shapes[t.index] = tuple(dims)
        self._allocated = False

    def invoke(self) -> None:
        if not self._allocated:
            raise ModelExecutionError("Invoke called on model that is not ready.")
        main = self._model.subgraphs[0]
        inputs = [self._values[(0, t)] for t in main.inputs]
        outputs = self._execute(0, inputs)
        for t, y in zip(main.outputs, outputs):
            self._values[(0, t)] = y if y.flags.writeable else np.array(y)

    def get_tensor(self, tensor_index: int, subgraph_index: int = 0) -> np.ndarray:
        """A copy of a tensor's value: inputs, outputs and constants; every tensor with
        ``experimental_preserve_all_tensors=True``."""
        t = self._tensor(tensor_index, subgraph_index)
        value = self._values.get((int(subgraph_index), t.index))
        if value is not None:
            return np.array(value, copy=True)
        if t.data is not None and t.dtype not in ("string", "resource", "variant"):
            return np.array(t.data, copy=True)
        if self._preserve:
            raise InvalidArgumentError(f"tensor {t.index} ({t.name!r}) of subgraph {subgraph_index} has no value "
                                       "yet: call invoke() first")
        raise InvalidArgumentError(f"tensor {t.index} ({t.name!r}) of subgraph {subgraph_index} is an intermediate "
                                   "tensor; create the Interpreter with experimental_preserve_all_tensors=True "
                                   "to read it")

    def tensor(self, tensor_index: int) -> Callable[[], np.ndarray]:
        """A function returning a writable numpy view of the tensor's current buffer (inputs, outputs)."""
        t = self._tensor(tensor_index, 0)

        def view() -> np.ndarray:
            value = self._values.get((0, t.index))
            if value is None:
                raise InvalidArgumentError(f"tensor {t.index} ({t.name!r}) has no buffer: call allocate_tensors() "
                                           "(intermediate tensors need experimental_preserve_all_tensors=True)")
            return value

        return view

    # ---- signatures -------------------------------------------------------------------------
    def _get_full_signature_list(self) -> dict[str, dict[str, dict[str, int]]]:
        # The official wrapper builds these from std::map: keys and names come back sorted.
        return {s.key: {"inputs": {t.name: t.tensor_index for t in sorted(s.inputs, key=lambda t: t.name)},
                        "outputs": {t.name: t.tensor_index for t in sorted(s.outputs, key=lambda t: t.name)}}
                for s in sorted(self._model.signatures, key=lambda s: s.key)}

    def get_signature_list(self) -> dict[str, dict[str, list[str]]]:
        """{key: {"inputs": [...], "outputs": [...]}}; {} for a model without SignatureDef (as the official)."""
        return {k: {"inputs": list(v["inputs"]), "outputs": list(v["outputs"])}
                for k, v in self._get_full_signature_list().items()}

    def get_signature_runner(self, signature_key: str | None = None) -> "SignatureRunner":
        if signature_key is None:
            if len(self._signature_defs) != 1:
                raise SignatureError(f"SignatureDef signature_key is None and model has {len(self._signature_defs)} "
                                     "Signatures. None is only allowed when the model has 1 SignatureDef")
            signature_key = next(iter(self._signature_defs))
        return SignatureRunner(self, signature_key)

    def reset_all_variables(self) -> None:
        with self._lock:
            for engine in self._engines.values():
                engine.reset_variables()


class SignatureRunner:
    """Runs one SignatureDef: ``runner(x=..., y=...) -> {output name: array}``."""

    def __init__(self, interpreter: Interpreter | None = None, signature_key: str | None = None):
        if not interpreter:
            raise InvalidArgumentError("None interpreter provided.")
        if not signature_key:
            raise InvalidArgumentError("None signature_key provided.")
        defs = interpreter._get_full_signature_list()
        if signature_key not in defs:
            raise SignatureError(f'Invalid signature_key provided: "{signature_key}".')
        self._interpreter = interpreter
        self._signature_key = signature_key
        self._inputs: dict[str, int] = defs[signature_key]["inputs"]
        self._outputs: dict[str, int] = defs[signature_key]["outputs"]
        self._subgraph_index = next(s.subgraph_index for s in interpreter._model.signatures if s.key == signature_key)

    def __call__(self, **kwargs: Any) -> dict[str, np.ndarray]:
        if len(kwargs) != len(self._inputs):
            raise SignatureError("Invalid number of inputs provided for running a SignatureDef, expected "
                                 f"{len(self._inputs)} vs provided {len(kwargs)}")
        sg = self._interpreter._model.subgraphs[self._subgraph_index]
        for name in kwargs:
            if name not in self._inputs:
                raise SignatureError(f"Invalid Input name ({name}) for SignatureDef; inputs are {list(self._inputs)}")
        by_tensor = {self._inputs[name]: np.asarray(value) for name, value in kwargs.items()}
        inputs = []
        for t in sg.inputs:
            if t not in by_tensor:
                raise SignatureError(f"signature {self._signature_key!r} does not name subgraph input {t}")
            value, expected = by_tensor[t], np.dtype(numpy_dtype(sg.tensors[t].dtype))
            if value.dtype != expected:
                name = next(n for n, i in self._inputs.items() if i == t)
                raise InvalidArgumentError(f"Cannot set tensor: Got value of type {_type_name(value.dtype)} but "
                                           f"expected type {_type_name(expected)} for input {t}, name: {name} ")
            inputs.append(value)
        outputs = self._interpreter._execute(self._subgraph_index, inputs)
        by_index = dict(zip(sg.outputs, outputs))
        return {name: np.array(by_index[index], copy=True) for name, index in self._outputs.items()}

    def _details(self, names: dict[str, int]) -> dict[str, dict[str, Any]]:
        return {name: self._interpreter._get_tensor_details(index, self._subgraph_index)
                for name, index in names.items()}

    def get_input_details(self) -> dict[str, dict[str, Any]]:
        return self._details(self._inputs)

    def get_output_details(self) -> dict[str, dict[str, Any]]:
        return self._details(self._outputs)


__all__ = ["Interpreter", "OpResolverType", "SignatureRunner"]
