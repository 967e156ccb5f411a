"""``litegpu batch MODEL INPUTS OUTPUT``: run a model over a dataset, writing Parquet, resumable.

INPUTS is a folder of ``.npy`` files (one example each, id = file name without extension), a folder of
images (``.png``/``.jpg``/``.jpeg``/``.bmp``: decoded with Pillow, resized to the input's height and width,
scaled as ``--scale`` says) or a Parquet file (an ``id`` column, and one column per model input holding each
example's values, flattened or nested).  OUTPUT is a Parquet file: one row per example, its ``id`` and one
column per model output (the values flattened; each output's shape is in the schema metadata).

Work is committed in parts: every ``--part-size`` rows go to ``OUTPUT.parts/part-NNNNN.parquet`` through a
temp file and a rename, so an interrupted run loses at most the part it was writing, and a rerun skips every
id already in a part.  When every example is done the parts are joined into OUTPUT (again temp + rename) and
the parts folder removed.  A bad example (wrong shape or type, undecodable image) is reported with its id on
stderr, listed in ``OUTPUT.errors.jsonl`` and skipped; it never stops the run.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError, LiteGpuError
from .common import ACCELERATOR_HELP, accelerator_flags, count

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")
SCALES = {"0..1": (0.0, 1.0), "-1..1": (-1.0, 1.0), "raw": None}


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise InvalidArgumentError('litegpu batch writes Parquet with pyarrow: pip install "litegpu[batch]"') from None
    return pyarrow


# ---- reading examples ------------------------------------------------------------------------------
class _BadExample(Exception):
    pass


def _examples(inputs: Path, names: list[str], details: dict, scale: str) -> Iterator[tuple[str, Any]]:
    """(id, {input name: array} or _BadExample) for every example of INPUTS, in a stable order."""
    if inputs.is_file() and inputs.suffix == ".parquet":
        yield from _parquet_examples(inputs, names, details)
        return
    if not inputs.is_dir():
        raise InvalidArgumentError(f"{inputs}: not a folder of .npy files or images, nor a .parquet file")
    if len(names) != 1:
        raise InvalidArgumentError(f"{inputs}: a folder feeds models with one input; this signature has {names} "
                                   "(use a Parquet file with one column per input)")
    files = sorted(p for p in inputs.iterdir() if p.suffix.lower() in (".npy",) + IMAGE_SUFFIXES)
    if not files:
        raise InvalidArgumentError(f"{inputs}: no .npy or image files")
    for path in files:
        try:
            array = np.load(path, allow_pickle=False) if path.suffix == ".npy" else _image(path, details[names[0]],
                                                                                           scale)
            yield path.stem, {names[0]: array}
        except Exception as e:  # an unreadable file is this example's problem, not the run's
            yield path.stem, _BadExample(f"cannot read {path.name}: {type(e).__name__}: {e}")


def _image(path: Path, detail: dict, scale: str) -> np.ndarray:
    try:
        from PIL import Image
    except ImportError:
        raise InvalidArgumentError('images need Pillow: pip install "litegpu[batch]"') from None
    shape = tuple(detail["shape"])
    if len(shape) != 4 or shape[0] != 1:
        raise _BadExample(f"the model input is {list(shape)}, not an image batch [1, H, W, C]")
    _, height, width, channels = shape
    with Image.open(path) as image:
        image = image.convert("L" if channels == 1 else "RGB").resize((width, height))
        pixels = np.asarray(image, np.float32).reshape(1, height, width, channels)
    if np.dtype(detail["dtype"]).kind != "f" or SCALES[scale] is None:
        return pixels.astype(detail["dtype"])
    low, high = SCALES[scale]
    return (low + pixels / 255.0 * (high - low)).astype(detail["dtype"])


def _parquet_examples(path: Path, names: list[str], details: dict) -> Iterator[tuple[str, Any]]:
    pa = _pyarrow()
    table = pa.parquet.read_table(path)
    missing = [n for n in ["id", *names] if n not in table.column_names]
    if missing:
        raise InvalidArgumentError(f"{path}: columns {missing} are missing (it has {table.column_names})")
    ids = [str(i) for i in table.column("id").to_pylist()]
    columns = {n: table.column(n).to_pylist() for n in names}
    for row, example_id in enumerate(ids):
        try:
            yield example_id, {n: np.asarray(columns[n][row], dtype=details[n]["dtype"]) for n in names}
        except Exception as e:
            yield example_id, _BadExample(f"cannot read row {row}: {type(e).__name__}: {e}")


# ---- writing parts ---------------------------------------------------------------------------------
class _Parts:
    """The committed parts of OUTPUT: which ids are done, and writing the next part atomically."""

    def __init__(self, output: Path):
        self.output = output
        self.folder = output.with_name(output.name + ".parts")
        self.folder.mkdir(parents=True, exist_ok=True)
        self.pa = _pyarrow()

    def files(self) -> list[Path]:
        return sorted(self.folder.glob("part-*.parquet"))

    def done_ids(self) -> set[str]:
        done: set[str] = set()
        for part in self.files():
            done.update(str(i) for i in self.pa.parquet.read_table(part, columns=["id"]).column("id").to_pylist())
        if self.output.exists():
            done.update(str(i) for i in self.pa.parquet.read_table(self.output, columns=["id"]).column("id").to_pylist())
        return done

    def write(self, rows: list[tuple[str, dict]], shapes: dict[str, list[int]]) -> None:
        pa = self.pa
        columns: dict[str, Any] = {"id": pa.array([r[0] for r in rows], pa.string())}
        for name in shapes:
            columns[name] = pa.array([np.asarray(r[1][name]).reshape(-1) for r in rows])
        metadata = {b"litegpu.shapes": json.dumps(shapes).encode()}
        table = pa.table(columns).replace_schema_metadata(metadata)
        index = len(self.files())
        final = self.folder / f"part-{index:05d}.parquet"
        tmp = self.folder / f".part-{index:05d}.{os.getpid()}.tmp"
        pa.parquet.write_table(table, tmp)
        os.replace(tmp, final)

    def join(self) -> int:
        """Every part (and an earlier OUTPUT) into OUTPUT, atomically; returns the row count."""
        pa = self.pa
        tables = [pa.parquet.read_table(p) for p in self.files()]
        if self.output.exists():
            tables.insert(0, pa.parquet.read_table(self.output))
        if not tables:
            return 0
        metadata = tables[-1].schema.metadata
        table = pa.concat_tables([t.replace_schema_metadata(None) for t in tables]).replace_schema_metadata(metadata)
        tmp = self.output.with_name(f".{self.output.name}.{os.getpid()}.tmp")
        pa.parquet.write_table(table, tmp)
        os.replace(tmp, self.output)
        shutil.rmtree(self.folder, ignore_errors=True)
        return table.num_rows


# ---- the run ---------------------------------------------------------------------------------------
def _check_example(example_id: str, feed: dict, details: dict) -> None:
    for name, array in feed.items():
        want_shape, want_dtype = tuple(details[name]["shape"]), np.dtype(details[name]["dtype"])
        shape = tuple(array.shape)
        if shape != want_shape and not (want_shape[:1] == (1,) and shape == want_shape[1:]):
            raise _BadExample(f"input {name!r} is {list(want_shape)}, this example is {list(shape)}")
        if array.dtype != want_dtype:
            raise _BadExample(f"input {name!r} is {want_dtype.name}, this example is {array.dtype.name}")


def _valid_examples(inputs: Path, names: list[str], details: dict, scale: str, done: set[str],
                    errors_path: Path, counts: dict) -> Iterator[tuple[str, dict]]:
    """(id, {input: array shaped as the model's input}) of each example not done yet; a bad one is reported on
    stderr and in the errors file, counted, and skipped."""
    for example_id, feed in _examples(inputs, names, details, scale):
        if example_id in done:
            continue
        try:
            if isinstance(feed, _BadExample):
                raise feed
            _check_example(example_id, feed, details)
        except _BadExample as e:
            _report_bad(example_id, e, errors_path, counts)
            continue
        yield example_id, {n: a.reshape(details[n]["shape"]) for n, a in feed.items()}


def _report_bad(example_id: str, error: Exception, errors_path: Path, counts: dict) -> None:
    counts["bad"] += 1
    sys.stderr.write(f"litegpu batch: skipping {example_id!r}: {error}\n")
    with open(errors_path, "a") as f:
        f.write(json.dumps({"id": example_id, "error": str(error)}) + "\n")


def run_local(model_path: Path, inputs: Path, output: Path, *, signature: str | int = 0, part_size: int = 256,
              scale: str = "0..1", accelerator: str = "cpu", progress: bool = True,
              limit: int | None = None) -> dict:
    """Run the whole dataset in this process (see the module doc); returns counts."""
    import litegpu

    model = litegpu.CompiledModel.from_file(str(model_path), hardware_accel=accelerator_flags(accelerator))
    details = model.get_input_tensor_details(signature)
    names = list(details)
    parts = _Parts(output)
    done = parts.done_ids()
    errors_path = output.with_name(output.name + ".errors.jsonl")
    counts = {"done_before": len(done), "ran": 0, "bad": 0}
    pending: list[tuple[str, dict]] = []
    shapes: dict[str, list[int]] = {}
    started = time.perf_counter()
    bar = _progress(progress)
    with bar:
        task = bar.add_task("examples", total=None)
        for example_id, feed in _valid_examples(inputs, names, details, scale, done, errors_path, counts):
            try:
                result = model.run(feed, signature)
            except LiteGpuError as e:  # the model refuses this example's values: skip it, keep going
                _report_bad(example_id, e, errors_path, counts)
                continue
            shapes = {name: list(np.shape(v)) for name, v in result.items()}
            pending.append((example_id, result))
            done.add(example_id)
            counts["ran"] += 1
            bar.update(task, advance=1, description=f"examples ({counts['ran'] / (time.perf_counter() - started):.1f}/s)")
            if len(pending) >= part_size:
                parts.write(pending, shapes)
                pending = []
            if limit is not None and counts["ran"] >= limit:
                break
        if pending:
            parts.write(pending, shapes)
    if limit is None or counts["ran"] < limit:
        counts["rows"] = parts.join()
    counts["seconds"] = time.perf_counter() - started
    return counts


def _progress(enabled: bool) -> Any:
    """A progress line on stderr (examples done, examples/s, time), shown on a terminal."""
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    return Progress(SpinnerColumn(), TextColumn("{task.description}"), TextColumn("{task.completed} done"),
                    TimeElapsedColumn(), console=Console(file=sys.stderr), disable=not enabled)


def run_ray(model_path: Path, inputs: Path, output: Path, *, address: str, signature: str | int = 0,
            scale: str = "0..1", concurrency: int = 1, batch_size: int = 64, num_gpus: float = 0) -> dict:
    """The same over Ray Data: examples read here, predicted by ``litegpu.ray.Predictor`` actors, and written
    by the same resumable parts."""
    try:
        import ray
    except ImportError:
        raise InvalidArgumentError('--ray needs Ray: pip install "litegpu[ray]"') from None
    import litegpu
    from ..ray import Predictor

    model = litegpu.CompiledModel.from_file(str(model_path))
    details = model.get_input_tensor_details(signature)
    names = list(details)
    parts = _Parts(output)
    counts = {"done_before": len(parts.done_ids()), "bad": 0}
    rows = [{"id": example_id, **feed} for example_id, feed in _valid_examples(
        inputs, names, details, scale, parts.done_ids(), output.with_name(output.name + ".errors.jsonl"), counts)]
    if rows:
        ray.init(address=None if address == "local" else address, ignore_reinit_error=True,
                 **({"num_cpus": os.cpu_count()} if address == "local" else {}))
        dataset = ray.data.from_items(rows).map_batches(
            Predictor, fn_constructor_kwargs={"model_path": str(model_path), "signature_key": signature},
            batch_size=batch_size, concurrency=concurrency, num_gpus=num_gpus)
        for batch in dataset.iter_batches(batch_size=256, batch_format="numpy"):
            outputs = [n for n in batch if n not in ("id", *names)]
            results = [(str(batch["id"][i]), {n: batch[n][i] for n in outputs}) for i in range(len(batch["id"]))]
            parts.write(results, {n: list(np.shape(batch[n][0])) for n in outputs})
    return {**counts, "ran": len(rows), "rows": parts.join()}


def run(args: Any) -> int:
    if not args.model.is_file():
        raise InvalidArgumentError(f"{args.model}: no such file")
    if not args.inputs.exists():
        raise InvalidArgumentError(f"{args.inputs}: no such file or folder")
    if args.ray:
        counts = run_ray(args.model, args.inputs, args.output, address=args.ray, signature=args.signature or 0,
                         scale=args.scale, concurrency=args.concurrency, batch_size=args.batch_size,
                         num_gpus=args.num_gpus)
    else:
        counts = run_local(args.model, args.inputs, args.output, signature=args.signature or 0,
                           part_size=args.part_size, scale=args.scale, accelerator=args.accelerator,
                           progress=sys.stderr.isatty())
    sys.stdout.write(f"{args.output}: {counts.get('rows', 0)} rows ({counts['ran']} run now, "
                     f"{counts.get('done_before', 0)} done before, {counts['bad']} bad examples skipped)\n")
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("batch", help="run a model over a folder of .npy files / images or a Parquet file, "
                                     "writing Parquet (resumable)")
    p.add_argument("model", metavar="MODEL", type=Path, help="the .tflite model")
    p.add_argument("inputs", metavar="INPUTS", type=Path, help="a folder of .npy files or images, or a .parquet file")
    p.add_argument("output", metavar="OUTPUT", type=Path, help="the Parquet file to write")
    p.add_argument("--signature", metavar="KEY", help="signature to run (default: the first)")
    p.add_argument("--accelerator", default="cpu", metavar="cpu|gpu|gpu,cpu", help=ACCELERATOR_HELP)
    p.add_argument("--scale", choices=sorted(SCALES), default="0..1", help="pixel values of images (default 0..1)")
    p.add_argument("--part-size", type=count(1), default=256, metavar="N", help="rows per committed part (default 256)")
    p.add_argument("--ray", metavar="ADDRESS", help="run on a Ray cluster (an address, or 'local')")
    p.add_argument("--concurrency", type=count(1), default=1, help="Ray actors (with --ray)")
    p.add_argument("--batch-size", type=count(1), default=64, help="rows per Ray batch (with --ray)")
    p.add_argument("--num-gpus", type=float, default=0, help="GPUs per Ray actor (with --ray)")
    p.set_defaults(handler=run)
