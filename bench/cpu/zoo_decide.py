"""litegpu against the faster CPU engine alone on both zoos, measured until each model's ratio is decided.

    LITEGPU_ZOO_DIR=/work/zoo PYTHONPATH=src python bench/cpu/zoo_decide.py [--zoos litert_torch keras_b1 ...]
        [--min-seconds 4] [--max-seconds 15] [--json bench/cpu/zoo_decide.json]

Issue 38's "Done when": on the litert-torch zoo and the Keras zoo, no model under 0.9x of the faster engine
alone and the geometric mean at least 1.0x.  Each model runs in its own process: XNNPACK alone (the official
interpreter), OpenVINO alone and litegpu's default ``CompiledModel`` (a first start: an empty compile cache of its
own, so the figure includes the choice a new user's first start makes), 2 threads each, fp32, the same inputs,
every output read back.  They take turns in blocks of calls (enough calls for a block of ~25 ms), in a new order
every round.

**Paired by round**: per engine alone, the median over rounds of its time over litegpu's in the same round; the
lower of the two engines is litegpu / best.  The round's load is shared by its three turns and cancels in the
ratio, which independent medians do not do.  The rounds go on (at least ``--min-seconds``) until a bootstrap
95 % interval of that ratio (round indices resampled) lies wholly on one side of 0.9 and is at most 10 % wide,
or ``--max-seconds`` have passed: then the row says *undecided* and the interval shows by how much.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # bench/: the shared harness
import harness  # noqa: E402  (first: it makes the area folders' scripts importable)
import engines  # noqa: E402

BOUND = 0.9  # no model under this fraction of the faster engine alone
ENGINES_ALONE = ("xnnpack", "openvino")
BLOCK_SECONDS = 0.025  # a block this long makes a sub-millisecond model's turn more than timer noise
MAX_BLOCK = 20
WIDEST = 1.10  # a decided interval's high / low at most this
BOOTSTRAP = 400
MIN_ROUNDS = 6
DROP_AFTER = 3  # rounds before an engine alone over twice the other's time stops taking turns (``far_slower``)


def zoos() -> dict[str, list[Path]]:
    """Zoo name -> its models, from ``harness.ZOO_CACHE`` (``LITEGPU_ZOO_DIR``)."""
    keras = sorted(harness.KERAS_ZOO.glob("*.tflite"))
    return {"litert_torch": sorted(harness.LITERT_TORCH_ZOO.glob("*.tflite")),
            "keras_b1": [p for p in keras if p.stem.endswith("_b1")],
            "keras_b8": [p for p in keras if p.stem.endswith("_b8")]}


# ---- the statistics --------------------------------------------------------------------------------

def paired_vs_best(times: dict[str, list[float]], rounds: np.ndarray | None = None) -> float:
    """litegpu / the faster engine alone, paired by round, over ``rounds`` (indices; all without); of the engines
    timed in every round."""
    lite = np.asarray(times["litegpu"])
    pick = slice(None) if rounds is None else rounds
    paired = [e for e in ENGINES_ALONE if len(times.get(e, ())) == len(lite)]  # not one ``far_slower`` left
    return min(float(np.median(np.asarray(times[e])[pick] / lite[pick])) for e in paired)


def interval(times: dict[str, list[float]], seed: int = 0) -> tuple[float, float]:
    """A bootstrap 95 % interval of ``paired_vs_best``: the same resampled rounds for every engine, so that
    each stays paired with litegpu's turn of its round."""
    n = len(times["litegpu"])
    draws = np.random.default_rng(seed).integers(0, n, size=(BOOTSTRAP, n))
    values = [paired_vs_best(times, d) for d in draws]
    return float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))


def verdict(low: float, high: float) -> str:
    """``>= 0.9`` / ``< 0.9`` where the interval lies on one side of the bound, else ``undecided``."""
    return f">= {BOUND}" if low >= BOUND else f"< {BOUND}" if high < BOUND else "undecided"


def decided(low: float, high: float) -> bool:
    return verdict(low, high) != "undecided" and high <= low * WIDEST


# ---- one model (child process) ---------------------------------------------------------------------

def block_size(runners: dict, calls: int = 3) -> int:
    """Calls per turn: enough for the fastest variant's block to last ``BLOCK_SECONDS``."""
    fastest = min(min(_seconds(run) for _ in range(calls)) for run in runners.values())
    return max(1, min(MAX_BLOCK, math.ceil(BLOCK_SECONDS / max(fastest, 1e-6))))


def _seconds(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def far_slower(times: dict[str, list[float]]) -> str | None:
    """An engine alone whose median is over twice the other's: it cannot be the best, and its turns (OpenVINO
    takes 2 s a call on MobileViT-small, XNNPACK 0.06 s) would only use up the model's time."""
    alone = {e: float(np.median(times[e])) for e in ENGINES_ALONE if e in times}
    if len(alone) < 2:
        return None
    slow, fast = sorted(alone, key=alone.get, reverse=True)
    return slow if alone[slow] > 2 * alone[fast] else None


def time_until_decided(runners: dict, block: int, min_seconds: float, max_seconds: float) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in runners}
    active = set(runners)
    start = time.perf_counter()
    for k, names in enumerate(harness.rounds(list(runners), None, order="shuffle")):
        for name in (n for n in names if n in active):
            times[name].append(_seconds(lambda: [runners[name]() for _ in range(block)]) / block)
        if k + 1 == DROP_AFTER and (slow := far_slower(times)):
            active.discard(slow)  # its rounds so far stay: the table shows its time
        elapsed = time.perf_counter() - start
        if k + 1 >= MIN_ROUNDS and elapsed >= min_seconds and (elapsed >= max_seconds or decided(*interval(times))):
            return times


def measure(path: Path, threads: int, min_seconds: float, max_seconds: float, litegpu_first: bool = False) -> dict:
    probe = harness.official_interpreter(path)
    inputs = harness.random_inputs(probe.get_input_details(), int_low=0)  # token ids are >= 0
    row: dict = {"model": path.stem, "threads": threads, "load_before": round(os.getloadavg()[0], 1)}
    runners: dict = {}
    with tempfile.TemporaryDirectory() as cache:  # a first start: the plan's choice is made here
        # The order the engines are built in is not neutral: in one process a second bare XNNPACK interpreter of
        # the same file runs 1-2 % slower than the first (BENCHMARKS.md, "Both zoos on a quiet machine"), so
        # ``litegpu_first`` builds litegpu's before the engines alone, to measure the bias both ways.
        if litegpu_first:
            started = time.perf_counter()
            litegpu_run, model = engines._litegpu_runner(path, inputs, threads, exact=False, cache_dir=cache)
            row["litegpu_first_start_s"] = round(time.perf_counter() - started, 2)
        runners["xnnpack"] = harness.official_runner(path, inputs, threads)[0]
        expected = runners["xnnpack"]()
        try:
            runners["openvino"] = engines._openvino_runner(path, inputs, threads)
        except Exception as e:  # noqa: BLE001  (a model OpenVINO cannot load is reported; XNNPACK stays the best)
            row["openvino_error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:160]}"
        if not litegpu_first:
            started = time.perf_counter()
            litegpu_run, model = engines._litegpu_runner(path, inputs, threads, exact=False, cache_dir=cache)
            row["litegpu_first_start_s"] = round(time.perf_counter() - started, 2)
        runners["litegpu"] = litegpu_run
        row["built_first"] = "litegpu" if litegpu_first else "engines alone"
        row["plan"] = model.plan.engine_summary()
        row["litegpu_max_rel_diff"] = max(engines._relative(a, b) for a, b in zip(runners["litegpu"](), expected))
        for run in runners.values():  # untimed: first calls allocate
            run()
        row["block"] = block_size(runners)
        started = time.perf_counter()
        times = time_until_decided(runners, row["block"], min_seconds, max_seconds)
        row["timed_s"] = round(time.perf_counter() - started, 1)
    row["rounds"] = len(times["litegpu"])
    for name, values in times.items():
        row[f"{name}_ms"] = harness.median_ms(values)
    row["litegpu_vs_best"] = min(row[f"{e}_ms"] for e in ENGINES_ALONE if f"{e}_ms" in row) / row["litegpu_ms"]
    row["paired"] = paired_vs_best(times)
    row["paired_low"], row["paired_high"] = interval(times)
    row["verdict"] = verdict(row["paired_low"], row["paired_high"])
    row["load_after"] = round(os.getloadavg()[0], 1)
    return row


# ---- the table -------------------------------------------------------------------------------------

def zoo_summary(rows: list[dict]) -> dict:
    """Geometric mean and lowest of the paired ratios (each with the bounds of its models' intervals)."""
    ok = [r for r in rows if "paired" in r]
    if not ok:
        return {"models": 0, "errors": len(rows)}
    lowest = min(ok, key=lambda r: r["paired"])
    return {"models": len(ok), "errors": len(rows) - len(ok),
            "geomean": harness.geomean([r["paired"] for r in ok]),
            "geomean_low": harness.geomean([r["paired_low"] for r in ok]),
            "geomean_high": harness.geomean([r["paired_high"] for r in ok]),
            "lowest": lowest["paired"], "lowest_model": lowest["model"],
            "under_bound": sum(r["verdict"] == f"< {BOUND}" for r in ok),
            "undecided": sum(r["verdict"] == "undecided" for r in ok)}


def table(by_zoo: dict[str, list[dict]]) -> str:
    lines = [f"{harness.machine_line()}; 2 threads each, fp32, outputs read back; litegpu / best = the faster "
             f"engine alone's ms over litegpu's (above 1: litegpu faster)", ""]
    for zoo, rows in by_zoo.items():
        lines += [f"**{zoo}**", "", harness.table_head(
            ["model", "plan", "XNNPACK ms", "OpenVINO ms", "litegpu ms", "litegpu / best", "paired by round",
             "95 % interval", f"vs {BOUND}", "rounds x block", "load"], "llrrrrrrlrr")]
        for r in rows:
            if "paired" not in r:
                lines.append(harness.table_row([r["model"], f"error: {r.get('error', '?')}"] + [""] * 9))
                continue
            lines.append(harness.table_row([
                r["model"], r["plan"], f"{r['xnnpack_ms']:.2f}",
                f"{r['openvino_ms']:.2f}" if "openvino_ms" in r else "cannot load", f"{r['litegpu_ms']:.2f}",
                f"{r['litegpu_vs_best']:.2f}", f"{r['paired']:.2f}",
                f"{r['paired_low']:.2f}-{r['paired_high']:.2f}", r["verdict"], f"{r['rounds']} x {r['block']}",
                f"{r['load_before']}-{r['load_after']}"]))
        s = zoo_summary(rows)
        if s["models"]:
            lines += ["", f"{zoo}: paired geometric mean **{s['geomean']:.2f}** (its models' intervals: "
                          f"{s['geomean_low']:.2f}-{s['geomean_high']:.2f}), lowest **{s['lowest']:.2f}** "
                          f"({s['lowest_model']}); under {BOUND}: {s['under_bound']} of {s['models']}, undecided: "
                          f"{s['undecided']}; errors: {s['errors']}", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zoos", nargs="+", default=["litert_torch", "keras_b1", "keras_b8"],
                        choices=["litert_torch", "keras_b1", "keras_b8"])
    parser.add_argument("--only", nargs="+", default=[], help="model stems to measure (default: every one)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--min-seconds", type=float, default=4.0, help="timing per model, at least")
    parser.add_argument("--max-seconds", type=float, default=15.0, help="timing per model, at most (undecided)")
    parser.add_argument("--json", type=Path, default=HERE / "zoo_decide.json")
    parser.add_argument("--litegpu-first", action="store_true",
                        help="build litegpu's model before the engines alone (the build order's bias the other way)")
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)  # child process: measure one model
    args = parser.parse_args()
    if args.one:
        print("ROW " + json.dumps(measure(args.one, args.threads, args.min_seconds, args.max_seconds,
                                             args.litegpu_first)))
        return
    found = zoos()
    by_zoo: dict[str, list[dict]] = {}
    started = time.perf_counter()
    for zoo in args.zoos:
        models = [p for p in found[zoo] if not args.only or p.stem in args.only]
        if not models:
            print(f"{zoo}: no models in {harness.ZOO_CACHE} (LITEGPU_ZOO_DIR): see bench/README.md", flush=True)
        for path in models:
            began = time.perf_counter()
            row = harness.child_row(
                [sys.executable, __file__, "--one", str(path), "--threads", str(args.threads), "--min-seconds",
                 str(args.min_seconds), "--max-seconds", str(args.max_seconds),
                 *(["--litegpu-first"] if args.litegpu_first else [])], path.stem, timeout=900)
            by_zoo.setdefault(zoo, []).append({**row, "zoo": zoo, "wall_s": round(time.perf_counter() - began, 1)})
            print(json.dumps(by_zoo[zoo][-1]), flush=True)
            harness.write_json(args.json, {"machine": harness.machine("ai-edge-litert", "openvino"),
                                           "threads": args.threads, "zoos": by_zoo,
                                           "summary": {z: zoo_summary(r) for z, r in by_zoo.items()}})
    print(f"\n{len(sum(by_zoo.values(), []))} models in {time.perf_counter() - started:.0f} s\n")
    print(table(by_zoo))


if __name__ == "__main__":
    main()
