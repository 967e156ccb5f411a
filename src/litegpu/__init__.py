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
                      HardwareAccelerator, Model, Options, TensorBuffer)

from .version import __version__

__all__ = [
    "AcceleratorUnavailableError", "CacheError", "ClosedError", "CompiledModel", "bundled_model", "DeviceLostError", "CpuKernelMode", "CpuOptions",
    "Environment", "EnvironmentOptions", "Event", "GpuOptions", "HardwareAccelerator", "Interpreter",
    "InvalidArgumentError", "LiteGpuError", "Model", "ModelExecutionError", "ModelFormatError", "OpResolverType",
    "OutOfMemoryError", "Options", "SignatureError", "SignatureRunner", "TensorBuffer", "TensorBufferError", "UnsupportedOpError",
    "WriteError", "errors", "generate", "generate_stream", "LitertLmBundle", "register_custom_op",
    "unregister_custom_op",
]

# Imported on first use, so that ``import litegpu`` (every start) does not load them: the classic Interpreter API,
# generation, LiteRT-LM bundles, the bundled model's path, custom ops written in Python (which load the IR's classes).
_LAZY = {"Interpreter": "litegpu.runtime.interpreter", "OpResolverType": "litegpu.runtime.interpreter",
         "SignatureRunner": "litegpu.runtime.interpreter", "generate": "litegpu.runtime.generate",
         "generate_stream": "litegpu.runtime.generate", "LitertLmBundle": "litegpu.runtime.litertlm",
         "bundled_model": "litegpu.models", "register_custom_op": "litegpu.ops.custom.python_ops",
         "unregister_custom_op": "litegpu.ops.custom.python_ops"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
