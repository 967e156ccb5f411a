"""The memory guard: a compiled XLA program that cannot fit is refused with an ``OutOfMemoryError``.

Without it, a program whose buffers do not fit ends badly: XLA CPU fails the run with RESOURCE_EXHAUSTED
only when it is waited on (runs are asynchronous), and without an address-space limit the kernel's OOM killer
ends the whole process.  XLA knows, once a program is compiled, how many bytes a run will allocate (its
buffer assignment: temporaries and outputs), so the first run of each compiled program compares that with
what this process can still get, and refuses to run when it cannot fit.

Only bytes the run will newly allocate are counted: the weights are already placed (at load) and, on the
CPU, are pages of the memory-mapped file, already part of the mapped address space.  Refusing a model that
would have run is worse than not guarding, so the estimate counts nothing speculative and has no margin.
``LITEGPU_MEMORY_GUARD=0`` turns the check off (errors are still converted).
"""

from __future__ import annotations

import os
import resource
from collections.abc import Sequence
from typing import Any

from ..errors import OutOfMemoryError

# Phrases of XLA / PJRT errors that mean an allocation failed (CPU: "RESOURCE_EXHAUSTED: Out of memory
# allocating N bytes."; GPU: "RESOURCE_EXHAUSTED: Out of memory while trying to allocate ...").
_OOM_PHRASES = ("RESOURCE_EXHAUSTED", "Out of memory", "out of memory", "std::bad_alloc")


def guard_enabled() -> bool:
    return os.environ.get("LITEGPU_MEMORY_GUARD", "1").strip().lower() not in ("0", "false", "no", "off")


def needed_bytes(compiled: Any, host_argument_bytes: int = 0) -> int | None:
    """Bytes a run of ``compiled`` (a ``jax.stages.Compiled``) allocates: its temporaries and its outputs
    (less those aliasing inputs), plus arguments still on the host, which the call copies in.  None when
    the platform does not say (``memory_analysis()`` may be unimplemented or return None)."""
    try:
        stats = compiled.memory_analysis()
    except Exception:  # not implemented on this platform / for a deserialized executable
        return None
    if stats is None:
        return None
    temp = int(getattr(stats, "temp_size_in_bytes", 0) or 0)
    output = int(getattr(stats, "output_size_in_bytes", 0) or 0) - int(getattr(stats, "alias_size_in_bytes", 0) or 0)
    return max(0, temp) + max(0, output) + host_argument_bytes


def _kilobyte_fields(path: str) -> dict[str, int]:
    """The "Name:  N kB" lines of a /proc file, in bytes ({} where it cannot be read)."""
    found = {}
    try:
        with open(path) as f:
            for line in f:
                key, _, rest = line.partition(":")
                parts = rest.split()
                if len(parts) == 2 and parts[1] == "kB":
                    found[key] = int(parts[0]) * 1024
    except (OSError, ValueError):
        pass
    return found


def _meminfo() -> dict[str, int]:
    return _kilobyte_fields("/proc/meminfo")


def _mapped_bytes() -> int | None:
    """This process's mapped address space (VmSize), which RLIMIT_AS bounds."""
    return _kilobyte_fields("/proc/self/status").get("VmSize")


def _cgroup_room() -> int | None:
    """Room left under a cgroup v2 memory limit (containers), None without one."""
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        if limit == "max":
            return None
        with open("/sys/fs/cgroup/memory.current") as f:
            return int(limit) - int(f.read().strip())
    except (OSError, ValueError):
        return None


def host_available_bytes() -> tuple[int, str] | None:
    """(bytes, what bounds them) that this process can still allocate on the host: the smallest of the
    machine's available memory (MemAvailable, plus free swap, which the kernel can also use), the
    address-space limit less what is mapped, and a cgroup's limit less its use.  None when unknown."""
    bounds = []
    info = _meminfo()
    if "MemAvailable" in info:
        bounds.append((info["MemAvailable"] + info.get("SwapFree", 0), "available memory (MemAvailable)"))
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    mapped = _mapped_bytes()
    if soft != resource.RLIM_INFINITY and mapped is not None:
        bounds.append((soft - mapped, "the address-space limit (RLIMIT_AS) less what is mapped"))
    room = _cgroup_room()
    if room is not None:
        bounds.append((room, "the cgroup memory limit less its use"))
    return min(bounds) if bounds else None


def device_available_bytes(device: Any) -> tuple[int, str] | None:
    """Free bytes of an accelerator from ``device.memory_stats()`` (GPUs); None where it says nothing."""
    try:
        stats = device.memory_stats()
    except Exception:
        return None
    if not stats or "bytes_limit" not in stats:
        return None
    return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0)), f"free memory of {device}"


def available_bytes(device: Any) -> tuple[int, str] | None:
    if getattr(device, "platform", "cpu") == "cpu":
        return host_available_bytes()
    return device_available_bytes(device)


def host_bytes(args: Sequence[Any]) -> int:
    """Bytes of the arguments that are not device arrays yet (the call copies them to the device)."""
    return sum(int(getattr(a, "nbytes", 0)) for a in args if not hasattr(a, "block_until_ready"))


def gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if abs(n) >= 2**28 else f"{n / 2**20:.1f} MiB"


def check_fits(compiled: Any, device: Any, args: Sequence[Any], where: str) -> None:
    """Raise ``OutOfMemoryError`` when a run of ``compiled`` on ``device`` cannot fit in what is left."""
    if not guard_enabled():
        return
    needed = needed_bytes(compiled, host_bytes(args))
    available = available_bytes(device)
    if needed is None or available is None:
        return
    room, bound = available
    if needed > room:
        raise OutOfMemoryError(f"{where} needs {gib(needed)} ({needed} bytes) of memory to run (XLA's buffers: "
                               f"temporaries and outputs) but {gib(room)} ({room} bytes) is left, bounded by {bound}; "
                               "not run (free memory, raise the limit, or run smaller inputs)")


def is_out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` is an allocation failure: Python's MemoryError or XLA's RESOURCE_EXHAUSTED."""
    if isinstance(error, MemoryError):
        return True
    return isinstance(error, RuntimeError) and any(p in str(error) for p in _OOM_PHRASES)


def out_of_memory(error: BaseException, where: str, doing: str) -> OutOfMemoryError:
    """The ``OutOfMemoryError`` to raise from an allocation failure while ``doing`` (compiling, running)."""
    if isinstance(error, OutOfMemoryError):
        return error
    detail = str(error).strip().splitlines()[0][:300] if str(error).strip() else type(error).__name__
    return OutOfMemoryError(f"{where} ran out of memory while {doing}: {detail}")
