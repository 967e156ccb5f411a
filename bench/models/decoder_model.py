"""An LLM-style decoder-only transformer in TFLite builtin ops, for tests and benchmarks.

Two signatures share every weight buffer (the writer stores each once):

- ``prefill``: ``tokens`` int32 [1, T], ``input_pos`` int32 [1] (position of tokens[0]),
  ``kv_cache_k_<i>`` / ``kv_cache_v_<i>`` float32 [1, max_len, width] -> ``logits`` [1, T, vocab] and the
  updated caches under the same names.
- ``decode``: the same with T = 1.

Each layer: RMS norm (MUL, MEAN, ADD, RSQRT, MUL), q/k/v projections (FULLY_CONNECTED), the new keys
and values written into the cache at ``input_pos`` (DYNAMIC_UPDATE_SLICE), causal attention over the
whole cache (BATCH_MATMUL, an additive mask from LESS_EQUAL + SELECT_V2, SOFTMAX), output projection,
SwiGLU MLP (FULLY_CONNECTED, LOGISTIC, MUL).  Cache rows past the current position are masked, so a
prompt may be padded up to T: the padding's rows are overwritten by the decode steps that follow.

Weight formats (``weights=``): "float32"; "float16" (float16 constants, DEQUANTIZE to float32);
"int8" (per-channel int8 FULLY_CONNECTED weights, dynamic-range "hybrid" FC; int8 per-tensor embedding
GATHERed then DEQUANTIZEd); "int4" (packed int4 FC weights with BlockwiseQuantization, float16 scales per
block of ``block_size`` inputs; embedding as for int8).

    python bench/models/decoder_model.py out.tflite --layers 2 --width 64 --weights float16
    from decoder_model import DecoderConfig, build_decoder, write_decoder   # (tests import it by path)

The weights are made one tensor at a time and the builder keeps only the final bytes, so a model of
N bytes needs about N bytes of memory to make and write (plus the largest single tensor, transiently).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from litegpu.ir import Model, Quantization
from litegpu.ir.builder import ModelBuilder, SubgraphBuilder, quantization
from litegpu.ir.dtypes import pack_sub_byte
from litegpu.ir.model import Options
from litegpu.ir.save import write_model

WEIGHT_FORMATS = ("float32", "float16", "int8", "int4")
NEG_INF = -1e9  # additive mask value: exp() of it underflows to exactly 0 after the max is subtracted


@dataclass(frozen=True)
class DecoderConfig:
    layers: int = 2
    width: int = 64
    heads: int = 4
    vocab: int = 256
    max_len: int = 64
    prefill_len: int = 8
    ffn: int = 0            # 0: 8/3 * width rounded up to a multiple of 32, as in LLaMA-style models
    weights: str = "float32"
    block_size: int = 32    # int4 blockwise: inputs per scale
    seed: int = 0
    rms_eps: float = 1e-6

    def __post_init__(self) -> None:
        if self.weights not in WEIGHT_FORMATS:
            raise ValueError(f"weights must be one of {WEIGHT_FORMATS}, not {self.weights!r}")
        if self.width % self.heads:
            raise ValueError(f"width {self.width} is not a multiple of heads {self.heads}")
        if self.weights == "int4" and (self.width % self.block_size or self.hidden % self.block_size):
            raise ValueError(f"int4 blockwise needs width and ffn to be multiples of block_size {self.block_size}")
        if self.prefill_len > self.max_len:
            raise ValueError("prefill_len cannot pass max_len")

    @property
    def hidden(self) -> int:
        return self.ffn or -(-self.width * 8 // 3 // 32) * 32

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    def parameter_count(self) -> int:
        per_layer = 4 * self.width * self.width + 3 * self.width * self.hidden + 2 * self.width
        return self.layers * per_layer + 2 * self.vocab * self.width + self.width

    def weight_bytes(self) -> int:
        """About how many bytes the weights take in the file."""
        per = {"float32": 4, "float16": 2, "int8": 1, "int4": 0.5}[self.weights]
        matrices = self.layers * (4 * self.width * self.width + 3 * self.width * self.hidden) + self.vocab * self.width
        embedding = self.vocab * self.width * (1 if self.weights in ("int8", "int4") else per)
        return int(matrices * per + embedding)


def config_for_bytes(target_bytes: int, **overrides) -> DecoderConfig:
    """A config whose weights take about ``target_bytes``, by adding layers to the given width."""
    base = DecoderConfig(**{"layers": 1, **overrides})
    one = replace(base, layers=1).weight_bytes()
    two = replace(base, layers=2).weight_bytes()
    layers = max(1, math.ceil((target_bytes - (one - (two - one))) / (two - one)))
    return replace(base, layers=layers)


def cache_names(config: DecoderConfig) -> list[str]:
    return [f"kv_cache_{kind}_{i}" for i in range(config.layers) for kind in ("k", "v")]


class _Weights:
    """Deterministic random weights, made on demand and stored once in the model's buffers."""

    def __init__(self, b: ModelBuilder, config: DecoderConfig):
        self.b, self.config = b, config
        self.rng = np.random.default_rng(config.seed)
        self.shared: dict[str, tuple] = {}   # name -> (buffer index, raw bytes, shape, dtype, quantization)

    def _uniform(self, shape: tuple[int, ...], scale: float) -> np.ndarray:
        out = self.rng.random(shape, dtype=np.float32)
        out -= 0.5
        out *= 2 * scale
        return out

    def _store(self, name: str, raw: np.ndarray, shape: tuple, dtype: str, q: Quantization | None) -> None:
        self.shared[name] = (self.b.add_buffer(raw), raw, shape, dtype, q)

    def matrix(self, name: str, rows: int, cols: int, gain: float = 1.0) -> None:
        """A FULLY_CONNECTED weight [rows=outputs, cols=inputs] in the config's format."""
        fmt = self.config.weights
        if fmt == "int4":  # drawn as codes and scales directly: generating float32 first took most of the time
            self._int4_matrix(name, rows, cols, gain)
            return
        w = self._uniform((rows, cols), gain / math.sqrt(cols))
        if fmt == "float32":
            self._store(name, w.reshape(-1).view(np.uint8), (rows, cols), "float32", None)
        elif fmt == "float16":
            self._store(name, w.astype(np.float16).reshape(-1).view(np.uint8), (rows, cols), "float16", None)
        elif fmt == "int8":
            scale = np.abs(w).max(axis=1) / 127.0
            q = np.clip(np.rint(w / scale[:, None]), -127, 127).astype(np.int8)
            self._store(name, q.reshape(-1).view(np.uint8), (rows, cols), "int8", quantization(scale, 0, axis=0))

    def _int4_matrix(self, name: str, rows: int, cols: int, gain: float) -> None:
        """Blockwise int4 as a quantizer would write uniform weights of that range: codes in [-7, 7], one
        float16 scale per ``block_size`` inputs near the block's largest magnitude / 7."""
        bs = self.config.block_size
        q = self.rng.integers(-7, 8, (rows, cols), dtype=np.int8)
        scale = (gain / math.sqrt(cols) / 7.0) * (0.9 + 0.1 * self.rng.random((rows, cols // bs), dtype=np.float32))
        self._store(name, _pack_int4(q), (rows, cols), "int4", None)
        self._store(name + "/scales", scale.astype(np.float16).reshape(-1).view(np.uint8), (rows, cols // bs),
                    "float16", None)

    def embedding(self, name: str, rows: int, cols: int) -> None:
        w = self._uniform((rows, cols), 1.0)
        fmt = self.config.weights
        if fmt in ("float32", "float16"):
            self._store(name, w.astype(fmt).reshape(-1).view(np.uint8), (rows, cols), fmt, None)
        else:
            scale = float(np.abs(w).max()) / 127.0
            q = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)
            self._store(name, q.reshape(-1).view(np.uint8), (rows, cols), "int8", quantization(scale, 0))

    def vector(self, name: str, n: int) -> None:
        w = 1.0 + self._uniform((n,), 0.1)
        self._store(name, w.view(np.uint8), (n,), "float32", None)

    def tensor(self, sg: SubgraphBuilder, name: str) -> int:
        """The shared weight as a tensor of subgraph ``sg`` (same buffer in every subgraph)."""
        buffer, raw, shape, dtype, q = self.shared[name]
        if dtype == "int4":
            scales = self.tensor(sg, name + "/scales")
            q = Quantization(details=Options(
                {"type": "BlockwiseQuantization", "scales": scales, "zero_points": -1,
                 "block_size": self.config.block_size}))
        return sg.tensor(name, shape, dtype, quantization=q, buffer=buffer, raw=raw)


def _make_weights(b: ModelBuilder, config: DecoderConfig) -> _Weights:
    w = _Weights(b, config)
    w.embedding("embedding", config.vocab, config.width)
    for i in range(config.layers):
        p = f"layer_{i}/"
        w.vector(p + "attn_norm", config.width)
        # Residual branches scaled down (GPT-2 style) so deep random models still vary their tokens.
        residual_gain = 1.0 / math.sqrt(2 * config.layers)
        for proj in ("q", "k", "v", "o"):
            w.matrix(p + f"w{proj}", config.width, config.width, residual_gain if proj == "o" else 1.0)
        w.vector(p + "mlp_norm", config.width)
        w.matrix(p + "w_gate", config.hidden, config.width)
        w.matrix(p + "w_up", config.hidden, config.width)
        w.matrix(p + "w_down", config.width, config.hidden, residual_gain)
    w.vector("final_norm", config.width)
    w.matrix("lm_head", config.vocab, config.width)
    return w


class _Step:
    """Builds one signature's subgraph: T tokens starting at input_pos."""

    def __init__(self, sg: SubgraphBuilder, weights: _Weights, config: DecoderConfig, tokens: int):
        self.sg, self.w, self.c, self.t = sg, weights, config, tokens
        self.count = 0

    def name(self, what: str) -> str:
        self.count += 1
        return f"{what}_{self.count}"

    def out(self, what: str, shape, dtype: str = "float32") -> int:
        return self.sg.tensor(self.name(what), shape, dtype)

    def const(self, what: str, value, dtype: str | None = None) -> int:
        return self.sg.constant(self.name(what), value, dtype)

    def op(self, name: str, inputs, shape, dtype: str = "float32", **options) -> int:
        y = self.out(name.lower(), shape, dtype)
        self.sg.op(name, inputs, [y], **options)
        return y

    def reshape(self, x: int, shape) -> int:
        return self.op("RESHAPE", [x, self.const("shape", np.asarray(shape, np.int32))], shape,
                       self.sg.tensors[x].dtype)

    def transpose(self, x: int, perm, shape) -> int:
        return self.op("TRANSPOSE", [x, self.const("perm", np.asarray(perm, np.int32))], shape)

    def weight_as_float(self, name: str) -> int:
        """A float32 view of a weight: DEQUANTIZE for float16 constants, the constant itself otherwise."""
        x = self.w.tensor(self.sg, name)
        if self.sg.tensors[x].dtype == "float16":
            return self.op("DEQUANTIZE", [x], self.sg.tensors[x].shape)
        return x

    def linear(self, x: int, name: str, rows: int) -> int:
        weight = self.weight_as_float(name) if self.c.weights in ("float32", "float16") else self.w.tensor(self.sg, name)
        return self.op("FULLY_CONNECTED", [x, weight, -1], (self.t, rows))

    def rms_norm(self, x: int, name: str) -> int:
        shape = (self.t, self.c.width)
        square = self.op("MUL", [x, x], shape)
        mean = self.op("MEAN", [square, self.const("axis", np.asarray([1], np.int32))], (self.t, 1), keep_dims=True)
        shifted = self.op("ADD", [mean, self.const("eps", np.asarray([self.c.rms_eps], np.float32))], (self.t, 1))
        inv = self.op("RSQRT", [shifted], (self.t, 1))
        normed = self.op("MUL", [x, inv], shape)
        return self.op("MUL", [normed, self.w.tensor(self.sg, name)], shape)

    def embed(self, tokens: int) -> int:
        flat = self.reshape(tokens, (self.t,))
        table = self.w.tensor(self.sg, "embedding")
        dtype = self.sg.tensors[table].dtype
        if dtype == "float16":
            table = self.op("DEQUANTIZE", [table], self.sg.tensors[table].shape)
            dtype = "float32"
        rows = self.sg.tensor(self.name("embedded"), (self.t, self.c.width), dtype,
                              quantization=self.sg.tensors[table].quantization)
        self.sg.op("GATHER", [table, flat], [rows], axis=0)
        if dtype == "int8":
            rows = self.op("DEQUANTIZE", [rows], (self.t, self.c.width))
        return rows

    def causal_bias(self, pos: int) -> int:
        """[T, max_len] float: 0 where key position <= query position, NEG_INF elsewhere."""
        t, length = self.t, self.c.max_len
        query_pos = self.op("ADD", [self.const("t_range", np.arange(t, dtype=np.int32).reshape(t, 1)), pos],
                            (t, 1), "int32")
        key_pos = self.const("k_range", np.arange(length, dtype=np.int32).reshape(1, length))
        visible = self.op("LESS_EQUAL", [key_pos, query_pos], (t, length), "bool")
        return self.op("SELECT_V2", [visible, self.const("zero", np.zeros(1, np.float32)),
                                     self.const("neg", np.full(1, NEG_INF, np.float32))], (t, length))

    def attention(self, x: int, layer: int, cache_k: int, cache_v: int, start: int, bias: int) -> tuple[int, int, int]:
        c, t, p = self.c, self.t, f"layer_{layer}/"
        heads, dim, length = c.heads, c.head_dim, c.max_len
        q = self.linear(x, p + "wq", c.width)
        k = self.linear(x, p + "wk", c.width)
        v = self.linear(x, p + "wv", c.width)
        new_k = self.op("DYNAMIC_UPDATE_SLICE", [cache_k, self.reshape(k, (1, t, c.width)), start], (1, length, c.width))
        new_v = self.op("DYNAMIC_UPDATE_SLICE", [cache_v, self.reshape(v, (1, t, c.width)), start], (1, length, c.width))
        q = self.op("MUL", [q, self.const("scale", np.asarray([1 / math.sqrt(dim)], np.float32))], (t, c.width))
        qh = self.transpose(self.reshape(q, (1, t, heads, dim)), (0, 2, 1, 3), (1, heads, t, dim))
        kh = self.transpose(self.reshape(new_k, (1, length, heads, dim)), (0, 2, 1, 3), (1, heads, length, dim))
        vh = self.transpose(self.reshape(new_v, (1, length, heads, dim)), (0, 2, 1, 3), (1, heads, length, dim))
        scores = self.op("BATCH_MATMUL", [qh, kh], (1, heads, t, length), adj_y=True)
        masked = self.op("ADD", [scores, bias], (1, heads, t, length))
        probs = self.op("SOFTMAX", [masked], (1, heads, t, length), beta=1.0)
        mixed = self.op("BATCH_MATMUL", [probs, vh], (1, heads, t, dim))
        merged = self.reshape(self.transpose(mixed, (0, 2, 1, 3), (1, t, heads, dim)), (t, c.width))
        return self.linear(merged, p + "wo", c.width), new_k, new_v

    def mlp(self, x: int, layer: int) -> int:
        c, t, p = self.c, self.t, f"layer_{layer}/"
        gate = self.linear(x, p + "w_gate", c.hidden)
        up = self.linear(x, p + "w_up", c.hidden)
        silu = self.op("MUL", [gate, self.op("LOGISTIC", [gate], (t, c.hidden))], (t, c.hidden))
        return self.linear(self.op("MUL", [silu, up], (t, c.hidden)), p + "w_down", c.width)

    def build(self) -> tuple[dict[str, int], dict[str, int]]:
        c, t, sg = self.c, self.t, self.sg
        tokens = sg.input("tokens", (1, t), "int32")
        pos = sg.input("input_pos", (1,), "int32")
        caches = {n: sg.input(n, (1, c.max_len, c.width)) for n in cache_names(c)}
        zero = self.const("zero_index", np.zeros(1, np.int32))
        start = self.op("CONCATENATION", [zero, pos, zero], (3,), "int32", axis=0)
        bias = self.causal_bias(pos)
        x = self.embed(tokens)
        outputs: dict[str, int] = {}
        for i in range(c.layers):
            attn, outputs[f"kv_cache_k_{i}"], outputs[f"kv_cache_v_{i}"] = self.attention(
                self.rms_norm(x, f"layer_{i}/attn_norm"), i, caches[f"kv_cache_k_{i}"], caches[f"kv_cache_v_{i}"],
                start, bias)
            x = self.op("ADD", [x, attn], (t, c.width))
            x = self.op("ADD", [x, self.mlp(self.rms_norm(x, f"layer_{i}/mlp_norm"), i)], (t, c.width))
        logits = self.reshape(self.linear(self.rms_norm(x, "final_norm"), "lm_head", c.vocab), (1, t, c.vocab))
        outputs = {"logits": logits, **outputs}
        sg.output(*outputs.values())
        return {"tokens": tokens, "input_pos": pos, **caches}, outputs


def _pack_int4(q: np.ndarray) -> np.ndarray:
    """``pack_sub_byte(q, "int4")`` (element 2i in the low nibble of byte i) for an even count, without its
    int16 copies: a 1 GB int4 decoder took 49 s to write on the H200's host."""
    flat = q.reshape(-1).view(np.uint8)
    if flat.size % 2:
        return pack_sub_byte(q, "int4")
    return (flat[0::2] & 0x0F) | (flat[1::2] << 4)


def build_decoder(config: DecoderConfig) -> Model:
    b = ModelBuilder(description=f"litegpu decoder {config}")
    weights = _make_weights(b, config)
    for key, sg, tokens in (("prefill", b, config.prefill_len), ("decode", None, 1)):
        sg = sg or b.subgraph(key)
        sg.name = key
        inputs, outputs = _Step(sg, weights, config, tokens).build()
        b.signature(key, sg, inputs=inputs, outputs=outputs)
    weights.shared.clear()
    return b.build()


def write_decoder(config: DecoderConfig, path: str | os.PathLike, **write_options) -> Model:
    model = build_decoder(config)
    write_model(model, path, **write_options)
    return model


def empty_caches(config: DecoderConfig) -> dict[str, np.ndarray]:
    return {n: np.zeros((1, config.max_len, config.width), np.float32) for n in cache_names(config)}


def _peak_rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("output", type=Path)
    for name, default in (("layers", 2), ("width", 64), ("heads", 4), ("vocab", 256), ("max-len", 64),
                          ("prefill-len", 8), ("ffn", 0), ("block-size", 32), ("seed", 0)):
        p.add_argument(f"--{name}", type=int, default=None if name == "layers" else default)
    p.add_argument("--weights", choices=WEIGHT_FORMATS, default="float32")
    p.add_argument("--target-bytes", type=float, default=None, help="choose --layers for about this many bytes")
    p.add_argument("--extended-buffers", action="store_true", help="weights after the FlatBuffer even when small")
    p.add_argument("--alignment", type=int, default=None,
                   help="experiment: align blocks after the FlatBuffer to this many bytes instead of the writer's "
                        "default (64 lets the XLA CPU client alias weights in the memory map)")
    args = p.parse_args(argv)
    if args.alignment:
        import litegpu.ir.save as save

        save.ALIGNMENT = args.alignment
    fields = {k: getattr(args, k) for k in ("width", "heads", "vocab", "max_len", "prefill_len", "ffn",
                                            "block_size", "seed", "weights")}
    if args.target_bytes:
        config = config_for_bytes(int(args.target_bytes), **fields)
    else:
        config = DecoderConfig(layers=args.layers or 2, **fields)
    start = time.perf_counter()
    write_decoder(config, args.output, extended_buffers=True if args.extended_buffers else None)
    size = os.path.getsize(args.output)
    print(f"{args.output}: {size / 2**20:.1f} MiB, {config.parameter_count() / 1e6:.1f} M parameters, "
          f"{config}, written in {time.perf_counter() - start:.1f} s, peak RSS {_peak_rss_mb():.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
