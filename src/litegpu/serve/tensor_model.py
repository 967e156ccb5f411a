"""A ``.tflite`` / ``.circle`` model served through the Open Inference Protocol: its signatures, what each takes
and gives in the protocol's terms, the checks a request's tensors pass before they reach the model, and a
``DynamicBatcher`` per signature."""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ..errors import PayloadTooLargeError, RequestError, UnknownModelError
from .batcher import DynamicBatcher

# the protocol's tensor types and numpy's (BYTES, strings, has no TFLite numeric counterpart and is refused)
DATATYPES = {"BOOL": "bool", "UINT8": "uint8", "UINT16": "uint16", "UINT32": "uint32", "UINT64": "uint64",
             "INT8": "int8", "INT16": "int16", "INT32": "int32", "INT64": "int64", "FP16": "float16",
             "FP32": "float32", "FP64": "float64", "BF16": "bfloat16"}
_BY_NUMPY = {v: k for k, v in DATATYPES.items()}


def numpy_dtype(datatype: str) -> np.dtype:
    if datatype not in DATATYPES:
        raise RequestError(f"datatype {datatype!r} is not one this server takes ({', '.join(DATATYPES)})")
    if datatype == "BF16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(DATATYPES[datatype])


def protocol_datatype(dtype: Any) -> str:
    name = np.dtype(dtype).name
    if name not in _BY_NUMPY:
        raise RequestError(f"tensors of type {name} cannot travel through the protocol")
    return _BY_NUMPY[name]


class TensorModel:
    """One model file's signatures, each behind a DynamicBatcher; the first signature is the default."""

    kind = "tensor"

    def __init__(self, name: str, compiled: Any, *, mode: str, max_batch: int, max_delay_s: float,
                 metrics: Any = None):
        self.name, self.compiled = name, compiled
        # one thread per model: its calls (batched or not) run one after another, each using every core
        self.executor = ThreadPoolExecutor(1, thread_name_prefix=f"litegpu-{name}")
        self.signatures = list(compiled.get_signature_list())
        self.default_signature = self.signatures[0]
        self.batchers = {key: DynamicBatcher(compiled, key, name=self._label(key), mode=mode, max_batch=max_batch,
                                             max_delay_s=max_delay_s, executor=self.executor, metrics=metrics)
                         for key in self.signatures}

    def _label(self, key: str) -> str:
        return self.name if key == self.signatures[0] else f"{self.name}/{key}"

    def signature(self, key: str | None) -> str:
        if key is None:
            return self.default_signature
        if key not in self.signatures:
            raise UnknownModelError(f"model {self.name!r} has no signature {key!r}; it has {self.signatures}")
        return key

    def warm_up(self) -> None:
        for batcher in self.batchers.values():
            batcher.warm_up()

    def start(self) -> None:
        for batcher in self.batchers.values():
            batcher.start()

    async def close(self) -> None:
        for batcher in self.batchers.values():
            await batcher.close()
        self.executor.shutdown(wait=True)

    # ---- the protocol's view --------------------------------------------------------------
    def metadata(self, signature: str | None) -> dict[str, Any]:
        key = self.signature(signature)

        def tensors(details: dict[str, dict]) -> list[dict]:
            return [{"name": n, "datatype": protocol_datatype(d["dtype"]), "shape": list(d["shape"])}
                    for n, d in details.items()]

        return {"name": self.name if signature is None else f"{self.name}/{key}", "versions": ["1"],
                "platform": f"litegpu_{self.compiled.model.file_format}", "signature": key,
                "signatures": self.signatures,
                "inputs": tensors(self.compiled.get_input_tensor_details(key)),
                "outputs": tensors(self.compiled.get_output_tensor_details(key)),
                "batching": self.batchers[key].policy.describe()}

    def check_inputs(self, signature: str, inputs: dict[str, np.ndarray]) -> None:
        """Names, dtypes and shapes as the signature takes them, else a RequestError naming the tensor."""
        details = self.compiled.get_input_tensor_details(signature)
        unknown = sorted(set(inputs) - set(details))
        missing = [n for n in details if n not in inputs]
        if unknown or missing:
            raise RequestError(f"model {self.name!r} (signature {signature!r}) takes inputs {list(details)}"
                               + (f"; unknown: {unknown}" if unknown else "") + (f"; missing: {missing}" if missing else ""))
        for name, d in details.items():
            value, dtype, shape = inputs[name], np.dtype(d["dtype"]), tuple(d["shape"])
            if value.dtype != dtype:
                raise RequestError(f"input {name!r} of model {self.name!r} is {protocol_datatype(dtype)}; got "
                                   f"{protocol_datatype(value.dtype)}")
            if value.shape != shape:
                raise RequestError(f"input {name!r} of model {self.name!r} has shape {list(shape)}; got "
                                   f"{list(value.shape)}")

    def tensor_bytes(self, shape: list[int], dtype: np.dtype, name: str, limit: int) -> int:
        if any(d < 0 for d in shape):
            raise RequestError(f"input {name!r}: shape {shape} has a negative dimension")
        size = math.prod(shape) * dtype.itemsize
        if size > limit:
            raise PayloadTooLargeError(f"input {name!r}: shape {shape} of {dtype.name} is {size} bytes; the "
                                       f"server takes at most {limit} per tensor")
        return size

    async def infer(self, signature: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.check_inputs(signature, inputs)
        return await self.batchers[signature].infer(inputs)


__all__ = ["DATATYPES", "TensorModel", "numpy_dtype", "protocol_datatype"]
