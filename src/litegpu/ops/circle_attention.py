"""Circle's ATTENTION (code -9): refused, because what it does with its cache inputs is not established.

What ONE's sources say (checked in Samsung/ONE and tico 0.3.0):

- The schema gives it no options (``AttentionOptions {}``) and eleven inputs, which tico's onert adapter
  (``tico/serialize/operators/adapters/onert/llama_attention.py``) fills from Hugging Face's
  ``LlamaAttention.forward``: hidden_states, the q / k / v / o projection weights, the rotary cos and sin, the
  attention mask, ``past_key_value.key_cache[layer_idx]``, ``value_cache[layer_idx]`` and cache_position.  The
  op's torch body (``circle_custom::attention``) returns None: tico defines no computation for it, and the
  adapter needs a cache that already holds keys (an empty DynamicCache has no ``key_cache[layer_idx]``).
- onert's kernel (``AttentionLayer.cc``) throws "not implemented yet"; its interface takes the same tensors
  plus a ``layer_idx`` that the schema does not carry, and documents k_cache / v_cache with a position ``pos``
  for one-token decoding: a fixed-size cache written at ``pos``.

Those are two different operations on the same inputs.  Read as tico's adapter passes them (Hugging Face's
DynamicCache), the keys are the past ones followed by the new, and cache_position is ignored; read as onert's
interface describes them, the new key is written into a fixed cache at ``pos`` and attention runs over that
cache.  For any model with a cache the results differ and no ONE kernel settles which is meant (the head
counts and the 1 / sqrt(head_dim) scale would come from the weights' shapes and Llama's conventions, not from
the op).  litegpu does not guess: attention that tico decomposes into ops (``tests/tico_models.py``) runs, this
fused form is refused.
"""

from __future__ import annotations

from .registry import refuse

refuse("ATTENTION", "its cache semantics are not established: tico's adapter passes Hugging Face's DynamicCache "
       "(past keys then new ones, cache_position unused) and defines no computation, onert's kernel is a stub "
       "whose interface describes a fixed cache written at a position; see litegpu/ops/circle_attention.py")
