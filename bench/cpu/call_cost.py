"""The cost of one call on tiny models: litegpu's call paths beside the official interpreter's, same process.

    PYTHONPATH=src python bench/cpu/call_cost.py [MODEL.tflite ...] [--threads N] [--samples 400] [--batch 50]

Without model arguments: ``../shared/models/two_signatures_float32.tflite`` and ``microwakeword_okay_nabu``, the
models that run in microseconds.  For every signature of each model, these run alternately (the order shuffled
each sample, seeded), each sample timing ``--batch`` calls in a row, all at the same thread count (default: the
physical cores, litegpu's default), on the same inputs, every output read back:

- ``official runner``: the official interpreter's signature runner, ``runner(**inputs)`` (its Python API for a
  signature);
- ``official set/invoke/get``: ``set_tensor`` / ``invoke`` / ``get_tensor`` on the official interpreter (its
  cheapest Python call; the first signature's subgraph only, as that API runs subgraph 0);
- ``litegpu model(x)``, ``litegpu run(dict)``: the quick API (numpy in, numpy out);
- ``litegpu run_by_index``, ``run_by_name``: TensorBuffers written once, outputs read after each call
  (``TensorBuffer.read``).

litegpu runs the model on the official interpreter (its default plan for these models), so the difference is
litegpu's own layers.  Prints the median microseconds per call, the Python function calls one call makes
(``sys.setprofile``; the bench's own lambda not counted), and each litegpu path minus the official calls.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
import harness  # noqa: E402

SHARED = harness.SHARED_MODELS
DEFAULT_MODELS = [SHARED / "two_signatures_float32.tflite", SHARED / "microwakeword_okay_nabu.tflite"]


def official_paths(path: Path, key: str, inputs: dict[str, np.ndarray], threads: int, first: bool) -> dict:
    interpreter = harness.official_interpreter(path, threads)
    runner = interpreter.get_signature_runner(key)
    paths = {"official runner": lambda: runner(**inputs)}
    if first:
        # the signature's inputs by name -> the subgraph's input tensors, through the signature's own map
        by_name = interpreter.get_signature_list()[key]
        details = runner.get_input_details()
        feed = [(details[name]["index"], inputs[name]) for name in by_name["inputs"]]
        plain = harness.official_interpreter(path, threads)
        outputs = [d["index"] for d in plain.get_output_details()]

        def set_invoke_get() -> list[np.ndarray]:
            for index, x in feed:
                plain.set_tensor(index, x)
            plain.invoke()
            return [plain.get_tensor(i) for i in outputs]

        paths["official set/invoke/get"] = set_invoke_get
    return paths


def litegpu_paths(path: Path, key: str, inputs: dict[str, np.ndarray], threads: int) -> tuple[dict, str]:
    import litegpu

    options = litegpu.Options(litegpu.HardwareAccelerator.CPU,
                              cpu_options=litegpu.CpuOptions(num_threads=threads, engines=("litert",)))
    model = litegpu.CompiledModel.from_file(str(path), options=options)
    names = model.get_signature_list()[key]["inputs"]
    positional = [inputs[n] for n in names]
    index = model.get_signature_index(key)
    in_buffers = model.create_input_buffers(index)
    for buffer, x in zip(in_buffers, positional):
        buffer.write(x)
    out_buffers = model.create_output_buffers(index)

    def by_index() -> list[np.ndarray]:
        model.run_by_index(index, in_buffers, out_buffers)
        return [b.read() for b in out_buffers]

    in_map = dict(zip(names, in_buffers))
    out_map = dict(zip(model.get_signature_list()[key]["outputs"], out_buffers))

    def by_name() -> list[np.ndarray]:
        model.run_by_name(key, in_map, out_map)
        return [b.read() for b in out_buffers]

    paths = {"litegpu model(x)": lambda: model(*positional, signature_key=key),
             "litegpu run(dict)": lambda: model.run(inputs, key),
             "litegpu run_by_index": by_index, "litegpu run_by_name": by_name}
    return paths, model.plan.engine_summary()


def python_calls(run) -> int:
    """Python-level function calls in one call of ``run`` (frames entered, ``run`` itself not counted)."""
    count = 0

    def profile(frame, event, arg):
        nonlocal count
        count += event == "call"

    run()  # warm: nothing made on first use is counted
    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return count - 1


def measure(paths: dict, samples: int, batch: int) -> dict[str, float]:
    """Median microseconds per call of each path, alternating (shuffled each sample)."""
    times = harness.alternate(paths, samples, order="shuffle", calls=batch, warmup=batch)
    return {name: statistics.median(values) * 1e6 for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--threads", type=int, default=0, help="0: the physical cores (litegpu's default)")
    parser.add_argument("--samples", type=int, default=400)
    parser.add_argument("--batch", type=int, default=50)
    args = harness.parse_args(parser)
    from litegpu.backends.engine import physical_cores

    threads = args.threads or physical_cores()
    print(f"{threads} threads; median us per call over {args.samples} samples of {args.batch} calls, alternating")
    for path in args.models or DEFAULT_MODELS:
        probe = harness.official_interpreter(path, allocate=False)
        for k, (key, sig) in enumerate(probe.get_signature_list().items()):
            details = probe.get_signature_runner(key).get_input_details()
            values = harness.random_inputs([details[n] for n in sig["inputs"]], int_low=0)
            inputs = dict(zip(sig["inputs"], values))
            ours, plan = litegpu_paths(path, key, inputs, threads)
            paths = {**official_paths(path, key, inputs, threads, first=k == 0), **ours}
            frames = {name: python_calls(run) for name, run in paths.items()}
            medians = measure(paths, args.samples, args.batch)
            print(f"\n{path.stem} / {key} (litegpu: {plan})")
            officials = {n: t for n, t in medians.items() if n.startswith("official")}
            for name, us in medians.items():
                extra = "" if name in officials else "  " + ", ".join(
                    f"{us - t:+.2f} us vs {o.removeprefix('official ')}" for o, t in officials.items())
                print(f"  {name:26s} {us:7.2f} us  {frames[name]:3d} Python calls{extra}")


if __name__ == "__main__":
    main()
