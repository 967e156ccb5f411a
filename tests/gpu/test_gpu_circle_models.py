"""Issue 27 on the GPU path: the tico-made .circle models through ``CompiledModel`` with ``GPU | CPU``,
against torch's outputs (tests/runtime/test_circle_models.py holds them to onert on the CPU).

Run with ``LITEGPU_TEST_ACCELERATOR=cpu`` to check this file with the CPU standing in for the GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpu_support import compiled, require_accelerator

pytestmark = pytest.mark.gpu
require_accelerator()
tico_models = pytest.importorskip("tico_models")


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("tico")
    return {name: tico_models.make(name, folder) for name in tico_models.MODELS}


@pytest.mark.parametrize("name", list(tico_models.MODELS))
def test_tico_model_on_the_gpu_matches_torch(made, name):
    m = made[name]
    model = compiled(m.path)
    out = model(*m.inputs)
    for got, want in zip(out if isinstance(out, tuple) else (out,), m.torch_outputs, strict=True):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5)
    assert model.is_fully_accelerated(), model.plan.engine_summary()  # every op, circle-only ones included, on the GPU


@pytest.mark.parametrize("case", [{}, {"cache": "static", "past": 8, "start": 5}], ids=["dynamic", "static"])
def test_fused_llama_attention_on_the_gpu_matches_torch(tmp_path, case):
    m = tico_models.make_llama_attention(tmp_path, **case)
    model = compiled(m.path)
    np.testing.assert_allclose(np.asarray(model(*m.inputs)), m.torch_outputs[0], rtol=1e-4, atol=1e-5)
    assert model.is_fully_accelerated(), model.plan.engine_summary()
