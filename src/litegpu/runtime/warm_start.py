"""A warm start without the IR (issue 35): a model that one engine runs whole over its file (the official
interpreter: ``Engine.file_record``), loaded again from the same file with the same options and the same litegpu,
starts from a record in the compile cache instead of reading the file into the IR and planning it.

The record is written by the first start that ran such a model (``remember``), under a key made of the model's
cache key (its bytes' xxh3, litegpu's version and the fingerprint of its sources), the options that shape the plan,
the CPU and the cores this process may use: a changed file, changed options or changed litegpu code miss, and are
planned as before; a record of another version of the engine is discarded.  It holds what the API needs without
the model: each signature's tensors (names, indices, dtypes, shapes), what the engine needs beside the file (the
interpreter's thread count), and the plan itself (pickled, unpickled only when asked).  On a hit the engine reads
the file straight away; the IR is read only where something asks for it (``model``, ``plan``, a path that needs
it), and then checked against the record's fingerprint, so that a file changed since the start fails loudly
instead of disagreeing with what runs.

Only the plain case is recorded: CPU only, the whole model on an engine that keeps a file record, over the file as
it is, every signature naming its subgraph's inputs and outputs in order, no model token, no devices, no custom op
registered from Python.  Anything else is planned at every start as before."""

from __future__ import annotations

import functools
import json
import os
from typing import Any, NamedTuple

import numpy as np

from ..backends.engine import SubgraphProgram
from .._lazy import LazyLogger
from ..errors import LiteGpuError, ModelFormatError

logger = LazyLogger(__name__)

RECORD_VERSION = 1


class TensorSpec(NamedTuple):
    """What the API reads of a signature's tensor (``ir.Tensor``'s fields of the same names)."""

    name: str
    index: int
    dtype: str
    shape: tuple[int, ...]
    shape_signature: tuple[int, ...] | None


class SubgraphSpec(NamedTuple):
    """A subgraph as a warm start sees it: its inputs, outputs and those tensors (``ir.Subgraph``'s fields)."""

    index: int
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    tensors: dict[int, TensorSpec]
    num_ops: int


class ModelSpec(NamedTuple):
    """What the official interpreter's executable reads of the model (``ir.Model``'s fields)."""

    source: str
    subgraphs: dict[int, SubgraphSpec]


def file_fingerprint(path: str) -> str:
    """xxh3 of the file's bytes, streamed over a memory map (the model token of the compile cache)."""
    import mmap

    from ..backends.cache import fingerprint

    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return fingerprint(b"")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return fingerprint(data)


def options_key(options: Any) -> str:
    """The options that shape the plan and the run, as text: ``Options.__repr__`` names all of them (the CPU and
    GPU options as given: defaults are None, whether left out or made since by a start that read them on the same
    object, so that the same options given again find the record)."""
    import copy

    given = copy.copy(options)
    given._cpu_options, given._gpu_options = _unless_default(options._cpu_options), _unless_default(
        options._gpu_options)
    return repr(given)


def _unless_default(part: Any) -> Any:
    """``part`` (CPU or GPU options), or None where every field has its default (none made to compare: making
    the GPU options imports the float view)."""
    import dataclasses

    if part is None or any(f.default is dataclasses.MISSING or getattr(part, f.name) != f.default
                           for f in dataclasses.fields(part)):
        return part
    return None


def _python_ops_registered() -> bool:
    """Whether a custom op is registered from Python (the official interpreter then no longer runs the model);
    registering one loads the op catalog, so none is where it is not loaded (asking would load it: 0.1 s)."""
    import sys

    if "litegpu.ops._catalog" not in sys.modules:
        return False
    from ..ops.custom.python_ops import PythonCustomOp
    from ..ops.registry import custom_ops

    return any(isinstance(op, PythonCustomOp) for op in custom_ops().values())


def eligible_options(options: Any) -> bool:
    """Whether a start with these options may be recorded and started warm: the compile cache on, CPU only, the
    file's bytes naming the model (no token), one device."""
    return (options.compile_cache and int(options.hardware_accelerators) == 1 and options.cache_token is None
            and options.devices is None and not options.vendor_options)


def record_key(model_key: dict, options: Any) -> str:
    """The record's key: the model's, the options, and what the engine's choices (a thread count) were made for:
    the cores this process may use and the CPU (a cache shared by other machines, or a process pinned to fewer
    cores, plans again)."""
    from ..backends.cache import make_key
    from ..backends.engine import cpu_name, physical_cores

    return make_key({**model_key, "warm start": RECORD_VERSION, "options": options_key(options),
                     "cores": physical_cores(), "cpu": cpu_name()})


class WarmRecord:
    """A record read back: the signatures' tensors, the engine and its record, the plan; ``model()`` reads the IR."""

    def __init__(self, path: str, token: str, model_key: dict, record: dict, cache: Any = None):
        from ..backends import registry

        self.path, self.token, self.model_key, self.cache = path, token, model_key, cache
        # the engine made as a first start's plan makes it for this file (an engine whose executable is a compiled
        # program reads it from the compile cache under the model's key)
        self.engine = registry.engine(str(record["engine"]), file=path, cache=cache, cache_key=model_key)
        if self.engine.version() != record["engine_version"]:
            raise ValueError(f"recorded for {record['engine']} {record['engine_version']}, not "
                             f"{self.engine.version()}")
        self.engine_record = dict(record["engine_record"])
        subgraphs: dict[int, SubgraphSpec] = {}
        for sg in record["subgraphs"]:
            tensors = {int(t[1]): TensorSpec(str(t[0]), int(t[1]), str(t[2]), tuple(int(d) for d in t[3]),
                                             None if t[4] is None else tuple(int(d) for d in t[4]))
                       for t in sg["tensors"]}
            subgraphs[int(sg["index"])] = SubgraphSpec(int(sg["index"]), tuple(sg["inputs"]), tuple(sg["outputs"]),
                                                        tensors, int(sg["num_ops"]))
        self.spec = ModelSpec(path, subgraphs)
        self.signatures = [(str(s["key"]), int(s["subgraph"]), tuple((str(n), int(t)) for n, t in s["inputs"]),
                            tuple((str(n), int(t)) for n, t in s["outputs"])) for s in record["signatures"]]
        self._plan = str(record["plan"])
        # what the start that recorded it left to be timed (``runtime.engine_choice.DeferredChoice``'s arguments),
        # or None
        self.choice_pending = record.get("choice_pending")

    def model(self) -> Any:
        """The model's IR, read from the file now: a file changed since the start is an error, not a silent
        disagreement with the interpreter that runs the bytes read then."""
        from .model import read

        model = read(self.path)
        if file_fingerprint(self.path) != self.token:
            raise ModelFormatError(f"{self.path}: the file changed after this CompiledModel loaded it; load it again")
        return model

    def plan(self, planned: Any, file_model: Any) -> Any:
        """The plan the first start made (its ``model`` the model it was made on, ``file_model`` the file's)."""
        import base64
        import dataclasses
        import pickle

        return dataclasses.replace(pickle.loads(base64.b64decode(self._plan)), model=planned, file_model=file_model)

    def executable(self, subgraph: int) -> Any:
        """The engine's executable of one whole subgraph, over the file."""
        return self.engine.from_file_record(self.path, self.spec, self.engine_record, subgraph)


class WarmSignature(SubgraphProgram):
    """A signature's program on a warm start: the engine's executable of the whole subgraph (as a first start's
    ``PartitionedSignature`` of one host unit running it whole)."""

    def __init__(self, executable: Any, engine: Any, subgraph: int):
        self.executable, self.engine, self.subgraph_index = executable, engine, subgraph

    def run(self, inputs: Any) -> list[Any]:
        return self.executable.run(inputs)

    def straight_run(self) -> Any:
        return getattr(self.executable, "run_arrays", None)  # numpy arrays as they are (the official interpreter)

    def output_shapes(self, input_shapes: Any) -> Any:
        return self.executable.output_shapes([shape for shape, _ in input_shapes])

    def reset_variables(self) -> None:
        self.engine.reset_variables()


class WarmState:
    """The model's state on a warm start (``CompiledModel._state``): assigning ``variables`` resets the
    interpreter's; what a first start's ``PartitionedModel`` reports on the weights (``weight_placement``) comes
    from one made when asked, over the IR then read."""

    def __init__(self, record: WarmRecord, owner: Any):
        self.record, self.owner = record, owner

    @property
    def variables(self) -> dict:
        return {}

    @variables.setter
    def variables(self, value: dict) -> None:
        self.record.engine.reset_variables()

    @functools.cached_property
    def _partitioned(self) -> Any:
        from .partitioned import PartitionedModel

        owner = self.owner
        return PartitionedModel(owner._xla_ir, owner._plan, precision=owner._options.precision,
                                device=owner._environment.device, cache=owner._cache, cache_key=owner._cache_key)

    def placement_report(self, platform: str) -> Any:
        return self._partitioned.placement_report(platform)


def find(path: Any, options: Any, cache: Any, model_key_of: Any) -> tuple[WarmRecord | None, str | None]:
    """(the record of ``path`` under ``options``, or None; the key a first start stores it under, or None where
    this start cannot be warm).  ``model_key_of(token)``: the model's compile cache key for its bytes' token."""
    if cache is None or not isinstance(path, (str, os.PathLike)) or not eligible_options(options):
        return None, None
    path = os.fspath(path)
    if not os.path.isfile(path) or _python_ops_registered():
        return None, None
    try:
        token = file_fingerprint(path)
    except (OSError, ValueError):
        return None, None  # the cold path reads the file and says what is wrong
    model_key = model_key_of(token)
    key = record_key(model_key, options)
    blob = cache.load(key)
    if blob is None:
        return None, key
    try:
        return WarmRecord(path, token, model_key, json.loads(blob), cache), key
    except (ValueError, KeyError, TypeError, IndexError, LiteGpuError) as e:
        # damaged, or of another version of the engine (or of one no longer registered): made again by this start
        cache.discard(key, f"a warm-start record not to use ({e})")
        return None, key


def remember(cache: Any, key: str, model: Any, plan: Any, signatures: Any, backend: Any,
             choice_pending: dict | None = None) -> bool:
    """Store the record of a first start whose plan runs ``model`` whole on an engine that can make its executable
    again from the file alone (``Engine.file_record``; ``backend``: the first signature's, made); False where the
    start is not of that kind.  ``choice_pending``: what the start left to be timed (``runtime.engine_choice``)."""
    from ..backends import registry

    if plan.accelerator != "CPU" or plan.is_split or plan.unsupported or plan.notes or not model.source:
        return False
    whole = getattr(backend, "whole_executable", None)
    # its ports in any order: the warm start's executable runs the subgraph in its own order
    executable = whole(any_order=True) if whole is not None else None
    engine = registry.engine(plan.engine)
    engine_record = engine.file_record(executable, model.source) if executable is not None else None
    if engine_record is None:
        return False
    subgraphs = []
    for index in sorted({s.subgraph for s in signatures}):
        sg = model.subgraphs[index]
        named = [s for s in signatures if s.subgraph == index]
        if any([t for _, t in s.inputs] != list(sg.inputs) or [t for _, t in s.outputs] != list(sg.outputs)
               for s in named):
            return False  # a signature in another order than its subgraph: planned at every start
        tensors = [[sg.tensors[t].name, t, sg.tensors[t].dtype, list(sg.tensors[t].shape),
                    None if sg.tensors[t].shape_signature is None else list(sg.tensors[t].shape_signature)]
                   for t in dict.fromkeys([*sg.inputs, *sg.outputs])]
        subgraphs.append({"index": index, "inputs": list(sg.inputs), "outputs": list(sg.outputs),
                          "tensors": tensors, "num_ops": len(sg.operators)})
    import base64
    import dataclasses
    import pickle

    try:
        pickled = pickle.dumps(dataclasses.replace(plan, model=None, file_model=None))
    except (pickle.PicklingError, TypeError, AttributeError) as e:  # a plan holding what pickle cannot keep
        logger.info("%s: no warm-start record: the plan cannot be kept (%s)", model.source, e)
        return False
    record = {"version": RECORD_VERSION, "engine": plan.engine, "engine_version": engine.version(),
              "engine_record": engine_record, "subgraphs": subgraphs, "choice_pending": choice_pending,
              "signatures": [{"key": s.key, "subgraph": s.subgraph, "inputs": s.inputs, "outputs": s.outputs}
                             for s in signatures],
              "plan": base64.b64encode(pickled).decode()}
    from ..backends.cache import found_or_made

    def store() -> bool:
        cache.store(key, json.dumps(record).encode(), {"engine": plan.engine, "what": "warm start",
                                                       "source": model.source})
        return True

    # processes starting together (a server's workers) store it once: the others find it under the lock
    return found_or_made(cache, key, lambda: cache.load(key) is not None or None, store)


def input_dtypes(spec: ModelSpec, subgraph: int, inputs: Any) -> tuple[np.dtype, ...]:
    from ..ir.dtypes import numpy_dtype

    tensors = spec.subgraphs[subgraph].tensors
    return tuple(np.dtype(numpy_dtype(tensors[t].dtype)) for _, t in inputs)


__all__ = ["ModelSpec", "SubgraphSpec", "TensorSpec", "WarmRecord", "WarmSignature", "WarmState", "find",
           "file_fingerprint", "remember"]
