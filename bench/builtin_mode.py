"""`CpuKernelMode.BUILTIN` against the official builtin kernels themselves, whole models, side by side.

    PYTHONPATH=src python bench/builtin_mode.py MODEL.tflite [...] [--threads 2] [--runs 7]

Three variants alternate run by run in one process, on the same seeded inputs, outputs read back: the official
interpreter with ``BUILTIN_WITHOUT_DEFAULT_DELEGATES`` (the kernels BUILTIN mode reproduces), litegpu BUILTIN as
every XLA CPU program was compiled before (the classic emitters, ``BUILTIN_ORDER_FUSION_EMITTERS_MAX_BYTES = 0``),
and litegpu BUILTIN now.  Prints one markdown row per model (medians, ms).
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()

    import litegpu
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    from litegpu.backends.xla import backend as xla_backend

    options = litegpu.Options(litegpu.HardwareAccelerator.CPU, cpu_options=litegpu.CpuOptions(
        num_threads=args.threads, kernel_mode=litegpu.CpuKernelMode.BUILTIN))
    print("| model | official builtin kernels ms | litegpu BUILTIN, classic emitters ms | litegpu BUILTIN now ms | "
          "now / official |\n|---|---:|---:|---:|---:|")
    now_bound = xla_backend.BUILTIN_ORDER_FUSION_EMITTERS_MAX_BYTES
    for path in args.models:
        official = Interpreter(model_path=path, num_threads=args.threads,
                               experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
        official.allocate_tensors()
        rng = np.random.default_rng(0)
        details = official.get_input_details()
        inputs = [(rng.integers(0, 100, d["shape"]) if np.issubdtype(d["dtype"], np.integer)
                   else rng.normal(size=d["shape"])).astype(d["dtype"]) for d in details]

        def run_official() -> None:
            for d, x in zip(details, inputs):
                official.set_tensor(d["index"], x)
            official.invoke()
            for d in official.get_output_details():
                official.get_tensor(d["index"])

        runs = {"official": run_official}
        for name, bound in (("classic", 0), ("now", now_bound)):
            xla_backend.BUILTIN_ORDER_FUSION_EMITTERS_MAX_BYTES = bound
            model = litegpu.CompiledModel.from_file(path, options=options)
            model.run(inputs)  # compiled here, with this bound
            runs[name] = lambda model=model: model.run(inputs)
        xla_backend.BUILTIN_ORDER_FUSION_EMITTERS_MAX_BYTES = now_bound
        times: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.runs):
            for name, run in runs.items():
                start = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - start)
        ms = {name: float(np.median(t)) * 1e3 for name, t in times.items()}
        name = path.rsplit("/", 1)[-1].removesuffix(".tflite")
        print(f"| {name} | {ms['official']:.1f} | {ms['classic']:.1f} | {ms['now']:.1f} | "
              f"{ms['now'] / ms['official']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
