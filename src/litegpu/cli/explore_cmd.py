"""``litegpu explore``: what ran where, how long each op took and how far it drifted, on Model Explorer's graph.

Writes Model Explorer node data (``compile.node_data``) for the model's graph, one JSON file per overlay:

- ``engine.json``, ``partition.json``, ``fallback.json``: the delegation plan (engine and device of each op, its
  partition, and why an op is not on the plan's preferred engine);
- ``time.json`` (``--profile``): each op timed alone, as ``litegpu bench --profile`` times it;
- ``distance.json`` (``--compare-with``): each op's output against the builtin kernels' or the official
  interpreter's on the same inputs (``runtime.op_distance``),

then starts Model Explorer (``pip install 'litegpu[explore]'``) on the model with them loaded, or prints the command
that does (``--no-browser``).  Without measurements the plan is made as ``inspect --accelerator`` makes it, with no
device; with them, it is the plan of the model that ran (on a machine without a GPU, a GPU request runs on the CPU).
Model Explorer reads ``.tflite``: a ``.circle`` model is shown through its ``.tflite`` form, written beside the node
data (as ``litegpu pack`` writes it; same subgraphs and op indices, so the same node ids).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import numpy as np

from ..backends import registry
from ..errors import FormatConversionError, InvalidArgumentError
from .common import KERNEL_MODES, accelerator_flags, console, cpu_kernel_mode, titled_table

LOOPBACK = "127.0.0.1"
DEFAULT_PORT = 8080
PROFILE_REPEATS = 5
INSTALL_HINT = "pip install 'litegpu[explore]' (Google AI Edge's Model Explorer: ai-edge-model-explorer)"


def model_explorer_installed() -> bool:
    """Asked without importing it (its import takes seconds: it loads PyTorch where installed)."""
    import importlib.util

    return importlib.util.find_spec("model_explorer") is not None


def shown_model(model: Any, path: Path, out: Path) -> Path:
    """The file Model Explorer opens: the model's own, or for a .circle model its .tflite form in ``out``."""
    if model.file_format == "tflite":
        return path
    from ..ir.save import write_model

    shown = out / f"{path.stem}.tflite"
    try:
        write_model(model, shown, file_format="tflite")
    except FormatConversionError as e:
        raise InvalidArgumentError(f"{path}: Model Explorer reads .tflite only, and this circle model cannot be "
                                   f"written as .tflite: {e}") from None
    return shown


def _options(accelerator: str, kernel_mode: str, gpu_engine: str | None) -> Any:
    import litegpu

    return litegpu.Options(accelerator_flags(accelerator),
                           cpu_options=litegpu.CpuOptions(kernel_mode=cpu_kernel_mode(kernel_mode)),
                           gpu_options=litegpu.GpuOptions(engine=gpu_engine))


def explore(path: Path, *, out: Path, accelerator: str = "cpu", kernel_mode: str = "fast",
            gpu_engine: str | None = None, signature: str | None = None, inputs: dict[str, np.ndarray] | None = None,
            profile: bool = False, compare_with: str | None = None) -> dict[str, Any]:
    """Write the node data of ``path`` into ``out``; return what was written and measured."""
    from ..ir import read_model
    from .inspect_cmd import accelerator_flags, device_free_plan

    if kernel_mode not in KERNEL_MODES:
        raise InvalidArgumentError(f"--kernel-mode {kernel_mode!r}: expected one of {', '.join(KERNEL_MODES)}")
    if not path.is_file():
        raise InvalidArgumentError(f"{path}: no such file")
    model = read_model(path)
    flags = accelerator_flags(accelerator)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InvalidArgumentError(f"--out {out}: cannot make the folder ({e.strerror})") from None
    shown = shown_model(model, path, out)
    report: dict[str, Any] = {"model": str(path), "shown": str(shown.resolve()), "out": str(out)}
    overlays: dict[str, Any] = {}
    if profile or compare_with:
        import litegpu

        compiled = litegpu.CompiledModel.from_file(str(path), options=_options(accelerator, kernel_mode, gpu_engine))
        try:
            plan = compiled.plan
            overlays.update(plan.node_data())
            key, arrays = _inputs(compiled, signature, inputs or {})
            report["signature"] = key
            if profile:
                overlays["time"], report["profile"] = _profile(compiled, key, arrays)
            if compare_with:
                overlays["distance"], report["distance"] = _distance(compiled, key, arrays, compare_with)
        finally:
            compiled.close()
    else:
        plan = device_free_plan(model, flags, kernel_mode, gpu_engine).plan
        overlays.update(plan.node_data())
    report["plan"] = {"summary": plan.summary() if plan.accelerator == "GPU" else plan.engine_summary(),
                      "engines": plan.engine_summary(), "notes": list(plan.notes),
                      "fallbacks": len(overlays["fallback"].values)}
    report["files"] = {name: str(data.save(out / f"{name}.json").resolve()) for name, data in overlays.items()}
    report["command"] = model_explorer_command(shown, [Path(f) for f in report["files"].values()])
    return report


def _inputs(compiled: Any, signature: str | None, given: dict[str, np.ndarray]) -> tuple[str, dict[str, np.ndarray]]:
    from .bench_cmd import _signature_key, random_inputs

    key = _signature_key(compiled, Path(compiled.model.source), signature)
    arrays = random_inputs(compiled, key)
    unknown = set(given) - set(arrays)
    if unknown:
        raise InvalidArgumentError(f"{compiled.model.source}: signature {key!r} has no input(s) {sorted(unknown)} "
                                   f"(has: {', '.join(arrays)})")
    return key, {**arrays, **given}


class _Profiled:
    """What ``bench_cmd.profile_ops`` reads of a bench session."""

    def __init__(self, model: Any, key: str, arrays: dict[str, np.ndarray]):
        self.model, self.key, self.arrays = model, key, arrays
        self.index = model.get_signature_index(key)


def _profile(compiled: Any, key: str, arrays: dict[str, np.ndarray]) -> tuple[Any, dict[str, Any]]:
    from ..compile.node_data import time_node_data
    from .bench_cmd import _Progress, profile_ops

    found = profile_ops(_Profiled(compiled, key, arrays), repeats=PROFILE_REPEATS, progress=_Progress(False),
                        whole_model_ms=None)
    timed = [r for r in found["ops"] if r["kind"] == "timed"]
    what = ("each op alone as its own XLA program (not OpenVINO's or the official interpreter's time)"
            if found["method"] == "xla-per-op" else "each op's numpy kernel in one run")
    return time_node_data(found, compiled.model), {
        "method": what, "sum_ms": found["sum_ms"], "ops_timed": len(timed),
        "slowest": [{"index": r["index"], "op": r["op"], "ms": r["ms"]} for r in timed[:5]]}


def _distance(compiled: Any, key: str, arrays: dict[str, np.ndarray], against: str) -> tuple[Any, dict[str, Any]]:
    from ..runtime.op_distance import op_distances

    found = op_distances(compiled, arrays, signature=key, compare_with=against)
    worst = sorted(found.ops.values(), key=lambda d: -d.distance)[:5]
    return found.node_data(), {
        "against": against, "ops": len(found.ops), "note": found.note,
        "farthest": [{"index": d.op_index, "op": d.opcode, "distance": d.distance, "units": d.units,
                      "tensor": d.tensor} for d in worst]}


def model_explorer_command(shown: Path, files: list[Path], port: int | None = None) -> str:
    """The shell command that opens Model Explorer on ``shown`` with the node data ``files``."""
    words = ["model-explorer", str(shown), "--node_data_paths=" + ",".join(str(f) for f in files)]
    if port is not None:
        words.append(f"--port={port}")
    return " ".join(shlex.quote(w) for w in words)


def serve(shown: Path, files: list[Path], port: int, open_browser: bool = True) -> None:
    """Model Explorer's server on the loopback address with the model and node data loaded, opened in the browser;
    until Ctrl+C."""
    import model_explorer

    config = model_explorer.config()
    config.add_model_from_path(str(shown))
    for f in files:
        config.add_node_data_from_path(str(f))
    model_explorer.visualize_from_config(config, host=LOOPBACK, port=port, no_open_in_browser=not open_browser)


def render(report: dict[str, Any]) -> None:
    out = console()
    plan = report["plan"]
    out.print(f"[bold]{report['model']}[/bold]: {plan['engines']}")
    if plan["summary"] != plan["engines"]:
        out.print(plan["summary"])
    for note in plan["notes"]:
        out.print(f"note: {note}", markup=False)
    if "profile" in report:
        p = report["profile"]
        out.print(f"time: {p['ops_timed']} ops timed, {p['method']}; sum {p['sum_ms']:.3f} ms; slowest: "
                  + ", ".join(f"{r['op']} #{r['index']} {r['ms']:.3f} ms" for r in p["slowest"]), markup=False)
    if "distance" in report:
        d = report["distance"]
        out.print(f"distance from the {d['against']} kernels ({d['ops']} ops); farthest: "
                  + ", ".join(f"{r['op']} #{r['index']} {r['distance']:.2e}" for r in d["farthest"]), markup=False)
        if d["note"]:
            out.print(f"note: {d['note']}", markup=False)
    table = titled_table(f"Model Explorer node data in {report['out']}")
    table.add_column("overlay")
    table.add_column("file", overflow="fold")
    for name, file in report["files"].items():
        table.add_row(name, file)
    out.print(table)


def run(args: Any) -> int:
    from .run_cmd import parse_inputs

    if args.input and not (args.compare_with or args.profile):
        raise InvalidArgumentError("--input is used by --compare-with and --profile")
    out = args.out if args.out is not None else Path(f"{args.file.stem}.explore")
    report = explore(args.file, out=out, accelerator=args.accelerator, kernel_mode=args.kernel_mode,
                     gpu_engine=args.gpu_engine, signature=args.signature, inputs=parse_inputs(args.input or []),
                     profile=args.profile, compare_with=args.compare_with)
    render(report)
    files = [Path(f) for f in report["files"].values()]
    installed = model_explorer_installed()
    if args.no_browser or not installed:
        if not installed:
            print(f"Model Explorer is not installed: {INSTALL_HINT}")
        print("Open it with:\n  " + model_explorer_command(Path(report["shown"]), files, args.port))
        return 0
    serve(Path(report["shown"]), files, args.port or DEFAULT_PORT)
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("explore", help="show what ran where (engine, partition, fallback reasons), per-op times and "
                                       "per-op distance on Model Explorer's graph")
    p.add_argument("file", metavar="FILE", type=Path, help="the .tflite or .circle model")
    p.add_argument("--accelerator", default="cpu", metavar="cpu|gpu|gpu,cpu", help="the plan to show (default cpu)")
    p.add_argument("--kernel-mode", choices=KERNEL_MODES, default="fast",
                   help="CPU kernels: fast (the default), builtin or reference, as for run and bench")
    p.add_argument("--gpu-engine", choices=registry.named(device="GPU"), default=None,
                   help="the engine of the GPU's partitions (default: XLA; with a measurement, what CompiledModel "
                        "picks: XLA where JAX sees a GPU, else IREE)")
    p.add_argument("--signature", metavar="KEY", help="signature to measure (default: the first)")
    p.add_argument("--input", action="append", metavar="NAME=FILE.npy",
                   help="an input array for the measurements (repeatable; default: random, seeded)")
    p.add_argument("--profile", action="store_true", help="also time each op (as bench --profile): time.json")
    p.add_argument("--compare-with", choices=("builtin", "official"),
                   help="also compare each op's output with litegpu's builtin kernels or the official interpreter's "
                        "on the same inputs: distance.json")
    p.add_argument("--out", type=Path, metavar="DIR", help="where to write the node data (default: FILE's stem "
                                                           "+ .explore, in the current folder)")
    p.add_argument("--port", type=int, metavar="N", help=f"Model Explorer's port (default {DEFAULT_PORT} or the next "
                                                         "free one)")
    p.add_argument("--no-browser", action="store_true",
                   help="write the node data and print the model-explorer command instead of starting it")
    p.set_defaults(handler=run)
