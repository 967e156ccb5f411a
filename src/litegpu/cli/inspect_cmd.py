"""``litegpu inspect``: what a model holds, as tables or as JSON."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from ..format import decode_model
from ..ir import Model, Quantization, Tensor
from ..ir.load import model_from_raw
from .common import console, hex_preview, human_bytes, jsonable, titled_table

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
    out.print(f"[bold]{info['file']}[/bold]")
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


def run(args: Any) -> int:
    info = summarize(args.file)
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        render(info)
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("inspect", help="summarize a .tflite model: tensors, signatures, ops, sizes")
    p.add_argument("file", metavar="FILE", type=Path, help="the .tflite model")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(handler=run)
