"""Differential testing: run a model with the official interpreter and with ours.

``check_op_model(model, inputs)`` writes ``model`` with our writer, runs it in
``ai_edge_litert``'s Interpreter (builtin reference kernels, so quantized
results are the semantics we must match), our reference backend and our XLA
backend, and asserts all agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from litegpu.backends import ReferenceBackend
from litegpu.ir import Model, read_model
from litegpu.ir.save import to_bytes

litert = pytest.importorskip("ai_edge_litert.interpreter")


def run_official(data: bytes, inputs: Sequence[np.ndarray], reference_kernels: bool = True) -> list[np.ndarray]:
    resolver = (litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES if reference_kernels
                else litert.OpResolverType.AUTO)
    interp = litert.Interpreter(model_content=data, experimental_op_resolver_type=resolver)
    details = interp.get_input_details()
    for d, x in zip(details, inputs):
        if tuple(d["shape"]) != tuple(np.shape(x)):
            interp.resize_tensor_input(d["index"], np.shape(x), strict=False)
    interp.allocate_tensors()
    for d, x in zip(interp.get_input_details(), inputs):
        interp.set_tensor(d["index"], np.asarray(x))
    interp.invoke()
    return [interp.get_tensor(d["index"]) for d in interp.get_output_details()]


def run_ours(model: Model, inputs: Sequence[np.ndarray], xla: bool) -> list[np.ndarray]:
    if xla:
        from litegpu.backends.xla.backend import XlaBackend

        return [np.asarray(y) for y in XlaBackend(model).run(list(inputs))]
    return ReferenceBackend(model).run(list(inputs))


def run_ours_builtin(model: Model, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """XLA on the CPU as ``CpuKernelMode.BUILTIN`` runs it: float ops in the builtin kernels' order too."""
    from litegpu.backends.xla.backend import XlaBackend
    from litegpu.backends.xla.state import XlaState
    from litegpu.backends.xla.device import device_for

    state = XlaState(model, device_for("cpu"), official_float_order=True)
    return [np.asarray(y) for y in XlaBackend(model, state=state).run(list(inputs))]


def same_bits(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Elementwise: equal bit for bit, or both NaN."""
    got, want = np.asarray(got), np.asarray(want)
    width = {2: np.int16, 4: np.int32, 8: np.int64}[want.dtype.itemsize]
    return (got.view(width) == want.view(width)) | (np.isnan(got) & np.isnan(want))


def assert_builtin_bits(model: Model, inputs: Sequence[np.ndarray], *, fast_rtol: float = 1e-5,
                        fast_atol: float | None = None, fast_exact: bool = False) -> np.ndarray:
    """The official builtin kernels' first output equals, bit for bit (NaNs alike), litegpu's numpy reference and
    XLA as ``CpuKernelMode.BUILTIN`` runs it; the fast XLA path (XLA's own orders) is within ``fast_rtol`` /
    ``fast_atol`` (default: 1e-5 of the largest output), or exact with ``fast_exact``.  Returns the official."""
    from litegpu.ir.save import to_bytes

    inputs = list(inputs)
    want = run_official(to_bytes(model), inputs)[0]
    for name, got in (("reference", run_ours(model, inputs, False)[0]), ("xla builtin", run_ours_builtin(model, inputs)[0])):
        same = same_bits(got, want)
        assert same.all(), (name, int((~same).sum()))
    fast = run_ours(model, inputs, True)[0]
    if fast_exact:
        assert same_bits(fast, want).all(), ("xla fast", int((~same_bits(fast, want)).sum()))
    else:
        finite = want[np.isfinite(want)]
        atol = fast_atol if fast_atol is not None else 1e-5 * float(np.abs(finite).max(initial=0))
        np.testing.assert_allclose(fast, want, rtol=fast_rtol, atol=atol, equal_nan=True)
    return want


def assert_close(actual: np.ndarray, expected: np.ndarray, rtol: float, atol: float, what: str) -> None:
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != official {expected.shape}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != official {expected.dtype}"
    if expected.dtype.kind in "iub":
        diff = np.abs(actual.astype(np.int64) - expected.astype(np.int64))
        assert diff.max(initial=0) <= atol, f"{what}: integer results differ by up to {diff.max()} units"
    else:
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=what, equal_nan=True)


def check_op_model(model: Model, inputs: Sequence[np.ndarray], *, rtol: float = 1e-5, atol: float = 1e-5,
                   int_atol: int = 0, xla: bool = True) -> list[np.ndarray]:
    """Assert official == our reference == our XLA on ``inputs``; returns the official outputs."""
    data = to_bytes(model)
    model = read_model(data)  # what we test is what the official runtime reads
    expected = run_official(data, inputs)
    backends = [("reference", False)] + ([("xla", True)] if xla else [])
    for name, use_xla in backends:
        got = run_ours(model, inputs, use_xla)
        assert len(got) == len(expected)
        for i, (g, e) in enumerate(zip(got, expected)):
            tol = int_atol if np.asarray(e).dtype.kind in "iub" else atol
            assert_close(g, e, rtol, tol, f"{name} output {i}")
    return expected


def random_input(shape: Sequence[int], dtype: str | np.dtype = np.float32, seed: int = 0,
                 low: float = -3.0, high: float = 3.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, int(low * 10)), min(info.max, int(high * 10)) + 1, size=shape).astype(dtype)
    return rng.uniform(low, high, size=shape).astype(dtype)


def one_op_model(op: str, inputs: Sequence, outputs: Sequence, *, input_quant=None, output_quant=None,
                 version: int = 1, **options):
    """A model of one op, and the arrays to feed it.

    ``inputs``: an array (a model input), ``("const", array)`` (a constant) or None (an omitted optional
    input).  ``input_quant`` maps input positions to quantization (a mapping or a sequence).
    ``outputs``: ``(shape, dtype)`` or ``(shape, dtype, quantization)``; ``output_quant`` is the default.
    """
    from litegpu.ir.builder import ModelBuilder
    from litegpu.ir.dtypes import from_numpy

    quant = dict(enumerate(input_quant)) if isinstance(input_quant, (list, tuple)) else dict(input_quant or {})
    b = ModelBuilder()
    ids, feeds = [], []
    for k, a in enumerate(inputs):
        if a is None:
            ids.append(-1)
        elif isinstance(a, tuple) and a[0] == "const":
            ids.append(b.constant(f"c{k}", a[1], quantization=quant.get(k)))
        else:
            a = np.asarray(a)
            ids.append(b.input(f"x{k}", a.shape, from_numpy(a.dtype), quantization=quant.get(k)))
            feeds.append(a)
    outs = [b.tensor(f"y{k}", o[0], o[1], quantization=o[2] if len(o) > 2 else output_quant)
            for k, o in enumerate(outputs)]
    b.op(op, ids, outs, version=version, **options)
    b.output(*outs)
    return b.build(), feeds


def check_built(built) -> list[np.ndarray]:
    """``check_op_model`` on a ``(model, feeds)`` pair from ``one_op_model``."""
    model, feeds = built
    return check_op_model(model, feeds)


def assert_reference_rejects(built, match: str) -> None:
    """Our reference backend refuses the ``(model, feeds)`` pair with a LiteGpuError matching ``match``."""
    from litegpu.errors import LiteGpuError

    model, feeds = built
    with pytest.raises(LiteGpuError, match=match):
        ReferenceBackend(model).run(feeds)


def const(value, dtype=np.int32):
    """A constant input of ``one_op_model``."""
    return ("const", np.asarray(value, dtype))


def full_range(shape, dtype, seed=0):
    """Random integers covering the whole range of ``dtype`` (both ends included)."""
    info = np.iinfo(dtype)
    return np.random.default_rng(seed).integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)


def check_consecutive_runs(model: Model, inputs_per_run, rtol: float = 1e-5, atol: float = 1e-5,
                           atol_of_magnitude: bool = False) -> None:
    """Official interpreter, our reference and our XLA backends over consecutive runs of one instance:
    state (variable tensors, resource variables) carries from one run to the next.  With
    ``atol_of_magnitude`` the absolute tolerance is ``atol`` times the expected output's magnitude
    (at least 1), for float results of integer products."""
    from litegpu.backends.xla.backend import XlaBackend

    data = to_bytes(model)
    interp = litert.Interpreter(model_content=data)
    interp.allocate_tensors()
    expected = []
    for inputs in inputs_per_run:
        for d, x in zip(interp.get_input_details(), inputs):
            interp.set_tensor(d["index"], x)
        interp.invoke()
        expected.append([interp.get_tensor(d["index"]).copy() for d in interp.get_output_details()])
    ours = read_model(data)
    for name, backend in [("reference", ReferenceBackend(ours)), ("xla", XlaBackend(ours))]:
        for run, (inputs, want) in enumerate(zip(inputs_per_run, expected)):
            got = backend.run(list(inputs))
            assert len(got) == len(want)
            for i, (g, w) in enumerate(zip(got, want)):
                tolerance = atol * max(1.0, float(np.abs(w).max())) if atol_of_magnitude else atol
                assert_close(np.asarray(g), w, rtol, tolerance, f"{name} run {run} output {i}")


def load_bench_module(name: str):
    """A script of ``bench/`` (e.g. the decoder generator), found in whichever area folder holds it
    (``bench/models/decoder_model.py``), imported by path: bench is not a package."""
    import importlib.util
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parents[1] / "bench"
    found = [*bench.glob(f"{name}.py"), *(p for p in bench.glob(f"*/{name}.py") if not p.parent.name.startswith("."))]
    if len(found) != 1:
        raise LookupError(f"bench script {name!r}: {'found twice: ' + ', '.join(map(str, found)) if found else 'none'}"
                          f" under {bench}")
    spec = importlib.util.spec_from_file_location(name, found[0])
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module
