"""An LLM-style decoder-only transformer made with TensorFlow and converted by the official TFLiteConverter.

The counterpart of ``bench/models/decoder_model.py`` (litegpu's own writer) for files written by another tool: the
same signature conventions (those of ``litegpu.generate`` and ai-edge-torch), so ``bench/memory/bench_big_model.py
--model FILE`` and ``litegpu.generate`` run it unchanged:

- ``prefill``: ``tokens`` int32 [1, T], ``input_pos`` int32 [1] (position of tokens[0]),
  ``kv_cache_k_<i>`` / ``kv_cache_v_<i>`` float32 [1, max_len, width] -> ``logits`` [1, T, vocab] and the
  updated caches under the same names;
- ``decode``: the same with T = 1.

A ``tf.Module`` holds the weights as ``tf.Variable``s (seeded stateless random, made one at a time on the
TensorFlow side, so no numpy copy is kept); the two ``tf.function``s share them.  Each layer: RMS norm,
q/k/v projections, the new keys and values written into the caches at ``input_pos`` with XLA's
DynamicUpdateSlice (the converter legalizes it to DYNAMIC_UPDATE_SLICE), causal attention over the whole
cache (cache rows past the current query position masked), output projection, SwiGLU MLP; then a final
RMS norm and the logits.  Weights are stored [out, in] and multiplied with ``transpose_b`` so that the
converter maps them to FULLY_CONNECTED as they are (no transpose folded over gigabytes).

Conversion goes through a SavedModel with the two signatures (``from_saved_model(signature_keys=...)``),
saved and converted in two fresh processes so that each peak is its own; the converter's Python side is
kept from restoring the variables it never uses (see ``_python_side_without_variables``): the converter
then peaks at 4.7x a 0.86 GiB file instead of 6.9x, and at 4.3x the 2.55 GiB one.  ``--buffer-offset``
sets the converter's ``_experimental_use_buffer_offset``: weights after the FlatBuffer (Buffer.offset/size,
packed back to back at offsets only 4-byte aligned) even in a small file, the layout of its files past 2 GB.

Run with the TensorFlow venv (never imported by litegpu or its tests):

    /work/tfenv/bin/python bench/models/tf_decoder_model.py out.tflite --layers 2 --width 64 --vocab 256 [--float16]
    /work/tfenv/bin/python bench/models/tf_decoder_model.py out.tflite --check      # + official interpreter smoke run
    /work/tfenv/bin/python bench/models/tf_decoder_model.py bench/.zoo/tf_decoder/tf_decoder_f32_11l.tflite --layers 11 \
        --width 2048 --heads 16 --vocab 32000 --max-len 256 --prefill-len 16 --buffer-offset \
        --workdir bench/.zoo/tf_decoder                    # 2.55 GiB, converter peak 11 GiB, about 4 minutes
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import tensorflow as tf

NEG_INF = -1e9  # additive mask value: exp() of it underflows to exactly 0 after the max is subtracted


@dataclass(frozen=True)
class TfDecoderConfig:
    layers: int = 2
    width: int = 64
    heads: int = 4
    vocab: int = 256
    max_len: int = 64
    prefill_len: int = 8
    ffn: int = 0            # 0: 8/3 * width rounded up to a multiple of 32, as in LLaMA-style models
    seed: int = 0
    rms_eps: float = 1e-6

    def __post_init__(self) -> None:
        if self.width % self.heads:
            raise ValueError(f"width {self.width} is not a multiple of heads {self.heads}")
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


def cache_names(config: TfDecoderConfig) -> list[str]:
    return [f"kv_cache_{kind}_{i}" for i in range(config.layers) for kind in ("k", "v")]


class TfDecoder(tf.Module):
    """The weights (tf.Variables, made one at a time from a seed) and the two signatures sharing them."""

    def __init__(self, config: TfDecoderConfig):
        super().__init__(name="decoder")
        self.config = c = config
        self._count = 0
        residual_gain = 1.0 / math.sqrt(2 * c.layers)  # GPT-2 style, so deep random models still vary their tokens
        self.embedding = self._uniform("embedding", (c.vocab, c.width), 1.0)
        self.attn_norm, self.mlp_norm, self.wq, self.wk, self.wv, self.wo = [], [], [], [], [], []
        self.w_gate, self.w_up, self.w_down = [], [], []
        for i in range(c.layers):
            self.attn_norm.append(self._uniform(f"attn_norm_{i}", (c.width,), 0.1, 1.0))
            for proj, store in (("q", self.wq), ("k", self.wk), ("v", self.wv), ("o", self.wo)):
                store.append(self._matrix(f"w{proj}_{i}", c.width, c.width, residual_gain if proj == "o" else 1.0))
            self.mlp_norm.append(self._uniform(f"mlp_norm_{i}", (c.width,), 0.1, 1.0))
            self.w_gate.append(self._matrix(f"w_gate_{i}", c.hidden, c.width))
            self.w_up.append(self._matrix(f"w_up_{i}", c.hidden, c.width))
            self.w_down.append(self._matrix(f"w_down_{i}", c.width, c.hidden, residual_gain))
        self.final_norm = self._uniform("final_norm", (c.width,), 0.1, 1.0)
        self.lm_head = self._matrix("lm_head", c.vocab, c.width)
        self.prefill = self._signature(c.prefill_len)
        self.decode = self._signature(1)

    def _uniform(self, name: str, shape: tuple[int, ...], scale: float, offset: float = 0.0) -> tf.Variable:
        self._count += 1
        value = tf.random.stateless_uniform(shape, seed=[self.config.seed, self._count], minval=offset - scale,
                                            maxval=offset + scale)
        return tf.Variable(value, trainable=False, name=name)

    def _matrix(self, name: str, rows: int, cols: int, gain: float = 1.0) -> tf.Variable:
        """A projection weight [outputs, inputs]."""
        return self._uniform(name, (rows, cols), gain / math.sqrt(cols))

    def _signature(self, tokens: int):
        c = self.config
        specs = [tf.TensorSpec((1, tokens), tf.int32, name="tokens"), tf.TensorSpec((1,), tf.int32, name="input_pos")]
        specs += [tf.TensorSpec((1, c.max_len, c.width), tf.float32, name=n) for n in cache_names(c)]

        def step(tokens, input_pos, *caches):
            return self._step(tokens, input_pos, caches)
        return tf.function(step, input_signature=specs, autograph=False)

    def _rms_norm(self, x, weight):
        mean = tf.reduce_mean(x * x, axis=-1, keepdims=True)
        return x * tf.math.rsqrt(mean + self.config.rms_eps) * weight

    @staticmethod
    def _linear(x, weight):
        return tf.matmul(x, weight, transpose_b=True)

    def _causal_bias(self, input_pos, t: int):
        query = tf.range(t, dtype=tf.int32)[:, None] + input_pos[0]
        key = tf.range(self.config.max_len, dtype=tf.int32)[None, :]
        return tf.where(key <= query, tf.constant(0.0), tf.constant(NEG_INF))  # [T, max_len]

    def _split_heads(self, x, length: int):
        c = self.config
        return tf.transpose(tf.reshape(x, (1, length, c.heads, c.head_dim)), (0, 2, 1, 3))

    def _attention(self, x, i: int, cache_k, cache_v, start, bias):
        from tensorflow.compiler.tf2xla.python import xla

        c, t = self.config, x.shape[0]
        q, k, v = (self._linear(x, w[i]) for w in (self.wq, self.wk, self.wv))
        cache_k = xla.dynamic_update_slice(cache_k, tf.reshape(k, (1, t, c.width)), start)
        cache_v = xla.dynamic_update_slice(cache_v, tf.reshape(v, (1, t, c.width)), start)
        q = q * (1.0 / math.sqrt(c.head_dim))
        scores = tf.matmul(self._split_heads(q, t), self._split_heads(cache_k, c.max_len), transpose_b=True)
        probs = tf.nn.softmax(scores + bias)
        mixed = tf.matmul(probs, self._split_heads(cache_v, c.max_len))
        merged = tf.reshape(tf.transpose(mixed, (0, 2, 1, 3)), (t, c.width))
        return self._linear(merged, self.wo[i]), cache_k, cache_v

    def _mlp(self, x, i: int):
        gate = self._linear(x, self.w_gate[i])
        return self._linear(tf.nn.silu(gate) * self._linear(x, self.w_up[i]), self.w_down[i])

    def _step(self, tokens, input_pos, caches):
        c = self.config
        t = tokens.shape[1]
        start = tf.concat([tf.zeros((1,), tf.int32), input_pos, tf.zeros((1,), tf.int32)], axis=0)
        bias = self._causal_bias(input_pos, t)
        x = tf.gather(self.embedding, tf.reshape(tokens, (t,)))
        outputs = {}
        for i in range(c.layers):
            attn, outputs[f"kv_cache_k_{i}"], outputs[f"kv_cache_v_{i}"] = self._attention(
                self._rms_norm(x, self.attn_norm[i]), i, caches[2 * i], caches[2 * i + 1], start, bias)
            x = x + attn
            x = x + self._mlp(self._rms_norm(x, self.mlp_norm[i]), i)
        logits = self._linear(self._rms_norm(x, self.final_norm), self.lm_head)
        return {"logits": tf.reshape(logits, (1, t, c.vocab)), **outputs}


def save_module(config: TfDecoderConfig, folder: str) -> None:
    module = TfDecoder(config)
    tf.saved_model.save(module, folder, signatures={
        "prefill": module.prefill.get_concrete_function(), "decode": module.decode.get_concrete_function()})


@contextlib.contextmanager
def _python_side_without_variables():
    """The converter's Python side loads the SavedModel twice (``from_saved_model`` for the signatures,
    ``convert`` for debug info), restoring every variable each time, and the first copy stays referenced by
    the converter: two more copies of the weights for nothing, since the C++ importer reads the variables
    from the checkpoint itself.  Loading without the checkpoint keeps the signatures and leaves the
    variables unallocated (measured: converter peak 4.1 instead of 5.9 GiB for a 0.86 GiB model)."""
    from tensorflow.lite.python import lite
    from tensorflow.python.saved_model.load import load

    def load_without_checkpoint(export_dir, tags=None):
        return load(export_dir, tags, options=tf.saved_model.LoadOptions(experimental_skip_checkpoint=True))
    original, lite._load = lite._load, load_without_checkpoint
    try:
        yield
    finally:
        lite._load = original


def convert(folder: str, float16: bool = False, buffer_offset: bool = False, lean: bool = True) -> bytes:
    """The .tflite bytes of the SavedModel in ``folder`` (signatures ``prefill`` and ``decode``)."""
    with _python_side_without_variables() if lean else contextlib.nullcontext():
        converter = tf.lite.TFLiteConverter.from_saved_model(folder, signature_keys=["prefill", "decode"])
        if float16:
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
            converter.target_spec.supported_types = [tf.float16]
        if buffer_offset:
            converter._experimental_use_buffer_offset = True
        return converter.convert()


def make(config: TfDecoderConfig, output: Path, float16: bool = False, buffer_offset: bool = False,
         workdir: str | None = None) -> dict:
    """Save the module and convert it, each in a fresh process (so that each peak is its own and the
    converter does not share its memory with the module's variables), and write ``output``.
    Returns the file size and, per stage, seconds and peak resident memory (VmHWM, bytes)."""
    folder = tempfile.mkdtemp(prefix="tf-decoder-", dir=workdir)
    fields = [f"--{k.replace('_', '-')}={v}" for k, v in asdict(config).items() if k != "rms_eps"]
    flags = (["--float16"] if float16 else []) + (["--buffer-offset"] if buffer_offset else [])
    try:
        stages = {}
        for stage in ("save", "convert"):
            start = time.perf_counter()
            proc = subprocess.run([sys.executable, __file__, str(output), f"--stage={stage}", f"--saved-model={folder}",
                                   *fields, *flags], check=False, capture_output=True, text=True)
            peak = [line for line in proc.stdout.splitlines() if line.startswith("PEAK ")]
            if proc.returncode or not peak:
                raise RuntimeError(f"{stage} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
            stages[stage] = {"seconds": time.perf_counter() - start, "peak_rss": int(peak[-1].split()[1])}
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return {"bytes": os.path.getsize(output), **stages}


def run_stage(stage: str, config: TfDecoderConfig, folder: str, output: Path, float16: bool,
              buffer_offset: bool) -> None:
    if stage == "save":
        save_module(config, folder)
    else:
        data = convert(folder, float16, buffer_offset)
        with open(output, "wb") as f:
            f.write(data)
    print(f"PEAK {peak_rss()}", flush=True)


def official_smoke_run(path: Path, config: TfDecoderConfig, steps: int = 3) -> list[int]:
    """Greedy tokens from the official interpreter's builtin kernels: prefill, then ``steps`` decode steps."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    interpreter = Interpreter(model_path=str(path), num_threads=2,
                              experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    prefill, decode = interpreter.get_signature_runner("prefill"), interpreter.get_signature_runner("decode")
    caches = {n: np.zeros((1, config.max_len, config.width), np.float32) for n in cache_names(config)}

    def run(runner, tokens, pos):
        out = runner(tokens=np.asarray([tokens], np.int32), input_pos=np.asarray([pos], np.int32), **caches)
        caches.update({k: v for k, v in out.items() if k != "logits"})
        return out["logits"][0]

    t = config.prefill_len
    tokens = [int(np.argmax(run(prefill, [(7 * i + 3) % config.vocab for i in range(t)], 0)[-1]))]
    for i in range(steps):
        tokens.append(int(np.argmax(run(decode, [tokens[-1]], t + i)[0])))
    return tokens


def peak_rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return -1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("output", type=Path)
    defaults = TfDecoderConfig()
    for name in ("layers", "width", "heads", "vocab", "max_len", "prefill_len", "ffn", "seed"):
        p.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(defaults, name))
    p.add_argument("--float16", action="store_true", help="the converter's float16 weight quantization")
    p.add_argument("--buffer-offset", action="store_true",
                   help="weights after the FlatBuffer even in a small file (_experimental_use_buffer_offset)")
    p.add_argument("--workdir", help="where the temporary SavedModel goes (default: TMPDIR)")
    p.add_argument("--check", action="store_true", help="run the official interpreter's builtin kernels on it")
    p.add_argument("--stage", choices=("save", "convert"), help=argparse.SUPPRESS)  # make()'s child processes
    p.add_argument("--saved-model", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    config = TfDecoderConfig(**{k: getattr(args, k) for k in asdict(defaults) if k != "rms_eps"})
    if args.stage:
        run_stage(args.stage, config, args.saved_model, args.output, args.float16, args.buffer_offset)
        return 0
    result = make(config, args.output, args.float16, args.buffer_offset, args.workdir)
    print(f"{args.output}: {result['bytes'] / 2**20:.1f} MiB, {config.parameter_count() / 1e6:.1f} M parameters, "
          f"{config}, float16={args.float16}, buffer_offset={args.buffer_offset}; "
          f"SavedModel {result['save']['seconds']:.1f} s (peak RSS {result['save']['peak_rss'] / 2**30:.2f} GiB), "
          f"convert {result['convert']['seconds']:.1f} s (peak RSS {result['convert']['peak_rss'] / 2**30:.2f} GiB, "
          f"{result['convert']['peak_rss'] / result['bytes']:.2f} x file)",
          flush=True)
    if args.check:
        print("official builtin greedy tokens:", official_smoke_run(args.output, config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
