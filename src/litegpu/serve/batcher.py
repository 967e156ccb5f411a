"""Dynamic batching: concurrent requests for one signature of a batch-1 model gathered into one batched call.

A request waits at most ``max_delay`` for others to join it, and at most ``max_batch`` run together, as one
call of ``CompiledModel.batched()`` (``jax.vmap`` of the batch-1 program, ``runtime.batched``), padded to the
next power of two so that at most log2(max_batch) programs are ever compiled.  Each request gets its own rows
back, with the shapes a direct call gives.  While a batch runs, the next one gathers.

Whether a batch runs batched or as one direct call per request (the model's fastest engine: XNNPACK, OpenVINO)
is decided per model (``BatchingPolicy``): always on a GPU, never when asked (``off``), and on the CPU by
measurement (``auto``): each padded size is timed against that many direct calls, in a child process once the
model is ready (until then, and for sizes where it loses, requests run one by one).  On a 2-core CPU the
direct engines win for every convolution network measured; batching pays where a call costs more than the
examples it computes (see BENCHMARKS.md, "litegpu serve").

Batched results equal direct ones to floating-point rounding (XLA's kernels against the direct engine's;
integers exactly); with batching off, each answer is the direct call's, bit for bit.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import LiteGpuError

log = logging.getLogger("litegpu.serve")

# batched must beat that many direct calls by this factor: a tie goes to the direct engine
_MARGIN = 1.1
# a direct call faster than this runs in the event loop: handing it to the model's thread and back costs more
_INLINE_S = 100e-6
_MEASURE_TIMEOUT_S = 1800


def padded_size(count: int) -> int:
    """The batch a call of ``count`` examples is padded to: the next power of two."""
    return 1 << max(count - 1, 0).bit_length()


@dataclass
class BatchingPolicy:
    """Which gathered counts run as one batched call.  ``batched_sizes`` holds the padded sizes where batching
    was measured (or told) to pay; ``reason`` says why batching is off or how it was decided."""

    mode: str
    max_batch: int
    batched_sizes: set[int] = field(default_factory=set)
    reason: str = ""
    direct_s: float | None = None
    batched_s: dict[int, float] = field(default_factory=dict)

    def sizes(self) -> list[int]:
        """The padded sizes above 1 a batch can take, smallest first."""
        return [1 << k for k in range(1, padded_size(self.max_batch).bit_length())]

    def batches(self, count: int) -> bool:
        return count > 1 and padded_size(count) in self.batched_sizes

    def describe(self) -> dict[str, Any]:
        return {"mode": self.mode, "max_batch": self.max_batch, "batched_sizes": sorted(self.batched_sizes),
                "reason": self.reason,
                "direct_ms": None if self.direct_s is None else round(self.direct_s * 1e3, 4),
                "batched_ms": {n: round(t * 1e3, 4) for n, t in sorted(self.batched_s.items())}}


@dataclass
class _Request:
    inputs: dict[str, np.ndarray]
    future: asyncio.Future
    enqueued: float
    batchable: bool


class DynamicBatcher:
    """Runs one signature of a model for concurrent requests, gathering them into batched calls."""

    def __init__(self, model: Any, signature_key: str, *, name: str, mode: str, max_batch: int, max_delay_s: float,
                 executor: ThreadPoolExecutor | None, metrics: Any = None):
        self.model, self.signature_key, self.name = model, signature_key, name
        self.max_batch, self.max_delay_s = max_batch, max_delay_s
        self.executor, self.metrics = executor, metrics
        details = model.get_input_tensor_details(signature_key)
        self.input_names = list(details)
        self.input_shapes = {n: tuple(d["shape"]) for n, d in details.items()}
        self.output_shapes = {n: tuple(d["shape"]) for n, d in model.get_output_tensor_details(signature_key).items()}
        self.policy = self._initial_policy(mode)
        self._batched: Any = None
        self._queue: asyncio.Queue | None = None
        self._task: asyncio.Task | None = None
        self._measuring: threading.Thread | None = None
        self._child: subprocess.Popen | None = None
        self._closed = threading.Event()
        self.inline = False

    def _initial_policy(self, mode: str) -> BatchingPolicy:
        policy = BatchingPolicy(mode, self.max_batch)
        if self.max_batch == 1 or mode == "off":
            policy.reason = "batching is off" if mode == "off" else "max batch 1"
        elif mode == "on" or self.model.accelerator == "gpu":
            policy.batched_sizes = set(policy.sizes())
            policy.reason = "batching is on" if mode == "on" else "on the GPU"
        else:
            policy.reason = "measuring (requests run one by one until then)"
        return policy

    @property
    def measures(self) -> bool:
        return self.policy.mode == "auto" and self.policy.reason.startswith("measuring")

    # ---- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        """Start gathering (inside the server's event loop); an ``auto`` policy is measured in the background."""
        self._queue = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._gather_forever())
        if self.measures:
            self._measuring = threading.Thread(target=self._measure, name=f"litegpu-measure-{self.name}", daemon=True)
            self._measuring.start()

    def warm_up(self) -> None:
        """Compile what requests will run before the server says it is ready: the direct call, and every padded
        batch size when batching is on."""
        from ..runtime.batched import BatchingError

        example = self._example_inputs()
        self.inline = _best_time(lambda: self.model.run(example, self.signature_key), calls=5) < _INLINE_S
        try:
            for size in sorted(self.policy.batched_sizes):
                self._run_batched([example] * size)
        except BatchingError as e:  # state, data-dependent shapes, host callbacks: one call per request
            self.policy.batched_sizes = set()
            self.policy.reason = str(e)
            self._batched = None

    async def close(self) -> None:
        self._closed.set()
        if self._child is not None and self._child.poll() is None:
            self._child.kill()  # a measurement the server will not use
        if self._measuring is not None:
            await asyncio.to_thread(self._measuring.join)
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        if self._queue is not None:
            while not self._queue.empty():
                request = self._queue.get_nowait()
                if not request.future.done():
                    request.future.set_exception(LiteGpuError(f"{self.name}: the server stopped"))

    # ---- requests --------------------------------------------------------------------------
    async def infer(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The outputs of one request (inputs already checked: names, dtypes, shapes)."""
        assert self._queue is not None, "DynamicBatcher.start() was not called"
        if self.inline and not self.policy.batched_sizes:
            started = time.perf_counter()
            outputs = self.model.run(dict(inputs), self.signature_key)
            if self.metrics is not None:
                self.metrics.queue_time.labels(self.name).observe(0.0)  # it waited for nothing
            self._observe(1, started)
            return outputs
        batchable = all(inputs[n].shape == self.input_shapes[n] for n in self.input_names)
        future = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_Request(dict(inputs), future, time.perf_counter(), batchable))
        return await future

    async def _gather_forever(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._queue is not None
        while True:
            batch = [await self._queue.get()]
            deadline = loop.time() + self.max_delay_s
            while len(batch) < self.max_batch and self.policy.batched_sizes:
                try:
                    batch.append(self._queue.get_nowait())
                    continue
                except asyncio.QueueEmpty:
                    pass
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(self._queue.get(), left))
                except asyncio.TimeoutError:
                    break
            live = [r for r in batch if not r.future.done()]  # a client that went away is not computed
            if live:
                results = await loop.run_in_executor(self.executor, self._run_requests, live)
                for request, result in zip(live, results):
                    if not request.future.done():
                        if isinstance(result, BaseException):
                            request.future.set_exception(result)
                        else:
                            request.future.set_result(result)

    def _run_requests(self, requests: list[_Request]) -> list[Any]:
        """Results (or exceptions) of ``requests``, in order: the batchable ones batched where that pays."""
        started = time.perf_counter()
        if self.metrics is not None:
            for r in requests:
                self.metrics.queue_time.labels(self.name).observe(started - r.enqueued)
        batchable = [r for r in requests if r.batchable]
        results: dict[int, Any] = {}
        if self.policy.batches(len(batchable)):
            try:
                outputs = self._run_batched([r.inputs for r in batchable])
                results.update((id(r), out) for r, out in zip(batchable, outputs))
                self._observe(len(batchable), started)
            except Exception as e:  # noqa: BLE001 - each request is then run alone, and fails alone
                log.warning("%s: a batch of %d failed (%s); running its requests one by one", self.name,
                            len(batchable), e)
        for r in requests:
            if id(r) not in results:
                one = time.perf_counter()
                try:
                    results[id(r)] = self.model.run(r.inputs, self.signature_key)
                except Exception as e:  # noqa: BLE001 - handed to the request's own answer
                    results[id(r)] = e
                self._observe(1, one)
        return [results[id(r)] for r in requests]

    def _observe(self, size: int, started: float) -> None:
        if self.metrics is not None:
            self.metrics.batch_size.labels(self.name).observe(size)
            self.metrics.inference_time.labels(self.name).observe(time.perf_counter() - started)

    # ---- batched calls ---------------------------------------------------------------------
    def _run_batched(self, examples: list[Mapping[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        if self._batched is None:
            self._batched = self.model.batched()
        count = len(examples)
        size = padded_size(count)
        padded = list(examples) + [examples[-1]] * (size - count)
        stacked = {n: np.stack([np.asarray(e[n]).reshape(self.input_shapes[n]) for e in padded])
                   for n in self.input_names}
        outputs = self._batched.run(stacked, self.signature_key)
        return [{n: np.ascontiguousarray(outputs[n][i]).reshape(self.output_shapes[n]) for n in outputs}
                for i in range(count)]

    def _example_inputs(self) -> dict[str, np.ndarray]:
        details = self.model.get_input_tensor_details(self.signature_key)
        return {n: np.zeros(d["shape"], d["dtype"]) for n, d in details.items()}

    def timings(self) -> dict[str, Any]:
        """Each padded size batched against as many direct calls, largest first, up to the first size where
        batching loses (smaller ones would lose too: a call's fixed cost is shared by fewer): ``{"direct_s": ...,
        "batched_s": {size: ...}}``.  Run in a process of its own (``measure``): once XLA's CPU runtime has run in
        a process, the direct engines there (XNNPACK, OpenVINO) ran 2-6x slower on the development machine."""
        example = self._example_inputs()
        direct = _best_time(lambda: self.model.run(example, self.signature_key), calls=10)
        batched: dict[int, float] = {}
        for size in reversed(self.policy.sizes()):
            examples = [example] * size
            self._run_batched(examples)  # compiles
            batched[size] = _best_time(lambda: self._run_batched(examples), calls=3)
            if batched[size] * _MARGIN >= size * direct:
                break
        return {"direct_s": direct, "batched_s": batched}

    def _measure(self) -> None:
        """``auto``: ``timings()`` in a child process (``python -m litegpu.serve.measure``), then batch the sizes
        that won by the margin."""
        policy = self.policy
        command = [sys.executable, "-m", "litegpu.serve.measure", str(self.model.model.source), self.signature_key,
                   str(self.max_batch)]
        cache = self.model.options.serialization_dir
        if cache:
            command += ["--cache-dir", cache]
        try:
            self._child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            out, err = self._child.communicate(timeout=_MEASURE_TIMEOUT_S)
            if self._closed.is_set():
                return
            if self._child.returncode != 0:
                raise LiteGpuError(err.strip().splitlines()[-1] if err.strip() else f"exit {self._child.returncode}")
            measured = json.loads(out.strip().splitlines()[-1])
            policy.direct_s = measured["direct_s"]
            policy.batched_s = {int(k): v for k, v in measured["batched_s"].items()}
            won = {n for n, t in policy.batched_s.items() if t * _MARGIN < n * policy.direct_s}
            policy.batched_sizes = won
            policy.reason = (f"measured: batched calls of {sorted(won)} beat one direct call each"
                             if won else "measured: one direct call each is as fast or faster than batched calls")
        except Exception as e:  # noqa: BLE001 - batching stays off, the model keeps serving directly
            if self._child is not None and self._child.poll() is None:
                self._child.kill()
            policy.batched_sizes = set()
            policy.reason = f"batching could not be measured: {type(e).__name__}: {e}"
        log.info("%s: %s", self.name, policy.reason)


def _best_time(call: Any, calls: int) -> float:
    """The fastest of ``calls`` timed calls (after one untimed): the least disturbed by other work."""
    call()
    best = float("inf")
    for _ in range(calls):
        started = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - started)
    return best


__all__ = ["BatchingPolicy", "DynamicBatcher", "padded_size"]
