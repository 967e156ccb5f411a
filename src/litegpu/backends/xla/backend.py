"""The XLA backend: a subgraph (or a run of its ops) traced into one ``jax.jit`` program (``tracer``), compiled once
per input shape, over the model's weights on the device (``state.XlaState``, which all signatures of one compiled
model share: TFLite shares resource variables between subgraphs, and sharing the weights keeps one copy on the
device).  Resource variables are threaded through the program as inputs and outputs; inputs a program consumes
are donated.

Runs return device arrays without waiting (JAX dispatches asynchronously), so
a GPU run's outputs stay on the GPU and feed the next run without a host copy.
"""

from __future__ import annotations

import collections
import functools
import os
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import ModelExecutionError
from ...ir import Model, Subgraph, Tensor, called_subgraphs, numpy_dtype
from ...ops import Target
from ...ops._fixedpoint import exact_divisions
from ..graph import STATEFUL_OPS, OpRange, split_ops
from ..engine import SubgraphProgram
from ..memory import check_fits, is_out_of_memory, needed_bytes, out_of_memory
from ..device_arrays import _jaxlib_version, device_for, is_device_array, jax_module
from .state import XlaState, _in_place_sources, _tensor_bytes
from .tracer import _Precision, _XlaRunner

# Options of every XLA CPU compile.  XLA's newer fusion emitters needed twice the compile memory of its
# classic ones and kept executables 25 to 35 % bigger (decoder layers of width 4096: 85 against 175 MiB
# to compile a 2-layer decode step, 42 against 56 MiB kept), and did not run faster here (see BENCHMARKS.md).
CPU_COMPILER_OPTIONS: dict[str, Any] = {"xla_cpu_use_fusion_emitters": False}
# ... except for the builtin kernels' float order (``CpuKernelMode.BUILTIN``) on models up to this many weight
# bytes: its depth-ordered sums are loops over the output, which the classic emitters ran 3.6 to 6.8x slower
# than the fusion emitters (a 1x1 convolution of 12544 x 32 -> 64: 4.66 against 0.79 ms; MobileNetV1 whole in
# BUILTIN mode: 104 ms; BENCHMARKS.md, "BUILTIN mode's convolutions").  Bigger models keep the classic emitters
# for their compile memory.
BUILTIN_ORDER_FUSION_EMITTERS_MAX_BYTES = 256 << 20
# Options of every XLA GPU compile.  XLA GPU merges matrix products that share an operand (q, k and v of one
# input) into one product over the concatenated weights, which copies the weights every call and, with
# weights converted from int8 or float16, materializes them as float32 (a 2-layer int8 decoder's prefill:
# 22.7 MB of temporaries, 0.98 MB without the merge; bench/gpu/gpu_compile.py); without it each product fuses the
# conversion of its own weight.
GPU_COMPILER_OPTIONS: dict[str, Any] = {"xla_gpu_dot_merger_threshold_mb": 0}
# ... and loops inside command buffers (CUDA graphs).  XLA's default command-buffer types leave WHILE and
# CONDITIONAL out, so the host drove every loop: a decoder's layer loop cost one launch and a wait for its
# condition per layer, 16 a token for a 16-layer decoder (1.20-1.34x the bandwidth bound of a ~1B int8 / int4
# decoder at position 128; with them the whole decode chunk is one launch, BENCHMARKS.md "Loops inside command
# buffers").  XLA drops them itself where the driver lacks conditional graph nodes (CUDA < 12.3).
# ``$LITEGPU_GPU_LOOP_BUFFERS=0`` keeps XLA's defaults, as does an ``xla_gpu_enable_command_buffer`` in $XLA_FLAGS.
GPU_LOOP_COMMAND_BUFFERS = "FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,WHILE,CONDITIONAL"
LOOP_BUFFERS_ENV = "LITEGPU_GPU_LOOP_BUFFERS"
# Runs of programs that allocate at least this much (XLA's temporaries and outputs) first give the C heap's
# free pages back (``_release_freed_memory``): glibc keeps what earlier runs freed (a 3 GB float16 decoder's
# heap grew by 0.24 GiB over 4 decode steps, its peak), and trimming costs far less than such a run.
TRIM_BEFORE_RUN_BYTES = 64 << 20
# Big models compile their big subgraphs in parts of about PART_OPS ops (``split_ops``: cut where the
# fewest bytes cross), each part its own program: XLA's compile memory grows with a program's size and
# comes on top of the weights and of the programs already compiled (a 26-layer int4 decoder's decode step
# took about 1.4 GiB to compile whole).  Only models whose weights take SPLIT_MODEL_BYTES or more, and
# subgraphs without state (variables, calls to other subgraphs), are split.
SPLIT_MODEL_BYTES = 1 << 30
PART_OPS = 256


def gpu_compiler_options() -> dict[str, Any]:
    """``GPU_COMPILER_OPTIONS``, with loops in command buffers unless ``$LITEGPU_GPU_LOOP_BUFFERS`` turns them off
    or ``$XLA_FLAGS`` picks the command-buffer types itself."""
    options = dict(GPU_COMPILER_OPTIONS)
    switched_off = os.environ.get(LOOP_BUFFERS_ENV, "").strip().lower() in ("0", "off", "false", "no")
    if not switched_off and "xla_gpu_enable_command_buffer" not in os.environ.get("XLA_FLAGS", ""):
        options["xla_gpu_enable_command_buffer"] = GPU_LOOP_COMMAND_BUFFERS
    return options


def _release_freed_memory() -> None:
    """Give the C heap's free pages back to the system around a compile.  XLA's compiler frees most of
    what it allocates, and runs free their buffers, but glibc keeps the pages (0.3 GiB after compiling
    a 3 GB decoder's prefill), and the next compile, whose allocations do not reuse them, peaks on
    top of them."""
    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def _split_donated(args: Sequence[Any], donated: tuple[int, ...]) -> tuple[list, list]:
    """(the arguments with None where donated, the donated ones): ``XlaBackend._trace_consuming``'s inputs."""
    return [None if i in donated else a for i, a in enumerate(args)], [args[i] for i in donated]


def _shape_key(arrays: Sequence[Any]) -> tuple:
    # dtype objects, not their names: str(dtype) is python code in numpy, measurable per run on tiny models
    return tuple((tuple(np.shape(a)), a.dtype) for a in arrays)


class XlaBackend(SubgraphProgram):
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
        self._shapes: dict[tuple, list[tuple[tuple[int, ...], np.dtype]]] = {}
        # Every argument placed on the device: without shardings, jit compiles again when a run's
        # inputs are committed device arrays (the previous run's outputs: a KV cache) where the first
        # run's were host arrays (measured: a 3 GB decoder compiled its prefill twice, 13 s each).
        if self.state.mesh is None:
            on_device = self.state.sharding
            self._jit_options: dict[str, Any] = {"in_shardings": on_device, "out_shardings": on_device}
        else:  # weights split over several devices: XLA propagates their shardings through the program
            from ..sharding import cache_axes

            self._cache_in, self._cache_out = cache_axes(model, subgraph_index, len(self.state.mesh.devices.flat))
            self._jit_options = {}
        self._program = self.jax.jit(self._trace, **self._jit_options)
        # With a compile cache, compiled executables are serialized to disk and a later process
        # loads them instead of tracing and compiling (see litegpu.backends.cache).
        self.cache = cache
        self.cache_key = dict(cache_key or {})
        self._executables: dict[str, Any] = {}
        self._by_shape: dict[tuple, Any] = {}  # input and variable shapes -> compiled executable
        self._parts = self._split_parts(cache, cache_key) if op_range is None else []
        self._big_runs: set[tuple] = set()     # shapes whose runs trim the C heap first (TRIM_BEFORE_RUN_BYTES)

    def _split_parts(self, cache: Any, cache_key: dict | None) -> list["XlaBackend"]:
        """Backends for the parts of a big subgraph (see PART_OPS), or [] to compile it whole."""
        sg = self.subgraph
        if self.subgraph_index in self.state.regions:  # one block traced in a loop: a small program already
            return []
        if len(sg.operators) <= 2 * PART_OPS or any(
                op.opcode_name in STATEFUL_OPS or called_subgraphs(op) for op in sg.operators):
            return []
        if self.state.weight_bytes() < SPLIT_MODEL_BYTES:
            return []
        from ...ir import execution_order

        ranges = split_ops(sg, execution_order(sg, self.model.source), PART_OPS, _tensor_bytes)
        return [XlaBackend(self.model, self.subgraph_index, self.platform, precision=self.policy.name,
                           state=self.state, cache=cache, cache_key=cache_key, op_range=r) for r in ranges]

    def _run_parts(self, inputs: Sequence[Any], consumable: Sequence[int] = ()) -> list[Any]:
        values = dict(zip(self.subgraph.inputs, inputs))
        free = {self.subgraph.inputs[i] for i in consumable} | self._part_results
        for part, last_reads in zip(self._parts, self._last_reads):
            ins = part.op_range.inputs
            mine = [k for k, t in enumerate(ins) if t in free and t in last_reads]
            values.update(zip(part.op_range.outputs, part.run([values[t] for t in ins], consumable=mine)))
        return [values[t] for t in self.subgraph.outputs]

    @functools.cached_property
    def _part_results(self) -> set[int]:
        """Tensors one part makes for later parts only (not the subgraph's outputs): each may be consumed
        by the last part that reads it."""
        made = {t for part in self._parts for t in part.op_range.outputs}
        return made - set(self.subgraph.outputs) - set(self.subgraph.inputs)

    @functools.cached_property
    def _last_reads(self) -> list[set[int]]:
        """Per part, the tensors that no later part reads (nor the subgraph returns).  A part's inputs are
        distinct tensors (``graph.split_ops``)."""
        last: dict[int, int] = {}
        for j, part in enumerate(self._parts):
            for t in part.op_range.inputs:
                last[t] = j
        outputs = set(self.subgraph.outputs)
        return [{t for t in part.op_range.inputs if last[t] == j and t not in outputs}
                for j, part in enumerate(self._parts)]

    @property
    def compiled_shapes(self) -> set[tuple]:
        """The argument shapes (and variable shapes) compiled so far: one executable each."""
        return set(self._by_shape)

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

    def _trace_consuming(self, params: dict, variables: dict, kept: list, consumed: list) -> tuple[list, dict]:
        """``_trace`` with the inputs in two lists: ``consumed`` (donated to XLA, whose memory the outputs
        may take) fills the places that are None in ``kept``."""
        taken = iter(consumed)
        return self._trace(params, variables, [next(taken) if x is None else x for x in kept])

    @functools.cached_property
    def _consuming_program(self) -> Any:
        return self.jax.jit(self._trace_consuming, donate_argnums=(3,), **self._jit_options)

    def trace(self, params: dict, variables: dict, inputs: list, row_plan: Any = None) -> tuple[list, dict]:
        """The subgraph (or partition) as a function of JAX values: (outputs, variables), for programs that
        contain it (``xla_generate``'s decode loop).  The inputs are in the subgraph's order.  ``row_plan``
        (a ``kv_rows.RowPlan``): the attention reads only the caches' first rows."""
        return self._trace(params, variables, inputs, row_plan=row_plan)

    def trace_stacked(self, params: dict, variables: dict, inputs: list, stacks: dict,
                      row_plan: Any = None) -> tuple[list, dict, dict]:
        """``trace`` where the per-block inputs of the subgraph's repeated blocks (``stacked_inputs``) come stacked,
        as ``stacks`` (template tensor -> [blocks, ...]), their own places in ``inputs`` None; also returns the
        stacks as the blocks left them (a KV cache updated in place).  The decode loop carries its caches so: one
        stack for the whole generation, never copied per step."""
        runner_stacks: dict = {}
        outputs, variables = self._trace(params, variables, inputs, given_stacks=stacks, final_stacks=runner_stacks,
                                         row_plan=row_plan)
        return outputs, variables, runner_stacks

    def stacked_inputs(self) -> dict[int, tuple[int, ...]]:
        """Template tensor -> the subgraph input positions, block by block, of the per-block subgraph inputs that its
        repeated blocks update in place (the KV caches of a decoder's layers); {} without repeated blocks."""
        region = self.state.regions.get(self.subgraph_index)
        if region is None or self.op_range is not None:
            return {}
        sg = self.subgraph
        updated = {source for source in _in_place_sources(sg, region)}
        return {t0: tuple(list(sg.inputs).index(t) for t in per_block) for t0, per_block in region.stacked
                if t0 in updated and all(t in sg.inputs for t in per_block)}

    def _trace(self, params: dict, variables: dict, inputs: list, *, given_stacks: dict | None = None,
               final_stacks: dict | None = None, row_plan: Any = None) -> tuple[list, dict]:
        # on the CPU the quantization steps divide as the builtin kernels' C does (ops._fixedpoint)
        with exact_divisions(self.target is Target.XLA_CPU):
            return self._trace_ops(params, variables, inputs, given_stacks=given_stacks, final_stacks=final_stacks,
                                   row_plan=row_plan)

    def _trace_ops(self, params: dict, variables: dict, inputs: list, *, given_stacks: dict | None = None,
                   final_stacks: dict | None = None, row_plan: Any = None) -> tuple[list, dict]:
        sg = self.subgraph
        runner = _XlaRunner(self.model, self.target, params=params, state=self.state,
                            constant=lambda sg_index, t: self._to_storage(t.data, t), variables=dict(variables),
                            storage=self.policy.storage_dtype, compute=self.policy.compute_dtype)
        runner.given_stacks, runner.final_stacks, runner.row_plan = given_stacks or {}, final_stacks, row_plan
        edge_in, edge_out = (sg.inputs, sg.outputs) if self.op_range is None else (
            self.op_range.inputs, self.op_range.outputs)
        inputs = [None if x is None else self._to_storage(x, sg.tensors[t]) for x, t in zip(inputs, edge_in)]
        if self.state.mesh is not None:
            inputs = [self._by_head(x, self._cache_in.get(t)) for x, t in zip(inputs, edge_in)]
        if self.op_range is None:
            outputs = runner.run_subgraph(self.subgraph_index, inputs)
        else:
            outputs = runner.run_ops(self.op_range, inputs)
        outputs = [self._to_boundary(y, sg.tensors[t]) for y, t in zip(outputs, edge_out)]
        if self.state.mesh is not None:
            outputs = [self._by_head(y, self._cache_out.get(t)) for y, t in zip(outputs, edge_out)]
        return outputs, runner.variables

    def _by_head(self, x: Any, axis: int | None) -> Any:
        """A KV cache kept split by head over the devices (the attention of a head stays on its device)."""
        if axis is None:
            return x
        from ..sharding import named_sharding

        return self.jax.lax.with_sharding_constraint(x, named_sharding(self.state.mesh, x.ndim, axis))

    def _place(self, inputs: Sequence[Any]) -> list[Any]:
        """Host arrays go to the program as they are: jit copies them to the device in one C++
        call, which is much cheaper per run than a ``device_put`` per input.  Device arrays on
        another device (a GPU output fed to a CPU program, say) are moved explicitly."""
        if self.state.mesh is not None:
            return self._place_on_mesh(inputs)
        placed = []
        for x in inputs:
            if is_device_array(x):
                placed.append(x if self.device in x.devices() else self.jax.device_put(x, self.device))
            else:
                placed.append(np.asarray(x))
        return placed

    def _place_on_mesh(self, inputs: Sequence[Any]) -> list[Any]:
        """Device arrays already over the model's devices (the previous step's KV cache) stay where they
        are; others are copied to every device (one program's committed arguments share one device set)."""
        from ..sharding import named_sharding

        mesh = set(self.state.mesh.devices.flat)
        replicated = [None if not is_device_array(x) or x.devices() == mesh
                      else named_sharding(self.state.mesh, x.ndim, None) for x in inputs]
        return [np.asarray(x) if not is_device_array(x) else x if where is None else self.jax.device_put(x, where)
                for x, where in zip(inputs, replicated)]

    @property
    def where(self) -> str:
        """The model, signature and partition this program runs, for error messages."""
        names = [s.key for s in self.model.signatures if s.subgraph_index == self.subgraph_index]
        part = f"subgraph {self.subgraph_index}" if self.op_range is None else str(self.op_range)
        return f"{self.model.source}: " + (f"signature {names[0]!r} ({part})" if names else part) + \
            f" on XLA {self.platform.upper()}"

    # CompiledModel tells backends with this attribute which inputs a run may consume (``run(consumable=)``).
    consumes_inputs = True

    def run(self, inputs: Sequence[Any], consumable: Sequence[int] = ()) -> list[Any]:
        """Run on device arrays or numpy; returns device arrays (dispatch is asynchronous, except for
        the first run of each compiled program, which is checked by the memory guard and waited for).
        ``consumable``: positions of inputs the caller will not read again (a KV cache whose buffer
        receives the new one): device arrays there are donated to XLA, which computes an output of the
        same shape in their memory instead of holding both (they are deleted)."""
        if self._parts:
            return self._run_parts(inputs, consumable)
        args = self._place(inputs)
        # variables too: a stateful program's first run gets none and compiles again for the next
        shapes = _shape_key(args) + tuple((k, np.shape(v), getattr(v, "dtype", None))
                                          for k, v in self.variables.items())
        compiled = self._by_shape.get(shapes)
        if compiled is None:
            consumed = self._donated_positions(args, consumable)
            return self._first_run(shapes, self._to_donate(args, inputs, consumed, consumable), consumed)
        executable, consumed = compiled
        if shapes in self._big_runs:
            _release_freed_memory()
        try:
            outputs, self.variables = self._call(executable, self._to_donate(args, inputs, consumed, consumable),
                                                 consumed)
        except Exception as e:
            raise (out_of_memory(e, self.where, "running") if is_out_of_memory(e) else e) from e
        return outputs

    def _donated_positions(self, args: Sequence[Any], consumable: Sequence[int]) -> tuple[int, ...]:
        """The inputs that the program compiled for these arguments takes as donated (fixed with it: one
        executable per shape, whatever later runs allow): the consumable ones, each held at one position.
        Not with weights split over devices (their placement is XLA's to choose)."""
        if not consumable or self.state.mesh is not None:
            return ()
        ids = collections.Counter(id(a) for a in args)
        return tuple(i for i in sorted(set(consumable)) if 0 <= i < len(args) and ids[id(args[i])] == 1)

    def _to_donate(self, args: list[Any], inputs: Sequence[Any], donated: tuple[int, ...],
                   consumable: Sequence[int]) -> list[Any]:
        """``args`` with each donated position holding an array XLA may take: the caller's device array
        where the caller gave it up (``consumable``), else a device copy of the value (a host array, or one
        the caller still holds), so that no array of the caller's is ever deleted or written."""
        if not donated:
            return args
        ids = collections.Counter(id(a) for a in args)
        out = list(args)
        for i in donated:
            x = args[i]
            if is_device_array(x) and ids[id(x)] == 1 and (i in consumable or x is not inputs[i]):
                continue  # given up by the caller, or already our copy (``_place`` moved it here)
            out[i] = x.copy() if is_device_array(x) else self.jax.device_put(np.array(x, copy=True), self.device)
        return out

    def _call(self, executable: Any, args: list[Any], consumed: tuple[int, ...]) -> tuple[list, dict]:
        if not consumed:
            return executable(self.params, self.variables, args)
        return executable(self.params, self.variables, *_split_donated(args, consumed))

    def _first_run(self, shapes: tuple, args: list[Any], consumed: tuple[int, ...] = ()) -> list[Any]:
        """Compile, check that a run fits in memory (``backends.memory``), run and wait: an allocation
        failure of a run surfaces only when it is waited on, so the first one is waited on here."""
        _release_freed_memory()  # the buffers of earlier runs, freed but kept by the C heap, would add to its peak
        doing = "compiling"
        try:
            executable = (self._compile(args, consumed) if self.cache is None
                          else self._cached_executable(args, consumed))
            _release_freed_memory()
            check_fits(executable, self.device, args, self.where)
            doing = "running"
            outputs, variables = self._call(executable, args, consumed)
            for y in outputs:
                if hasattr(y, "block_until_ready"):
                    y.block_until_ready()
        except Exception as e:
            raise (out_of_memory(e, self.where, doing) if is_out_of_memory(e) else e) from e
        self.variables = variables
        self._by_shape[shapes] = (executable, consumed)
        if (needed_bytes(executable) or 0) >= TRIM_BEFORE_RUN_BYTES:
            self._big_runs.add(shapes)
        _release_freed_memory()
        return outputs

    def _compile(self, args: Sequence[Any], consumed: tuple[int, ...] = ()) -> Any:
        """The program compiled for these arguments, with ``CPU_COMPILER_OPTIONS`` on the CPU (a jaxlib
        that does not know one of them compiles without them)."""
        if consumed:
            with warnings.catch_warnings():  # a donated input no output can take (another shape) is just kept
                warnings.filterwarnings("ignore", message="Some donated buffers were not usable")
                lowered = self._consuming_program.lower(self.params, self.variables, *_split_donated(args, consumed))
        else:
            lowered = self._program.lower(self.params, self.variables, args)
        return self._compile_lowered(lowered)

    @property
    def compiler_options(self) -> dict[str, Any]:
        """XLA options for the device this program is compiled for (a GPU's, the host's)."""
        if getattr(self.device, "platform", "cpu") == "gpu":
            return gpu_compiler_options()
        if self.platform != "cpu":
            return {}
        if self.state.official_float_order and self._weight_bytes <= BUILTIN_ORDER_FUSION_EMITTERS_MAX_BYTES:
            return {}
        return dict(CPU_COMPILER_OPTIONS)

    @functools.cached_property
    def _weight_bytes(self) -> int:
        from ...ir.save import constant_bytes

        return constant_bytes(self.model)

    def compile_program(self, jitted: Any, args: Sequence[Any], what: dict) -> Any:
        """``jitted`` (a ``jax.jit`` of a function of this backend's ``params`` and ``args``, placed with
        ``state.sharding``) compiled with this backend's options: through the compile cache when there is one,
        ``what`` telling it apart from the subgraph's own programs (``xla_generate``'s decode loop).  The result
        is called as ``compiled(params, *args)``."""
        from ..cache import found_or_made, make_key

        key = None
        if self.cache is not None:
            key = make_key({**self.cache_key, "program": what, "subgraph": self.subgraph_index,
                            "platform": self.platform, "device_kind": getattr(self.device, "device_kind", self.platform),
                            "precision": repr(self.policy.storage_dtype) + repr(self.policy.compute_dtype),
                            "inputs": [(tuple(np.shape(a)), str(a.dtype)) for a in self.jax.tree_util.tree_leaves(args)],
                            "jax": self.jax.__version__, "jaxlib": _jaxlib_version(),
                            "compiler_options": sorted(self.compiler_options.items())})

        def compiled() -> Any:
            _release_freed_memory()
            executable = self._compile_lowered(jitted.lower(self.params, *args))
            _release_freed_memory()
            if key is not None:
                self._store_executable(key, executable, self.jax.tree_util.tree_leaves(args))
            return executable

        executable = found_or_made(self.cache, key, lambda: None if key is None else (
            self._executables.get(key) or self._load_executable(key)), compiled)
        if key is not None:
            self._executables[key] = executable
        return executable

    def _compile_lowered(self, lowered: Any) -> Any:
        options = self.compiler_options
        if options:
            try:
                return lowered.compile(compiler_options=options)
            except Exception as e:  # an option this XLA does not have: compile with its defaults
                if "option" not in str(e).lower() and "flag" not in str(e).lower():
                    raise
        return lowered.compile()

    def _executable_key(self, args: Sequence[Any], consumed: tuple[int, ...] = ()) -> str:
        from ..cache import make_key

        def layout(values: Any) -> list:
            return [(tuple(v.shape), str(v.dtype)) for v in values]

        variables = sorted((repr(k), tuple(np.shape(v)), str(v.dtype)) for k, v in self.variables.items())
        return make_key({**self.cache_key, "subgraph": self.subgraph_index, "platform": self.platform,
                         "device_kind": getattr(self.device, "device_kind", self.platform),
                         **({"devices": len(self.state.mesh.devices.flat)} if self.state.mesh is not None else {}),
                         "precision": repr(self.policy.storage_dtype) + repr(self.policy.compute_dtype),
                         "inputs": layout(args), "variables": variables,
                         "jax": self.jax.__version__, "jaxlib": _jaxlib_version(),
                         "compiler_options": sorted(self.compiler_options.items()),
                         **({"ops": list(self.op_range.op_indices)} if self.op_range is not None else {}),
                         **({"consumed": list(consumed)} if consumed else {})})

    def _cached_executable(self, args: Sequence[Any], consumed: tuple[int, ...] = ()) -> Any:
        from ..cache import found_or_made

        def compiled() -> Any:
            executable = self._compile(args, consumed)
            self._store_executable(key, executable, args)
            return executable

        key = self._executable_key(args, consumed)
        executable = found_or_made(self.cache, key, lambda: self._executables.get(key) or self._load_executable(key),
                                   compiled)
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
                         {"engine": "xla", "what": "compiled program", "source": self.model.source,
                          "model": self.cache_key.get("model_token"), "subgraph": self.subgraph_index,
                          "platform": self.platform, "inputs": [tuple(a.shape) for a in args]})

    def lower(self, args: Sequence[Any]) -> Any:
        """The whole subgraph's (or partition's) program for these arguments (arrays, or ``jax.ShapeDtypeStruct``
        placed with ``state.sharding``) lowered, not compiled: ``.compile()`` compiles it, for a deviceless target
        (``backends.xla.deviceless``) the only thing such a program can do.  ``parts`` are lowered separately."""
        return self._program.lower(self.params, self.variables, list(args))

    @property
    def parts(self) -> list["XlaBackend"]:
        """The backends of the parts a big subgraph is compiled in (``PART_OPS``), [] when it is compiled whole."""
        return list(self._parts)

    def output_shapes(self, input_shapes: Sequence[tuple[tuple[int, ...], Any]]) -> list[tuple[tuple[int, ...], np.dtype]]:
        """Output (shape, dtype) for inputs of these (shape, dtype), by tracing only (no compile, no run)."""
        key = tuple((tuple(int(d) for d in s), str(np.dtype(d))) for s, d in input_shapes)
        if self._parts and key not in self._shapes:
            known = dict(zip(self.subgraph.inputs, key))
            for part in self._parts:
                known.update(zip(part.op_range.outputs, part.output_shapes([known[t] for t in part.op_range.inputs])))
            self._shapes[key] = [(tuple(known[t][0]), np.dtype(known[t][1])) for t in self.subgraph.outputs]
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

    def device_program(self) -> "XlaBackend | None":
        """Itself where it runs the whole subgraph over weights on one device and the model has no resource
        variables (what the generation loop runs on the device); None for a partition, variables, or weights split
        over several devices."""
        if self.op_range is not None or self.variables or self.state.mesh is not None:
            return None
        return self


def export_program(backend: XlaBackend, params: dict, variables: dict, inputs: Sequence[Any]) -> Any:
    """The program of ``backend`` as versioned StableHLO (``jax.export``), for engines that compile StableHLO
    themselves (``backends.iree``).  ``params``, ``variables`` and ``inputs`` give the shapes and dtypes
    (``jax.ShapeDtypeStruct``) of its three arguments, the weights and variables included as arguments rather
    than constants; ``Exported.in_tree`` and ``module_kept_var_idx`` say which flattened arguments the module
    takes.  Lowered with the CPU's lowering rules (portable StableHLO, no CUDA custom calls); the op rules are
    the backend's own (``backend.target``)."""
    jax = backend.jax
    return jax.export.export(jax.jit(backend._trace), platforms=["cpu"])(params, variables, list(inputs))
