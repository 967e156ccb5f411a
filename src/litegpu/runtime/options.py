"""Per-model options, named as in ``ai_edge_litert`` so that code ports by changing the import."""

from __future__ import annotations

import dataclasses
import enum
import os
from typing import Any

from ..compile.precision import PRECISIONS, precision_policy
from ..backends import registry
from ..backends.cache import validate_model_token
from ..errors import InvalidArgumentError


class HardwareAccelerator(enum.IntFlag):
    """Where a model may run; combine with ``|``.  GPU is the accelerator JAX sees (CUDA, ROCm), or else a
    Vulkan or Metal GPU through IREE (``GpuOptions.engine``).

    ``GPU | CPU`` runs on the CPU, with a warning, where there is no GPU;
    ``GPU`` alone raises ``AcceleratorUnavailableError`` there.  litegpu has
    no NPU backend: ``NPU`` alone raises, ``NPU | CPU`` falls back to the CPU.
    """

    CPU = 1
    GPU = 2
    NPU = 4


class CpuKernelMode(enum.IntEnum):
    """The official package's CPU kernel choice, mapped onto litegpu's engines.

    XNNPACK (the official default, also spelled DELEGATE) means "the fast path": OpenVINO for the
    float ops it converts, XLA for the rest (quantized integer ops included, bit-exact).  BUILTIN keeps
    every op on the exact TFLite kernels under XLA (integers bit for bit with the official builtin
    kernels).  REFERENCE runs litegpu's numpy interpreter.
    """

    DELEGATE = 0
    XNNPACK = 0
    REFERENCE = 1
    BUILTIN = 2


CPU_PRECISIONS = ("fp32", "bf16")
_KERNELS = {CpuKernelMode.XNNPACK: "fast", CpuKernelMode.BUILTIN: "builtin", CpuKernelMode.REFERENCE: "reference"}


def fast_engines() -> tuple[str, ...]:
    """The engines the fast CPU path may choose from besides XLA (``CpuOptions.engines``): the registry's candidates."""
    return registry.named(fast_cpu=True)


def gpu_engines() -> tuple[str, ...]:
    """The engines that run GPU partitions (``GpuOptions.engine``): XLA where JAX sees the GPU (CUDA, ROCm), IREE
    for Vulkan and Metal GPUs, and any other the registry has."""
    return registry.named(device="GPU")


@dataclasses.dataclass
class CpuOptions:
    """CPU options.

    ``kernel_mode``: see :class:`CpuKernelMode` (None: the fast path).  ``num_threads``: threads of
    the OpenVINO and LiteRT engines; 0 (the default, also of ``CompiledModel.from_file(path)`` without options)
    is the machine's physical cores, as ONNX Runtime, OpenVINO and PyTorch default to.  The LiteRT engine
    takes one thread instead of the count asked for where timing says that is as fast (a model too small to
    share out), never more; 1 is the official interpreter's default.  XLA CPU sizes its own thread pool per
    process.
    ``precision``: "fp32" (default, on every engine) or "bf16", which lets OpenVINO compute in bfloat16
    on CPUs with AMX / AVX512-BF16 (faster, about 1e-2 relative error: BENCHMARKS.md); XLA partitions
    stay fp32.  ``quantized_execution`` (integer and dynamic-range ops on the fast path): None (default,
    as the official default: XNNPACK's int8 kernels where the official interpreter takes the model, a few
    units from the builtin kernels; the exact kernels otherwise), "exact" (always the exact TFLite kernels,
    bit for bit with the official builtin kernels) or "fast" (OpenVINO's int8 kernels may take them too:
    much faster on AMX / VNNI CPUs, sometimes further from the builtin kernels than XNNPACK: BENCHMARKS.md).
    ``engines``: the engines the fast path may choose from besides XLA, of "litert" (the official
    interpreter with XNNPACK, where it is the fastest: small models, integer models) and "openvino"
    (float ops); None: every one installed.  XLA
    and the numpy reference run what they leave.  The xnnpack fields exist for compatibility and change
    nothing here.
    """

    num_threads: int = 0
    kernel_mode: CpuKernelMode | None = None
    enable_ynnpack: bool = False
    xnnpack_flags: int | None = None
    xnnpack_weight_cache_path: str = ""
    precision: str = "fp32"
    quantized_execution: str | None = None
    engines: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.engines is not None:
            if isinstance(self.engines, str) or not all(isinstance(e, str) for e in self.engines):
                raise InvalidArgumentError(f"CpuOptions.engines is a tuple of engine names, got {self.engines!r}")
            unknown = sorted(set(self.engines) - set(fast_engines()))
            if unknown:
                raise InvalidArgumentError(f"CpuOptions.engines: unknown engine(s) {', '.join(unknown)}; the fast "
                                           f"path chooses from {', '.join(fast_engines())} (XLA always runs the rest)")
            self.engines = tuple(self.engines)
        if not isinstance(self.num_threads, int) or self.num_threads < 0:
            raise InvalidArgumentError(f"CpuOptions.num_threads must be an int >= 0, got {self.num_threads!r}")
        if self.quantized_execution not in (None, "exact", "fast"):
            raise InvalidArgumentError(f"CpuOptions.quantized_execution must be None, 'exact' or 'fast', got "
                                       f"{self.quantized_execution!r}")
        if self.kernel_mode is not None:
            try:
                self.kernel_mode = CpuKernelMode(self.kernel_mode)
            except ValueError:
                raise InvalidArgumentError(f"CpuOptions.kernel_mode must be a CpuKernelMode, got "
                                           f"{self.kernel_mode!r}") from None
        if self.precision not in CPU_PRECISIONS:
            raise InvalidArgumentError(f"CpuOptions.precision must be one of {', '.join(CPU_PRECISIONS)}, got "
                                       f"{self.precision!r}")

    @property
    def kernels(self) -> str:
        """The planner's name for the kernel mode: "fast", "builtin" or "reference"."""
        return _KERNELS[CpuKernelMode.XNNPACK if self.kernel_mode is None else self.kernel_mode]


@dataclasses.dataclass
class GpuOptions:
    """GPU options.  ``precision`` is "fp32" (default: results agree with the CPU), "fp16" or
    "fp16_fp32_accum" (fp16 storage, fp32 arithmetic).  ``enforce_f32`` is the official spelling of fp32.
    ``serialization_dir`` enables XLA's persistent compilation cache there; ``model_token`` names the model
    in that cache.  ``quantized_execution`` is how quantized models run on the GPU: "float" (default, as the
    LiteRT GPU delegate: in float with fake quantization, see ``litegpu.compile.float_view``) or "integer"
    (the exact integer kernels, bit-equal to the CPU).  ``engine`` picks the GPU engine: None (default) is XLA
    where JAX sees a GPU (CUDA, ROCm) and IREE where only a Vulkan or Metal GPU is present; "xla" or "iree" asks
    for one by name ("iree" also takes a software Vulkan device such as Mesa's lavapipe, never chosen
    otherwise).  The other fields exist for compatibility and change nothing here.
    """

    precision: str = "fp32"
    serialization_dir: str | None = None
    model_token: str | None = None
    enforce_f32: bool = False
    constant_tensor_sharing: bool = False
    infinite_float_capping: bool = False
    benchmark_mode: bool = False
    allow_src_quantized_fc_conv_ops: bool = False
    hint_waiting_for_completion: bool = False
    quantized_execution: str = "float"
    engine: str | None = None

    def __post_init__(self) -> None:
        from ..compile.float_view import check_quantized_execution  # the float view's module reads models

        precision_policy(self.precision)  # validates
        check_quantized_execution(self.quantized_execution)
        if self.engine is not None and self.engine not in gpu_engines():
            raise InvalidArgumentError(f"GpuOptions.engine must be None or one of {', '.join(gpu_engines())}, got "
                                       f"{self.engine!r}")
        if self.enforce_f32:
            self.precision = "fp32"


# When the fast CPU path times its engines where the choice is not known (``Options.engine_choice``); the first
# is the default.
ENGINE_CHOICES = ("deferred", "load", "never")
ENGINE_CHOICE_ENV = "LITEGPU_ENGINE_CHOICE"


def check_engine_choice(choice: str | None, where: str) -> str | None:
    if choice is not None and choice not in ENGINE_CHOICES:
        raise InvalidArgumentError(f"{where} is one of {', '.join(map(repr, ENGINE_CHOICES))}, not {choice!r}")
    return choice


def check_model_token(token: str | None) -> str | None:
    """A model token becomes part of cache keys and file names: see ``validate_model_token``."""
    return None if token is None else validate_model_token(token)


class Options:
    """Options of one compiled model (``ai_edge_litert.options.Options`` plus litegpu's cache settings).

    The compile cache is on by default: ``serialization_dir`` names its directory (default: ``$LITEGPU_CACHE_DIR``,
    else the user's cache directory, ``~/.cache/litegpu`` on Linux); ``compile_cache=False`` (or
    ``LITEGPU_CACHE_DIR=""``) turns it off.  ``model_token`` names the model in it (default: a hash of its bytes).

    ``engine_choice``: when the fast CPU path times the official interpreter against OpenVINO for a model whose
    engine is not known without timing (``compile.choices``): "deferred" (default: the model starts on the
    official interpreter and the engines are timed once its calls have taken as long as the timing would,
    ``runtime.engine_choice``), "load" (timed while loading: the final plan at once, as a steady-state benchmark
    wants) or "never" (the official interpreter unless the choice is known).  None: ``$LITEGPU_ENGINE_CHOICE``,
    else "deferred".
    """

    def __init__(self, hardware_accelerators: HardwareAccelerator | int = HardwareAccelerator.CPU,
                 cpu_options: CpuOptions | None = None, gpu_options: GpuOptions | None = None,
                 serialization_dir: str | None = None, model_token: str | None = None, devices: Any = None,
                 compile_cache: bool = True, engine_choice: str | None = None, **vendor_options: Any):
        try:
            flags = int(hardware_accelerators)
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"hardware_accelerators must be a HardwareAccelerator (CPU, GPU, NPU or "
                                       f"a combination), not {type(hardware_accelerators).__name__}") from None
        if flags <= 0 or flags & ~7:
            raise InvalidArgumentError(f"hardware_accelerators must combine CPU=1, GPU=2, NPU=4; got {flags!r}")
        self.hardware_accelerators = HardwareAccelerator(flags)
        self._cpu_options = cpu_options
        self._gpu_options = gpu_options
        self.serialization_dir = serialization_dir
        self.model_token = check_model_token(model_token)
        if not isinstance(compile_cache, bool):
            raise InvalidArgumentError(f"compile_cache is True or False, not {compile_cache!r}")
        self.compile_cache = compile_cache
        self.engine_choice = check_engine_choice(engine_choice, "engine_choice")
        # litegpu's: several devices of the accelerator ("all", a count, indices or JAX devices); the big
        # matrix weights are split over them and the KV cache by head (litegpu.backends.sharding)
        if devices is not None and not isinstance(devices, (str, int, list, tuple)):
            raise InvalidArgumentError(f"devices must be 'all', a count, or a list of device indices or JAX "
                                       f"devices, not {type(devices).__name__}")
        self.devices = devices
        # qualcomm_options / intel_openvino_options of the official package: accepted, unused (no NPU here)
        self.vendor_options = vendor_options

    @classmethod
    def create(cls) -> "Options":
        return cls()

    @property
    def cpu_options(self) -> CpuOptions:
        if self._cpu_options is None:
            self._cpu_options = CpuOptions()
        return self._cpu_options

    @property
    def gpu_options(self) -> GpuOptions:
        if self._gpu_options is None:
            self._gpu_options = GpuOptions()
        return self._gpu_options

    @property
    def precision(self) -> str:
        return self.gpu_options.precision

    @property
    def cache_dir(self) -> str | None:
        """The compile cache directory these options name (None: the default one, ``backends.cache``)."""
        # the GPU options as given (None: the defaults, which name no directory), not made to ask
        return self.serialization_dir or getattr(self._gpu_options, "serialization_dir", None)

    @property
    def cache_token(self) -> str | None:
        return self.model_token or check_model_token(getattr(self._gpu_options, "model_token", None))

    def __repr__(self) -> str:
        return (f"Options(hardware_accelerators={self.hardware_accelerators!r}, cpu_options={self._cpu_options!r}, "
                f"gpu_options={self._gpu_options!r}, serialization_dir={self.serialization_dir!r}, "
                f"model_token={self.model_token!r}" + ("" if self.compile_cache else ", compile_cache=False")
                + (f", devices={self.devices!r}" if self.devices is not None else "")
                + (f", engine_choice={self.engine_choice!r})" if self.engine_choice is not None else ")"))

    @property
    def resolved_engine_choice(self) -> str:
        """The engine choice in force: ``engine_choice``, else ``$LITEGPU_ENGINE_CHOICE``, else "deferred"."""
        if self.engine_choice is not None:
            return self.engine_choice
        from_env = os.environ.get(ENGINE_CHOICE_ENV, "").strip().lower()
        return check_engine_choice(from_env, f"${ENGINE_CHOICE_ENV}") if from_env else ENGINE_CHOICES[0]


def resolve_options(options: Options | None, hardware_accel: HardwareAccelerator | int | None) -> Options:
    """The official rule: either options or the hardware_accel shortcut, never both; default CPU.  Options
    given in hardware_accel's place (``from_file(path, Options(...))``) are taken as the options."""
    if isinstance(hardware_accel, Options) and options is None:
        options, hardware_accel = hardware_accel, None
    if options is not None:
        if hardware_accel is not None:
            raise InvalidArgumentError("Pass either options or hardware_accel, not both.")
        if not isinstance(options, Options):
            raise InvalidArgumentError(f"options must be litegpu.Options, got {type(options).__name__}")
        return options
    # the CPU options' defaults (num_threads=0: the physical cores), not the official interpreter's one thread:
    # a new user's ``from_file(path)`` ran the docs' models at 0.55x of what two threads gave (issue 26)
    return Options(HardwareAccelerator.CPU if hardware_accel is None else hardware_accel)


__all__ = ["CPU_PRECISIONS", "ENGINE_CHOICES", "ENGINE_CHOICE_ENV", "CpuKernelMode", "CpuOptions", "GpuOptions", "HardwareAccelerator", "Options",
           "PRECISIONS", "check_model_token", "fast_engines", "gpu_engines", "resolve_options"]
