"""Small torch models converted to .circle by tico (ONE's PyTorch-to-circle converter), with their
inputs and torch's own outputs: the circle test models of tests/runtime and tests/gpu.

``make(name, folder)`` converts one model (about a second each) and returns a ``TicoModel``; tests
skip when torch or tico is missing.
"""

from __future__ import annotations

import math
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
