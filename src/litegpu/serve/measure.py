"""``python -m litegpu.serve.measure MODEL SIGNATURE MAX_BATCH [--cache-dir DIR]``: whether dynamic batching pays for
one signature on this CPU, timed in a process of its own (``DynamicBatcher.timings``), printed as one JSON line.

The server runs it for ``--batching auto`` rather than timing in its own process: once XLA's CPU runtime has run
a program in a process, the direct engines there (XNNPACK, OpenVINO) ran 2-6x slower on the development machine
(the face detector's 2.5 ms call became 14.6 ms), which would slow every request that batching does not take.
"""

from __future__ import annotations

import argparse
import json

from ..runtime.compiled_model import CompiledModel
from ..runtime.options import HardwareAccelerator, Options
from .batcher import DynamicBatcher


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("signature")
    parser.add_argument("max_batch", type=int)
    parser.add_argument("--cache-dir", default=None)
    args = parser.parse_args()
    model = CompiledModel.from_file(args.model, options=Options(HardwareAccelerator.CPU,
                                                                serialization_dir=args.cache_dir))
    batcher = DynamicBatcher(model, args.signature, name=args.signature, mode="auto", max_batch=args.max_batch,
                             max_delay_s=0.0, executor=None)
    print(json.dumps(batcher.timings()))


if __name__ == "__main__":
    main()
