"""What the GPU tests share: which accelerator they run on, the environment, and model loaders.

``LITEGPU_TEST_ACCELERATOR`` picks the device (default ``gpu``):

- ``gpu``: the GPU litegpu would use: XLA where JAX sees a GPU (CUDA, ROCm); where it sees none, IREE on a
  Vulkan device (``GpuOptions(engine="iree")``, which takes Mesa's software lavapipe too: every code path of
  the IREE engine runs on it, see ``backends/iree/engine.py``).  Modules skip themselves when there is neither, so
  on a machine without them ``python -m pytest tests/gpu`` costs one ``import jax`` and a Vulkan query.
- ``iree``: IREE on a Vulkan device even where JAX sees a GPU (NVIDIA's Vulkan driver, say).
- ``cpu``: the CPU stands in for the GPU.  The environment claims a GPU and hands out the XLA CPU
  device for it, so every GPU code path of litegpu (the GPU plan and its splits, the float view of
  quantized models, fp16 storage, device-resident buffers, events) runs, only on the CPU.  It proves
  the tests' logic where no GPU is lent; it proves nothing about a GPU's numerics or speed.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ACCELERATOR = os.environ.get("LITEGPU_TEST_ACCELERATOR", "gpu").strip().lower()
TESTS = Path(__file__).resolve().parents[1]


def require_accelerator() -> str:
    """Call at module level: skips the module unless the chosen accelerator is there."""
    if ACCELERATOR not in ("gpu", "iree", "cpu"):
        raise pytest.UsageError(f"LITEGPU_TEST_ACCELERATOR is 'gpu', 'iree' or 'cpu', not {ACCELERATOR!r}")
    if on_iree():
        from litegpu.backends.iree.engine import iree_devices, no_device_reason

        if not iree_devices(allow_software=True):
            where = "JAX sees no GPU, and " if ACCELERATOR == "gpu" else ""
            pytest.skip(f"{where}IREE has no Vulkan device: {no_device_reason(allow_software=True)} (Debian: "
                        "apt-get install mesa-vulkan-drivers gives the software lavapipe; set "
                        "LITEGPU_TEST_ACCELERATOR=cpu to run these tests with the CPU standing in)",
                        allow_module_level=True)
    return ACCELERATOR


@functools.lru_cache(maxsize=1)
def _jax_sees_a_gpu() -> bool:
    from litegpu.backends.xla.device import available_platforms

    return "gpu" in available_platforms()


def on_iree() -> bool:
    """The GPU tests run through the IREE engine (on a Vulkan device)."""
    return ACCELERATOR == "iree" or ACCELERATOR == "gpu" and not _jax_sees_a_gpu()


def on_real_gpu() -> bool:
    """A GPU that JAX sees runs the tests (XLA's device arrays, DLPack with torch and cupy)."""
    return ACCELERATOR == "gpu" and _jax_sees_a_gpu()


def gpu_engine() -> str:
    """The engine of the GPU partitions: "iree" or "xla"."""
    return "iree" if on_iree() else "xla"


def gpu_target() -> Any:
    """The plan target of GPU partitions."""
    from litegpu.ops import Target

    return Target.IREE if on_iree() else Target.XLA_GPU


def make_environment() -> Any:
    """The Environment the tests create models with: the real one, or the CPU standing in for a GPU
    (the one ``bench/gpu/bench_gpu.py --accelerator cpu`` uses)."""
    from oracle import load_bench_module

    return load_bench_module("bench_gpu").environment("cpu" if ACCELERATOR == "cpu" else "gpu")


# Models that run whole on the CPU through IREE: it refuses TFLite's exact integer kernels (backends/iree/engine.py),
# and a model with variables is kept whole rather than split.  (name, quantized_execution) -> why; strict xfails
# through IREE, so that a model IREE comes to run is noticed.
IREE_KEEPS_ON_CPU = {
    ("lstm_fused_dynamic", "integer"): "hybrid LSTM kernels refused by IREE, in a model with variable tensors",
    ("lstm_fused_int8", "integer"): "int8 LSTM kernels refused by IREE, in a model with variable tensors",
    ("lstm_fused_dynamic", "float"): "the float view keeps the hybrid LSTM in integers; IREE refuses it",
    ("lstm_fused_int8", "float"): "the float view keeps the int8 LSTM in integers; IREE refuses it",
    ("streaming_int8", "integer"): "int8 kernels refused by IREE, in a model with resource variables",
    ("microwakeword_okay_nabu", "integer"): "int8 kernels refused by IREE, in a model with resource variables",
}


def iree_keeps_on_cpu(name: str, quantized_execution: str) -> list:
    """The strict xfail of a model IREE leaves whole on the CPU (none off IREE)."""
    why = IREE_KEEPS_ON_CPU.get((name, quantized_execution))
    return [pytest.mark.xfail(reason=f"through IREE: {why}", strict=True)] if why and on_iree() else []


def marked(marks: list) -> Any:
    """A decorator applying ``marks`` (``iree_keeps_on_cpu``'s) to a test function."""
    def apply(test: Any) -> Any:
        for mark in marks:
            test = mark(test)
        return test
    return apply


def jax_platform() -> str:
    """Where JAX keeps the arrays a test hands to a model: its GPU where it sees one, else the CPU."""
    return "gpu" if ACCELERATOR != "cpu" and _jax_sees_a_gpu() else "cpu"


def expected_platform() -> str:
    """The platform of the arrays a GPU run leaves in its output buffers: JAX's ("gpu", or "cpu" standing in),
    or IREE's ("vulkan")."""
    if on_iree():
        from litegpu.backends.iree.engine import iree_devices

        return iree_devices(allow_software=True)[0].platform
    return "gpu" if on_real_gpu() else "cpu"


def compiled(source: Any, *, precision: str = "fp32", quantized_execution: str = "float",
             flags: Any = None, environment: Any = None) -> Any:
    """A CompiledModel for the GPU (``flags`` default GPU | CPU, so refused ops fall back op by op)."""
    import litegpu as lg

    flags = lg.HardwareAccelerator.GPU | lg.HardwareAccelerator.CPU if flags is None else flags
    options = lg.Options(flags, gpu_options=lg.GpuOptions(precision=precision, quantized_execution=quantized_execution,
                                                          engine=gpu_engine()))
    env = environment or make_environment()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a partial delegation is reported by the plan, not asserted here
        if isinstance(source, (bytes, bytearray)):
            return lg.CompiledModel.from_buffer(bytes(source), options=options, environment=env)
        if isinstance(source, (str, os.PathLike)):
            return lg.CompiledModel.from_file(str(source), options=options, environment=env)
        return lg.CompiledModel.from_model(source, options=options, environment=env)


def is_image_classifier(name: str) -> bool:
    """The image models of the shared and held-out sets (10- or 1000-class softmax heads)."""
    return name.startswith(("mobilenet", "resnet"))


def load_test_module(relative: str, name: str) -> ModuleType:
    """Another test file's helpers, loaded once under a private name (its tests are not collected here)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, TESTS / relative)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while it executes
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
