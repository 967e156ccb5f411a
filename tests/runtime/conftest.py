"""Small models made with our builder for the runtime tests (ops that exist: ADD, SUB, MUL, CONV_2D)."""

import numpy as np
import pytest

from litegpu.ir.builder import ModelBuilder
from litegpu.ir.save import to_bytes

TWO_SIGNATURES = "two_signatures_float32.tflite"


def add_model(dynamic_batch: bool = True) -> bytes:
    """z = x + y without SignatureDef; x's batch is -1 in its shape signature."""
    b = ModelBuilder()
    x = b.input("x", (1, 4), shape_signature=(-1, 4) if dynamic_batch else None)
    y = b.input("y", (1, 4))
    z = b.tensor("z", (1, 4))
    b.op("ADD", [x, y], [z])
    b.output(z)
    return to_bytes(b.build())


def two_signature_model() -> bytes:
    """Signature "sum" (subgraph 0): s = a + b, d = a - b; signature "scale" (subgraph 1): p = u * 3."""
    b = ModelBuilder()
    a = b.input("a", (2, 3))
    bb = b.input("b", (2, 3))
    s = b.tensor("s", (2, 3))
    d = b.tensor("d", (2, 3))
    b.op("ADD", [a, bb], [s])
    b.op("SUB", [a, bb], [d])
    b.output(s, d)
    b.signature("sum", inputs={"lhs": a, "rhs": bb}, outputs={"total": s, "diff": d})
    sg = b.subgraph("scale")
    u = sg.input("u", (4,))
    three = sg.constant("three", np.full((4,), 3.0, np.float32))
    p = sg.tensor("p", (4,))
    sg.op("MUL", [u, three], [p])
    sg.output(p)
    b.signature("scale", sg, inputs={"u": u}, outputs={"p": p})
    return to_bytes(b.build())


def conv_model() -> bytes:
    """A 3x3 SAME conv with bias and RELU6, weights large enough to be device parameters."""
    rng = np.random.default_rng(0)
    b = ModelBuilder()
    x = b.input("image", (1, 8, 8, 16))
    w = b.constant("w", rng.normal(size=(8, 3, 3, 16)).astype(np.float32) * 0.2)
    bias = b.constant("bias", rng.normal(size=(8,)).astype(np.float32))
    y = b.tensor("features", (1, 8, 8, 8))
    b.op("CONV_2D", [x, w, bias], [y], padding="SAME", stride_w=1, stride_h=1, fused_activation_function="RELU6")
    b.output(y)
    return to_bytes(b.build())


@pytest.fixture(scope="session")
def add_bytes() -> bytes:
    return add_model()


@pytest.fixture(scope="session")
def two_sig_bytes() -> bytes:
    return two_signature_model()


@pytest.fixture(scope="session")
def conv_bytes() -> bytes:
    return conv_model()


@pytest.fixture
def two_signatures_path(shared_models):
    """The real two-signature model, skipped until every op it uses is registered."""
    from litegpu import Model, UnsupportedOpError

    path = shared_models / TWO_SIGNATURES
    try:
        Model.from_file(path).plan()
    except UnsupportedOpError as e:
        pytest.skip(f"{TWO_SIGNATURES} needs ops not registered yet: {e}")
    return path


def official_compiled_model(data: bytes):
    cm = pytest.importorskip("ai_edge_litert.compiled_model")
    return cm.CompiledModel.from_buffer(data)
