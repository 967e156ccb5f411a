"""When and where the fast CPU path's engine choice is made, and where it is kept.

On the fast CPU path the official interpreter (XNNPACK) and OpenVINO may both run a model whole; which is
faster depends on the CPU and the model, and finding out (``Engine.faster_than``, kept by ``timing_memo``) costs a
first start converting and compiling the model for OpenVINO and timing both engines: a second or more, for a
model that may run in a millisecond.  So before timing, the planner asks what is already known
(``known_whole_choice``), in this order:

1. **this model's verdict**, kept in the compile cache by an earlier start that timed the engines or converted
   the model to find it: a second start times nothing, converts nothing, and loads only the engine chosen (a
   verdict for OpenVINO does not load the official interpreter);
2. **the model's size**: at most ``OBVIOUS_MAX_MACS`` multiply-accumulates per run, the official interpreter
   runs it without timing;
3. **the op mix**: where the ops OpenVINO may run at all (its policy: no integer arithmetic by default, no
   state, ...) do no multiply-accumulates, OpenVINO would keep no partition (``plan.MIN_OPENVINO_RUN_MACS``)
   and the official interpreter runs the model (integer models: no OpenVINO import, no conversion);
4. **an earlier verdict on a model of the same ops** (same op types, options, tensor shapes and types; other
   weights: a fine-tuned or re-converted model), kept in the cache for any model of that structure.

Only a model past all four is timed, and its verdict is kept as 1 and 4; a verdict found as 4 is kept as 1.  The
two rules (2 and 3) cost a start less than reading a kept verdict would save, and are not kept: processes starting
together would each write the same entry.
"""

from __future__ import annotations

import json
from typing import Any

from ..ir import Model, entry_subgraphs
from ..ir.macs import model_macs, ops_macs
from .timing_memo import TimingMemo, kept

# Models up to this many multiply-accumulates per run go to the official interpreter without timing it against
# OpenVINO: a call costs XNNPACK about 4 us against OpenVINO's 40, and on every model that small measured
# (the face detector, 0.03 G: 0.40 against 0.42 ms) XNNPACK was faster or within the timing's own noise.  The
# bound was 0.3 G (the Keras zoo up to MobileNetV2 ran faster on XNNPACK), until MnasNet 0.5 (0.1 G) ran 13 %
# faster on OpenVINO alone (7.6 against 8.7 ms, issue 38): models past this bound pay the timing at their first
# start (1-2 s: OpenVINO converts and compiles the model), once, as the verdict is kept.
OBVIOUS_MAX_MACS = 50_000_000
# When a model past the four rules is timed (``Options.engine_choice``): while it loads; later, once its calls on
# the official interpreter have taken as long as the timing would (``runtime.engine_choice``); or never (the
# official interpreter runs it).
AT_LOAD, DEFERRED, NEVER = "load", "deferred", "never"
ENGINE_CHOICES = (DEFERRED, AT_LOAD, NEVER)
# How ``DelegationPlan.choice`` says that the planner timed the engines while loading the model.
TIMED = "timed while loading"
# The scope of a verdict that covers the whole model (its entry subgraphs).
WHOLE = "whole model"
# How ``known_whole_choice`` says where a verdict came from: this model's own, kept by an earlier start; or one
# timed on a model of the same ops (kept as this model's own from then on).
REMEMBERED = "remembered in the compile cache"
SAME_OPS = "timed on a model of the same ops"


def obvious_by_size(model: Model) -> bool:
    """Whether ``model`` is small enough for the official interpreter to run without timing (``OBVIOUS_MAX_MACS``)."""
    return model_macs(model) <= OBVIOUS_MAX_MACS


def known_whole_choice(model: Model, litert: Any, openvino: Any) -> tuple[str, str] | None:
    """("litert" or "openvino", how it is known) where the engine that runs ``model`` whole is known without
    timing (see the module doc), else None.  ``litert`` and ``openvino`` are the planner's engines, which hold
    the model's compile cache."""
    remembered = TimingMemo(litert, openvino).cached(model, WHOLE)
    if remembered is not None:
        return remembered, REMEMBERED
    if obvious_by_size(model):
        return litert.name, f"a small model (at most {OBVIOUS_MAX_MACS / 1e6:.0f} M multiply-accumulates a run)"
    if openvino_work(model, openvino) == 0:
        return litert.name, "the ops OpenVINO may run do no multiply-accumulates (integer arithmetic is kept off it)"
    by_structure = TimingMemo(litert, openvino).cached(model, structure_scope(model), any_model=True)
    if by_structure is not None:
        return by_structure, SAME_OPS
    return None


def remember_timed(model: Model, litert: Any, openvino: Any, winner: str) -> None:
    """Keep a timed whole-model verdict for any model of the same ops (the model's own is kept by the timing),
    unless its timing could not tell the engines apart (``backends.litert.Verdict.decided``): that one is
    timed again at the next start."""
    if kept(winner):
        TimingMemo(litert, openvino).remember(model, structure_scope(model), winner, any_model=True)



def openvino_work(model: Model, openvino: Any) -> int:
    """Multiply-accumulates of the ops OpenVINO's policy lets it run (``Engine.policy_refusals``: asked without
    loading OpenVINO or converting the model); its converter may refuse some of these too."""
    total = 0
    for index in entry_subgraphs(model):
        sg = model.subgraphs[index]
        indices = [op.index for op in sg.operators]
        refused = openvino.policy_refusals(model, index, indices)
        total += ops_macs(sg, [i for i in indices if i not in refused])
    return total


def structure_scope(model: Model) -> str:
    """A verdict's scope for every model of the same ops: op types and options, and the shapes and types of the
    tensors they read and write (whether each is a constant), over every subgraph; not the weights' values."""
    from ..backends.cache import make_key

    parts = []
    for sg in model.subgraphs:
        ops = []
        for op in sg.operators:
            tensors = [(sg.tensors[t].shape, sg.tensors[t].dtype, sg.tensors[t].data is not None) if t >= 0 else None
                       for t in (*op.inputs, *op.outputs)]
            ops.append((op.opcode_name, json.dumps(dict(op.options), sort_keys=True, default=str), tensors))
        parts.append((list(sg.inputs), list(sg.outputs), ops))
    return f"{WHOLE} of structure {make_key({'subgraphs': parts})}"


__all__ = ["AT_LOAD", "DEFERRED", "ENGINE_CHOICES", "NEVER", "OBVIOUS_MAX_MACS", "REMEMBERED", "TIMED", "SAME_OPS", "WHOLE", "kept", "known_whole_choice", "obvious_by_size", "openvino_work", "remember_timed",
           "structure_scope"]
