"""The Vulkan devices of this machine, read from the Vulkan loader itself (``ctypes``, no extra package).

The IREE engine (``backends.iree``) compiles for the device it will run on, so it needs more than a name:
which number types the device computes and stores (float64, float16, int64, int8...), its subgroup size and
operations, and its compute limits (workgroup sizes, shared memory).  IREE's runtime lists devices by name
only, and ``vulkaninfo`` is a separate package, so the properties are asked of ``libvulkan`` directly:
``vkGetPhysicalDeviceProperties2`` / ``Features2`` with the Vulkan 1.1 and 1.2 structures chained, which
every driver IREE can use has (IREE needs Vulkan 1.2 outside Android).

Only the fields litegpu reads are declared; each structure ends in spare bytes, so that a driver writing the
full structure (of whatever Vulkan version) writes into memory we own.  A machine without a Vulkan loader,
or whose loader finds no driver, has no devices: ``vulkan_devices()`` returns ``[]`` and ``vulkan_problem()``
says why.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import functools
import sys

# VkPhysicalDeviceType
DEVICE_TYPES = {0: "other", 1: "integrated GPU", 2: "discrete GPU", 3: "virtual GPU", 4: "CPU (software)"}
# PCI vendor ids (and Khronos ids for vendors without one), as Vulkan reports them
VENDORS = {0x1002: "AMD", 0x1010: "Imagination", 0x10DE: "NVIDIA", 0x13B5: "ARM", 0x5143: "Qualcomm",
           0x8086: "Intel", 0x106B: "Apple", 0x10005: "Mesa", 0x1AE0: "Google", 0x14E4: "Broadcom"}
INTEL_VENDOR_ID = 0x8086
# VkSubgroupFeatureFlagBits
SUBGROUP_ARITHMETIC, SUBGROUP_SHUFFLE = 0x4, 0x10
# VkMemoryHeapFlagBits
_HEAP_DEVICE_LOCAL = 0x1

_API_1_2 = (1 << 22) | (2 << 12)
_SPARE = 1024  # bytes after the declared fields of each structure


def _version(v: int) -> str:
    return f"{(v >> 22) & 0x7F}.{(v >> 12) & 0x3FF}.{v & 0xFFF}"


class _ApplicationInfo(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_uint32), ("pNext", ctypes.c_void_p), ("pApplicationName", ctypes.c_char_p),
                ("applicationVersion", ctypes.c_uint32), ("pEngineName", ctypes.c_char_p),
                ("engineVersion", ctypes.c_uint32), ("apiVersion", ctypes.c_uint32)]


class _InstanceCreateInfo(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_uint32), ("pNext", ctypes.c_void_p), ("flags", ctypes.c_uint32),
                ("pApplicationInfo", ctypes.POINTER(_ApplicationInfo)), ("enabledLayerCount", ctypes.c_uint32),
                ("ppEnabledLayerNames", ctypes.c_void_p), ("enabledExtensionCount", ctypes.c_uint32),
                ("ppEnabledExtensionNames", ctypes.c_void_p)]


class _Limits(ctypes.Structure):
    """VkPhysicalDeviceLimits up to the compute limits (the rest is spare bytes)."""

    _fields_ = ([(f"u{i}", ctypes.c_uint32) for i in range(11)]
                + [("bufferImageGranularity", ctypes.c_uint64), ("sparseAddressSpaceSize", ctypes.c_uint64)]
                + [(f"v{i}", ctypes.c_uint32) for i in range(38)]
                + [("maxComputeSharedMemorySize", ctypes.c_uint32),
                   ("maxComputeWorkGroupCount", ctypes.c_uint32 * 3),
                   ("maxComputeWorkGroupInvocations", ctypes.c_uint32),
                   ("maxComputeWorkGroupSize", ctypes.c_uint32 * 3),
                   ("spare", ctypes.c_uint8 * _SPARE)])


class _Properties(ctypes.Structure):
    _fields_ = [("apiVersion", ctypes.c_uint32), ("driverVersion", ctypes.c_uint32), ("vendorID", ctypes.c_uint32),
                ("deviceID", ctypes.c_uint32), ("deviceType", ctypes.c_int32), ("deviceName", ctypes.c_char * 256),
                ("pipelineCacheUUID", ctypes.c_uint8 * 16), ("limits", _Limits)]


class _Properties2(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_uint32), ("pNext", ctypes.c_void_p), ("properties", _Properties)]


class _Vulkan11Properties(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_uint32), ("pNext", ctypes.c_void_p), ("deviceUUID", ctypes.c_uint8 * 16),
                ("driverUUID", ctypes.c_uint8 * 16), ("deviceLUID", ctypes.c_uint8 * 8),
                ("deviceNodeMask", ctypes.c_uint32), ("deviceLUIDValid", ctypes.c_uint32),
                ("subgroupSize", ctypes.c_uint32), ("subgroupSupportedStages", ctypes.c_uint32),
                ("subgroupSupportedOperations", ctypes.c_uint32), ("spare", ctypes.c_uint8 * _SPARE)]


class _Vulkan12Properties(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_uint32), ("pNext", ctypes.c_void_p), ("driverID", ctypes.c_uint32),
                ("driverName", ctypes.c_char * 256), ("driverInfo", ctypes.c_char * 256),
                ("spare", ctypes.c_uint8 * _SPARE)]


class _Features2(ctypes.Structure):
    """VkPhysicalDeviceFeatures2: the 55 VkBool32 of VkPhysicalDeviceFeatures (shaderFloat64 is the 40th)."""

    _fields_ = [("sType", ctypes.c_uint32), ("pNext", ctypes.c_void_p), ("features", ctypes.c_uint32 * 55),
                ("spare", ctypes.c_uint8 * _SPARE)]


_SHADER_FLOAT64, _SHADER_INT64, _SHADER_INT16 = 39, 40, 41


class _Vulkan11Features(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_uint32), ("pNext", ctypes.c_void_p), ("storageBuffer16BitAccess", ctypes.c_uint32),
                ("spare", ctypes.c_uint8 * _SPARE)]


class _Vulkan12Features(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_uint32), ("pNext", ctypes.c_void_p), ("samplerMirrorClampToEdge", ctypes.c_uint32),
                ("drawIndirectCount", ctypes.c_uint32), ("storageBuffer8BitAccess", ctypes.c_uint32),
                ("uniformAndStorageBuffer8BitAccess", ctypes.c_uint32), ("storagePushConstant8", ctypes.c_uint32),
                ("shaderBufferInt64Atomics", ctypes.c_uint32), ("shaderSharedInt64Atomics", ctypes.c_uint32),
                ("shaderFloat16", ctypes.c_uint32), ("shaderInt8", ctypes.c_uint32), ("spare", ctypes.c_uint8 * _SPARE)]


class _MemoryProperties(ctypes.Structure):
    _fields_ = [("memoryTypeCount", ctypes.c_uint32), ("memoryTypes", ctypes.c_uint32 * 64),
                ("memoryHeapCount", ctypes.c_uint32), ("memoryHeaps", ctypes.c_uint64 * 32),
                ("spare", ctypes.c_uint8 * _SPARE)]


@dataclasses.dataclass(frozen=True)
class VulkanDevice:
    """One Vulkan physical device: what it is, and what the IREE compiler must know to target it."""

    index: int                       # position in vkEnumeratePhysicalDevices
    name: str
    vendor_id: int
    device_id: int
    device_type: str                 # DEVICE_TYPES value
    api_version: str
    driver: str                      # driver name and info, e.g. "llvmpipe (Mesa 22.3.6 (LLVM 15.0.6))"
    uuid: str                        # deviceUUID, hex without dashes (IREE's device path is "GPU-<uuid>")
    memory_bytes: int                # device-local heap(s)
    float64: bool
    float16: bool
    int64: bool
    int16: bool
    int8: bool
    storage16: bool                  # 16-bit types in storage buffers
    storage8: bool
    subgroup_size: int
    subgroup_arithmetic: bool
    subgroup_shuffle: bool
    max_workgroup_size: tuple[int, int, int]
    max_workgroup_invocations: int
    max_workgroup_memory_bytes: int
    max_workgroup_count: tuple[int, int, int]
    vulkan_1_2: bool                 # IREE's Vulkan driver needs it

    @property
    def vendor(self) -> str:
        return VENDORS.get(self.vendor_id, f"vendor 0x{self.vendor_id:04x}")

    @property
    def is_software(self) -> bool:
        """A CPU implementation (Mesa's lavapipe, SwiftShader): Vulkan on the CPU, slower than litegpu's CPU
        engines, so never picked as "the GPU" unless asked for by name."""
        return self.device_type == DEVICE_TYPES[4]

    def describe(self) -> str:
        memory = f", {self.memory_bytes / 2**30:.1f} GiB" if self.memory_bytes else ""
        numbers = ", ".join(n for n, ok in (("fp64", self.float64), ("fp16", self.float16), ("int64", self.int64),
                                            ("int8", self.int8)) if ok)
        return f"{self.name} ({self.device_type}, {self.driver}, Vulkan {self.api_version}{memory}; {numbers})"


def _loader_names() -> list[str]:
    if sys.platform == "win32":
        return ["vulkan-1.dll"]
    if sys.platform == "darwin":
        return ["libvulkan.1.dylib", "libvulkan.dylib"]
    found = ctypes.util.find_library("vulkan")
    return ["libvulkan.so.1"] + ([found] if found else [])


def _load_loader() -> ctypes.CDLL:
    errors = []
    for name in _loader_names():
        try:
            return ctypes.CDLL(name)
        except OSError as e:
            errors.append(str(e))
    raise OSError("no Vulkan loader (libvulkan) on this machine: " + "; ".join(errors))


@functools.lru_cache(maxsize=1)
def _query() -> tuple[tuple[VulkanDevice, ...], str | None]:
    try:
        return tuple(_enumerate(_load_loader())), None
    except OSError as e:
        return (), str(e)


def vulkan_devices() -> list[VulkanDevice]:
    """The Vulkan devices the loader finds (asked once per process); [] without a loader or a driver."""
    return list(_query()[0])


def vulkan_problem() -> str | None:
    """Why there are no Vulkan devices (None when there are, or when the loader simply found none)."""
    devices, problem = _query()
    return None if devices else problem


def _enumerate(vk: ctypes.CDLL) -> list[VulkanDevice]:
    app = _ApplicationInfo(0, None, b"litegpu", 1, b"litegpu", 1, _API_1_2)
    info = _InstanceCreateInfo(1, None, 0, ctypes.pointer(app), 0, None, 0, None)
    instance = ctypes.c_void_p()
    result = vk.vkCreateInstance(ctypes.byref(info), None, ctypes.byref(instance))
    if result != 0:
        raise OSError(f"vkCreateInstance failed (VkResult {result}): no usable Vulkan driver")
    try:
        count = ctypes.c_uint32(0)
        vk.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), None)
        handles = (ctypes.c_void_p * count.value)()
        if count.value:
            vk.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), handles)
        return [_describe(vk, index, ctypes.c_void_p(h)) for index, h in enumerate(handles[:count.value])]
    finally:
        vk.vkDestroyInstance(instance, None)


def _describe(vk: ctypes.CDLL, index: int, handle: ctypes.c_void_p) -> VulkanDevice:
    basic = _Properties()
    vk.vkGetPhysicalDeviceProperties(handle, ctypes.byref(basic))
    modern = basic.apiVersion >= _API_1_2
    p11, p12, f11, f12 = _Vulkan11Properties(50), _Vulkan12Properties(52), _Vulkan11Features(49), _Vulkan12Features(51)
    features = _Features2(1000059000)
    if modern:  # the 1.1 / 1.2 structures exist only on devices of Vulkan 1.2 or later
        p11.pNext = ctypes.addressof(p12)
        props = _Properties2(1000059001, ctypes.addressof(p11))
        vk.vkGetPhysicalDeviceProperties2(handle, ctypes.byref(props))
        f11.pNext = ctypes.addressof(f12)
        features.pNext = ctypes.addressof(f11)
        vk.vkGetPhysicalDeviceFeatures2(handle, ctypes.byref(features))
    else:
        vk.vkGetPhysicalDeviceFeatures(handle, ctypes.byref(features, _Features2.features.offset))
    memory = _MemoryProperties()
    vk.vkGetPhysicalDeviceMemoryProperties(handle, ctypes.byref(memory))
    heaps = [(memory.memoryHeaps[2 * i], memory.memoryHeaps[2 * i + 1]) for i in range(min(memory.memoryHeapCount, 16))]
    limits = basic.limits
    driver = p12.driverName.decode(errors="replace")
    if p12.driverInfo:
        driver += f" ({p12.driverInfo.decode(errors='replace')})"
    return VulkanDevice(
        index=index, name=basic.deviceName.decode(errors="replace"), vendor_id=basic.vendorID,
        device_id=basic.deviceID, device_type=DEVICE_TYPES.get(basic.deviceType, "other"),
        api_version=_version(basic.apiVersion), driver=driver or f"driver {basic.driverVersion}",
        uuid=bytes(p11.deviceUUID).hex(),
        memory_bytes=sum(size for size, flags in heaps if flags & _HEAP_DEVICE_LOCAL),
        float64=bool(features.features[_SHADER_FLOAT64]), float16=bool(f12.shaderFloat16),
        int64=bool(features.features[_SHADER_INT64]), int16=bool(features.features[_SHADER_INT16]),
        int8=bool(f12.shaderInt8), storage16=bool(f11.storageBuffer16BitAccess), storage8=bool(f12.storageBuffer8BitAccess),
        subgroup_size=int(p11.subgroupSize) or 1,
        subgroup_arithmetic=bool(p11.subgroupSupportedOperations & SUBGROUP_ARITHMETIC),
        subgroup_shuffle=bool(p11.subgroupSupportedOperations & SUBGROUP_SHUFFLE),
        max_workgroup_size=tuple(int(v) for v in limits.maxComputeWorkGroupSize),
        max_workgroup_invocations=int(limits.maxComputeWorkGroupInvocations),
        max_workgroup_memory_bytes=int(limits.maxComputeSharedMemorySize),
        max_workgroup_count=tuple(int(v) for v in limits.maxComputeWorkGroupCount),
        vulkan_1_2=modern)


__all__ = ["DEVICE_TYPES", "INTEL_VENDOR_ID", "VENDORS", "VulkanDevice", "vulkan_devices", "vulkan_problem"]
