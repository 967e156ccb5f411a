"""The fidelity sweep's Keras models: every architecture of the Keras zoo in every weight format TensorFlow's
converter gives, batch 1.  Run with a Python that has TensorFlow (not a litegpu dependency):

    /work/venv-tf/bin/python bench/fidelity/fidelity_models.py OUT_DIR [NAME ...]

NAME is ``<zoo name>_<format>`` (``efficientnet_b0_float16``) or a zoo name for all its formats.  The formats are
the held-out models' (``tests/heldout/make_models.py``, whose converter options and BatchNorm calibration this
reuses, so that a deep random network's activations neither vanish nor explode and its integer scales are sane):
float32, float16 weights, dynamic range, full integer int8 and 16x8.  Random weights (seeded), nothing is
downloaded; a model already in OUT_DIR is not converted again.  One JSON line per model on stdout.
"""

from __future__ import annotations

import sys
from pathlib import Path

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


def _split(name: str) -> tuple[str, str]:
    arch, fmt = name.rsplit("_", 1)
    return arch, fmt


def build(name: str, out: Path) -> dict:
    import keras
    import numpy as np
    import zoo_models
    from make_models import SEED, calibrate_batchnorm, convert_keras

    arch, fmt = _split(name)
    attr, size = ZOO[arch]
    keras.utils.set_random_seed(SEED)
    if attr == "transformer":
        model = zoo_models._transformer(size)

        def make_input(rng):
            return {"tokens": rng.integers(0, 8000, (1, size)).astype(np.int32)}
    else:
        model = calibrate_batchnorm(zoo_models._keras_application(attr, size), size)

        def make_input(rng):
            return {"image": rng.uniform(-1, 1, (1, size, size, 3)).astype(np.float32)}
    out.write_bytes(convert_keras(model, fmt, make_input))
    return {"params": int(model.count_params())}


def main(argv: list[str]) -> int:
    out_dir = Path(argv[0])
    out_dir.mkdir(parents=True, exist_ok=True)
    names = model_names(argv[1:])
    if argv[1:] and not names:
        sys.exit(f"unknown model(s): {argv[1:]}")
    for name in names:
        path = out_dir / f"{name}.tflite"
        record = convert_and_report({"model": name, "file": path.name}, path, lambda: build(name, path))
        if record["status"] == "failed":  # the converter's reason, for the sweep's table
            refused_file(out_dir, name).write_text(record["error"])
    return 0


def refused_file(out_dir: Path, name: str) -> Path:
    """Where the converter's refusal of model ``name`` is kept."""
    return out_dir / f"{name}.refused.txt"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
