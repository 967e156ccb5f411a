"""The device helpers under their earlier name: they live in ``backends.device_arrays`` (engine-neutral), and
this module only re-exports them for scripts that import them from here."""

from ..device_arrays import available_platforms, device_for, is_device_array, jax_module

__all__ = ["available_platforms", "device_for", "is_device_array", "jax_module"]
