"""Held-out models made by the official converter (see README.md here) against the official runtime's outputs.

Each model runs through ``CompiledModel`` (CPU, XLA backend) and through the classic ``Interpreter``, both
with ``BUILTIN_WITHOUT_DEFAULT_DELEGATES`` (litegpu's numpy reference kernels) and with ``AUTO`` (the XLA CPU
program CompiledModel runs), call after call in the recorded order, and is compared with the official builtin kernels' outputs (``out_ref``):

- float models: largest difference over largest magnitude <= 1e-4;
- integer outputs of quantized models: within 1 unit everywhere and exact in >= 99% of elements
  (integer outputs of float models, e.g. ARG_MAX, must be exact);
- float outputs of dynamic-range ("hybrid") models: as float models through the XLA programs that give the
  builtin kernels' numbers (``CpuKernelMode.BUILTIN``, the ``Interpreter``'s default); through the default fast
  path and the numpy reference kernels, within the official runtime's own spread between its two CPU paths
  (max |out_ref - out_xnn|) plus 1e-4 of the output's magnitude.

A model that litegpu cannot run yet (``UnsupportedOpError``, or the XLA backend refusing ops so that a
CompiledModel falls back to the reference kernels) is an expected failure naming the blocking ops; a
numeric mismatch is a failure, and its message names the first op whose output diverges.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from litegpu import CompiledModel, HardwareAccelerator, Interpreter, OpResolverType, UnsupportedOpError
from litegpu.ops import Target

MODELS = Path(__file__).resolve().parent / "models"
NAMES = sorted(p.stem for p in MODELS.glob("*.tflite"))
FLOAT_RTOL = 1e-4
MIN_EXACT = 0.99

# XLA compiles of these take more than ~5 s here (image models, hundreds of unrolled recurrent ops);
# the rest stays well inside a minute together.
# The reference kernels (the Interpreter's) run every model in well under a second.
SLOW_TO_COMPILE = {name for name in NAMES
                   if name.startswith(("mobilenet_v2", "resnet_effnet", "transformer")) or "_unrolled_" in name}


@dataclass
class Call:
    signature: str
    inputs: dict[str, np.ndarray]
    out_ref: dict[str, np.ndarray]
    out_xnn: dict[str, np.ndarray]


@cache
def load(name: str) -> tuple[dict, list[Call]]:
    """(meta, the recorded calls in order) from ``models/<name>.npz``."""
    with np.load(MODELS / f"{name}.npz") as z:
        meta = json.loads(str(z["meta"]))
        calls: dict[int, Call] = {}
        for key in z.files:
            if key == "meta":
                continue
            step, signature, kind, tensor = key.split("/", 3)
            k = int(step.removeprefix("step"))
            call = calls.setdefault(k, Call(signature, {}, {}, {}))
            {"in": call.inputs, "out_ref": call.out_ref, "out_xnn": call.out_xnn}[kind][tensor] = z[key]
    assert sorted(calls) == list(range(meta["steps"])), f"{name}.npz: steps {sorted(calls)}"
    return meta, [calls[k] for k in sorted(calls)]


# ---- criteria -----------------------------------------------------------------------------------

def as64(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


def mismatch(actual: np.ndarray, call: Call, output: str, criterion: str) -> str | None:
    """Why ``actual`` does not match the reference output (None when it does)."""
    expected, xnn = call.out_ref[output], call.out_xnn[output]
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return f"got {actual.dtype}{list(actual.shape)}, expected {expected.dtype}{list(expected.shape)}"
    if expected.size == 0:
        return None
    diff = np.abs(as64(actual) - as64(expected))
    if np.issubdtype(expected.dtype, np.integer) or expected.dtype == bool:
        if criterion != "int":
            return None if not diff.any() else f"{int(np.count_nonzero(diff))} element(s) differ (exact expected)"
        exact = float(np.mean(diff == 0))
        if diff.max() > 1 or exact < MIN_EXACT:
            return f"max difference {diff.max():.0f} units, {exact:.2%} exact (want <= 1 unit, >= 99% exact)"
        return None
    scale = float(np.max(np.abs(as64(expected)))) or 1.0
    tolerance = FLOAT_RTOL * scale
    if criterion == "hybrid":
        tolerance += float(np.max(np.abs(as64(expected) - as64(xnn))))
    if not np.all(np.isfinite(actual)) or diff.max() > tolerance:
        return (f"max |difference| {diff.max():.3g} > tolerance {tolerance:.3g} (output magnitude {scale:.3g}, "
                f"criterion {criterion})")
    return None


# ---- running ------------------------------------------------------------------------------------

def run_compiled_model(name: str, calls: list[Call], exact: bool = False
                       ) -> tuple[list[dict[str, np.ndarray]], str | None, set[str]]:
    """Outputs of each call, why the XLA backend did not run the model (None when it did) and the engines that
    ran it.  ``exact``: ``CpuKernelMode.BUILTIN`` (every op on the exact kernels); else the default fast path
    (the official interpreter or OpenVINO where faster, XLA for the rest)."""
    import litegpu

    mode = litegpu.CpuKernelMode.BUILTIN if exact else None
    options = litegpu.Options(HardwareAccelerator.CPU, cpu_options=litegpu.CpuOptions(num_threads=1, kernel_mode=mode))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fallback warning; we report the plan's notes instead
        model = CompiledModel.from_file(MODELS / f"{name}.tflite", options=options)
    fallback = "\n".join(model.plan.notes) if model.plan.target is Target.REFERENCE else None
    with model:
        return ([model.run(call.inputs, signature_key=call.signature) for call in calls], fallback,
                set(model.plan.ops_per_engine()))


def run_official_default(name: str, calls: list[Call]) -> list[dict[str, np.ndarray]]:
    """The official interpreter with its default delegate (XNNPACK), one thread, replaying ``calls``."""
    from ai_edge_litert.interpreter import Interpreter as Official

    official = Official(model_path=str(MODELS / f"{name}.tflite"), num_threads=1)
    official.allocate_tensors()
    return [{k: np.array(v) for k, v in official.get_signature_runner(call.signature)(**call.inputs).items()}
            for call in calls]


def run_interpreter(name: str, calls: list[Call], preserve: bool = False,
                    resolver: OpResolverType = OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
                    ) -> tuple[Interpreter, list[dict]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        interpreter = Interpreter(model_path=str(MODELS / f"{name}.tflite"), num_threads=1,
                                  experimental_op_resolver_type=resolver,
                                  experimental_preserve_all_tensors=preserve)
    interpreter.allocate_tensors()
    results = [interpreter.get_signature_runner(call.signature)(**call.inputs) for call in calls]
    return interpreter, results


def official_interpreter(name: str, calls: list[Call]):
    """The official interpreter (builtin kernels, every tensor kept) after replaying ``calls``."""
    from ai_edge_litert.interpreter import Interpreter as Official
    from ai_edge_litert.interpreter import OpResolverType as OfficialResolver

    official = Official(model_path=str(MODELS / f"{name}.tflite"), num_threads=1,
                        experimental_op_resolver_type=OfficialResolver.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
                        experimental_preserve_all_tensors=True)
    official.allocate_tensors()
    for call in calls:
        official.get_signature_runner(call.signature)(**call.inputs)
    return official


def first_divergence(name: str, calls: list[Call], criterion: str) -> str:
    """The first op, in execution order of the last call's subgraph, whose output differs between the
    official builtin kernels and litegpu's reference kernels (both keeping every tensor)."""
    try:
        ours, _ = run_interpreter(name, calls, preserve=True)
        official = official_interpreter(name, calls)
    except Exception as e:  # diagnosis only: never hide the mismatch behind it
        return f"(no diagnosis: {type(e).__name__}: {e})"
    model = ours._model
    subgraph = next(s.subgraph_index for s in model.signatures if s.key == calls[-1].signature)
    sg = model.subgraphs[subgraph]
    compared = 0
    for op in sg.operators:
        for t in op.outputs:
            if t < 0 or sg.tensors[t].dtype in ("resource", "variant", "string"):
                continue
            try:
                expected, actual = official.get_tensor(t, subgraph), ours.get_tensor(t, subgraph)
            except Exception:
                continue
            compared += 1
            probe = Call("", {}, {"t": expected}, {"t": expected})
            quantized = sg.tensors[t].quantization is not None and criterion == "int"
            why = mismatch(np.asarray(actual), probe, "t", "int" if quantized else "float")
            if why:
                return f"first diverging op: #{op.index} {op.opcode_name} of subgraph {subgraph}, tensor {t} " \
                       f"{sg.tensors[t].name!r}: {why}"
    return (f"litegpu's reference kernels match the official ones on all {compared} intermediate tensors of "
            f"subgraph {subgraph}: the XLA lowering differs")


def check(name: str, calls: list[Call], results: list[dict[str, np.ndarray]], criterion: str) -> None:
    problems = []
    for k, (call, got) in enumerate(zip(calls, results)):
        assert set(got) == set(call.out_ref), f"{name} step {k}: outputs {sorted(got)} vs {sorted(call.out_ref)}"
        for output in call.out_ref:
            why = mismatch(np.asarray(got[output]), call, output, criterion)
            if why:
                problems.append((k, f"step {k} {call.signature}/{output}: {why}"))
    if problems:
        first_step = problems[0][0]
        detail = first_divergence(name, calls[:first_step + 1], criterion)
        pytest.fail(f"{name}: " + "; ".join(p for _, p in problems[:5]) + f"\n{detail}")


def params():
    for name in NAMES:
        for api in ("compiled_model", "compiled_model_exact", "interpreter", "interpreter_xla"):
            marks = [pytest.mark.slow] if api != "interpreter" and name in SLOW_TO_COMPILE else []
            yield pytest.param(name, api, id=f"{api}-{name}", marks=marks)


@pytest.mark.parametrize("name, api", list(params()))
def test_heldout_model_matches_official_builtin_kernels(name, api):
    meta, calls = load(name)
    fallback = None
    try:
        if api.startswith("compiled_model"):
            results, fallback, engines = run_compiled_model(name, calls, exact=api == "compiled_model_exact")
            if engines == {"litert"}:
                # The fast path gave the model to the official interpreter: its tolerance is XNNPACK's distance
                # from the builtin kernels, so it must give the official default's outputs exactly.
                for k, (got, want) in enumerate(zip(results, run_official_default(name, calls))):
                    assert set(got) == set(want)
                    for output in want:
                        np.testing.assert_array_equal(got[output], want[output], err_msg=f"{name} step {k} {output}")
                return
        elif api == "interpreter_xla":
            interpreter, results = run_interpreter(name, calls, resolver=OpResolverType.AUTO)
            if interpreter._use_reference:
                fallback = "the Interpreter's CPU plan fell back to the reference kernels"
        else:
            results = run_interpreter(name, calls)[1]
    except UnsupportedOpError as e:
        pytest.xfail(str(e))
    criterion = meta["criterion"]
    if criterion == "hybrid" and api in ("compiled_model_exact", "interpreter_xla"):
        # the XLA programs that give the builtin kernels' numbers (BUILTIN mode, the Interpreter's default) are
        # held to the float rule on dynamic-range models too, not to XNNPACK's spread (issue 26: within 1e-4).
        # The numpy reference's GELU is not the builtin kernel's to the bit (text_encoder_dynamic: 1.8e-4).
        criterion = "float"
    check(name, calls, results, criterion)
    if fallback:
        pytest.xfail(f"matches, but only on the reference kernels: {fallback}")


def test_models_are_present_and_small():
    assert len(NAMES) >= 30, NAMES
    sizes = {p.name: p.stat().st_size for p in MODELS.iterdir()}
    assert all(size < 2 * 2**20 for size in sizes.values()), sizes
    assert sum(sizes.values()) < 15 * 2**20


def test_criteria_catch_mismatches():
    """The comparison is not vacuous: one unit too many, too few exact elements and float drift fail."""
    ints = np.arange(-100, 100, dtype=np.int8)
    call = Call("s", {}, {"y": ints}, {"y": ints})
    assert mismatch(ints.copy(), call, "y", "int") is None
    off_by_two = ints.copy()
    off_by_two[3] += 2
    assert mismatch(off_by_two, call, "y", "int")
    off_by_one = ints + np.int8(1)
    assert mismatch(off_by_one, call, "y", "int")  # 1 unit everywhere: 0% exact
    floats = np.linspace(-1, 1, 50, dtype=np.float32)
    hybrid = Call("s", {}, {"y": floats}, {"y": floats + np.float32(1e-3)})
    assert mismatch(floats + np.float32(5e-4), hybrid, "y", "hybrid") is None
    assert mismatch(floats + np.float32(5e-4), hybrid, "y", "float")
    assert mismatch(floats + np.float32(2e-3), hybrid, "y", "hybrid")
    assert mismatch(floats.astype(np.float64), hybrid, "y", "float")


def test_first_divergence_names_the_first_op_that_differs(monkeypatch):
    """The diagnosis on a mismatch finds the op: perturb one intermediate tensor of our interpreter."""
    name = "resnet_effnet_int8"
    meta, calls = load(name)
    sg = Interpreter(model_path=str(MODELS / f"{name}.tflite"))._model.subgraphs[0]
    victim = sg.operators[5]
    original = Interpreter.get_tensor

    def perturbed(self, tensor_index, subgraph_index=0):
        value = original(self, tensor_index, subgraph_index)
        return value + np.int8(3) if tensor_index == victim.outputs[0] else value

    monkeypatch.setattr(Interpreter, "get_tensor", perturbed)
    report = first_divergence(name, calls, meta["criterion"])
    assert f"#{victim.index} {victim.opcode_name}" in report, report
