"""The user-facing runtime: CompiledModel, TensorBuffer, Event, Options, Environment, Interpreter."""

from .._lazy import lazy_names

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
__getattr__, __dir__ = lazy_names(__name__, {"Interpreter": ".interpreter", "OpResolverType": ".interpreter",
                                             "SignatureRunner": ".interpreter"}, __all__)
