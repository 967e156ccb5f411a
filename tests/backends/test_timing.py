"""Timing engines against each other (``backends.timing``): the candidate whose runs take least time, measured
in alternating rounds, and the sample inputs the timings run on."""

import time

import numpy as np
import pytest

from litegpu.backends import timing
from litegpu.backends.engine import Executable
from litegpu.backends.graph import OpRange
from litegpu.backends.timing import fastest, sample_inputs
from litegpu.errors import ModelExecutionError
from litegpu.ir import execution_order, read_model
from litegpu.ir.builder import ModelBuilder
from litegpu.ir.save import to_bytes


def whole(model, subgraph=0):
    sg = model.subgraphs[subgraph]
    return OpRange(subgraph, tuple(execution_order(sg, model.source)), tuple(sg.inputs), tuple(sg.outputs))


class _Sleeper(Executable):
    def __init__(self, seconds, fail=False):
        self.seconds, self.fail = seconds, fail

    def run(self, inputs):
        if self.fail:
            raise RuntimeError("cannot run")
        time.sleep(self.seconds)
        return [np.zeros(1)]


def test_fastest_picks_the_quicker_candidate_and_drops_failures():
    name, medians = fastest({"slow": [(_Sleeper(0.004), [])], "quick": [(_Sleeper(0.0005), [])],
                             "broken": [(_Sleeper(0, fail=True), [])]}, budget_s=0.05)
    assert name == "quick" and set(medians) == {"slow", "quick"} and medians["quick"] < medians["slow"]
    with pytest.raises(ModelExecutionError, match="no engine could run"):
        fastest({"broken": [(_Sleeper(0, fail=True), [])]})


class _Costly(Executable):
    """Advances a fake clock by the next of its costs at each run (the first two are the warm-up's)."""

    def __init__(self, costs, clock):
        self.costs, self.clock = list(costs), clock

    def run(self, inputs):
        self.clock[0] += self.costs.pop(0)
        return [np.zeros(1)]


def test_fastest_compares_the_candidates_round_by_round(monkeypatch):
    """The load changes between rounds (1, 10, 100 here) and one slot of round two is disturbed: compared
    median against median, b (truly 1.1x a) would win; compared within each round, a does."""
    clock = [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])
    # each run's cost: the two warm-ups, then per round an untimed run and the timed one
    a, b = _Costly([1, 1, 1, 1, 1, 12, 1, 100], clock), _Costly([1, 1, 1, 1.1, 1, 10.45, 1, 110], clock)
    name, seconds = fastest({"a": [(a, [])], "b": [(b, [])]}, budget_s=1e9, min_rounds=3, max_rounds=3)
    assert name == "a" and seconds["b"] == pytest.approx(1.1 * seconds["a"])


def test_fastest_repeats_short_runs_back_to_back_within_a_round(monkeypatch):
    """A model of microseconds is timed over calls in a row, as it serves them, not one call after the other
    engine's each time."""
    clock = [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])
    a, b = _Costly([1e-4] * 1000, clock), _Costly([2e-4] * 1000, clock)
    name, seconds = fastest({"a": [(a, [])], "b": [(b, [])]}, budget_s=1e9, min_rounds=2, max_rounds=2)
    repeat = round(timing.MIN_ROUND_S / 1e-4)
    assert name == "a" and seconds["a"] == pytest.approx(repeat * 1e-4)
    assert len(a.costs) == 1000 - 2 - 2 * (1 + repeat)  # two warm-ups, then two rounds of 1 + ``repeat`` runs


class _FirstCallFast(Executable):
    """Fast on its first run after another executable's, slow back to back (OpenVINO on MnasNet 0.5 on the
    loaded machine, issue 38)."""

    last = [None]

    def __init__(self, first, again, clock):
        self.first, self.again, self.clock = first, again, clock

    def run(self, inputs):
        self.clock[0] += self.again if _FirstCallFast.last[0] is self else self.first
        _FirstCallFast.last[0] = self
        return [np.zeros(1)]


def test_fastest_times_each_engine_back_to_back_not_after_the_other(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])
    steady, jumpy = _FirstCallFast(2.0, 2.0, clock), _FirstCallFast(1.0, 2.5, clock)
    name, seconds = fastest({"jumpy": [(jumpy, [])], "steady": [(steady, [])]}, budget_s=1e9, min_rounds=4,
                            max_rounds=4)
    assert name == "steady" and seconds["jumpy"] == pytest.approx(2.5)


def test_every_candidate_runs_twice_before_its_rounds(monkeypatch):
    """A second untimed run: OpenVINO's second run after compiling was still 1.2x its steady time (issue 38), and
    it would have been the first round's."""
    clock = [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])
    # two warm-ups far slower than the rounds (each round: an untimed run, then the timed one)
    a, b = _Costly([50, 20] + [1, 1] * 3, clock), _Costly([50, 20] + [1, 2] * 3, clock)
    times = timing.timed_rounds({"a": [(a, [])], "b": [(b, [])]}, budget_s=1e9, min_rounds=3, max_rounds=3)
    assert times == {"a": [1, 1, 1], "b": [2, 2, 2]} and not a.costs and not b.costs


def test_sample_inputs_are_valid_indices_for_integer_inputs():
    b = ModelBuilder()
    ids = b.input("ids", (1, 5), "int32")
    table = b.constant("table", np.ones((3, 2), np.float32))
    y = b.tensor("y", (1, 5, 2))
    b.op("GATHER", [table, ids], [y], axis=0)
    b.output(y)
    model = read_model(to_bytes(b.build()))
    (x,) = sample_inputs(model, whole(model))
    assert x.dtype == np.int32 and not x.any()
