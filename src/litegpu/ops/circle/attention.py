"""Circle's ATTENTION (code -9): Hugging Face's ``LlamaAttention`` fused into one op, as tico emits it.

Where the op comes from.  tico (0.3) emits ATTENTION only through its onert adapter
(``tico/serialize/operators/adapters/onert/llama_attention.py``), which a user installs over
``transformers``' ``LlamaAttention.forward`` before ``tico.convert``; the op's torch body
(``circle_custom::attention``) returns None, so what the op computes is what the module it replaces
computes.  Its eleven inputs, in tico's order, with the shapes tico writes (measured on exports of
``LlamaAttention`` with transformers 4.52 and 4.55):

    0 hidden [B, S, D]      1 wq [H*hd, D]   2 wk [KV*hd, D]   3 wv [KV*hd, D]   4 wo [D', H*hd]
    5 cos [B|1, S, hd]      6 sin [B|1, S, hd]                 7 mask [B|1, H|1, S, K]
    8 past_key [B, KV, L, hd]   9 past_value [B, KV, L, hd]     10 cache_position [S] (integer)

and one output [B, S, D'].  ``AttentionOptions`` is empty: the head size hd is the tables' last axis,
H = wq's rows / hd, KV = the caches' second axis (grouped-query attention when KV < H).

What it computes (``LlamaAttention.forward``, eager path): q, k, v = hidden @ w^T, split into heads;
q and k rotated as ``x * cos + rotate_half(x) * sin`` (the tables broadcast over heads; this is ONE's
GPT_NEOX ROPE, ``ops/circle/rope.py``); the keys and values attended over are the cache with the new
ones in it (below); scores = q @ keys^T * hd^-0.5 + mask, softmax over the keys, times the values
(query head h reads key head h // (H / KV)), heads joined, @ wo^T.  No biases (the adapter passes only
the projection weights), no dropout.

The cache.  The adapter passes ``past_key_value.key_cache[layer_idx]`` / ``value_cache``, whatever
cache class the export used, and the mask Hugging Face builds for that class.  The graph holds two
forms, told apart by the mask's key axis K against the cache's length L:

- K == L + S: a DynamicCache (what tico's own LlamaAttentionWithKVCache test and TinyLlama example
  use).  ``DynamicCache.update`` appends: the keys are the L past ones followed by the S new ones, and
  ``cache_position`` is not read.
- K == L: a StaticCache.  ``StaticCache.update`` writes the new keys into the cache at
  ``cache_position`` (``index_copy_`` along the sequence axis) and attention runs over the whole cache.

Any other K is refused: Hugging Face would slice a wider mask down to the keys, which makes a width
other than these two ambiguous between the forms.  The op has one output, so the updated cache is not
one: like the graph tico writes, the op is a function of its inputs (torch's cache object grows or
is written in place; a caller that keeps a cache appends or writes it itself).  In the static form
the reference refuses positions outside the cache or repeated; XLA cannot raise on a traced value,
and drops writes outside the cache.

What ONE's runtime says.  onert 0.1.0 (PyPI) refuses to load the op ("Unsupported operation").  One
version of ONE's ``runtime/onert/backend/cpu/ops/AttentionLayer.cc`` is a stub throwing "not implemented
yet" whose interface (plus a ``layer_idx`` the schema lacks) describes a fixed cache written at ``pos``;
another (Samsung/ONE at aa5d491f) implements that one: batch 1, one token, no grouped heads, a cache
laid out [B, L, H, hd] (not Hugging Face's [B, KV, L, hd], which is what tico writes), the new key
stored into the input cache at ``pos``, and a mask of a 32-aligned key count.  Those files are not the ones tico makes, and shapes alone cannot
always tell the layouts apart (they coincide when L equals the head count), so litegpu runs the
layout tico emits and checks it against torch; onert's layout is not run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import ModelExecutionError
from .rope import neox_rotate
from ..registry import Op, OpContext, register

INPUT_NAMES = ("hidden", "wq", "wk", "wv", "wo", "cos", "sin", "mask", "past_key", "past_value", "cache_position")
_RANKS = (3, 2, 2, 2, 2, 3, 3, 4, 4, 4, 1)
APPENDED, WRITTEN = "appended", "written"  # DynamicCache, StaticCache


@dataclass(frozen=True)
class Layout:
    batch: int
    tokens: int      # S, the new positions
    heads: int       # H
    kv_heads: int    # KV
    head_size: int   # hd
    cache: int       # L, the cache's length
    keys: int        # K, the positions attended over
    form: str        # APPENDED or WRITTEN


def layout(shapes: list[tuple[int, ...]]) -> Layout:
    """The op's dimensions and cache form from its inputs' shapes; ValueError saying what does not fit."""
    if len(shapes) != len(INPUT_NAMES):
        raise ValueError(f"takes {len(INPUT_NAMES)} inputs ({', '.join(INPUT_NAMES)}), got {len(shapes)}")
    for name, rank, shape in zip(INPUT_NAMES, _RANKS, shapes):
        if len(shape) != rank:
            raise ValueError(f"{name} must have rank {rank}, got shape {list(shape)}")
    hidden, wq, wk, wv, wo, cos, sin, mask, past_key, past_value, position = shapes
    batch, tokens, width = hidden
    _, kv_heads, cache, head_size = past_key
    if head_size == 0 or head_size % 2:
        raise ValueError(f"the head size (the caches' last axis) must be even and positive, got {head_size}")
    heads = wq[0] // head_size
    if wq[0] % head_size or heads == 0 or kv_heads == 0 or heads % kv_heads:
        raise ValueError(f"wq {list(wq)} must hold a multiple of the {kv_heads} key heads of size {head_size}")

    def need(ok: bool, what: str, got: tuple[int, ...], want: str) -> None:
        if not ok:
            raise ValueError(f"{what} must be {want}, got {list(got)}")

    for name, shape in (("wq", wq), ("wk", wk), ("wv", wv)):
        need(shape[1] == width, name, shape, f"[rows, {width}] for hidden {list(hidden)}")
    for name, shape in (("wk", wk), ("wv", wv)):
        need(shape[0] == kv_heads * head_size, name, shape, f"[{kv_heads * head_size}, {width}]")
    need(wo[1] == heads * head_size, "wo", wo, f"[units, {heads * head_size}]")
    need(tuple(past_value) == tuple(past_key), "past_value", past_value, f"past_key's shape {list(past_key)}")
    need(past_key[0] == batch, "past_key", past_key, f"[{batch}, KV, L, hd] for hidden {list(hidden)}")
    for name, shape in (("cos", cos), ("sin", sin)):
        need(shape[0] in (1, batch) and shape[1:] == (tokens, head_size), name, shape,
             f"[{batch} or 1, {tokens}, {head_size}]")
    need(mask[0] in (1, batch) and mask[1] in (1, heads) and mask[2] == tokens, "mask", mask,
         f"[{batch} or 1, {heads} or 1, {tokens}, K]")
    keys = mask[3]
    if keys == cache + tokens:
        form = APPENDED
    elif keys == cache:
        form = WRITTEN
        need(position == (tokens,), "cache_position", position, f"[{tokens}] (one cache slot per new position)")
    else:
        raise ValueError(f"the mask's key axis is {keys}: neither the cache's {cache} positions followed by the "
                         f"{tokens} new ones (a DynamicCache) nor the cache's {cache} (a StaticCache)")
    return Layout(batch, tokens, heads, kv_heads, head_size, cache, keys, form)


def _matmul(ctx: OpContext, a: Any, b: Any) -> Any:
    # HIGHEST: float32 products on GPUs that would otherwise take TF32 (as ops/matmul.py)
    return ctx.xp.matmul(a, b) if ctx.lax is None else ctx.xp.matmul(a, b, precision=ctx.lax.Precision.HIGHEST)


def _heads(ctx: OpContext, x: Any, w: Any, n: int, lay: Layout) -> Any:
    """hidden @ w^T split into n heads: [B, n, S, hd]."""
    y = _matmul(ctx, x, ctx.xp.swapaxes(w, 0, 1))
    return ctx.xp.reshape(y, (lay.batch, lay.tokens, n, lay.head_size)).transpose(0, 2, 1, 3)


def _written(ctx: OpContext, cache: Any, new: Any, position: Any, lay: Layout) -> Any:
    """The cache with ``new`` [B, KV, S, hd] written at ``position`` along its sequence axis."""
    if ctx.lax is not None:
        return ctx.xp.asarray(cache).at[:, :, position].set(new.astype(cache.dtype), mode="drop")
    positions = np.asarray(position).astype(np.int64)
    bad = (positions < 0) | (positions >= lay.cache)
    if bad.any():
        raise ModelExecutionError(f"{ctx.model.source}: {ctx.op}: cache_position {int(positions[bad][0])} is outside "
                                  f"the cache's {lay.cache} positions")
    if len(set(positions.tolist())) != positions.size:
        raise ModelExecutionError(f"{ctx.model.source}: {ctx.op}: cache_position {positions.tolist()} writes a "
                                  "cache slot twice")
    out = np.array(cache, copy=True)
    out[:, :, positions] = new
    return out


@register("ATTENTION")
class Attention(Op):
    dtypes = ("float32",)

    def unsupported_reason(self, op, subgraph, target):
        reason = super().unsupported_reason(op, subgraph, target)
        if reason is not None:
            return reason
        if len(op.inputs) != len(INPUT_NAMES) or any(i < 0 for i in op.inputs):
            return f"takes {len(INPUT_NAMES)} inputs ({', '.join(INPUT_NAMES)}), all present"
        tensors = [subgraph.tensors[i] for i in op.inputs]
        for name, t in zip(INPUT_NAMES, tensors):
            want = ("int32", "int64") if name == "cache_position" else ("float32",)
            if t.dtype not in want:
                return f"{name} is {t.dtype} (takes {' or '.join(want)})"
        try:
            layout([t.shape for t in tensors])
        except ValueError as e:
            return str(e)
        return None

    def compute(self, ctx: OpContext, hidden: Any, wq: Any, wk: Any, wv: Any, wo: Any, cos: Any, sin: Any,
                mask: Any, past_key: Any, past_value: Any, position: Any) -> Any:
        xp = ctx.xp
        try:
            lay = layout([tuple(a.shape) for a in (hidden, wq, wk, wv, wo, cos, sin, mask, past_key, past_value,
                                                   position)])
        except ValueError as e:
            raise ModelExecutionError(f"{ctx.model.source}: {ctx.op}: {e}") from None
        # The tables broadcast over heads: [B|1, S, hd] -> [B|1, 1, S, hd], as apply_rotary_pos_emb's unsqueeze.
        cos, sin = cos[:, None], sin[:, None]
        q = neox_rotate(xp, _heads(ctx, hidden, wq, lay.heads, lay), sin, cos)
        k = neox_rotate(xp, _heads(ctx, hidden, wk, lay.kv_heads, lay), sin, cos)
        v = _heads(ctx, hidden, wv, lay.kv_heads, lay)
        if lay.form == APPENDED:
            keys = xp.concatenate([past_key, k.astype(past_key.dtype)], axis=2)
            values = xp.concatenate([past_value, v.astype(past_value.dtype)], axis=2)
        else:
            keys = _written(ctx, past_key, k, position, lay)
            values = _written(ctx, past_value, v, position, lay)
        # Query head h reads key head h // group (repeat_kv): the group's queries stacked along the rows
        # of one product, [B, KV, group * S, hd] @ [B, KV, hd, K], so the keys are never repeated.
        group = lay.heads // lay.kv_heads
        grouped = xp.reshape(q, (lay.batch, lay.kv_heads, group * lay.tokens, lay.head_size))
        scores = _matmul(ctx, grouped, xp.swapaxes(keys, 2, 3))
        scores = xp.reshape(scores, (lay.batch, lay.heads, lay.tokens, lay.keys))
        scores = scores * xp.asarray(lay.head_size ** -0.5, scores.dtype) + mask
        scores = xp.exp(scores - xp.max(scores, axis=-1, keepdims=True))
        weights = scores / xp.sum(scores, axis=-1, keepdims=True)
        weights = xp.reshape(weights, (lay.batch, lay.kv_heads, group * lay.tokens, lay.keys))
        out = xp.reshape(_matmul(ctx, weights, values), (lay.batch, lay.heads, lay.tokens, lay.head_size))
        out = xp.reshape(out.transpose(0, 2, 1, 3), (lay.batch, lay.tokens, lay.heads * lay.head_size))
        return _matmul(ctx, out, xp.swapaxes(wo, 0, 1)).astype(hidden.dtype)
