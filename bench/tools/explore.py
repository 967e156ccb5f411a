"""What ``litegpu explore`` costs, overlay by overlay, and where each model's default plan drifts most.

    python bench/tools/explore.py MODEL.tflite ... [--profile]

For each model: the device-free plan's overlays (as ``litegpu explore`` writes them without measurements), then a
CompiledModel with the default options and its distance overlay against the official interpreter's builtin
kernels (litegpu's builtin kernels where the official interpreter cannot run the model), and with ``--profile`` the
per-op times.  Prints a Markdown table: seconds per step (one run each: these are one-off costs, inflated on a loaded
machine), the plan, and the op farthest from the builtin kernels with its distance (units for integer tensors).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
import harness  # noqa: E402


def explore_costs(path: Path, profile: bool) -> str:
    import litegpu
    from litegpu.cli import explore_cmd
    from litegpu.errors import LiteGpuError

    row = [path.stem]
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        explore_cmd.explore(path, out=Path(out))
        row.append(f"{time.perf_counter() - start:.1f}")
        start = time.perf_counter()
        model = litegpu.CompiledModel.from_file(str(path))
        row.append(f"{time.perf_counter() - start:.1f}")
        key, arrays = explore_cmd._inputs(model, None, {})
        for against in ("official", "builtin"):
            start = time.perf_counter()
            try:
                _, found = explore_cmd._distance(model, key, arrays, against)
            except LiteGpuError:
                continue
            row.append(f"{time.perf_counter() - start:.1f} ({against})")
            break
        if profile:
            start = time.perf_counter()
            explore_cmd._profile(model, key, arrays)
            row.append(f"{time.perf_counter() - start:.1f}")
        far = found["farthest"][0]
        units = f", {far['units']} units" if far["units"] is not None else ""
        row += [model.plan.engine_summary(), f"{far['op']} #{far['index']}: {far['distance']:.2g}{units}"]
        model.close()
    return "| " + " | ".join(row) + " |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--profile", action="store_true", help="also time --profile's per-op times")
    args = harness.parse_args(parser)
    warnings.simplefilter("ignore")
    print(harness.table_head(["model", "plan only (s)", "compile (s)", "distance (s)",
                              *(["--profile (s)"] if args.profile else []), "default plan",
                              "farthest op from the builtin kernels"], "lrrr" + "r" * args.profile + "ll"))
    for path in args.models:
        print(explore_costs(path, args.profile), flush=True)


if __name__ == "__main__":
    main()
