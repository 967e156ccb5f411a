"""``litegpu run``: run a model once through the runtime and report outputs and latency.

Written against ``litegpu.CompiledModel`` (the API of
``ai_edge_litert.compiled_model``), so what the CLI exercises is what users call.
Where a ``<name>.reference.npz`` of the official runtime's outputs sits beside the model (the bundled one has
its own, see ``litegpu.models``), the run takes its inputs and says whether the outputs match.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError
from ..models import BUNDLED_MODEL, Reference, bundled_model, reference_for
from .common import (ACCELERATOR_HELP, ENGINE_CHOICE_HELP, ENGINE_CHOICES, KERNEL_MODES, accelerator_flags, count, cpu_kernel_mode, in_cli_words, signature_label,
                     step)

SEED = 1234
PREVIEW_VALUES = 6
# Outputs match the reference where the largest difference is at most this fraction of the reference's largest
# magnitude (float outputs; engines that sum in another order differ by a few ulps of their partial sums), or at
# most one unit (integer outputs: XNNPACK's int8 kernels round differently from the builtin ones).
MATCH_RELATIVE = 1e-4
MATCH_UNITS = 1


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


def as_input(name: str, array: np.ndarray, dtype: str) -> np.ndarray:
    """An ``--input`` array as the model's input ``name`` takes it: numpy's default float64 (and int64) become
    the input's float (integer) type, values kept where the type holds them; another kind of number is refused."""
    want = np.dtype(dtype)
    if array.dtype == want:
        return array
    if array.dtype.kind == "f" and want.kind == "f":
        return array.astype(want)
    if array.dtype.kind in "iu" and want.kind in "iu":
        info = np.iinfo(want)
        if array.size and (array.min() < info.min or array.max() > info.max):
            raise InvalidArgumentError(f"--input {name}: its {array.dtype.name} values span {array.min()}.."
                                       f"{array.max()}, outside the input's {want.name}")
        return array.astype(want)
    raise InvalidArgumentError(f"--input {name}: the input is {want.name}, the file holds {array.dtype.name} "
                               "(another kind of number)")


def random_input(shape: list[int], dtype: str, rng: np.random.Generator) -> np.ndarray:
    np_dtype = np.dtype(dtype)
    if np_dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np_dtype.kind in "iu":
        info = np.iinfo(np_dtype)
        return rng.integers(max(info.min, -128), min(info.max, 127) + 1, size=shape).astype(np_dtype)
    return rng.uniform(-1.0, 1.0, size=shape).astype(np_dtype)


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


def compare(results: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> tuple[bool, list[str]]:
    """Whether ``results`` match ``expected`` output by output (``MATCH_RELATIVE``, ``MATCH_UNITS``), and a line
    for each saying how far they are."""
    lines, matched = [], True
    for name, want in expected.items():
        got = results.get(name)
        if got is None or np.shape(got) != np.shape(want):
            lines.append(f"  {name}: missing or of another shape ({'absent' if got is None else list(np.shape(got))}"
                         f" against {list(np.shape(want))})")
            matched = False
            continue
        difference = float(np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64)).max(initial=0.0))
        if np.asarray(want).dtype.kind == "f":
            scale = float(np.abs(np.asarray(want, np.float64)).max(initial=0.0)) or 1.0
            ok = difference <= MATCH_RELATIVE * scale
            lines.append(f"  {name}: largest difference {difference:.3g} ({difference / scale:.2g} of the largest "
                         f"value){'' if ok else '  DIFFERS'}")
        else:
            ok = difference <= MATCH_UNITS
            lines.append(f"  {name}: largest difference {difference:.0f} unit{'s' if difference != 1 else ''}"
                         f"{'' if ok else '  DIFFERS'}")
        matched = matched and ok
    return matched, lines


def _load(path: Path, accelerator: str, kernel_mode: str, engine_choice: str | None = None) -> Any:
    import litegpu

    if kernel_mode == "fast" and engine_choice is None:  # what a user gets with no options
        return litegpu.CompiledModel.from_file(str(path), hardware_accel=accelerator_flags(accelerator))
    return litegpu.CompiledModel.from_file(str(path), options=litegpu.Options(
        accelerator_flags(accelerator), cpu_options=litegpu.CpuOptions(kernel_mode=cpu_kernel_mode(kernel_mode)),
        engine_choice=engine_choice))


def run_model(path: Path, inputs: dict[str, np.ndarray], signature: str | None, accelerator: str,
              runs: int, kernel_mode: str = "fast", engine_choice: str | None = None) -> tuple[list[str], bool | None]:
    """The report's lines, and whether the outputs match the official runtime's reference (None: no reference
    for these inputs)."""
    t0 = time.perf_counter()
    with step(f"loading {path.name} and choosing its engines"):
        model = _load(path, accelerator, kernel_mode, engine_choice)
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
    reference = None if inputs else reference_for(path, None if _no_signatures(model) else key)
    if reference is not None and set(reference.inputs) != set(details):
        reference = None
    rng = np.random.default_rng(SEED)
    arrays = [as_input(name, inputs[name], str(d["dtype"])) if name in inputs
              else reference.inputs[name].astype(d["dtype"]) if reference is not None
              else random_input(list(d["shape"]), str(d["dtype"]), rng) for name, d in details.items()]
    ins, outs = model.create_input_buffers(index), model.create_output_buffers(index)
    for buf, array in zip(ins, arrays):
        buf.write(array)
    with step("first run (compiling where the engine compiles; kept in the compile cache for the next start)"):
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
    lines = [f"{path.name}  {signature_label(key)}  accelerator {accelerator}",
             f"engines: {model.plan.engine_summary()}"]
    if model.plan.choice:
        lines.append(f"engine choice: {model.plan.choice}")
    if model.plan.numerics:
        lines.append(f"numbers: {in_cli_words(model.plan.numerics)}")
    source = "given" if inputs else f"the reference's ({reference.path.name})" if reference is not None \
        else f"random (seed {SEED})"
    lines.append(f"inputs: {source}")
    lines += [_summary(name, a) for name, a in zip(details, arrays)]
    lines.append("outputs:")
    lines += [_summary(name, r) for name, r in zip(out_names, results)]
    matched = None
    if reference is not None:
        matched, report = _against_reference(dict(zip(out_names, results)), reference, kernel_mode)
        lines += report
    lines.append(f"latency: first run {first * 1e3:.1f} ms (load, plan, compile or load from the compile cache, run)"
                 + (f"; median of {runs} runs {float(np.median(times)) * 1e3:.3f} ms" if times else ""))
    return lines, matched


def _no_signatures(model: Any) -> bool:
    from ..runtime.model import PLACEHOLDER_SIGNATURE

    return next(iter(model.get_signature_list())) == PLACEHOLDER_SIGNATURE


def _against_reference(results: dict[str, np.ndarray], reference: Reference, kernel_mode: str) -> tuple[bool, list]:
    """The fast path against the official default's outputs (XNNPACK); the builtin and reference kernels against
    the builtin kernels' (where the file has them)."""
    builtin = kernel_mode != "fast" and reference.builtin
    expected = reference.builtin if builtin else reference.outputs
    whose = "builtin kernels" if builtin else "default CPU path (XNNPACK)"
    matched, lines = compare(results, expected)
    verdict = "match" if matched else "DO NOT match"
    return matched, [f"reference: the outputs {verdict} the official runtime's ({whose}, {reference.path.name})",
                     *lines]


def run(args: Any) -> int:
    path = args.file if args.file is not None else bundled_model()
    lines, matched = run_model(path, parse_inputs(args.input or []), args.signature, args.accelerator, args.runs,
                               args.kernel_mode, args.engine_choice)
    print("\n".join(lines))  # plain print: value lists must not wrap mid-number
    return 1 if matched is False else 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("run", help="run a model on random or given inputs; print outputs and latency",
                       description="Run a model once and print its outputs and latency. Without --input, a model "
                                   "with a NAME.reference.npz of the official runtime's outputs beside it (the "
                                   "bundled one has its own) runs on the reference's inputs, and the outputs are "
                                   "compared (exit code 1 if they differ); other models run on seeded random "
                                   "inputs.")
    p.add_argument("file", metavar="FILE", type=Path, nargs="?", default=None,
                   help=f"the .tflite model (default: the bundled {BUNDLED_MODEL})")
    p.add_argument("--input", action="append", metavar="NAME=FILE.npy",
                   help="an input array (repeatable); float64 and int64 arrays are cast to the input's type")
    p.add_argument("--signature", metavar="KEY", help="signature to run (default: the first)")
    p.add_argument("--accelerator", default="cpu", metavar="cpu|gpu|gpu,cpu", help=ACCELERATOR_HELP)
    p.add_argument("--runs", type=count(0), default=10, metavar="N", help="timed runs after the first (default 10)")
    p.add_argument("--kernel-mode", choices=KERNEL_MODES, default="fast",
                   help="CPU kernels: fast (the fastest engine per model, the default), builtin (the official "
                        "builtin kernels' numbers, on XLA) or reference (numpy)")
    p.add_argument("--engine-choice", choices=ENGINE_CHOICES, default=None,
                   help=ENGINE_CHOICE_HELP + " (default: $LITEGPU_ENGINE_CHOICE, else deferred)")
    p.set_defaults(handler=run)
