"""The user-facing runtime: CompiledModel, TensorBuffer, Event, Options, Environment, Interpreter."""

from .compiled_model import CompiledModel
from .environment import Environment, EnvironmentOptions
from .event import Event
from .interpreter import Interpreter, OpResolverType, SignatureRunner
from .model import PLACEHOLDER_SIGNATURE, Model
from .options import CpuKernelMode, CpuOptions, GpuOptions, HardwareAccelerator, Options
from .tensor_buffer import TensorBuffer

__all__ = ["CompiledModel", "CpuKernelMode", "CpuOptions", "Environment", "EnvironmentOptions", "Event",
           "GpuOptions", "HardwareAccelerator", "Interpreter", "Model", "OpResolverType", "Options",
           "PLACEHOLDER_SIGNATURE", "SignatureRunner", "TensorBuffer"]
