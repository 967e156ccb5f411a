"""Every error litegpu raises on purpose derives from :class:`LiteGpuError`.

Messages name what was wrong and where (file, tensor, op index) and what was
expected, so a user can act on them without reading our code.
"""

from __future__ import annotations


class LiteGpuError(Exception):
    """Root of litegpu's exceptions."""


class ModelFormatError(LiteGpuError, ValueError):
    """The file is not a valid TFLite model (bad identifier, offsets, indices, ...)."""


class UnsupportedOpError(LiteGpuError, NotImplementedError):
    """An op (or an op/dtype combination) that no backend can run."""


class ModelExecutionError(LiteGpuError, RuntimeError):
    """An op failed while running (bad runtime shapes, data-dependent errors)."""


class DeviceLostError(ModelExecutionError):
    """The accelerator was lost during a call (Vulkan's VK_ERROR_DEVICE_LOST) and the call could not be run again
    on the reopened device (its inputs or the model's variables were on the lost one)."""


class EngineCompileError(ModelExecutionError):
    """An engine accepted a partition's ops but could not compile them (for some input shapes)."""


class OutOfMemoryError(LiteGpuError, MemoryError):
    """Compiling or running a model needs more memory than the machine (or the device) can still give.

    Raised instead of running when XLA's own account of a compiled program (temporaries and outputs)
    exceeds what is available, and in place of XLA's RESOURCE_EXHAUSTED errors and Python's MemoryError."""


class AcceleratorUnavailableError(LiteGpuError, RuntimeError):
    """The requested accelerator is not present on this machine."""


class InvalidArgumentError(LiteGpuError, ValueError):
    """A call got an argument it cannot accept (wrong name, index, shape or dtype)."""


class TensorBufferError(InvalidArgumentError):
    """A TensorBuffer write or read with the wrong size, dtype or rank."""


class SignatureError(InvalidArgumentError, KeyError):
    """An unknown signature key or index, or an unknown input/output name."""

    def __str__(self) -> str:  # KeyError quotes its message; we do not want that
        return str(self.args[0]) if self.args else ""


class ClosedError(LiteGpuError, RuntimeError):
    """A method was called on a model or buffer after close()."""


class CacheError(LiteGpuError):
    """A compile-cache problem the user must fix (e.g. a hostile model token)."""


class WriteError(LiteGpuError, OSError):
    """A model could not be written."""


class FormatConversionError(LiteGpuError, ValueError):
    """A model holds something the file format it is being written as cannot express (a circle-only
    op or tensor type written as .tflite, a TFLite-only type written as .circle)."""


class RequestError(InvalidArgumentError):
    """A request ``litegpu serve`` refuses: malformed, naming an unknown model, tensor or signature, over a
    limit.  ``status`` is the HTTP status it is answered with (a 4xx, or 503 while the server shuts down)."""

    status = 400

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        if status is not None:
            self.status = status


class UnknownModelError(RequestError, SignatureError):
    """A request names a model (or a signature of one) the server was not started with."""

    status = 404


class PayloadTooLargeError(RequestError):
    """A request body, or one tensor of it, is over the server's limit."""

    status = 413


class UnauthorizedError(RequestError):
    """A request without the server's API key (``Authorization: Bearer ...``)."""

    status = 401


class ServiceUnavailableError(RequestError):
    """A request that arrives while the server is loading its models or shutting down."""

    status = 503
