"""The IREE engine: GPUs without CUDA or ROCm (Intel, AMD, NVIDIA, Arm through Vulkan; Apple GPUs through Metal).

litegpu already lowers every op to StableHLO through JAX.  IREE (``iree-base-compiler`` / ``iree-base-runtime``)
compiles StableHLO for Vulkan (SPIR-V) and Metal and runs the result from Python, so a partition goes to IREE
the way it goes to XLA:

- **Support**: the GPU's op rules (``Target.XLA_GPU``: the same lowering), less what IREE cannot do: complex
  numbers, and TFLite's exact integer kernels (``quantized_execution="integer"``, and what a quantized model's
  float view keeps in integers), which IREE 3.13 compiles wrongly in places (an int8 MobileNet's residual ADD
  after its convolutions: up to 229 units off, each op alone exact; see BENCHMARKS.md): quantized models run
  on IREE as their float view, the GPU's default, and integer-only ops on the CPU.  Programs are traced
  without the hints litegpu gives XLA's scheduler (``ops._common.without_xla_steering``): IREE never finished
  compiling the integer division one of them makes.  A partition IREE still fails to
  compile (a compiler crash, or ``COMPILE_TIMEOUT_S``) runs on the CPU, with a warning; the failure is kept in
  the compile cache, so that a later process does not try again.
- **Compile**: the partition is traced by litegpu's own lowering (``xla.export_program``: ``jax.export``, whose
  serialized StableHLO is versioned, so JAX and IREE need not share an MLIR) with its weights and variables as
  arguments, then compiled by ``iree-compile`` (a separate process: a compiler crash cannot take the model's
  process down) for the device present: IREE's own description of the GPU where IREE knows it
  (``named_vulkan_target``), else one written from the device's Vulkan properties (``vulkan_target_attribute``:
  its number types, subgroup size and limits).  IREE's generic Vulkan profile is not used: it has neither
  float64 (IREE silently computes it in float32) nor 8-bit storage (it refuses boolean outputs).  The ``.vmfb``
  is kept in the compile cache, keyed by the model, partition, shapes, precision, target and IREE's runtime
  version (so a machine with the runtime alone runs what was compiled elsewhere: ``compile_ahead``).
- **Run**: weights are uploaded once per model and stay on the device (``IreeState``), shared by its partitions
  and signatures; resource variables stay there between runs.  Functions are compiled with IREE's
  ``async-external`` model: a call returns at once with output buffers and a fence, so a run's outputs
  (``IreeArray``) are litegpu Events' arrays (``block_until_ready``), and feed the next run on the device
  without a host copy; calls are ordered on the device as on a CUDA stream (``IreeSession``).  Reading back copies into host memory imported into the device, allocated
  page-aligned: IREE's own ``to_host`` imports numpy's unaligned memory, which Vulkan drivers that require
  aligned imports (Mesa's lavapipe: 4096 bytes) refuse; drivers that cannot import at all get a mapped staging
  buffer.

Software Vulkan devices (lavapipe) run only when asked for by name (``GpuOptions(engine="iree")``): they are the
CPU, slower than litegpu's CPU engines, but they run every code path of this engine where no GPU is lent.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import pickle
import re
import sys
import threading
import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import (AcceleratorUnavailableError, DeviceLostError, EngineCompileError, InvalidArgumentError,
                      ModelExecutionError)
from ...ir import Model, Operator, Subgraph, called_subgraphs, numpy_dtype
from ...ops import Target
from ...ops._common import without_xla_steering
from ..engine import Engine, EngineContext, EngineSettings, Executable, op_reasons, integer_arithmetic
from ..graph import OpRange
from .vulkan import VulkanDevice, vulkan_devices, vulkan_problem

log = logging.getLogger(__name__)

# Environment variable: the Vulkan target to compile for (``compile_target``): "device" (the default: the
# description read from the device), "named" (IREE's own where it knows the GPU), an IREE target name such as
# "ampere", "rdna3", "valhall4", or a whole ``#hal.device.target<...>`` attribute.
TARGET_ENV = "LITEGPU_IREE_VULKAN_TARGET"
# iree-compile gets this long per partition (LITEGPU_IREE_COMPILE_TIMEOUT seconds overrides): IREE 3.13 never
# finishes some programs (see the module doc), and the partition then runs on the CPU.
COMPILE_TIMEOUT_S = 900.0
# What the programs traced for IREE are, in the compile cache's key: raised when that changes, so that entries
# written before are not trusted (2: run-time DEQUANTIZE apart from the products reading it, ``ops._common``).
LOWERING_REVISION = 2
# Memory imported from the host into a Vulkan device must be aligned (VkPhysicalDeviceExternalMemoryHostProperties:
# 4096 bytes on lavapipe, NVIDIA and AMD); imports are this aligned in address and size.
HOST_IMPORT_ALIGNMENT = 4096
_INT32_MAX = 2**31 - 1
# IREE's names for the element types of function signatures (``iree.abi.declaration``)
_ABI_DTYPES = {"f16": np.float16, "f32": np.float32, "f64": np.float64, "i1": np.bool_, "i8": np.int8,
               "ui8": np.uint8, "i16": np.int16, "ui16": np.uint16, "i32": np.int32, "ui32": np.uint32,
               "i64": np.int64, "ui64": np.uint64}
_COMPLEX_DTYPES = ("complex64", "complex128")


# ---- the packages ---------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def _runtime() -> Any:
    import iree.runtime

    return iree.runtime


@functools.lru_cache(maxsize=1)
def _compiler() -> Any:
    import iree.compiler

    return iree.compiler


def iree_version(package: str = "iree-base-runtime") -> str:
    """The version of IREE's runtime (or another of its packages): a cache key holds the runtime's, which must be
    the version of the compiler that made the ``.vmfb`` (IREE's bytecode is not kept stable across releases);
    so a machine with the runtime alone runs what a machine with the compiler compiled for its GPU."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "missing"


def missing_package() -> str | None:
    """Why IREE cannot run here (its runtime is missing), or None.  (Compiling needs ``iree-base-compiler`` too;
    a compile cache filled elsewhere can stand in for it: ``bench/gpu/iree_precompile.py``.)"""
    try:
        _runtime()
    except ImportError:
        return "iree-base-runtime is not installed (pip install \"litegpu[vulkan]\")"
    return None


# ---- devices --------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class IreeDevice:
    """A GPU IREE can compile for and run on: a Vulkan device, or the Metal GPU of a Mac."""

    api: str                                  # "vulkan" or "metal"
    name: str
    software: bool                            # Vulkan on the CPU (lavapipe)
    float64: bool
    float16: bool
    vulkan: VulkanDevice | None = None

    def describe(self) -> str:
        return self.vulkan.describe() if self.vulkan is not None else f"{self.name} (Metal)"

    @property
    def platform(self) -> str:
        """"vulkan" or "metal" (as ``jax.Device.platform`` is "gpu" or "cpu": ``TensorBuffer.device``)."""
        return self.api

    @property
    def title(self) -> str:
        """How the plan names the engine: "IREE (Vulkan: NAME)"."""
        return f"IREE ({'Vulkan' if self.api == 'vulkan' else 'Metal'}: {self.name})"


def iree_devices(allow_software: bool = False) -> list[IreeDevice]:
    """The GPUs this engine can run on, hardware first (discrete before integrated); software Vulkan devices
    (lavapipe) only with ``allow_software``.  Vulkan devices older than Vulkan 1.2 are left out (IREE needs it)."""
    found = []
    if sys.platform == "darwin":
        found.extend(_metal_devices())
    order = {"discrete GPU": 0, "integrated GPU": 1, "virtual GPU": 2}
    for d in sorted(vulkan_devices(), key=lambda d: order.get(d.device_type, 3)):
        if d.vulkan_1_2 and (allow_software or not d.is_software):
            found.append(IreeDevice("vulkan", d.name, d.is_software, d.float64, d.float16 and d.storage16, d))
    return found


def _metal_devices() -> list[IreeDevice]:
    """The Mac's GPU through IREE's Metal driver (Apple GPUs have no float64)."""
    try:
        if "metal" not in _runtime().query_available_drivers():
            return []
        listed = _runtime().get_driver("metal").query_available_devices()
    except Exception:  # noqa: BLE001  (no IREE, or no Metal device: nothing to offer)
        return []
    return [IreeDevice("metal", str(info.get("name", "Apple GPU")), False, False, True) for info in listed]


# How to add a Vulkan device, for ``litegpu doctor``
VULKAN_INSTALL = ('a Vulkan driver (Debian/Ubuntu: apt-get install mesa-vulkan-drivers: Intel, AMD, and the software '
                  'lavapipe; NVIDIA: its driver\'s Vulkan ICD) and pip install "litegpu[vulkan]"')


def vulkan_rows(jax_gpu: bool) -> list[dict[str, Any]]:
    """One row per Vulkan device (and Metal on a Mac): what IREE would do with it."""
    missing = missing_package()
    devices = vulkan_devices()
    usable = [] if missing else iree_devices(allow_software=False)
    first = usable[0].vulkan if usable and usable[0].vulkan is not None else None
    rows = []
    for d in devices:
        if missing:
            engines = f"- ({missing})"
        elif not d.vulkan_1_2:
            engines = "- (IREE needs Vulkan 1.2)"
        elif d.is_software:
            engines = 'iree when asked by name: GpuOptions(engine="iree") (software: the CPU, for tests)'
        elif jax_gpu:
            engines = 'iree by name (GpuOptions(engine="iree")); GPU plans use XLA, which sees a GPU'
        else:
            engines = "iree: GPU plans run here" if d is first else "iree (not used: GPU plans take the first " \
                                                                 "device, discrete before integrated)"
        rows.append({"device": f"Vulkan {d.index}", "detail": d.describe(), "engines": engines})
    for m in (x for x in usable if x.api == "metal"):
        rows.append({"device": "Metal", "detail": m.describe(), "engines": "iree (untested: see the README)"})
    if not rows:
        rows.append({"device": "Vulkan", "detail": vulkan_problem() or "no Vulkan device", "engines": "-",
                     "install": VULKAN_INSTALL})
    return rows


def no_device_reason(allow_software: bool = False) -> str:
    """Why ``iree_devices`` is empty, with how to fix it."""
    missing = missing_package()
    if missing:
        return missing
    problem = vulkan_problem()
    if problem:
        return f"{problem} (install a Vulkan driver: Mesa's mesa-vulkan-drivers, or your GPU vendor's)"
    software = [d for d in vulkan_devices() if d.is_software]
    if software and not allow_software:
        return (f"the only Vulkan device is a software one ({software[0].name}): asked for by name only, "
                "GpuOptions(engine=\"iree\")")
    old = [d for d in vulkan_devices() if not d.vulkan_1_2]
    if old:
        return f"{old[0].name} supports Vulkan {old[0].api_version}; IREE needs Vulkan 1.2"
    return "no Vulkan device (install a Vulkan driver: Mesa's mesa-vulkan-drivers, or your GPU vendor's)"


# ---- what to compile for --------------------------------------------------------------------------------

def named_vulkan_target(device: VulkanDevice) -> str | None:
    """IREE's own description of this GPU (``--iree-vulkan-target``) where IREE knows its architecture: tuned
    configurations and matrix cores (used when ``TARGET_ENV`` is "named").  None for the others (Intel,
    Imagination, software devices...)."""
    name = device.name.lower()
    if device.vendor == "NVIDIA":
        for words, target in ((("rtx 40", "rtx 30", "rtx a", "a100", "a10", "a30", "a40", "h100", "h200", "h20",
                                "l4", "l40", "b100", "b200", "gb200", "rtx 50"), "ampere"),
                              (("rtx 20", "gtx 16", "t4", "quadro rtx", "titan rtx"), "turing"),
                              (("v100", "titan v"), "volta"),
                              (("gtx 10", "p100", "p40", "p4", "titan x"), "pascal")):
            if any(w in name for w in words):
                return target
    if device.vendor == "AMD":
        for words, target in ((("rx 7", "navi3", "gfx11"), "rdna3"),
                              (("rx 6", "navi2", "gfx103", "vangogh", "rembrandt", "raphael"), "rdna2"),
                              (("rx 5", "navi1", "gfx101"), "rdna1")):
            if any(w in name for w in words):
                return target
    if device.vendor == "ARM":
        for words, target in ((("mali-g715", "mali-g615"), "valhall4"), (("mali-g710", "mali-g510", "mali-g310"),
                              "valhall3"), (("mali-g78",), "valhall2"), (("mali-g77", "mali-g57"), "valhall1")):
            if any(w in name for w in words):
                return target
    if device.vendor == "Qualcomm" and "adreno" in name:
        return "adreno"
    return None


def vulkan_target_attribute(device: VulkanDevice, subgroup_ops: bool = True) -> str:
    """An IREE ``#hal.device.target`` written from the device's own Vulkan properties: its number types,
    storage types, subgroup size and operations (none without ``subgroup_ops``), workgroup limits.  (The
    syntax is IREE's ``#iree_gpu.target``; tests compile with it, so an IREE release that changes it fails
    there first.)"""
    compute = ["fp32", "int32"] + [bits for bits, ok in (("fp64", device.float64), ("fp16", device.float16),
                                                          ("int64", device.int64), ("int16", device.int16),
                                                          ("int8", device.int8)) if ok]
    storage = ["b32"] + [bits for bits, ok in (("b64", device.int64 or device.float64), ("b16", device.storage16),
                                               ("b8", device.storage8)) if ok]
    subgroup = "|".join(op for op, ok in (("shuffle", device.subgroup_shuffle and subgroup_ops),
                                          ("arithmetic", device.subgroup_arithmetic and subgroup_ops)) if ok) or "none"
    spirv = "v1.6" if _api_at_least(device.api_version, 1, 3) else "v1.5"
    sizes = ", ".join(str(min(v, _INT32_MAX)) for v in device.max_workgroup_size)
    counts = ", ".join(str(min(v, _INT32_MAX)) for v in device.max_workgroup_count)
    arch = re.sub(r"[^a-z0-9_]+", "_", device.name.lower()).strip("_")[:40] or "unknown"
    wgp = (f"compute = {'|'.join(compute)}, storage = {'|'.join(storage)}, subgroup = {subgroup}, dot = none, "
           f"mma = [], subgroup_size_choices = [{device.subgroup_size}], max_workgroup_sizes = [{sizes}], "
           f"max_thread_count_per_workgroup = {min(device.max_workgroup_invocations, _INT32_MAX)}, "
           f"max_workgroup_memory_bytes = {min(device.max_workgroup_memory_bytes, _INT32_MAX)}, "
           f"max_workgroup_counts = [{counts}]")
    return ('#hal.device.target<"vulkan", [#hal.executable.target<"vulkan-spirv", "vulkan-spirv-fb", '
            f'{{iree_codegen.target_info = #iree_gpu.target<arch = "{arch}", features = "spirv:{spirv},cap:Shader", '
            f'wgp = <{wgp}>>}}>]>')


def _api_at_least(version: str, major: int, minor: int) -> bool:
    parts = [int(p) for p in version.split(".")[:2] if p.isdigit()]
    return len(parts) == 2 and tuple(parts) >= (major, minor)


@dataclasses.dataclass(frozen=True)
class CompileTarget:
    """What ``iree-compile`` is told about the device: flags, and a device target written into the module
    (``attribute``) where the device is described from its properties."""

    description: str                    # for messages and cache keys
    flags: tuple[str, ...]
    attribute: str | None = None
    # tried when IREE fails on this one: the device's description without subgroup operations (IREE 3.13's
    # SPIR-V reductions over indices, an ARG_MAX or a MEAN in a decoder, fail to compile with them)
    conservative: CompileTarget | None = None

    def attempts(self) -> list[CompileTarget]:
        return [self] + ([self.conservative] if self.conservative is not None else [])


def compile_target(device: IreeDevice) -> CompileTarget:
    """The target for ``device``: Metal, or for Vulkan what ``TARGET_ENV`` chooses: by default ("device") the
    description read from the device itself; "named" IREE's own description where it knows the GPU (tuned,
    matrix cores: but IREE 3.13 never finished compiling a float16 MediaPipe model for "ampere"); an IREE target
    name; or a ``#hal.device.target<...>`` attribute (``bench/gpu/iree_precompile.py`` writes the one it compiled
    for, so that the GPU machine looks its programs up under the same key).  float64 stays float64 (IREE would
    demote it to float32) where the device has it."""
    common = ("--iree-input-type=stablehlo", "--iree-execution-model=async-external")
    # Convolutions as im2col + matmul: IREE 3.13 made a 1x1 strided convolution over a dequantized input (a
    # quantized ResNet's float view) a dispatch that never finished on lavapipe; this form runs (BENCHMARKS.md)
    common += ("--iree-global-opt-use-im2col-for-convs=true",)
    if device.api == "metal":
        # the Metal shaders are compiled by the Mac's Metal driver at load: no Xcode needed to compile
        return CompileTarget("metal", common + ("--iree-hal-target-device=metal",
                                                "--iree-metal-compile-to-metallib=false"))
    vk = device.vulkan
    assert vk is not None
    f64 = ("--iree-input-demote-f64-to-f32=false",) if device.float64 else ()
    # No command buffers recorded once and replayed with indirect bindings (IREE's memoization): IREE 3.13's
    # Vulkan driver, which cannot reuse command buffers natively (iree-org/iree#18121), then ran a later call's
    # dispatches on buffers freed since: after another model's program had run, a prefill wrote its
    # ``[0, input_pos, 0]`` index into the memory of its own tokens input (wrong tokens from the second
    # generation on).  Recorded per call, they bind the call's own buffers.
    common += ("--iree-hal-indirect-command-buffers=false",)
    chosen = os.environ.get(TARGET_ENV, "").strip() or "device"
    if chosen == "named":
        chosen = named_vulkan_target(vk) or "device"
    plain = vulkan_target_attribute(vk, subgroup_ops=False)
    conservative = CompileTarget(f"vulkan:{plain}", common + f64, plain)
    if chosen.startswith("#hal.device.target<"):
        return CompileTarget(f"vulkan:{chosen}", common + f64, chosen, conservative)
    if chosen != "device":
        return CompileTarget(f"vulkan:{chosen}", common + f64 + ("--iree-hal-target-device=vulkan",
                                                                  f"--iree-vulkan-target={chosen}"), None, conservative)
    attribute = vulkan_target_attribute(vk)
    return CompileTarget(f"vulkan:{attribute}", common + f64, attribute,
                         conservative if plain != attribute else None)


def with_device_target(mlir: str, attribute: str) -> str:
    """``mlir`` (one ``module`` from ``jax.export``) with the device target attached to its module."""
    head = re.search(r"^module @[\w$.-]+(?: attributes \{)?", mlir, re.MULTILINE)
    if head is None:
        raise EngineCompileError("the exported StableHLO has no module header to attach the Vulkan target to")
    text = head.group(0)
    entry = f"hal.device.targets = [{attribute}]"
    replacement = f"{text}{entry}, " if text.endswith("{") else f"{text} attributes {{{entry}}}"
    return mlir[:head.start()] + replacement + mlir[head.end():]


# ---- a device in use ------------------------------------------------------------------------------------

class IreeSession:
    """One IREE device opened for this process: the VM instance, the HAL device and module, and a timeline
    semaphore that makes the device an in-order queue, as a CUDA stream is: every call (and readback) waits for
    the previous value and signals the next.  (A timeline semaphore must only grow: two calls left unordered
    may finish in either order, and the second signal then fails, losing the device.)"""

    def __init__(self, device: IreeDevice):
        rt = _runtime()
        self.device = device
        self.instance = rt.VmInstance()
        driver = rt.get_driver(device.api)
        self.hal_device = self._open(driver, device)
        self.hal_module = rt.create_hal_module(self.instance, self.hal_device)
        self.semaphore = self.hal_device.create_semaphore(0)
        self._value = 0
        self.lock = threading.Lock()
        self.can_import_host_memory = True   # until a driver refuses it (then readback maps a staging buffer)
        self.lost = False

    @staticmethod
    def _open(driver: Any, device: IreeDevice) -> Any:
        """The HAL device for ``device``: IREE lists Vulkan devices as ``GPU-<deviceUUID>``."""
        listed = driver.query_available_devices()
        if device.vulkan is not None:
            for info in listed:
                if str(info.get("path", "")).lower().replace("-", "").endswith(device.vulkan.uuid):
                    return driver.create_device(info)
        for info in listed:
            if info.get("name", "").startswith(device.name):
                return driver.create_device(info)
        if len(listed) == 1:
            return driver.create_device(listed[0])
        raise AcceleratorUnavailableError(f"IREE's {device.api} driver does not list {device.name!r} "
                                          f"(it lists {[i.get('name') for i in listed]})")

    def next_fence(self) -> tuple[Any, Any, int]:
        """(the fence of the previous call, a fence at the next value, that value); call under ``lock``."""
        rt = _runtime()
        previous = rt.HalFence.create_at(self.semaphore, self._value)
        self._value += 1
        return previous, rt.HalFence.create_at(self.semaphore, self._value), self._value

    def __del__(self) -> None:
        # the semaphore does not keep its device alive, and one released after its device crashes the process;
        # Python would release the attributes in the order they were set (no module globals here: at exit they
        # may be gone)
        for name in ("semaphore", "hal_module", "hal_device", "instance"):
            self.__dict__.pop(name, None)

    @staticmethod
    def skip(fence: Any) -> None:
        """Signal the fence of work that never reached the device (a call refused before it was queued): every
        later call waits for its value, and would wait forever."""
        try:
            fence.signal()
        except Exception:  # noqa: BLE001  (a lost device: nothing waits any more)
            pass

    def check(self, error: Exception) -> None:
        """A lost device stays lost: the next use opens the device again (``session_for``)."""
        if device_lost(error):
            self.lost = True

    def wait_idle(self) -> None:
        """Wait until every call queued so far has finished (a lost device raises, which the caller reports)."""
        with self.lock:
            value = self._value
        if value and not self.reached(value):
            try:
                _runtime().HalFence.create_at(self.semaphore, value).wait()
            except Exception as e:
                self.check(e)
                raise ModelExecutionError(f"IREE on {self.device.name}: an earlier call failed: {e}") from e

    def reached(self, value: int) -> bool:
        return self.semaphore.query() >= value

    def upload(self, array: np.ndarray) -> Any:
        """A device buffer view holding a copy of ``array``."""
        rt = _runtime()
        array = np.asarray(array)
        if not array.flags.c_contiguous:  # (np.ascontiguousarray would make a scalar 1-D)
            array = array.copy(order="C")
        element_type = rt.array_interop.map_dtype_to_element_type(array.dtype)
        if element_type is None:
            raise ModelExecutionError(f"IREE has no element type for {array.dtype}")
        return self.hal_device.allocator.allocate_buffer_copy(
            memory_type=int(rt.MemoryType.DEVICE_LOCAL), allowed_usage=int(rt.BufferUsage.DEFAULT),
            device=self.hal_device, buffer=array, element_type=element_type)

    def read_back(self, view: Any, fence: Any, dtype: np.dtype) -> np.ndarray:
        """The contents of ``view`` once ``fence`` is reached, as a host array of ``dtype``."""
        dtype = np.dtype(dtype)
        shape = tuple(int(d) for d in view.shape)
        nbytes = int(view.byte_length)
        if nbytes == 0:
            return np.zeros(shape, dtype)
        if self.can_import_host_memory:
            try:
                return self._read_into_imported(view, fence, nbytes)[:nbytes].view(dtype).reshape(shape)
            except RuntimeError as e:  # this driver cannot import host memory: map a staging buffer instead
                log.info("IREE %s: host memory import refused (%s); reading back through staging buffers",
                         self.device.name, e)
                self.can_import_host_memory = False
        return self._read_through_staging(view, fence, nbytes)[:nbytes].view(dtype).reshape(shape).copy()

    def _read_into_imported(self, view: Any, fence: Any, nbytes: int) -> np.ndarray:
        rt = _runtime()
        host = _aligned_bytes(nbytes)
        target = self.hal_device.allocator.import_host_allocation(
            host, memory_type=int(rt.MemoryType.HOST_LOCAL | rt.MemoryType.DEVICE_VISIBLE),
            allowed_usage=int(rt.BufferUsage.TRANSFER_TARGET | rt.BufferUsage.MAPPING_PERSISTENT))
        self._copy_and_wait(view.get_buffer(), target, fence)
        return host

    def _read_through_staging(self, view: Any, fence: Any, nbytes: int) -> np.ndarray:
        rt = _runtime()
        staging = self.hal_device.allocator.allocate_buffer(
            memory_type=int(rt.MemoryType.HOST_LOCAL | rt.MemoryType.DEVICE_VISIBLE),
            allowed_usage=int(rt.BufferUsage.TRANSFER_TARGET | rt.BufferUsage.MAPPING_SCOPED),
            allocation_size=nbytes)
        self._copy_and_wait(view.get_buffer(), staging, fence)
        return staging.map().asarray((nbytes,), np.uint8)

    def _copy_and_wait(self, source: Any, target: Any, after: Any) -> None:
        rt = _runtime()
        with self.lock:
            previous, done, _ = self.next_fence()
            try:
                self.hal_device.queue_copy(source, target, wait_semaphores=rt.HalFence.join([previous, after]),
                                           signal_semaphores=done)
            except Exception:
                self.skip(done)
                raise
        done.wait()


def device_lost(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it) is the driver saying the device was lost."""
    while error is not None:
        if "DEVICE_LOST" in str(error):
            return True
        error = error.__cause__
    return False


def _aligned_bytes(nbytes: int) -> np.ndarray:
    """A writable byte array whose address and size are multiples of HOST_IMPORT_ALIGNMENT."""
    size = -(-nbytes // HOST_IMPORT_ALIGNMENT) * HOST_IMPORT_ALIGNMENT
    raw = np.empty(size + HOST_IMPORT_ALIGNMENT, np.uint8)
    start = (-raw.ctypes.data) % HOST_IMPORT_ALIGNMENT
    return raw[start:start + size]


_sessions: dict[IreeDevice, IreeSession] = {}
_sessions_lock = threading.Lock()


def session_for(device: IreeDevice) -> IreeSession:
    """The process's session on ``device`` (opening a Vulkan device costs time and memory: once)."""
    with _sessions_lock:
        if device not in _sessions or _sessions[device].lost:
            _sessions[device] = IreeSession(device)
        return _sessions[device]


class IreeArray:
    """A run's output on the IREE device: the buffer and the fence of the call that fills it.

    It is what litegpu's Events and TensorBuffers hold for a device result: ``block_until_ready`` and
    ``is_ready`` for the event, ``__array__`` (or ``numpy()``) to read it back, once; passed to another
    call on the same device it stays there (that call waits on its fence)."""

    litegpu_device_array = True  # TensorBuffer.is_on_device

    def __init__(self, session: IreeSession, view: Any, fence: Any, value: int, dtype: Any, shape: Sequence[int]):
        self.session, self.view, self.fence, self._value = session, view, fence, value
        self.dtype = np.dtype(dtype)
        self.shape = tuple(int(d) for d in shape)
        self._host: np.ndarray | None = None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __del__(self) -> None:
        for name in ("fence", "view", "session"):  # the fence before the session that holds its device
            self.__dict__.pop(name, None)

    def devices(self) -> set[IreeDevice]:
        return {self.session.device}

    def is_ready(self) -> bool:
        return self._host is not None or self.session.reached(self._value)

    def block_until_ready(self) -> "IreeArray":
        """Wait for the call that fills it; a failed call raises here."""
        if self._host is None:
            try:
                self.fence.wait()
            except Exception as e:
                self.session.check(e)
                raise ModelExecutionError(f"the IREE call on {self.session.device.name} failed: {e}") from e
        return self

    def numpy(self) -> np.ndarray:
        if self._host is None:
            self.block_until_ready()
            self._host = self.session.read_back(self.view, self.fence, self.dtype)
            self._host.flags.writeable = False  # shared by every reader; np.array(...) copies
        return self._host

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        host = self.numpy()
        if dtype is not None and np.dtype(dtype) != host.dtype:
            return host.astype(dtype)
        return host.copy() if copy else host

    def astype(self, dtype: Any) -> np.ndarray:
        return self.numpy().astype(dtype)

    def __repr__(self) -> str:
        return f"IreeArray({self.dtype.name}{list(self.shape)} on {self.session.device.name})"


# ---- weights and state of one model on the device ------------------------------------------------------

class IreeState:
    """The device copies of one model's weights (uploaded on first use, shared by its partitions and
    signatures) and its resource variables, over the host weights of an ``XlaState`` (which the program is
    traced with).  The device is opened at the first run (compiling ahead needs no device)."""

    def __init__(self, device: IreeDevice, host_state: Any):
        self.device, self.host = device, host_state
        self._weights: dict[tuple[str, np.dtype], Any] = {}
        self.variables: dict = {}
        self._lock = threading.Lock()
        self._session: IreeSession | None = None

    @property
    def session(self) -> IreeSession:
        """The open session on the device; after a lost device, a new one (the weights are uploaded again)."""
        with self._lock:
            if self._session is None or self._session.lost:
                self._session = session_for(self.device)
                self._weights = {}
            return self._session

    def variables_on_lost_device(self) -> list:
        """The keys of the model's variables that only the lost device held."""
        return [k for k, v in self.variables.items() if isinstance(v, IreeArray) and v.session.lost]

    def weight(self, key: str, dtype: np.dtype) -> Any:
        session = self.session
        with self._lock:
            found = self._weights.get((key, dtype))
            if found is None:
                value = np.asarray(self.host.params[key])
                found = session.upload(value if value.dtype == dtype else value.astype(dtype))
                self._weights[(key, dtype)] = found
            return found

    @property
    def weight_bytes(self) -> int:
        return sum(int(v.byte_length) for v in self._weights.values())

    def placement_report(self) -> Any:
        """The weights on the IREE device as uploaded so far (at the types the programs take them), measured."""
        from ..sharding import Placement, PlacementReport

        with self._lock:
            weights = [Placement(key, tuple(int(d) for d in view.shape), np.dtype(dtype).name, int(view.byte_length),
                                 None, f"on the IREE device ({self.device.name})")
                       for (key, dtype), view in self._weights.items()]
        return PlacementReport(1, weights, [sum(w.nbytes for w in weights)])


# ---- compiled partitions --------------------------------------------------------------------------------

@dataclasses.dataclass
class _Program:
    """A compiled partition for one set of argument shapes: its function and how to call it."""

    session: Any                              # the session whose device it is loaded on
    entry: dict                               # the compiled entry, to load it again on a reopened device
    context: Any
    function: Any
    arguments: list[tuple[str, Any]]          # ("param", key) | ("variable", key) | ("input", position)
    argument_dtypes: list[np.dtype]           # as the compiled function declares them
    results: list[tuple[str, Any]]            # ("output", position) | ("variable", key)
    result_specs: list[tuple[tuple[int, ...], np.dtype]]
    initialized: bool = False                 # its first call (which runs the module's initializer) is made


class _Label:
    """A pytree leaf naming an argument or result (tuples would be pytree nodes)."""

    __slots__ = ("kind", "key")

    def __init__(self, kind: str, key: Any):
        self.kind, self.key = kind, key


class IreeExecutable(Executable):
    """One partition compiled by IREE, once per argument shapes (and variable shapes, for stateful models)."""

    where = "iree"

    def place(self, value: Any) -> tuple[Any, bool]:
        """A result of an earlier partition stays on the device; anything else is uploaded by ``run``."""
        if isinstance(value, IreeArray):
            return value, False
        return np.asarray(value), True

    def __init__(self, model: Model, op_range: OpRange, settings: EngineSettings, state: IreeState,
                 target: CompileTarget, cache: Any = None, cache_key: dict | None = None,
                 device: IreeDevice | None = None):
        from ..xla.backend import XlaBackend

        self.model, self.op_range, self.settings, self.state, self.target = model, op_range, settings, state, target
        self.device = device if device is not None else state.device
        self.cache, self.cache_key = cache, dict(cache_key or {})
        # The program is traced with the GPU's op rules, on the host weights of the CPU state.
        self.tracer = XlaBackend(model, op_range.subgraph, "cpu", precision=settings.precision, state=state.host,
                                 op_range=op_range)
        self.tracer.target = Target.XLA_GPU
        self._programs: dict[tuple, _Program] = {}
        self.loaded_from_cache = False
        self.compile_seconds = 0.0

    @property
    def session(self) -> IreeSession:
        return self.state.session

    @property
    def where_text(self) -> str:
        return f"{self.model.source}: {self.op_range} on {self.device.title}"

    # ---- running ----
    def run(self, inputs: Sequence[Any]) -> list[Any]:
        if len(inputs) != len(self.op_range.inputs):
            raise ModelExecutionError(f"{self.where_text} takes {len(self.op_range.inputs)} inputs, got {len(inputs)}")
        variables = dict(self.state.variables)
        key = (tuple((tuple(int(d) for d in np.shape(x)), np.dtype(x.dtype)) for x in inputs),
               tuple(sorted(((repr(k), tuple(v.shape), np.dtype(v.dtype)) for k, v in variables.items()))))
        program = self._programs.get(key)
        if program is None:
            program = self._programs[key] = self._program(inputs, variables)
        try:
            return self._call(self._loaded(key, program), inputs, variables)
        except DeviceLostError:
            raise
        except ModelExecutionError as e:
            if not device_lost(e):
                raise
            return self._run_again_after_losing_the_device(key, inputs, e)

    def _loaded(self, key: tuple, program: _Program) -> _Program:
        """``program`` loaded on the open session (again, once a lost device was reopened)."""
        if program.session is not self.session:
            program = self._programs[key] = self._load(program.entry)
        if not program.initialized:
            # A module's initializer runs inside its first call and waits on fences of its own; in full test runs
            # on lavapipe that first call lost the device twice (VK_ERROR_DEVICE_LOST from the initializer's
            # vkSignalSemaphore, never in a later call): it now starts on an idle device.
            program.session.wait_idle()
            program.initialized = True
        return program

    def _run_again_after_losing_the_device(self, key: tuple, inputs: Sequence[Any], error: Exception) -> list[Any]:
        """A lost Vulkan device (a driver reset, or a driver losing its own timeline: seen once on lavapipe under a
        full test run) is opened again and the call run again, once, when everything it reads is still on the host:
        its weights are uploaded again, its program loaded again."""
        on_lost = [i for i, x in enumerate(inputs) if isinstance(x, IreeArray) and x.session.lost]
        lost_variables = self.state.variables_on_lost_device()
        if on_lost or lost_variables:
            what = (f"inputs {on_lost}" if on_lost else "") + (" and " if on_lost and lost_variables else "") + \
                   (f"the model's variables {lost_variables}" if lost_variables else "")
            raise DeviceLostError(f"{self.where_text}: the device was lost ({error.__cause__ or error}), and {what} "
                                  "were on it: run the model again from host inputs"
                                  + (" after reset_variables()" if lost_variables else "")) from error
        warnings.warn(f"{self.where_text}: the device was lost ({error.__cause__ or error}); it was opened again "
                      "and the call run again", RuntimeWarning, stacklevel=3)
        variables = dict(self.state.variables)
        try:
            return self._call(self._loaded(key, self._programs[key]), inputs, variables)
        except ModelExecutionError as again:
            if device_lost(again):
                raise DeviceLostError(f"{self.where_text}: the device was lost twice in a row: {again}") from again
            raise

    def _call(self, program: _Program, inputs: Sequence[Any], variables: dict) -> list[Any]:
        rt = _runtime()
        session = self.session
        waits = []
        views = []
        for (kind, key), dtype in zip(program.arguments, program.argument_dtypes):
            if kind == "param":
                views.append(self.state.weight(key, dtype))
                continue
            value = inputs[key] if kind == "input" else variables[key]
            view, fence = self._on_device(value, dtype)
            views.append(view)
            if fence is not None:
                waits.append(fence)
        args = rt.VmVariantList(len(views) + 2)
        for view in views:
            args.push_ref(view)
        results = rt.VmVariantList(len(program.results))
        with session.lock:
            previous, done, value = session.next_fence()
            args.push_ref(rt.HalFence.join([previous, *waits]))
            args.push_ref(done)
            try:
                program.context.invoke(program.function, args, results)
            except Exception as e:
                session.skip(done)
                session.check(e)
                raise ModelExecutionError(f"{self.where_text}: IREE could not run it: {e}") from e
        outputs: list[Any] = [None] * len(self.op_range.outputs)
        new_variables = {}
        for i, ((kind, key), (shape, dtype)) in enumerate(zip(program.results, program.result_specs)):
            array = IreeArray(session, results.get_as_object(i, rt.HalBufferView), done, value, dtype, shape)
            if kind == "output":
                outputs[key] = array
            else:
                new_variables[key] = array
        self.state.variables = new_variables if new_variables or not variables else variables
        return outputs

    def _on_device(self, value: Any, dtype: np.dtype) -> tuple[Any, Any]:
        """(a buffer view of ``value`` on this device, the fence to wait for or None)."""
        if isinstance(value, IreeArray) and value.session is self.session and value.dtype == dtype:
            return value.view, (None if value.is_ready() else value.fence)
        host = np.asarray(value)
        return self.session.upload(host if host.dtype == dtype else host.astype(dtype)), None

    # ---- compiling ----
    def _program(self, inputs: Sequence[Any], variables: dict) -> _Program:
        specs = [(tuple(int(d) for d in np.shape(x)), np.dtype(x.dtype)) for x in inputs]
        var_specs = {k: (tuple(v.shape), np.dtype(v.dtype)) for k, v in variables.items()}
        from ..cache import found_or_made

        def compiled() -> _Program:
            try:
                entry = self._compile(specs, var_specs)
            except EngineCompileError as e:
                self._remember(key, {"error": str(e)})
                raise
            self._remember(key, entry)
            return self._load(entry)

        key = self._cache_entry_key(specs, var_specs)
        return found_or_made(self.cache, key, lambda: self._cached_program(key), compiled)

    def _cached_program(self, key: str | None) -> _Program | None:
        """The program stored under ``key`` loaded, or None; IREE's remembered refusal raises again."""
        blob = self.cache.load(key) if key is not None else None
        if blob is None:
            return None
        try:
            entry = pickle.loads(blob)
            if "error" in entry:  # this IREE could not compile it before: do not spend the time again
                raise EngineCompileError(f"{entry['error']} (remembered in the compile cache)")
            program = self._load(entry)
        except EngineCompileError:
            raise
        except Exception as e:  # checksummed, yet not loadable here: rebuild it, never trust it
            self.cache.discard(key, f"IREE could not load it ({type(e).__name__}: {e})")
            return None
        self.loaded_from_cache = True
        return program

    def compile_ahead(self, input_specs: Sequence[tuple[Sequence[int], Any]] | None = None) -> str:
        """Compile the program for inputs of these (shape, dtype) (default: the partition's declared ones) into the
        compile cache, without loading it, and for a stateful partition the program that takes its variables
        back: for another machine with this GPU, which then needs IREE's runtime only (``bench/gpu/iree_precompile.py``).
        Returns what happened to each program: "compiled", "cached", or IREE's error."""
        if self.cache is None:
            raise InvalidArgumentError("compile_ahead needs a compile cache (Options(serialization_dir=...))")
        sg = self.model.subgraphs[self.op_range.subgraph]
        specs = [(tuple(int(d) for d in s), np.dtype(d)) for s, d in (input_specs or [
            (sg.tensors[t].shape, numpy_dtype(sg.tensors[t].dtype)) for t in self.op_range.inputs])]
        verdicts: list[str] = []
        var_specs: dict = {}
        while True:
            key = self._cache_entry_key(specs, var_specs)
            blob = self.cache.load(key)
            entry, verdict = (pickle.loads(blob), "cached") if blob is not None else (None, "compiled")
            if entry is None:
                try:
                    entry = self._compile(specs, var_specs)
                except EngineCompileError as e:
                    entry, verdict = {"error": str(e)}, str(e)
                self._remember(key, entry)
            verdicts.append(verdict)
            made = {k: spec for (kind, k), spec in zip(entry.get("results", ()), entry.get("result_specs", ()))
                    if kind == "variable"}
            if "error" in entry or not made or var_specs:
                return "; then with its variables: ".join(verdicts)
            var_specs = made

    def _remember(self, key: str | None, entry: dict) -> None:
        if key is not None:
            self.cache.store(key, pickle.dumps(entry), {"engine": "iree", "what": "compiled program",
                                                         "source": self.model.source,
                                                         "partition": str(self.op_range),
                                                         "target": self.target.description[:80],
                                                         "compiled": "error" not in entry})

    def _cache_entry_key(self, specs: list, var_specs: dict) -> str | None:
        if self.cache is None:
            return None
        from ..cache import make_key

        return make_key({**self.cache_key, "engine": "iree", "lowering": LOWERING_REVISION, "iree": iree_version(),
                         "target": self.target.description,
                         "flags": list(self.target.flags), "subgraph": self.op_range.subgraph,
                         "ops": list(self.op_range.op_indices), "inputs": list(self.op_range.inputs),
                         "outputs": list(self.op_range.outputs), "precision": self.settings.precision,
                         "shapes": [[list(s), str(d)] for s, d in specs],
                         "variables": sorted([repr(k), list(s), str(d)] for k, (s, d) in var_specs.items())})

    def _compile(self, specs: list, var_specs: dict) -> dict:
        """Trace, export and compile: a cache entry (the ``.vmfb`` and how to call it)."""
        from ..xla.backend import export_program
        from ..device_arrays import jax_module

        jax = jax_module()
        host_params = self.state.host.params
        params = {k: jax.ShapeDtypeStruct(np.shape(v), v.dtype) for k, v in host_params.items()}
        variables = {k: jax.ShapeDtypeStruct(s, d) for k, (s, d) in var_specs.items()}
        inputs = [jax.ShapeDtypeStruct(s, d) for s, d in specs]
        start = time.perf_counter()
        try:
            with without_xla_steering():  # hints for XLA's scheduler, which IREE does not need (ops._common)
                exported = export_program(self.tracer, params, variables, inputs)
        except Exception as e:
            raise EngineCompileError(f"{self.where_text}: tracing for IREE failed: {type(e).__name__}: {e}") from e
        labels = ({k: _Label("param", k) for k in params}, {k: _Label("variable", k) for k in variables},
                  [_Label("input", i) for i in range(len(inputs))])
        flat_labels = jax.tree_util.tree_leaves((labels, {}))
        arguments = [(flat_labels[i].kind, flat_labels[i].key) for i in exported.module_kept_var_idx]
        results = self._result_labels(exported)
        mlir = exported.mlir_module()
        _refuse_custom_calls(mlir, self.where_text)
        vmfb = self._compile_mlir(mlir)
        self.compile_seconds += time.perf_counter() - start
        log.info("IREE compiled %s in %.2f s (%d bytes)", self.where_text, time.perf_counter() - start, len(vmfb))
        result_specs = [(tuple(int(d) for d in a.shape), np.dtype(a.dtype)) for a in exported.out_avals]
        return {"vmfb": bytes(vmfb), "arguments": arguments, "results": results, "result_specs": result_specs}

    def _compile_mlir(self, mlir: str) -> bytes:
        """The ``.vmfb``, for the device's target or, where IREE fails on that one, its conservative one."""
        try:
            _compiler()
        except ImportError:
            raise EngineCompileError(f"{self.where_text}: iree-base-compiler is not installed, and the compile cache "
                                     "has no .vmfb for it (pip install \"litegpu[vulkan]\")") from None
        failures = []
        for target in self.target.attempts():
            text = mlir if target.attribute is None else with_device_target(mlir, target.attribute)
            try:
                return run_compiler(text, target.flags, compile_timeout_s())
            except Exception as e:
                failures.append(_last_lines(str(e)))
                if "did not finish" in str(e):  # a second try would take as long
                    break
                log.info("IREE failed on %s for %s; trying the next target", self.where_text, target.description[:60])
        raise EngineCompileError(f"{self.where_text}: IREE could not compile it for {self.device.name}: "
                                 + " / then: ".join(failures))

    @staticmethod
    def _result_labels(exported: Any) -> list[tuple[str, Any]]:
        """Where each flat result of the program goes: an output position or a variable key."""
        outputs, variables = exported.out_tree.unflatten(list(range(len(exported.out_avals))))
        found: list[tuple[str, Any]] = [("", None)] * len(exported.out_avals)
        for position, flat in enumerate(outputs):
            found[flat] = ("output", position)
        for key, flat in variables.items():
            found[flat] = ("variable", key)
        return found

    def _load(self, entry: dict) -> _Program:
        rt = _runtime()
        session = self.session
        module = rt.VmModule.copy_buffer(session.instance, entry["vmfb"])
        context = rt.VmContext(session.instance, modules=[session.hal_module, module])
        function = module.lookup_function("main")
        if function is None:
            raise EngineCompileError(f"{self.where_text}: the compiled module has no main function")
        declared = _declared_argument_dtypes(function)
        if len(declared) != len(entry["arguments"]):
            raise EngineCompileError(f"{self.where_text}: the compiled function takes {len(declared)} arguments, "
                                     f"{len(entry['arguments'])} were expected")
        return _Program(session, entry, context, function, entry["arguments"], declared, entry["results"],
                        entry["result_specs"])

    def output_shapes(self, input_shapes: Sequence[Sequence[int]]) -> list[tuple[tuple[int, ...], np.dtype]]:
        """(shape, dtype) of each output for inputs of these shapes, by tracing (no compile)."""
        sg = self.model.subgraphs[self.op_range.subgraph]
        return self.tracer.output_shapes([(tuple(s), numpy_dtype(sg.tensors[t].dtype))
                                          for s, t in zip(input_shapes, self.op_range.inputs)])


# Ops that only move or select integer values (their output keeps its input's quantization): no integer
# arithmetic for IREE to get wrong, even on quantized tensors.
_DATA_MOVEMENT = frozenset({"VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE", "RESHAPE", "SQUEEZE", "EXPAND_DIMS",
                            "TRANSPOSE", "GATHER", "GATHER_ND", "SLICE", "STRIDED_SLICE", "SPLIT", "SPLIT_V", "PACK",
                            "UNPACK", "TILE", "BROADCAST_TO", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH", "REVERSE_V2"})


def exact_integer_kernel(sg: Subgraph, op: Operator) -> bool:
    """An op computing with TFLite's integer arithmetic; a QUANTIZE or DEQUANTIZE between float and an integer
    type (the edges of a quantized model's float view) is a scale and a rounding, and moving values (a
    variable read or written, a reshape) is no arithmetic."""
    if op.opcode_name in _DATA_MOVEMENT:
        return False
    if op.opcode_name in ("QUANTIZE", "DEQUANTIZE"):
        ends = [sg.tensors[t].dtype for t in (*op.inputs[:1], *op.outputs[:1]) if t >= 0]
        if any(d in ("float32", "float16") for d in ends):
            return False
    return integer_arithmetic(sg, op) and not _float_with_uint4_weights(sg, op)


def _float_with_uint4_weights(sg: Subgraph, op: Operator) -> bool:
    """A float op reading a circle UINT4 weight (FULLY_CONNECTED, GATHER): the weight is dequantized and the
    product taken in float (``ops._block_weights``), no integer arithmetic."""
    tensors = [sg.tensors[t] for t in (*op.inputs, *op.outputs) if t >= 0]
    weights = [t for t in tensors if t.dtype == "uint4"]
    return bool(weights) and all(t.has_data for t in weights) \
        and all(t.dtype in ("float32", "float16", "int32", "int64", "uint4") for t in tensors) \
        and all(sg.tensors[t].dtype == "float32" for t in op.outputs if t >= 0)


def run_compiler(mlir: str, flags: Sequence[str], timeout_s: float) -> bytes:
    """``iree-compile`` on ``mlir``: the ``.vmfb``, or RuntimeError with the compiler's error lines (a crash, or
    no result within ``timeout_s``).  (``iree.compiler.compile_str`` has no timeout.)"""
    import subprocess

    from iree.compiler.tools.binaries import find_tool

    command = [find_tool("iree-compile"), "-", "--iree-vm-bytecode-module-output-format=flatbuffer-binary", *flags]
    try:
        done = subprocess.run(command, input=mlir.encode(), capture_output=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"iree-compile did not finish in {timeout_s:.0f} s") from None
    if done.returncode != 0:
        raise RuntimeError(f"iree-compile failed (exit code {done.returncode}): "
                           + done.stderr.decode(errors="replace"))
    return done.stdout


def compile_timeout_s() -> float:
    try:
        return float(os.environ.get("LITEGPU_IREE_COMPILE_TIMEOUT", COMPILE_TIMEOUT_S))
    except ValueError:
        return COMPILE_TIMEOUT_S


def _declared_argument_dtypes(function: Any) -> list[np.dtype]:
    """The element types the compiled function takes (``iree.abi.declaration``), fences left out."""
    declaration = function.reflection.get("iree.abi.declaration", "")
    head = declaration.split("->", 1)[0]
    found = []
    for element in re.findall(r"tensor<(?:[0-9?]+x)*([a-z]+[0-9]+)>", head):
        if element not in _ABI_DTYPES:
            raise EngineCompileError(f"IREE function argument of type {element}: litegpu has no numpy type for it")
        found.append(np.dtype(_ABI_DTYPES[element]))
    return found


def _refuse_custom_calls(mlir: str, where: str) -> None:
    """A custom call is code of JAX's CPU runtime (LAPACK, host callbacks), which IREE cannot compile."""
    targets = sorted(set(re.findall(r"stablehlo\.custom_call @([\w.$-]+)", mlir)))
    if targets:
        raise EngineCompileError(f"{where}: the program calls {', '.join(targets)}, which IREE cannot compile")


def _last_lines(text: str, lines: int = 6) -> str:
    kept = [line for line in text.strip().splitlines() if "error" in line.lower()] or text.strip().splitlines()
    return " | ".join(kept[:lines])[:1200]


# ---- the engine -----------------------------------------------------------------------------------------

class IreeEngine(Engine):
    """GPU partitions on a Vulkan (or Metal) device through IREE.  ``device``: the device to use (default:
    the first of ``iree_devices(allow_software)``)."""

    name, target = "iree", Target.IREE
    # an op IREE cannot compile (the planner refuses what is known not to): the same program on XLA's CPU
    fallback, fallback_words = Target.XLA_GPU, "the CPU"
    shares_host_state = True  # its GPU's weights are uploaded from the host weights of the model's CPU state

    def __init__(self, settings: EngineSettings | None = None, device: IreeDevice | None = None,
                 allow_software: bool = False, cache: Any = None, cache_key: dict | None = None):
        self.settings = settings or EngineSettings()
        self.allow_software = allow_software
        self._device = device
        self.cache, self.cache_key = cache, dict(cache_key or {})
        self._states: dict[int, IreeState] = {}

    @classmethod
    def create(cls, settings: EngineSettings | None, context: EngineContext) -> "IreeEngine":
        return cls(settings, allow_software=context.allow_software, cache=context.cache, cache_key=context.cache_key)

    @classmethod
    def device_rows(cls, earlier: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """One row per Vulkan device (and Metal on a Mac): what IREE would do with it, beside the GPUs JAX sees
        (``earlier``'s "GPU n" rows)."""
        return vulkan_rows(jax_gpu=any(r["device"].startswith("GPU ") for r in earlier))

    @classmethod
    def gpu_plan_line(cls, devices: Sequence[dict[str, Any]]) -> str | None:
        usable = [] if missing_package() else iree_devices(allow_software=False)
        return f"GPU plans run on IREE ({usable[0].api}: {usable[0].name})" if usable else None

    @property
    def device(self) -> IreeDevice:
        if self._device is None:
            found = iree_devices(self.allow_software) if missing_package() is None else []
            if not found:
                raise AcceleratorUnavailableError(f"the IREE engine has no device: "
                                                  f"{no_device_reason(self.allow_software)}")
            self._device = found[0]
        return self._device

    def available(self) -> bool:
        try:
            self.device
        except AcceleratorUnavailableError:
            return False
        return True

    def installed(self) -> bool:
        """IREE's runtime is there, whether or not a device is (``litegpu doctor`` tells the two apart)."""
        return missing_package() is None

    def describe(self) -> str:
        return (f"iree-base-runtime {iree_version()} (compiler {iree_version('iree-base-compiler')}); "
                f"{self.device.api}: {self.device.describe()}")

    def unavailable_reason(self) -> str:
        return no_device_reason(self.allow_software)

    def unsupported(self, model: Model, subgraph: int, op_indices: Sequence[int]) -> dict[int, str]:
        refused = op_reasons(model, subgraph, op_indices, Target.XLA_GPU)
        sg = model.subgraphs[subgraph]
        for i in op_indices:
            if i not in refused:
                reason = self._policy_reason(model, sg, sg.operators[i], set())
                if reason is not None:
                    refused[i] = reason
        return refused

    def _policy_reason(self, model: Model, sg: Subgraph, op: Operator, seen: set[int]) -> str | None:
        """What this engine refuses beyond the GPU's op rules, looking into the subgraphs an op calls."""
        tensors = [sg.tensors[t] for t in (*op.inputs, *op.outputs) if t >= 0]
        if any(t.dtype in _COMPLEX_DTYPES for t in tensors):
            return "complex numbers: IREE's GPU code generation has none"
        if exact_integer_kernel(sg, op):
            return ("an exact TFLite integer kernel, which IREE 3.13 compiles wrongly in places (IREE's GPU runs "
                    "quantized models as their float view, the default GpuOptions(quantized_execution=\"float\"); "
                    "ops kept in integers there stay on the CPU)")
        for index in called_subgraphs(op):
            if index in seen:
                continue
            seen.add(index)
            inner = model.subgraphs[index]
            for inner_op in inner.operators:
                reason = self._policy_reason(model, inner, inner_op, seen)
                if reason is not None:
                    return f"calls subgraph {index}, where {inner_op} {reason}"
        return None

    def states(self) -> list[IreeState]:
        """The device states made so far (one per model)."""
        return list(self._states.values())

    def placement_report(self) -> Any:
        """The weights uploaded to the device, over every model's state."""
        from ..sharding import PlacementReport

        reports = [state.placement_report() for state in self.states()]
        return PlacementReport(1, [w for r in reports for w in r.weights],
                               [sum(sum(r.measured_bytes_per_device or [0]) for r in reports)])

    def state(self, host_state: Any) -> IreeState:
        """The device state over ``host_state`` (one per model: its weights uploaded once)."""
        key = id(host_state)
        if key not in self._states:
            self._states[key] = IreeState(self.device, host_state)
        return self._states[key]

    def compile(self, model: Model, op_range: OpRange, settings: EngineSettings, cache: Any = None,
                cache_key: dict | None = None, host_state: Any = None) -> IreeExecutable:
        """An executable for ``op_range``; ``host_state`` is the model's ``XlaState`` on the CPU (its weights,
        shared with the model's XLA CPU partitions)."""
        if host_state is None:
            from ..xla.backend import XlaBackend
            from ..xla.state import XlaState
            from ..device_arrays import device_for

            host_state = XlaState(model, device_for("cpu"), XlaBackend.storage_dtype(settings.precision))
        return IreeExecutable(model, op_range, settings, self.state(host_state), compile_target(self.device),
                              cache if cache is not None else self.cache,
                              cache_key if cache_key is not None else self.cache_key, device=self.device)

    def reset_variables(self) -> None:
        """Resource variables back to their initial values (``CompiledModel.reset_all_variables``)."""
        for state in self._states.values():
            state.variables = {}

    def forget(self, model: Model) -> None:
        self._states.clear()


__all__ = ["COMPILE_TIMEOUT_S", "CompileTarget", "IreeArray", "IreeDevice", "IreeEngine", "IreeExecutable", "IreeSession",
           "IreeState", "TARGET_ENV", "compile_target", "exact_integer_kernel", "iree_devices", "iree_version",
           "missing_package", "named_vulkan_target", "no_device_reason", "run_compiler", "session_for",
           "vulkan_target_attribute", "with_device_target"]
