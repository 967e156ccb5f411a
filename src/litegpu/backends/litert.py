"""The LiteRT engine: the official interpreter with its default XNNPACK delegate, for the models it runs fastest.

Measured on the development machines (BENCHMARKS.md, "CPU engines side by side"), no engine litegpu has
comes near XNNPACK on small models: a call costs XNNPACK about 4 us, OpenVINO about 40 us and a jitted
XLA program about 70 us, and OpenVINO is slower than XNNPACK on small mobile CNNs; on integer models
XNNPACK's int8 kernels are 2.4x faster than the exact kernels on XLA and closer to the builtin kernels
than OpenVINO's.  So the planner may give the official runtime (``ai-edge-litert``) a whole model, or the
OpenVINO partition of a split model, where timing says it is faster (``faster_than``; the planner keeps the verdict):

- **Support** is the official interpreter's own answer: the model is loaded and its tensors allocated
  (which applies the XNNPACK delegate); a model it cannot load (custom ops it lacks) is refused as a whole
  with its message.  Settings it cannot honour (bf16, ``quantized_execution="exact"`` on integer ops) and
  weights it would copy (past 2 GiB) or run on slow kernels (sub-byte weights other than int4 FULLY_CONNECTED
  weights, ``sub_byte_refusal``) refuse it before loading; custom ops
  registered from Python run in litegpu only.
- **Compile** creates one interpreter per model, shared by the model's signatures so that resource
  variables keep one state, with the thread count asked for (the official default is one thread; litegpu's
  default, ``num_threads=0``, means the physical cores); a part of a subgraph is cut out as a sub-model
  (``ir.extract``) with an interpreter of its own.  XNNPACK packs the weights at the first run: nothing to
  cache but the timing verdict.
- **Run** writes the inputs into the interpreter, invokes it and copies the outputs out (the next run would
  overwrite them), through the interpreter's per-subgraph entry points: a signature on any subgraph costs
  what subgraph 0 does.  New input shapes resize the interpreter's inputs.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from itertools import repeat
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import numpy as np

from .._lazy import LazyLogger
from ..errors import EngineCompileError, LiteGpuError, ModelExecutionError
from ..ir.dtypes import numpy_dtype
from ..ops import Target
from .engine import (SUB_BYTE_DTYPES, Engine, EngineContext, EngineSettings, Executable, cpu_name, installed_version,
                     integer_arithmetic, physical_cores)
from .op_range import OpRange
from .memory import host_available_bytes

if TYPE_CHECKING:  # annotations only: a warm start does not load the IR's classes
    from ..ir import Model

log = LazyLogger(__name__)

# XNNPACK packs a copy of the weights: models past this size stay on XLA, which maps the weights in place
# (the 1.3x memory goal of models past 2 GB).  Below it, XNNPACK takes a model where the host has room for its
# copy (PACKED_COPY_ROOM x the weights available): a 1.2 GB wav2vec2-style model ran in 184 ms there against
# XLA's 354 ms, when the bound was 1 GiB (issue 26).
MAX_LITERT_MODEL_BYTES = 2 << 30
PACKED_COPY_ROOM = 3
# Models up to this many multiply-accumulates per run have their thread count timed: one thread against the count
# asked for (by default the physical cores).  On ops this small XNNPACK's second thread can cost more than it
# saves (the work of an op too small to share out); the bound keeps the timing at most about 0.1 s of a
# first start (a 50 M model runs in about 1-3 ms here), and bigger models share their work well.
THREAD_CHOICE_MAX_MACS = 50_000_000
# How long the two thread counts are timed (rounds alternating, at least three): a tenth of the engines' timing
# budget, as the first start of every small model pays it (the bundled face detector's first start was twice its
# warm start with 0.3 s here), and both candidates are the same engine on the same model.
THREAD_TIMING_S = 0.1
# The other engine must beat the official interpreter by more than this to run the model: within it the timed
# choice flipped from run to run (MediaPipe hand and face, EfficientNet-B0, DenseNet121 batch 1: the engines
# within ~5 % there), and a tie is better given to the official default, whose outputs are the reference and
# whose warm start imports no other engine: a second start on OpenVINO pays its import and its compiled blob's,
# 0.1-0.25 s of CPU, 1.5-2x the official interpreter's whole process on the hand landmark and the transformer
# encoder (BENCHMARKS.md, "Start-up: OpenVINO's warm start").  5 %, not the 10 % that issue 38's rule (no model
# under 0.9x of the faster engine's steady call) would allow with an exact timing: a first start's median of six
# to nine rounds is a few per cent off the steady ratio, so a 10 % margin kept Keras MobileNetV2 at batch 8 on
# XNNPACK in five first starts of five (timed medians 0.91-0.96 of XNNPACK's; OpenVINO alone 0.83-0.89 of it:
# 0.89 of the faster engine, under the bar).  Half the bar's room is left to the timing's error.
TIE_MARGIN = 0.05
# One thread against the count asked for: a tie (within this) goes to one thread, the same time on a fraction of the
# CPU; the engines' TIE_MARGIN (start-up counted) would give a model one thread where two run it faster by as much.
THREAD_TIE_MARGIN = 0.03
# A timing whose rounds cannot tell the engines apart (``_clear_verdict``) is followed by another, up to
# CLOSE_TIMINGS in all, their rounds pooled; still undecided, the official interpreter keeps the model (issue 38).
# On the loaded development machine one timing's verdict flipped from start to start (a 2.3 ms model's rounds
# took 2-40 ms, either engine faster in any round: MnasNet 0.5 went to OpenVINO in two first starts of three,
# 2.3x slower alone there), and the compile cache kept whichever the first start found.
CLOSE_TIMINGS = 3
# A verdict needs this many rounds, pooled over timings: a big model's timing has ``timed_rounds``' minimum of three,
# whose median is one round's time.  At load 10, one first start of ConvNeXt-tiny in three kept XNNPACK on three
# rounds, 2x slower alone there than OpenVINO, and the compile cache kept it (issue 38).
MIN_VERDICT_ROUNDS = 6
# A tie is no verdict for the official interpreter where, in a quarter of the rounds, the other engine was faster by
# more than this (the 0.9x that issue 38 allows): rounds that disagree that much are the load's, and more of them
# are timed (``_clear_verdict``).
FAR_AHEAD = 2 * TIE_MARGIN
# Still undecided after CLOSE_TIMINGS, the official interpreter keeps the model unless the pooled rounds' median has
# the other engine faster by more than this: a near tie stays where it holds from start to start (the verdict is not
# kept either way, ``Verdict.decided``).  At load 14, ConvNeXt-tiny's nine pooled rounds had OpenVINO's median
# 0.81-0.88x XNNPACK's, either engine faster in a third of them.  A median within TIE_MARGIN is already a verdict
# for the official interpreter, so with the same margin what stays undecided goes to the engine with the faster
# median.
UNDECIDED_MARGIN = TIE_MARGIN


@functools.lru_cache(maxsize=1)
def _interpreter_module() -> Any:
    from ai_edge_litert import interpreter

    return interpreter


def litert_version() -> str:
    """The official package's version, read without importing it (a warm start planned on OpenVINO does not
    load the interpreter)."""
    return installed_version("ai_edge_litert", "ai-edge-litert")


def thread_count(settings: EngineSettings) -> int:
    """``num_threads=0`` is litegpu's default, the physical cores; the official interpreter's would be one thread."""
    return settings.num_threads if settings.num_threads > 0 else physical_cores()


class LiteRtEngine(Engine):
    """Models on the official interpreter: one interpreter per model, shared by its signatures, and one per
    part of a split model cut out as a sub-model."""

    name, target = "litert", Target.LITERT

    def __init__(self, settings: EngineSettings | None = None, file: str | None = None, cache: Any = None,
                 cache_key: dict | None = None):
        self.settings = settings or EngineSettings()
        # where the planner keeps the verdict of ``faster_than``, so that a warm start does not time the engines again
        self.cache, self.cache_key = cache, dict(cache_key or {})
        # The model's file, read by the interpreter as it is (no copy); in-memory models are written out.
        self.file = file
        self._interpreters: dict[tuple[int, OpRange | None], _SharedInterpreter] = {}  # (id(model), part)
        self._refusals: dict[int, str | None] = {}

    @classmethod
    def create(cls, settings: EngineSettings | None, context: EngineContext) -> "LiteRtEngine":
        return cls(settings, file=context.file, cache=context.cache, cache_key=context.cache_key)

    def available(self) -> bool:
        try:
            _interpreter_module()
            return True
        except ImportError:
            return False

    def installed(self) -> bool:
        """Asked without importing the package (60 ms): a warm start planned on OpenVINO does not load it."""
        import importlib.util

        return importlib.util.find_spec("ai_edge_litert") is not None

    def describe(self) -> str:
        return f"ai-edge-litert {litert_version()} (the official interpreter, XNNPACK delegate)"

    # ---- support ----------------------------------------------------------------------------
    def unsupported(self, model: Model, subgraph: int, op_indices: Sequence[int]) -> dict[int, str]:
        """For a whole subgraph the whole model's verdict (``model_refusal``) on every op; a part of one runs as
        a sub-model (which may load where the whole model does not: a custom op left out), whose own refusal
        ``compile`` raises."""
        sg = model.subgraphs[subgraph]
        whole = sorted(op_indices) == list(range(len(sg.operators)))
        reason = self.model_refusal(model) if whole else self.settings_refusal(model)
        return {i: reason for i in op_indices} if reason is not None else {}

    @classmethod
    def max_model_bytes(cls) -> int | None:
        return MAX_LITERT_MODEL_BYTES

    def model_refusal(self, model: Model) -> str | None:
        """Why the official interpreter cannot run ``model`` as a whole (None: it can)."""
        if id(model) not in self._refusals:
            self._refusals[id(model)] = self._find_refusal(model)
        return self._refusals[id(model)]

    def _find_refusal(self, model: Model) -> str | None:
        from ..ir.save import format_refusal

        reason = self.settings_refusal(model)
        # a model the interpreter reads from its .tflite file is TFLite; one from memory may hold circle-only parts
        if reason is None and self.file is None and (not_tflite := format_refusal(model)) is not None:
            reason = f"the official interpreter reads TFLite only: {not_tflite}"
        if reason is not None:
            return reason
        try:
            self.interpreter(model)
        except EngineCompileError as e:
            return str(e)
        except ImportError as e:  # installed (``installed``), but broken here
            return f"ai-edge-litert is installed but cannot be imported: {e}"
        return None

    def settings_refusal(self, model: Model) -> str | None:
        """Why the official interpreter may not run ``model`` or a part of it, before loading it: settings it
        cannot honour, weights it would copy or run slowly, custom ops that live in litegpu only."""
        if self.settings.precision != "fp32":
            return f"the official interpreter computes in fp32 here, not {self.settings.precision}"
        weights = constant_bytes(model)
        if weights > MAX_LITERT_MODEL_BYTES:
            return (f"the model's weights pass {MAX_LITERT_MODEL_BYTES >> 20} MiB: XLA maps them in place, "
                    "XNNPACK would pack a copy")
        room = host_available_bytes() if weights > (256 << 20) else None
        # a model whose zero int4 blocks are rewritten for XNNPACK is held once more, in memory
        copies = PACKED_COPY_ROOM + (1 if room is not None and has_empty_blocks(model) else 0)
        if room is not None and room[0] < copies * weights:
            return (f"the model's weights ({weights / 2**30:.2f} GiB) and XNNPACK's packed copy of them need more "
                    f"than the {room[0] / 2**30:.1f} GiB this process can still get ({room[1]}): XLA maps them "
                    "in place")
        sub_byte = sub_byte_refusal(model)
        if sub_byte is not None:
            return sub_byte
        if self.settings.exact_integers and any(integer_arithmetic(sg, op) for sg in model.subgraphs
                                                for op in sg.operators):
            return ("integer arithmetic with CpuOptions(quantized_execution=\"exact\"): kept on the exact TFLite "
                    "kernels (XNNPACK's are a few units from the builtin ones)")
        python_ops = _python_custom_ops(model)
        if python_ops:
            return f"custom ops registered from Python ({', '.join(sorted(python_ops))}) run in litegpu only"
        return None

    # ---- compile ----------------------------------------------------------------------------
    def interpreter(self, model: Model, part: OpRange | None = None) -> "_SharedInterpreter":
        """The model's one interpreter, or ``part`` cut out as a sub-model in one of its own (created, tensors
        allocated, on first use)."""
        key = (id(model), part)
        if key not in self._interpreters:
            target, file = (model, self.file) if part is None else (_sub_model(model, part), None)
            cleared = with_empty_blocks_cleared(target)
            if cleared is not target:  # the interpreter reads the rewritten model from memory
                target, file = cleared, None
            threads = self.threads_for(target, file, "whole model" if part is None else str(part))
            self._interpreters[key] = _SharedInterpreter(target, file, threads)
        return self._interpreters[key]

    def threads_for(self, model: Model, file: str | None, scope: str) -> int:
        """The thread count of the interpreter over ``model``: the count asked for (by default the physical
        cores), or one thread on a small model (``THREAD_CHOICE_MAX_MACS``) where timing the two says one is
        as fast: never more than asked.  The verdict is kept in the compile cache (``scope`` names the model
        or its part)."""
        cores = thread_count(self.settings)
        if cores == 1:
            return cores
        from ..ir.macs import model_macs

        if model_macs(model) > THREAD_CHOICE_MAX_MACS:
            return cores
        from .cache import found_or_made

        key = self._threads_key(scope, cores)
        if self.untimed:  # the count asked, unless a count was kept (``Engine.untimed``)
            kept = self._stored_thread_count(key, cores) if key is not None else None
            self.choice_pending = self.choice_pending or kept is None
            return kept or cores

        def timed() -> int:
            threads = _timed_thread_count(model, file, cores)
            if key is not None:
                self.cache.store(key, str(threads).encode(), {"engine": "litert", "what": "thread count",
                                                              "source": model.source, "scope": scope})
            return threads

        return found_or_made(self.cache, key, lambda: self._stored_thread_count(key, cores), timed)

    def _stored_thread_count(self, key: str | None, cores: int) -> int | None:
        stored = self.cache.load(key) if key is not None else None
        return int(stored) if stored is not None and stored.isdigit() and int(stored) in (1, cores) else None

    def _threads_key(self, scope: str, cores: int) -> str | None:
        if self.cache is None:
            return None
        from .cache import make_key

        return make_key({**self.cache_key, "threads for": scope, "litert": litert_version(), "cores": cores,
                         "cpu": cpu_name()})

    def compile(self, model: Model, op_range: OpRange, settings: EngineSettings, cache: Any = None,
                cache_key: dict | None = None) -> "LiteRtExecutable":
        """An entry subgraph runs on the model's interpreter; a part of one as a sub-model (ports renamed
        ``t<index>`` by ``ir.extract``)."""
        refused = self.unsupported(model, op_range.subgraph, op_range.op_indices)
        if refused:
            raise EngineCompileError(f"{model.source}: the official interpreter cannot run {op_range}: "
                                     f"{next(iter(refused.values()))}")
        sg = model.subgraphs[op_range.subgraph]
        whole = sorted(op_range.op_indices) == list(range(len(sg.operators))) and \
            set(op_range.inputs) == set(sg.inputs) and set(op_range.outputs) <= set(sg.outputs)
        if whole:
            return LiteRtExecutable(self.interpreter(model), op_range, model)
        shared = self.interpreter(model, op_range)
        from ..ir.extract import port_tensor_index

        index = {port_tensor_index(t.name): t.index for t in shared.model.subgraphs[0].tensors}
        return LiteRtExecutable(shared, op_range, model, ports=index)

    def forget(self, model: Model, part: OpRange | None = None) -> None:
        """Drop the interpreters made for ``model`` (only the one of ``part``, when given)."""
        for key in [k for k in self._interpreters if k[0] == id(model) and (part is None or k[1] == part)]:
            del self._interpreters[key]

    def reset_variables(self) -> None:
        """Resource variables of every model this engine runs go back to their initial values."""
        for shared in self._interpreters.values():
            shared.reset_variables()

    def file_record(self, executable: Any, file: str) -> dict | None:
        """The thread count of an interpreter over ``file`` as it is (not a sub-model, not a rewritten or converted
        copy), running one of its entry subgraphs whole."""
        shared = getattr(executable, "shared", None)
        if not isinstance(executable, LiteRtExecutable) or shared.file is None \
                or os.path.abspath(shared.file) != os.path.abspath(file) \
                or executable._subgraph != executable.op_range.subgraph:
            return None
        return {"threads": shared.threads}

    def from_file_record(self, file: str, model: Any, record: dict, subgraph: int) -> "LiteRtExecutable":
        """The interpreter over ``file`` with the recorded thread count (one for all the subgraphs, as
        ``interpreter`` makes it), running ``subgraph`` whole."""
        key = (id(model), None)
        if key not in self._interpreters:
            self._interpreters[key] = _SharedInterpreter(model, file, int(record["threads"]))
        sg = model.subgraphs[subgraph]
        whole = OpRange(subgraph, tuple(range(sg.num_ops)), tuple(sg.inputs), tuple(sg.outputs))
        return LiteRtExecutable(self._interpreters[key], whole, model)

    # ---- the planner's questions ----------------------------------------------------------------
    def compile_cache(self) -> tuple[Any, dict]:
        return self.cache, self.cache_key

    def version(self) -> str:
        return litert_version()

    def faster_than(self, model: Model, op_ranges: Sequence[OpRange], other: Engine, scope: str) -> str:
        """"litert" or ``other.name``: which engine runs these partitions (``scope`` names them: the whole
        model, or one partition) faster, timed alternately on sample inputs (the planner keeps the verdict,
        ``compile.timing_memo``, where it is decided: ``Verdict.decided``)."""
        from .timing import sample_inputs, timed_rounds

        inputs = [sample_inputs(model, r) for r in op_ranges]
        try:
            ours = [(self.compile(model, r, self.settings), x) for r, x in zip(op_ranges, inputs)]
        except EngineCompileError as e:
            log.info("%s: %s", model.source, e)
            return other.name
        candidates = {"litert": ours, other.name: [(other.compile(model, r, other.settings, other.cache,
                                                                  other.cache_key), x)
                                                   for r, x in zip(op_ranges, inputs)]}
        winner = _verdict_that_holds(lambda: timed_rounds(candidates), model.source, scope)
        if winner != "litert":
            for r in op_ranges:
                self.forget(model, r)  # a sub-model's interpreter (the whole model's goes with the plan)
        return winner


# One redirection of the process's stderr at a time (it is process-wide).
_STDERR_LOCK = threading.Lock()


@contextlib.contextmanager
def native_info_logs_dropped() -> Iterator[None]:
    """The official library's C++ logging writes "INFO: Created TensorFlow Lite XNNPACK delegate for CPU." on the
    process's stderr the first time an interpreter is allocated: its voice in the user's terminal, on every
    ``litegpu run`` and first load.  While this block runs, file descriptor 2 points at a temporary file; after
    it, whatever was caught goes back to stderr except its ``INFO:`` lines (warnings and errors, the library's or
    another thread's, still reach the user, late by the length of the block).  ``LITEGPU_DEBUG=1`` leaves
    stderr alone, INFO lines included."""
    if os.environ.get("LITEGPU_DEBUG"):
        yield
        return
    with _STDERR_LOCK:
        try:
            sys.stderr.flush()
            saved = os.dup(2)
        except (OSError, ValueError):  # no stderr to redirect (closed, or not a file descriptor)
            yield
            return
        import tempfile

        caught = tempfile.TemporaryFile()
        try:
            os.dup2(caught.fileno(), 2)
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            kept = [line for line in caught.read().splitlines(keepends=True) if not line.startswith(b"INFO:")]
            caught.close()
            _write_all(2, b"".join(kept))


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


class Verdict(str):
    """An engine's name as a timing's verdict: ``decided`` False where its rounds could not tell the engines
    apart and the official interpreter keeps the model by default (``_verdict_that_holds``): such a verdict is
    not kept in the compile cache, or a loaded moment's default would hold for good."""

    decided: bool

    def __new__(cls, name: str, decided: bool = True) -> "Verdict":
        verdict = super().__new__(cls, name)
        verdict.decided = decided
        return verdict


def _clear_verdict(rounds: dict[str, list[float]]) -> str | None:
    """The engine that ``timing.timed_rounds``' rounds show faster, or None where they cannot tell.

    Fewer than ``MIN_VERDICT_ROUNDS`` rounds cannot tell.  Compared round by round (``timing.paired_ratios``), the
    other engine wins only where it beats the official
    interpreter by more than ``TIE_MARGIN`` in three rounds of four (the upper quartile of its time over the
    interpreter's); the interpreter keeps the model where it wins or ties in half the rounds or more (the
    median) and the other engine is not far ahead (``FAR_AHEAD``) in a quarter of them (the lower quartile): a tie
    goes to it, as its outputs are the official default's and a warm start need not import the other engine.
    Between the two, the load made the rounds disagree: a median alone gave a verdict that a moment's load had
    chosen (Keras MobileNetV2 b8 at load 9: six rounds with OpenVINO 1.6x slower in some and 0.75x in others kept
    XNNPACK, 0.87x of OpenVINO alone; DenseNet-121 b1 0.78x in another start; issue 38)."""
    import statistics

    from .timing import paired_ratios

    if "litert" not in rounds or len(rounds) == 1:
        return next(iter(rounds))  # the only engine that could run it
    other = next(name for name in rounds if name != "litert")
    ratios = paired_ratios(rounds, other, "litert")
    if len(ratios) < MIN_VERDICT_ROUNDS:
        return None
    lower, median, upper = statistics.quantiles(ratios, n=4, method="inclusive")
    bar = 1 / (1 + TIE_MARGIN)
    if upper < bar:
        return other
    return "litert" if median >= bar and lower >= 1 / (1 + FAR_AHEAD) else None


def _likelier(rounds: dict[str, list[float]]) -> str:
    """Where the rounds could not decide: the official interpreter, unless the other engine's time over its own,
    median over the rounds, is under ``1 / (1 + UNDECIDED_MARGIN)``."""
    import statistics

    from .timing import paired_ratios

    other = next(name for name in rounds if name != "litert")
    ratios = paired_ratios(rounds, other, "litert")
    return other if ratios and statistics.median(ratios) < 1 / (1 + UNDECIDED_MARGIN) else "litert"


def _verdict_that_holds(timed: Any, source: str, scope: str) -> Verdict:
    """The engine ``timed()`` (``timing.timed_rounds``) shows faster (``_clear_verdict``); where its rounds
    cannot tell (or are fewer than ``MIN_VERDICT_ROUNDS``), up to ``CLOSE_TIMINGS`` timings' rounds pooled, and
    still undecided the official interpreter unless the other engine is far faster (``_likelier``; a ``Verdict``
    not ``decided``): the choice that holds from start to start rather than the one a moment's load gave."""
    import statistics

    rounds = timed()
    verdict, timings = _clear_verdict(rounds), 1
    while verdict is None and timings < CLOSE_TIMINGS:
        more = timed()
        rounds = {name: rounds[name] + more[name] for name in rounds if name in more}
        verdict, timings = _clear_verdict(rounds), timings + 1
    winner = Verdict(verdict or _likelier(rounds), decided=verdict is not None)
    log.info("%s, %s: %s, %d rounds in %d timing(s): %s (verdicts %s)", source, scope,
             ", ".join(f"{n} median {statistics.median(t) * 1e3:.3f} ms" for n, t in rounds.items()),
             min(map(len, rounds.values())), timings, winner, verdict or "undecided")
    return winner


def _timed_thread_count(model: Model, file: str | None, cores: int) -> int:
    """1 or ``cores``: the thread count that runs ``model``'s entry subgraphs faster, timed alternately on
    interpreters of their own (resource variables and all: they are dropped after), a tie going to one thread
    (the same time on a fraction of the CPU).  A model the interpreter refuses or cannot run keeps ``cores``:
    that is found out where the model's own interpreter is made and run."""
    import time

    from ..ir import entry_subgraphs
    from .timing import fastest, sample_inputs

    candidates = {}
    for threads in (1, cores):
        try:
            shared = _SharedInterpreter(model, file, threads)
        except EngineCompileError:
            return cores
        ranges = [_whole_subgraph(model, i) for i in entry_subgraphs(model)]
        candidates[threads] = [(LiteRtExecutable(shared, r, model), sample_inputs(model, r)) for r in ranges]
    # a round of a few runs at least a millisecond long: a model of microseconds is timed over many calls
    start = time.perf_counter()
    try:
        for executable, inputs in candidates[cores]:
            executable.run(inputs)
    except ModelExecutionError:  # it loads but cannot run (a delegate that fails at its first invoke):
        return cores  # nothing to time; the planner finds out where it runs the model
    repeat = int(min(1000, max(1, 1e-3 / max(time.perf_counter() - start, 1e-7))))
    _, medians = fastest({str(n): runs * repeat for n, runs in candidates.items()}, budget_s=THREAD_TIMING_S)
    one, more = medians.get("1"), medians.get(str(cores))
    if one is None or more is None:
        return cores
    return 1 if one <= more * (1 + THREAD_TIE_MARGIN) else cores


def constant_bytes(model: Model) -> int:
    """``ir.save.constant_bytes``, imported when asked: its module brings the file encoder, which a warm start
    (``runtime.warm_start``) does not import."""
    from ..ir.save import constant_bytes as counted

    return counted(model)


def sub_byte_refusal(model: Model) -> str | None:
    """Why XNNPACK would not run ``model``'s sub-byte weights (None: it has none, or XNNPACK takes them all).

    XNNPACK's int4 kernels take FULLY_CONNECTED weights quantized per channel or blockwise with float16 scales
    (what litert-torch writes), its int8 activations quantized per row as the builtin hybrid kernels do: an int4
    SmolLM-width decoder ran a decode step in 0.33 ms there against 1.73 ms for its float32 export and 3.44 ms on
    XLA (BENCHMARKS.md, "int4 on XNNPACK").  An EMBEDDING_LOOKUP of the same table (tied embeddings) runs on the
    builtin kernels, a copy of one row.  Any other use of sub-byte tensors would leave an op on the builtin
    kernels, which run int4 products 10x slower than XLA."""
    for sg in model.subgraphs:
        sub_byte = {t.index for t in sg.tensors if t.dtype in SUB_BYTE_DTYPES}
        if not sub_byte:
            continue
        for op in sg.operators:
            for slot, t in enumerate(op.inputs):
                if t not in sub_byte:
                    continue
                tensor = sg.tensors[t]
                where = f"{tensor.dtype} tensor {tensor.name!r} of {op}"
                if (op.opcode_name, slot) not in (("FULLY_CONNECTED", 1), ("EMBEDDING_LOOKUP", 1)):
                    return f"{where}: XNNPACK takes int4 weights of FULLY_CONNECTED only"
                reason = _int4_weights_refusal(sg, tensor)
                if reason is not None:
                    return f"{where}: {reason}"
        if any(t in sub_byte for op in sg.operators for t in op.outputs):
            return "sub-byte tensors computed at run time: XNNPACK takes int4 weights only"
    return None


def _int4_weights_refusal(sg: Any, tensor: Any) -> str | None:
    """What in these int4 weights XNNPACK's checks refuse (None: nothing), zero blockwise scales aside
    (``with_empty_blocks_cleared``)."""
    if tensor.dtype != "int4" or tensor.data is None:
        return "XNNPACK takes constant int4 weights only"
    q = tensor.quantization
    details = q.details if q is not None else None
    if details is None:
        if q is None or not q.is_affine or any(z != 0 for z in q.zero_point):
            return "XNNPACK takes int4 weights per channel with zero points 0, or blockwise"
        return None if all(np.isfinite(s) and s > 0 for s in q.scale) else "scales that are not positive"
    if details.get("type") != "BlockwiseQuantization" or int(details.get("zero_points", -1)) >= 0 \
            or details.get("block_shape"):
        return f"{details.get('type')} details XNNPACK does not take (blockwise with scales only, one block size)"
    scales = sg.tensors[int(details["scales"])]
    if scales.dtype != "float16" or scales.data is None:
        return f"blockwise scales in {scales.dtype}: XNNPACK reads them as float16"
    values = scales.data.astype(np.float32)
    used = values[values != 0]
    if not (np.all(used > 0) and np.all(used >= np.finfo(np.float16).tiny) and np.all(np.isfinite(used))):
        return "blockwise scales that are negative, subnormal or infinite: XNNPACK refuses them"
    if np.any(used.view(np.uint32) & 0xFFFF):
        # measured: 1.7e-3 of the output off the builtin kernels with such scales, 1e-7 with bf16 ones
        return ("blockwise scales that bfloat16 does not hold exactly: XNNPACK rounds them to bfloat16 "
                "(litert-torch writes scales it holds)")
    return None


def _empty_blocks(sg: Any, t: Any) -> np.ndarray | None:
    """Where int4 blockwise weights ``t`` have a block scale of zero ([rows, blocks] of bool); None: nowhere."""
    details = t.quantization.details if t.quantization is not None else None
    if t.dtype != "int4" or details is None or details.get("type") != "BlockwiseQuantization" or t.raw is None:
        return None
    scales = sg.tensors[int(details["scales"])]
    if scales.data is None or scales.dtype != "float16":
        return None
    empty = scales.data == 0
    return empty if empty.any() else None


def has_empty_blocks(model: Model) -> bool:
    """Whether XNNPACK would get ``model`` rewritten by ``with_empty_blocks_cleared``."""
    return any(_empty_blocks(sg, t) is not None for sg in model.subgraphs for t in sg.tensors)


def with_empty_blocks_cleared(model: Model) -> Model:
    """``model`` with each int4 block whose scale is 0 given scale 1 and zero values: the same weights (zeros)
    and the same products, in the form XNNPACK takes (it refuses a zero scale and with it the whole model: the
    official interpreter's default cannot load litert-torch's int4 exports of tied embeddings with a row of
    zeros).  ``model`` itself where no block needs it."""
    import dataclasses

    from ..ir.dtypes import pack_sub_byte
    from ..ir.model import Buffer

    buffers = list(model.buffers)
    subgraphs = list(model.subgraphs)
    rewritten: dict[int, int] = {}  # a buffer the signatures' subgraphs share is rewritten once
    for k, sg in enumerate(model.subgraphs):
        tensors, changed = list(sg.tensors), False
        for t in sg.tensors:
            empty = _empty_blocks(sg, t)
            if empty is None:
                continue
            scales = sg.tensors[int(t.quantization.details["scales"])]
            values = t.data.reshape(*empty.shape, -1).copy()
            values[empty] = 0
            new_scales = np.where(empty, np.float16(1), scales.data).astype(np.float16)
            for tensor, make in ((t, lambda: pack_sub_byte(values.reshape(t.shape), "int4")),
                                 (scales, lambda: np.frombuffer(new_scales.tobytes(), np.uint8))):
                if tensor.buffer not in rewritten:
                    buffers.append(Buffer(make()))
                    rewritten[tensor.buffer] = len(buffers) - 1
                index = rewritten[tensor.buffer]
                tensors[tensor.index] = dataclasses.replace(tensor, buffer=index, raw=buffers[index].data)
            changed = True
        if changed:
            subgraphs[k] = dataclasses.replace(sg, tensors=tuple(tensors))
    if len(buffers) == len(model.buffers):
        return model
    return dataclasses.replace(model, subgraphs=tuple(subgraphs), buffers=tuple(buffers))


def _whole_subgraph(model: Model, subgraph: int) -> OpRange:
    sg = model.subgraphs[subgraph]
    return OpRange(subgraph, tuple(range(len(sg.operators))), tuple(sg.inputs), tuple(sg.outputs))


def _sub_model(model: Model, part: OpRange) -> Model:
    from ..ir.extract import extract_ops

    try:
        return extract_ops(model, part.subgraph, part.op_indices, part.inputs, part.outputs)
    except LiteGpuError as e:
        raise EngineCompileError(f"{model.source}: {part} cannot be cut out for the official interpreter: {e}") from e


def _python_custom_ops(model: Model) -> set[str]:
    from ..ops.custom.python_ops import PythonCustomOp
    from ..ops.registry import find

    return {op.opcode_name for sg in model.subgraphs for op in sg.operators
            if op.is_custom and isinstance(find(op.opcode_name, custom=True), PythonCustomOp)}


class _SharedInterpreter:
    """One official interpreter over a model, its runs serialised (an interpreter is not thread-safe).

    Every subgraph runs through the interpreter's per-subgraph entry points (set, invoke and get by tensor
    index and subgraph index: what its signature runners call).  A signature runner resizes and
    reallocates its inputs on every call, which is half of a call to a model that runs in 2 us; here the
    inputs are resized only when their shape changes."""

    def __init__(self, model: Model, file: str | None, threads: int):
        self.model, self.file, self.threads, self.lock = model, file, threads, threading.Lock()
        self.carried: CarriedState | None = None  # the state held in this interpreter's tensors, if any
        self._create()

    def evict_carried(self, subgraph: int | None = None) -> None:
        """Take the carried state out to host arrays before something overwrites the tensors that hold it: a
        run of ``subgraph`` (None: any allocation or a new interpreter).  Under ``lock``."""
        carried = self.carried
        if carried is not None and (subgraph is None or carried.holder_subgraph == subgraph):
            carried.evict()

    def _create(self) -> None:
        interpreter = _interpreter_module().Interpreter
        try:
            with native_info_logs_dropped():
                if self.file is not None:
                    self.interpreter = interpreter(model_path=self.file, num_threads=self.threads)
                else:
                    from ..ir.save import to_bytes

                    self.interpreter = interpreter(model_content=to_bytes(self.model), num_threads=self.threads)
                self.interpreter.allocate_tensors()
        except (ValueError, RuntimeError) as e:
            raise EngineCompileError(f"the official interpreter refuses the model: {_first_line(e)}") from e
        wrapper = getattr(self.interpreter, "_interpreter", None)
        entry_points = ("SetTensor", "Invoke", "GetTensor", "ResizeInputTensor", "AllocateTensors")
        if not all(hasattr(wrapper, n) for n in entry_points):
            raise EngineCompileError(f"ai-edge-litert {litert_version()} lacks the interpreter's per-subgraph "
                                     f"entry points ({', '.join(entry_points)}) that litegpu calls")
        self.wrapper = wrapper
        # the input shapes each subgraph is allocated for (subgraph 0 by allocate_tensors above)
        self.shapes: dict[int, dict[int, tuple[int, ...]]] = {0: {
            d["index"]: tuple(int(x) for x in d["shape"]) for d in self.interpreter.get_input_details()}}
        self._count_allocation()

    def _count_allocation(self) -> None:
        """``allocations`` changes whenever a subgraph's inputs are allocated anew, so that an executable that
        saw the shapes it runs allocated need not compare them tensor by tensor on every call; the views of
        tensor memory (``view``) are dropped then, as the allocation may move it."""
        self.allocations = getattr(self, "allocations", 0) + 1
        self._views: dict[tuple[int, int], np.ndarray] = {}

    def view(self, tensor: int, subgraph: int) -> np.ndarray:
        """A numpy array over a tensor's memory in the interpreter (no copy), kept until the next allocation.
        Only litegpu's own calls use the interpreter, and none through the official object's methods that
        refuse to run while such views exist."""
        found = self._views.get((tensor, subgraph))
        if found is None:
            found = self._views[(tensor, subgraph)] = self.wrapper.tensor(self.wrapper, tensor, subgraph)
        return found

    def set_input_shapes(self, subgraph: int, inputs: Sequence[int], shapes: Sequence[tuple[int, ...]]) -> None:
        """Resize ``subgraph``'s inputs to ``shapes`` and reallocate, where they differ from what it has."""
        current = self.shapes.get(subgraph)
        if current is None or any(current.get(t) != shape for t, shape in zip(inputs, shapes)):
            self.evict_carried()  # an allocation may move any tensor of the subgraph
        if current is None:  # first use of another subgraph: allocate it at its declared shapes
            self.wrapper.AllocateTensors(subgraph)
            sg = self.model.subgraphs[subgraph]
            current = self.shapes[subgraph] = {t: tuple(sg.tensors[t].shape) for t in sg.inputs}
            self._count_allocation()
        resized = False
        for t, shape in zip(inputs, shapes):
            if current.get(t) != shape:
                self._count_allocation()  # first: a resize that fails may leave an input resized all the same
                self.wrapper.ResizeInputTensor(t, np.array(shape, np.int32), False, subgraph)
                current[t] = shape
                resized = True
        if resized:
            self.wrapper.AllocateTensors(subgraph)

    def reset_variables(self) -> None:
        """Variables back to their initial values and CALL_ONCE to run again, as litegpu's reset promises:
        the interpreter's own reset leaves resource variables as they are, so a new interpreter is made."""
        with self.lock:
            self.evict_carried()  # state passed between runs is not a variable: it survives the new interpreter
            self._create()


class CarriedState:
    """Tensors that the runs of a model hand on to each other (a KV cache: an input of every step that comes
    back updated as an output), kept in the official interpreter between runs (issue 26).

    After a run they stay in its output tensors; the next run's input tensors are filled from there inside
    the interpreter (``LiteRtExecutable.run_carrying``): one copy per tensor, where taking them out to numpy
    and back cost a copy out, a new array and a copy in, per tensor and step.  Whatever else is about to
    overwrite those tensors (another run of the same subgraph, an allocation, a new interpreter, another
    carried state) first takes them out to host arrays (``evict``), from where the next run sets them, so
    interleaved users each keep their own state."""

    def __init__(self, shared: _SharedInterpreter, initial: Sequence[np.ndarray]):
        self.shared = shared
        self.host: list[np.ndarray] | None = [np.asarray(a) for a in initial]  # the values while outside
        self.holder_subgraph: int | None = None  # where they are while inside: these output tensors
        self.holder_tensors: list[int] = []
        self.lost: str | None = None

    def evict(self) -> None:
        """Copy the values out of the interpreter (under the interpreter's lock)."""
        if self.holder_subgraph is not None:
            wrapper = self.shared.wrapper
            self.host = [wrapper.GetTensor(t, self.holder_subgraph) for t in self.holder_tensors]
            self.holder_subgraph = None
        if self.shared.carried is self:
            self.shared.carried = None

    def release(self) -> None:
        """The state is no longer needed: the tensors holding it are free for the next user without a copy."""
        with self.shared.lock:
            if self.shared.carried is self:
                self.shared.carried = None
            self.host, self.holder_subgraph = None, None
            self.lost = "it was released"

    def values(self) -> list[np.ndarray]:
        """Host copies of the current values."""
        with self.shared.lock:
            self._check()
            if self.host is not None:
                return [a.copy() for a in self.host]
            wrapper = self.shared.wrapper
            return [wrapper.GetTensor(t, self.holder_subgraph) for t in self.holder_tensors]

    def _check(self) -> None:
        if self.lost is not None:
            raise ModelExecutionError(f"the state carried between runs was lost: {self.lost}")


_shape_of = attrgetter("shape")


def _first_line(error: Exception) -> str:
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    return (lines[-1] if lines else type(error).__name__)[:300]


class LiteRtExecutable(Executable):
    """An entry subgraph of a model run by the official interpreter, or a part of one run as a sub-model
    (``ports``: the model's tensor index -> the sub-model's)."""

    where = "host"

    def __init__(self, shared: _SharedInterpreter, op_range: OpRange, model: Model, ports: dict | None = None):
        self.shared, self.op_range = shared, op_range
        sg = model.subgraphs[op_range.subgraph]
        self._output_dtypes = [np.dtype(numpy_dtype(sg.tensors[t].dtype)) for t in op_range.outputs]
        self._inputs = [ports[t] for t in op_range.inputs] if ports else list(op_range.inputs)
        self._outputs = [ports[t] for t in op_range.outputs] if ports else list(op_range.outputs)
        # a sub-model has an interpreter of its own, whose subgraph 0 is the part
        self._subgraph = 0 if ports else op_range.subgraph
        self._casts: list[int] | None = None  # outputs whose interpreter type is not the model's (first run)
        # the input shapes of the last run, and the interpreter's allocation they were checked against
        self._allocated_for: tuple | None = None
        self._allocation_seen = 0
        # run_carrying's own: the fed inputs' shapes (None for the carried ones) and the allocation it checked
        self._carrying_shapes: tuple | None = None
        self._carrying_allocation = 0

    def run(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        return self.run_arrays([x if type(x) is np.ndarray else np.asarray(x) for x in inputs])

    def carry(self, initial: Sequence[np.ndarray]) -> "CarriedState":
        """A state that runs of this model's interpreter hand on to each other (``run_carrying``), starting from
        ``initial``."""
        return CarriedState(self.shared, initial)

    def run_arrays(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """``run`` for numpy arrays, in one frame: a model that runs in 2 us is mostly the cost of this call
        (BENCHMARKS.md, "The cost of a call").  Inputs are resized only when their shapes change; the outputs
        are copies (the next run overwrites the interpreter's)."""
        shared, subgraph, inputs = self.shared, self._subgraph, self._inputs
        shapes = tuple(map(_shape_of, arrays))
        with shared.lock:
            try:
                if shared.carried is not None:
                    shared.evict_carried(subgraph)  # a run of the subgraph holding a carried state overwrites it
                if shapes != self._allocated_for or shared.allocations != self._allocation_seen:
                    shared.set_input_shapes(subgraph, inputs, shapes)
                    self._allocated_for, self._allocation_seen = shapes, shared.allocations
                set_tensor = shared.wrapper.SetTensor
                for t, a in zip(inputs, arrays):
                    set_tensor(t, a, subgraph)
                shared.wrapper.Invoke(subgraph)
                outputs = list(map(shared.wrapper.GetTensor, self._outputs, repeat(subgraph, len(self._outputs))))
            except (ValueError, RuntimeError) as e:
                raise ModelExecutionError(f"{self.shared.model.source}: the official interpreter failed on "
                                          f"{self.op_range}: {_first_line(e)}") from e
        if self._casts is None:  # learnt on the first run: the interpreter's output types do not change
            self._casts = [k for k, (r, dtype) in enumerate(zip(outputs, self._output_dtypes)) if r.dtype != dtype]
        for k in self._casts:
            outputs[k] = outputs[k].astype(self._output_dtypes[k])
        return outputs

    def run_carrying(self, state: CarriedState, carried_inputs: Sequence[int], carried_outputs: Sequence[int],
                     fed: dict[int, np.ndarray], read: Sequence[int]) -> list[np.ndarray]:
        """One run whose inputs at positions ``carried_inputs`` (of this executable's inputs) take ``state``'s
        values, in order, and whose outputs at ``carried_outputs`` become them, without leaving the interpreter;
        the other inputs are ``fed`` (position -> array).  Returns copies of the outputs at positions ``read``."""
        shared, subgraph, inputs, outputs = self.shared, self._subgraph, self._inputs, self._outputs
        with shared.lock:
            state._check()
            if shared.carried is not None and shared.carried is not state:
                shared.carried.evict()  # another state held here (another generation on this model)
            shapes = (tuple(fed), tuple(map(_shape_of, fed.values())))
            wrapper = shared.wrapper
            try:
                if state.host is not None or shapes != self._carrying_shapes \
                        or shared.allocations != self._carrying_allocation:
                    if state.host is None:
                        state.evict()  # to resize with every shape known
                    full: list = [None] * len(inputs)
                    for k, value in (*zip(carried_inputs, state.host), *fed.items()):
                        full[k] = value.shape
                    shared.set_input_shapes(subgraph, inputs, full)
                    self._carrying_shapes, self._carrying_allocation = shapes, shared.allocations
                if state.host is not None:
                    for k, value in zip(carried_inputs, state.host):
                        wrapper.SetTensor(inputs[k], value, subgraph)
                else:
                    source, view = state.holder_subgraph, shared.view
                    for k, t in zip(carried_inputs, state.holder_tensors):
                        np.copyto(view(inputs[k], subgraph), view(t, source))
                for k, value in fed.items():
                    wrapper.SetTensor(inputs[k], value, subgraph)
                state.host, state.holder_subgraph = None, None
                wrapper.Invoke(subgraph)
                state.holder_subgraph, state.holder_tensors = subgraph, [outputs[k] for k in carried_outputs]
                shared.carried = state
                return [wrapper.GetTensor(outputs[k], subgraph) for k in read]
            except (ValueError, RuntimeError) as e:
                if state.host is None and state.holder_subgraph is None:
                    state.lost = f"a run on {self.op_range} failed after taking it: {_first_line(e)}"
                raise ModelExecutionError(f"{self.shared.model.source}: the official interpreter failed on "
                                          f"{self.op_range}: {_first_line(e)}") from e

    def output_shapes(self, input_shapes: Sequence[Sequence[int]]) -> list[tuple[tuple[int, ...], np.dtype]] | None:
        """(shape, dtype) of each output for these input shapes, from the interpreter resized to them
        (subgraph 0); None for another subgraph, whose outputs the public API does not describe."""
        if self._subgraph != 0:
            return None
        with self.shared.lock:
            self.shared.set_input_shapes(0, self._inputs, [tuple(int(d) for d in s) for s in input_shapes])
            details = {d["index"]: d for d in self.shared.interpreter.get_output_details()}
        return [(tuple(int(d) for d in details[t]["shape"]), dtype)
                for t, dtype in zip(self._outputs, self._output_dtypes)]


__all__ = ["MAX_LITERT_MODEL_BYTES", "PACKED_COPY_ROOM", "THREAD_CHOICE_MAX_MACS", "CarriedState", "LiteRtEngine", "LiteRtExecutable", "litert_version"]
