"""Circle's RUN_MODEL (ops/circle/run_model.py): a caller runs a model of its own folder by a signature, on
numpy, XLA and through CompiledModel; what litegpu cannot run is refused naming the op and the file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import litegpu as lg
from litegpu.backends import ReferenceBackend
from litegpu.errors import UnsupportedOpError
from litegpu.format import CIRCLE
from litegpu.ir import read_model
from litegpu.ir.builder import ModelBuilder
from litegpu.ir.save import to_bytes


def _callee() -> bytes:
    """Subgraph 0: (a, b) -> (a + b, a * 2); signature "swap" on subgraph 1: {"q": p * 3, "p" first} with its
    inputs listed in the other order than the subgraph's."""
    b = ModelBuilder()
    a, x = b.input("a", (2, 3)), b.input("b", (2, 3))
    s, d = b.tensor("sum", (2, 3)), b.tensor("double", (2, 3))
    b.op("ADD", [a, x], [s])
    b.op("MUL", [a, b.constant("two", np.full((1,), 2, np.float32))], [d])
    b.output(s, d)
    b.signature("first")
    sub = b.subgraph("scale")
    p, r = sub.input("p", (2, 3)), sub.input("r", (2, 3))
    q = sub.tensor("q", (2, 3))
    sub.op("SUB", [p, r], [q])
    sub.output(q)
    b.signature("minus", sub, inputs={"r": r, "p": p}, outputs={"q": q})
    return to_bytes(b.build(), CIRCLE)


def _caller(location: str, signature: str = "", outputs: int = 2) -> bytes:
    b = ModelBuilder()
    x, y = b.input("x", (2, 3)), b.input("y", (2, 3))
    outs = [b.tensor(f"o{i}", (2, 3)) for i in range(outputs)]
    b.op("RUN_MODEL", [x, y], outs, location=location, signature=signature)
    b.output(*outs)
    return to_bytes(b.build(), CIRCLE)


@pytest.fixture
def package(tmp_path: Path) -> Path:
    (tmp_path / "parts").mkdir()
    (tmp_path / "parts" / "callee.circle").write_bytes(_callee())
    return tmp_path


X = np.arange(6, dtype=np.float32).reshape(2, 3)
Y = np.full((2, 3), 0.5, np.float32)


def _all_ways(path: Path) -> dict[str, list[np.ndarray]]:
    from litegpu.backends.xla.backend import XlaBackend

    model = read_model(str(path))
    compiled = lg.CompiledModel.from_file(str(path))
    out = compiled(X, Y)
    return {"reference": ReferenceBackend(model).run([X, Y]), "xla": [np.asarray(v) for v in XlaBackend(model).run([X, Y])],
            "compiled": [np.asarray(v) for v in (out if isinstance(out, tuple) else (out,))]}


def test_run_model_enters_the_first_subgraph_without_a_signature(package):
    (package / "caller.circle").write_bytes(_caller("parts/callee.circle"))
    for name, (total, double) in _all_ways(package / "caller.circle").items():
        np.testing.assert_array_equal(total, X + Y, err_msg=name)
        np.testing.assert_array_equal(double, X * 2, err_msg=name)


def test_run_model_takes_the_signatures_order(package):
    """Signature "minus" lists r before p: the op's first input is r, so the result is its second minus its first."""
    (package / "caller.circle").write_bytes(_caller("parts/callee.circle", "minus", outputs=1))
    for name, (result,) in _all_ways(package / "caller.circle").items():
        np.testing.assert_array_equal(result, Y - X, err_msg=name)


@pytest.mark.parametrize("location, signature, message", [
    ("../elsewhere.circle", "", "leaves the folder"),
    ("/abs/model.circle", "", "is absolute"),
    ("parts/npu.tvn", "", "NPU binary"),
    ("parts/missing.circle", "", "does not exist"),
    ("caller.circle", "", "calls itself"),
    ("parts/callee.circle", "nope", "has no signature 'nope' \\(signatures: 'first', 'minus'\\)"),
])
def test_run_model_refusals_name_the_op_and_the_reason(package, location, signature, message):
    (package / "caller.circle").write_bytes(_caller(location, signature))
    with pytest.raises(UnsupportedOpError, match=message):
        ReferenceBackend(read_model(str(package / "caller.circle"))).run([X, Y])


def test_run_model_in_a_model_from_memory_has_no_folder(package):
    with pytest.raises(UnsupportedOpError, match="was not read from a file"):
        ReferenceBackend(read_model(_caller("parts/callee.circle"))).run([X, Y])
