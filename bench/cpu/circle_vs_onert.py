"""litegpu beside onert (Samsung ONE's runtime) on the same .circle files, CPU, 2 threads, one process.

The files are tico's conversions of the test models in ``tests/tico_models.py``, and models with ggml
weights built with litegpu's builder (``ggml_models``: what onert runs of them, FULLY_CONNECTED without
bias on q4_0 / q8_0 weights and GATHER on a q4_0 table, blocks packed by ``tests/ops/test_circle_weights.py``).
Each round times ``--calls`` calls of litegpu (default fast CPU path), onert and litegpu with the builtin
kernels (XLA: what the fast path ran for a model with a circle-only op before such ops were lowered for the
official interpreter and OpenVINO), the order rotating every round, so that all see the same machine state;
the figure is the median per-call time over the rounds. onert's CPU backend reads its thread count from the environment (``NUM_THREADS``).

    python bench/cpu/circle_vs_onert.py [--rounds 15] [--calls 50] [--tico] [--json bench/cpu/circle_vs_onert.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
from pathlib import Path

THREADS = 2
os.environ["NUM_THREADS"] = str(THREADS)  # before onert loads: its config comes from the environment

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
import harness  # noqa: E402

sys.path.insert(0, str(harness.ROOT / "tests"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--only", default="", help="run only the models whose name contains this (e.g. ggml)")
    parser.add_argument("--tico", action="store_true", help="only the tico-made models (no ggml weights)")
    parser.add_argument("--threads-as-asked", action="store_true",
                        help="also time litegpu with the interpreter on the 2 threads asked for, not the count its "
                             "timing chose (one thread on a small model, where that is faster)")
    args = harness.parse_args(parser)

    import onert

    import litegpu
    import tico_models

    folder = Path(tempfile.mkdtemp(prefix="circle-bench-"))
    options = litegpu.Options(litegpu.HardwareAccelerator.CPU, cpu_options=litegpu.CpuOptions(num_threads=THREADS))
    builtin = litegpu.Options(litegpu.HardwareAccelerator.CPU, cpu_options=litegpu.CpuOptions(
        num_threads=THREADS, kernel_mode=litegpu.CpuKernelMode.BUILTIN))
    rows = []
    made_models = [tico_models.make(name, folder) for name in tico_models.MODELS if args.only in name]
    if not args.tico:
        made_models += [m for m in ggml_models(folder) if args.only in m.name]
    for made in made_models:
        name = made.name
        ours = litegpu.CompiledModel.from_file(str(made.path), options=options)
        # the plan before circle-only ops were lowered for the fast engines: XLA runs a model that has any whole
        exact = litegpu.CompiledModel.from_file(str(made.path), options=builtin)
        runners = {"litegpu": lambda: ours(*made.inputs), "litegpu builtin": lambda: exact(*made.inputs)}
        if args.threads_as_asked:
            asked = as_asked(lambda: litegpu.CompiledModel.from_file(str(made.path), options=options))
            runners[f"litegpu {THREADS} threads"] = lambda: asked(*made.inputs)
        why = None
        try:
            session = onert.infer.session(str(made.path), "cpu")
            session.infer(made.inputs)
            runners["onert"] = lambda: session.infer(made.inputs)
        except Exception as e:  # onert refuses to prepare some models: litegpu's two plans are still timed
            why = str(e).splitlines()[0][:120]
            print(f"{name}: onert refuses it ({why})")
        times = harness.alternate(runners, args.rounds, order="rotate", calls=args.calls, warmup=20)
        row = {"model": name, "ops": sum(read_ops(made.path).values()),
               "engines": ours.plan.engine_summary(),
               **{k: round(statistics.median(v) * 1e3, 4) for k, v in times.items()}}
        row["onert / litegpu"] = round(row["onert"] / row["litegpu"], 2) if "onert" in row else None
        row["builtin / litegpu"] = round(row["litegpu builtin"] / row["litegpu"], 2)
        if why is not None:
            row["onert refuses"] = why
        rows.append(row)
        print(json.dumps(row))
    result = {"machine": harness.machine("onert", "litegpu"), "threads": THREADS, "rounds": args.rounds,
              "calls": args.calls, "rows": rows}
    if args.json:
        harness.write_json(args.json, result)
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}))


def as_asked(make):
    """``make()`` with the official interpreter's thread count as asked (its timing against one thread off)."""
    from litegpu.backends import litert

    saved, litert.THREAD_CHOICE_MAX_MACS = litert.THREAD_CHOICE_MAX_MACS, -1
    try:
        return make()
    finally:
        litert.THREAD_CHOICE_MAX_MACS = saved


def ggml_models(folder: Path) -> list:
    """Circle files with ggml weights (as ``tico_models.TicoModel``: name, path, inputs): a q4_0 MLP
    1024-4096-1024 (one token, and 16), a q8_0 one, a q4_0 MLP 4096-11008-4096 (one token), the same q4_0 MLPs
    quantized as ggml's quantizer does (signed block scales: ``make_ggml`` writes positive ones), a q4_0 embedding
    table of 32000 x 1024 (16 tokens)."""
    sys.path.insert(0, str(harness.ROOT / "tests" / "ops"))
    from types import SimpleNamespace

    from test_circle_weights import gather_model, make_ggml

    from litegpu.format import CIRCLE
    from litegpu.ir.builder import ModelBuilder
    from litegpu.ir.save import to_bytes

    def mlp(dtype: str, rows: int, width: int = 1024, hidden: int = 4096, signed: bool = False):
        if signed:  # quantized as ggml's quantizer does: half the block scales negative (4 int4 copies on XNNPACK)
            from circle_oracle import ggml_quantized_q4_0

            weights = np.random.default_rng(3).standard_normal((hidden + width, width + hidden)).astype(np.float32)
            up = ggml_quantized_q4_0(0.02 * weights[:hidden, :width])
            down = ggml_quantized_q4_0(0.02 * weights[:width, :hidden])
        else:
            up, _ = make_ggml(dtype, hidden, width, seed=1)
            down, _ = make_ggml(dtype, width, hidden, seed=2)
        b = ModelBuilder()
        x = b.input("x", (rows, width))
        w1 = b.tensor("up", (hidden, width), dtype, buffer=b.add_buffer(up), raw=up)
        w2 = b.tensor("down", (width, hidden), dtype, buffer=b.add_buffer(down), raw=down)
        h, y = b.tensor("h", (rows, hidden)), b.tensor("y", (rows, width))
        b.op("FULLY_CONNECTED", [x, w1, -1], [h], fused_activation_function="RELU")
        b.op("FULLY_CONNECTED", [h, w2, -1], [y])
        b.output(y)
        return b.build()

    rng = np.random.default_rng(0)
    made = []
    for name, model, inputs in (
            ("ggml q4_0 MLP 1024-4096-1024, 1 token", mlp("ggml_q4_0", 1), [rng.standard_normal((1, 1024))]),
            ("ggml q4_0 MLP 1024-4096-1024, 16 tokens", mlp("ggml_q4_0", 16), [rng.standard_normal((16, 1024))]),
            ("ggml q8_0 MLP 1024-4096-1024, 1 token", mlp("ggml_q8_0", 1), [rng.standard_normal((1, 1024))]),
            # 50 MB of weights: program parameters on XLA CPU (the smaller ones are folded into the program)
            ("ggml q4_0 MLP 4096-11008-4096, 1 token", mlp("ggml_q4_0", 1, 4096, 11008),
             [rng.standard_normal((1, 4096))]),
            ("ggml q4_0 MLP 4096-11008-4096 (ggml-quantized: signed scales), 1 token",
             mlp("ggml_q4_0", 1, 4096, 11008, signed=True), [rng.standard_normal((1, 4096))]),
            ("ggml q4_0 MLP 1024-4096-1024 (ggml-quantized: signed scales), 16 tokens",
             mlp("ggml_q4_0", 16, signed=True), [rng.standard_normal((16, 1024))]),
            ("ggml q4_0 embedding 32000 x 1024, 16 tokens",
             gather_model("ggml_q4_0", make_ggml("ggml_q4_0", 32000, 1024)[0], 32000, 1024, indices_shape=(16,)),
             [rng.integers(0, 32000, 16).astype(np.int32)])):
        path = folder / (re.sub(r"[^\w.-]+", "_", name.split(",")[0]) + f"_{len(made)}.circle")
        path.write_bytes(to_bytes(model, CIRCLE))
        made.append(SimpleNamespace(name=name, path=path,
                                    inputs=[x.astype(np.float32) if x.dtype == np.float64 else x for x in inputs]))
    return made


def read_ops(path: Path) -> dict:
    from litegpu.ir import read_model

    return read_model(path).op_histogram()


if __name__ == "__main__":
    main()
