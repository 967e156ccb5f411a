"""The fidelity sweep's Keras models: every architecture of the Keras zoo in every weight format TensorFlow's
converter gives, batch 1.  Run with a Python that has TensorFlow (not a litegpu dependency):

    /work/venv-tf/bin/python bench/fidelity/fidelity_models.py OUT_DIR [NAME ...]

NAME is ``<zoo name>_<format>`` (``efficientnet_b0_float16``) or a zoo name for all its formats.  The formats are
the held-out models' (``tests/heldout/make_models.py``, whose converter options and BatchNorm calibration this
reuses, so that a deep random network's activations neither vanish nor explode and its integer scales are sane):
float32, float16 weights, dynamic range, full integer int8 and 16x8.  Random weights (seeded), nothing is
downloaded; a model already in OUT_DIR is not converted again.  One Keras model per architecture, converted to
each format it lacks; one JSON line per model (and per Keras model built) on stdout, with the seconds it took.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "models"))  # conversion_log, zoo_models
sys.path.insert(0, str(HERE.parents[1] / "tests" / "heldout"))
from conversion_log import convert_and_report  # noqa: E402
from zoo_models import ZOO  # noqa: E402

FORMATS = ("float32", "float16", "dynamic", "int8", "16x8")


def model_names(names: list[str] | None = None) -> list[str]:
    """``<zoo name>_<format>`` of every model the sweep converts (or of ``names``: zoo names or model names)."""
    every = [f"{arch}_{fmt}" for arch in ZOO for fmt in FORMATS]
    if not names:
        return every
    return [m for m in every if m in names or m.rsplit("_", 1)[0] in names]


# The full-integer and 16x8 conversions' representative dataset.  Calibration only sets each tensor's range (its
# scale and zero point); the sweep compares litegpu with the official kernels on the same file, whatever its scales,
# so a few samples give as valid a test as the held-out models' 24.  The saving is small (MobileNetV2 int8: 12.4 s
# of CPU against 14.4 s; BENCHMARKS.md, "The fidelity sweep with the final code"): the converter's own passes cost
# more than calibration, and on a loaded machine the wall time is mostly waiting.
CALIBRATION_SAMPLES = 4


def _split(name: str) -> tuple[str, str]:
    arch, fmt = name.rsplit("_", 1)
    return arch, fmt


def keras_model(arch: str) -> tuple[Any, Callable]:
    """The architecture's Keras model (seeded random weights, BatchNorm calibrated) and its input generator."""
    import keras
    import numpy as np
    import zoo_models
    from make_models import SEED, calibrate_batchnorm

    attr, size = ZOO[arch]
    keras.utils.set_random_seed(SEED)
    if attr == "transformer":
        def make_input(rng):
            return {"tokens": rng.integers(0, 8000, (1, size)).astype(np.int32)}
        return zoo_models._transformer(size), make_input

    def make_input(rng):
        return {"image": rng.uniform(-1, 1, (1, size, size, 3)).astype(np.float32)}
    return calibrate_batchnorm(zoo_models._keras_application(attr, size), size), make_input


def convert(model: Any, make_input: Callable, fmt: str, out: Path) -> dict:
    """``model`` converted to ``fmt`` into ``out`` (written whole, then renamed)."""
    from make_models import convert_keras

    partial = out.with_name(out.name + ".partial")
    partial.write_bytes(convert_keras(model, fmt, make_input, CALIBRATION_SAMPLES))
    partial.replace(out)
    return {"params": int(model.count_params())}


def main(argv: list[str]) -> int:
    out_dir = Path(argv[0])
    out_dir.mkdir(parents=True, exist_ok=True)
    names = model_names(argv[1:])
    if argv[1:] and not names:
        sys.exit(f"unknown model(s): {argv[1:]}")
    for arch in dict.fromkeys(_split(name)[0] for name in names):
        # One Keras model per architecture, converted to each of its formats: building and calibrating it took
        # as long as a float conversion.
        todo = [n for n in names if _split(n)[0] == arch and not (out_dir / f"{n}.tflite").exists()]
        model = None
        for name in [n for n in names if _split(n)[0] == arch]:
            path = out_dir / f"{name}.tflite"
            if name in todo and model is None:
                started = time.perf_counter()
                model, make_input = keras_model(arch)
                print(json.dumps({"model": arch, "status": "built",
                                  "seconds": round(time.perf_counter() - started, 1)}), flush=True)
            record = convert_and_report({"model": name, "file": path.name}, path,
                                        lambda: convert(model, make_input, _split(name)[1], path))
            if record["status"] == "failed":  # the converter's reason, for the sweep's table
                refused_file(out_dir, name).write_text(record["error"])
    return 0


def refused_file(out_dir: Path, name: str) -> Path:
    """Where the converter's refusal of model ``name`` is kept."""
    return out_dir / f"{name}.refused.txt"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
