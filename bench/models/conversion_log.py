"""One converted model, reported as a JSON line: shared by the zoo builders (each runs in its own venv,
TensorFlow's or PyTorch's, so this module needs nothing but the standard library)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path


def convert_and_report(record: dict, path: Path, build: Callable[[], dict]) -> dict:
    """Run ``build`` unless ``path`` exists; print ``record`` with its status, time and ``build``'s facts."""
    if path.exists():
        record["status"] = "cached"
    else:
        start = time.perf_counter()
        try:
            record.update(build())
            record["status"] = "converted"
        except Exception as e:  # noqa: BLE001  (a model the converter refuses is reported, not hidden)
            record.update(status="failed", error=f"{type(e).__name__}: {str(e)[:300]}")
        record["seconds"] = round(time.perf_counter() - start, 1)
    print(json.dumps(record), flush=True)
    return record


def convert_named(argv: list[str], names: list[str], file_name: Callable[[str], str], converter: str,
                  build: Callable[[str, Path], dict]) -> int:
    """A zoo builder's command line: ``OUT_DIR [NAME ...]`` (all of ``names`` without NAME), each model converted
    by ``build(name, path)`` into ``OUT_DIR/file_name(name)`` and reported."""
    out_dir = Path(argv[0])
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in argv[1:] or names:
        path = out_dir / file_name(name)
        convert_and_report({"model": name, "file": path.name, "converter": converter}, path,
                           lambda: build(name, path))
    return 0
