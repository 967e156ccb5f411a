"""Compile litegpu's own GPU programs for an NVIDIA H100 on a machine without a GPU, and report what each call does.

XLA's GPU compiler runs without a device when it is given the card's description (``litegpu.backends.xla.deviceless``).
For every program litegpu would run on the GPU for a model (each signature, or each GPU partition of a split plan;
for LLM decoders also the generation loop and continuous batching's batched decode step at 8, 32 and 64 sequences,
``--batched-slots``; with the programs of the cache buckets that decode at ``--positions`` attends over,
``backends.xla.kv_rows``), it prints: the kernels a call launches, the device bytes of the weights
against the weight bytes in the file, the temporary bytes of a call, how many constant elements are compiled into
the program (a weight compiled in as a constant is a compile-time and memory problem), and every weight that some
buffer of the program holds wider than stored (a converted copy: an int8 weight materialized as float32).  It times
nothing: the GPU's time goes to timing.

Setup (a separate venv: the CUDA plugin's wheels are about 4 GB; no GPU or driver is needed):

    python -m venv .venv-cuda && .venv-cuda/bin/pip install -e ".[cuda13]"
    .venv-cuda/bin/python bench/gpu/gpu_compile.py ../shared/models/*.tflite           # models as files
    .venv-cuda/bin/python bench/gpu/gpu_compile.py --decoders float16 int8 int4 float32  # bench/models/decoder_model.py
    .venv-cuda/bin/python bench/gpu/gpu_compile.py MODEL --precision fp16 --json out.json --hlo hlo_dir/

The decoders are made in memory (``--layers``, ``--width``, ``--vocab``, ``--max-len``, ``--prefill-len``; small
by default so that the table takes a minute).  Exit status 1 when some program breaks the issue-25 rules: device
weights above 1.1x the file's, a weight held wider than stored, more than ``--max-constant-elements`` compiled in.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")  # no CUDA driver here: compile only
os.environ.setdefault("JAX_PLATFORMS", "cpu")                   # nothing runs on a device
# The decode loop's thunk sequence (what a launch runs: command buffers, kernels, host-driven loops), dumped by XLA's
# GPU compiler for the per-token table; only the loop's module (``DecodeLoop._steps``) is dumped.
THUNK_DUMP = Path(os.environ.get("LITEGPU_THUNK_DUMP") or f"/tmp/litegpu-thunks-{os.getpid()}")
if "--xla_dump_to" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" --xla_dump_to={THUNK_DUMP}"
                               " --xla_dump_hlo_module_re=.*_steps.*").strip()

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness (decoder_model found)
import harness  # noqa: E402

sys.path.insert(0, str(harness.ROOT / "src"))

import numpy as np  # noqa: E402

# Rules of issue 25, checked on every program.
MAX_WEIGHT_RATIO = 1.1           # device weight bytes / the file's weight bytes
MAX_CONSTANT_ELEMENTS = 1 << 20  # elements of constants compiled into one program
WIDENED_MIN_ELEMENTS = 1 << 16   # weights smaller than this are not looked for among the program's buffers

_SHAPE = re.compile(r"\b(pred|s4|u4|s8|u8|s16|u16|s32|u32|s64|u64|f16|bf16|f32|f64)\[([0-9,]*)\]")
_ITEM_BITS = {"pred": 8, "s4": 4, "u4": 4, "s8": 8, "u8": 8, "s16": 16, "u16": 16, "s32": 32, "u32": 32,
              "s64": 64, "u64": 64, "f16": 16, "bf16": 16, "f32": 32, "f64": 64}
_KERNEL = re.compile(r"= (?:\([^=]*\)|\S+) (fusion|custom-call)\(")


@dataclass
class ProgramReport:
    model: str
    program: str
    kernels: int                  # fusions and library calls a call launches (loop bodies counted once)
    loop_kernels: int             # of which inside while loops (launched once per iteration)
    weight_bytes: int             # the weights this program reads, as the device holds them
    file_weight_bytes: int        # the same weights as the file stores them
    temp_bytes: int
    constant_elements: int        # elements of the constants compiled into the program (>= 1024 each)
    widened: list[str] = field(default_factory=list)   # weights some buffer holds wider than stored
    compile_s: float = 0.0
    note: str = ""
    token: "TokenCost | None" = None   # a decode loop's cost per token

    @property
    def ratio(self) -> float:
        return self.weight_bytes / self.file_weight_bytes if self.file_weight_bytes else 1.0

    def problems(self, max_constant_elements: int = MAX_CONSTANT_ELEMENTS) -> list[str]:
        found = []
        if self.ratio > MAX_WEIGHT_RATIO:
            found.append(f"weights {self.ratio:.2f}x the file's")
        copies = [w for w in self.widened if not w.endswith("[product]")]
        if copies:
            found.append(f"{len(copies)} weights held wider than stored")
        if self.constant_elements > max_constant_elements:
            found.append(f"{self.constant_elements} constant elements compiled in")
        return found


# ---- reading XLA's optimized program ------------------------------------------------------------------

def _computations(text: str) -> dict[str, list[str]]:
    """Computation name -> its instruction lines (the optimized HLO module's text)."""
    found: dict[str, list[str]] = {}
    name = None
    for line in text.splitlines():
        header = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{\s*$", line)
        if header and not line.startswith(" "):
            name = "ENTRY" if line.startswith("ENTRY") else header.group(1)
            found[name] = []
        elif name is not None and line.startswith(" "):
            found[name].append(line.strip())
    return found


def _loop_bodies(computations: dict[str, list[str]]) -> set[str]:
    """Computations run as while-loop bodies or conditions (reached from the entry and from each other)."""
    bodies: set[str] = set()
    pending = ["ENTRY"]
    while pending:
        for line in computations.get(pending.pop(), []):
            for kind in ("body", "condition"):
                match = re.search(rf"\b{kind}=%?([\w.\-]+)", line)
                if match and match.group(1) not in bodies:
                    bodies.add(match.group(1))
                    pending.append(match.group(1))
    return bodies


def _elements(dims: str) -> int:
    return int(np.prod([int(d) for d in dims.split(",") if d], dtype=np.int64)) if dims else 1


def weight_list(state: Any, keys: list[tuple[str, Any]]) -> list[tuple[str, int, int]]:
    """(name, elements, bits as held) of the weights behind these params keys (int4 held packed: 4 bits)."""
    found = []
    for key, t in keys:
        param = state.params[key]
        held = np.dtype(param.dtype)
        packed = t.dtype in ("int4", "uint4") and held == np.uint8  # two elements a byte
        bits = 4 if packed or held.name in ("int4", "uint4") else held.itemsize * 8
        elements = int(np.prod(param.shape, dtype=np.int64)) * (2 if packed else 1)  # a stack: every block's
        found.append((t.name + (" (stacked)" if key.startswith("stack ") else ""), elements, bits))
    return found


def _widened_weights(computations: dict[str, list[str]], loops: set[str],
                     weights: list[tuple[str, int, int]]) -> list[str]:
    """Weights that a kernel of the program converts into a buffer of their own size and a wider type: an
    elementwise fusion (no reduction, product or convolution inside) that reads the weight's parameter and writes
    as many elements as the weight has.  (A product whose kernel converts the weight as it reads writes only its
    result.)"""
    params: dict[str, tuple[int, int]] = {}  # parameter instruction -> (elements, bits)
    for line in computations.get("ENTRY", []):
        if " parameter(" in line:
            name, rest = line.split("=", 1)
            match = _SHAPE.search(rest)
            if match:
                params[name.strip().lstrip("%")] = (_elements(match.group(2)), _ITEM_BITS[match.group(1)])
    found = []
    for name, count, bits in weights:
        if count < WIDENED_MIN_ELEMENTS:
            continue
        # the weight's parameter: its elements, or half of them packed two to a byte
        sources = {p for p, (n, b) in params.items() if n == count or (b == 8 and bits == 4 and 2 * n == count)}
        for c in ("ENTRY", *loops):
            for line in computations.get(c, []):
                if " fusion(" not in line or "=" not in line:
                    continue
                head, rest = line.split("=", 1)
                out = _SHAPE.search(rest.split(" fusion(", 1)[0])
                operands = set(re.findall(r"%([\w.\-]+)", rest.split(" fusion(", 1)[1].split(")", 1)[0]))
                body = re.search(r"calls=%?([\w.\-]+)", rest)
                inner = computations.get(body.group(1), []) if body else []
                if (out and _elements(out.group(2)) == count and _ITEM_BITS[out.group(1)] > bits
                        and operands & sources
                        and not any(k in l for l in inner for k in (" reduce(", " dot(", " convolution("))):
                    kind = "product" if _multiplies_by_a_row(inner, count) else "copy"
                    found.append(f"{name} ({bits}-bit, {count} elements)" + (" [product]" if kind == "product" else ""))
                    break
            else:
                continue
            break
    return found


def _multiplies_by_a_row(inner: list[str], count: int) -> bool:
    """Whether a fusion of a weight's size multiplies it by a vector broadcast along its last axis, the axis a
    product contracts: the elementwise half of a one-row product (x * w, summed by the next kernel), which XLA
    writes for some 1x1 convolutions of one pixel, rather than the weight itself widened (a dequantizing
    scale runs along the output channels or the blocks, never along the last axis alone)."""
    for line in inner:
        match = re.search(r"= (\w+)\[([0-9,]*)\][^ ]* broadcast\(.*dimensions=\{(\d+)\}", line)
        if match and _elements(match.group(2)) == count:
            rank = len([d for d in match.group(2).split(",") if d])
            if int(match.group(3)) == rank - 1:
                return True
    return False


def analyze(compiled: Any, weights: list[tuple[str, int, int]]) -> dict[str, Any]:
    """Kernels, constants and widened weights of a compiled program (``jax.stages.Compiled``)."""
    text = compiled.as_text()
    computations = _computations(text)
    loops = _loop_bodies(computations)
    kernels = sum(1 for line in computations.get("ENTRY", []) if _KERNEL.search(line))
    loop_kernels = sum(1 for c in loops for line in computations.get(c, []) if _KERNEL.search(line))
    constants = 0
    for lines in computations.values():
        for line in lines:
            if " constant(" in line:
                match = _SHAPE.search(line.split("=", 1)[1])
                if match and _elements(match.group(2)) >= 1024:
                    constants += _elements(match.group(2))
    widened = _widened_weights(computations, loops, weights)
    stats = compiled.memory_analysis()
    return {"kernels": kernels + loop_kernels, "loop_kernels": loop_kernels,
            "temp_bytes": int(getattr(stats, "temp_size_in_bytes", 0) or 0),
            "constant_elements": constants, "widened": widened}


# ---- litegpu's programs for a model -----------------------------------------------------------------

def file_weight_bytes(model: Any) -> dict[int, int]:
    """Buffer index -> bytes of every constant buffer the model's tensors read, as the file stores it."""
    found: dict[int, int] = {}
    for sg in model.subgraphs:
        for t in sg.tensors:
            if t.raw is not None and t.raw.size and t.buffer > 0:
                found[t.buffer] = int(t.raw.nbytes)
    return found


def _input_specs(sg: Any, tensors: Any, sharding: Any) -> list[Any]:
    import jax

    from litegpu.ir import numpy_dtype

    specs = []
    for i in tensors:
        t = sg.tensors[i]
        shape = tuple(max(int(d), 1) for d in t.shape)
        specs.append(jax.ShapeDtypeStruct(shape, np.dtype(numpy_dtype(t.dtype)), sharding=sharding))
    return specs


def _weights_read(state: Any, sg: Any, ops: Any) -> list[tuple[str, Any]]:
    """(params key, tensor) of the weights a program's ops read."""
    keys: dict[str, Any] = {}
    for op_index in ops:
        op = sg.operators[op_index]
        for i in op.inputs:
            if i < 0:
                continue
            for index in [i, *sg.tensors[i].detail_tensors]:
                key = (state.folded.get((sg.index, index)) or state.param_key.get((sg.index, index))
                       or state.stacked_key.get((sg.index, index))
                       or (state.stack_slice.get((sg.index, index)) or (None,))[0])
                if key is not None and key in state.params:
                    keys.setdefault(key, sg.tensors[index])
    return list(keys.items())


def file_bytes_read(sg: Any, ops: Any, original: Any) -> int:
    """Bytes in the file of the constants that these ops of ``sg`` read (blockwise scales included), counted
    once per buffer.  ``sg`` may be a rewritten subgraph (the float view names a dequantized copy
    ``<name>/dequantized``): each constant is traced back to the original tensor of its name."""
    by_name = {t.name: t for t in original.subgraphs[sg.index].tensors} if sg.index < len(original.subgraphs) else {}
    found: dict[Any, int] = {}

    def count(t: Any) -> None:
        if t.raw is None or not t.raw.size:
            return
        source = by_name.get(t.name) or by_name.get(t.name.rsplit("/", 1)[0]) or t
        if source.raw is not None and source.raw.size:
            found[source.buffer if source.buffer > 0 else id(source)] = int(source.raw.nbytes)
            for index in source.detail_tensors:
                count(original.subgraphs[sg.index].tensors[index])

    for op_index in ops:
        for i in sg.operators[op_index].inputs:
            if i >= 0:
                count(sg.tensors[i])
                for index in sg.tensors[i].detail_tensors:
                    count(sg.tensors[index])
    return sum(found.values())


def programs_of(model: Any, name: str, target: Any, precision: str = "fp32", *, hlo_dir: Path | None = None,
                generation: bool = True, batched_slots: tuple[int, ...] = (),
                positions: tuple[int, ...] = (), signatures: bool = True) -> list[ProgramReport]:
    """Compile every GPU program litegpu makes for ``model`` (an ``ir.Model``) for ``target``; one report each
    (``signatures`` False: the generation programs only)."""
    from litegpu.backends.xla.backend import XlaBackend
    from litegpu.backends.xla.state import XlaState, array_bytes
    from litegpu.compile import CPU, GPU
    from litegpu.compile.float_view import model_for_platform
    from litegpu.compile.plan import plan
    from litegpu.compile.rewrites import rewrite_for_xla
    from litegpu.ops import Target

    xla_ir = rewrite_for_xla(model)
    chosen = plan(xla_ir, GPU | CPU, warn=False, cpu_kernels="builtin")
    whole = not chosen.is_split and chosen.target is Target.XLA_GPU
    compiled_model = model_for_platform(xla_ir, "gpu") if whole else xla_ir
    state = XlaState(compiled_model, target, XlaBackend.storage_dtype(precision))
    jobs: list[tuple[str, Any, Any]] = []  # (program name, backend, (sg, inputs, ops))
    if whole:
        for sig in compiled_model.signatures if signatures else []:
            backend = XlaBackend(compiled_model, sig.subgraph_index, "gpu", precision=precision, state=state)
            sg = compiled_model.subgraphs[sig.subgraph_index]
            for k, part in enumerate(backend.parts or [backend]):
                label = sig.key + (f" part {k + 1}/{len(backend.parts)}" if backend.parts else "")
                jobs.append((label, part, (sg, part.op_range.inputs if part.op_range else sg.inputs,
                                           part.op_range.op_indices if part.op_range else range(len(sg.operators)))))
        if not compiled_model.signatures and signatures:
            backend = XlaBackend(compiled_model, 0, "gpu", precision=precision, state=state)
            sg = compiled_model.subgraphs[0]
            jobs.append(("subgraph 0", backend, (sg, sg.inputs, range(len(sg.operators)))))
    else:
        for p in chosen.partitions:
            if p.target is not Target.XLA_GPU:
                continue
            op_range = p.op_range()
            backend = XlaBackend(compiled_model, p.subgraph_index, "gpu", precision=precision, state=state,
                                 op_range=op_range)
            backend.target = Target.XLA_GPU
            jobs.append((f"subgraph {p.subgraph_index} GPU partition ops {op_range.op_indices[0]}.."
                         f"{op_range.op_indices[-1]}", backend, (compiled_model.subgraphs[p.subgraph_index],
                                                                 op_range.inputs, op_range.op_indices)))
    reports = []
    for label, backend, (sg, inputs, ops) in jobs:
        keys = _weights_read(backend.state, sg, ops)
        weights = weight_list(backend.state, keys)
        started = time.perf_counter()
        try:
            lowered = backend.lower(_input_specs(sg, inputs, backend.state.sharding))
            compiled = lowered.compile(compiler_options=backend.compiler_options)
        except Exception as e:  # report it, go on with the other programs
            reports.append(ProgramReport(name, label, 0, 0, 0, 0, 0, 0, note=f"{type(e).__name__}: {str(e)[:300]}"))
            continue
        found = analyze(compiled, weights)
        if hlo_dir is not None:
            hlo_dir.mkdir(parents=True, exist_ok=True)
            (hlo_dir / f"{name}.{label.replace(' ', '_').replace('/', '-')}.hlo.txt").write_text(compiled.as_text())
        reports.append(ProgramReport(
            name, label, found["kernels"], found["loop_kernels"],
            sum(array_bytes(backend.state.params[k]) for k, _ in keys),
            file_bytes_read(sg, ops, model), found["temp_bytes"], found["constant_elements"],
            found["widened"], time.perf_counter() - started,
            "" if whole else f"split plan: {chosen.summary() if hasattr(chosen, 'summary') else ''}"))
    if whole and generation:
        reports.extend(_generation_programs(model, name, compiled_model, state, precision, hlo_dir, batched_slots,
                                            positions))
    return reports


def _generation_programs(model: Any, name: str, compiled_model: Any, state: Any, precision: str,
                         hlo_dir: Path | None, slots: tuple[int, ...] = (),
                         positions: tuple[int, ...] = ()) -> list[ProgramReport]:
    """The device-side generation loop of an LLM (prefill/decode signatures: ``backends.xla.generate``), and the
    batched decode step of continuous batching at each of ``slots`` sequences (``backends.xla.batched_decode``);
    then the same programs for the cache rows (buckets) that decode at each of ``positions`` attends over."""
    from litegpu.backends.xla.backend import XlaBackend
    from litegpu.backends.xla.state import array_bytes
    from litegpu.backends.xla.batched_decode import deviceless_batched_programs
    from litegpu.backends.xla.generate import DEFAULT_CHUNK, deviceless_generation_programs

    chunk = DEFAULT_CHUNK
    reports = []
    options = XlaBackend(compiled_model, 0, "gpu", precision=precision, state=state).compiler_options
    programs = [(label, lowered, keys, 1, rows) for label, lowered, keys, rows
                in deviceless_generation_programs(compiled_model, state, precision, chunk, positions)]
    programs += deviceless_batched_programs(compiled_model, state, precision, slots) if slots else []
    for position in positions[:1] if slots else ():  # the buckets at the first position (every sequence there)
        programs += deviceless_batched_programs(compiled_model, state, precision, slots, position)
    for label, lowered, keys, sequences, rows in programs:
        started = time.perf_counter()
        compiled = lowered.compile(compiler_options=options)
        sig = next(s for s in compiled_model.signatures if s.key == "decode")
        sg = compiled_model.subgraphs[sig.subgraph_index]
        found = analyze(compiled, weight_list(state, keys))
        if hlo_dir is not None:
            (hlo_dir / f"{name}.{label.replace(' ', '_')}.hlo.txt").write_text(compiled.as_text())
        report = ProgramReport(name, label, found["kernels"], found["loop_kernels"],
                               sum(array_bytes(state.params[k]) for k, _ in keys),
                               file_bytes_read(sg, range(len(sg.operators)), model), found["temp_bytes"],
                               found["constant_elements"], found["widened"], time.perf_counter() - started)
        weights, caches = read_per_token(compiled_model, report, rows)
        if sequences == 1:
            report.token = token_cost(f"{name} {label}", chunk, weights, caches, compiled.as_text())
        else:
            report.token = batched_token_cost(f"{name} {label}", sequences, weights, caches, compiled.as_text())
        reports.append(report)
    return reports


# ---- per decode token: launches, host-driven loop iterations, bytes, an estimate -------------------

LAUNCH_US = 3.0                # a kernel or command-buffer launch from the host (2-4 us on a recent GPU)
BANDWIDTH_GBS = 3440.0         # the H200's measured copy bandwidth (BENCHMARKS.md "Fourth run": 3395-3479 GB/s)
_THUNK_LINE = re.compile(r"^(\s*)(\d+): (k\w+)")


@dataclass
class Thunk:
    id: int
    kind: str
    indent: int
    condition: list["Thunk"] = field(default_factory=list)
    body: list["Thunk"] = field(default_factory=list)   # a loop's body, or what a command buffer captured
    _section: str = "body"


def thunk_tree(text: str) -> list[Thunk]:
    """The thunks of XLA's ``*.thunk_sequence_after_thunk_passes.txt``, nested as the file indents them (a
    ``kWhile``'s ``condition:`` and ``body:``, a ``kCommandBuffer``'s captured thunks)."""
    root, pending = Thunk(-1, "root", -1), None
    stack = [root]
    for line in text.splitlines():
        if line.strip() in ("condition:", "body:"):
            pending = line.strip()[:-1]
            continue
        match = _THUNK_LINE.match(line)
        if not match:
            continue
        node = Thunk(int(match.group(2)), match.group(3), len(match.group(1)))
        while stack[-1].indent >= node.indent:
            stack.pop()
        parent = stack[-1]
        if pending and parent.kind == "kWhile":
            parent._section, pending = pending, None
        (parent.condition if parent.kind == "kWhile" and parent._section == "condition" else parent.body).append(node)
        stack.append(node)
    return root.body


def _trip_counts(thunk_metadata: str, hlo_text: str) -> dict[int, int]:
    """thunk id -> the known trip count of the while loop it runs (from its HLO instruction's backend config)."""
    names = dict(re.findall(r'profile_annotation: "([^"]+)"\s*thunk_id: (\d+)', thunk_metadata))
    trips = {m.group(1): int(m.group(2)) for m in
             re.finditer(r'%([\w.\-]+) = .*? while\(.*?known_trip_count":\{"n":"(\d+)"', hlo_text)}
    return {int(i): trips[n] for n, i in names.items() if n in trips}


def launches(thunks: list[Thunk], trips: dict[int, int]) -> tuple[int, int]:
    """(launches from the host, host-driven loop iterations) of running ``thunks`` once: a command buffer is
    one launch whatever it holds; a loop outside one runs its body once per iteration (its condition too, and a
    wait for it, where XLA does not know the trip count: counted as two launches)."""
    total = iterations = 0
    for t in thunks:
        if t.kind != "kWhile":
            total += 1
            continue
        trip = trips.get(t.id)
        body, inner = launches(t.body, trips)
        condition = launches(t.condition, trips)[0] + 1 if trip is None else 0
        trip = trip or 1  # unknown: counted once (the figure is then a floor)
        total += trip * (body + condition)
        iterations += trip * (1 + inner)
    return total, iterations


def graph_iterations(thunks: list[Thunk], trips: dict[int, int], inside: bool = False) -> int:
    """Loop iterations that command buffers drive on the device (CUDA graphs' conditional nodes) in running
    ``thunks`` once: no host launch each, but not free either, so the table shows them beside the launches."""
    total = 0
    for t in thunks:
        if t.kind == "kCommandBuffer":
            total += graph_iterations(t.body, trips, True)
        elif t.kind == "kWhile":
            total += (trips.get(t.id) or 1) * (int(inside) + graph_iterations(t.body, trips, inside))
    return total


@dataclass
class TokenCost:
    model: str
    launches: float               # per token, from the host
    loop_iterations: float        # host-driven loop iterations per token
    weight_bytes: int             # what a token reads of the weights (the embedding table: one row)
    cache_bytes: int              # and of the KV caches (the exported graph reads every row)
    graph_iterations: float = 0.0  # loop iterations per token run inside command buffers (no host launch)

    def bound_ms(self, bandwidth_gbs: float = BANDWIDTH_GBS) -> float:
        """Reading the bytes at the bandwidth."""
        return (self.weight_bytes + self.cache_bytes) / (bandwidth_gbs * 1e9) * 1e3

    def estimate_ms(self, bandwidth_gbs: float = BANDWIDTH_GBS, launch_us: float = LAUNCH_US) -> float:
        """The bound plus the launches, one after the other."""
        return self.bound_ms(bandwidth_gbs) + self.launches * launch_us / 1e3


def token_cost(name: str, chunk: int, weight_bytes: int, cache_bytes: int, hlo_text: str) -> TokenCost | None:
    """The per-token figures of the decode loop just compiled (its dump in ``THUNK_DUMP``); None without one."""
    found = sorted(THUNK_DUMP.glob("*_steps.thunk_sequence_after_thunk_passes.txt"), key=lambda f: f.stat().st_mtime)
    if not found:
        return None
    sequence = found[-1]
    metadata = sequence.with_name(sequence.name.replace("thunk_sequence_after_thunk_passes", "thunk_metadata"))
    trips = _trip_counts(metadata.read_text() if metadata.exists() else "", hlo_text)
    top = thunk_tree(sequence.read_text())
    loop = next((t for t in top if t.kind == "kWhile" and trips.get(t.id) == chunk), None)
    if loop is None:  # inside a command buffer (loops in command buffers): the whole chunk's launches, shared
        if not any(_holds_loop(t, trips, chunk) for t in top):
            return None
        total, iterations = launches(top, trips)
        return TokenCost(name, total / chunk, iterations / chunk, weight_bytes, cache_bytes,
                         graph_iterations(top, trips) / chunk)
    outside, outside_iterations = launches([t for t in top if t is not loop], trips)
    body, body_iterations = launches(loop.body, trips)
    return TokenCost(name, body + outside / chunk, body_iterations + outside_iterations / chunk, weight_bytes,
                     cache_bytes, graph_iterations(top, trips) / chunk)


def _holds_loop(thunk: Thunk, trips: dict[int, int], chunk: int) -> bool:
    """Whether ``thunk`` is, or holds, the decode loop (the while loop of ``chunk`` iterations)."""
    if thunk.kind == "kWhile" and trips.get(thunk.id) == chunk:
        return True
    return any(_holds_loop(t, trips, chunk) for t in thunk.condition + thunk.body)


def batched_token_cost(name: str, sequences: int, weight_bytes: int, cache_bytes: int,
                       hlo_text: str) -> TokenCost | None:
    """The per-token figures of the batched decode step just compiled, one token for each of ``sequences``: its
    launches and the weights it reads shared by them, each token reading its own cache."""
    found = sorted(THUNK_DUMP.glob("*_steps.thunk_sequence_after_thunk_passes.txt"), key=lambda f: f.stat().st_mtime)
    if not found:
        return None
    sequence = found[-1]
    metadata = sequence.with_name(sequence.name.replace("thunk_sequence_after_thunk_passes", "thunk_metadata"))
    top, trips = thunk_tree(sequence.read_text()), _trip_counts(metadata.read_text() if metadata.exists() else "",
                                                                  hlo_text)
    total, iterations = launches(top, trips)
    return TokenCost(name, total / sequences, iterations / sequences, weight_bytes // sequences, cache_bytes,
                     graph_iterations(top, trips) / sequences)


def _constants_behind(sg: Any, made_by: dict, index: int) -> list[Any]:
    """The constants of a table's size that ``index`` is computed from elementwise (itself, or through
    DEQUANTIZE, scaling, reshapes: a quantized embedding table made float)."""
    size, found, todo = sg.tensors[index].num_elements, [], [index]
    while todo:
        t = todo.pop()
        if t < 0 or sg.tensors[t].num_elements != size:
            continue
        if sg.tensors[t].has_data:
            found.append(sg.tensors[t])
        elif t in made_by and made_by[t].opcode_name in ("DEQUANTIZE", "MUL", "RESHAPE", "CAST"):
            todo.extend(made_by[t].inputs)
    return found


def read_per_token(model: Any, report: ProgramReport, rows: int | None = None) -> tuple[int, int]:
    """(weight bytes, KV-cache bytes) a decode token reads: every weight the decode program holds but an
    embedding table (an EMBEDDING_LOOKUP / GATHER reads one row of it), and every row of every cache (inputs the
    decode signature also returns), or their first ``rows`` rows where the program attends over a bucket (its
    attention reads the caches cut to them: ``backends.xla.kv_rows``; counted from the model, as the rest)."""
    sig = next(s for s in model.signatures if s.key == "decode")
    sg = model.subgraphs[sig.subgraph_index]
    outputs = {t.name for t in sig.outputs}
    from litegpu.ir import numpy_dtype
    from litegpu.ir.dtypes import storage_bytes

    cache = sum(sg.tensors[t.tensor_index].num_elements * np.dtype(numpy_dtype(sg.tensors[t.tensor_index].dtype))
                .itemsize for t in sig.inputs if t.name in outputs)
    made_by = {out: op for op in sg.operators for out in op.outputs}
    looked_up = 0
    for op in sg.operators:
        if op.opcode_name not in ("EMBEDDING_LOOKUP", "GATHER"):
            continue
        table = op.inputs[1] if op.opcode_name == "EMBEDDING_LOOKUP" else op.inputs[0]
        for t in _constants_behind(sg, made_by, table):  # a table made float (DEQUANTIZE, scales) is read a row
            looked_up += storage_bytes(t.dtype, t.num_elements) * (1 - 1 / max(1, t.shape[0]))
    if rows is not None:
        cache = cache * rows // _cache_length(model)
    return int(report.weight_bytes - looked_up), int(cache)


def _cache_length(model: Any) -> int:
    from litegpu.backends.xla.generate import decode_layout

    return decode_layout(model).max_len


# ---- the table --------------------------------------------------------------------------------------

def _mb(n: int) -> str:
    return f"{n / 1e6:.2f}"


def markdown(reports: list[ProgramReport], max_constant_elements: int) -> str:
    lines = ["| model | program | kernels (in loops) | weights on device MB | in file MB | ratio | temporaries MB "
             "| constant elements | held wider than stored | compile s |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|---:|"]
    for r in reports:
        if r.note and not r.kernels:
            lines.append(f"| {r.model} | {r.program} | failed: {r.note} | | | | | | | |")
            continue
        widened = ", ".join(r.widened[:3]) + (f" (+{len(r.widened) - 3})" if len(r.widened) > 3 else "") or "none"
        lines.append(f"| {r.model} | {r.program} | {r.kernels} ({r.loop_kernels}) | {_mb(r.weight_bytes)} | "
                     f"{_mb(r.file_weight_bytes)} | {r.ratio:.2f} | {_mb(r.temp_bytes)} | {r.constant_elements} | "
                     f"{widened} | {r.compile_s:.1f} |")
    return "\n".join(lines)


def token_markdown(reports: list[ProgramReport], bandwidth_gbs: float, launch_us: float) -> str:
    lines = [f"| model | launches / token | host-driven loop iterations / token | loop iterations in command buffers "
             f"/ token | weights read GB | KV cache read GB | bound ms ({bandwidth_gbs:.0f} GB/s) "
             f"| estimate ms (+{launch_us:g} us a launch) | estimate / bound |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in reports:
        if r.token:
            t = r.token
            bound, estimate = t.bound_ms(bandwidth_gbs), t.estimate_ms(bandwidth_gbs, launch_us)
            lines.append(f"| {t.model} | {t.launches:.1f} | {t.loop_iterations:.1f} | {t.graph_iterations:.1f} | "
                         f"{t.weight_bytes / 1e9:.3f} | "
                         f"{t.cache_bytes / 1e9:.3f} | {bound:.3f} | {estimate:.3f} | {estimate / bound:.3f} |")
    return "\n".join(lines) if len(lines) > 2 else ""


def _decoder_name(weights: str, args: argparse.Namespace) -> str:
    return f"decoder_{weights}_L{args.layers}_W{args.width}_C{args.max_len}"


def _decoder(weights: str, args: argparse.Namespace) -> Any:
    from decoder_model import DecoderConfig, build_decoder

    return build_decoder(DecoderConfig(layers=args.layers, width=args.width, heads=args.heads, vocab=args.vocab,
                                       max_len=args.max_len, prefill_len=args.prefill_len, weights=weights))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", help=".tflite files")
    parser.add_argument("--decoders", nargs="*", default=[], metavar="WEIGHTS",
                        help="bench/models/decoder_model.py decoders made in memory: float32 float16 int8 int4")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--max-len", type=int, default=256)
    parser.add_argument("--prefill-len", type=int, default=16)
    parser.add_argument("--precision", default="fp32", choices=("fp32", "fp16", "fp16_fp32_accum"))
    parser.add_argument("--target", default="h100", help="a GPU description in litegpu/backends/xla/targets")
    parser.add_argument("--host", action="store_true", help="lower with the GPU's rules, compile for the host CPU "
                        "(no CUDA plugin needed; kernels and temporaries are then the CPU's)")
    parser.add_argument("--no-generation", action="store_true", help="skip the LLM generation-loop programs")
    parser.add_argument("--generation-only", action="store_true",
                        help="only the LLM generation-loop programs (not each signature's)")
    parser.add_argument("--batched-slots", type=int, nargs="*", default=[8, 32, 64],
                        help="sequences of continuous batching's decode step to compile for LLMs (none: skip it)")
    parser.add_argument("--positions", type=int, nargs="*", default=[128, 2048],
                        help="decode positions whose cache bucket's programs to compile too (backends.xla.kv_rows; "
                        "the batched decode's at the first)")
    parser.add_argument("--max-constant-elements", type=int, default=MAX_CONSTANT_ELEMENTS)
    parser.add_argument("--bandwidth-gbs", type=float, default=BANDWIDTH_GBS, help="for the per-token estimate")
    parser.add_argument("--launch-us", type=float, default=LAUNCH_US, help="for the per-token estimate")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--hlo", type=Path, help="write each optimized program's HLO text into this folder")
    args = parser.parse_args(argv)

    from litegpu.backends.xla.deviceless import DevicelessTarget
    from litegpu.ir import read_model

    target = DevicelessTarget.host() if args.host else DevicelessTarget.cuda(args.target)
    print(f"target: {target.device_kind}, precision {args.precision}", flush=True)
    sources: list[tuple[str, Any]] = [(Path(p).stem, lambda p=p: read_model(p)) for p in args.models]
    sources += [(_decoder_name(w, args), lambda w=w: _decoder(w, args)) for w in args.decoders]
    reports: list[ProgramReport] = []
    for label, load in sources:
        model = load()
        found = programs_of(model, label, target, args.precision, hlo_dir=args.hlo,
                            generation=not args.no_generation, batched_slots=tuple(args.batched_slots),
                            positions=tuple(args.positions), signatures=not args.generation_only)
        for r in found:
            flag = "; ".join(r.problems(args.max_constant_elements)) or "ok"
            print(f"  {r.model} {r.program}: {r.kernels} kernels ({r.loop_kernels} in loops), weights "
                  f"{_mb(r.weight_bytes)} MB on device / {_mb(r.file_weight_bytes)} MB in file, temporaries "
                  f"{_mb(r.temp_bytes)} MB, {r.constant_elements} constant elements, compile {r.compile_s:.1f} s: "
                  f"{r.note or flag}", flush=True)
        reports.extend(found)
    print()
    print(markdown(reports, args.max_constant_elements))
    per_token = token_markdown(reports, args.bandwidth_gbs, args.launch_us)
    if per_token:
        print("\nPer decode token (the decode loop, and the batched decode's step shared by its sequences; bytes: "
              "weights but the embedding table's other rows, every KV cache row):\n")
        print(per_token)
    if args.json:
        args.json.write_text(json.dumps([{**asdict(r), "ratio": r.ratio,
                                          "problems": r.problems(args.max_constant_elements)} for r in reports],
                                        indent=1))
    return 1 if any(r.problems(args.max_constant_elements) or (r.note and not r.kernels) for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
