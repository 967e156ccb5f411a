"""Issue 3: zero-copy exchange with torch and cupy on the GPU, and the semantics of ``run_async``.

Zero-copy is shown by device pointers: the array litegpu holds for an input is the producer's memory
(``unsafe_buffer_pointer() == tensor.data_ptr()``), a write through the producer is seen by the next run,
and the consumer's view of an output buffer is the memory of the run's result.  How much ``run_async``
overlaps host work is measured by ``bench/gpu/bench_gpu.py run-async``, not asserted here (no timing asserts).

With ``LITEGPU_TEST_ACCELERATOR=cpu`` the same checks run on host memory and XLA CPU arrays: numpy and
jax always, torch when it is installed (its CPU tensors), cupy never (it needs a GPU).  Through IREE (a Vulkan
device) inputs are the same, outputs are IREE's device arrays: they chain on the device and read back, but
are not exported through DLPack (IREE's Vulkan memory is no DLPack device of torch or cupy).
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from gpu_support import compiled, expected_platform, jax_platform, on_iree, on_real_gpu, require_accelerator

pytestmark = pytest.mark.gpu
require_accelerator()

import litegpu as lg  # noqa: E402
from litegpu import TensorBuffer  # noqa: E402
from litegpu.ir.builder import ModelBuilder  # noqa: E402
from litegpu.ir.save import to_bytes  # noqa: E402

SHAPE = (4, 64, 64)


def affine_model() -> bytes:
    """y = x * 3 + 1: input and output of one shape, so a run's output can feed the next run."""
    b = ModelBuilder()
    x = b.input("x", SHAPE)
    scaled = b.tensor("scaled", SHAPE)
    y = b.tensor("y", SHAPE)
    b.op("MUL", [x, b.constant("three", np.array(3.0, np.float32))], [scaled])
    b.op("ADD", [scaled, b.constant("one", np.array(1.0, np.float32))], [y])
    b.output(y)
    return to_bytes(b.build())


def affine(x: np.ndarray) -> np.ndarray:
    return x * np.float32(3) + np.float32(1)


@pytest.fixture(scope="module")
def model():
    m = compiled(affine_model())
    assert m.accelerator == "GPU" and m.is_fully_accelerated()
    yield m
    m.close()


def sample(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=SHAPE).astype(np.float32)


# ---- producers and consumers over DLPack -----------------------------------------------------------

def held_pointer(buffer: TensorBuffer) -> int:
    """The address of the memory litegpu holds for this buffer."""
    data = buffer._data()
    if isinstance(data, np.ndarray):
        return data.__array_interface__["data"][0]
    if not hasattr(data, "unsafe_buffer_pointer"):  # IREE's device array: its buffer is its memory
        return id(data.view)
    return data.unsafe_buffer_pointer()


class Torch:
    def __init__(self):
        self.torch = pytest.importorskip("torch")
        self.device = "cuda" if on_real_gpu() else "cpu"
        if on_real_gpu() and not self.torch.cuda.is_available():
            pytest.skip("torch sees no CUDA device")

    def make(self, x):
        return self.torch.from_numpy(x).to(self.device)

    def pointer(self, t) -> int:
        return t.data_ptr()

    def fill(self, t, value: float) -> None:
        t.fill_(value)
        if on_real_gpu():
            self.torch.cuda.synchronize()  # torch's stream is not JAX's: finish the write before the run

    def consume(self, buffer):
        return self.torch.from_dlpack(buffer)

    def host(self, t) -> np.ndarray:
        return t.cpu().numpy()


class Cupy:
    def __init__(self):
        if not on_real_gpu():
            pytest.skip("cupy needs a GPU")
        self.cupy = pytest.importorskip("cupy")

    def make(self, x):
        return self.cupy.asarray(x)

    def pointer(self, a) -> int:
        return a.data.ptr

    def fill(self, a, value: float) -> None:
        a.fill(value)
        self.cupy.cuda.runtime.deviceSynchronize()

    def consume(self, buffer):
        return self.cupy.from_dlpack(buffer)

    def host(self, a) -> np.ndarray:
        return self.cupy.asnumpy(a)


class Jax:
    """jax arrays on the model's device: held as they are (immutable, so no write-through check)."""

    def __init__(self):
        from litegpu.backends.xla.device import device_for, jax_module

        self.jax = jax_module()
        self.device = device_for(jax_platform())

    def make(self, x):
        return self.jax.device_put(x, self.device)

    def pointer(self, a) -> int:
        return a.unsafe_buffer_pointer()

    fill = None

    def consume(self, buffer):
        return self.jax.dlpack.from_dlpack(buffer)

    def host(self, a) -> np.ndarray:
        return np.asarray(a)


class Numpy:
    """Host memory: zero-copy into the buffer; the result comes back to the host by ``read()``."""

    def make(self, x):
        return x.copy()

    def pointer(self, a) -> int:
        return a.__array_interface__["data"][0]

    def fill(self, a, value: float) -> None:
        a.fill(value)

    consume = None

    def host(self, a) -> np.ndarray:
        return a


PRODUCERS = {"torch": Torch, "cupy": Cupy, "jax": Jax, "numpy": Numpy}


@pytest.mark.parametrize("library", list(PRODUCERS))
def test_dlpack_input_is_held_without_copy_and_written_through(model, library):
    lib = PRODUCERS[library]()
    x = sample(1)
    source = lib.make(x)
    buffer = TensorBuffer.from_dlpack(source)
    assert held_pointer(buffer) == lib.pointer(source), "from_dlpack copied the input"
    if on_real_gpu() and library != "numpy":
        assert buffer.is_on_device and buffer.device.platform == "gpu"
    outputs = model.create_output_buffers(0)
    model.run_by_index(0, [buffer], outputs)
    np.testing.assert_allclose(outputs[0].read(), affine(x), rtol=1e-6)
    assert held_pointer(buffer) == lib.pointer(source), "the run replaced the input's memory"
    if lib.fill is not None:  # same memory: a write through the producer is what the next run reads
        lib.fill(source, 2.0)
        model.run_by_index(0, [buffer], outputs)
        np.testing.assert_array_equal(outputs[0].read(), np.full(SHAPE, 7.0, np.float32))


@pytest.mark.parametrize("library", ["torch", "cupy", "jax"])
def test_output_buffer_exports_the_result_without_copy(model, library):
    if on_iree():
        pytest.skip("IREE's results live in Vulkan memory, which torch, cupy and jax do not import through DLPack")
    lib = PRODUCERS[library]()
    x = sample(2)
    inputs, outputs = [TensorBuffer.from_dlpack(lib.make(x))], model.create_output_buffers(0)
    model.run_by_index(0, inputs, outputs)
    out = outputs[0]
    assert out.is_on_device and out.device.platform == expected_platform()
    view = lib.consume(out)
    assert lib.pointer(view) == held_pointer(out), "the consumer got a copy of the output"
    np.testing.assert_allclose(lib.host(view), affine(x), rtol=1e-6)


def test_outputs_feed_the_next_run_on_the_device(model):
    x = sample(3)
    first, second = model.create_output_buffers(0), model.create_output_buffers(0)
    model.run_by_index(0, [TensorBuffer(x)], first)
    pointer = held_pointer(first[0])
    model.run_by_index(0, first, second)
    assert first[0].is_on_device and held_pointer(first[0]) == pointer  # used in place, never via the host
    np.testing.assert_allclose(second[0].read(), affine(affine(x)), rtol=1e-6)


@pytest.mark.parametrize("library", ["torch", "cupy", "jax"])
def test_quick_api_and_write_take_dlpack_arrays_where_they_are(model, library):
    """``model(tensor)`` and ``buffer.write(tensor)`` with another library's array: read in place (a GPU
    tensor never goes through the host), and a write is a copy the producer's later changes do not reach."""
    lib = PRODUCERS[library]()
    x = sample(8)
    expected = affine(x)  # before ``fill``: a CPU torch tensor made from x shares x's memory
    source = lib.make(x)
    signature = model._signature(0)
    assert held_pointer(TensorBuffer(model._quick_input(signature, 0, source))) == lib.pointer(source)
    np.testing.assert_allclose(model(source), expected, rtol=1e-6)
    buffer = model.create_input_buffers(0)[0]
    buffer.write(source)
    if on_real_gpu():
        assert buffer.is_on_device and buffer.device.platform == "gpu"
    outputs = model.create_output_buffers(0)
    if lib.fill is not None:
        lib.fill(source, 2.0)
    model.run_by_index(0, [buffer], outputs)
    np.testing.assert_allclose(outputs[0].read(), expected, rtol=1e-6)


# ---- run_async semantics (no timing) ---------------------------------------------------------------

def test_run_async_returns_an_event_that_completes_the_outputs(model):
    x = sample(4)
    outputs = model.create_output_buffers(0)
    event = model.run_async(0, [TensorBuffer(x)], outputs)
    assert isinstance(event, lg.Event) and not event.is_host
    assert outputs[0].event is event
    assert event.wait(timeout=60) is True and event.is_ready()
    np.testing.assert_allclose(outputs[0].read(), affine(x), rtol=1e-6)


def test_chained_async_runs_need_no_wait_between_them(model):
    x = sample(5)
    buffers = [model.create_output_buffers(0) for _ in range(4)]
    events = [model.run_async(0, [TensorBuffer(x)], buffers[0])]
    for previous, current in zip(buffers, buffers[1:]):
        events.append(model.run_async(0, previous, current))  # reads the pending device result
    expected = x
    for _ in buffers:
        expected = affine(expected)
    np.testing.assert_allclose(buffers[-1][0].read(), expected, rtol=1e-5)
    assert all(e.wait(timeout=60) for e in events)


def test_a_run_waits_for_the_host_event_of_its_input(model):
    """An input whose data a host thread is still producing: the run reads the finished data."""
    x = sample(6)
    pending = TensorBuffer.create(SHAPE)

    def produce() -> None:
        time.sleep(0.2)  # the run is dispatched well before the data exists
        pending.write(x)

    pending.event = lg.Event.from_callable(produce)
    assert pending.event.is_host
    outputs = model.create_output_buffers(0)
    model.run_async(0, [pending], outputs).wait()
    np.testing.assert_allclose(outputs[0].read(), affine(x), rtol=1e-6)


def test_run_async_into_host_memory_lands_on_wait(model):
    x = sample(7)
    host = np.zeros(SHAPE, np.float32)
    out = TensorBuffer.create_from_host_memory(host)
    event = model.run_async(0, [TensorBuffer(x)], [out])
    assert event.wait(timeout=60)
    np.testing.assert_allclose(host, affine(x), rtol=1e-6)  # the caller's own array holds the result
