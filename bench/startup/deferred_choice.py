"""The deferred engine choice (issue 35): where a model's timing falls and what it settles on, against the choice
timed while loading.

    PYTHONPATH=src python bench/startup/deferred_choice.py [MODEL.tflite ...] [--max-seconds 60] [--json OUT]

Default models: ../shared/models' hand landmark and transformer encoder, and the zoo models whose choice is close
(issue 38: MnasNet 0.5, Keras MobileNetV2 at batch 8) or OpenVINO's (ResNet-50 and NASNet-mobile at batch 1), from
``LITEGPU_ZOO_DIR`` (default /work/zoo).  Each model, in processes of its own on an empty compile cache of its own:

- **deferred** (the default ``Options``): the load's wall and CPU time, whether OpenVINO was imported by then, then
  calls on seeded inputs until ``CompiledModel.engine_choice_settled`` (at most ``--max-seconds`` of calls): the
  calls made and their seconds when the timing came, the settling call's wall time (the timing and the switch),
  the plan then;
- **load** (``Options(engine_choice="load")``, the choice as every start made it before): the load's time and plan.

The two plans should agree but for the timing's own noise on near ties (the verdict rules are the same).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
import harness  # noqa: E402

ZOO = Path(os.environ.get("LITEGPU_ZOO_DIR", "/work/zoo"))
DEFAULT_MODELS = [harness.SHARED_MODELS / "mediapipe_hand_landmark_lite.tflite",
                  harness.SHARED_MODELS / "transformer_encoder_float32.tflite",
                  ZOO / "litert_torch" / "mnasnet0_5.tflite", ZOO / "keras" / "mobilenet_v2_b8.tflite",
                  ZOO / "keras" / "resnet50_b1.tflite", ZOO / "keras" / "nasnet_mobile_b1.tflite"]

PROCESS = r"""
import json, os, sys, time
import numpy as np
wall, cpu = time.perf_counter(), time.process_time()
import litegpu
model = litegpu.CompiledModel.from_file(sys.argv[1], options=litegpu.Options(engine_choice=sys.argv[2]))
row = {"load_s": time.perf_counter() - wall, "load_cpu_s": time.process_time() - cpu,
       "openvino_at_load": "openvino" in sys.modules, "plan_at_load": model.plan.engine_summary()}
rng = np.random.default_rng(0)
x = [rng.uniform(-1, 1, d["shape"]).astype(d["dtype"]) if np.dtype(d["dtype"]).kind == "f"
     else rng.integers(0, 100, d["shape"]).astype(d["dtype"]) for d in model.get_input_tensor_details(0).values()]
calls, started, longest = 0, time.perf_counter(), 0.0
while not model.engine_choice_settled and time.perf_counter() - started < float(sys.argv[3]):
    t = time.perf_counter()
    model(*x)
    longest, calls = max(longest, time.perf_counter() - t), calls + 1
row.update(calls=calls, calls_s=time.perf_counter() - started, settling_call_s=longest,
           settled=model.engine_choice_settled, plan=model.plan.engine_summary(), choice=model.plan.choice)
print(json.dumps(row))
"""


def one(path: Path, choice: str, max_seconds: float) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "LITEGPU_CACHE_DIR": cache}
        done = subprocess.run([sys.executable, "-c", PROCESS, str(path), choice, str(max_seconds)], env=env,
                              capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--max-seconds", type=float, default=60.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    print(harness.machine_line(), flush=True)
    print("\n| model | deferred load s (CPU) | OpenVINO imported at load | calls before the timing (s) | the timing's "
          "call s | settled plan (deferred) | plan timed at load | load s at load (CPU) |\n|---|---:|---|---:|---:|---|---|---:|",
          flush=True)
    for path in args.models or [p for p in DEFAULT_MODELS if p.is_file()]:
        deferred, at_load = one(path, "deferred", args.max_seconds), one(path, "load", 0.0)
        rows.append({"model": path.stem, "deferred": deferred, "load": at_load, "load_average": os.getloadavg()[0]})
        if "error" in deferred or "error" in at_load:
            print(f"| {path.stem} | {deferred.get('error') or at_load.get('error')} |", flush=True)
            continue
        print(f"| {path.stem} | {deferred['load_s']:.2f} ({deferred['load_cpu_s']:.2f}) | "
              f"{'yes' if deferred['openvino_at_load'] else 'no'} | {deferred['calls']} ({deferred['calls_s']:.2f}) | "
              f"{deferred['settling_call_s']:.2f} | {deferred['plan']} | {at_load['plan_at_load']} | "
              f"{at_load['load_s']:.2f} ({at_load['load_cpu_s']:.2f}) |", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"machine": harness.machine_line(), "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
