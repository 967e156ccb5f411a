"""``litegpu run``: run a model once through the runtime and report outputs and latency.

Written against ``litegpu.CompiledModel`` (the API of
``ai_edge_litert.compiled_model``), so what the CLI exercises is what users call.
"""

from __future__ import annotations

import statistics
import time
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError
from .common import KERNEL_MODES, cpu_kernel_mode

BUNDLED_MODEL = "mediapipe_face_detection_short_range.tflite"
SEED = 1234
PREVIEW_VALUES = 6


def bundled_model() -> Path:
    """The model shipped in the package, so ``litegpu run`` works with no arguments."""
    return Path(str(resources.files("litegpu") / "models" / BUNDLED_MODEL))


def parse_inputs(specs: list[str]) -> dict[str, np.ndarray]:
    arrays: dict[str, np.ndarray] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise InvalidArgumentError(f"--input {spec!r}: expected NAME=FILE.npy")
        try:
            arrays[name] = np.load(path, allow_pickle=False)
        except FileNotFoundError:
            raise InvalidArgumentError(f"--input {name}: {path}: no such file") from None
        except (OSError, ValueError) as e:
            raise InvalidArgumentError(f"--input {name}: {path}: not a .npy array ({e})") from None
    return arrays


def random_input(shape: list[int], dtype: str, rng: np.random.Generator) -> np.ndarray:
    np_dtype = np.dtype(dtype)
    if np_dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np_dtype.kind in "iu":
        info = np.iinfo(np_dtype)
        return rng.integers(max(info.min, -128), min(info.max, 127) + 1, size=shape).astype(np_dtype)
    return rng.uniform(-1.0, 1.0, size=shape).astype(np_dtype)


def _accelerator(spec: str) -> Any:
    import litegpu

    enum_cls = getattr(litegpu, "HardwareAccelerator", None) or getattr(litegpu, "Accelerator", None)
    names = [p.strip().upper() for p in spec.split(",") if p.strip()]
    if not names or any(n not in ("CPU", "GPU") for n in names):
        raise InvalidArgumentError(f"--accelerator {spec!r}: expected cpu, gpu or gpu,cpu")
    if enum_cls is None:
        raise InvalidArgumentError("this litegpu build has no HardwareAccelerator enum")
    value = enum_cls[names[0]]
    for n in names[1:]:
        value = value | enum_cls[n]
    return value


def _summary(name: str, array: np.ndarray) -> str:
    flat = array.reshape(-1)
    values = ", ".join(f"{v:.5g}" if flat.dtype.kind == "f" else str(v) for v in flat[:PREVIEW_VALUES].tolist())
    if flat.size > PREVIEW_VALUES:
        values += ", ..."
    stats = ""
    if flat.size and flat.dtype.kind in "fiub":
        as_float = flat.astype(np.float64)
        stats = f"  min {as_float.min():.5g} max {as_float.max():.5g} mean {as_float.mean():.5g}"
    return f"  {name}: shape {list(array.shape)} {array.dtype}  [{values}]{stats}"


def run_model(path: Path, inputs: dict[str, np.ndarray], signature: str | None, accelerator: str,
              runs: int, kernel_mode: str = "fast") -> list[str]:
    import litegpu

    t0 = time.perf_counter()
    if kernel_mode == "fast":  # what a user gets with no options
        model = litegpu.CompiledModel.from_file(str(path), hardware_accel=_accelerator(accelerator))
    else:
        model = litegpu.CompiledModel.from_file(str(path), options=litegpu.Options(
            _accelerator(accelerator), cpu_options=litegpu.CpuOptions(kernel_mode=cpu_kernel_mode(kernel_mode))))
    signatures = model.get_signature_list()
    key = signature if signature is not None else next(iter(signatures))
    if key not in signatures:
        raise InvalidArgumentError(f"{path}: no signature {key!r} (has: {', '.join(map(repr, signatures))})")
    index = model.get_signature_index(key)
    details = model.get_input_tensor_details(key)
    unknown = set(inputs) - set(details)
    if unknown:
        raise InvalidArgumentError(f"{path}: signature {key!r} has no input(s) {sorted(unknown)} "
                                   f"(has: {', '.join(details)})")
    rng = np.random.default_rng(SEED)
    arrays = [inputs[name] if name in inputs else random_input(list(d["shape"]), str(d["dtype"]), rng)
              for name, d in details.items()]
    ins, outs = model.create_input_buffers(index), model.create_output_buffers(index)
    for buf, array in zip(ins, arrays):
        buf.write(array)
    model.run_by_index(index, ins, outs)
    results = [np.asarray(o.read()) for o in outs]
    first = time.perf_counter() - t0
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        model.run_by_index(index, ins, outs)
        for o in outs:
            o.read()  # include the device-to-host copy, as a user would
        times.append(time.perf_counter() - t)
    out_names = list(signatures[key].get("outputs", [])) or [f"output_{i}" for i in range(len(results))]
    lines = [f"{path.name}  signature {key!r}  accelerator {accelerator}",
             f"engines: {model.plan.engine_summary()}"]
    if model.plan.numerics:
        lines.append(f"numbers: {model.plan.numerics}")
    lines.append("inputs:" + ("" if inputs else f" random (seed {SEED})"))
    lines += [_summary(name, a) for name, a in zip(details, arrays)]
    lines.append("outputs:")
    lines += [_summary(name, r) for name, r in zip(out_names, results)]
    lines.append(f"latency: first run {first * 1e3:.1f} ms (load, compile, run)"
                 + (f"; median of {runs} runs {statistics.median(times) * 1e3:.3f} ms" if times else ""))
    return lines


def run(args: Any) -> int:
    path = args.file if args.file is not None else bundled_model()
    lines = run_model(path, parse_inputs(args.input or []), args.signature, args.accelerator, args.runs,
                      args.kernel_mode)
    print("\n".join(lines))  # plain print: value lists must not wrap mid-number
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("run", help="run a model on random or given inputs; print outputs and latency")
    p.add_argument("file", metavar="FILE", type=Path, nargs="?", default=None,
                   help=f"the .tflite model (default: the bundled {BUNDLED_MODEL})")
    p.add_argument("--input", action="append", metavar="NAME=FILE.npy", help="an input array (repeatable)")
    p.add_argument("--signature", metavar="KEY", help="signature to run (default: the first)")
    p.add_argument("--accelerator", default="cpu", metavar="cpu|gpu|gpu,cpu",
                   help="where to run (default cpu)")
    p.add_argument("--runs", type=int, default=10, metavar="N", help="timed runs after the first (default 10)")
    p.add_argument("--kernel-mode", choices=KERNEL_MODES, default="fast",
                   help="CPU kernels: fast (the fastest engine per model, the default), builtin (the official "
                        "builtin kernels' numbers, on XLA) or reference (numpy)")
    p.set_defaults(handler=run)
