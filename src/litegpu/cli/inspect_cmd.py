"""``litegpu inspect``: what a model holds, as tables or as JSON."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..backends import registry
from ..format import decode_model
from ..ir import Model, Quantization, Tensor
from ..ir.load import model_from_raw
from .common import KERNEL_MODES, console, hex_preview, human_bytes, jsonable, titled_table

_VALID_FLEX_WIDTHS = (1, 2, 4, 8)


def quantization_summary(q: Quantization | None) -> str | None:
    if q is None:
        return None
    if q.details is not None:
        fields = ", ".join(f"{k}={v}" for k, v in q.details.items() if k != "type" and not isinstance(v, (tuple, bytes)))
        return f"{q.details['type']}" + (f" ({fields})" if fields else "")
    if q.is_per_axis:
        return (f"per-axis (dim {q.quantized_dimension}, {len(q.scale)} scales "
                f"{min(q.scale):.3g}..{max(q.scale):.3g})")
    if q.is_affine:
        zp = q.zero_point[0] if q.zero_point else 0
        return f"scale={q.scale[0]:.6g} zero_point={zp}"
    if q.min or q.max:
        return f"min/max only ({q.min[:1]}..{q.max[:1]})"
    return None


def decode_custom_options(data: bytes | None, fmt: str = "FLEXBUFFERS") -> Any:
    """FlexBuffer options as python values; a hex preview for raw structs."""
    if not data:
        return None
    if fmt == "FLEXBUFFERS" and len(data) >= 3 and data[-1] in _VALID_FLEX_WIDTHS and data[-1] <= len(data) - 2:
        try:
            from flatbuffers import flexbuffers

            value = flexbuffers.Loads(bytes(data))
        except Exception:  # hostile or non-FlexBuffer bytes: fall back to raw bytes
            value = None
        if value is not None:
            return jsonable(value)
    return {"raw_bytes": len(data), "preview": hex_preview(np.frombuffer(data, np.uint8), 32)}


def tensor_summary(t: Tensor, name: str | None = None) -> dict:
    out = {"name": name if name is not None else t.name, "index": t.index, "shape": list(t.shape),
           "shape_signature": list(t.shape_signature) if t.shape_signature is not None else None,
           "dtype": t.dtype, "quantization": quantization_summary(t.quantization)}
    if name is not None and name != t.name:
        out["tensor_name"] = t.name
    return out


def _constant_bytes_by_dtype(model: Model) -> tuple[dict[str, dict[str, int]], int]:
    dtypes: dict[str, dict[str, int]] = {}
    used: set[int] = set()
    for sg in model.subgraphs:
        for t in sg.tensors:
            entry = dtypes.setdefault(t.dtype, {"tensors": 0, "constants": 0, "constant_bytes": 0})
            entry["tensors"] += 1
            if t.raw is not None and t.raw.size:
                entry["constants"] += 1
                if t.buffer not in used:
                    used.add(t.buffer)
                    entry["constant_bytes"] += int(t.raw.size)
    return dtypes, sum(model.buffers[b].size for b in used)


def _custom_ops(model: Model) -> list[dict]:
    found: dict[str, dict] = {}
    for sg in model.subgraphs:
        for op in sg.operators:
            if not op.is_custom:
                continue
            entry = found.setdefault(op.opcode_name, {"name": op.opcode_name, "count": 0, "subgraphs": [],
                                                      "options": []})
            entry["count"] += 1
            if sg.index not in entry["subgraphs"]:
                entry["subgraphs"].append(sg.index)
            options = decode_custom_options(op.custom_options, op.custom_options_format)
            if options not in entry["options"] and len(entry["options"]) < 8:
                entry["options"].append(options)
    return list(found.values())


def _metadata(model: Model) -> list[dict]:
    out = []
    for m in model.metadata:
        data = model.buffers[m.buffer].data if 0 <= m.buffer < len(model.buffers) else None
        entry: dict[str, Any] = {"name": m.name, "buffer": m.buffer, "bytes": 0 if data is None else int(data.size)}
        if data is not None and 0 < data.size <= 64:
            text = data.tobytes().rstrip(b"\0")
            if text and all(32 <= c < 127 for c in text):
                entry["value"] = text.decode("ascii")
        out.append(entry)
    return out


def summarize(path: str) -> dict:
    raw = decode_model(path)
    model = model_from_raw(raw)
    dtypes, constant_bytes = _constant_bytes_by_dtype(model)
    main = model.subgraphs[0]
    extended = any(isinstance(b, dict) and int(b.get("offset") or 0) > 1 for b in raw.root.get("buffers") or [])
    return {
        "file": str(path),
        "format": raw.file_format.name,
        "file_bytes": raw.size,
        "flatbuffer_bytes": raw.flatbuffer_end,
        "constant_bytes": constant_bytes,
        "layout": "extended (buffers after the FlatBuffer)" if extended else "inline",
        "schema_version": model.version,
        "description": model.description,
        "inputs": [tensor_summary(main.tensors[i]) for i in main.inputs],
        "outputs": [tensor_summary(main.tensors[i]) for i in main.outputs],
        "signatures": [{
            "key": s.key, "subgraph": s.subgraph_index,
            "inputs": [tensor_summary(model.subgraphs[s.subgraph_index].tensors[t.tensor_index], t.name) for t in s.inputs],
            "outputs": [tensor_summary(model.subgraphs[s.subgraph_index].tensors[t.tensor_index], t.name) for t in s.outputs],
        } for s in model.signatures],
        "subgraphs": [{
            "index": sg.index, "name": sg.name, "tensors": len(sg.tensors), "operators": len(sg.operators),
            "ops": dict(sorted(Counter(op.opcode_name for op in sg.operators).items(), key=lambda kv: (-kv[1], kv[0]))),
        } for sg in model.subgraphs],
        "dtypes": dict(sorted(dtypes.items())),
        "custom_ops": _custom_ops(model),
        "metadata": _metadata(model),
    }


def _fmt_shape(t: dict) -> str:
    shape = "[" + ", ".join(map(str, t["shape"])) + "]"
    sig = t.get("shape_signature")
    if sig is not None and sig != t["shape"]:
        shape += " sig [" + ", ".join(map(str, sig)) + "]"
    return shape


def _tensor_table(title: str, tensors: list[dict]) -> Any:

    table = titled_table(title)
    for col in ("name", "index", "shape", "dtype", "quantization"):
        table.add_column(col, overflow="fold")
    for t in tensors:
        table.add_row(t["name"], str(t["index"]), _fmt_shape(t), t["dtype"], t["quantization"] or "-")
    return table


def render(info: dict) -> None:

    out = console()
    out.print(f"[bold]{info['file']}[/bold] ({info['format']})")
    out.print(f"  size {human_bytes(info['file_bytes'])} ({info['file_bytes']} bytes), FlatBuffer "
              f"{info['flatbuffer_bytes']} bytes, constants {human_bytes(info['constant_bytes'])}, "
              f"layout {info['layout']}, schema version {info['schema_version']}")
    if info["description"]:
        out.print(f"  description: {info['description']}")
    out.print(_tensor_table("Inputs (subgraph 0)", info["inputs"]))
    out.print(_tensor_table("Outputs (subgraph 0)", info["outputs"]))
    if not info["signatures"]:
        out.print("Signatures: none")
    for s in info["signatures"]:
        out.print(_tensor_table(f"Signature {s['key']!r} (subgraph {s['subgraph']}) inputs", s["inputs"]))
        out.print(_tensor_table(f"Signature {s['key']!r} (subgraph {s['subgraph']}) outputs", s["outputs"]))
    for sg in info["subgraphs"]:
        table = titled_table(f"Subgraph {sg['index']} {sg['name']!r}: {sg['operators']} ops, {sg['tensors']} tensors")
        table.add_column("op")
        table.add_column("count", justify="right")
        for name, count in sg["ops"].items():
            table.add_row(name, str(count))
        out.print(table)
    table = titled_table("Tensor types")
    for col in ("dtype", "tensors", "constants", "constant bytes"):
        table.add_column(col, justify="left" if col == "dtype" else "right")
    for dtype, d in info["dtypes"].items():
        table.add_row(dtype, str(d["tensors"]), str(d["constants"]), str(d["constant_bytes"]))
    out.print(table)
    if info["custom_ops"]:
        table = titled_table("Custom ops")
        for col in ("name", "count", "subgraphs", "options"):
            table.add_column(col, overflow="fold")
        for c in info["custom_ops"]:
            table.add_row(c["name"], str(c["count"]), ", ".join(map(str, c["subgraphs"])),
                          "\n".join(json.dumps(o) for o in c["options"]) or "-")
        out.print(table)
    else:
        out.print("Custom ops: none")
    if info["metadata"]:
        out.print("Metadata: " + ", ".join(
            f"{m['name']} ({m['bytes']} bytes" + (f", {m['value']!r})" if "value" in m else ")") for m in info["metadata"]))


# ---- delegation reports ---------------------------------------------------------------------

def accelerator_flags(spec: str) -> int:
    """``cpu``, ``gpu`` or ``gpu,cpu``; a GPU plan always shows the CPU fallback it would need."""
    from ..compile import CPU, GPU
    from ..errors import InvalidArgumentError

    names = {p.strip().lower() for p in spec.split(",") if p.strip()}
    if not names or names - {"cpu", "gpu"}:
        raise InvalidArgumentError(f"--accelerator {spec!r}: expected cpu, gpu or gpu,cpu")
    return int(GPU | CPU) if "gpu" in names else int(CPU)


def device_free_plan(model: Model, flags: int, cpu_kernels: str = "fast", gpu_engine: str | None = None,
                     cpu_engines: Sequence[str] | None = None) -> Any:
    """The plan ``CompiledModel`` would make (a ``PlannedModel``), made without a device: ``gpu_engine`` names the
    engine of the GPU's partitions (None: XLA's); another than XLA (IREE: Vulkan, Metal) plans them on the model as
    it runs there (a quantized model's float view).  ``cpu_engines``: the fast CPU path's engines
    (``CpuOptions.engines``; None: every one installed).  Its plan's ``file_model`` is ``model``."""
    import dataclasses

    from ..backends.engine import EngineSettings
    from ..compile import plan_model

    # the engines CompiledModel would plan with (the official interpreter is timed against OpenVINO as there)
    engines = {name: e for name, e in registry.fast_cpu_engines(EngineSettings(), model.tflite_file).items()
               if cpu_engines is None or name in cpu_engines} if cpu_kernels == "fast" else None
    engine, planned_on = None, model
    if gpu_engine is not None and gpu_engine != registry.named(device="GPU")[0] and flags & 2:  # not JAX's GPU
        from ..compile.float_view import float_view
        from ..compile.rewrites import rewrite_for_xla

        engine, planned_on = registry.engine(gpu_engine), float_view(rewrite_for_xla(model))
    planned = plan_model(planned_on, flags, warn=False, cpu_kernels=cpu_kernels, engines=engines, gpu_engine=engine,
                         lowered_engines=lambda: registry.fast_cpu_engines(EngineSettings()))
    return dataclasses.replace(planned, plan=dataclasses.replace(planned.plan, file_model=model))


def cpu_engine_names(spec: str | None) -> tuple[str, ...] | None:
    """``--engines a,b``: the fast CPU path's engines named (checked as ``CpuOptions.engines`` checks them)."""
    if spec is None:
        return None
    from ..runtime.options import CpuOptions

    return CpuOptions(engines=tuple(n.strip() for n in spec.split(",") if n.strip())).engines


def plan_summary(model: Model, flags: int, cpu_kernels: str = "fast", gpu_engine: str | None = None,
                 cpu_engines: Sequence[str] | None = None) -> dict:
    """The delegation plan (``device_free_plan``) as JSON-ready tables."""
    from ..compile.circle_lowering import lowerable

    planned = device_free_plan(model, flags, cpu_kernels, gpu_engine, cpu_engines)
    lowered = lowerable(planned.plan.file_model) if planned.lowered else []
    p, model = planned.plan, planned.model  # the partitions index the lowered model where circle ops were lowered
    partitions = [{
        "index": k, "accelerator": q.device, "engine": q.engine, "backend": q.target.value,
        "subgraph": q.subgraph_index,
        "ops": len(q.op_indices), "op_indices": list(q.op_indices),
        "op_kinds": dict(Counter(model.subgraphs[q.subgraph_index].operators[i].opcode_name for i in q.op_indices)),
    } for k, q in enumerate(p.partitions)]
    return {
        "requested": "GPU | CPU" if flags & 2 else "CPU", "accelerator": p.accelerator,
        "fully_accelerated": p.fully_accelerated, "summary": p.summary(), "engines": p.engine_summary(),
        "cpu_kernels": cpu_kernels,
        "ops_on_gpu": p.ops_on("GPU"), "ops_on_cpu": p.ops_on("CPU"), "partitions": partitions,
        "fallbacks": [{"op": u.opcode, "index": u.op_index, "subgraph": u.subgraph, "reason": u.reason}
                      for u in p.unsupported],
        "boundaries": [{"tensor": b.name, "index": b.tensor, "subgraph": b.subgraph, "shape": list(b.shape),
                        "dtype": b.dtype, "bytes": b.nbytes, "dynamic": b.dynamic, "from": b.producer,
                        "to": list(b.consumers), "crosses_devices": b.crosses_devices(p)} for b in p.boundaries],
        "transfer_bytes": p.transfer_bytes(), "notes": list(p.notes), "circle_ops_lowered": lowered,
    }


def mobile_gpu_summary(model: Model) -> dict:
    from ..compile.mobile_gpu import check_model

    report = check_model(model)
    return {"fully_delegated": report.fully_delegated, "summary": report.summary(), "ops": len(report.ops),
            "delegated_ops": sum(len(d) for _, d in report.delegated),
            "unsupported": [{"op": o.opcode, "index": o.op_index, "version": o.version, "reason": o.reason}
                            for o in report.unsupported]}


def render_plan(info: dict) -> None:
    out, plan_info = console(), info["plan"]
    out.print(f"[bold]Delegation plan for {plan_info['requested']}[/bold]: {plan_info['summary']} "
              f"(fully accelerated: {'yes' if plan_info['fully_accelerated'] else 'no'})")
    out.print(f"Engines ({plan_info['cpu_kernels']} CPU kernels): {plan_info['engines']}")
    if plan_info.get("circle_ops_lowered"):
        out.print("Circle-only ops lowered to TFLite builtin ops for the official interpreter / OpenVINO: "
                  + ", ".join(plan_info["circle_ops_lowered"]))
    table = titled_table(f"Partitions ({len(plan_info['partitions'])})")
    for col in ("#", "accelerator", "engine", "backend", "subgraph", "ops", "op kinds"):
        table.add_column(col, overflow="fold")
    for q in plan_info["partitions"]:
        kinds = ", ".join(f"{k} x{n}" if n > 1 else k for k, n in q["op_kinds"].items())
        table.add_row(str(q["index"]), q["accelerator"], q["engine"], q["backend"], str(q["subgraph"]),
                      str(q["ops"]), kinds)
    out.print(table)
    if plan_info["fallbacks"]:
        table = titled_table("Ops that fell back to the CPU")
        for col in ("op", "index", "why"):
            table.add_column(col, overflow="fold")
        for f in plan_info["fallbacks"]:
            where = f"#{f['index']}" + (f" (subgraph {f['subgraph']})" if f["subgraph"] else "")
            table.add_row(f["op"], where, f["reason"])
        out.print(table)
    if plan_info["boundaries"]:
        table = titled_table(f"Tensors crossing partitions ({human_bytes(plan_info['transfer_bytes'])} "
                             "moved between devices per run)")
        for col in ("tensor", "shape", "dtype", "bytes", "from -> to"):
            table.add_column(col, overflow="fold")
        for b in plan_info["boundaries"]:
            shape = "[" + ", ".join(map(str, b["shape"])) + "]" + (" (dynamic)" if b["dynamic"] else "")
            to = ", ".join(str(c) for c in b["to"])
            table.add_row(f"{b['tensor']} ({b['index']})", shape, b["dtype"], str(b["bytes"]),
                          f"{b['from']} -> {to}" + ("" if b["crosses_devices"] else " (same device)"))
        out.print(table)
    for note in plan_info["notes"]:
        out.print(f"note: {note}")


def render_mobile_gpu(info: dict) -> None:
    out, mobile = console(), info["mobile_gpu"]
    verdict = "yes" if mobile["fully_delegated"] else "no"
    out.print(f"[bold]LiteRT mobile GPU delegate[/bold] (default options): fully delegated: {verdict}; "
              f"{mobile['summary']}")
    if mobile["unsupported"]:
        table = titled_table(f"Ops the mobile GPU delegate would not take ({len(mobile['unsupported'])})")
        for col in ("op", "index", "version", "why"):
            table.add_column(col, overflow="fold")
        for o in mobile["unsupported"]:
            table.add_row(o["op"], f"#{o['index']}", str(o["version"]), o["reason"])
        out.print(table)


def weight_placement(model: Model, devices: int) -> dict:
    """How the weights would be split over ``devices`` devices (``Options(devices=...)``), estimated from the
    model alone."""
    from ..backends.sharding import estimate

    if devices < 1:
        from ..errors import InvalidArgumentError

        raise InvalidArgumentError(f"--devices {devices}: at least 1")
    report = estimate(model, devices)
    return {"devices": devices, "sharded_bytes": report.sharded_bytes, "replicated_bytes": report.replicated_bytes,
            "estimated_bytes_per_device": report.estimated_bytes_per_device, "text": report.describe(),
            "weights": [{"name": w.name, "shape": list(w.shape), "dtype": w.dtype, "bytes": w.nbytes,
                         "axis": w.axis, "why": w.reason} for w in report.weights]}


def run(args: Any) -> int:
    reports = bool(args.accelerator or args.mobile_gpu or args.devices)
    if reports:
        model = model_from_raw(decode_model(args.file))
        info: dict = {"file": str(args.file)}
        if args.accelerator:
            info["plan"] = plan_summary(model, accelerator_flags(args.accelerator), args.kernel_mode, args.gpu_engine,
                                        cpu_engine_names(args.engines))
        if args.mobile_gpu:
            info["mobile_gpu"] = mobile_gpu_summary(model)
        if args.devices:
            info["weights"] = weight_placement(model, args.devices)
    else:
        info = summarize(args.file)
    if args.json:
        print(json.dumps(info, indent=2))
    elif reports:
        console().print(f"[bold]{info['file']}[/bold]")
        if "plan" in info:
            render_plan(info)
        if "mobile_gpu" in info:
            render_mobile_gpu(info)
        if "weights" in info:
            console().print(info["weights"]["text"], markup=False, highlight=False, soft_wrap=True)
    else:
        render(info)
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("inspect", help="summarize a .tflite or .circle model: tensors, signatures, ops, sizes")
    p.add_argument("file", metavar="FILE", type=Path, help="the .tflite or .circle model")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--accelerator", metavar="cpu|gpu|gpu,cpu",
                   help="print the delegation plan instead: partitions, op counts, the ops that fall back to the "
                        "CPU and why, and the tensors crossing partitions with their sizes")
    p.add_argument("--kernel-mode", choices=KERNEL_MODES, default="fast",
                   help="CPU kernels for the plan: fast (OpenVINO where it converts the ops, XLA for the rest; the "
                        "default), builtin (the exact TFLite kernels on XLA) or reference (numpy)")
    p.add_argument("--engines", metavar="NAME,...",
                   help="the engines the fast CPU path may choose from besides XLA (CpuOptions.engines), of "
                        f"{', '.join(registry.named(fast_cpu=True))} (default: every one installed)")
    p.add_argument("--gpu-engine", choices=registry.named(device="GPU"), default=None,
                   help="the engine of the GPU's partitions in the plan: xla (CUDA, ROCm; the default) or iree "
                        "(Vulkan and Metal GPUs: what GpuOptions(engine=\"iree\") plans, a quantized model as its "
                        "float view)")
    p.add_argument("--devices", type=int, metavar="N",
                   help="print how the weights would be split over N devices (Options(devices=N)): each weight's "
                        "axis or why it is replicated, and the estimated bytes per device (no device needed)")
    p.add_argument("--mobile-gpu", action="store_true",
                   help="print which ops the LiteRT mobile GPU delegate would not take (op list, versions, types)")
    p.set_defaults(handler=run)
