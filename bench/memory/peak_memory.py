"""Peak memory and time to the first output of models, each in its own process, with a hard limit.

    python bench/memory/peak_memory.py MODEL.tflite ... [--limit-gb 6] [--kernel-mode fast|builtin]

A thread polls the child's resident set size (VmRSS) every 50 ms and ends the child at the limit, so a model
that would exhaust the machine is reported, not run to the OOM killer.  Prints a markdown table: peak RSS after
loading, after the first run (compile included) and after a second run, and the time to the first output.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
import harness  # noqa: E402

CHILD = r"""
import json, os, sys, threading, time
limit = int(float(sys.argv[2]) * (1 << 30))
peak, phase = [0], ["import"]
def watch():
    while True:
        rss = int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) * 1024
        peak[0] = max(peak[0], rss)
        if rss > limit:
            print(json.dumps({"killed": phase[0], "rss": rss}), flush=True)
            os._exit(3)
        time.sleep(0.05)
threading.Thread(target=watch, daemon=True).start()
import numpy as np, litegpu
mode = {"fast": None, "builtin": litegpu.CpuKernelMode.BUILTIN}[sys.argv[3]]
row = {}
t = time.perf_counter()
phase[0] = "load"
m = litegpu.CompiledModel.from_file(sys.argv[1], options=litegpu.Options(litegpu.HardwareAccelerator.CPU,
    cpu_options=litegpu.CpuOptions(num_threads=2, kernel_mode=mode)))
row["plan"] = m.plan.engine_summary()
row["load_peak"] = peak[0]
phase[0] = "first run"
rng = np.random.default_rng(0)
feed = {k: (rng.uniform(-1, 1, d["shape"]).astype(d["dtype"]) if np.dtype(d["dtype"]).kind == "f"
            else rng.integers(0, 100, d["shape"]).astype(d["dtype"])) for k, d in m.get_input_tensor_details(0).items()}
m.run(feed)
row["first_output_s"] = time.perf_counter() - t
row["first_peak"] = peak[0]
phase[0] = "second run"
m.run(feed)
time.sleep(0.1)
row["peak"] = peak[0]
print(json.dumps(row), flush=True)
"""


def measure(path: Path, limit_gb: float, mode: str) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, str(path), str(limit_gb), mode], capture_output=True,
                          text=True, timeout=1800)
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    row = rows[-1] if rows else {"error": (done.stderr.strip().splitlines() or ["no output"])[-1][:160]}
    row["model"] = path.stem
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--limit-gb", type=float, default=6.0)
    parser.add_argument("--kernel-mode", choices=("fast", "builtin"), default="fast")
    args = harness.parse_args(parser)
    gib = lambda n: f"{n / (1 << 30):.2f}"  # noqa: E731
    print(harness.table_head([f"model ({args.kernel_mode})", "file MB", "peak after load GiB", "after first run GiB",
                              "after second GiB", "first output s", "plan"], "lrrrrrl"))
    for path in args.models:
        r = measure(path, args.limit_gb, args.kernel_mode)
        size = path.stat().st_size / 1e6
        if "killed" in r:
            print(f"| {r['model']} | {size:.1f} | killed at {gib(r['rss'])} GiB during {r['killed']} | | | | |")
        elif "error" in r:
            print(f"| {r['model']} | {size:.1f} | error: {r['error']} | | | | |")
        else:
            print(f"| {r['model']} | {size:.1f} | {gib(r['load_peak'])} | {gib(r['first_peak'])} | {gib(r['peak'])} | "
                  f"{r['first_output_s']:.1f} | {r['plan']} |", flush=True)


if __name__ == "__main__":
    main()
