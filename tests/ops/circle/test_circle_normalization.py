"""INSTANCE_NORM and RMS_NORM against torch and, where it runs them, onert."""

from __future__ import annotations

import numpy as np
import pytest
from circle_oracle import check_circle_model, have_onert, onert_outputs
from oracle import random_input

from litegpu.errors import LiteGpuError
from litegpu.format import CIRCLE
from litegpu.ir.builder import ModelBuilder
from litegpu.ir.save import write_model
from litegpu.ops import Target, find

torch = pytest.importorskip("torch")


def norm_model(op: str, shape, channels: int, *, beta: bool = True, **options):
    b = ModelBuilder()
    x = b.input("x", shape)
    rng = np.random.default_rng(1)
    gamma = b.constant("gamma", rng.uniform(0.5, 1.5, channels).astype(np.float32))
    inputs = [x, gamma]
    if beta:
        inputs.append(b.constant("beta", rng.uniform(-0.5, 0.5, channels).astype(np.float32)))
    y = b.tensor("y", shape)
    b.op(op, inputs, [y], **options)
    b.output(y)
    model = b.build()
    constants = [model.main.tensors[i].data for i in inputs[1:]]
    return model, constants


@pytest.mark.parametrize("shape", [(2, 5, 7, 3), (1, 4, 4, 8), (2, 3, 9)])
@pytest.mark.parametrize("activation", ["NONE", "RELU", "RELU6"])
def test_instance_norm_matches_torch(shape, activation):
    channels = shape[-1] if len(shape) == 4 else shape[1]
    model, (gamma, beta) = norm_model("INSTANCE_NORM", shape, channels, epsilon=1e-5,
                                      fused_activation_function=activation)
    x = random_input(shape, low=-3, high=5)
    nchw = torch.from_numpy(np.moveaxis(x, -1, 1) if len(shape) == 4 else x)
    expected = torch.nn.functional.instance_norm(nchw, weight=torch.from_numpy(gamma), bias=torch.from_numpy(beta),
                                                 eps=1e-5).numpy()
    expected = np.moveaxis(expected, 1, -1) if len(shape) == 4 else expected
    expected = {"RELU": np.maximum(expected, 0), "RELU6": np.clip(expected, 0, 6)}.get(activation, expected)
    check_circle_model(model, [x], [expected], atol=2e-5)


def test_instance_norm_single_gamma_and_beta_broadcast():
    model, _ = norm_model("INSTANCE_NORM", (1, 3, 3, 4), 1, epsilon=1e-3)
    x = random_input((1, 3, 3, 4))
    gamma, beta = model.main.tensors[1].data[0], model.main.tensors[2].data[0]
    mean, var = x.mean(axis=(1, 2), keepdims=True), x.var(axis=(1, 2), keepdims=True)
    check_circle_model(model, [x], [gamma * (x - mean) / np.sqrt(var + 1e-3) + beta])


@pytest.mark.parametrize("shape", [(1, 6, 16), (2, 3, 4, 8), (5, 32), (7,)])
def test_rms_norm_matches_torch(shape):
    model, (gamma,) = norm_model("RMS_NORM", shape, shape[-1], beta=False, epsilon=1e-6)
    x = random_input(shape, low=-4, high=4)
    expected = torch.nn.functional.rms_norm(torch.from_numpy(x), (shape[-1],), torch.from_numpy(gamma), eps=1e-6)
    check_circle_model(model, [x], [expected.numpy()])


def test_rms_norm_with_lucis_beta():
    model, (gamma, beta) = norm_model("RMS_NORM", (2, 3, 8), 8, epsilon=1e-5)
    x = random_input((2, 3, 8))
    rms = np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-5)
    check_circle_model(model, [x], [(gamma * (x / rms) + beta).astype(np.float32)])


def test_wrong_gamma_is_a_clear_error():
    model, _ = norm_model("RMS_NORM", (2, 8), 3, beta=False, epsilon=1e-5)
    from litegpu.backends import ReferenceBackend

    with pytest.raises(LiteGpuError, match=r"RMS_NORM \(#0\): gamma must have shape \[8\] or \[1\], got \(3,\)"):
        ReferenceBackend(model).run([random_input((2, 8))])


def test_instance_norm_refuses_rank_2_before_running():
    model, _ = norm_model("INSTANCE_NORM", (4, 8), 8, epsilon=1e-5)
    sg = model.main
    assert "rank 2" in find("INSTANCE_NORM").unsupported_reason(sg.operators[0], sg, Target.XLA_CPU)


@pytest.mark.skipif(not have_onert(), reason="needs onert (pip install onert)")
@pytest.mark.parametrize("shape", [(1, 6, 16), (2, 3, 4, 8)])
def test_rms_norm_matches_onert(shape, tmp_path):
    """onert runs RMS_NORM on rank 3 and 4 inputs (it refuses rank 2)."""
    model, _ = norm_model("RMS_NORM", shape, shape[-1], beta=False, epsilon=1e-6)
    path = tmp_path / "rms.circle"
    write_model(model, path, file_format=CIRCLE.name)
    x = random_input(shape, low=-4, high=4)
    expected = onert_outputs(path, [x], tmp_path)
    assert expected is not None, "onert refused the model"
    check_circle_model(model, [x], expected, atol=1e-6)
