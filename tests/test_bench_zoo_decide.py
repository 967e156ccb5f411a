"""bench/cpu/zoo_decide.py's decision: litegpu against the faster engine alone, paired by round, and when the
rounds have said enough (the timing itself is the script's; these check the arithmetic it decides by)."""

from __future__ import annotations

import numpy as np
import pytest
from oracle import load_bench_module

zd = load_bench_module("zoo_decide")


def test_paired_ratio_takes_the_faster_engine_round_by_round():
    # OpenVINO is the faster engine alone in every round: litegpu at 0.8 of it though 1.25x XNNPACK
    times = {"xnnpack": [10.0, 20.0, 10.0], "openvino": [6.4, 12.8, 6.4], "litegpu": [8.0, 16.0, 8.0]}
    assert zd.paired_vs_best(times) == pytest.approx(0.8)
    assert zd.paired_vs_best({"xnnpack": times["xnnpack"], "litegpu": times["litegpu"]}) == pytest.approx(1.25)


def test_a_load_that_moves_every_engine_alike_cancels_in_the_paired_ratio():
    load = np.random.default_rng(1).uniform(1, 5, 40)  # each round's load, shared by its three turns
    times = {"xnnpack": list(10 * load), "openvino": list(12 * load), "litegpu": list(10.5 * load)}
    low, high = zd.interval(times)
    assert low == pytest.approx(10 / 10.5) and high == pytest.approx(10 / 10.5)
    assert zd.verdict(low, high) == ">= 0.9" and zd.decided(low, high)


@pytest.mark.parametrize(("low", "high", "verdict", "decided"), [
    (0.95, 1.02, ">= 0.9", True),
    (0.80, 0.86, "< 0.9", True),
    (0.85, 0.95, "undecided", False),  # the interval straddles the bound
    (0.91, 1.20, ">= 0.9", False),  # on one side, but too wide to say how far
])
def test_a_model_is_decided_when_its_interval_lies_on_one_side_of_the_bound_and_is_narrow(low, high, verdict, decided):
    assert zd.verdict(low, high) == verdict and zd.decided(low, high) is decided


def test_noisy_rounds_give_a_wide_interval_and_stay_undecided():
    rng = np.random.default_rng(2)
    times = {name: list(rng.uniform(5, 20, 12)) for name in ("xnnpack", "openvino", "litegpu")}
    low, high = zd.interval(times)
    assert high > low * zd.WIDEST and not zd.decided(low, high)


def test_the_zoo_summary_names_the_lowest_model_and_counts_the_misses_and_the_undecided():
    measured = {"plan": "OpenVINO", "xnnpack_ms": 2.0, "litegpu_ms": 1.9, "litegpu_vs_best": 1.05, "rounds": 9,
                "block": 3, "load_before": 1.0, "load_after": 2.0}
    rows = [{"model": "a", "paired": 1.2, "paired_low": 1.1, "paired_high": 1.3, "verdict": ">= 0.9", **measured},
            {"model": "b", "paired": 0.8, "paired_low": 0.75, "paired_high": 0.85, "verdict": "< 0.9", **measured},
            {"model": "c", "paired": 0.9, "paired_low": 0.8, "paired_high": 1.0, "verdict": "undecided", **measured},
            {"model": "d", "error": "cannot load"}]
    s = zd.zoo_summary(rows)
    assert s["geomean"] == pytest.approx((1.2 * 0.8 * 0.9) ** (1 / 3))
    assert (s["lowest_model"], s["under_bound"], s["undecided"], s["errors"]) == ("b", 1, 1, 1)
    printed = zd.table({"keras_b1": rows})
    assert "| b | OpenVINO | 2.00 | cannot load |" in printed and "error: cannot load" in printed
    assert "lowest **0.80** (b); under 0.9: 1 of 3, undecided: 1" in printed


def test_an_engine_alone_over_twice_the_other_is_left_out_and_the_ratio_is_the_other_engines():
    times = {"xnnpack": [60.0] * 3, "openvino": [2000.0] * 3, "litegpu": [55.0] * 3}
    assert zd.far_slower(times) == "openvino"
    assert zd.far_slower({**times, "openvino": [100.0] * 3}) is None
    times = {**times, "xnnpack": [60.0] * 12, "litegpu": [55.0] * 12}  # OpenVINO's turns stopped after 3 rounds
    assert zd.paired_vs_best(times) == pytest.approx(60 / 55)
    assert zd.interval(times) == pytest.approx((60 / 55, 60 / 55))


def test_rounds_go_on_until_decided_then_stop(monkeypatch):
    """Runners whose times never vary decide at the first check (after the minimum rounds and seconds)."""
    clock = iter(np.arange(0, 1e4, 0.1))
    monkeypatch.setattr(zd.time, "perf_counter", lambda: float(next(clock)))
    times = zd.time_until_decided({"xnnpack": lambda: None, "openvino": lambda: None, "litegpu": lambda: None},
                                  block=1, min_seconds=0, max_seconds=1e3)
    assert len(times["litegpu"]) == zd.MIN_ROUNDS and zd.paired_vs_best(times) == pytest.approx(1.0)
