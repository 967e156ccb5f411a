"""TensorBuffer: one tensor's data with its shape and dtype, on the host or on a device.

Unlike the official package's buffers (always 1-D, copied when not 64-byte
aligned, reinterpreting bytes of the wrong type), a litegpu buffer keeps the
array's shape and dtype, never copies silently, and refuses writes of the
wrong size, dtype or rank with a ``TensorBufferError``.

A buffer holds either a numpy array (host memory, possibly the caller's own)
or a device array (a ``jax.Array``): the outputs of a run stay where the run
left them, so feeding them to the next run never goes through host memory.
``read()`` is the one place where device data is copied to the host.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..backends.device_arrays import is_device_array as _is_device_array
from ..errors import ClosedError, TensorBufferError

_DLPACK_CPU = 1


def _is_engine_device_array(value: Any) -> bool:
    """A run's output that an engine other than JAX keeps on its device (``backends.iree.engine.IreeArray``: Vulkan
    or Metal memory); such an array says so itself, and reads back through ``__array__``."""
    return getattr(type(value), "litegpu_device_array", False) is True


def _dtype_name(dtype: Any) -> str:
    return np.dtype(dtype).name


def is_foreign_dlpack(value: Any) -> bool:
    """An array of another library (torch, cupy...) that only DLPack tells us how to read:
    its ``dtype`` is not one numpy understands, so it must be imported before it is checked."""
    return (hasattr(value, "__dlpack__") and not isinstance(value, (np.ndarray, TensorBuffer))
            and not _is_device_array(value))


def as_array(value: Any, what: str = "the data") -> Any:
    """``value`` as the numpy array (host memory) or jax array (device memory) it shares memory with,
    imported through DLPack without a copy when it is another library's array (``TensorBuffer.from_dlpack``:
    a GPU tensor stays on the GPU).  Anything else is returned as it is."""
    if not is_foreign_dlpack(value):
        return value
    try:
        return TensorBuffer.from_dlpack(value)._data()
    except TensorBufferError as e:
        raise TensorBufferError(f"{what}: {e}") from e


class TensorBuffer:
    """Data of one tensor.  Thread-safe for concurrent reads; a write or a run replacing the data
    takes the buffer's lock.  ``event`` is the completion of the run that produces the data, if any;
    a run that takes this buffer as input waits on it (device-ordered JAX work needs no host wait).
    """

    def __init__(self, array: Any, *, name: str | None = None, owns_host_memory: bool = True):
        if not (isinstance(array, np.ndarray) or _is_device_array(array)):
            raise TensorBufferError(f"a TensorBuffer holds a numpy or jax array, not {type(array).__name__}")
        self._array = array
        self._shape = tuple(int(d) for d in array.shape)
        self._dtype = np.dtype(array.dtype)
        self._name = name
        # False when the memory belongs to the caller (create_from_host_memory): results are copied in.
        self._owns_host_memory = owns_host_memory
        self._pending: Any = None    # a device result not yet copied into the caller's host memory
        self._from_run = False       # _array is a run's output that only this buffer holds (see _consumable)
        self.event: Any = None
        self._lock = threading.RLock()
        self._closed = False

    # ---- creation ---------------------------------------------------------------------------
    @classmethod
    def create_from_host_memory(cls, data_array: np.ndarray) -> "TensorBuffer":
        """Wrap ``data_array`` without copying; shape and dtype are the array's (any rank)."""
        if not isinstance(data_array, np.ndarray):
            raise TensorBufferError(f"create_from_host_memory takes a numpy array, got {type(data_array).__name__} "
                                    "(use TensorBuffer.from_dlpack for torch, cupy or jax arrays)")
        return cls(data_array, owns_host_memory=False)

    @classmethod
    def create(cls, shape: Sequence[int], dtype: Any = np.float32, name: str | None = None) -> "TensorBuffer":
        """A zero-filled host buffer."""
        return cls(np.zeros(tuple(shape), np.dtype(dtype)), name=name)

    @classmethod
    def from_dlpack(cls, obj: Any) -> "TensorBuffer":
        """Wrap any DLPack array (numpy, jax, torch, cupy) without a copy; device arrays stay on their device."""
        if isinstance(obj, np.ndarray) or _is_device_array(obj):
            return cls(obj, owns_host_memory=not isinstance(obj, np.ndarray))
        if not hasattr(obj, "__dlpack__"):
            raise TensorBufferError(f"from_dlpack needs an object with __dlpack__, got {type(obj).__name__}")
        device_type = obj.__dlpack_device__()[0] if hasattr(obj, "__dlpack_device__") else _DLPACK_CPU
        if int(device_type) == _DLPACK_CPU:
            try:
                return cls(np.from_dlpack(obj), owns_host_memory=False)
            except (TypeError, BufferError, RuntimeError, ValueError) as e:
                raise TensorBufferError(f"cannot wrap {type(obj).__name__} via DLPack: {e}") from e
        from ..backends.device_arrays import jax_module

        jax = jax_module()
        try:
            return cls(jax.dlpack.from_dlpack(obj), owns_host_memory=True)
        except Exception as e:
            raise TensorBufferError(f"cannot wrap {type(obj).__name__} (DLPack device {device_type}) without a "
                                    f"copy: {type(e).__name__}: {e}") from e

    # ---- what it holds ----------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def name(self) -> str | None:
        return self._name

    @property
    def is_on_device(self) -> bool:
        """True when the data is a device array (a run's output), not host memory."""
        array = self._current()
        return _is_device_array(array) or _is_engine_device_array(array)

    @property
    def device(self) -> Any:
        array = self._current()
        return next(iter(array.devices())) if _is_device_array(array) or _is_engine_device_array(array) else "cpu"

    def get_tensor_details(self) -> dict[str, Any]:
        return {"dtype": _dtype_name(self._dtype), "shape": list(self._shape)}

    def _what(self) -> str:
        return f"tensor {self._name!r}" if self._name else "TensorBuffer"

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"{self._what()} was destroyed")

    def _current(self) -> Any:
        self._check_open()
        array = self._pending if self._pending is not None else self._array
        if self._from_run and getattr(array, "is_deleted", None) is not None and array.is_deleted():
            # consumed by a run that took this buffer as input and output (_consumable) and then failed
            raise TensorBufferError(f"{self._what()} has no data: the run that was to update it in place failed "
                                    "after taking it; write new data (a KV cache: start the sequence again)")
        return array

    # ---- data -------------------------------------------------------------------------------
    def write(self, data_array: Any) -> None:
        """Copy ``data_array`` in; it must have the buffer's dtype and shape (python lists/scalars are converted).
        Any DLPack array (torch, cupy, jax) is accepted; one in device memory is copied on its device."""
        self._check_open()
        foreign = is_foreign_dlpack(data_array)
        data_array = as_array(data_array, f"cannot write {type(data_array).__name__} into {self._what()}")
        if not (hasattr(data_array, "dtype") and hasattr(data_array, "shape")):
            data_array = np.asarray(data_array, dtype=self._dtype)
        dtype, shape = np.dtype(data_array.dtype), tuple(int(d) for d in data_array.shape)
        if dtype != self._dtype:
            raise TensorBufferError(f"{self._what()} holds {_dtype_name(self._dtype)} {list(self._shape)}; "
                                    f"cannot write {_dtype_name(dtype)} data (cast it first)")
        if shape != self._shape:
            size = int(np.prod(shape))
            detail = ("a different number of elements" if size != int(np.prod(self._shape)) else
                      "a different rank" if len(shape) != len(self._shape) else "different dimensions")
            raise TensorBufferError(f"{self._what()} holds {_dtype_name(self._dtype)} {list(self._shape)} "
                                    f"({int(np.prod(self._shape))} elements); cannot write shape {list(shape)} "
                                    f"({size} elements): {detail}")
        if self.event is not None and not self.event.is_host:  # a host producer may be the writer itself
            self.wait()
        with self._lock:
            if _is_device_array(data_array):
                if self._owns_host_memory:
                    # A jax array is immutable: holding it is a copy-free write.  One imported from torch or
                    # cupy shares their memory, which they may change once write returns: copied on its
                    # device, and the copy finished first.
                    self._array = data_array.copy().block_until_ready() if foreign else data_array
                else:
                    np.copyto(self._array, np.asarray(data_array))
            elif isinstance(self._array, np.ndarray) and self._array.flags.writeable:
                np.copyto(self._array, data_array)
            else:
                self._array = np.array(data_array, copy=True)
            self._pending = None
            self._from_run = False  # the caller's jax array may be held here: never handed to a run to consume

    def read(self, num_elements: int | None = None, output_dtype: Any = None) -> np.ndarray:
        """A host copy with the buffer's shape and dtype.

        ``read(num_elements, dtype)`` is the official package's form: a 1-D array of the first
        ``num_elements`` values; ``dtype`` must be the buffer's (bytes are never reinterpreted).
        """
        if self.event is not None or self._pending is not None:  # a run still to deliver the data
            self.wait()
        array = self._array
        if type(array) is not np.ndarray or self._closed or self._pending is not None:
            array = self._current()  # device data, or a destroyed buffer: checked there
        array = np.array(array, copy=True)
        if num_elements is None and output_dtype is None:
            return array
        if output_dtype is not None and np.dtype(output_dtype) != self._dtype:
            raise TensorBufferError(f"{self._what()} holds {_dtype_name(self._dtype)}; cannot read it as "
                                    f"{_dtype_name(output_dtype)}")
        total = array.size
        n = total if num_elements is None else int(num_elements)
        if not 0 <= n <= total:
            raise TensorBufferError(f"{self._what()} holds {total} elements; cannot read {n}")
        return array.reshape(-1)[:n]

    def numpy(self) -> np.ndarray:
        return self.read()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the run producing this buffer's data, if any."""
        event = self.event
        if event is not None and not event.wait(timeout):
            return False
        self._flush()
        return True

    def _flush(self) -> None:
        with self._lock:
            if self._pending is not None and not self._owns_host_memory:
                np.copyto(self._array, np.asarray(self._pending))
                self._pending = None

    # ---- used by runs -----------------------------------------------------------------------
    def _data(self) -> Any:
        """What a run reads: the device array when there is one, else the host array (no copy)."""
        return self._current()

    def _consumable(self) -> bool:
        """Whether a run that writes its result into this same buffer may consume the data (XLA reuses an
        input's memory for an output: a KV cache updated in place instead of held twice).  A device array
        only when an earlier run put it here (one the caller wrote may be held elsewhere too; a host view
        of it, from ``read`` on the CPU or DLPack, keeps it alive: XLA then copies instead); a host array
        is never written, the run consumes a device copy of it."""
        with self._lock:
            return (not self._closed and self._owns_host_memory and self._pending is None
                    and (self._from_run or not _is_device_array(self._array)))

    def _set_result(self, value: Any, event: Any = None) -> None:
        """Store a run's output: held as the device array, or copied into the caller's memory later."""
        if self._closed:
            self._check_open()
        with self._lock:
            # a numpy result (a host engine's) has its shape as a tuple of ints already
            host = type(value) is np.ndarray
            shape = value.shape if host else tuple(int(d) for d in value.shape)
            if self._owns_host_memory:
                self._array, self._shape, self._dtype = value, shape, value.dtype if host else np.dtype(value.dtype)
                self._pending = None
                self._from_run = not host and _is_device_array(value)
            else:
                if shape != self._shape or np.dtype(value.dtype) != self._dtype:
                    raise TensorBufferError(
                        f"{self._what()} wraps host memory of {_dtype_name(self._dtype)} {list(self._shape)}, "
                        f"but the run produced {_dtype_name(value.dtype)} {list(shape)}")
                self._pending = value
            self.event = event
        if event is None and self._pending is not None:
            self._flush()

    # ---- DLPack -----------------------------------------------------------------------------
    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        self.wait()
        return self._current().__dlpack__(*args, **kwargs)

    def __dlpack_device__(self) -> tuple:
        return self._current().__dlpack_device__()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        array = self.read()
        return array if dtype is None else array.astype(dtype)

    # ---- lifetime ---------------------------------------------------------------------------
    def destroy(self) -> None:
        self._closed = True
        self._array = self._pending = None

    close = destroy

    def __repr__(self) -> str:
        if self._closed:
            return "TensorBuffer(destroyed)"
        where = "device" if self.is_on_device else "host"
        return f"TensorBuffer({self._what()}, {_dtype_name(self._dtype)} {list(self._shape)}, {where})"
