"""Every shared model with recorded outputs runs through both user APIs and matches the official builtin kernels.

``CompiledModel`` (CPU) and the classic ``Interpreter`` (``AUTO``: the XLA CPU program, and ``BUILTIN_REF``: the
numpy reference kernels) replay each ``X.reference.npz`` call after call (state carried, as recorded) and are
compared with ``out_ref``: float outputs within 1e-4 of the largest magnitude, integer outputs within 1 unit and
exact in >= 99% of elements (integer outputs of float models exactly).  The held-out models go through the same
three paths in tests/heldout/test_heldout_models.py.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import pytest

from litegpu import CompiledModel, CpuKernelMode, CpuOptions, HardwareAccelerator, Interpreter, OpResolverType, Options

# tests/conftest.py's location of the shared models (its fixture skips when they are absent)
SHARED_MODELS = Path(os.environ.get("LITEGPU_SHARED_MODELS", Path(__file__).resolve().parents[3] / "shared" / "models"))

NAMES = sorted(p.name.removesuffix(".reference.npz") for p in SHARED_MODELS.glob("*.reference.npz")) \
    if SHARED_MODELS.is_dir() else []
QUICK = {"two_signatures_float32", "microwakeword_okay_nabu"}  # the others compile for more than a few seconds
APIS = ("compiled_model", "compiled_model_exact", "interpreter_xla", "interpreter_reference")


def recorded_calls(path: Path) -> list[tuple[str, dict[str, np.ndarray], dict[str, np.ndarray]]]:
    """[(signature key, inputs, out_ref)]: each signature's first call, then its step1, step2, ... in order."""
    calls = []
    with np.load(path) as z:
        def part(prefix: str, kind: str) -> dict[str, np.ndarray]:
            return {k.rsplit("/", 1)[1]: z[k] for k in z.files if k.startswith(f"{prefix}/{kind}/")}

        for key in sorted({k.split("/", 1)[0] for k in z.files if k.count("/") == 2}):
            prefix, step = key, 0
            while part(prefix, "in"):
                calls.append((key, part(prefix, "in"), part(prefix, "out_ref")))
                step += 1
                prefix = f"{key}/step{step}"
    return calls


def runner(path: Path, api: str):
    """call(signature key, inputs) -> {output name: array} through one API."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if api.startswith("compiled_model"):
            exact = CpuOptions(kernel_mode=CpuKernelMode.BUILTIN) if api == "compiled_model_exact" else None
            model = CompiledModel.from_file(path, options=Options(HardwareAccelerator.CPU, cpu_options=exact))
            run = lambda key, inputs: model.run(inputs, signature_key=0 if key == "-" else key)  # noqa: E731
            run.engines = set(model.plan.ops_per_engine())
            return run
        resolver = OpResolverType.AUTO if api == "interpreter_xla" else OpResolverType.BUILTIN_REF
        interpreter = Interpreter(model_path=str(path), experimental_op_resolver_type=resolver)
    interpreter.allocate_tensors()
    if api == "interpreter_xla":
        assert not interpreter._use_reference, "the Interpreter fell back to the reference kernels"

    def call(key: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if key != "-":
            return interpreter.get_signature_runner(key)(**inputs)
        by_name = {d["name"]: d["index"] for d in interpreter.get_input_details()}
        for name, value in inputs.items():
            interpreter.set_tensor(by_name[name], value)
        interpreter.invoke()
        return {d["name"]: interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()}

    return call


def official_default(path: Path, calls: list) -> list[dict[str, np.ndarray]]:
    """The official interpreter with its default delegate (XNNPACK), as many threads as litegpu's default."""
    from ai_edge_litert.interpreter import Interpreter as Official

    official = Official(model_path=str(path), num_threads=os.cpu_count())
    official.allocate_tensors()
    found = []
    for key, inputs, _ in calls:
        runner = official.get_signature_runner(None if key == "-" else key)
        found.append({k: np.array(v) for k, v in runner(**inputs).items()})
    return found


def mismatch(actual: np.ndarray, expected: np.ndarray, quantized_model: bool) -> str | None:
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return f"got {actual.dtype}{list(actual.shape)}, expected {expected.dtype}{list(expected.shape)}"
    diff = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
    if expected.dtype.kind in "iub":
        if not quantized_model:
            return f"{np.count_nonzero(diff)} elements differ" if diff.any() else None
        exact = float(np.mean(diff == 0))
        return f"up to {diff.max():.0f} units, {exact:.1%} exact" if diff.max() > 1 or exact < 0.99 else None
    scale = float(np.max(np.abs(expected.astype(np.float64)))) or 1.0
    return f"relative error {diff.max() / scale:.2e}" if diff.max() > 1e-4 * scale else None


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("name", [pytest.param(n, marks=[] if n in QUICK else [pytest.mark.slow]) for n in NAMES])
def test_shared_model_matches_official_builtin_kernels_through_each_api(shared_models, name, api, monkeypatch):
    if name == "mobilenet_v3_small_int8":
        # its reference outputs come from a 2-thread official runtime, whose int8 MEAN rounds per thread split
        from litegpu.ops import reduce as reduce_ops

        monkeypatch.setattr(reduce_ops, "OFFICIAL_NUM_THREADS", 2)
    calls = recorded_calls(shared_models / f"{name}.reference.npz")
    assert calls, f"{name}: no recorded call"
    call = runner(shared_models / f"{name}.tflite", api)
    quantized_model = any(x.dtype.kind in "iu" and x.dtype != np.int32 for _, inputs, _ in calls
                          for x in inputs.values())
    if quantized_model and getattr(call, "engines", None) == {"litert"}:
        # The fast path gave the integer model to the official interpreter: its tolerance is XNNPACK's distance
        # from the builtin kernels, so it is held to the official default's outputs (same thread count).
        calls = [(key, inputs, want) for (key, inputs, _), want in zip(calls, official_default(
            shared_models / f"{name}.tflite", calls))]
    problems = []
    for step, (key, inputs, expected) in enumerate(calls):
        got = call(key, inputs)
        for output, want in expected.items():
            why = mismatch(np.asarray(got[output]), want, quantized_model)
            if why:
                problems.append(f"call {step} {key}/{output}: {why}")
    assert not problems, f"{name} through {api}: " + "; ".join(problems[:5])
