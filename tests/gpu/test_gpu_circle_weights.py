"""Circle's weight types (ggml blocks, UINT4) on the GPU path: FULLY_CONNECTED and GATHER run on the GPU
(every op accelerated) and give the numpy reference's results, the weights held as the file holds them.
tests/ops/test_circle_weights.py checks the values against onert and the dequantized weights.

Run with ``LITEGPU_TEST_ACCELERATOR=cpu`` to check this file with the CPU standing in for the GPU.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from gpu_support import compiled, require_accelerator

pytestmark = pytest.mark.gpu
require_accelerator()
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ops"))
from test_circle_weights import GGML_TYPES, _uint4_weight, fc_model, gather_model, make_ggml  # noqa: E402

from litegpu.backends import ReferenceBackend  # noqa: E402
from litegpu.format import CIRCLE  # noqa: E402
from litegpu.ir import read_model  # noqa: E402
from litegpu.ir.save import to_bytes  # noqa: E402


def _on_gpu_and_reference(model, inputs):
    data = to_bytes(model, CIRCLE)
    gpu = compiled(data)
    got = gpu(*inputs)
    assert gpu.is_fully_accelerated(), gpu.plan.engine_summary()
    want = ReferenceBackend(read_model(data)).run(list(inputs))[0]
    return np.asarray(got), want


@pytest.mark.parametrize("dtype", GGML_TYPES + ["uint4"])
@pytest.mark.parametrize("rows", [1, 6])  # a decode step's matrix-vector product, a prefill's matrix product
def test_circle_weight_fc_on_the_gpu(dtype, rows):
    if dtype == "uint4":
        raw, _, quant = _uint4_weight(64, 256, per_channel=True)
        model = fc_model(dtype, raw, 64, 256, rows=rows, quantization=quant)
    else:
        raw, _ = make_ggml(dtype, 64, 256, seed=11)
        model = fc_model(dtype, raw, 64, 256, rows=rows, bias=np.arange(64, dtype=np.float32) / 64)
    x = np.random.default_rng(12).standard_normal((rows, 256)).astype(np.float32)
    got, want = _on_gpu_and_reference(model, [x])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", GGML_TYPES + ["uint4"])
def test_circle_weight_gather_on_the_gpu(dtype):
    if dtype == "uint4":
        raw, _, quant = _uint4_weight(40, 64, per_channel=False)
        model = gather_model(dtype, raw, 40, 64, quantization=quant)
    else:
        raw, _ = make_ggml(dtype, 40, 64, seed=13)
        model = gather_model(dtype, raw, 40, 64)
    got, want = _on_gpu_and_reference(model, [np.array([[39, 0, 7], [7, 1, 20]], np.int32)])
    np.testing.assert_array_equal(got, want)
