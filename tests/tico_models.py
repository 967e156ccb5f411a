"""Small torch models converted to .circle by tico (ONE's PyTorch-to-circle converter), with their
inputs and torch's own outputs: the circle test models of tests/runtime and tests/gpu.

``make(name, folder)`` converts one model (about a second each) and returns a ``TicoModel``; tests
skip when torch or tico is missing.  ``make_llama_attention(folder, ...)`` exports Hugging Face's
``LlamaAttention`` through tico's onert adapter, which fuses it into circle's ATTENTION op; it needs
``transformers`` (the versions tico 0.3's adapter reads, below 4.56) and skips without it.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs torch (pip install torch)")
tico = pytest.importorskip("tico", reason="needs tico (pip install tico)")
nn = torch.nn


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 8)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class ConvNet(nn.Module):
    """A mobile block: convolution, depthwise convolution, hard-swish, max-pool, classifier."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.depthwise = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        x = nn.functional.hardswish(self.depthwise(torch.relu(self.conv(x))))
        return self.head(torch.flatten(self.pool(x), 1))


class RmsNormBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm, self.proj = nn.RMSNorm(16, eps=1e-6), nn.Linear(16, 16)

    def forward(self, x):
        return x + self.proj(self.norm(x))


class InstanceNormNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.norm = nn.InstanceNorm2d(4, affine=True)

    def forward(self, x):
        return torch.relu(self.norm(self.conv(x)))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


class Attention(nn.Module):
    """Multi-head causal self-attention with rotary embeddings, in plain torch ops."""

    def __init__(self, dim: int = 32, heads: int = 4, positions: int = 8, rope: bool = True):
        super().__init__()
        self.heads, self.head_dim, self.rope = heads, dim // heads, rope
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        inv_freq = 1.0 / 10000 ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim)
        angles = torch.outer(torch.arange(positions).float(), inv_freq)
        emb = torch.cat([angles, angles], dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)
        self.register_buffer("mask", torch.triu(torch.full((positions, positions), -1e9), 1), persistent=False)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = (p(x).reshape(b, s, self.heads, self.head_dim).transpose(1, 2) for p in (self.q, self.k, self.v))
        if self.rope:
            q = q * self.cos + rotate_half(q) * self.sin
            k = k * self.cos + rotate_half(k) * self.sin
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim) + self.mask
        out = torch.softmax(scores, dim=-1) @ v
        return self.o(out.transpose(1, 2).reshape(b, s, d))


class Decoder(nn.Module):
    """A tiny LLM-like decoder: embedding, two pre-norm blocks (RMSNorm, rotary attention, SiLU-gated
    MLP), final norm and vocabulary head."""

    def __init__(self, vocab: int = 64, dim: int = 32, positions: int = 8):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList()
        for _ in range(2):
            block = nn.Module()
            block.norm1, block.attn = nn.RMSNorm(dim, eps=1e-6), Attention(dim, 4, positions)
            block.norm2 = nn.RMSNorm(dim, eps=1e-6)
            block.gate, block.up, block.down = nn.Linear(dim, 64, bias=False), nn.Linear(dim, 64, bias=False), \
                nn.Linear(64, dim, bias=False)
            self.blocks.append(block)
        self.norm, self.head = nn.RMSNorm(dim, eps=1e-6), nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        for blk in self.blocks:
            x = x + blk.attn(blk.norm1(x))
            h = blk.norm2(x)
            x = x + blk.down(nn.functional.silu(blk.gate(h)) * blk.up(h))
        return self.head(self.norm(x))


@dataclass
class TicoModel:
    name: str
    path: Path
    inputs: list[np.ndarray]
    torch_outputs: list[np.ndarray]


def _inputs(name: str) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    if name == "decoder":
        return [rng.integers(0, 64, (1, 8)).astype(np.int64)]
    shape = {"mlp": (2, 16), "convnet": (1, 3, 16, 16), "rmsnorm_block": (1, 4, 16),
             "instancenorm_net": (1, 3, 8, 8), "attention": (1, 8, 32)}[name]
    return [rng.uniform(-1, 1, shape).astype(np.float32)]


MODELS = {"mlp": Mlp, "convnet": ConvNet, "rmsnorm_block": RmsNormBlock, "instancenorm_net": InstanceNormNet,
          "attention": Attention, "decoder": Decoder}


def make(name: str, folder: Path) -> TicoModel:
    torch.manual_seed(0)
    module = MODELS[name]().eval()
    inputs = _inputs(name)
    with torch.no_grad():
        expected = module(*(torch.from_numpy(x) for x in inputs))
    path = folder / f"{name}.circle"
    tico.convert(module, tuple(torch.from_numpy(x) for x in inputs)).save(str(path))
    outputs = expected if isinstance(expected, tuple) else (expected,)
    return TicoModel(name, path, inputs, [o.numpy() for o in outputs])


# tico 0.3's onert adapter reads ``DynamicCache.key_cache`` and takes LlamaAttention's ``past_key_value``
# argument, both gone in transformers 4.56.
TRANSFORMERS_FOR_ADAPTER = ((4, 52), (4, 56))


def _transformers():
    transformers = pytest.importorskip("transformers", reason="needs transformers (pip install 'litegpu[circle]')")
    version = tuple(int(p) for p in transformers.__version__.split(".")[:2])
    low, high = TRANSFORMERS_FOR_ADAPTER
    if not low <= version < high:
        pytest.skip(f"tico's onert attention adapter needs transformers >= {low}, < {high}; found "
                    f"{transformers.__version__}")
    return transformers


@contextlib.contextmanager
def onert_attention_adapter():
    """LlamaAttention.forward replaced by tico's adapter (which emits ATTENTION) for one conversion."""
    from tico.serialize.operators.adapters.onert.llama_attention import llama_attention_forward_adapter
    from transformers.models.llama.modeling_llama import LlamaAttention

    original = LlamaAttention.forward
    LlamaAttention.forward = llama_attention_forward_adapter
    try:
        yield
    finally:
        LlamaAttention.forward = original


class CachedAttention(nn.Module):
    """LlamaAttention called with its cache built from input tensors, so that the caches become graph inputs
    (as in a whole model exported with its cache): the adapter reads ``key_cache[0]`` / ``value_cache[0]``."""

    def __init__(self, attention, cache):
        super().__init__()
        self.attention, self.cache = attention, cache

    def forward(self, hidden, cos, sin, mask, past_key, past_value, cache_position):
        self.cache.key_cache[0], self.cache.value_cache[0] = past_key, past_value
        return self.attention(hidden, (cos, sin), mask, self.cache, cache_position)[0]


def make_llama_attention(folder: Path, *, batch: int = 1, tokens: int = 1, past: int = 4, hidden: int = 32,
                         heads: int = 4, kv_heads: int = 2, head_dim: int | None = None, cache: str = "dynamic",
                         start: int | None = None, padding: int = 0, seed: int = 0) -> TicoModel:
    """Hugging Face's LlamaAttention (random weights) exported as one ATTENTION op, its inputs, and torch's
    output from the unpatched module with the same cache.

    ``cache="dynamic"``: a DynamicCache holding ``past`` positions, the new ``tokens`` after them.
    ``cache="static"``: a StaticCache of ``past`` slots, the new tokens written from slot ``start``.
    The mask is Hugging Face's additive causal mask, its first ``padding`` keys masked for batch row 0."""
    _transformers()
    from transformers.cache_utils import DynamicCache, StaticCache
    from transformers.models.llama.modeling_llama import LlamaAttention, LlamaConfig, LlamaRotaryEmbedding

    torch.manual_seed(seed)
    config = LlamaConfig(hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         head_dim=head_dim or hidden // heads, intermediate_size=2 * hidden, num_hidden_layers=1,
                         attn_implementation="eager")
    module = LlamaAttention(config, layer_idx=0).eval()
    dim = config.head_dim
    first = past if cache == "dynamic" else start
    keys = past + tokens if cache == "dynamic" else past
    rng = np.random.default_rng(seed)
    x = torch.from_numpy(rng.uniform(-1, 1, (batch, tokens, hidden)).astype(np.float32))
    positions = torch.arange(first, first + tokens)
    cos, sin = LlamaRotaryEmbedding(config)(x, positions[None].expand(batch, -1))
    visible = torch.arange(keys)[None, :] <= positions[:, None]           # causal: key j for query at position p
    mask = torch.zeros(batch, 1, tokens, keys)
    mask.masked_fill_(~visible, torch.finfo(torch.float32).min)
    mask[0, :, :, :padding] = torch.finfo(torch.float32).min
    past_key, past_value = (torch.from_numpy(rng.normal(0, 1, (batch, kv_heads, past, dim)).astype(np.float32))
                            for _ in range(2))

    def new_cache():
        if cache == "dynamic":
            return DynamicCache()
        return StaticCache(config=config, max_batch_size=batch, max_cache_len=past)

    with torch.no_grad():
        reference = new_cache()
        if cache == "dynamic":
            reference.update(past_key.clone(), past_value.clone(), 0)
        else:
            reference.key_cache[0].copy_(past_key)
            reference.value_cache[0].copy_(past_value)
        expected = module(x, (cos, sin), mask, past_key_value=reference, cache_position=positions)[0]
    cache_holder = new_cache()
    if cache == "dynamic":  # the adapter indexes key_cache[layer_idx]: give the cache its layer
        cache_holder.update(past_key, past_value, 0)
    inputs = (x, cos, sin, mask, past_key, past_value, positions)
    name = f"llama_attention_{cache}_b{batch}_s{tokens}_p{past}_h{heads}_kv{kv_heads}"
    path = folder / f"{name}.circle"
    with onert_attention_adapter(), warnings.catch_warnings():
        # torch.export notes that forward stores the inputs in the cache object: that is the point
        warnings.filterwarnings("ignore", message="While compiling, we found certain side effects")
        tico.convert(CachedAttention(module, cache_holder).eval(), inputs).save(str(path))
    return TicoModel(name, path, [t.numpy() for t in inputs], [expected.numpy()])
