"""Which fast CPU engine may run a dynamic-range model's hybrid ops: measured per model, not ruled by op type.

The fast CPU path keeps integer and hybrid ops off OpenVINO by default, because OpenVINO's int8 results are
further from the builtin kernels than XNNPACK's on integer models (MobileNetV3-small int8: 21 units against 5).
For dynamic-range ("hybrid": float activations, int8 weights) models XNNPACK itself can be far from the builtin
kernels (a TF dynamic-range MobileNetV2: 0.14 of its largest output; litert-torch's LLM exports: 1.5), and
OpenVINO, which multiplies dequantized weights in float, is sometimes nearer (a ResNet-like one: 0.008 against
0.016) and sometimes not (0.16 against 0.14; a transformer encoder: 5e-3 against 8e-8).  So for such a model the
rule is measured: on three seeded inputs, the builtin kernels' outputs (the official interpreter without its
delegates) against XNNPACK's (the official default) and OpenVINO's (the whole model converted).  OpenVINO may
take the hybrid ops when its largest distance is no more than XNNPACK's smallest, and the engines' timing then
decides as for float models.  One input is not enough: on the MobileNetV2 above OpenVINO was 0.12 and XNNPACK
0.15 on one input, 0.16 and 0.14 on another, engines that close being a tie, which goes to the official
default.  The verdict is kept in the compile cache (keyed by the model, both engines' versions and the CPU).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ir import Model, numpy_dtype
from .engine import EngineSettings, cpu_name, integer_arithmetic
from .op_range import OpRange

log = logging.getLogger(__name__)

PROBE_SEED = 0


@dataclass(frozen=True)
class HybridVerdict:
    """Whether OpenVINO may run the model's hybrid ops, and why (the distances measured, or what stopped it)."""

    openvino_allowed: bool
    reason: str
    xnnpack_distance: float | None = None    # the smallest over the probe inputs
    openvino_distance: float | None = None   # the largest


def dynamic_range_only(model: Model) -> bool:
    """A model whose integer arithmetic is all hybrid: float in, float out, int8 weights (no int8 activations)."""
    found = False
    for sg in model.subgraphs:
        for op in sg.operators:
            if integer_arithmetic(sg, op):
                found = True
                first = sg.tensors[op.inputs[0]] if op.inputs and op.inputs[0] >= 0 else None
                out = sg.tensors[op.outputs[0]] if op.outputs and op.outputs[0] >= 0 else None
                if first is None or out is None or first.dtype != "float32" or out.dtype != "float32":
                    return False
    return found


# The engine whose hybrid ops this module measures against the official interpreter's
HYBRID_ENGINE = "openvino"


def fast_path_verdict(model: Model, small: Callable[[], bool], settings: EngineSettings, cache: Any = None,
                      cache_key: dict | None = None) -> HybridVerdict:
    """The verdict for a model on the default fast CPU path whose engines include ``HYBRID_ENGINE``: measured for a
    dynamic-range model that is not ``small`` (which the official interpreter runs untimed), measured once and
    kept in ``cache``."""
    if not dynamic_range_only(model):
        return HybridVerdict(False, "not a dynamic-range model on the fast path")
    if small():
        return HybridVerdict(False, "not measured: a small model, which the official interpreter runs without timing")
    from .openvino import OpenVinoEngine

    if not OpenVinoEngine().installed():
        return HybridVerdict(False, "OpenVINO is not installed")
    return openvino_verdict(model, model.tflite_file, settings, cache, cache_key)


def openvino_verdict(model: Model, file: str | None, settings: EngineSettings, cache: Any = None,
                     cache_key: dict | None = None) -> HybridVerdict:
    """The measured verdict for a dynamic-range model (see the module doc), kept in ``cache``."""
    refusal = _not_measurable(model, file)
    if refusal is not None:
        return HybridVerdict(False, refusal)
    if cache is None:
        return _measured(model, file, settings)
    from .cache import found_or_made, make_key
    from .litert import litert_version
    from .openvino import openvino_package_version

    # OpenVINO's version from its package metadata: a warm start that keeps XNNPACK never imports OpenVINO
    key = make_key({**(cache_key or {}), "what": "hybrid ops: openvino against xnnpack",
                    "litert": litert_version(), "openvino": openvino_package_version(), "cpu": cpu_name()})

    def measured() -> HybridVerdict:
        verdict = _measured(model, file, settings)
        cache.store(key, json.dumps(verdict.__dict__).encode(), {"engine": "openvino", "what": "hybrid verdict",
                                                                 "source": model.source})
        return verdict

    return found_or_made(cache, key, lambda: _stored(cache, key), measured)


def _stored(cache: Any, key: str) -> HybridVerdict | None:
    stored = cache.load(key)
    if stored is None:
        return None
    try:
        return HybridVerdict(**json.loads(stored))
    except (ValueError, TypeError) as e:  # checksummed, yet not ours: measure again
        cache.discard(key, f"not a verdict ({e})")
        return None


def _measured(model: Model, file: str, settings: EngineSettings) -> HybridVerdict:
    from .litert import LiteRtEngine
    from .openvino import OpenVinoEngine

    sg = model.subgraphs[0]
    whole = OpRange(0, tuple(range(len(sg.operators))), tuple(sg.inputs), tuple(sg.outputs))
    try:
        ov_settings = EngineSettings(num_threads=settings.num_threads, precision=settings.precision,
                                     approximate_integers=True)
        xnnpack_run = LiteRtEngine(settings, file=file).compile(model, whole, settings)
        openvino_run = OpenVinoEngine(settings=ov_settings, file=file).compile(model, whole, ov_settings)
        probes = _probe_inputs(model)
        distances = []
        for inputs, builtin in zip(probes, _builtin_outputs(file, probes)):
            distances.append((_distance([np.asarray(y) for y in xnnpack_run.run(inputs)], builtin),
                              _distance([np.asarray(y) for y in openvino_run.run(inputs)], builtin)))
    except Exception as e:  # noqa: BLE001  (an engine that cannot run it whole: the rule by op type stands)
        verdict = HybridVerdict(False, f"not measured: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
    else:
        verdict = decide(distances)
    log.info("%s: %s", model.source, verdict.reason)
    return verdict


def decide(distances: list[tuple[float, float]]) -> HybridVerdict:
    """The verdict from (XNNPACK's, OpenVINO's) distance on each probe input: OpenVINO's largest no more than
    XNNPACK's smallest."""
    nearest_xnnpack = min(x for x, _ in distances)
    farthest_openvino = max(o for _, o in distances)
    allowed = farthest_openvino <= nearest_xnnpack
    return HybridVerdict(
        allowed, f"from the builtin kernels' outputs on {len(distances)} inputs: OpenVINO up to "
                 f"{farthest_openvino:.3g}, XNNPACK at least {nearest_xnnpack:.3g} of the largest output: OpenVINO "
                 f"{'may' if allowed else 'may not'} run the hybrid ops", nearest_xnnpack, farthest_openvino)


def _not_measurable(model: Model, file: str | None) -> str | None:
    if file is None:
        return "a model given as bytes is not measured (the engines read its file)"
    if len(model.subgraphs) != 1 or len(model.signatures) > 1:
        return "only single-subgraph models are measured"
    sg = model.subgraphs[0]
    if any(sg.tensors[t].dtype != "float32" for t in (*sg.inputs, *sg.outputs)):
        return "only models with float inputs and outputs are measured"
    if any(d < 1 for t in sg.inputs for d in sg.tensors[t].shape):
        return "inputs of dynamic shape are not measured"
    return None


def _probe_inputs(model: Model) -> list[list[np.ndarray]]:
    """Three seeded inputs of other distributions: uniform in [-1, 1], standard normal, uniform in [0, 1]."""
    rng = np.random.default_rng(PROBE_SEED)
    sg = model.subgraphs[0]
    shapes = [(tuple(int(d) for d in sg.tensors[t].shape), numpy_dtype(sg.tensors[t].dtype)) for t in sg.inputs]
    draws = (lambda s: rng.uniform(-1, 1, s), rng.standard_normal, lambda s: rng.uniform(0, 1, s))
    return [[draw(shape).astype(dtype) for shape, dtype in shapes] for draw in draws]


def _builtin_outputs(file: str, probes: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
    """The builtin kernels' outputs (the official interpreter without its delegates, one thread) for each probe."""
    from .litert import _interpreter_module, native_info_logs_dropped

    module = _interpreter_module()
    with native_info_logs_dropped():
        interpreter = module.Interpreter(
            model_path=file, num_threads=1,
            experimental_op_resolver_type=module.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
        interpreter.allocate_tensors()
    found = []
    for inputs in probes:
        for detail, x in zip(interpreter.get_input_details(), inputs):
            interpreter.set_tensor(detail["index"], x)
        interpreter.invoke()
        found.append([interpreter.get_tensor(d["index"]).copy() for d in interpreter.get_output_details()])
    return found


def _distance(got: list[np.ndarray], want: list[np.ndarray]) -> float:
    """The largest difference over the largest magnitude, over every output."""
    worst = 0.0
    for g, w in zip(got, want):
        w = np.asarray(w, np.float64)
        scale = float(np.abs(w).max(initial=0.0)) or 1.0
        worst = max(worst, float(np.abs(np.asarray(g, np.float64).reshape(w.shape) - w).max(initial=0.0)) / scale)
    return worst


__all__ = ["HybridVerdict", "decide", "dynamic_range_only", "openvino_verdict"]
