"""CPU engines side by side: XNNPACK, OpenVINO alone, litegpu's default (fast) path and its exact kernels.

    python bench/cpu/engines.py [MODEL.tflite ...] [--threads 2] [--seconds 3] [--json bench/cpu/engines.json]

Without model arguments: every model in ../shared/models, tests/heldout/models and the zoos (``LITEGPU_ZOO_DIR``,
else bench/.zoo: its top, ``keras/`` and ``litert_torch/``).  Each model
is measured in its own process (a crash or a big model's memory stays there), where four variants run
alternately, in a new (seeded random) order every round, on the same inputs, every output
read back to host memory, all at ``--threads`` threads and in fp32:

- xnnpack: ``ai_edge_litert`` Interpreter, default delegate (XNNPACK) -- the official default;
- openvino: OpenVINO alone on the file (``Core.read_model``, ``INFERENCE_PRECISION_HINT=f32``) -- what a CPU
  user picks instead; an error entry when it cannot load the model;
- litegpu: ``CompiledModel`` with the default ``CpuOptions(num_threads=N)`` (the official interpreter or
  OpenVINO where faster, XLA for the rest; the plan column says which);
- exact: ``CpuKernelMode.BUILTIN`` (the exact TFLite kernels on XLA).

Also per variant: cold start (a new process's ``from_file`` to first output, compile cache empty) and warm
start (the same with the cache filled), from separate child processes.  Ratios are xnnpack / variant (above
1: faster than XNNPACK).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # bench/: the shared harness
import harness  # noqa: E402

DEFAULT_DIRS = [harness.SHARED_MODELS, harness.ROOT / "tests" / "heldout" / "models", harness.ZOO_CACHE,
                harness.KERAS_ZOO, harness.LITERT_TORCH_ZOO]
VARIANTS = ("xnnpack", "openvino", "litegpu", "exact")


def _openvino_runner(path: Path, inputs: list[np.ndarray], threads: int):
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(core.read_model(str(path)), "CPU", {
        "INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY",
        "ENABLE_CPU_PINNING": False})  # OpenVINO alone gets litegpu's best settings too
    request = compiled.create_infer_request()

    def run() -> list[np.ndarray]:
        request.infer(inputs, share_inputs=True)
        return [np.array(request.get_tensor(o).data, copy=True) for o in compiled.outputs]

    return run


def _litegpu_runner(path: Path, inputs: list[np.ndarray], threads: int, exact: bool, cache_dir: str | None = None,
                    engines_allowed: tuple[str, ...] | None = None):
    """Inputs and outputs in the official interpreter's order (subgraph 0's), matched by tensor index;
    ``engines_allowed``: ``CpuOptions.engines``."""
    import litegpu

    cpu = litegpu.CpuOptions(num_threads=threads, engines=engines_allowed,
                             kernel_mode=litegpu.CpuKernelMode.BUILTIN if exact else None)
    # the engines timed while loading (``Options.engine_choice``): the runs measured are the settled choice's, and
    # the zoo benchmark's first start includes the timing, as before the choice was deferred
    model = litegpu.CompiledModel.from_file(str(path), options=litegpu.Options(
        litegpu.HardwareAccelerator.CPU, cpu_options=cpu, serialization_dir=cache_dir, engine_choice="load"))
    probe = harness.official_interpreter(path, allocate=False)
    by_index = dict(zip((d["index"] for d in probe.get_input_details()), inputs))
    feed = {name: by_index[d["index"]] for name, d in model.get_input_tensor_details(0).items()}
    out_names = {d["index"]: name for name, d in model.get_output_tensor_details(0).items()}
    order = [out_names[d["index"]] for d in probe.get_output_details()]

    def run() -> list[np.ndarray]:
        result = model.run(feed)
        return [result[name] for name in order]

    return run, model


def measure(path: Path, threads: int, seconds: float, max_runs: int, block: int = 1,
            variants: tuple[str, ...] = VARIANTS) -> dict:
    probe = harness.official_interpreter(path)
    inputs = harness.random_inputs(probe.get_input_details(), int_low=0)  # token ids are >= 0
    row: dict = {"model": path.stem, "threads": threads}
    runners = {}
    runners["xnnpack"], _ = harness.official_runner(path, inputs, threads)
    expected = runners["xnnpack"]()
    for name, make in (("openvino", lambda: _openvino_runner(path, inputs, threads)),
                       ("litegpu", lambda: _litegpu_runner(path, inputs, threads, exact=False)),
                       ("exact", lambda: _litegpu_runner(path, inputs, threads, exact=True))):
        if name not in variants:
            continue
        try:
            made = make()
            runner = made[0] if isinstance(made, tuple) else made
            if name == "litegpu":
                row["plan"] = made[1].plan.engine_summary()
            got = runner()
            row[f"{name}_max_rel_diff"] = max(_relative(a, b) for a, b in zip(got, expected))
            runners[name] = runner
        except Exception as e:  # reported, not hidden
            row[f"{name}_error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:160]}"
    # A new order every round (seeded): with a fixed rotation each variant mostly follows the same other one,
    # and OpenVINO's and XLA's worker threads still spinning after their run slow whoever comes next.
    times = harness.alternate(runners, max_runs, order="shuffle", calls=block, warmup=1,
                              seconds=seconds * len(runners), min_rounds=5)
    for name, values in times.items():
        row[f"{name}_ms"] = harness.median_ms(values)
    row["runs"] = len(times["xnnpack"])
    for name in times:
        if name != "xnnpack":
            row[f"{name}_vs_xnnpack"] = row["xnnpack_ms"] / row[f"{name}_ms"]
    if "litegpu_ms" in row:
        row["litegpu_vs_best"] = min(row["xnnpack_ms"], row.get("openvino_ms", float("inf"))) / row["litegpu_ms"]
        row["litegpu_vs_best_paired"] = paired_vs_best(times)
    if "openvino_ms" in row and "litegpu_ms" in row:
        row["litegpu_vs_openvino"] = row["openvino_ms"] / row["litegpu_ms"]
    return row


def paired_vs_best(times: dict[str, list[float]]) -> float:
    """litegpu against the faster engine alone, round by round: per engine, the median over rounds of its time
    over litegpu's in the same round, the lower of the two.  On a loaded machine a round's variants see about
    the same load, which independent medians do not cancel."""
    import statistics

    return min(statistics.median(a / b for a, b in zip(times[alone], times["litegpu"]))
               for alone in ("xnnpack", "openvino") if alone in times)


def _paired_summary(rows: list[dict]) -> str:
    paired = [r["litegpu_vs_best_paired"] for r in rows if "litegpu_vs_best_paired" in r]
    return f"; paired by round {harness.geomean(paired):.2f}, lowest {min(paired):.2f}" if paired else ""


def _relative(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-12)) if b.size else 0.0


_START = """
import sys, time
t0 = time.perf_counter()
import numpy as np, litegpu
sys.path.insert(0, {here!r})
import engines, harness
probe = harness.official_interpreter({path!r})
inputs = harness.random_inputs(probe.get_input_details(), int_low=0)
t1 = time.perf_counter()
run, model = engines._litegpu_runner(__import__("pathlib").Path({path!r}), inputs, {threads}, {exact}, {cache!r})
run()
print((time.perf_counter() - t1) * 1e3)
"""


def start_times(path: Path, threads: int) -> dict:
    """Cold (empty cache) and warm (filled) start, from_file to first output, each in a fresh process.

    Child processes may write bytecode (an installed package has its .pyc files; a shell with
    PYTHONDONTWRITEBYTECODE=1 would recompile litegpu's and JAX's sources in every start, ~0.1 s)."""
    env = harness.child_environment()
    subprocess.run([sys.executable, "-c", "import litegpu.ops._catalog, jax, openvino.frontend"], env=env,
                   capture_output=True, timeout=600)
    row = {}
    for name, exact in (("litegpu", False), ("exact", True)):
        with tempfile.TemporaryDirectory() as cache:
            for phase in ("cold", "warm"):
                script = _START.format(here=str(HERE), path=str(path), threads=threads, exact=exact, cache=cache)
                done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900,
                                      env=env)
                if done.returncode != 0:
                    row[f"{name}_{phase}_error"] = done.stderr.strip().splitlines()[-1][:160]
                    break
                row[f"{name}_{phase}_ms"] = float(done.stdout.strip().splitlines()[-1])
        if f"{name}_warm_ms" in row:
            row[f"{name}_warm_speedup"] = row[f"{name}_cold_ms"] / row[f"{name}_warm_ms"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--max-runs", type=int, default=200)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS,
                        help="the variants to time (xnnpack always runs: it is the reference)")
    parser.add_argument("--block", type=int, default=1,
                        help="calls per variant per round, timed together: back-to-back calls as a model serves "
                             "them (1: every call follows another engine's, whose idle threads and cache "
                             "footprint weigh on sub-millisecond models)")
    parser.add_argument("--starts", action="store_true", help="also measure cold and warm start per engine")
    parser.add_argument("--json", type=Path, default=HERE / "engines.json")
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)  # child process: measure one model
    args = parser.parse_args()
    if args.one:
        row = measure(args.one, args.threads, args.seconds, args.max_runs, args.block, tuple(args.variants))
        if args.starts:
            row.update(start_times(args.one, args.threads))
        print("ROW " + json.dumps(row))
        return
    models = args.models or sorted(p for d in DEFAULT_DIRS if d.is_dir() for p in d.glob("*.tflite"))
    rows = []
    for path in models:
        cmd = [sys.executable, __file__, "--one", str(path), "--threads", str(args.threads), "--seconds",
               str(args.seconds), "--max-runs", str(args.max_runs), "--block", str(args.block), "--variants", *args.variants] + (
                   ["--starts"] if args.starts else [])
        rows.append(harness.child_row(cmd, path.stem, timeout=1800))
        print(json.dumps(rows[-1]), flush=True)
    harness.write_json(args.json, {"machine": harness.machine("ai-edge-litert", "openvino", "jax"),
                                   "threads": args.threads, "models": rows})
    print(table(rows, args.threads))


def table(rows: list[dict], threads: int) -> str:
    lines = [f"{harness.machine_line()}; {threads} threads each, fp32, outputs read back; ratio = XNNPACK ms / "
             "variant ms", "",
             harness.table_head(["model", "XNNPACK ms", "OpenVINO alone ms", "litegpu ms", "exact ms",
                                 "litegpu / XNNPACK", "OpenVINO alone / XNNPACK", "litegpu vs OpenVINO",
                                 "litegpu / best of the two", "paired by round", "exact / XNNPACK",
                                 "litegpu plan", "max rel diff litegpu"], "lrrrrrrrrrrlr")]
    fmt = lambda r, k, f="{:.2f}": f.format(r[k]) if k in r else "-"  # noqa: E731
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | error: {r['error']} |" + " |" * 12)
            continue
        ov = fmt(r, "openvino_ms") if "openvino_ms" in r else "cannot load"
        lines.append(f"| {r['model']} | {fmt(r, 'xnnpack_ms')} | {ov} | {fmt(r, 'litegpu_ms')} | {fmt(r, 'exact_ms')} | "
                     f"{fmt(r, 'litegpu_vs_xnnpack')} | {fmt(r, 'openvino_vs_xnnpack')} | "
                     f"{fmt(r, 'litegpu_vs_openvino')} | {fmt(r, 'litegpu_vs_best')} | "
                     f"{fmt(r, 'litegpu_vs_best_paired')} | {fmt(r, 'exact_vs_xnnpack')} | "
                     f"{r.get('plan', '-')} | "
                     f"{fmt(r, 'litegpu_max_rel_diff', '{:.1e}')} |")
    ok = [r for r in rows if "litegpu_vs_xnnpack" in r]
    lines += ["", f"Geometric mean over {len(ok)} models: litegpu / XNNPACK "
                  f"{harness.geomean([r['litegpu_vs_xnnpack'] for r in ok]):.2f}, exact / XNNPACK "
                  f"{harness.geomean([r['exact_vs_xnnpack'] for r in ok if 'exact_vs_xnnpack' in r]):.2f}, "
                  f"OpenVINO alone / XNNPACK "
                  f"{harness.geomean([r['openvino_vs_xnnpack'] for r in ok if 'openvino_vs_xnnpack' in r]):.2f} "
                  f"(on the {sum('openvino_vs_xnnpack' in r for r in ok)} models it loads); litegpu / the faster of "
                  f"XNNPACK and OpenVINO alone per model {harness.geomean([r['litegpu_vs_best'] for r in ok]):.2f}, lowest "
                  f"{min((r['litegpu_vs_best'] for r in ok), default=float('nan')):.2f}"
                  + _paired_summary(ok)]
    starts = [r for r in rows if "litegpu_cold_ms" in r]
    if starts:
        lines += ["", harness.table_head(["model", "litegpu cold ms", "litegpu warm ms", "warm speed-up",
                                          "exact cold ms", "exact warm ms", "warm speed-up"], "lrrrrrr")]
        for r in starts:
            lines.append(f"| {r['model']} | {fmt(r, 'litegpu_cold_ms', '{:.0f}')} | {fmt(r, 'litegpu_warm_ms', '{:.0f}')} | "
                         f"{fmt(r, 'litegpu_warm_speedup', '{:.1f}x')} | {fmt(r, 'exact_cold_ms', '{:.0f}')} | "
                         f"{fmt(r, 'exact_warm_ms', '{:.0f}')} | {fmt(r, 'exact_warm_speedup', '{:.1f}x')} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
