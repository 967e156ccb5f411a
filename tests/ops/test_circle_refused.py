"""Circle ops refused with the reason: BCQ_FULLY_CONNECTED and BCQ_GATHER (ops/circle/bcq.py).  A model using
one names it and why, on every backend and in ``litegpu ops``; the model is still read and written."""

from __future__ import annotations

import numpy as np
import pytest

from litegpu.backends import ReferenceBackend
from litegpu.cli.ops_cmd import support_table
from litegpu.errors import UnsupportedOpError
from litegpu.format import CIRCLE
from litegpu.ir import read_model
from litegpu.ir.builder import ModelBuilder
from litegpu.ir.save import to_bytes


def _models():
    fc = ModelBuilder()
    x = fc.input("x", (64, 2))
    inputs = [x, fc.constant("scales", np.ones(4, np.float32)), fc.constant("binary", np.zeros((4, 2), np.int32)),
              -1, fc.constant("clusters", np.array([[2, 4]], np.int32))]
    y = fc.tensor("y", (4, 2))
    fc.op("BCQ_FULLY_CONNECTED", inputs, [y], weights_hidden_size=64)
    fc.output(y)
    gather = ModelBuilder()
    i = gather.input("i", (3,), "int32")
    inputs = [gather.constant("scales", np.ones(4, np.float32)), gather.constant("binary", np.zeros((4, 2), np.int32)),
              i, gather.constant("clusters", np.array([[2, 4]], np.int32))]
    y = gather.tensor("y", (3, 64))
    gather.op("BCQ_GATHER", inputs, [y], input_hidden_size=64, axis=0)
    gather.output(y)
    return {"BCQ_FULLY_CONNECTED": (fc.build(), np.zeros((64, 2), np.float32), "no public kernel"),
            "BCQ_GATHER": (gather.build(), np.zeros(3, np.int32), "no public kernel")}


@pytest.mark.parametrize("name", ["BCQ_FULLY_CONNECTED", "BCQ_GATHER"])
def test_refused_circle_ops_say_why(name):
    model, x, why = _models()[name]
    again = read_model(to_bytes(model, CIRCLE))
    assert again == model
    with pytest.raises(UnsupportedOpError, match=rf"{name} \(#0\) is not implemented by litegpu: {why}"):
        ReferenceBackend(again).run([x])
    entry = support_table()["builtin"][name]
    assert not entry["cpu"] and why in entry["refused"] and entry["formats"] == ["circle"]
