"""Examples per second at batch 1, 8 and 64: litegpu's ``CompiledModel.batched()`` beside the official interpreter
(XNNPACK) and, on a GPU, the official GPU accelerator (issue 25, item 5).

    python bench/serving/bench_batching.py MODEL.tflite ... [--batches 1 8 64] [--seconds 3] [--threads 2]
                                           [--accelerator cpu|gpu] [--json OUT]

For each model and batch size n, each variant turns n examples into outputs read back on the host:
- ``xnnpack``: the official interpreter (``--threads``), its input resized to n where the model allows
  (``resize_tensor_input``), else n calls of batch 1;
- ``official_gpu``: the official CompiledModel on its GPU accelerator, n calls of batch 1 (its Python API has no
  resize; only with ``--accelerator gpu`` and where its probe runs);
- ``litegpu``: ``CompiledModel.run`` at batch 1, n calls (what a user gets with no options);
- ``litegpu_batched``: ``model.batched().run`` on the n examples at once (one program over the batch: XLA's vmap
  of the batch-1 program, on the accelerator asked for).
The same inputs for every variant; the variants alternate in rounds (``--rounds``), each timed for ``--seconds``
divided among the rounds, so that a machine's drift reaches them alike; the table gives the median rate of the
rounds and the ratio of litegpu's batched rate to XNNPACK's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
import harness  # noqa: E402

sys.path.insert(0, str(harness.ROOT / "src"))


def rate(fn: Callable[[], object], examples: int, seconds: float) -> float:
    """Examples per second of ``fn`` (which handles ``examples`` examples) over about ``seconds``."""
    done, start = 0, time.perf_counter()
    while True:
        fn()
        done += examples
        spent = time.perf_counter() - start
        if spent >= seconds:
            return done / spent


def example_batch(details: dict, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """n examples for each input of a batch-1 signature (uniform floats, small integers)."""
    return {name: (rng.uniform(-1, 1, (n, *d["shape"][1:])) if np.dtype(d["dtype"]).kind == "f"
                   else rng.integers(0, 100, (n, *d["shape"][1:]))).astype(d["dtype"])
            for name, d in details.items()}


def xnnpack_variant(path: Path, feed: list[np.ndarray], threads: int) -> tuple[Callable, str]:
    """The official interpreter on ``feed`` (inputs in the model's order, n examples each): one call with its
    inputs resized to n where the model takes that, else n calls of batch 1."""
    n = feed[0].shape[0]
    interp = harness.official_interpreter(path, threads, allocate=False)
    ins = interp.get_input_details()
    how = "one call"
    try:
        if n > 1:
            for d, x in zip(ins, feed):
                interp.resize_tensor_input(d["index"], list(x.shape))
        interp.allocate_tensors()
        run = harness.invoker(interp, feed)
        run()
        return run, how
    except (RuntimeError, ValueError):  # the model does not resize: one example per call
        interp = harness.official_interpreter(path, threads)
        ins, outs = interp.get_input_details(), interp.get_output_details()

        def each() -> list[np.ndarray]:
            got = []
            for k in range(n):
                for d, x in zip(ins, feed):
                    interp.set_tensor(d["index"], x[k:k + 1])
                interp.invoke()
                got.append([interp.get_tensor(d["index"]) for d in outs])
            return got

        return each, f"{n} calls"


def official_gpu_variant(path: Path, feed: list[np.ndarray]) -> Callable:
    """The official GPU accelerator, one example per call (``zoo.official_gpu_runner``; its runner holds its
    inputs, so every call takes the first example: the work per call is the same)."""
    from zoo import official_gpu_runner

    n = feed[0].shape[0]
    single = official_gpu_runner(path, [x[:1] for x in feed])[0]

    def run() -> list:
        return [single() for _ in range(n)]

    return run


def measure(path: Path, batches: list[int], seconds: float, rounds: int, threads: int, accelerator: str,
            official_gpu: bool) -> list[dict]:
    import litegpu

    flags = litegpu.HardwareAccelerator.GPU if accelerator == "gpu" else litegpu.HardwareAccelerator.CPU
    # the CPU side (and the CPU's engines) on the official interpreter's thread count
    options = litegpu.Options(flags, cpu_options=litegpu.CpuOptions(num_threads=threads))
    model = litegpu.CompiledModel.from_file(str(path), options=options)
    details = model.get_input_tensor_details(0)
    names = list(details)
    batched = model.batched()
    rows = []
    for n in batches:
        examples = example_batch(details, n, np.random.default_rng(n))
        feed = [examples[name] for name in names]
        singles = [{name: examples[name][k:k + 1] for name in names} for k in range(n)]

        def one_by_one() -> list:
            return [{k: np.asarray(v) for k, v in model.run(s).items()} for s in singles]

        def at_once() -> dict:
            return {k: np.asarray(v) for k, v in batched.run(examples).items()}

        variants: dict[str, Callable] = {}
        notes = {}
        try:
            variants["xnnpack"], notes["xnnpack"] = xnnpack_variant(path, feed, threads)
        except Exception as e:  # noqa: BLE001  (the row says why)
            notes["xnnpack"] = f"{type(e).__name__}: {e}"
        if official_gpu:
            try:
                variants["official_gpu"] = official_gpu_variant(path, feed)
            except Exception as e:  # noqa: BLE001
                notes["official_gpu"] = f"{type(e).__name__}: {e}"
        variants["litegpu"] = one_by_one
        try:
            at_once()  # compiles the batched program before timing
            variants["litegpu_batched"] = at_once
        except Exception as e:  # noqa: BLE001
            notes["litegpu_batched"] = f"{type(e).__name__}: {e}"
        for fn in variants.values():
            fn()  # warm up (compiles, first-call costs)
        rates: dict[str, list[float]] = {k: [] for k in variants}
        for names in harness.rounds(list(variants), rounds):
            for name in names:
                rates[name].append(rate(variants[name], n, seconds / rounds))
        medians = {k: statistics.median(v) for k, v in rates.items()}
        rows.append({"model": path.stem, "batch": n, "accelerator": accelerator, "threads": threads,
                     "examples_per_s": medians, "rounds": rates, "notes": notes})
        print(format_row(rows[-1]), flush=True)
    return rows


COLUMNS = ("xnnpack", "official_gpu", "litegpu", "litegpu_batched")


def format_row(row: dict) -> str:
    r = row["examples_per_s"]
    cells = [f"{r[c]:.0f}" if c in r else "-" for c in COLUMNS]
    ratio = (f"{r['litegpu_batched'] / r['xnnpack']:.2f}x" if "litegpu_batched" in r and "xnnpack" in r else "-")
    return f"| {row['model']} | {row['batch']} | " + " | ".join(cells) + f" | {ratio} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--seconds", type=float, default=3.0, help="timing per variant and batch, over the rounds")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--accelerator", default="cpu", choices=("cpu", "gpu"))
    parser.add_argument("--json", type=Path)
    args = harness.parse_args(parser)
    if any(n < 1 for n in args.batches):
        parser.error("--batches must be positive")
    official_gpu = False
    if args.accelerator == "gpu":
        from zoo import official_gpu_probe

        problem = official_gpu_probe()
        official_gpu = problem is None
        print(f"official GPU accelerator: {problem or 'runs'}", flush=True)
    print(harness.table_head(["model", "batch", "XNNPACK ex/s", "official GPU ex/s", "litegpu batch-1 calls ex/s",
                              "litegpu batched ex/s", "batched / XNNPACK"], "lrrrrrr"), flush=True)
    rows = []
    for path in args.models:
        try:
            rows += measure(path, args.batches, args.seconds, args.rounds, args.threads, args.accelerator,
                            official_gpu)
        except Exception as e:  # noqa: BLE001  (one model's failure does not lose the others' rows)
            print(f"| {path.stem} | failed: {type(e).__name__}: {' '.join(str(e).split())[:200]} |", flush=True)
            rows.append({"model": path.stem, "error": f"{type(e).__name__}: {e}"})
        if args.json:  # written after every model: what finished survives a time limit
            harness.write_json(args.json, rows)


if __name__ == "__main__":
    main()
