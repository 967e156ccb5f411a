"""The memory guard (issue 18): a run that needs more memory than the process can still get ends in an
``OutOfMemoryError`` (a ``LiteGpuError``) naming the model, signature and bytes, never in an abort."""

import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import litegpu as lg
from litegpu.backends import memory
from litegpu.errors import LiteGpuError, OutOfMemoryError
from litegpu.ir.builder import ModelBuilder

BUILTIN = lg.Options(lg.HardwareAccelerator.CPU, cpu_options=lg.CpuOptions(kernel_mode=lg.CpuKernelMode.BUILTIN))


def outer_product_model(n: int):
    """x [n, 1] times y [1, n] -> an [n, n] outer product o; tanh(o) @ o^T (another [n, n], which XLA
    materializes), summed to one number: small inputs and output, n^2 float32 of temporaries."""
    b = ModelBuilder()
    x, y = b.input("x", (n, 1)), b.input("y", (1, n))
    outer, tanh, product = b.tensor("outer", (n, n)), b.tensor("tanh", (n, n)), b.tensor("product", (n, n))
    total = b.tensor("total", ())
    b.op("MUL", [x, y], [outer])
    b.op("TANH", [outer], [tanh])
    b.op("BATCH_MATMUL", [tanh, outer], [product], adj_y=True)
    b.op("SUM", [product, b.constant("axes", np.array([0, 1], np.int32))], [total], keep_dims=False)
    b.output(total)
    b.signature("big", inputs={"x": x, "y": y}, outputs={"total": total})
    return b.build()


def feeds(n: int) -> dict:
    return {"x": np.linspace(-1, 1, n, dtype=np.float32)[:, None], "y": np.full((1, n), 0.25, np.float32)}


def expected(n: int) -> float:
    f = feeds(n)
    outer = f["x"].astype(np.float64) @ f["y"]
    return float((np.tanh(outer) @ outer.T).sum())


def test_the_estimate_counts_temporaries_outputs_and_host_arguments():
    from types import SimpleNamespace

    stats = SimpleNamespace(temp_size_in_bytes=1000, output_size_in_bytes=300, alias_size_in_bytes=100,
                            argument_size_in_bytes=10**9, generated_code_size_in_bytes=0)
    compiled = SimpleNamespace(memory_analysis=lambda: stats)
    # the arguments are already allocated (weights at load): only the host inputs the call copies in count
    assert memory.needed_bytes(compiled, host_argument_bytes=50) == 1000 + 200 + 50
    assert memory.needed_bytes(SimpleNamespace(memory_analysis=lambda: None)) is None


def test_the_estimate_of_a_compiled_model_is_its_intermediate():
    from litegpu.backends.xla.backend import XlaBackend

    n = 512
    backend = XlaBackend(outer_product_model(n), 0, "cpu")
    args = list(feeds(n).values())
    needed = memory.needed_bytes(backend._program.lower(backend.params, backend.variables, args).compile())
    assert n * n * 4 <= needed <= 1.5 * n * n * 4   # the [n, n] float32 product, little else


def test_available_memory_is_bounded_by_the_address_space_limit(monkeypatch):
    import resource

    room, bound = memory.host_available_bytes()
    assert 0 < room
    monkeypatch.setattr(resource, "getrlimit", lambda kind: (memory._mapped_bytes() + (5 << 20), -1))
    room, bound = memory.host_available_bytes()
    assert room <= 5 << 20 and "RLIMIT_AS" in bound


def test_a_run_that_cannot_fit_is_refused_before_it_runs(monkeypatch):
    n = 256
    model = lg.CompiledModel.from_model(outer_product_model(n), options=BUILTIN)
    monkeypatch.setattr(memory, "host_available_bytes", lambda: (n * n, "a test's limit"))
    with pytest.raises(OutOfMemoryError, match=r"signature 'big'.*needs .* bytes.*a test's limit") as caught:
        model.run(feeds(n), "big")
    assert isinstance(caught.value, LiteGpuError) and isinstance(caught.value, MemoryError)
    monkeypatch.setenv("LITEGPU_MEMORY_GUARD", "0")  # the guard off: the same run goes through
    assert float(model.run(feeds(n), "big")["total"]) == pytest.approx(expected(n), rel=1e-4, abs=1e-3)


def test_models_that_fit_are_not_refused():
    n = 256
    model = lg.CompiledModel.from_model(outer_product_model(n), options=BUILTIN)
    assert float(model.run(feeds(n), "big")["total"]) == pytest.approx(expected(n), rel=1e-4, abs=1e-3)


def test_xla_resource_exhausted_becomes_out_of_memory():
    error = RuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 3200000000 bytes.")
    assert memory.is_out_of_memory(error) and memory.is_out_of_memory(MemoryError())
    assert not memory.is_out_of_memory(RuntimeError("INVALID_ARGUMENT: bad shape"))
    converted = memory.out_of_memory(error, "m.tflite: signature 'big'", "running")
    assert isinstance(converted, OutOfMemoryError) and "m.tflite: signature 'big' ran out of memory" in str(converted)


CHILD = textwrap.dedent("""
    import resource, sys
    limit = 3 << 30
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    sys.path.insert(0, sys.argv[1])
    import litegpu as lg
    from backends.test_memory_guard import BUILTIN, feeds, outer_product_model
    n = 30000  # an [n, n] float32 temporary: 3.6 GB, more than the whole address space allowed
    model = lg.CompiledModel.from_model(outer_product_model(n), options=BUILTIN)
    try:
        model.run(feeds(n), "big")
    except lg.LiteGpuError as e:
        print(type(e).__name__ + ": " + str(e))
        sys.exit(0)
    sys.exit(5)
""")


@pytest.mark.parametrize("guard", ["1", "0"])
def test_a_model_past_the_address_space_limit_ends_in_a_clear_error(guard):
    """In a process limited to 3 GB of address space: with the guard, the run is refused with the bytes it
    needs; without it, XLA's failed allocation still comes back as the same error, not an abort."""
    import os
    from pathlib import Path

    env = {**os.environ, "LITEGPU_MEMORY_GUARD": guard}
    done = subprocess.run([sys.executable, "-c", CHILD, str(Path(__file__).parents[1])], capture_output=True,
                          text=True, timeout=300, env=env)
    assert done.returncode == 0, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    assert done.stdout.startswith("OutOfMemoryError: <memory>: signature 'big'"), done.stdout
    if guard == "1":
        # at least one [n, n] float32 temporary (3.35 GiB); BUILTIN mode keeps every op's output (the builtin
        # kernels' rounding), so XLA holds several
        needs = re.search(r"needs (\d+\.\d+) GiB", done.stdout)
        assert needs and float(needs.group(1)) >= 3.35 and "RLIMIT_AS" in done.stdout, done.stdout
    else:
        assert "ran out of memory while running: RESOURCE_EXHAUSTED" in done.stdout, done.stdout
