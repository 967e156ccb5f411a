"""``litegpu doctor``: which engines and devices this machine has, what each would run, how to add the rest."""

from __future__ import annotations

import json
from typing import Any

from .common import console, titled_table

# What each engine runs in litegpu, and how to get it when it is missing.
ENGINE_ROLES = {
    "litert": ("CPU: whole small and integer models, where XNNPACK is the fastest engine (the default fast path)",
               'pip install ai-edge-litert'),
    "openvino": ("CPU: the float ops OpenVINO converts (the default fast path)", 'pip install openvino'),
    "xla": ("GPU (CUDA, ROCm) and CPU: every op, exact TFLite integer kernels, state, control flow",
            'pip install jax  (GPU: pip install "litegpu[cuda12]" or "litegpu[cuda13]" for NVIDIA, '
            'jax[rocm] for AMD)'),
    "iree": ("GPU without CUDA or ROCm: Vulkan (Intel, AMD, NVIDIA, Arm GPUs) and Metal (Apple GPUs), the ops "
             "XLA's GPU runs", 'pip install "litegpu[vulkan]", and a Vulkan driver (Debian/Ubuntu: '
             'mesa-vulkan-drivers for Intel and AMD; NVIDIA\'s driver has its own)'),
    "reference": ("CPU: numpy interpreter, exact and slow; ops no other engine runs", "numpy (always present)"),
}
VULKAN_INSTALL = ('a Vulkan driver (Debian/Ubuntu: apt-get install mesa-vulkan-drivers: Intel, AMD, and the software '
                  'lavapipe; NVIDIA: its driver\'s Vulkan ICD) and pip install "litegpu[vulkan]"')
# Engines installed but without a device to run on here: what the "available" column says, and what to add (the
# package is there: no pip hint).
NO_DEVICE = {
    "iree": ("installed; no hardware Vulkan device",
             "a GPU with a Vulkan 1.2 driver (Debian/Ubuntu: mesa-vulkan-drivers for Intel and AMD; NVIDIA's driver "
             "has its own); a software device (lavapipe) runs only when asked for by name, GpuOptions(engine=\"iree\")"),
}


def engine_report() -> list[dict[str, Any]]:
    from ..backends.registry import ENGINES, engine

    rows = []
    for name in ENGINES:
        role, install = ENGINE_ROLES[name]
        row: dict[str, Any] = {"engine": name, "role": role}
        try:
            found = engine(name)
            row["available"] = bool(found.available())
            row["detail"] = found.describe() if row["available"] else found.unavailable_reason()
        except Exception as e:  # not installed, or broken: say how to fix it
            row["available"] = False
            row["detail"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:120]}" if str(e) else type(e).__name__
        if not row["available"]:
            no_device = NO_DEVICE.get(name)
            if no_device is not None and _installed(name):
                row["status"], row["install"] = no_device
            else:
                row["install"] = install
        row.setdefault("status", "yes" if row["available"] else "no")
        rows.append(row)
    return rows


def _installed(name: str) -> bool:
    from ..backends.registry import engine

    try:
        return bool(engine(name).installed())
    except Exception:  # noqa: BLE001  (broken: not installed as far as the user can tell)
        return False


def device_report() -> list[dict[str, Any]]:
    from ..backends.engine import cpu_name

    rows = [{"device": "CPU", "detail": cpu_name(), "engines": "litert, openvino, xla, reference"}]
    try:
        import jax

        gpus = [d for d in jax.devices() if d.platform != "cpu"]
    except Exception:
        gpus = []
    for d in gpus:
        rows.append({"device": f"GPU {d.id}", "detail": f"{d.platform}: {getattr(d, 'device_kind', d)}",
                     "engines": "xla"})
    if not gpus:
        rows.append({"device": "GPU", "detail": "none visible to JAX", "engines": "-",
                     "install": 'NVIDIA: pip install "litegpu[cuda12]" (or [cuda13], matching the driver); '
                                'AMD: pip install "jax[rocm]" (JAX\'s ROCm build); any GPU with a Vulkan driver: '
                                'IREE (see the Vulkan rows)'})
    rows.extend(vulkan_rows(jax_gpu=bool(gpus)))
    rows.append(intel_gpu_row())
    return rows


def vulkan_rows(jax_gpu: bool) -> list[dict[str, Any]]:
    """One row per Vulkan device (and Metal on a Mac): what IREE would do with it."""
    from ..backends.iree import iree_devices, missing_package
    from ..backends.vulkan import vulkan_devices, vulkan_problem

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


def intel_gpu_row() -> dict[str, Any]:
    from ..backends.openvino import intel_gpu_report

    try:
        report = intel_gpu_report()
    except Exception as e:  # noqa: BLE001  (OpenVINO missing or broken: say so)
        return {"device": "Intel GPU", "detail": f"{type(e).__name__}: {e}", "engines": "-"}
    return {"device": "Intel GPU", "detail": report.explain(),
            "engines": "openvino GPU plugin" if report.openvino else ("iree (Vulkan)" if report.hardware else "-")}


def gpu_plan_summary(devices: list[dict[str, Any]]) -> str:
    """Where ``HardwareAccelerator.GPU`` runs on this machine."""
    if any(r["device"].startswith("GPU ") for r in devices):
        return "GPU plans run on XLA (the GPU JAX sees)"
    from ..backends.iree import iree_devices, missing_package

    usable = [] if missing_package() else iree_devices(allow_software=False)
    if usable:
        return f"GPU plans run on IREE ({usable[0].api}: {usable[0].name})"
    return "no GPU: GPU | CPU plans run on the CPU (with a warning), GPU alone is an error"


def run(args: Any) -> int:
    devices = device_report()
    info = {"engines": engine_report(), "devices": devices, "gpu": gpu_plan_summary(devices)}
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    from rich.markup import escape

    out = console()
    table = titled_table("Engines")
    for col in ("engine", "available", "what it runs", "detail / how to add it"):
        table.add_column(col, overflow="fold", max_width=12 if col == "available" else None)
    for r in info["engines"]:
        status = "yes" if r["available"] else "[red]no[/red]" if r["status"] == "no" else escape(r["status"])
        table.add_row(r["engine"], status, escape(r["role"]),
                      escape(r["detail"] if r["available"] else f"{r['detail']}\n{r['install']}"))
    out.print(table)
    table = titled_table("Devices")
    for col in ("device", "detail", "engines", "how to add it"):
        table.add_column(col, overflow="fold")
    for r in info["devices"]:
        table.add_row(r["device"], escape(r["detail"]), escape(r["engines"]), escape(r.get("install", "")))
    out.print(table)
    out.print(escape(info["gpu"]))
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("doctor", help="which engines and devices this machine has, and how to add a missing one")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(handler=run)
