"""Programs compiled ahead of need, one at a time on a background thread.

A decode loop attends over a bucket of its KV cache (``kv_rows``), one program per bucket.  Compiled when a
generation's position first reaches a bucket, each stalled the answer mid-way (5-22 s for a ~1B decoder on a
loaded CPU, 1.3-1.8 s on a GPU's host).  ``DecodeLoop`` (one sequence) and ``BatchedDecode`` (continuous
batching: every sequence of the batch waits for the compile) hand the next bucket's compile to
``COMPILE_AHEAD`` once a launch runs in a bucket; the step that needs it takes the finished program
(``finished``), waits for a compile still running, or raises the compile's error as its own (the error a compile
at that step would have raised).

One daemon thread works through the jobs and ends when none is left.  At exit the jobs not started are
cancelled and the one running is waited for (as ``runtime.continuous`` closes its batchers): a thread stopped
inside XLA's compiler as the interpreter ends can crash the process.  ``$LITEGPU_COMPILE_AHEAD=0`` turns
compiling ahead off (each program is then compiled by the step that needs it, as before).
"""

from __future__ import annotations

import atexit
import os
import threading
from collections import deque
from concurrent.futures import Future
from typing import Any, Callable

AHEAD_ENV = "LITEGPU_COMPILE_AHEAD"
EXIT_WAIT_S = 120.0   # at exit, the longest wait for a compile under way (a big decoder's program on a busy CPU)


def compile_ahead_enabled() -> bool:
    """Whether ``$LITEGPU_COMPILE_AHEAD`` leaves compiling ahead on (the default)."""
    return os.environ.get(AHEAD_ENV, "").strip().lower() not in ("0", "off", "false", "no")


class CompileAhead:
    """A queue of compiles run in order on one background thread (started when a job comes, ended when none is
    left)."""

    def __init__(self, name: str = "litegpu-compile-ahead"):
        self.name = name
        self._lock = threading.Lock()
        self._jobs: deque[tuple[Callable[[], Any], Any, Future]] = deque()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._closes_at_exit = False

    def submit(self, make: Callable[[], Any], after: Any = None) -> Future | None:
        """A future of ``make()``, called on the background thread once the device array ``after`` (if given: the
        launch that made this job worth doing) is ready, so that the compile does not compete with that launch
        for the host; None once closed."""
        future: Future = Future()
        with self._lock:
            if self._closed:
                return None
            self._jobs.append((make, after, future))
            if self._thread is None:
                if not self._closes_at_exit:  # registered late: runs before the exit handlers of jax, imported earlier
                    atexit.register(self.close, EXIT_WAIT_S)
                    self._closes_at_exit = True
                self._thread = threading.Thread(target=self._work, name=self.name, daemon=True)
                self._thread.start()
        return future

    def _work(self) -> None:
        while True:
            with self._lock:
                if not self._jobs:
                    self._thread = None
                    return
                make, after, future = self._jobs.popleft()
            if not future.set_running_or_notify_cancel():  # the step needing it came first and compiled it
                continue
            try:
                _wait_until_ready(after)
                future.set_result(make())
            except BaseException as e:  # noqa: BLE001 - whatever it is, the step that needs the program raises it
                future.set_exception(e)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until no job is left (tests, benchmarks); False where ``timeout`` came first."""
        while True:
            with self._lock:
                thread = self._thread
            if thread is None:
                return True
            thread.join(timeout)
            if thread.is_alive():
                return False

    def close(self, timeout: float | None = None) -> None:
        """Take no more jobs, cancel those not started, and wait up to ``timeout`` for the one running."""
        with self._lock:
            self._closed = True
            pending, thread = list(self._jobs), self._thread
            self._jobs.clear()
        for _, _, future in pending:
            future.cancel()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)


def _wait_until_ready(value: Any) -> None:
    wait = getattr(value, "block_until_ready", None)
    if wait is not None:
        try:
            wait()
        except Exception:  # noqa: BLE001 - the launch's own error is raised where its result is read
            pass


def finished(programs: dict, index: Any) -> Any:
    """The program kept at ``index`` of ``programs``, where a compile handed to ``COMPILE_AHEAD`` is waited for
    (call it holding no lock that the compile takes); None where there is none, or where its compile had not
    started (cancelled: the caller compiles it now).  A compile that failed ahead is raised here and forgotten,
    so that the next step tries again."""
    found = programs.get(index)
    if not isinstance(found, Future):
        return found
    if found.cancel():
        if programs.get(index) is found:
            del programs[index]
        return None
    try:
        program = found.result()
    except BaseException:
        if programs.get(index) is found:
            del programs[index]
        raise
    programs[index] = program
    return program


COMPILE_AHEAD = CompileAhead()

__all__ = ["AHEAD_ENV", "COMPILE_AHEAD", "CompileAhead", "compile_ahead_enabled", "finished"]
