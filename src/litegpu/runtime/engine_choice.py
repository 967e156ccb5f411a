"""The deferred engine choice (issue 35): a model whose engine is not known without timing (``compile.choices``)
starts on the official interpreter, and the engines are timed once they can pay back.

Timing the official interpreter (XNNPACK) against OpenVINO costs a start OpenVINO's import, the model's conversion
and compile, and rounds of calls on both: more than the official runtime's whole process.  Paying it while
loading made the first start of a MediaPipe model 4.8x the official runtime's; yet the model may then run a
handful of calls, for which the official interpreter is what the official runtime runs anyway.  So the choice
is tiered, as JIT runtimes tier their compilers and OpenVINO's AUTO device starts on the CPU while the GPU
compiles: the model runs on the official interpreter, and once this process has spent as much time in its
calls as the timing is expected to cost (``timing_cost_s``: the ski-rental rule, which never pays more than
twice the better of the two plans in hindsight), the engines are timed as a load-time timing would (the same
verdict rules, kept in the compile cache, so that every later start begins on the winner), on the calling
thread between two calls (timed alongside the user's calls on 2 cores, the verdict would be the load's), and
the model switches to the winner under its lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


# What timing the engines costs a process: an estimate from the model's size (the process has no measure of
# OpenVINO's import and compile without paying them), its rounds refined by the calls' measured time
# (``timing_cost_s``).  Measured on the loaded 2-core development machine (load 4, CPU seconds of
# ``settle_engine_choice``): 0.65 s for the hand landmark (0.15 G multiply-accumulates, OpenVINO imported by
# it), 0.62 s for the transformer encoder (0.44 G, OpenVINO already imported): OpenVINO's import and its CPU
# plugin's start about 0.4 s whatever the model ("Start-up: OpenVINO's warm start"); the conversion and compile
# grow with the model (0.1 s a G multiply-accumulates, a rough slope); the rounds at least ``TIMING_ROUNDS_S``
# (``backends.timing.timed_rounds``' budget, 0.3 s, and the warm-up calls), and at least ``MIN_TIMED_CALLS``
# calls of each engine where one call takes longer.
# The thread count alone (a model the official interpreter runs without timing engines, whose thread count is
# timed: ``backends.litert.THREAD_TIMING_S`` of rounds, 0.1 s, and a second interpreter of the model).
THREAD_TIMING_COST_S = 0.15
OPENVINO_START_S = 0.4
CONVERT_S_PER_GMAC = 0.1
TIMING_ROUNDS_S = 0.4
MIN_TIMED_CALLS = 10


def timing_cost_s(macs: int, call_s: float | None = None, engines: bool = True) -> float:
    """The seconds the engines' timing is expected to cost a model of ``macs`` multiply-accumulates a run:
    OpenVINO's start and the conversion estimated from the model's size (a process has no measure of them
    without paying them), the rounds from ``call_s`` (the model's measured call on the official interpreter)
    where given: each round runs both engines.  ``engines`` False: only an engine's own choice is timed (the
    official interpreter's thread count)."""
    if not engines:
        return THREAD_TIMING_COST_S
    rounds = TIMING_ROUNDS_S if call_s is None else max(TIMING_ROUNDS_S, 2 * MIN_TIMED_CALLS * call_s)
    return OPENVINO_START_S + CONVERT_S_PER_GMAC * macs / 1e9 + rounds


class DeferredChoice:
    """The calls' time toward the timing: ``counted(run)`` wraps a signature's run; once the calls have taken
    ``timing_cost_s`` (with their mean call time), ``settle`` is called after the call that got there, on its
    thread, once."""

    def __init__(self, macs: int, settle: Callable[[], None], engines: bool = True, threads: bool = False):
        self._macs = macs  # the model's multiply-accumulates a run (``ir.macs.model_macs``)
        # what is to be timed: the engines against each other, an engine's own choice (``Engine.choice_pending``)
        self.engines, self.threads = engines, threads
        self.spent_s, self.calls = 0.0, 0
        self._settle = settle
        self._count_lock = threading.Lock()

    @property
    def budget_s(self) -> float:
        """The calls' time after which the engines are timed: the estimate, its rounds from the mean call."""
        return timing_cost_s(self._macs, self.spent_s / self.calls if self.calls else None, self.engines)

    def when(self) -> str:
        """When the choice was made, in the plan report's words."""
        return f"after {self.calls} call{'s' if self.calls != 1 else ''} ({self.spent_s:.2f} s of them)"

    def count(self, seconds: float) -> None:
        with self._count_lock:
            self.spent_s += seconds
            self.calls += 1
            due = self.spent_s >= self.budget_s
        if due:
            self._settle()

    def counted(self, run: Callable[..., Any]) -> Callable[..., Any]:
        def counted_run(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            results = run(*args, **kwargs)
            self.count(time.perf_counter() - start)
            return results

        return counted_run


class CountedBackend:
    """A signature's backend whose calls count toward a ``DeferredChoice`` (its straight path's too); anything
    else is the backend's own."""

    def __init__(self, backend: Any, choice: DeferredChoice):
        self.backend = backend
        self.run = choice.counted(backend.run)
        self._choice = choice

    def straight_run(self) -> Any:
        offer = getattr(self.backend, "straight_run", None)
        run = offer() if offer is not None else None
        return self._choice.counted(run) if run is not None else None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)


def uncounted(backend: Any) -> Any:
    """The backend itself, once the choice is made."""
    return backend.backend if isinstance(backend, CountedBackend) else backend


__all__ = ["CountedBackend", "DeferredChoice", "timing_cost_s", "uncounted"]
