"""`CpuKernelMode.BUILTIN` against the official builtin kernels themselves, whole models, side by side.

    PYTHONPATH=src python bench/cpu/builtin_mode.py MODEL.tflite [...] [--threads 2] [--runs 7]

Three variants alternate run by run in one process, on the same seeded inputs, outputs read back: the official
interpreter with ``BUILTIN_WITHOUT_DEFAULT_DELEGATES`` (the kernels BUILTIN mode reproduces), litegpu BUILTIN as
every XLA CPU program was compiled before (the classic emitters, ``BUILTIN_ORDER_FUSION_EMITTERS_MAX_BYTES = 0``),
and litegpu BUILTIN now.  Prints one markdown row per model (medians, ms).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
import harness  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=7)
    args = harness.parse_args(parser)

    import litegpu
    from litegpu.backends.xla import backend as xla_backend

    options = litegpu.Options(litegpu.HardwareAccelerator.CPU, cpu_options=litegpu.CpuOptions(
        num_threads=args.threads, kernel_mode=litegpu.CpuKernelMode.BUILTIN))
    print(harness.table_head(["model", "official builtin kernels ms", "litegpu BUILTIN, classic emitters ms",
                              "litegpu BUILTIN now ms", "now / official"], "lrrrr"))
    now_bound = xla_backend.BUILTIN_ORDER_FUSION_EMITTERS_MAX_BYTES
    for path in args.models:
        official = harness.official_interpreter(path, args.threads, builtin=True)
        rng = np.random.default_rng(0)
        details = official.get_input_details()
        inputs = [(rng.integers(0, 100, d["shape"]) if np.issubdtype(d["dtype"], np.integer)
                   else rng.normal(size=d["shape"])).astype(d["dtype"]) for d in details]

        runs = {"official": harness.invoker(official, inputs)}
        for name, bound in (("classic", 0), ("now", now_bound)):
            xla_backend.BUILTIN_ORDER_FUSION_EMITTERS_MAX_BYTES = bound
            model = litegpu.CompiledModel.from_file(path, options=options)
            model.run(inputs)  # compiled here, with this bound
            runs[name] = lambda model=model: model.run(inputs)
        xla_backend.BUILTIN_ORDER_FUSION_EMITTERS_MAX_BYTES = now_bound
        times = harness.alternate(runs, args.runs)
        ms = {name: harness.median_ms(t) for name, t in times.items()}
        name = path.rsplit("/", 1)[-1].removesuffix(".tflite")
        print(f"| {name} | {ms['official']:.1f} | {ms['classic']:.1f} | {ms['now']:.1f} | "
              f"{ms['now'] / ms['official']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
