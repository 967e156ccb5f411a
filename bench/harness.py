"""What the bench scripts share: where things are, the machine named, seeded inputs, the official interpreter,
alternating timing, medians and Markdown tables.

A script in an area folder (``bench/cpu/engines.py``) starts with::

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
    import harness

Importing the harness puts every area folder of ``bench/`` on ``sys.path`` (after what is there), so a script
imports another by its name (``import decoder_model``) wherever each lives; a name is used once across the
folders (``tests/test_bench_harness.py`` checks it).  Only the standard library is imported here at the top:
numpy, litegpu and the official interpreter are imported where a function needs them.
"""

from __future__ import annotations

import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
# LITEGPU_SHARED_MODELS, as in tests/conftest.py: a GPU machine gets the models in a folder of the checkout
SHARED_MODELS = Path(os.environ.get("LITEGPU_SHARED_MODELS", ROOT.parent / "shared" / "models"))
# The converted zoos take an hour to rebuild and an ignored folder goes with its worktree: LITEGPU_ZOO_DIR puts them
# where they last (/work/zoo here); without it, bench/'s top (ignored by git), as before the scripts moved into folders
ZOO_CACHE = Path(os.environ.get("LITEGPU_ZOO_DIR", BENCH / ".zoo"))
KERAS_ZOO = ZOO_CACHE / "keras"  # bench/models/zoo_models.py, batch 1 and 8
LITERT_TORCH_ZOO = ZOO_CACHE / "litert_torch"  # bench/models/litert_torch_zoo.py
# TensorFlow's venv, for the converters that need it
TF_PYTHON = Path(os.environ.get("LITEGPU_TF_PYTHON", "/work/venv-tf/bin/python"))


def area_folders() -> list[Path]:
    """The folders scripts live in (``cpu``, ``gpu``, ``models`` ...): not the caches (hidden) or ``__pycache__``."""
    return sorted(p for p in BENCH.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))


def _make_scripts_importable() -> None:
    for folder in map(str, area_folders()):
        if folder not in sys.path:
            sys.path.append(folder)


_make_scripts_importable()


# ---- the machine ------------------------------------------------------------------------------------

def cpu_name() -> str:
    """The CPU's model name, as litegpu keys its timing verdicts by it."""
    from litegpu.backends.engine import cpu_name as litegpu_cpu_name

    return litegpu_cpu_name()


def version(package: str) -> str:
    """The installed version of ``package`` (a distribution or module name), or why there is none."""
    from importlib import import_module, metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        pass
    try:
        return str(getattr(import_module(package.replace("-", "_")), "__version__", "unknown"))
    except ImportError:
        return "not installed"


def machine(*packages: str) -> dict[str, Any]:
    """The machine a figure came from: architecture, CPU, cores, load average now, Python and ``packages``'
    versions (for a results file)."""
    return {"machine": platform.machine(), "cpu": cpu_name(), "cpus": os.cpu_count(),
            "load_average": [round(x, 2) for x in os.getloadavg()], "python": platform.python_version(),
            **{name: version(name) for name in packages}}


def machine_line(*packages: str) -> str:
    """One line naming the machine, for a printed table: ``Machine: x86_64 <CPU>, 2 cores, load 3.1 / 2.8 / 2.5``."""
    info = machine(*packages)
    load = " / ".join(f"{x:.1f}" for x in info["load_average"])
    versions = "".join(f", {name} {info[name]}" for name in packages)
    return f"Machine: {info['machine']} {info['cpu']}, {info['cpus']} cores, load {load}{versions}"


def parse_args(parser: Any, argv: Sequence[str] | None = None) -> Any:
    """``parser``'s arguments, then the machine line printed: a measurement's output starts by naming the machine."""
    args = parser.parse_args(argv)
    print(machine_line(), flush=True)
    return args


# ---- inputs and the official interpreter ------------------------------------------------------------

def random_inputs(details: Sequence[Mapping], seed: int = 0, int_low: int = -100) -> list:
    """Seeded inputs for tensor ``details`` (``shape``, ``dtype``): floats in [-1, 1), integers in
    [int_low, 100) clipped to the dtype, zeros for anything else."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for d in details:
        shape, dtype = tuple(int(n) for n in d["shape"]), np.dtype(d["dtype"])
        if dtype.kind == "f":
            out.append(rng.uniform(-1, 1, shape).astype(dtype))
        elif dtype.kind in "iu":
            info = np.iinfo(dtype)
            out.append(rng.integers(max(info.min, int_low), min(info.max, 100), shape).astype(dtype))
        else:
            out.append(np.zeros(shape, dtype))
    return out


def official_interpreter(path: Path | str, threads: int | None = None, *, builtin: bool = False,
                         allocate: bool = True) -> Any:
    """``ai_edge_litert``'s Interpreter on ``path``: with ``threads`` threads (None: its default), its default
    delegate (XNNPACK) or, ``builtin``, its builtin kernels alone; tensors allocated unless ``allocate=False``."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    kwargs: dict[str, Any] = {} if threads is None else {"num_threads": threads}
    if builtin:
        kwargs["experimental_op_resolver_type"] = OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    interpreter = Interpreter(model_path=str(path), **kwargs)
    if allocate:
        interpreter.allocate_tensors()
    return interpreter


def invoker(interpreter: Any, inputs: Sequence) -> Callable[[], list]:
    """``run()``: set ``inputs`` (subgraph 0's order), invoke, read every output back."""
    ins, outs = interpreter.get_input_details(), interpreter.get_output_details()

    def run() -> list:
        for d, x in zip(ins, inputs):
            interpreter.set_tensor(d["index"], x)
        interpreter.invoke()
        return [interpreter.get_tensor(d["index"]) for d in outs]

    return run


def official_runner(path: Path | str, inputs: Sequence, threads: int | None,
                    *, builtin: bool = False) -> tuple[Callable[[], list], Any]:
    """(run, interpreter): ``run()`` sets the inputs, invokes and reads every output back."""
    interpreter = official_interpreter(path, threads, builtin=builtin)
    return invoker(interpreter, inputs), interpreter


# ---- timing -----------------------------------------------------------------------------------------

ORDERS = ("fixed", "rotate", "shuffle")


def rotated(names: Sequence, k: int) -> list:
    """``names`` started at the ``k``-th (modulo their number): round ``k``'s order when the start rotates."""
    k %= len(names)
    return list(names[k:]) + list(names[:k])


def rounds(names: Sequence, count: int | None, order: str = "fixed", seed: int = 0) -> Iterator[list]:
    """The order of ``names`` in each of ``count`` rounds (None: without end): ``fixed`` as given, ``rotate``
    starting one further each round (no variant always follows the same one), ``shuffle`` a new seeded order
    each round (after a spinning worker pool of one engine, no fixed variant pays for it)."""
    if order not in ORDERS:
        raise ValueError(f"order {order!r}: one of {', '.join(ORDERS)}")
    names, shuffle = list(names), random.Random(seed)
    k = 0
    while count is None or k < count:
        yield (names if order == "fixed" else rotated(names, k) if order == "rotate"
               else shuffle.sample(names, len(names)))
        k += 1


def alternate(runners: Mapping[str, Callable[[], Any]], count: int, *, order: str = "fixed", calls: int = 1,
              warmup: int = 0, clock: Callable[[], float] = time.perf_counter, seconds: float | None = None,
              min_rounds: int = 0, seed: int = 0) -> dict[str, list[float]]:
    """Seconds per call of each runner, the runners taking turns round by round (``rounds``' ``order``) on the
    same machine state.  Each runner must itself read its outputs back (a device array not waited for is not
    timed).  ``warmup`` untimed rounds first (in the given order); a turn times ``calls`` calls in a row and
    records their mean; ``count`` rounds, or with ``seconds`` as many as fit in that wall time (at least
    ``min_rounds``, at most ``count``).  ``clock``: ``time.process_time`` for CPU time, which a machine others
    load stretches less."""
    for _ in range(warmup):
        for run in runners.values():
            run()
    times: dict[str, list[float]] = {name: [] for name in runners}
    deadline = None if seconds is None else time.perf_counter() + seconds
    done = 0
    for names in rounds(list(runners), count, order, seed):
        if done >= min_rounds and deadline is not None and time.perf_counter() >= deadline:
            break
        for name in names:
            run = runners[name]
            start = clock()
            for _ in range(calls):
                run()
            times[name].append((clock() - start) / calls)
        done += 1
    return times


def timed(fn: Callable[[], Any], repeats: int, warmup: int = 2) -> list[float]:
    """Seconds per call of ``fn`` alone (which must wait for its own work), after ``warmup`` calls."""
    return alternate({"fn": fn}, repeats, warmup=warmup)["fn"]


def median_ms(seconds: Sequence[float]) -> float:
    return statistics.median(seconds) * 1e3


def percentile_ms(seconds: Sequence[float], q: float) -> float:
    """The ``q``-th percentile in milliseconds, linearly interpolated (numpy's default)."""
    import numpy as np

    return float(np.percentile(np.asarray(seconds) * 1e3, q))


def geomean(values: Sequence[float]) -> float:
    """The geometric mean of ratios (nan for none)."""
    import numpy as np

    return float(np.exp(np.mean(np.log(values)))) if len(values) else float("nan")


# ---- processes --------------------------------------------------------------------------------------

def child_environment(**extra: str) -> dict[str, str]:
    """This environment for a child process that writes bytecode as an installed package has it
    (``PYTHONDONTWRITEBYTECODE=1`` would recompile litegpu's and JAX's sources in every start, ~0.1 s)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(extra)
    return env


def child_row(argv: Sequence[str], model: str, timeout: float) -> dict:
    """The row a child process measuring one model printed last (a line ``ROW {json}``), or what went wrong: a
    crash or a big model's memory stays in that process."""
    import json
    import subprocess

    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"model": model, "error": f"timed out after {timeout:.0f} s"}
    found = [line[4:] for line in done.stdout.splitlines() if line.startswith("ROW ")]
    return json.loads(found[-1]) if found else {
        "model": model, "error": (done.stderr.strip().splitlines() or ["no output"])[-1][:200]}


def timed_process(argv: Sequence[str], env: Mapping[str, str] | None = None,
                  timeout: float = 900) -> tuple[float, float, Any]:
    """(wall seconds, CPU seconds, the finished ``subprocess.CompletedProcess``) of one whole process: on a
    machine others share, the CPU time (user + system, the kernel's accounting of the finished child) is what
    the load does not stretch."""
    import resource
    import subprocess

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    begin = time.perf_counter()
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                          env=dict(env) if env is not None else child_environment())
    wall = time.perf_counter() - begin
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), done


# ---- reporting --------------------------------------------------------------------------------------

def table_row(cells: Sequence[Any]) -> str:
    return "| " + " | ".join(map(str, cells)) + " |"


def table_head(columns: Sequence[str], align: str) -> str:
    """A Markdown table's header and rule; ``align`` one letter a column, ``l`` left or ``r`` right
    (numbers)."""
    if len(align) != len(columns) or set(align) - {"l", "r"}:
        raise ValueError(f"align {align!r}: one of l / r for each of {len(columns)} columns")
    return table_row(columns) + "\n|" + "".join("---|" if a == "l" else "---:|" for a in align)


def write_json(path: Path, data: Any, **dumps: Any) -> None:
    """``data`` as JSON at ``path``, written to a temporary file first: a run stopped midway leaves the last
    complete file."""
    import json

    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, **dumps) + "\n")
    tmp.replace(path)
