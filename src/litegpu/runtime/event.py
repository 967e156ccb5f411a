"""Events: completion of an asynchronous run, built on JAX's asynchronous dispatch."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import ModelExecutionError

_POLL_SECONDS = 0.0005


class Event:
    """Completion of a dispatched run (or of any host-side work: see ``from_callable``).

    ``wait(timeout=None)`` blocks until the work is done and returns True, or
    returns False when ``timeout`` seconds pass first.  ``is_ready()`` never
    blocks.  A failure of the run is raised by ``wait``.  Thread-safe.
    """

    def __init__(self, arrays: Sequence[Any] = (), on_complete: Callable[[], None] | None = None):
        self._arrays = [a for a in arrays if hasattr(a, "block_until_ready")]
        self._on_complete = on_complete
        self._host: threading.Event | None = None
        self._error: BaseException | None = None
        self._done = False
        self._lock = threading.Lock()

    @classmethod
    def signaled(cls) -> "Event":
        return cls()

    @classmethod
    def from_callable(cls, work: Callable[[], Any]) -> "Event":
        """Run ``work`` on a thread; the event is ready when it returns (a producer of input data, say)."""
        event = cls()
        event._host = threading.Event()

        def target() -> None:
            try:
                work()
            except BaseException as e:  # reported by wait()
                event._error = e
            finally:
                event._host.set()

        threading.Thread(target=target, daemon=True).start()
        return event

    @property
    def is_host(self) -> bool:
        """True for host-side work (``from_callable``), False for a dispatched device run."""
        return self._host is not None

    def is_ready(self) -> bool:
        if self._done:
            return True
        if self._host is not None and not self._host.is_set():
            return False
        return all(_array_ready(a) for a in self._arrays)

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        if self._host is not None:
            if not self._host.wait(None if deadline is None else max(0.0, deadline - time.monotonic())):
                return False
        if deadline is not None:
            while not all(_array_ready(a) for a in self._arrays):
                if time.monotonic() >= deadline:
                    return False
                time.sleep(_POLL_SECONDS)
        for a in self._arrays:  # surfaces a failed computation as an exception
            _wait_for(a)
        self._complete()
        return True

    def _complete(self) -> None:
        with self._lock:
            if self._done:
                return
            self._done = True
            callback, self._on_complete = self._on_complete, None
        if self._error is not None:
            raise ModelExecutionError(f"the work behind this event failed: {self._error}") from self._error
        if callback is not None:
            callback()

    def __repr__(self) -> str:
        return f"Event(ready={self.is_ready()})"


def _consumed(array: Any) -> bool:
    """A result that a later run consumed (its memory reused for that run's output, see
    ``TensorBuffer._consumable``): JAX orders that run after it, so waiting on the later run covers it."""
    is_deleted = getattr(array, "is_deleted", None)
    return bool(is_deleted()) if is_deleted is not None else False


def _wait_for(array: Any) -> None:
    """Wait for a device array; an allocation failure of the run that makes it (XLA's RESOURCE_EXHAUSTED,
    reported only now: runs are asynchronous) becomes an ``OutOfMemoryError``."""
    if _consumed(array):
        return
    try:
        array.block_until_ready()
    except Exception as e:
        from ..backends.memory import is_out_of_memory, out_of_memory

        if is_out_of_memory(e):
            raise out_of_memory(e, "a dispatched run", "running") from e
        raise


def _array_ready(array: Any) -> bool:
    if _consumed(array):
        return True
    is_ready = getattr(array, "is_ready", None)
    return True if is_ready is None else bool(is_ready())
