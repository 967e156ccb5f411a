"""Why litegpu misses the faster CPU engine on a model: the choice, and the chosen engine's speed in litegpu.

    PYTHONPATH=src python bench/cpu/engine_choice.py MODEL.tflite [...] [--starts 3] [--threads 2] [--seconds 4]

Per model, in one process (2 threads each, fp32, outputs read back):

1. **the choice over first starts**: ``--starts`` times, a ``CompiledModel`` with an empty compile cache of its
   own (a first start: the planner times XNNPACK against OpenVINO where its rules cannot decide), and the engine
   its plan keeps, with the timings the planner logged;
2. **the chosen engine inside litegpu against the same engine alone**: litegpu's ``run`` against the official
   interpreter (``set_tensor / invoke / get_tensor``) and OpenVINO alone (``bench/cpu/engines.py``'s settings),
   blocks of ``--block`` calls alternating in a new order each round, paired medians: ``litegpu / alone`` under
   1 means litegpu runs the engine's program slower than the engine does by itself.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # bench/: the shared harness
import engines  # noqa: E402
import harness  # noqa: E402


class _Verdicts(logging.Handler):
    """The planner's own account of each timing (``backends.litert._verdict_that_holds`` logs it)."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "verdicts" in message:
            self.lines.append(re.sub(r"^.*?: ", "", message, count=1))


def choices_over_starts(path: Path, inputs: list, threads: int, starts: int) -> list[dict]:
    """The plan of ``starts`` first starts, each with a compile cache of its own."""
    handler = _Verdicts()
    logging.getLogger("litegpu").addHandler(handler)
    logging.getLogger("litegpu").setLevel(logging.INFO)
    found = []
    try:
        for _ in range(starts):
            handler.lines.clear()
            with tempfile.TemporaryDirectory() as cache:
                _, model = engines._litegpu_runner(path, inputs, threads, exact=False, cache_dir=cache)
                found.append({"plan": model.plan.engine_summary(), "timings": list(handler.lines)})
                del model
    finally:
        logging.getLogger("litegpu").removeHandler(handler)
    return found


def engine_in_litegpu(path: Path, inputs: list, threads: int, seconds: float, block: int) -> dict:
    """Paired per-round ratios: litegpu's call against each engine alone, all in this process."""
    runners = {"xnnpack": harness.official_runner(path, inputs, threads)[0],
               "openvino": engines._openvino_runner(path, inputs, threads)}
    with tempfile.TemporaryDirectory() as cache:
        runners["litegpu"], model = engines._litegpu_runner(path, inputs, threads, exact=False, cache_dir=cache)
        plan = model.plan.engine_summary()
        times = harness.alternate(runners, 400, order="shuffle", calls=block, warmup=1, seconds=seconds * 3,
                                  min_rounds=5)
    row = {"plan": plan, "rounds": len(times["litegpu"])}
    for name, values in times.items():
        row[f"{name}_ms"] = harness.median_ms(values)
    for alone in ("xnnpack", "openvino"):  # above 1: litegpu faster than that engine alone, round by round
        row[f"litegpu_vs_{alone}"] = statistics.median(a / b for a, b in zip(times[alone], times["litegpu"]))
    return row


def profile(path: Path, threads: int, starts: int, seconds: float, block: int) -> dict:
    probe = harness.official_interpreter(path)
    inputs = harness.random_inputs(probe.get_input_details(), int_low=0)
    return {"model": path.stem, "first_starts": choices_over_starts(path, inputs, threads, starts),
            **engine_in_litegpu(path, inputs, threads, seconds, block)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--starts", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--block", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    for path in args.models:
        rows.append(profile(path, args.threads, args.starts, args.seconds, args.block))
        print(json.dumps(rows[-1]), flush=True)
    if args.json:
        harness.write_json(args.json, {"machine": harness.machine("ai-edge-litert", "openvino"),
                                       "threads": args.threads, "models": rows})
    print(harness.machine_line())
    print(harness.table_head(["model", "plans of the first starts", "XNNPACK ms", "OpenVINO ms", "litegpu ms",
                              "litegpu / XNNPACK alone", "litegpu / OpenVINO alone"], "llrrrrr"))
    for r in rows:
        plans = "; ".join(s["plan"] for s in r["first_starts"])
        print(f"| {r['model']} | {plans} | {r['xnnpack_ms']:.2f} | {r['openvino_ms']:.2f} | {r['litegpu_ms']:.2f} | "
              f"{r['litegpu_vs_xnnpack']:.2f} | {r['litegpu_vs_openvino']:.2f} |")


if __name__ == "__main__":
    main()
