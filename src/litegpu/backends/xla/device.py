"""JAX itself, imported on first use, and the devices it sees."""

from __future__ import annotations

import functools
from typing import Any

from ...errors import AcceleratorUnavailableError


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
