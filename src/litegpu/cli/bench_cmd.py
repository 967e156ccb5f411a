"""``litegpu bench``: latency, start-up and memory of one model, measured the way a user would see them.

In the spirit of LiteRT's ``benchmark_model``, with one difference that matters:
every timed run reads all outputs back to host memory, so a GPU figure
includes the computation and the copy, not only the dispatch.

What is measured, through the public ``litegpu.CompiledModel`` API:

- start-up, cold (empty compile cache) and warm (a second CompiledModel on the
  cache the first one filled): ``from_file`` (load, verify, plan) and the first
  run (trace + compile, or load the compiled program, then run and read back);
- steady runs after ``--warmup`` untimed ones: median, p5, p95, min, max;
- peak host memory (the process's high-water mark, VmHWM) and the device's,
  where JAX reports it (``device.memory_stats()``; the CPU reports nothing);
- delegation: where the model runs and whether it is fully delegated.

``--profile`` times each op of the main subgraph as its own jitted program on
the same device (see :class:`OpProfiler` for what that does and does not mean).
"""

from __future__ import annotations

import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError
from .common import (ACCELERATOR_HELP, ENGINE_CHOICE_HELP, ENGINE_CHOICES, KERNEL_MODES, accelerator_flags, console, count, cpu_kernel_mode, human_bytes,
                     signature_label, step, titled_table)
from .run_cmd import SEED, random_input

DEFAULT_RUNS = 50
DEFAULT_WARMUP = 5
PROFILE_REPEATS_MAX = 10
TOP_OPS = 15
PRECISION_CHOICES = ("fp32", "fp16", "fp16_fp32_accum")


# ---- numbers ----------------------------------------------------------------------------------
def latency_stats(times_s: Sequence[float]) -> dict[str, float]:
    """Milliseconds: median, p5, p95 (linear interpolation, as numpy), min, max, mean."""
    ms = np.asarray(times_s, dtype=np.float64) * 1e3
    p5, p95 = np.percentile(ms, [5, 95])
    return {"median": float(np.median(ms)), "p5": float(p5), "p95": float(p95), "min": float(ms.min()),
            "max": float(ms.max()), "mean": float(ms.mean()), "count": int(ms.size)}


def _proc_status_bytes(field: str) -> int | None:
    """A ``VmXXX:  1234 kB`` line of /proc/self/status in bytes (Linux only)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def reset_peak_rss() -> bool:
    """Reset the kernel's high-water mark so the peak covers the model, not earlier work (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def host_memory() -> dict[str, Any]:
    peak = _proc_status_bytes("VmHWM")
    if peak is None:  # ru_maxrss is KiB on Linux, bytes on macOS; never reset
        scale = 1 if sys.platform == "darwin" else 1024
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale
    return {"peak_rss_bytes": int(peak), "rss_bytes": _proc_status_bytes("VmRSS")}


def device_memory(model: Any) -> dict[str, Any] | None:
    """JAX's allocator statistics of the device the model runs on; None where it has none (CPU)."""
    if model.plan.target.value == "reference":
        return None
    try:
        stats = model.environment.device(model.accelerator.lower()).memory_stats()
    except Exception:  # noqa: BLE001  (a backend without allocator statistics reports nothing)
        return None
    if not stats:
        return None
    keep = ("bytes_in_use", "peak_bytes_in_use", "bytes_limit", "largest_alloc_size")
    return {k: int(stats[k]) for k in keep if k in stats}


# ---- progress ---------------------------------------------------------------------------------
class _Progress:
    """A rich progress bar on stderr (stdout stays parseable); when stderr is not a terminal, a line for each phase
    that takes long (``common.step``)."""

    def __init__(self, enabled: bool):
        self._progress = None
        if enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), console=Console(file=sys.stderr), transient=True)

    @contextmanager
    def phase(self, description: str, total: int) -> Iterator[Callable[[], None]]:
        if self._progress is None:  # not a terminal: a line on stderr if the phase takes long
            with step(description):
                yield lambda: None
            return
        with self._progress:
            task = self._progress.add_task(description, total=total)
            yield lambda: self._progress.advance(task)


# ---- the model --------------------------------------------------------------------------------


def _options(accelerator: str, precision: str, threads: int, cache_dir: str, kernel_mode: str = "fast",
             devices: Any = None, engine_choice: str = "load") -> Any:
    import litegpu

    cpu = litegpu.CpuOptions(num_threads=threads, kernel_mode=cpu_kernel_mode(kernel_mode))
    return litegpu.Options(accelerator_flags(accelerator), cpu_options=cpu,
                           gpu_options=litegpu.GpuOptions(precision=precision), serialization_dir=cache_dir,
                           devices=devices, engine_choice=engine_choice)


def parse_devices(text: str | None) -> Any:
    """``--devices``: "all", a count, or comma-separated device indices."""
    if text is None:
        return None
    if text == "all":
        return "all"
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise InvalidArgumentError(f"--devices {text!r}: use 'all', a count or comma-separated indices") from None
    return values[0] if len(values) == 1 and "," not in text else values


def per_device_memory(model: Any) -> list[dict[str, Any]] | None:
    """With weights split over several devices: each device's weight bytes (measured from the arrays) and,
    where JAX reports them (GPUs), its allocator's bytes in use and peak."""
    if model.options.devices is None:
        return None
    report = model.weight_placement()
    devices = list(model._state.mesh.devices.flat) if getattr(model._state, "mesh", None) is not None else []
    rows = []
    for i, weight_bytes in enumerate(report.measured_bytes_per_device or []):
        row: dict[str, Any] = {"device": str(devices[i]) if i < len(devices) else str(i), "weight_bytes": weight_bytes}
        try:
            stats = devices[i].memory_stats() if i < len(devices) else None
        except Exception:  # noqa: BLE001  (no allocator statistics on this device kind)
            stats = None
        for key in ("bytes_in_use", "peak_bytes_in_use"):
            if stats and key in stats:
                row[key] = int(stats[key])
        rows.append(row)
    return rows


def weight_memory(model: Any) -> dict[str, Any] | None:
    """The XLA engine's weights as held (on the device, or on the host for XLA CPU) against the file's weight
    bytes; None where XLA holds no weights (other engines)."""
    try:
        report = model.weight_placement()
    except Exception:  # noqa: BLE001  (no XLA state: OpenVINO, the official interpreter, numpy)
        return None
    held = sum(w.nbytes for w in report.weights)
    stored: dict[int, int] = {}
    for sg in model.model.subgraphs:
        for t in sg.tensors:
            if t.raw is not None and t.raw.size and t.buffer > 0:
                stored[t.buffer] = int(t.raw.nbytes)
    return {"held_bytes": held, "file_weight_bytes": sum(stored.values())}


def _signature_key(model: Any, path: Path, signature: str | None) -> str:
    signatures = model.get_signature_list()
    key = signature if signature is not None else next(iter(signatures))
    if key not in signatures:
        raise InvalidArgumentError(f"{path}: no signature {key!r} (has: {', '.join(map(repr, signatures))})")
    return key


def random_inputs(model: Any, key: str, seed: int = SEED) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: random_input(list(d["shape"]), str(d["dtype"]), rng)
            for name, d in model.get_input_tensor_details(key).items()}


class _Session:
    """One CompiledModel with its buffers filled, ready to run and read back."""

    def __init__(self, path: Path, options: Any, signature: str | None, arrays: dict[str, np.ndarray] | None):
        from litegpu import CompiledModel

        t = time.perf_counter()
        self.model = CompiledModel.from_file(str(path), options=options)
        self.load_s = time.perf_counter() - t
        self.key = _signature_key(self.model, path, signature)
        self.index = self.model.get_signature_index(self.key)
        self.arrays = arrays if arrays is not None else random_inputs(self.model, self.key)
        self.inputs = self.model.create_input_buffers(self.index)
        self.outputs = self.model.create_output_buffers(self.index)
        for buf, array in zip(self.inputs, self.arrays.values()):
            buf.write(array)

    def run(self) -> list[np.ndarray]:
        self.model.run_by_index(self.index, self.inputs, self.outputs)
        return [o.read() for o in self.outputs]  # the host copy is part of what a user waits for

    def timed_first_run(self) -> float:
        t = time.perf_counter()
        self.run()
        return time.perf_counter() - t


def _start(path: Path, options: Any, signature: str | None, arrays: dict | None) -> tuple[_Session, dict]:
    session = _Session(path, options, signature, arrays)
    first = session.timed_first_run()
    return session, {"load_ms": session.load_s * 1e3, "first_run_ms": first * 1e3,
                     "total_ms": (session.load_s + first) * 1e3}


def whole_program_engines(plan: Any) -> list[str]:
    """The engines of ``plan`` that run a partition as one program of their own (not the runtime's XLA or numpy
    kernels, whose ops can be timed one by one)."""
    from ..backends import registry

    return [e for e in plan.ops_per_engine() if not registry.info(e).own_kernels]


def delegation(model: Any) -> dict[str, Any]:
    plan = model.plan
    return {"accelerator": model.accelerator, "backend": plan.target.value, "engines": plan.ops_per_engine(),
            "engine_summary": plan.engine_summary(), "engine_choice": plan.choice,
            "fully_delegated": bool(model.is_fully_accelerated()), "ops": plan.num_ops,
            "ops_on_gpu": plan.ops_on("GPU"), "ops_on_cpu": plan.ops_on("CPU"),
            "refused": [str(u) for u in plan.unsupported], "notes": list(plan.notes), "numerics": plan.numerics}


def _warm_up_runtime() -> None:
    """Imports and op registration happen before the clock starts: they are the process's, not the model's."""
    from ..backends.device_arrays import jax_module
    from ..format import load_schema
    from ..ops import _catalog  # noqa: F401  (imports every op module)

    jax_module()
    load_schema()


def _versions() -> dict[str, str]:
    # platform imported here, not at the top: every litegpu command imports this module, and platform's import
    # compiles a dozen regular expressions
    import platform

    from ..runtime.compiled_model import litegpu_version

    found = {"litegpu": litegpu_version(), "python": platform.python_version()}
    try:
        import jax
        import jaxlib

        found.update(jax=jax.__version__, jaxlib=getattr(jaxlib, "__version__", "unknown"))
    except ImportError:
        pass
    return found


def _machine() -> dict[str, Any]:
    import platform

    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"machine": platform.machine(), "cpus": os.cpu_count(), "system": platform.system(),
            "load_average_1m": round(load[0], 2) if load else None}


def benchmark(path: Path, *, accelerator: str = "cpu", precision: str = "fp32", signature: str | None = None,
              runs: int = DEFAULT_RUNS, warmup: int = DEFAULT_WARMUP, threads: int = 0,
              cache_dir: str | None = None, profile: bool = False, progress: bool = False,
              kernel_mode: str = "fast", devices: Any = None, engine_choice: str = "load") -> dict[str, Any]:
    """Every number ``litegpu bench`` reports, as a JSON-ready dict (times in ms, memory in bytes).  The steady
    runs measure the settled engine choice: timed while loading by default (``engine_choice``), else timed
    before the warm-up runs where it is still to come (``CompiledModel.engine_choice_settled``)."""
    if kernel_mode not in KERNEL_MODES:
        raise InvalidArgumentError(f"--kernel-mode {kernel_mode!r}: expected one of {', '.join(KERNEL_MODES)}")
    if runs < 1 or warmup < 0 or threads < 0:
        raise InvalidArgumentError(f"--runs must be >= 1, --warmup and --threads >= 0 "
                                   f"(got {runs}, {warmup}, {threads})")
    if precision not in PRECISION_CHOICES:
        raise InvalidArgumentError(f"--precision {precision!r}: expected one of {', '.join(PRECISION_CHOICES)}")
    bar = _Progress(progress)
    _warm_up_runtime()
    own_cache = cache_dir is None
    directory = tempfile.mkdtemp(prefix="litegpu-bench-") if own_cache else str(cache_dir)
    try:
        from ..backends.cache import CompileCache

        CompileCache(directory)  # created private (0700), as every compile cache directory
        cache_was_empty = not any(Path(directory).glob("*.bin"))
        options = _options(accelerator, precision, threads, directory, kernel_mode, devices, engine_choice)
        peak_reset = reset_peak_rss()
        baseline = host_memory()["rss_bytes"]
        with bar.phase("cold start (load, trace, compile, first run)", 1) as step:
            cold_session, cold = _start(path, options, signature, None)
            step()
        arrays = cold_session.arrays
        cold_session.model.close()
        with bar.phase("warm start (load, compiled program from the cache, first run)", 1) as step:
            session, warm = _start(path, options, signature, arrays)
            step()
        if not session.model.engine_choice_settled:
            with bar.phase("the engines timed (the deferred engine choice)", 1) as step:
                session.model.settle_engine_choice()
                step()
        with bar.phase("warm-up runs", warmup) as step:
            for _ in range(warmup):
                session.run()
                step()
        times = []
        with bar.phase("timed runs", runs) as step:
            for _ in range(runs):
                t = time.perf_counter()
                session.run()
                times.append(time.perf_counter() - t)
                step()
        result: dict[str, Any] = {
            "model": str(path), "signature": session.key, "accelerator_requested": accelerator,
            "precision": precision, "threads": threads,
            "inputs": [{"name": n, "shape": list(a.shape), "dtype": a.dtype.name} for n, a in arrays.items()],
            "input_seed": SEED,
            "init": {"cold": cold, "warm": warm, "cache_dir": None if own_cache else directory,
                     "cache_was_empty": cache_was_empty},
            "first_run_ms": cold["first_run_ms"],
            "latency_ms": latency_stats(times), "warmup": warmup,
            "memory": {**host_memory(), "baseline_rss_bytes": baseline, "peak_reset": peak_reset,
                       "device": device_memory(session.model), "per_device": per_device_memory(session.model),
                       "weights": weight_memory(session.model)},
            "delegation": delegation(session.model),
            "versions": _versions(), "host": _machine(),
        }
        if profile:
            result["profile"] = profile_ops(session, repeats=max(3, min(runs, PROFILE_REPEATS_MAX)),
                                            progress=bar, whole_model_ms=result["latency_ms"]["median"])
            if whole_program_engines(session.model.plan):
                # OpenVINO and the official interpreter run a partition as one program: no per-op times to give
                result["profile"]["note"] = ("per-op times are the exact kernels' under XLA; OpenVINO and the "
                                             "official interpreter run their partitions whole, so they are not "
                                             "their times")
        session.model.close()
        return result
    finally:
        if own_cache:
            shutil.rmtree(directory, ignore_errors=True)


# ---- per-op profile ---------------------------------------------------------------------------
def _signature_info(session: _Session) -> Any:
    from ..runtime.model import signatures_of

    return next(s for s in signatures_of(session.model.model) if s.index == session.index)


def profile_ops(session: _Session, *, repeats: int, progress: _Progress, whole_model_ms: float | None
                ) -> dict[str, Any]:
    """``--profile``: each op of the signature's subgraph (``subgraph`` in the result) timed alone.  ``session``
    is a ``_Session`` or anything with its ``model`` (a CompiledModel), ``index`` (the signature's) and ``arrays``
    (its inputs by name)."""
    model = session.model
    if model.plan.target.value == "reference":
        return _profile_reference(session, repeats, progress)
    from ..backends import registry
    from ..backends.engine import EngineSettings
    from ..ops import Target

    ir = model.model
    sig = _signature_info(session)
    sg = ir.subgraphs[sig.subgraph]
    platform_name = model.accelerator.lower()
    builtin = platform_name == "cpu" and model.options.cpu_options.kernels == "builtin"
    # the exact kernels' engine on the model's device, with a copy of the weights of the profile's own
    engine = registry.engine(registry.name_of(Target.XLA_CPU), EngineSettings(precision=model.options.precision),
                             device=model.environment.device, official_float_order=builtin).placed(
        platform_name, Target.XLA_GPU if platform_name == "gpu" else Target.XLA_CPU)
    by_tensor = {t: a for (_, t), a in zip(sig.inputs, session.arrays.values())}
    num_ops = len(sg.operators)
    with progress.phase(f"profiling {num_ops} ops", num_ops) as step:
        records, dispatch_ms = engine.profile_ops(ir, sg.index, [by_tensor[t] for t in sg.inputs], repeats, step)
    summary = _profile_summary(records, "xla-per-op", repeats, whole_model_ms, dispatch_ms)
    summary["kernels"] = "builtin kernels' order" if builtin else "fast"
    summary["subgraph"] = sg.index
    return summary


def _profile_reference(session: _Session, repeats: int, progress: _Progress) -> dict[str, Any]:
    """The model runs op by op in numpy anyway: time each kernel where it runs."""
    from ..backends.graph import GraphRunner
    from ..ops import Target

    model = session.model
    sig = _signature_info(session)
    sg = model.model.subgraphs[sig.subgraph]
    records: list[dict[str, Any]] = []

    class Timed(GraphRunner):
        def _run_op(self, sgr: Any, op_index: int, values: dict) -> None:
            op = sgr.operators[op_index]
            t = time.perf_counter()
            super()._run_op(sgr, op_index, values)
            if sgr.index == sg.index:
                records.append({"index": op.index, "op": op.opcode_name, "kind": "timed",
                                "ms": (time.perf_counter() - t) * 1e3,
                                "output_shapes": [list(sgr.tensors[o].shape) for o in op.outputs if o >= 0]})
                step()

    by_tensor = {t: a for (_, t), a in zip(sig.inputs, session.arrays.values())}
    with progress.phase(f"profiling {len(sg.operators)} ops", len(sg.operators)) as step:
        Timed(model.model, Target.REFERENCE).run_subgraph(sg.index, [by_tensor[t] for t in sg.inputs])
    return {**_profile_summary(records, "reference-op-by-op", 1, None, None), "subgraph": sg.index}


def _profile_summary(records: list[dict], method: str, repeats: int, whole_model_ms: float | None,
                     dispatch_ms: float | None) -> dict[str, Any]:
    timed = [r for r in records if r["kind"] == "timed"]
    total = sum(r["ms"] for r in timed)
    by_op: dict[str, dict[str, Any]] = {}
    for r in timed:
        entry = by_op.setdefault(r["op"], {"op": r["op"], "count": 0, "ms": 0.0})
        entry["count"] += 1
        entry["ms"] += r["ms"]
    for entry in by_op.values():
        entry["share"] = entry["ms"] / total if total else 0.0
    return {"method": method, "repeats": repeats, "sum_ms": total, "whole_model_median_ms": whole_model_ms,
            "dispatch_overhead_ms": dispatch_ms,
            "ops_timed": len(timed), "ops_folded": sum(r["kind"] == "folded" for r in records),
            "ops_stateful": sum(r["kind"] == "stateful" for r in records),
            "by_op": sorted(by_op.values(), key=lambda e: -e["ms"]),
            "ops": sorted(records, key=lambda r: -r["ms"])}


# ---- output -----------------------------------------------------------------------------------
def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} ms" if value < 10 else f"{value:.1f} ms"


def render(result: dict[str, Any]) -> None:
    out = console()
    d, lat, init = result["delegation"], result["latency_ms"], result["init"]
    shapes = ", ".join(f"{i['name']} {i['shape']} {i['dtype']}" for i in result["inputs"])
    table = titled_table(f"{Path(result['model']).name}  {signature_label(result['signature'])}  "
                         f"{d['accelerator']} {result['precision']}")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_column("notes")
    delegated = "fully delegated" if d["fully_delegated"] else "NOT fully delegated"
    table.add_row("delegation", delegated,
                  f"{d['ops_on_gpu']} ops on GPU, {d['ops_on_cpu']} on CPU of {d['ops']}: {d['engine_summary']}")
    for refused in d["refused"][:5]:
        table.add_row("", "", f"refused: {refused}")
    if d.get("engine_choice"):
        table.add_row("engine choice", "", d["engine_choice"])
    if d.get("numerics"):
        table.add_row("numbers", "", d["numerics"])
    table.add_row("start-up, cold", _ms(init["cold"]["total_ms"]),
                  f"load {_ms(init['cold']['load_ms'])} + first run {_ms(init['cold']['first_run_ms'])} "
                  "(trace, compile, run, read back)")
    table.add_row("start-up, warm", _ms(init["warm"]["total_ms"]),
                  f"load {_ms(init['warm']['load_ms'])} + first run {_ms(init['warm']['first_run_ms'])} "
                  "(compiled program from the compile cache)")
    table.add_row("steady median", _ms(lat["median"]), f"{lat['count']} runs after {result['warmup']} warm-up; "
                  "outputs read back to host every run")
    table.add_row("p5 / p95", f"{_ms(lat['p5'])} / {_ms(lat['p95'])}", "")
    table.add_row("min / max", f"{_ms(lat['min'])} / {_ms(lat['max'])}", "")
    mem = result["memory"]
    table.add_row("peak host RSS", human_bytes(mem["peak_rss_bytes"]),
                  f"process high-water mark{' since before load' if mem['peak_reset'] else ''}; "
                  f"RSS before load {human_bytes(mem['baseline_rss_bytes'] or 0)}")
    device = mem["device"]
    table.add_row("device memory", human_bytes(device["peak_bytes_in_use"]) if device and
                  "peak_bytes_in_use" in device else "-",
                  "peak in use (JAX allocator)" if device else "not reported by this device")
    weights = mem.get("weights")
    if weights and weights["held_bytes"]:
        ratio = weights["held_bytes"] / weights["file_weight_bytes"] if weights["file_weight_bytes"] else float("nan")
        table.add_row("weights held", human_bytes(weights["held_bytes"]),
                      f"{ratio:.2f}x the file's {human_bytes(weights['file_weight_bytes'])} of constants (XLA's "
                      "parameters; small constants are compiled into the program)")
    for row in mem.get("per_device") or []:
        in_use = f"; in use {human_bytes(row['bytes_in_use'])}, peak {human_bytes(row['peak_bytes_in_use'])}" if (
            "peak_bytes_in_use" in row) else ""
        table.add_row(f"weights on {row['device']}", human_bytes(row["weight_bytes"]),
                      f"split over {len(mem['per_device'])} devices (measured){in_use}")
    table.add_row("inputs", "", f"{shapes} (random, seed {result['input_seed']})")
    host = result["host"]
    table.add_row("host", "", f"{host['machine']}, {host['cpus']} CPUs, load {host['load_average_1m']}; "
                  + ", ".join(f"{k} {v}" for k, v in result["versions"].items()))
    out.print(table)
    if "profile" in result:
        _render_profile(out, result["profile"])


def _render_profile(out: Any, p: dict[str, Any]) -> None:
    if p["method"] == "xla-per-op":
        out.print(f"Per-op profile: each op compiled and run alone as its own XLA program on the device, "
                  f"median of {p['repeats']}. The whole model fuses ops and pays one dispatch, so these times "
                  f"do not add up to its latency: per-op sum {_ms(p['sum_ms'])} vs whole model "
                  f"{_ms(p['whole_model_median_ms'])}; one empty dispatch costs {_ms(p['dispatch_overhead_ms'])} "
                  f"here. {p['ops_folded']} ops fold into constants at trace time (no run-time cost), "
                  f"{p['ops_stateful']} stateful ops are not timed.")
    else:
        out.print("Per-op profile: the model runs op by op on the numpy reference backend; these are its "
                  f"kernels' times in one run (sum {_ms(p['sum_ms'])}).")
    if "note" in p:
        out.print(f"Note: {p['note']}.")
    by_op = titled_table("time by op type")
    for name, justify in (("op", "left"), ("count", "right"), ("total", "right"), ("share", "right")):
        by_op.add_column(name, justify=justify)
    for e in p["by_op"][:TOP_OPS]:
        by_op.add_row(e["op"], str(e["count"]), _ms(e["ms"]), f"{100 * e['share']:.1f}%")
    out.print(by_op)
    top = titled_table(f"slowest {min(TOP_OPS, len(p['ops']))} ops")
    for name, justify in (("#", "right"), ("op", "left"), ("output shape", "left"), ("time", "right")):
        top.add_column(name, justify=justify)
    for r in p["ops"][:TOP_OPS]:
        top.add_row(str(r["index"]), r["op"], " ".join(map(str, r["output_shapes"])), _ms(r["ms"]))
    out.print(top)


def run(args: Any) -> int:
    import json

    if not args.file.is_file():
        raise InvalidArgumentError(f"{args.file}: no such file")
    result = benchmark(args.file, accelerator=args.accelerator, precision=args.precision, signature=args.signature,
                       runs=args.runs, warmup=args.warmup, threads=args.threads, cache_dir=args.cache_dir,
                       profile=args.profile, progress=sys.stderr.isatty(), kernel_mode=args.kernel_mode,
                       devices=parse_devices(args.devices), engine_choice=args.engine_choice)
    if args.json is not None:
        text = json.dumps(result, indent=1, allow_nan=False, default=str)
        if str(args.json) == "-":
            print(text)
            return 0
        args.json.write_text(text + "\n")
    render(result)
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("bench", help="measure start-up, latency (outputs read back), memory and delegation")
    p.add_argument("file", metavar="FILE", type=Path, help="the .tflite model")
    p.add_argument("--accelerator", default="cpu", metavar="cpu|gpu|gpu,cpu", help=ACCELERATOR_HELP)
    p.add_argument("--precision", default="fp32", choices=PRECISION_CHOICES,
                   help="float precision on the device (default fp32)")
    p.add_argument("--signature", metavar="KEY", help="signature to run (default: the first)")
    p.add_argument("--runs", type=count(1), default=DEFAULT_RUNS, metavar="N",
                   help=f"timed runs (default {DEFAULT_RUNS})")
    p.add_argument("--warmup", type=count(0), default=DEFAULT_WARMUP, metavar="N",
                   help=f"untimed runs before them (default {DEFAULT_WARMUP})")
    p.add_argument("--threads", type=count(0), default=0, metavar="N",
                   help="CpuOptions.num_threads: OpenVINO's and LiteRT's threads (XLA CPU sizes its own pool; "
                        "default 0: the physical cores)")
    p.add_argument("--kernel-mode", choices=KERNEL_MODES, default="fast",
                   help="CPU kernels: fast (the official interpreter or OpenVINO where faster, XLA for the rest), "
                        "builtin (exact TFLite kernels on XLA) or reference (numpy)")
    p.add_argument("--json", type=Path, metavar="OUT", help="write every number to OUT as JSON ('-': stdout only)")
    p.add_argument("--profile", action="store_true", help="also time each op (see the note printed with it)")
    p.add_argument("--devices", metavar="all|N|I,J,...",
                   help="split the weights over several devices of the accelerator and report each one's memory")
    p.add_argument("--cache-dir", metavar="DIR",
                   help="compile cache directory to use and keep (default: a temporary one, removed after)")
    p.add_argument("--engine-choice", choices=ENGINE_CHOICES, default="load",
                   help=ENGINE_CHOICE_HELP + " (default here: load, so that the cold start includes the timing "
                        "and the timed runs run the settled choice)")
    p.set_defaults(handler=run)
