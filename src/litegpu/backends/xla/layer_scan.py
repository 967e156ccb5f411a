"""Repeated layers of a subgraph, found so that XLA compiles one layer and loops over the stacked weights.

An LLM's decoder layers are the same ops with the same shapes and options, reading different weights.  Traced
op by op, XLA compiles each layer again: the compile time and the program grow with the depth (a 28-layer int4
decoder did not compile in two minutes on the H200's host).  ``find_blocks`` finds the longest run of a
subgraph's ops (in execution order) made of ``count`` consecutive blocks of ``period`` ops that are alike, and
checks how the blocks are wired, so that the XLA backend can trace the first block once inside ``lax.scan``:

- an op of a block reads a tensor made earlier in the same block (``local``), the matching tensor of the block
  before (``carried``: the hidden state; the first block reads its initial value, made before the run), a tensor
  every block reads (``shared``: made before the run, a subgraph input, a constant with the same bytes in every
  block), or one tensor per block (``stacked``: a weight, which the backend holds stacked, one slice a layer, or
  a subgraph input per layer such as a KV cache, stacked for the loop);
- a tensor that a block makes and something after the run reads is either the last block's carried value or a
  per-block output (``collected``: a new KV cache per layer).

Anything else (a block reading a tensor two blocks back, ops with state or calls, quantization parameters that
differ between blocks, which kernels use as constants) and the run is not used; the subgraph is traced as is.
The analysis reads only the IR: no JAX here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...ir import Subgraph, Tensor, called_subgraphs, execution_order

# Fewer repeats than this, or blocks of fewer ops, are traced as they are (nothing much to save).
MIN_BLOCKS = 3
MIN_PERIOD = 4
FLOAT_CONSTANTS = ("float32", "float16", "bfloat16")
# Ops that read or write state, or depend on the call: never inside a loop body.
_STATEFUL = frozenset({"VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE", "CALL_ONCE", "RANDOM_UNIFORM",
                       "RANDOM_STANDARD_NORMAL", "MULTINOMIAL", "HASHTABLE", "HASHTABLE_FIND", "HASHTABLE_IMPORT",
                       "HASHTABLE_SIZE", "STABLEHLO_RNG_BIT_GENERATOR"})


@dataclass(frozen=True)
class RepeatedBlocks:
    """``count`` blocks of ``period`` ops of subgraph ``subgraph`` and how they are wired (module docstring).

    ``blocks[k]`` are block k's op indices (block 0 is the template that is traced).  Slots are keyed by the
    template's tensor index: ``carried`` template tensor -> (initial tensor, (op position in the block, output
    position) making the next value); ``stacked`` template tensor -> the tensor of every block; ``collected``
    (op position, output position) -> the tensor of every block, for the tensors read after the run; ``last``
    (op position, output position) -> the last block's tensor read after the run (a carried value)."""

    subgraph: int
    blocks: tuple[tuple[int, ...], ...]
    before: tuple[int, ...]
    after: tuple[int, ...]
    carried: tuple[tuple[int, int, tuple[int, int]], ...]          # (template tensor, initial, made by)
    stacked: tuple[tuple[int, tuple[int, ...]], ...]               # (template tensor, per block)
    collected: tuple[tuple[tuple[int, int], tuple[int, ...]], ...]  # (made by, per block)
    last: tuple[tuple[tuple[int, int], int], ...]                   # (made by, the last block's tensor)

    @property
    def count(self) -> int:
        return len(self.blocks)

    @property
    def period(self) -> int:
        return len(self.blocks[0])

    def stacked_tensors(self) -> set[int]:
        return {t for _, per_block in self.stacked for t in per_block}


def _quantization_key(t: Tensor) -> Any:
    """What kernels read of a tensor's quantization as constants (scales, zero points; not the indices of the
    tensors that blockwise details name, which are per-block slots)."""
    q = t.quantization
    if q is None:
        return None
    details = q.details
    if details is not None:
        details = tuple(sorted((k, v) for k, v in dict(details).items() if k not in ("scales", "zero_points")))
    return (tuple(q.scale), tuple(q.zero_point or ()), q.quantized_dimension, details)


def _op_signature(sg: Subgraph, op: Any, model: Any = None, memo: dict | None = None) -> tuple:
    def tensor(i: int) -> Any:
        if i < 0:
            return None
        t = sg.tensors[i]
        return (tuple(t.shape), t.dtype, _quantization_key(t), t.raw is not None and t.raw.size > 0, t.is_variable)

    options = repr(op.options)
    if model is not None and called_subgraphs(op):
        # an op calling a subgraph (litert-torch's composites: one decomposition subgraph per layer, alike) is
        # known by what the subgraph computes, not by its index: the template's call then stands for every block's
        options = (tuple((k, v) for k, v in op.options.items() if not k.endswith(("subgraph_index", "subgraph_indices"))
                         and k != "subgraph"),
                   tuple(_subgraph_fingerprint(model, i, memo if memo is not None else {}) for i in called_subgraphs(op)))
        options = repr(options)
    return (op.opcode_name, options, tuple(tensor(i) for i in op.inputs), tuple(tensor(o) for o in op.outputs))


def _subgraph_fingerprint(model: Any, index: int, memo: dict) -> str:
    """What a subgraph computes, independent of its index: its ops' signatures and wiring, its inputs and outputs,
    and the bytes of its constants."""
    if index in memo:
        return memo[index]
    import hashlib

    memo[index] = "(recursive)"
    sg = model.subgraphs[index]
    digest = hashlib.sha256()
    digest.update(repr((sg.inputs, sg.outputs)).encode())
    for op in sg.operators:
        digest.update(repr((_op_signature(sg, op, model, memo), op.inputs, op.outputs)).encode())
    for t in sg.tensors:
        if t.raw is not None and t.raw.size:
            digest.update(repr((t.index, t.dtype, tuple(t.shape))).encode())
            digest.update(np.ascontiguousarray(t.raw).tobytes())
    memo[index] = digest.hexdigest()
    return memo[index]


def _best_runs(codes: np.ndarray, min_blocks: int) -> list[tuple[int, int, int]]:
    """Candidate (start, period, count) of runs of ``count`` >= ``min_blocks`` equal blocks, most ops covered
    first (then the shortest period)."""
    n = len(codes)
    found = []
    for period in range(MIN_PERIOD, n // min_blocks + 1):
        same = codes[:-period] == codes[period:]
        # longest stretch of positions i with codes[i] == codes[i + period]
        best_len, best_start, run, start = 0, 0, 0, 0
        for i, s in enumerate(same.tolist()):
            if s:
                if run == 0:
                    start = i
                run += 1
                if run > best_len:
                    best_len, best_start = run, start
            else:
                run = 0
        count = (best_len + period) // period
        if count >= min_blocks:
            found.append((best_start, period, count))
    found.sort(key=lambda c: (-(c[1] * c[2]), c[1]))
    return found


def find_blocks(sg: Subgraph, source: str = "<model>", *, min_blocks: int = MIN_BLOCKS,
                is_weight: Callable[[Tensor], bool] | None = None, model: Any = None) -> RepeatedBlocks | None:
    """The repeated blocks of ``sg`` (module docstring), or None.  ``is_weight``: the constants the backend holds
    as parameters (only those may differ between blocks: other constants are read as static values).  With
    ``model``, ops that call subgraphs (composites) may be in blocks when the subgraphs they call are alike."""
    if any(op.opcode_name in _STATEFUL or (called_subgraphs(op) and model is None) for op in sg.operators):
        return None
    if model is not None and any(_calls_state(model, i, set()) for op in sg.operators for i in called_subgraphs(op)):
        return None
    if any(t.is_variable for t in sg.tensors):
        return None
    order = execution_order(sg, source)
    signatures: dict[tuple, int] = {}
    memo: dict[int, str] = {}
    codes = np.asarray([signatures.setdefault(_op_signature(sg, sg.operators[i], model, memo), len(signatures))
                        for i in order], np.int64)
    is_weight = is_weight or (lambda t: t.raw is not None and t.raw.size > 0 and t.num_elements > 256)
    for start, period, count in _best_runs(codes, min_blocks)[:8]:
        # a block may read what the first one made for all (a mask made in layer 0): then start one block later
        for skip in range(0, count - min_blocks + 1):
            found = _wired(sg, order, start + skip * period, period, count - skip, is_weight)
            if found is not None:
                return found
    return None


def _calls_state(model: Any, index: int, seen: set[int]) -> bool:
    """Whether subgraph ``index`` (or one it calls) reads or writes state."""
    if index in seen:
        return False
    seen.add(index)
    sg = model.subgraphs[index]
    return any(op.opcode_name in _STATEFUL or any(_calls_state(model, i, seen) for i in called_subgraphs(op))
               for op in sg.operators) or any(t.is_variable for t in sg.tensors)


def _wired(sg: Subgraph, order: Sequence[int], start: int, period: int, count: int,
           is_weight: Callable[[Tensor], bool]) -> RepeatedBlocks | None:
    blocks = [tuple(order[start + k * period:start + (k + 1) * period]) for k in range(count)]
    made: dict[int, tuple[int, int, int]] = {}  # tensor -> (block, op position, output position)
    for k, ops in enumerate(blocks):
        for j, op_index in enumerate(ops):
            for o, t in enumerate(sg.operators[op_index].outputs):
                if t >= 0:
                    made[t] = (k, j, o)
    carried: dict[int, tuple[int, tuple[int, int]]] = {}
    stacked: dict[int, tuple[int, ...]] = {}
    template = blocks[0]
    for j, op_index in enumerate(template):
        reads = [list(sg.operators[blocks[k][j]].inputs) for k in range(count)]
        # blockwise scales and zero points that weights name: stacked with them
        extra = [[d for i in reads[k] if i >= 0 for d in sg.tensors[i].detail_tensors] for k in range(count)]
        for slot in range(len(reads[0]) + len(extra[0])):
            tensors = [(reads[k] + extra[k])[slot] for k in range(count)]
            role = _role(sg, tensors, made, is_weight, j)
            if role is None:
                return None
            kind, value = role
            t0 = tensors[0]
            if kind == "carried":
                if t0 in carried and carried[t0] != value:
                    return None
                carried[t0] = value
            elif kind == "stacked":
                stacked[t0] = tuple(tensors)
    # what the run makes and later ops (or the subgraph's outputs) read
    after = tuple(order[start + count * period:])
    before = tuple(order[:start])
    inside = {op for ops in blocks for op in ops}
    later_reads = {i for op in after for i in sg.operators[op].inputs if i >= 0} | set(sg.outputs)
    for op in after:  # blockwise details of weights read after the run are no block tensors
        later_reads.update(d for i in sg.operators[op].inputs if i >= 0 for d in sg.tensors[i].detail_tensors)
    read_by_next = {made_by for _, made_by in carried.values()}
    collected: dict[tuple[int, int], tuple[int, ...]] = {}
    last: dict[tuple[int, int], int] = {}
    for t, (k, j, o) in made.items():
        if t not in later_reads:
            continue
        per_block = _same_output(sg, blocks, j, o)
        if all(u in later_reads for u in per_block):
            collected[(j, o)] = per_block
        elif k == count - 1 and (j, o) in read_by_next and all(u not in later_reads for u in per_block[:-1]):
            last[(j, o)] = t
        else:
            return None
    # a tensor made before the run that a block reads must not be made inside: (execution order guarantees)
    assert not any(op in inside for op in before)
    return RepeatedBlocks(sg.index, tuple(blocks), before, after,
                          tuple((t0, init, made_by) for t0, (init, made_by) in sorted(carried.items())),
                          tuple(sorted(stacked.items())), tuple(sorted(collected.items())), tuple(sorted(last.items())))


def _same_output(sg: Subgraph, blocks: Sequence[tuple[int, ...]], j: int, o: int) -> tuple[int, ...]:
    return tuple(sg.operators[ops[j]].outputs[o] for ops in blocks)


def _role(sg: Subgraph, tensors: Sequence[int], made: dict, is_weight: Callable[[Tensor], bool], j: int
          ) -> tuple[str, Any] | None:
    """How the ``tensors`` that op position ``j`` of every block reads in one slot relate (module docstring)."""
    t0 = tensors[0]
    if t0 < 0:
        return ("shared", None) if all(t < 0 for t in tensors) else None
    origins = [made.get(t) for t in tensors]
    if all(o is not None and o[0] == k for k, o in enumerate(origins)):  # made in its own block
        if len({(o[1], o[2]) for o in origins}) == 1 and origins[0][1] < j:
            return ("local", (origins[0][1], origins[0][2]))
        return None
    if origins[0] is None and all(o is not None and o[0] == k - 1 for k, o in enumerate(origins) if k > 0):
        if len({(o[1], o[2]) for o in origins[1:]}) == 1:  # the block before's tensor; the first reads t0
            return ("carried", (t0, (origins[1][1], origins[1][2])))
        return None
    if any(o is not None for o in origins):  # a tensor of another block than this or the one before
        return None
    if len(set(tensors)) == 1:
        return ("shared", t0)
    first = sg.tensors[t0]
    others = [sg.tensors[t] for t in tensors]
    if all(t.raw is not None and t.raw.size > 0 for t in others):
        if all(is_weight(t) for t in others):
            return ("stacked", tuple(tensors))
        if all(t.raw.tobytes() == first.raw.tobytes() for t in others):  # small constants alike: one value
            return ("shared", t0)
        if all(t.dtype in FLOAT_CONSTANTS for t in others):
            # small float weights (a norm's scale): values the ops compute with, stacked in the program; integer
            # constants that differ (indices, shapes) are read as static values and cannot be
            return ("stacked", tuple(tensors))
        return None
    if all(t.raw is None or not t.raw.size for t in others) and all(t in sg.inputs for t in tensors):
        return ("stacked", tuple(tensors))  # one subgraph input per block (a KV cache per layer)
    return None


__all__ = ["MIN_BLOCKS", "RepeatedBlocks", "find_blocks"]
