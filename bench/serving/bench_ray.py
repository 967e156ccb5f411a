"""Examples per second through Ray Data with ``litegpu.ray.Predictor``: 1 and 2 actors on this machine.

    python bench/serving/bench_ray.py MODEL.tflite [--rows 2000] [--batch-size 64] [--num-gpus 0]

Each actor gets 2 / actors OpenVINO threads (the machine has 2 cores).  Inputs are random rows of the model's first input (example shape), the clock runs over the whole pipeline
(actors started and the cache warm: a first pass fills it), outputs are taken back to the driver.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
import harness  # noqa: E402


def main() -> None:
    import ray

    import litegpu
    import litegpu.ray

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--num-gpus", type=float, default=0)
    args = harness.parse_args(parser)
    model = litegpu.CompiledModel.from_file(args.model)
    name, detail = next(iter(model.get_input_tensor_details(0).items()))
    rows = np.random.default_rng(0).uniform(-1, 1, (args.rows,) + tuple(detail["shape"][1:])).astype(detail["dtype"])
    ray.init(include_dashboard=False, log_to_driver=False)
    cache = tempfile.mkdtemp(prefix="litegpu-bench-ray-")
    print(harness.table_head(["actors", "examples/s"], "rr"))
    for actors in (1, 2):
        def pipeline() -> int:
            ds = ray.data.from_numpy(rows).map_batches(
                litegpu.ray.Predictor, fn_constructor_kwargs={"model_path": args.model, "columns": {"data": name},
                                                              "cache_dir": cache,
                                                              "num_threads": max(1, 2 // actors)},
                batch_size=args.batch_size, concurrency=actors, num_cpus=1, num_gpus=args.num_gpus)
            return sum(len(b[next(iter(b))]) for b in ds.iter_batches(batch_size=512, batch_format="numpy"))
        pipeline()  # fills the compile cache
        start = time.perf_counter()
        done = pipeline()
        print(f"| {actors} | {done / (time.perf_counter() - start):.0f} |", flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main()
