"""Timing engines against each other on the same partition, as the planner does where a rule cannot decide
(``compile.plan``, the official interpreter's ``faster_than``): sample inputs, and alternating rounds whose
times are paired so that a shared machine's changing load cancels out."""

from __future__ import annotations

from typing import Any

from ..ir import Model
from .engine import Executable
from .op_range import OpRange


def sample_inputs(model: Model, op_range: OpRange, seed: int = 0) -> list[Any]:
    """Inputs to time a partition with: floats drawn from a normal distribution, integers and booleans
    zero (always a valid index, token or length)."""
    import numpy as np

    from ..ir import numpy_dtype

    rng = np.random.default_rng(seed)
    sg = model.subgraphs[op_range.subgraph]
    arrays = []
    for t in op_range.inputs:
        tensor = sg.tensors[t]
        dtype = np.dtype(numpy_dtype(tensor.dtype))
        shape = tuple(int(d) for d in tensor.shape)
        arrays.append(rng.standard_normal(shape).astype(dtype) if dtype.kind == "f" else np.zeros(shape, dtype))
    return arrays


# ``fastest``: a round of each candidate lasts at least this long (its runs repeated, at most MAX_ROUND_REPEAT times)
MIN_ROUND_S = 2e-3
MAX_ROUND_REPEAT = 100


def fastest(candidates: dict[str, list[tuple[Executable, list[Any]]]], budget_s: float = 0.3,
            min_rounds: int = 3, max_rounds: int = 30) -> tuple[str, dict[str, float]]:
    """The candidate whose runs take least time (``timed_rounds``), and the seconds per round of each: paired
    estimates, a candidate's time over the first candidate's in the same round, median over the rounds, times
    the first candidate's median.  On a machine others share, the load changes from round to round; within a
    round the candidates run back to back and see about the same, so the ratio cancels what independent
    medians keep (the engine choice flipped between runs on the loaded 2-core machine: BENCHMARKS.md, issue
    26)."""
    import statistics

    times = timed_rounds(candidates, budget_s, min_rounds, max_rounds)
    reference = next(iter(times))
    scale = statistics.median(times[reference])
    paired = {name: scale * statistics.median(paired_ratios(times, name, reference)) for name in times}
    return min(paired, key=paired.__getitem__), paired


def paired_ratios(times: dict[str, list[float]], name: str, reference: str) -> list[float]:
    """``name``'s time over ``reference``'s, round by round (``timed_rounds``' rounds)."""
    return [t / max(r, 1e-12) for t, r in zip(times[name], times[reference])]


def timed_rounds(candidates: dict[str, list[tuple[Executable, list[Any]]]], budget_s: float = 0.3,
                 min_rounds: int = 3, max_rounds: int = 30) -> dict[str, list[float]]:
    """Seconds of each round of each candidate: each candidate is a list of (executable, inputs)
    run in turn (a model's entry subgraphs), repeated within a round where they are short (``MIN_ROUND_S``);
    candidates alternate round by round, each round's order rotated, each turn after an untimed run, until
    ``budget_s`` is spent (at least ``min_rounds``), after two warm-up runs each.  A candidate
    whose warm-up raises drops out (ModelExecutionError where none is left); the others' rounds are returned,
    in the order given."""
    import time

    def run_all(runs: list[tuple[Executable, list[Any]]]) -> None:
        for executable, inputs in runs:
            for result in executable.run(inputs):
                getattr(result, "block_until_ready", lambda: None)()

    alive, first = {}, []
    for name, runs in candidates.items():
        try:
            run_all(runs)  # the first run's own costs: XNNPACK packs, OpenVINO allocates (1.5x a later run)
            # a second run untimed by the rounds: OpenVINO's second run of Keras MobileNetV2 b8 still took 1.2x its
            # steady time (109 against 86-98 ms, loaded machine), and it was the first start's first round (issue 38)
            start = time.perf_counter()
            run_all(runs)
            first.append(time.perf_counter() - start)
            alive[name] = runs
        except Exception:  # noqa: BLE001  (an engine that cannot run it is simply not the fastest)
            continue
    if not alive:
        from ..errors import ModelExecutionError

        raise ModelExecutionError(f"no engine could run the model to time it ({', '.join(candidates)})")
    # Back-to-back runs, as a model serves its calls: a sub-millisecond model's round repeats them to about
    # MIN_ROUND_S.  One run each in turn timed each engine after the other's idle threads and cache footprint:
    # MediaPipe's face detector went to OpenVINO at 0.40 against 0.44 ms, and then ran 0.93x XNNPACK in blocks.
    # Each turn starts with a run left untimed: the first call after another engine's is not the engine's
    # back-to-back speed.  Timed as the first of each turn, OpenVINO ran MnasNet 0.5 in 0.75x XNNPACK's time,
    # round after round, and back to back in 1.3-4.5x (3-5 against 12-28 ms on the loaded machine; alone, as
    # a user runs it, 2x XNNPACK's time), so the first starts chose it (issue 38).
    repeat = int(min(MAX_ROUND_REPEAT, max(1, MIN_ROUND_S / max(min(first), 1e-7))))
    timed_runs = {name: runs * repeat for name, runs in alive.items()}
    times: dict[str, list[float]] = {name: [] for name in alive}
    order = list(alive)
    deadline = time.perf_counter() + budget_s
    for rounds in range(max_rounds):
        if rounds >= min_rounds and time.perf_counter() > deadline:
            break
        for name in order[rounds % len(order):] + order[:rounds % len(order)]:
            run_all(alive[name])  # settling in, untimed
            start = time.perf_counter()
            run_all(timed_runs[name])
            times[name].append(time.perf_counter() - start)
    return times


__all__ = ["MAX_ROUND_REPEAT", "MIN_ROUND_S", "fastest", "paired_ratios", "sample_inputs", "timed_rounds"]
