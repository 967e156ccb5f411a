"""Compiling for a GPU that is not in this machine: XLA's GPU compiler, given the card's description.

XLA compiles for an NVIDIA GPU without one when JAX's CUDA plugin is installed and the compiler is handed the
card's description (``targets/h100.txtpb``: compute capability, memory, caches; an H100 and an H200 differ only in
memory size and bandwidth).  What it makes is the program a GPU would run, so it tells, without a GPU: how many
kernels a call launches, which dtypes the parameters keep on the device, the temporary bytes a call allocates (a
weight materialized wider than stored shows up there) and whether a weight was compiled into the program as a
constant.  It cannot time anything.

    target = DevicelessTarget.cuda("h100")       # needs jax[cuda12] or jax[cuda13] (no GPU needed)
    state = XlaState(model, target)               # weights as shapes, placed as they would be on the GPU
    compiled = XlaBackend(model, 0, "gpu", state=state).lower(input_specs).compile()

``DevicelessTarget.host()`` is the same thing with the host's CPU as the sharding, for tests on machines without the
CUDA plugin: programs are lowered with the GPU's rules (what the parameters are is decided there) and compiled by
XLA CPU.  Set ``JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1`` before importing jax where no CUDA driver is installed
(``bench/gpu/gpu_compile.py`` does).
"""

from __future__ import annotations

import os
from typing import Any

from ...errors import AcceleratorUnavailableError

TARGETS_DIR = os.path.join(os.path.dirname(__file__), "targets")


def target_names() -> list[str]:
    return sorted(name[:-len(".txtpb")] for name in os.listdir(TARGETS_DIR) if name.endswith(".txtpb"))


class DevicelessTarget:
    """A device to compile for and never run on; ``XlaState`` holds weights for it as ``jax.ShapeDtypeStruct``."""

    deviceless = True

    def __init__(self, sharding: Any, memory_bytes: int, name: str, platform: str = "gpu"):
        self.sharding, self.memory_bytes, self.device_kind, self.platform = sharding, int(memory_bytes), name, platform

    @classmethod
    def cuda(cls, name: str = "h100") -> "DevicelessTarget":
        """An NVIDIA GPU from its description in ``targets/<name>.txtpb``."""
        path = os.path.join(TARGETS_DIR, f"{name}.txtpb")
        if not os.path.isfile(path):
            raise AcceleratorUnavailableError(f"no description of a GPU named {name!r}; known: {target_names()}")
        with open(path) as f:
            config = f.read()
        from jax.experimental import topologies
        from jax.sharding import NamedSharding, PartitionSpec

        try:
            topology = topologies.get_topology_desc(platform="cuda", topology="1x1x1", target_config=config)
        except Exception as e:  # no CUDA plugin: XLA's GPU compiler is not installed
            raise AcceleratorUnavailableError(
                f"cannot compile for {name} here ({type(e).__name__}: {e}); install JAX's CUDA plugin "
                "(pip install 'litegpu[cuda13]') and set JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1 where no GPU driver is") from e
        sharding = NamedSharding(topologies.make_mesh(topology, (1,), ("d",)), PartitionSpec())
        return cls(sharding, _memory_size(config), _description(config) or name)

    @classmethod
    def host(cls, memory_bytes: int = 80 << 30) -> "DevicelessTarget":
        """The host CPU standing in as the sharding of a GPU program (lowered with the GPU's rules)."""
        import jax

        return cls(jax.sharding.SingleDeviceSharding(jax.devices("cpu")[0]), memory_bytes, "host CPU (standing in)")

    def memory_stats(self) -> dict[str, int]:
        """As a JAX GPU device reports it: all of the card's memory free (``backends.memory``)."""
        return {"bytes_limit": self.memory_bytes, "bytes_in_use": 0}

    def __repr__(self) -> str:
        return f"DevicelessTarget({self.device_kind!r})"


def _memory_size(config: str) -> int:
    for line in config.splitlines():
        key, _, value = line.strip().partition(":")
        if key == "device_memory_size":
            return int(value)
    return 80 << 30


def _description(config: str) -> str | None:
    for line in config.splitlines():
        key, _, value = line.strip().partition(":")
        if key == "device_description_str":
            return value.strip().strip('"')
    return None
