"""Device arrays: JAX itself, imported on first use, the devices it sees, and whether a value is one of its arrays.

JAX's arrays are litegpu's device arrays whatever engine made them, not an XLA engine's detail: a ``TensorBuffer``
holds them and takes them in and out through DLPack (``from_dlpack``, ``to_dlpack``), the ``Environment`` names its
devices as JAX sees them (``Options(devices=...)``, ``BatchedModel``'s data-parallel mesh), the runtime places
inputs and keeps a signature's outputs on the device as them, the generation loop keeps its KV cache as them, and
IREE hands its Vulkan outputs over as them for interop.  So they live here, beside the engine interface, where the
engines and the runtime both reach them without naming an engine (issue 36); the XLA engine, which runs on
exactly these devices, imports them from here like everyone else.  Importing this module loads no JAX.
"""

from __future__ import annotations

import functools
from typing import Any

from ..errors import AcceleratorUnavailableError


@functools.lru_cache(maxsize=1)
def jax_module() -> Any:
    import jax

    # TFLite has int64 and float64 tensors; without x64 jax would silently narrow them.
    jax.config.update("jax_enable_x64", True)
    return jax


def available_platforms() -> set[str]:
    jax = jax_module()
    found = set()
    for platform in ("cpu", "gpu"):
        try:
            if jax.devices(platform):
                found.add(platform)
        except RuntimeError:
            pass
    return found


def _jaxlib_version() -> str:
    import jaxlib

    return getattr(jaxlib, "__version__", "unknown")


def device_for(platform: str) -> Any:
    jax = jax_module()
    try:
        return jax.devices(platform)[0]
    except RuntimeError:
        raise AcceleratorUnavailableError(f"no {platform.upper()} device is visible to JAX on this machine") from None


def is_device_array(value: Any) -> bool:
    """A jax array (without importing jax when nobody has)."""
    return type(value).__module__.startswith("jax") and hasattr(value, "block_until_ready")
