"""The engines litegpu has, by name: the one module that knows them all, and that no engine imports.

Each engine lives in a module of its own behind the interface of ``engine.py`` and describes itself in one
:class:`~litegpu.backends.engine.EngineInfo` line here (name, title, role, install hint, devices, the fast CPU
path's candidates, the op rules its partitions carry); every table of engines -- the plan's names and titles,
``doctor``'s roles, the options' engine names, ``inspect``'s choices -- is derived from these lines, and the runtime
makes engines here by name.  An engine's module, and the package behind it, is imported only when that engine is
asked for: ``import litegpu`` loads no JAX, OpenVINO or interpreter.  A new engine is one module and one
``register`` line (a test registers one of its own: ``tests/backends/test_registry.py``).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

from ..ops import Target
from .engine import Engine, EngineContext, EngineInfo, EngineSettings

ENGINES: dict[str, EngineInfo] = {}
_classes: dict[str, type[Engine]] = {}  # the classes imported so far, by name


def register(info: EngineInfo) -> EngineInfo:
    """Add an engine (or replace the one of the same name); the order of registration is the order of preference
    within a device (fastest first)."""
    ENGINES[info.name] = info
    _classes.pop(info.name, None)
    return info


def unregister(name: str) -> None:
    """Remove a registered engine (tests)."""
    ENGINES.pop(name, None)
    _classes.pop(name, None)


register(EngineInfo(
    "litert", "LiteRT (XNNPACK)",
    "CPU: whole small and integer models, where XNNPACK is the fastest engine (the default fast path)",
    "pip install ai-edge-litert", ".litert:LiteRtEngine", (Target.LITERT,), fast_cpu="whole",
    overlay=(("CPU", "LiteRT XNNPACK CPU", "#ff8f00"),)))
register(EngineInfo(
    "openvino", "OpenVINO", "CPU: the float ops OpenVINO converts (the default fast path)", "pip install openvino",
    ".openvino:OpenVinoEngine", (Target.OPENVINO,), fast_cpu="ops", overlay=(("CPU", "OpenVINO CPU", "#0071c5"),)))
register(EngineInfo(
    "xla", "XLA", "GPU (CUDA, ROCm) and CPU: every op, exact TFLite integer kernels, state, control flow",
    'pip install jax  (GPU: pip install "litegpu[cuda12]" or "litegpu[cuda13]" for NVIDIA, jax[rocm] for AMD)',
    ".xla.engine:XlaEngine", (Target.XLA_CPU, Target.XLA_GPU), devices=("CPU", "GPU"), many_devices=True,
    one_weight_precision=True, own_kernels=True,
    overlay=(("GPU", "XLA GPU", "#76b900"), ("CPU", "XLA CPU", "#8e24aa"))))
register(EngineInfo(
    "iree", "IREE",
    "GPU without CUDA or ROCm: Vulkan (Intel, AMD, NVIDIA, Arm GPUs) and Metal (Apple GPUs), the ops XLA's GPU runs",
    'pip install "litegpu[vulkan]", and a Vulkan driver (Debian/Ubuntu: mesa-vulkan-drivers for Intel and AMD; '
    "NVIDIA's driver has its own)", ".iree.engine:IreeEngine", (Target.IREE,), devices=("GPU",),
    no_device=("installed; no hardware Vulkan device",
               "a GPU with a Vulkan 1.2 driver (Debian/Ubuntu: mesa-vulkan-drivers for Intel and AMD; NVIDIA's driver "
               'has its own); a software device (lavapipe) runs only when asked for by name, GpuOptions(engine="iree")'),
    overlay=(("GPU", "IREE GPU", "#2e7d32"),)))
register(EngineInfo(
    "reference", "the numpy reference", "CPU: numpy interpreter, exact and slow; ops no other engine runs",
    "numpy (always present)", ".reference:ReferenceEngine", (Target.REFERENCE,), many_devices=True,
    own_kernels=True, overlay=(("CPU", "numpy reference CPU", "#9e9e9e"),)))


def info(name: str) -> EngineInfo:
    """The registered description of the engine called ``name``."""
    found = ENGINES.get(name)
    if found is None:
        from ..errors import InvalidArgumentError

        raise InvalidArgumentError(f"unknown engine {name!r}; litegpu has {', '.join(ENGINES)}")
    return found


def engine_class(name: str) -> type[Engine]:
    """The class of the engine called ``name``, its module imported now."""
    if name not in _classes:
        make = info(name).make
        if isinstance(make, str):
            module, _, attribute = make.partition(":")
            make = getattr(importlib.import_module(module, __package__), attribute)
        _classes[name] = make
    return _classes[name]


def engine(name: str, settings: EngineSettings | None = None, **context: Any) -> Engine:
    """A new engine called ``name``; ``context``: the fields of :class:`EngineContext` (the model's file, its
    compile cache and key, whether a software device may be used)."""
    made = engine_class(name).create(settings, EngineContext(**context))
    made.info = info(name)
    return made


def title(name: str) -> str:
    """How reports name an engine: "LiteRT (XNNPACK)"; an unregistered name as it is."""
    found = ENGINES.get(name)
    return found.title if found is not None else name


def name_of(target: Target) -> str:
    """The engine whose partitions carry ``target`` (the first registered)."""
    for found in ENGINES.values():
        if target in found.targets:
            return found.name
    raise KeyError(f"no registered engine runs partitions of target {target.value!r}")


def named(*, device: str | None = None, fast_cpu: bool | None = None) -> tuple[str, ...]:
    """The registered engines' names, in order, of those running on ``device`` ("CPU", "GPU") and of the fast
    CPU path's candidates (``fast_cpu``), where asked."""
    return tuple(i.name for i in ENGINES.values()
                 if (device is None or device in i.devices) and (fast_cpu is None or bool(i.fast_cpu) == fast_cpu))


def overlay(name: str, device: str) -> tuple[str, str] | None:
    """(label, colour) of the engine's ops on ``device`` in Model Explorer's overlay; None where it says none."""
    found = ENGINES.get(name)
    return next(((label, colour) for d, label, colour in found.overlay if d == device), None) if found else None


def fast_cpu_engines(settings: EngineSettings, file: str | None = None, cache: Any = None,
                     cache_key: dict | None = None, whole_file: bool = True) -> dict[str, Engine]:
    """The engines the fast CPU path plans with (``CpuKernelMode.FAST``), those this machine has installed
    (``Engine.installed``: the planner asks ``available`` before it uses one), holding the model's compile cache:
    the official interpreter and OpenVINO, and any engine registered as a candidate.  ``file`` is the model's
    file; ``whole_file`` says the model planned is that file as it is (OpenVINO then reads a whole-model
    partition from it; the official interpreter always runs the file, a rewrite changes nothing it sees)."""
    found: dict[str, Engine] = {}
    for name in named(fast_cpu=True):
        candidate = engine(name, settings, file=file, cache=cache, cache_key=cache_key, whole_file=whole_file)
        if candidate.installed():
            found[name] = candidate
    return found


def fast_cpu_role(engines: dict[str, Engine], role: str) -> Engine | None:
    """The first of ``engines`` (the planner's) that takes the fast CPU path's ``role``: "ops" (the ops it converts,
    as partitions) or "whole" (whole models, where timed faster)."""
    return next((e for name, e in engines.items() if name in ENGINES and ENGINES[name].fast_cpu == role), None)


def doctor_devices() -> Iterator[tuple[str, type[Engine]]]:
    """(name, class) of every registered engine whose class imports here, for ``litegpu doctor``'s device rows: the
    GPU engines first (XLA's GPUs, then IREE's Vulkan devices), then the others (OpenVINO's Intel GPU)."""
    gpu = named(device="GPU")
    for name in (*gpu, *(n for n in ENGINES if n not in gpu)):
        try:
            yield name, engine_class(name)
        except Exception:  # noqa: BLE001  (a broken install: its row in the engines table says why)
            continue


__all__ = ["ENGINES", "doctor_devices", "engine", "engine_class", "fast_cpu_engines", "fast_cpu_role", "info",
           "name_of", "named", "overlay", "register", "title", "unregister"]
