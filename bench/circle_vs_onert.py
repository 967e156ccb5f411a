"""litegpu beside onert (Samsung ONE's runtime) on the same .circle files, CPU, 2 threads, one process.

The files are tico's conversions of the test models in ``tests/tico_models.py`` (made into OUT_DIR if
missing). Each round times ``--calls`` calls of one runtime and then of the other, the order flipping
every round, so that both see the same machine state; the figure is the median per-call time over the
rounds. onert's CPU backend reads its thread count from the environment (``NUM_THREADS``).

    python bench/circle_vs_onert.py [--rounds 15] [--calls 50] [--json bench/circle_vs_onert.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

THREADS = 2
os.environ["NUM_THREADS"] = str(THREADS)  # before onert loads: its config comes from the environment

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def per_call_ms(fn, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e3


def cpu_name() -> str:
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    import onert

    import litegpu
    import tico_models

    folder = Path(tempfile.mkdtemp(prefix="circle-bench-"))
    options = litegpu.Options(litegpu.HardwareAccelerator.CPU, cpu_options=litegpu.CpuOptions(num_threads=THREADS))
    rows = []
    for name in tico_models.MODELS:
        made = tico_models.make(name, folder)
        ours = litegpu.CompiledModel.from_file(str(made.path), options=options)
        session = onert.infer.session(str(made.path), "cpu")
        try:
            session.infer(made.inputs)
        except Exception as e:  # onert refuses to prepare some models
            rows.append({"model": name, "onert": None, "litegpu": None, "why": str(e).splitlines()[0][:120]})
            print(f"{name}: onert refuses it ({rows[-1]['why']})")
            continue
        runners = {"litegpu": lambda: ours(*made.inputs), "onert": lambda: session.infer(made.inputs)}
        for run in runners.values():  # warm up both
            per_call_ms(run, 20)
        times = {k: [] for k in runners}
        for r in range(args.rounds):
            for key in (("litegpu", "onert") if r % 2 == 0 else ("onert", "litegpu")):
                times[key].append(per_call_ms(runners[key], args.calls))
        row = {"model": name, "ops": sum(read_ops(made.path).values()),
               "engines": ours.plan.engine_summary(),
               **{k: round(statistics.median(v), 4) for k, v in times.items()}}
        row["onert / litegpu"] = round(row["onert"] / row["litegpu"], 2)
        rows.append(row)
        print(json.dumps(row))
    result = {"machine": f"{cpu_name()}, {os.cpu_count()} cores", "threads": THREADS,
              "onert": getattr(onert, "__version__", "0.1.0"), "litegpu": litegpu.__version__ if hasattr(
                  litegpu, "__version__") else "", "rounds": args.rounds, "calls": args.calls, "rows": rows}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}))


def read_ops(path: Path) -> dict:
    from litegpu.ir import read_model

    return read_model(path).op_histogram()


if __name__ == "__main__":
    main()
