"""litegpu on Ray Data: one compiled model per actor, numpy columns in, output columns out.

    import ray, litegpu.ray
    ds = ray.data.from_numpy(images)                           # column "data"
    out = ds.map_batches(litegpu.ray.Predictor, fn_constructor_kwargs={
              "model_path": "model.tflite", "columns": {"data": "input"}},
          batch_size=64, concurrency=2, num_gpus=0)

``Predictor`` loads and compiles the model once per actor.  Each batch is a dict of numpy columns: the
columns named by the signature's inputs (or mapped to them with ``columns``) are fed to the model, one example
per row, and every output becomes a column of the same name (other columns, ids say, pass through).  Actors
share the compile cache (``cache_dir``, by default the user's compile cache, ``litegpu.backends.cache``), so only
the first actor on a machine compiles and chooses the engines; the others, started beside it, wait for it and load
what it wrote.  ``num_gpus`` is Ray's: an actor given a
GPU runs the model there (``accelerator="gpu,cpu"``, the default, falls back to the CPU without one).

Install with ``pip install "litegpu[ray]"``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .errors import InvalidArgumentError


class Predictor:
    """A callable class for ``ray.data.Dataset.map_batches`` (see the module doc)."""

    def __init__(self, model_path: str, signature_key: str | int = 0, columns: Mapping[str, str] | None = None,
                 accelerator: str = "gpu,cpu", num_threads: int = 0, cache_dir: str | None = None,
                 batched: bool = False):
        import litegpu

        flags = litegpu.HardwareAccelerator.CPU
        if "gpu" in accelerator.lower():
            flags = flags | litegpu.HardwareAccelerator.GPU
        options = litegpu.Options(flags, cpu_options=litegpu.CpuOptions(num_threads=num_threads),
                                  serialization_dir=cache_dir)
        self.model = litegpu.CompiledModel.from_file(model_path, options=options)
        self.signature_key = signature_key
        signature = self.model.get_signature_by_index(self.model._signature(signature_key).index)
        self.inputs, self.outputs = list(signature["inputs"]), list(signature["outputs"])
        self.columns = dict(columns or {})  # dataset column -> model input
        unknown = [v for v in self.columns.values() if v not in self.inputs]
        if unknown:
            raise InvalidArgumentError(f"{model_path}: columns map to {unknown}, which are not inputs of signature "
                                       f"{signature['key']!r} ({self.inputs})")
        self.details = self.model.get_input_tensor_details(signature_key)
        self.batched = self.model.batched() if batched else None

    def _model_inputs(self, batch: Mapping[str, Any]) -> dict[str, np.ndarray]:
        by_input = {self.columns.get(column, column): column for column in batch}
        missing = [name for name in self.inputs if name not in by_input]
        if missing:
            raise InvalidArgumentError(f"the batch has columns {sorted(batch)}; the model needs {missing} (map "
                                       "columns to inputs with columns={...})")
        return {name: np.stack([np.asarray(v, dtype=self.details[name]["dtype"])
                                for v in batch[by_input[name]]]) for name in self.inputs}

    def _example(self, name: str, row: np.ndarray) -> np.ndarray:
        """A row as the input's example shape (a row may leave out the leading batch of 1)."""
        shape = tuple(self.details[name]["shape"])
        if row.shape != shape and row.size == int(np.prod(shape)):
            return row.reshape(shape)
        return row

    def __call__(self, batch: Mapping[str, Any]) -> dict[str, np.ndarray]:
        feeds = self._model_inputs(batch)
        rows = len(next(iter(feeds.values())))
        if self.batched is not None:
            results = self.batched.run(feeds, self.signature_key)
        else:
            per_row = [self.model.run({k: self._example(k, v[i]) for k, v in feeds.items()}, self.signature_key)
                       for i in range(rows)]
            results = {name: np.stack([r[name] for r in per_row]) for name in self.outputs}
        consumed = {self.columns.get(c, c) for c in batch} & set(self.inputs)
        passthrough = {c: np.asarray(v) for c, v in batch.items() if self.columns.get(c, c) not in consumed}
        return {**passthrough, **{name: np.asarray(v) for name, v in results.items()}}


__all__ = ["Predictor"]
