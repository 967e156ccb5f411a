"""litegpu: run LiteRT / TensorFlow Lite models on GPU and CPU through XLA.

The API follows ``ai_edge_litert`` (``CompiledModel``, ``TensorBuffer``,
``HardwareAccelerator``, ``Options``, ``Interpreter``) so that code written for
it ports by changing the import; see ``litegpu.runtime`` for what litegpu adds
(async runs with events, device-resident outputs, strict checks).
"""

from . import errors
from .errors import (AcceleratorUnavailableError, CacheError, ClosedError, DeviceLostError, InvalidArgumentError,
                     LiteGpuError,
                     ModelExecutionError, ModelFormatError, OutOfMemoryError, SignatureError, TensorBufferError,
                     UnsupportedOpError, WriteError)
from .runtime import (CompiledModel, CpuKernelMode, CpuOptions, Environment, EnvironmentOptions, Event, GpuOptions,
                      HardwareAccelerator, Interpreter, Model, OpResolverType, Options, SignatureRunner, TensorBuffer)
from .runtime.generate import generate, generate_stream
from .runtime.litertlm import LitertLmBundle

from .ops.python_ops import register_custom_op, unregister_custom_op

__version__ = "0.1.0"

__all__ = [
    "AcceleratorUnavailableError", "CacheError", "ClosedError", "CompiledModel", "DeviceLostError", "CpuKernelMode", "CpuOptions",
    "Environment", "EnvironmentOptions", "Event", "GpuOptions", "HardwareAccelerator", "Interpreter",
    "InvalidArgumentError", "LiteGpuError", "Model", "ModelExecutionError", "ModelFormatError", "OpResolverType",
    "OutOfMemoryError", "Options", "SignatureError", "SignatureRunner", "TensorBuffer", "TensorBufferError", "UnsupportedOpError",
    "WriteError", "errors", "generate", "generate_stream", "LitertLmBundle",
]
