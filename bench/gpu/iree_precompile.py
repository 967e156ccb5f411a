"""Compile, here, the IREE programs of models for a GPU that is elsewhere, into a compile cache that travels.

    python bench/gpu/iree_precompile.py --cache .gpu/iree_cache [--gpu "NVIDIA H100 80GB HBM3"] MODEL.tflite ...

A lent GPU machine reaches no registry and gets at most 64 MiB: IREE's runtime wheel (15 MB) fits, its
compiler (84 MB) does not.  So the programs are compiled here for that GPU's IREE target and kept in a
litegpu compile cache (``Options(serialization_dir=...)``); there litegpu finds each ``.vmfb`` under the same
key (model file, partition, shapes, precision, target, IREE runtime version) and only loads it.  The target is
a device description (``backends.iree.engine.vulkan_target_attribute``) of what every NVIDIA GPU's Vulkan driver
offers (subgroups of 32, 48 KiB of workgroup memory, float64 / float16 / int8 arithmetic), written to
``CACHE/vulkan_target.txt``: the GPU machine compiles for it (``LITEGPU_IREE_VULKAN_TARGET``, set from that
file by ``bench/gpu/gpu_checks.sh iree``), so no device is needed here.  (IREE's named "ampere" target, with
matrix cores, never finished compiling the float16 selfie segmentation model.)  Both precisions the GPU tests
and the zoo use (fp32, fp16) are compiled, for the declared input shapes, and for stateful models also the
program that takes the variables back.  Prints what was compiled, what IREE refused, and the cache's size.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))


def remote_gpu(name: str, vendor_id: int, float64: bool):
    """The device litegpu will see there, as far as the compile target depends on it: limits no NVIDIA GPU's
    Vulkan driver falls short of; float64 keeps float64 programs exact."""
    from litegpu.backends.iree.engine import IreeDevice
    from litegpu.backends.iree.vulkan import VulkanDevice

    vulkan = VulkanDevice(index=0, name=name, vendor_id=vendor_id, device_id=0, device_type="discrete GPU",
                          api_version="1.3.0", driver="(compiled ahead: not opened)", uuid="00" * 16, memory_bytes=0,
                          float64=float64, float16=True, int64=True, int16=True, int8=True, storage16=True,
                          storage8=True, subgroup_size=32, subgroup_arithmetic=True, subgroup_shuffle=True,
                          max_workgroup_size=(1024, 1024, 64), max_workgroup_invocations=1024,
                          max_workgroup_memory_bytes=49152, max_workgroup_count=(2**31 - 1, 65535, 65535),
                          vulkan_1_2=True)
    return IreeDevice("vulkan", name, False, float64, True, vulkan)


def precompile(path: Path, precision: str, cache: Path, device) -> list[str]:
    import litegpu
    from litegpu.backends.iree import engine as iree

    options = litegpu.Options(litegpu.HardwareAccelerator.GPU | litegpu.HardwareAccelerator.CPU,
                              gpu_options=litegpu.GpuOptions(precision=precision, engine="iree"),
                              serialization_dir=str(cache))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # partial delegation: the plan is printed instead
        model = litegpu.CompiledModel.from_file(str(path), options=options)
    lines = [f"{path.name} {precision}: {model.plan.summary()}"]
    partitioned = model._partitioned()
    for subgraph in sorted({p.subgraph_index for p in model.plan.partitions}):
        for unit in partitioned.signature(subgraph).units:
            executable = getattr(unit, "executable", None)
            if not isinstance(executable, iree.IreeExecutable):
                continue
            start = time.perf_counter()
            verdict = executable.compile_ahead()
            lines.append(f"  {executable.op_range}: {verdict[:300]} ({time.perf_counter() - start:.1f} s)")
    model.close()
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--gpu", default="NVIDIA H100 80GB HBM3", help="the GPU's name as Vulkan reports it")
    parser.add_argument("--vendor", type=lambda v: int(v, 0), default=0x10DE, help="its PCI vendor id (NVIDIA)")
    parser.add_argument("--no-float64", action="store_true", help="the GPU has no float64 (Intel, Arm, Apple)")
    parser.add_argument("--precisions", nargs="+", default=["fp32", "fp16"])
    args = parser.parse_args()
    from litegpu.backends.iree import engine as iree

    device = remote_gpu(args.gpu, args.vendor, not args.no_float64)
    iree.iree_devices = lambda allow_software=False: [device]  # the engine plans and compiles for that GPU
    target = iree.compile_target(device)
    print(f"target: {target.description} {' '.join(target.flags)}")
    args.cache.mkdir(parents=True, exist_ok=True)
    if target.attribute is not None:  # the GPU machine compiles for exactly this target, so the keys match
        (args.cache / "vulkan_target.txt").write_text(target.attribute + "\n")
    for path in args.models:
        for precision in args.precisions:
            for line in precompile(path, precision, args.cache, device):
                print(line, flush=True)
    size = sum(f.stat().st_size for f in args.cache.rglob("*") if f.is_file())
    print(f"cache {args.cache}: {size / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
