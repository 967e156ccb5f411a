"""The environment: what compiled models share (devices, the persistent compile cache)."""

from __future__ import annotations

import dataclasses
import os
import threading
from typing import Any

from ..errors import ClosedError, InvalidArgumentError


@dataclasses.dataclass(frozen=True)
class EnvironmentOptions:
    """Accepted for compatibility with ``ai_edge_litert``; litegpu needs no runtime or vendor paths."""

    runtime_path: str | None = None
    compiler_plugin_path: str = ""
    dispatch_library_path: str = ""
    compile_cache_dir: str | None = None


class Environment:
    """Shared by the models created with it: the device each platform uses, and XLA's
    persistent compilation cache (``compile_cache_dir``) so that a second process compiling the same
    program reads it from disk.  Thread-safe.
    """

    def __init__(self, options: EnvironmentOptions | None = None):
        self._options = options or EnvironmentOptions()
        self._lock = threading.Lock()
        self._devices: dict[str, Any] = {}
        self._closed = False
        if self._options.compile_cache_dir:
            enable_compile_cache(self._options.compile_cache_dir)

    @classmethod
    def create(cls, options: EnvironmentOptions | str | None = None, runtime_path: str | None = None,
               compiler_plugin_path: str = "", dispatch_library_path: str = "",
               compile_cache_dir: str | None = None) -> "Environment":
        if isinstance(options, str):
            options, runtime_path = None, options
        if options is not None and (runtime_path or compiler_plugin_path or dispatch_library_path):
            raise InvalidArgumentError("Pass either options or environment path shortcuts.")
        if options is None:
            options = EnvironmentOptions(runtime_path, compiler_plugin_path, dispatch_library_path, compile_cache_dir)
        return cls(options)

    @property
    def options(self) -> EnvironmentOptions:
        return self._options

    def device(self, platform: str) -> Any:
        """The device of ``platform`` ("cpu" or "gpu"), or AcceleratorUnavailableError."""
        self._check_open()
        with self._lock:
            if platform not in self._devices:
                from ..backends.device_arrays import device_for

                self._devices[platform] = device_for(platform)
            return self._devices[platform]

    @staticmethod
    def platforms() -> set[str]:
        """The platforms JAX sees on this machine ({"cpu"} or {"cpu", "gpu"})."""
        from ..backends.device_arrays import available_platforms

        return available_platforms()

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("this Environment was closed")

    def close(self) -> None:
        self._closed = True
        self._devices.clear()

    def __enter__(self) -> "Environment":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def enable_compile_cache(directory: str) -> None:
    """Turn on JAX's persistent compilation cache in ``directory`` (created if missing)."""
    from ..backends.device_arrays import jax_module

    os.makedirs(directory, exist_ok=True)
    jax = jax_module()
    jax.config.update("jax_compilation_cache_dir", os.fspath(directory))
    # Small programs too: a model's signatures are often tiny but many.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
