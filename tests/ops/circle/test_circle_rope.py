"""Circle's ROPE against torch's rotate_half formulation (as Hugging Face's Llama applies it)."""

from __future__ import annotations

import numpy as np
import pytest
from circle_oracle import check_circle_model
from oracle import random_input

from litegpu.backends import ReferenceBackend
from litegpu.errors import UnsupportedOpError
from litegpu.ir.builder import ModelBuilder
from litegpu.ops import Target, find

torch = pytest.importorskip("torch")


def tables(positions: int, dim: int, base: float = 10000.0) -> tuple[np.ndarray, np.ndarray]:
    inv_freq = 1.0 / base ** (np.arange(0, dim, 2) / dim)
    angles = np.outer(np.arange(positions), inv_freq)
    emb = np.concatenate([angles, angles], axis=-1)
    return np.sin(emb).astype(np.float32), np.cos(emb).astype(np.float32)


def rope_model(shape, table_shape, mode="GPT_NEOX", constant_tables=None):
    b = ModelBuilder()
    x = b.input("x", shape)
    if constant_tables is None:
        sin, cos = b.input("sin", table_shape), b.input("cos", table_shape)
    else:
        sin, cos = (b.constant(n, t.reshape(table_shape)) for n, t in zip(("sin", "cos"), constant_tables))
    y = b.tensor("y", shape)
    b.op("ROPE", [x, sin, cos], [y], mode=mode)
    b.output(y)
    return b.build()


def torch_rope(x, sin, cos):
    x, sin, cos = map(torch.from_numpy, (x, sin, cos))
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return (x * cos + rotated * sin).numpy()


@pytest.mark.parametrize("shape", [(1, 4, 1, 8), (2, 3, 5, 16)])
def test_rope_matches_torch_with_a_table_per_position(shape):
    sin, cos = tables(shape[2], shape[3])
    table_shape = (1, 1, shape[2], shape[3])
    model = rope_model(shape, table_shape)
    x = random_input(shape, low=-2, high=2)
    sin, cos = sin.reshape(table_shape), cos.reshape(table_shape)
    check_circle_model(model, [x, sin, cos], [torch_rope(x, sin, cos)])


def test_rope_one_position_table_as_one_reads_it():
    """A decode step: one position's table broadcast over heads (what ONE's kernel computes)."""
    sin, cos = tables(7, 8)
    model = rope_model((1, 2, 1, 8), (1, 1, 1, 8), constant_tables=(sin[6], cos[6]))
    x = random_input((1, 2, 1, 8))
    half = 4
    expected = np.concatenate([x[..., :half] * cos[6, :half] - x[..., half:] * sin[6, :half],
                               x[..., :half] * sin[6, half:] + x[..., half:] * cos[6, half:]], axis=-1)
    check_circle_model(model, [x], [expected])


def test_gpt_j_is_refused_clearly():
    model = rope_model((1, 1, 1, 4), (1, 1, 1, 4), mode="GPT_J")
    sg = model.main
    assert "GPT_J" in find("ROPE").unsupported_reason(sg.operators[0], sg, Target.XLA_CPU)
    with pytest.raises(UnsupportedOpError, match=r"op ROPE \(#0\) cannot run on reference: mode GPT_J \(ONE implements GPT_NEOX only\)"):
        ReferenceBackend(model).run([random_input((1, 1, 1, 4))] * 3)


def test_odd_head_size_is_refused():
    model = rope_model((1, 1, 2, 5), (1, 1, 2, 5))
    sg = model.main
    assert "D even" in find("ROPE").unsupported_reason(sg.operators[0], sg, Target.XLA_CPU)
