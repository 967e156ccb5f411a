"""Circle's GRU against torch's GRU cell (its gate blocks reordered: ONE keeps (z, r, n), torch (r, z, n))."""

from __future__ import annotations

import numpy as np
import pytest
from circle_oracle import check_circle_model
from oracle import random_input

from litegpu.backends import ReferenceBackend
from litegpu.errors import LiteGpuError
from litegpu.ir.builder import ModelBuilder
from litegpu.ops import Target, find

torch = pytest.importorskip("torch")


def gru_model(steps: int, batch: int, inputs: int, hidden: int, seed: int = 0, **options):
    rng = np.random.default_rng(seed)
    w_x, w_h = rng.normal(0, 0.5, (3 * hidden, inputs)), rng.normal(0, 0.5, (3 * hidden, hidden))
    b_x, b_h = rng.normal(0, 0.3, 3 * hidden), rng.normal(0, 0.3, 3 * hidden)
    b = ModelBuilder()
    x = b.input("x", (steps, batch, inputs))
    h0 = b.input("h0", (batch, hidden))
    weights = [b.constant(n, v.astype(np.float32)) for n, v in (("w_x", w_x), ("b_x", b_x), ("w_h", w_h),
                                                                  ("b_h", b_h))]
    y = b.tensor("y", (batch, hidden))
    b.op("GRU", [x, *weights, h0], [y], **options)
    b.output(y)
    return b.build(), [w.astype(np.float32) for w in (w_x, b_x, w_h, b_h)]


def torch_gru(x, h0, w_x, b_x, w_h, b_h):
    hidden = h0.shape[-1]

    def torch_order(w):  # ONE's (z, r, n) -> torch's (r, z, n)
        return torch.from_numpy(np.concatenate([w[hidden:2 * hidden], w[:hidden], w[2 * hidden:]]))

    cell = torch.nn.GRUCell(x.shape[-1], hidden)
    with torch.no_grad():
        for p, w in zip((cell.weight_ih, cell.bias_ih, cell.weight_hh, cell.bias_hh), (w_x, b_x, w_h, b_h)):
            p.copy_(torch_order(w))
        h = torch.from_numpy(h0)
        for t in range(x.shape[0]):
            h = cell(torch.from_numpy(x[t]), h)
    return h.numpy()


@pytest.mark.parametrize("steps, batch, inputs, hidden", [(1, 1, 3, 4), (6, 1, 5, 8), (4, 3, 2, 6)])
def test_gru_matches_torch(steps, batch, inputs, hidden):
    model, weights = gru_model(steps, batch, inputs, hidden)
    x, h0 = random_input((steps, batch, inputs), low=-2, high=2), random_input((batch, hidden), seed=1)
    check_circle_model(model, [x, h0], [torch_gru(x, h0, *weights)])


def test_gru_saturates_as_one_does():
    """Past ONE's cutoffs its sigmoid is exactly 1 and its tanh exactly +-1 (torch's are not)."""
    model, _ = gru_model(2, 1, 2, 2, seed=3)
    x = np.full((2, 1, 2), 60.0, np.float32)
    out = ReferenceBackend(model).run([x, np.zeros((1, 2), np.float32)])[0]
    from litegpu.ops.circle.gru import gru_step
    h = np.zeros((1, 2))
    weights = [model.main.tensors[i].data.astype(np.float64) for i in (2, 3, 4, 5)]
    for t in range(2):
        h = gru_step(np, h, x[t].astype(np.float64), *weights)
    np.testing.assert_allclose(out, h, rtol=1e-6)


@pytest.mark.parametrize("options, message", [({"return_sequences": True}, "return_sequences"),
                                              ({"fused_activation_function": "RELU"}, "fused activation RELU")])
def test_options_one_ignores_are_refused(options, message):
    model, _ = gru_model(2, 1, 2, 2, **options)
    sg = model.main
    assert message in find("GRU").unsupported_reason(sg.operators[0], sg, Target.REFERENCE)


def test_mismatched_weights_name_the_tensor():
    model, _ = gru_model(2, 1, 3, 4)
    with pytest.raises(LiteGpuError, match=r"GRU \(#0\): input weights must be \[15, 3\] for state \(1, 5\)"):
        ReferenceBackend(model).run([random_input((2, 1, 3)), random_input((1, 5))])
