"""The first five minutes (issue 35): whole-process starts of a user's script, litegpu against the official
interpreter running the same script, the first start ever (empty compile cache) and the second; this branch's
litegpu against another revision's (``--against main``) in the same run.

    PYTHONPATH=src python bench/startup/startup.py [--runs 5] [--against main]
        [--models face hand int8 transformer vgg hand@openvino face@interpreter] [--skip-crowd] [--skip-cli]

What is timed, each a new Python process, in rounds: the official script, this tree's first start, the other
tree's first start, the official script again, this tree's second start, the other tree's second start:

- a script that loads a model and runs it once on seeded inputs, reading the outputs: with litegpu
  ``CompiledModel.from_file(path)`` and ``model.run(inputs)`` (no options: the compile cache on by default), with
  the official package ``Interpreter(model_path=path)``, ``allocate_tensors``, set / invoke / get (its defaults);
  ``NAME@openvino``: litegpu's plan pinned to OpenVINO (``CpuOptions(engines=("openvino",))``), a small model on
  the engine whose import a warm start then pays; ``NAME@interpreter``: ``litegpu.Interpreter`` (the builtin
  kernels under XLA) in the official API's steps;
- litegpu's *first* start: ``LITEGPU_CACHE_DIR`` a new empty folder for every run; its *second* start: a folder a
  first start of the same tree filled (the official interpreter keeps nothing between processes: its script is
  the same both times);
- ``litegpu run`` (second start) on the bundled model, wall time (the issue's bound: 0.5 s);
- eight processes started at once on an empty cache (the bundled model on the default path, and on the builtin
  kernels, whose XLA program is compiled): every process's outputs, how many cache entries each process wrote
  (a store counted per process), and whether the cache holds one verified entry per program.

Medians of ``--runs`` runs (at least 5), wall and CPU (user + system, the kernel's accounting of each finished
child: on a machine others share, the CPU seconds are what the load does not stretch); each ratio is taken pair by
pair (a litegpu process over the official one of its round), then the median.  Bytecode is compiled first
(``compileall``) and kept in both trees (an installed package has its .pyc files).  The models: the bundled face
detector; ../shared/models' hand landmark (MediaPipe), int8 MobileNetV3 and transformer encoder; and a VGG-16
convolution trunk at batch 2 made with litegpu's builder (31 G multiply-accumulates: past the size where the
planner times the engines, so the plan gives it to OpenVINO untimed), kept in ``$LITEGPU_STARTUP_ZOO``
(default /work/zoo/startup, else a temp folder).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
import harness  # noqa: E402

ROOT = harness.ROOT
SHARED = harness.SHARED_MODELS

OFFICIAL = """
import sys, numpy as np
from ai_edge_litert.interpreter import Interpreter
interpreter = Interpreter(model_path=sys.argv[1])
interpreter.allocate_tensors()
rng = np.random.default_rng(0)
for d in interpreter.get_input_details():
    x = rng.uniform(-1, 1, d["shape"]) if np.dtype(d["dtype"]).kind == "f" else rng.integers(-100, 100, d["shape"])
    interpreter.set_tensor(d["index"], x.astype(d["dtype"]))
interpreter.invoke()
outputs = [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]
"""

LITEGPU = """
import sys, numpy as np
import litegpu
options = None
if sys.argv[2] != "-":  # the engines the plan may use
    options = litegpu.Options(litegpu.HardwareAccelerator.CPU,
                              cpu_options=litegpu.CpuOptions(engines=tuple(sys.argv[2].split(","))))
model = litegpu.CompiledModel.from_file(sys.argv[1], options=options)
rng = np.random.default_rng(0)
inputs = {}
for name, d in model.get_input_tensor_details(0).items():
    x = rng.uniform(-1, 1, d["shape"]) if np.dtype(d["dtype"]).kind == "f" else rng.integers(-100, 100, d["shape"])
    inputs[name] = x.astype(d["dtype"])
outputs = model.run(inputs)
if len(sys.argv) > 3:
    print(model.plan.engine_summary())
"""

# litegpu's classic Interpreter API (the builtin kernels under XLA), the official script's steps.
INTERPRETER = OFFICIAL.replace("from ai_edge_litert.interpreter import Interpreter", "from litegpu import Interpreter")

# One of eight processes started together: the outputs, and how many entries this process stored.
CROWD = """
import json, sys, numpy as np
import litegpu
from litegpu.backends import cache
stored = []
original = cache.CompileCache.store
def counting(self, key, payload, meta=None):
    stored.append(key)
    return original(self, key, payload, meta)
cache.CompileCache.store = counting
options = None
if sys.argv[2] == "builtin":
    options = litegpu.Options(litegpu.HardwareAccelerator.CPU,
                              cpu_options=litegpu.CpuOptions(kernel_mode=litegpu.CpuKernelMode.BUILTIN))
model = litegpu.CompiledModel.from_file(sys.argv[1], options=options)
reference = np.load(sys.argv[3])
inputs = {k.split("/")[-1]: reference[k] for k in reference.files if k.startswith("-/in/")}
outputs = model.run(inputs)
print(json.dumps({"stored": stored, "outputs": {k: v.tolist() for k, v in outputs.items()}}))
"""


def environment(cache_dir: str | None, src: Path = ROOT / "src") -> dict:
    env = harness.child_environment(PYTHONPATH=str(src) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if cache_dir is not None:
        env["LITEGPU_CACHE_DIR"] = cache_dir
    return env


def start(argv: list[str], env: dict) -> tuple[float, float, str]:
    """(wall s, CPU s, stdout) of one whole process."""
    wall, cpu, done = harness.timed_process(argv, env, timeout=900)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(argv[:3])}: {done.stderr.strip()[-400:]}")
    return wall, cpu, done.stdout


def vgg_trunk(path: Path, batch: int = 2) -> Path:
    """VGG-16's thirteen 3x3 convolutions (random weights), max pools between the blocks, a mean and a small
    classifier: 15.4 G multiply-accumulates an image."""
    import numpy as np

    sys.path.insert(0, str(ROOT / "src"))
    from litegpu.ir.builder import ModelBuilder
    from litegpu.ir.save import write_model

    if path.exists():
        return path
    rng = np.random.default_rng(0)
    b = ModelBuilder()
    size, channels = 224, 3
    x = b.input("image", (batch, size, size, channels))
    for block, (width, convs) in enumerate(((64, 2), (128, 2), (256, 3), (512, 3), (512, 3))):
        for k in range(convs):
            w = b.constant(f"w{block}_{k}", (rng.normal(size=(width, 3, 3, channels)) * (2 / (9 * channels)) ** 0.5
                                              ).astype(np.float32))
            bias = b.constant(f"b{block}_{k}", np.zeros(width, np.float32))
            y = b.tensor(f"c{block}_{k}", (batch, size, size, width))
            b.op("CONV_2D", [x, w, bias], [y], padding="SAME", stride_w=1, stride_h=1,
                 fused_activation_function="RELU")
            x, channels = y, width
        size //= 2
        pooled = b.tensor(f"p{block}", (batch, size, size, channels))
        b.op("MAX_POOL_2D", [x], [pooled], padding="VALID", stride_w=2, stride_h=2, filter_width=2, filter_height=2)
        x = pooled
    mean = b.tensor("mean", (batch, channels))
    b.op("MEAN", [x, b.constant("axes", np.array([1, 2], np.int32))], [mean], keep_dims=False)
    logits = b.tensor("logits", (batch, 10))
    b.op("FULLY_CONNECTED", [mean, b.constant("fc", rng.normal(size=(10, channels)).astype(np.float32) * 0.05), -1],
         [logits])
    b.output(logits)
    write_model(b.build(), path)
    return path


def zoo() -> Path:
    """Where the built model is kept between sessions: ``$LITEGPU_STARTUP_ZOO``, /work/zoo/startup, else a temp
    folder."""
    named = os.environ.get("LITEGPU_STARTUP_ZOO")
    for candidate in ([Path(named)] if named else [Path("/work/zoo/startup")]):
        try:
            candidate.mkdir(parents=True, exist_ok=True)
            return candidate
        except OSError:
            pass
    return Path(tempfile.mkdtemp(prefix="litegpu-startup-zoo-"))


def models(names: list[str]) -> dict[str, tuple[Path, str]]:
    """name -> (file, variant): "" the default script, "openvino" the plan pinned to OpenVINO, "interpreter"
    litegpu's Interpreter API."""
    known = {
        "face": ROOT / "src" / "litegpu" / "models" / "mediapipe_face_detection_short_range.tflite",
        "hand": SHARED / "mediapipe_hand_landmark_lite.tflite",
        "int8": SHARED / "mobilenet_v3_small_int8.tflite",
        "transformer": SHARED / "transformer_encoder_float32.tflite",
    }
    found = {}
    for name in names:
        model, _, variant = name.partition("@")
        if variant not in ("", "openvino", "interpreter"):
            raise SystemExit(f"{name}: the variants are @openvino and @interpreter")
        if model == "vgg":
            found[name] = (vgg_trunk(zoo() / "vgg16_trunk_b2.tflite"), variant)
        elif model in known and known[model].is_file():
            found[name] = (known[model], variant)
        else:
            print(f"skipping {name}: not found", file=sys.stderr)
    return found


def medians(samples: list[tuple[float, float, str]]) -> tuple[float, float]:
    return statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)


def paired(samples: list[tuple[float, float, str]], official: list[tuple[float, float, str]], field: int) -> float:
    """The median over rounds of a litegpu process's wall (0) or CPU (1) seconds over its round's official one."""
    return statistics.median(s[field] / o[field] for s, o in zip(samples, official))


def script(variant: str, path: Path) -> list[str]:
    if variant == "interpreter":
        return [sys.executable, "-c", INTERPRETER, str(path)]
    return [sys.executable, "-c", LITEGPU, str(path), "openvino" if variant == "openvino" else "-"]


def measure_model(path: Path, variant: str, runs: int, work: Path, trees: dict[str, Path]) -> dict:
    """Rounds of: official, each tree's first start, official, each tree's second start."""
    official = [sys.executable, "-c", OFFICIAL, str(path)]
    ours = script(variant, path)
    filled = {tree: tempfile.mkdtemp(prefix=f"filled-{tree}-", dir=work) for tree in trees}
    plans = {}
    for tree, src in trees.items():  # the first start that fills each tree's cache, not counted
        shown = start(ours + ["plan"] if variant != "interpreter" else ours, environment(filled[tree], src))[2]
        plans[tree] = shown.strip().splitlines()[-1] if shown.strip() else "Interpreter: XLA (builtin kernels)"
    start(official, environment(None))  # page cache and bytecode warm for both
    reference: dict[str, list] = {"first": [], "second": []}
    first: dict[str, list] = {tree: [] for tree in trees}
    second: dict[str, list] = {tree: [] for tree in trees}
    loads = [os.getloadavg()[0]]
    for _ in range(runs):
        reference["first"].append(start(official, environment(None)))
        for tree, src in trees.items():
            first[tree].append(start(ours, environment(tempfile.mkdtemp(prefix="empty-", dir=work), src)))
        reference["second"].append(start(official, environment(None)))
        for tree, src in trees.items():
            second[tree].append(start(ours, environment(filled[tree], src)))
        loads.append(os.getloadavg()[0])
    rows = []
    official_wall, official_cpu = medians(reference["first"] + reference["second"])
    for tree in trees:
        row = {"model": path.stem + (f" @{variant}" if variant else ""), "tree": tree, "plan": plans[tree],
               "official_wall": official_wall, "official_cpu": official_cpu, "load": (min(loads), max(loads))}
        row["first_wall"], row["first_cpu"] = medians(first[tree])
        row["second_wall"], row["second_cpu"] = medians(second[tree])
        row["first_ratio"] = paired(first[tree], reference["first"], 1)
        row["second_ratio"] = paired(second[tree], reference["second"], 1)
        row["second_wall_ratio"] = paired(second[tree], reference["second"], 0)
        rows.append(row)
    return rows


def measure_cli(runs: int, work: Path, trees: dict[str, Path]) -> dict[str, tuple[float, float, list[float]]]:
    """``litegpu run`` on the bundled model, its second start (the cache a first run filled), each tree in turn."""
    argv = [sys.executable, "-m", "litegpu.cli.main", "run"]
    filled = {tree: tempfile.mkdtemp(prefix=f"cli-{tree}-", dir=work) for tree in trees}
    for tree, src in trees.items():
        start(argv, environment(filled[tree], src))
    samples: dict[str, list] = {tree: [] for tree in trees}
    for _ in range(runs):
        for tree, src in trees.items():
            samples[tree].append(start(argv, environment(filled[tree], src)))
    found = {}
    for tree, taken in samples.items():
        wall, cpu = medians(taken)
        found[tree] = (wall, cpu, sorted(s[0] for s in taken))
    return found


def crowd(path: Path, kernels: str, work: Path, processes: int = 8) -> dict:
    """``processes`` litegpu processes started at once on one empty cache."""
    sys.path.insert(0, str(ROOT / "src"))
    import numpy as np

    from litegpu.backends.cache import CompileCache

    directory = tempfile.mkdtemp(prefix="crowd-", dir=work)
    reference = path.with_suffix(".reference.npz")
    argv = [sys.executable, "-c", CROWD, str(path), kernels, str(reference)]
    begin = time.perf_counter()
    children = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=environment(directory)) for _ in range(processes)]
    results = []
    for child in children:
        out, err = child.communicate(timeout=900)
        if child.returncode != 0:
            raise RuntimeError(err.strip()[-400:])
        results.append(json.loads(out.strip().splitlines()[-1]))
    wall = time.perf_counter() - begin
    expected = np.load(reference)
    worst = 0.0
    for r in results:
        for name, values in r["outputs"].items():
            want = expected[f"-/out/{name}" if kernels == "fast" else f"-/out_ref/{name}"]
            worst = max(worst, float(np.abs(np.asarray(values, np.float32) - want).max() / np.abs(want).max()))
    cache = CompileCache(directory)
    entries = list(cache.entries())
    stores = [len(r["stored"]) for r in results]
    every_key = [k for r in results for k in r["stored"]]
    return {"kernels": kernels, "processes": processes, "wall_s": wall, "entries": len(entries),
            "stores_per_process": stores, "keys_stored_twice": len(every_key) - len(set(every_key)),
            "verify_problems": len(cache.verify()), "largest_relative_difference": worst,
            "what": sorted(f"{e.engine} {e.what}" for e in entries)}


def trees_to_time(against: str | None, work: Path) -> dict[str, Path]:
    """"this" (the checkout's src/) and, with ``against``, that revision's src/ (``git archive``), each compiled
    to bytecode first (the shell's ``PYTHONDONTWRITEBYTECODE`` would leave stale .pyc files otherwise)."""
    trees = {"this": ROOT / "src"}
    if against:
        other = work / "against"
        other.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", against, "src"], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(other)], input=archive.stdout, check=True)
        trees[against] = other / "src"
    for src in trees.values():
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(src / "litegpu")], check=True)
    return trees


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--models", nargs="*",
                        default=["face", "hand", "int8", "transformer", "vgg", "hand@openvino", "face@interpreter"])
    parser.add_argument("--against", help="a git revision whose litegpu is timed in the same rounds (e.g. main)")
    parser.add_argument("--skip-crowd", action="store_true")
    parser.add_argument("--skip-cli", action="store_true")
    args = parser.parse_args()
    if args.runs < 5:
        parser.error("--runs: at least 5 (medians of five runs or more)")
    work = Path(tempfile.mkdtemp(prefix="litegpu-startup-"))
    trees = trees_to_time(args.against, work)
    print(f"{harness.machine_line()}; medians of {args.runs} runs, alternating with the official interpreter; "
          f"ratios: litegpu CPU / the official script's CPU, pair by pair\n")
    print(harness.table_head(["model", "litegpu", "plan", "official CPU s", "first start CPU s", "first / official",
                              "second start CPU s", "second / official", "second / official, wall",
                              "official wall s", "second start wall s", "load (1 min)"], "lllrrrrrrrrl"))
    for name, (path, variant) in models(args.models).items():
        for r in measure_model(path, variant, args.runs, work, trees):
            print(f"| {r['model']} | {r['tree']} | {r['plan']} | {r['official_cpu']:.3f} | {r['first_cpu']:.3f} | "
                  f"{r['first_ratio']:.2f}x | {r['second_cpu']:.3f} | **{r['second_ratio']:.2f}x** | "
                  f"{r['second_wall_ratio']:.2f}x | {r['official_wall']:.3f} | {r['second_wall']:.3f} | "
                  f"{r['load'][0]:.1f}-{r['load'][1]:.1f} |", flush=True)
    if not args.skip_cli:
        for tree, (wall, cpu, walls) in measure_cli(args.runs, work, trees).items():
            print(f"\n`litegpu run` ({tree}; bundled model, second start): median wall {wall:.3f} s "
                  f"({'under' if wall < 0.5 else 'over'} 0.5 s), CPU {cpu:.3f} s "
                  f"(walls {', '.join(f'{w:.3f}' for w in walls)})", flush=True)
    if not args.skip_crowd:
        face = ROOT / "src" / "litegpu" / "models" / "mediapipe_face_detection_short_range.tflite"
        for kernels in ("fast", "builtin"):
            print(f"\neight processes at once, empty cache, {kernels} kernels: {json.dumps(crowd(face, kernels, work))}",
                  flush=True)
    print(f"\nafter: {harness.machine_line()}")


if __name__ == "__main__":
    main()
