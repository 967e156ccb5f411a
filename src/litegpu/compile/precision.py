"""The float precision policy of a compiled model.

- ``fp32`` (default everywhere): float32 storage and arithmetic, matmuls and
  convolutions at "highest" precision, so results agree with the CPU.
- ``fp16``: float32 weights, inputs and activations are stored *and* computed
  in float16; outputs are cast back to float32 at the program's boundary.
- ``fp16_fp32_accum``: float16 storage (weights, activations between ops),
  float32 arithmetic inside each op, which is what GPU delegates call
  "fp16 storage with fp32 precision": halves memory traffic, keeps sums exact.

Only tensors the model declares float32 are affected; float16, integer and
quantized tensors keep their types.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InvalidArgumentError

PRECISIONS = ("fp32", "fp16", "fp16_fp32_accum")


@dataclass(frozen=True)
class PrecisionPolicy:
    name: str = "fp32"

    @property
    def storage_dtype(self) -> np.dtype:
        """What a float32 tensor is held as between ops."""
        return np.dtype(np.float32 if self.name == "fp32" else np.float16)

    @property
    def compute_dtype(self) -> np.dtype:
        """What a float32 tensor is computed in inside an op."""
        return np.dtype(np.float16 if self.name == "fp16" else np.float32)

    @property
    def is_reduced(self) -> bool:
        return self.name != "fp32"


def precision_policy(name: str | PrecisionPolicy | None) -> PrecisionPolicy:
    if isinstance(name, PrecisionPolicy):
        return name
    name = "fp32" if name is None else str(name).lower()
    if name not in PRECISIONS:
        raise InvalidArgumentError(f"unknown GPU precision {name!r}; expected one of {', '.join(PRECISIONS)}")
    return PrecisionPolicy(name)
