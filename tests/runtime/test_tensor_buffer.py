"""TensorBuffer: shape and dtype kept, no silent copies, strict writes, DLPack without copies."""

import numpy as np
import pytest

import litegpu as lg
from litegpu import TensorBuffer


@pytest.mark.parametrize("shape,dtype", [((), np.float32), ((5,), np.int8), ((2, 3), np.float32),
                                         ((1, 2, 3, 4), np.int32), ((2, 2), np.float64), ((3,), np.bool_),
                                         ((2, 1, 3), np.int64), ((7,), np.uint8)])
def test_create_from_host_memory_keeps_shape_dtype_and_memory(shape, dtype):
    array = np.zeros(shape, dtype)
    buf = TensorBuffer.create_from_host_memory(array)
    assert buf.shape == shape and buf.dtype == dtype
    assert buf.get_tensor_details() == {"dtype": np.dtype(dtype).name, "shape": list(shape)}
    assert np.shares_memory(buf._data(), array)
    np.testing.assert_array_equal(buf.read(), array)


def test_unaligned_host_memory_is_not_copied():
    raw = np.zeros(17, np.float32)
    unaligned = raw[1:]  # 4 bytes past an aligned start: the official package copies this silently
    buf = TensorBuffer.create_from_host_memory(unaligned)
    buf.write(np.arange(16, dtype=np.float32))
    np.testing.assert_array_equal(raw[1:], np.arange(16))


def test_write_goes_into_the_wrapped_memory_and_read_returns_a_copy():
    array = np.zeros((2, 2), np.float32)
    buf = TensorBuffer.create_from_host_memory(array)
    buf.write(np.ones((2, 2), np.float32))
    np.testing.assert_array_equal(array, 1)
    out = buf.read()
    out[0, 0] = 7
    assert array[0, 0] == 1


@pytest.mark.parametrize("data,match", [
    (np.ones((2, 2), np.float64), "float64"),        # wrong dtype: the official package reinterprets bytes
    (np.ones((2, 2), np.int32), "int32"),
    (np.ones((3,), np.float32), "number of elements"),  # fewer elements: the official package accepts this
    (np.ones((4,), np.float32), "rank"),
    (np.ones((1, 4), np.float32), "dimensions"),
])
def test_bad_writes_raise_naming_the_tensor_and_expectation(data, match):
    buf = TensorBuffer(np.zeros((2, 2), np.float32), name="image")
    with pytest.raises(lg.TensorBufferError, match=match) as info:
        buf.write(data)
    assert "'image'" in str(info.value) and "[2, 2]" in str(info.value)


def test_python_lists_are_converted_to_the_buffer_dtype():
    buf = TensorBuffer.create((2,), np.int32)
    buf.write([3, 4])
    assert buf.read().dtype == np.int32 and buf.read().tolist() == [3, 4]


def test_read_with_count_and_dtype_for_compatibility():
    buf = TensorBuffer.create_from_host_memory(np.arange(6, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal(buf.read(6, np.float32), np.arange(6))
    np.testing.assert_array_equal(buf.read(4, np.float32), np.arange(4))
    with pytest.raises(lg.TensorBufferError, match="as int8"):
        buf.read(6, np.int8)
    with pytest.raises(lg.TensorBufferError, match="cannot read 7"):
        buf.read(7, np.float32)


def test_create_from_host_memory_refuses_non_numpy():
    with pytest.raises(lg.TensorBufferError, match="from_dlpack"):
        TensorBuffer.create_from_host_memory([1.0, 2.0])


def test_numpy_dlpack_round_trip_without_copy():
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    buf = TensorBuffer.from_dlpack(array)
    assert np.shares_memory(buf._data(), array)
    back = np.from_dlpack(buf)
    assert np.shares_memory(back, array) and back.shape == (3, 4)
    assert buf.__dlpack_device__()[0] == 1


def test_jax_arrays_are_held_without_copy_and_exported_by_dlpack():
    jnp = pytest.importorskip("jax.numpy")
    x = jnp.arange(8, dtype=jnp.float32).reshape(2, 4)
    buf = TensorBuffer.from_dlpack(x)
    assert buf._data() is x and buf.is_on_device
    exported = np.from_dlpack(buf)  # jax CPU arrays export their memory
    assert exported.__array_interface__["data"][0] == x.unsafe_buffer_pointer()
    np.testing.assert_array_equal(buf.read(), np.arange(8).reshape(2, 4))


def test_torch_zero_copy():
    torch = pytest.importorskip("torch")
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    buf = TensorBuffer.from_dlpack(t)
    assert buf._data().__array_interface__["data"][0] == t.data_ptr()
    assert buf.shape == (2, 3)


def test_cupy_zero_copy():
    cupy = pytest.importorskip("cupy")
    x = cupy.arange(6, dtype=cupy.float32)
    buf = TensorBuffer.from_dlpack(x)
    assert buf.is_on_device and buf._data().unsafe_buffer_pointer() == x.data.ptr


def test_from_dlpack_refuses_objects_without_dlpack():
    with pytest.raises(lg.TensorBufferError, match="__dlpack__"):
        TensorBuffer.from_dlpack(object())


def test_destroyed_buffer_raises_closed_error():
    buf = TensorBuffer.create((2,))
    buf.destroy()
    with pytest.raises(lg.ClosedError):
        buf.read()
    with pytest.raises(lg.ClosedError):
        buf.write(np.zeros(2, np.float32))


# ---- writes from other libraries' arrays (torch, cupy...) through DLPack ---------------------------

class ForeignArray:
    """Another library's array as litegpu sees a torch tensor: DLPack, and a dtype numpy does not know."""

    def __init__(self, array, device=None):
        self._array, self._device = array, device
        self.shape, self.dtype = array.shape, f"foreign.{array.dtype.name}"

    def __dlpack__(self, *args, **kwargs):
        return self._array.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._device or self._array.__dlpack_device__()


@pytest.mark.parametrize("wraps_caller_memory", [False, True])
def test_write_takes_a_dlpack_array_and_copies_it(wraps_caller_memory):
    target = np.zeros((2, 3), np.float32)
    buf = TensorBuffer.create_from_host_memory(target) if wraps_caller_memory else TensorBuffer.create((2, 3))
    source = np.arange(6, dtype=np.float32).reshape(2, 3)
    buf.write(ForeignArray(source))
    source[0, 0] = 99  # a write copies: later changes to the source are not the buffer's
    np.testing.assert_array_equal(buf.read(), np.arange(6).reshape(2, 3))
    if wraps_caller_memory:
        np.testing.assert_array_equal(target, np.arange(6).reshape(2, 3))


@pytest.mark.parametrize("data,match", [
    (np.ones((2, 2), np.float64), "cannot write float64"),
    (np.ones((2, 2), np.int32), "cannot write int32"),
    (np.ones((4,), np.float32), "rank"),
])
def test_bad_dlpack_writes_raise_tensor_buffer_errors(data, match):
    buf = TensorBuffer(np.zeros((2, 2), np.float32), name="image")
    with pytest.raises(lg.TensorBufferError, match=match):
        buf.write(ForeignArray(data))


def test_a_dlpack_array_on_a_device_jax_cannot_reach_is_a_clear_error():
    from litegpu.backends.xla.device import available_platforms

    if "gpu" in available_platforms():
        pytest.skip("JAX sees a GPU here: the array below would claim to live on it")
    buf = TensorBuffer.create((2,), name="x")
    cuda = (2, 0)  # kDLCUDA, device 0
    with pytest.raises(lg.TensorBufferError, match=r"cannot write ForeignArray into tensor 'x'.*DLPack device 2"):
        buf.write(ForeignArray(np.ones(2, np.float32), device=cuda))


def test_write_of_a_torch_tensor():
    torch = pytest.importorskip("torch")
    buf = TensorBuffer.create((2, 3))
    buf.write(torch.arange(6, dtype=torch.float32).reshape(2, 3))
    np.testing.assert_array_equal(buf.read(), np.arange(6).reshape(2, 3))
    with pytest.raises(lg.TensorBufferError, match="float64"):
        buf.write(torch.zeros((2, 3), dtype=torch.float64))
