"""The user-facing runtime: CompiledModel, TensorBuffer, Event, Options, Environment, Interpreter."""

from .compiled_model import CompiledModel
from .environment import Environment, EnvironmentOptions
from .event import Event
from .model import PLACEHOLDER_SIGNATURE, Model
from .options import CpuKernelMode, CpuOptions, GpuOptions, HardwareAccelerator, Options
from .tensor_buffer import TensorBuffer

__all__ = ["CompiledModel", "CpuKernelMode", "CpuOptions", "Environment", "EnvironmentOptions", "Event",
           "GpuOptions", "HardwareAccelerator", "Interpreter", "Model", "OpResolverType", "Options",
           "PLACEHOLDER_SIGNATURE", "SignatureRunner", "TensorBuffer"]

# The classic Interpreter API is imported on first use: a start through CompiledModel does not need it.
_LAZY = {"Interpreter": ".interpreter", "OpResolverType": ".interpreter", "SignatureRunner": ".interpreter"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
