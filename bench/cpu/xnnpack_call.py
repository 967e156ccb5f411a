"""Where litegpu's call of the official interpreter (XNNPACK) loses time against the interpreter alone (issue 38).

    LITEGPU_ZOO_DIR=/work/zoo PYTHONPATH=src python bench/cpu/xnnpack_call.py MODEL.tflite [...] [--threads 2]
        [--rounds 60] [--with-openvino] [--json bench/cpu/xnnpack_call.json]

Per model, in one process (``--threads`` each, fp32, the same inputs, every output read back), four variants take
turns in blocks of calls (about 25 ms a block), a new order every round:

- ``bare_first``: the official interpreter, built before anything of litegpu (as ``zoo_decide.py`` builds it);
- ``litegpu``: litegpu's default ``CompiledModel`` (a first start, an empty compile cache of its own), its plan
  forced onto the official interpreter (``CpuOptions(engines=("litert",))``) where the default plan is not;
- ``litegpu_interpreter``: litegpu's own interpreter object driven by the official loop (``set_tensor / invoke /
  get_tensor``): against ``litegpu``, litegpu's call path alone; against ``bare_first``, the interpreter litegpu
  built (its file, options, thread count, when it was built);
- ``bare_last``: another official interpreter, built after litegpu's: against ``bare_first``, what the order of
  building alone does.

``--with-openvino`` adds OpenVINO alone's turns, as ``zoo_decide.py`` has them.  Each ratio is paired by round
(``bare_first``'s time over the variant's, median over the rounds, above 1: the variant faster) with a bootstrap
95 % interval.  During each variant's turns the CPU time of the process's threads is summed by who made them
(``/proc/self/task``): a thread of another variant that takes CPU during a turn (a pool left spinning) shows there.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # bench/: the shared harness
import harness  # noqa: E402
import engines  # noqa: E402

BLOCK_SECONDS = 0.025
BOOTSTRAP = 400


# ---- threads and their CPU time ---------------------------------------------------------------------

def thread_ids() -> set[str]:
    return set(os.listdir("/proc/self/task"))


def thread_ticks(tid: str) -> int:
    """User and system clock ticks a thread of this process has used (0 once it has gone)."""
    try:
        with open(f"/proc/self/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])


class ThreadOwners:
    """Which variant's construction started each thread of the process."""

    def __init__(self):
        self.owner = {t: "python" for t in thread_ids()}

    def made_by(self, name: str, make):
        before = thread_ids()
        made = make()
        for t in thread_ids() - before:
            self.owner[t] = name
        return made

    def ticks(self) -> dict[str, int]:
        return {t: thread_ticks(t) for t in thread_ids()}

    def spent(self, before: dict[str, int]) -> collections.Counter:
        spent = collections.Counter()
        for t, ticks in self.ticks().items():
            spent[self.owner.get(t, "later")] += ticks - before.get(t, 0)
        return spent


# ---- the variants -------------------------------------------------------------------------------------

def litegpu_runner(path: Path, inputs: list, threads: int, engines_allowed: tuple[str, ...] | None):
    """(run, model): litegpu's ``CompiledModel`` on a first start (an empty compile cache of its own)."""
    return engines._litegpu_runner(path, inputs, threads, exact=False, cache_dir=tempfile.mkdtemp(),
                                   engines_allowed=engines_allowed)


def on_xnnpack(model) -> bool:
    return set(model.plan.ops_per_engine()) == {"litert"}


def litegpu_interpreter(model):
    """The official interpreter object litegpu's executable runs (its straight path's)."""
    straight = model._straight.get(0)
    executable = getattr(getattr(straight, "run", None), "__self__", None)
    shared = getattr(executable, "shared", None)
    return shared


def official_loop(shared, inputs: list):
    """``harness.invoker``'s loop on litegpu's interpreter, through the wrapper that ``set_tensor``, ``invoke`` and
    ``get_tensor`` call (``invoke`` itself refuses to run while litegpu holds the wrapper: its reference count)."""
    wrapper, interpreter = shared.wrapper, shared.interpreter
    ins = [d["index"] for d in interpreter.get_input_details()]
    outs = [d["index"] for d in interpreter.get_output_details()]

    def run() -> list:
        for t, x in zip(ins, inputs):
            wrapper.SetTensor(t, x)
        wrapper.Invoke()
        return [wrapper.GetTensor(t, 0) for t in outs]

    return run


def describe_interpreter(shared, path: Path) -> dict:
    """What litegpu handed the interpreter: its file (or a rewritten model in memory) and thread count."""
    return {"file_is_the_model": shared.file is not None and os.path.samefile(shared.file, path),
            "threads": shared.threads,
            "ops": len(shared.interpreter._get_ops_details()) if hasattr(shared.interpreter, "_get_ops_details")
            else None}


# ---- timing -------------------------------------------------------------------------------------------

def paired(times: dict[str, list[float]], name: str, rounds: np.ndarray | slice = slice(None)) -> float:
    return float(np.median(np.asarray(times["bare_first"])[rounds] / np.asarray(times[name])[rounds]))


def interval(times: dict[str, list[float]], name: str) -> tuple[float, float]:
    n = len(times[name])
    draws = np.random.default_rng(0).integers(0, n, size=(BOOTSTRAP, n))
    values = [paired(times, name, d) for d in draws]
    return float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))


def measure(path: Path, threads: int, rounds: int, with_openvino: bool) -> dict:
    owners = ThreadOwners()
    probe = harness.official_interpreter(path)
    inputs = harness.random_inputs(probe.get_input_details(), int_low=0)
    del probe
    runners: dict = {}
    runners["bare_first"] = owners.made_by("bare_first", lambda: harness.official_runner(path, inputs, threads)[0])
    if with_openvino:
        runners["openvino"] = owners.made_by("openvino", lambda: engines._openvino_runner(path, inputs, threads))
    run, model = owners.made_by("litegpu", lambda: litegpu_runner(path, inputs, threads, None))
    row: dict = {"model": path.stem, "threads": threads, "default_plan": model.plan.engine_summary(),
                 "load_before": round(os.getloadavg()[0], 1)}
    if not on_xnnpack(model):
        run, model = owners.made_by("litegpu", lambda: litegpu_runner(path, inputs, threads, ("litert",)))
        row["forced_plan"] = model.plan.engine_summary()
    runners["litegpu"] = run
    runners["litegpu"]()  # the straight path to the interpreter opens at the first run
    shared = litegpu_interpreter(model)
    if shared is not None:
        row["litegpu_interpreter"] = describe_interpreter(shared, path)
        runners["litegpu_interpreter"] = official_loop(shared, inputs)
    runners["bare_last"] = owners.made_by("bare_last", lambda: harness.official_runner(path, inputs, threads)[0])
    expected = runners["bare_first"]()
    row["max_abs_diff"] = {n: max(float(np.max(np.abs(a - b))) for a, b in zip(run(), expected))
                           for n, run in runners.items()}
    for run in runners.values():
        run()
    fastest = min(min(_seconds(run) for _ in range(3)) for run in runners.values())
    block = max(1, min(20, int(np.ceil(BLOCK_SECONDS / max(fastest, 1e-6)))))
    times: dict[str, list[float]] = {n: [] for n in runners}
    cpu: dict[str, collections.Counter] = {n: collections.Counter() for n in runners}
    for names in harness.rounds(list(runners), rounds, order="shuffle"):
        for name in names:
            before = owners.ticks()
            times[name].append(_seconds(lambda: [runners[name]() for _ in range(block)]) / block)
            cpu[name] += owners.spent(before)
    row.update(block=block, rounds=rounds, load_after=round(os.getloadavg()[0], 1))
    for name in runners:
        low, high = interval(times, name)
        row[name] = {"ms": harness.median_ms(times[name]), "bare_first_over_this": paired(times, name),
                     "interval": [low, high],
                     "cpu_s_by_thread_owner": {o: round(t / os.sysconf("SC_CLK_TCK"), 2)
                                               for o, t in cpu[name].items() if t}}
    return row


def _seconds(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--with-openvino", action="store_true")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # child process: measure one model
    args = harness.parse_args(parser)
    if args.one:
        print("ROW " + json.dumps(measure(args.models[0], args.threads, args.rounds, args.with_openvino)))
        return
    rows = []
    for path in args.models:  # each in a process of its own: a model's interpreters do not meet another's
        rows.append(harness.child_row([sys.executable, __file__, str(path), "--one", "--threads", str(args.threads),
                                       "--rounds", str(args.rounds),
                                       *(["--with-openvino"] if args.with_openvino else [])], path.stem, timeout=900))
        print(json.dumps(rows[-1]), flush=True)
    if args.json:
        harness.write_json(args.json, {"machine": harness.machine("ai-edge-litert", "openvino"), "models": rows})
    variants = ["litegpu", "litegpu_interpreter", "bare_last"]
    print(harness.table_head(["model", "bare_first ms", *[f"bare_first / {v}" for v in variants]], "lrrrr"))
    for r in rows:
        if "bare_first" not in r:
            print(harness.table_row([r["model"], f"error: {r.get('error', '?')}", "", "", ""]))
            continue
        cells = [f"{r[v]['bare_first_over_this']:.3f} ({r[v]['interval'][0]:.2f}-{r[v]['interval'][1]:.2f})"
                 if v in r else "" for v in variants]
        print(harness.table_row([r["model"], f"{r['bare_first']['ms']:.2f}", *cells]))


if __name__ == "__main__":
    main()
