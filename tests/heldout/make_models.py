"""Build the held-out models with the official TFLiteConverter and record reference outputs.

Run with the TensorFlow venv (never from the test suite):

    /work/tfenv/bin/python tests/heldout/make_models.py            # every model
    /work/tfenv/bin/python tests/heldout/make_models.py lstm_float32 # some of them

Each ``models/X.tflite`` gets an ``models/X.npz`` with fixed seeded inputs and the outputs of
``ai_edge_litert.interpreter.Interpreter`` (``num_threads=1``) with the builtin kernels only
(``out_ref``: ``BUILTIN_WITHOUT_DEFAULT_DELEGATES``) and with the default XNNPACK path (``out_xnn``).
Keys are ``step<k>/<signature>/<in|out_ref|out_xnn>/<name>``: one signature call per step, in
order, on one interpreter, so that state held in resource variables is checked across calls.
``meta`` is a JSON string: ``{"criterion": "float"|"hybrid"|"int", "steps": n, "stateful": bool}``.
Weights are random (seeded); nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402
from ai_edge_litert.interpreter import Interpreter, OpResolverType  # noqa: E402

HERE = Path(__file__).resolve().parent
OUT = HERE / "models"
SEED = 1234


# ---- conversion ---------------------------------------------------------------------------------

def representative(make_input: Callable[[np.random.Generator], dict[str, np.ndarray]], n: int = 24):
    """A representative dataset drawn like the test inputs, from another seed."""
    def gen():
        rng = np.random.default_rng(SEED + 1)
        for _ in range(n):
            yield make_input(rng)
    return gen


def configure(converter: tf.lite.TFLiteConverter, quant: str, rep: Callable | None,
              int_io: bool = True) -> None:
    """The converter options of each flavour (see README.md)."""
    if quant == "float32":
        return
    if quant == "float16":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.target_spec.supported_types = [tf.float16]
    elif quant == "dynamic":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    elif quant == "int8":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = rep
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        if int_io:
            converter.inference_input_type = tf.int8
            converter.inference_output_type = tf.int8
    elif quant == "16x8":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = rep
        converter.target_spec.supported_ops = [
            tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8]
        if int_io:
            converter.inference_input_type = tf.int16
            converter.inference_output_type = tf.int16
    else:
        raise ValueError(quant)


def criterion(quant: str) -> str:
    return {"dynamic": "hybrid", "int8": "int", "16x8": "int"}.get(quant, "float")


def keras_rep(make_input, samples: int = 24):
    """Representative samples as the positional list from_keras_model wants."""
    gen = representative(make_input, samples)

    def listed():
        for sample in gen():
            yield list(sample.values())
    return listed


def convert_keras(model: keras.Model, quant: str, make_input, samples: int = 24) -> bytes:
    """``samples``: the representative dataset's size (full-integer and 16x8 calibration)."""
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    configure(converter, quant, keras_rep(make_input, samples))
    return converter.convert()


def convert_saved(module: tf.Module, signatures: dict[str, Any], quant: str, make_inputs: dict[str, Callable],
                  int_io: bool = True, variable_quantization: bool = False) -> bytes:
    """Through a SavedModel: the way to several signatures and to resource variables."""
    with tempfile.TemporaryDirectory() as d:
        tf.saved_model.save(module, d, signatures=signatures)
        converter = tf.lite.TFLiteConverter.from_saved_model(d, signature_keys=list(signatures))
        converter.experimental_enable_resource_variables = True
        if variable_quantization:
            converter._experimental_variable_quantization = True  # as microWakeWord converts
        rep = None
        if quant in ("int8", "16x8"):
            def rep():
                rng = np.random.default_rng(SEED + 1)
                for _ in range(24):
                    for key, make in make_inputs.items():
                        yield key, make(rng)
        configure(converter, quant, rep, int_io)
        return converter.convert()


# ---- inputs -------------------------------------------------------------------------------------

def quantize_for(details: dict, value: np.ndarray) -> np.ndarray:
    """A float sample as the integer input tensor wants it (its scale and zero point)."""
    dtype = details["dtype"]
    if not np.issubdtype(dtype, np.integer) or np.issubdtype(np.asarray(value).dtype, np.integer):
        return np.asarray(value, dtype)
    scale, zero = details["quantization"]
    if scale == 0:
        return np.asarray(value, dtype)
    info = np.iinfo(dtype)
    return np.clip(np.round(value / scale) + zero, info.min, info.max).astype(dtype)


# ---- reference outputs --------------------------------------------------------------------------

def run_official(data: bytes, calls: list[tuple[str, dict[str, np.ndarray]]], resolver: OpResolverType
                 ) -> list[dict[str, np.ndarray]]:
    interpreter = Interpreter(model_content=data, num_threads=1, experimental_op_resolver_type=resolver)
    interpreter.allocate_tensors()
    results = []
    for key, inputs in calls:
        runner = interpreter.get_signature_runner(key)
        results.append({k: np.array(v) for k, v in runner(**inputs).items()})
    return results


@dataclass
class Spec:
    name: str
    build: Callable[[], bytes]
    calls: Callable[[bytes], list[tuple[str, dict[str, np.ndarray]]]]
    quant: str
    stateful: bool = False
    notes: str = ""


def write(spec: Spec) -> None:
    data = spec.build()
    calls = spec.calls(data)
    ref = run_official(data, calls, OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    xnn = run_official(data, calls, OpResolverType.AUTO)
    arrays: dict[str, np.ndarray] = {}
    for k, ((key, inputs), r, x) in enumerate(zip(calls, ref, xnn)):
        for name, v in inputs.items():
            arrays[f"step{k}/{key}/in/{name}"] = v
        for name, v in r.items():
            arrays[f"step{k}/{key}/out_ref/{name}"] = v
        for name, v in x.items():
            arrays[f"step{k}/{key}/out_xnn/{name}"] = v
    meta = {"criterion": criterion(spec.quant), "steps": len(calls), "stateful": spec.stateful,
            "quant": spec.quant, "notes": spec.notes, "tensorflow": tf.__version__}
    arrays["meta"] = np.array(json.dumps(meta))
    OUT.mkdir(exist_ok=True)
    (OUT / f"{spec.name}.tflite").write_bytes(data)
    np.savez_compressed(OUT / f"{spec.name}.npz", **arrays)
    spread = max((float(np.max(np.abs(r[n].astype(np.float64) - x[n].astype(np.float64))))
                  for r, x in zip(ref, xnn) for n in r if r[n].size), default=0.0)
    first = next(iter(ref[0].values())).astype(np.float64)
    print(f"{spec.name}: {len(data) / 1024:.0f} KiB, {len(calls)} call(s), ref-vs-xnnpack spread {spread:.3g}, "
          f"first output std {first.std():.3g} range [{first.min():.3g}, {first.max():.3g}]", flush=True)


def signature_inputs(data: bytes) -> dict[str, dict[str, dict]]:
    interpreter = Interpreter(model_content=data)
    return {key: interpreter.get_signature_runner(key).get_input_details()
            for key in interpreter.get_signature_list()}


def single_call(make_input: Callable[[np.random.Generator], dict[str, np.ndarray]], steps: int = 1):
    """Calls of the model's only signature with seeded float samples, quantized where the input is integer."""
    def calls(data: bytes):
        (key, details), = signature_inputs(data).items()
        rng = np.random.default_rng(SEED)
        out = []
        for _ in range(steps):
            sample = make_input(rng)
            names = list(details)
            # from_keras_model names inputs after the Keras inputs; map positionally when they differ
            if set(sample) != set(names):
                sample = dict(zip(sorted(names, key=lambda n: details[n]["index"]), sample.values()))
            out.append((key, {n: quantize_for(details[n], v) for n, v in sample.items()}))
        return out
    return calls


# ---- Keras image models -------------------------------------------------------------------------

def image_input(size: int):
    def make(rng):
        return {"image": rng.uniform(-1, 1, (1, size, size, 3)).astype(np.float32)}
    return make


def mobilenet_v2() -> keras.Model:
    keras.utils.set_random_seed(SEED)
    model = keras.applications.MobileNetV2(input_shape=(96, 96, 3), alpha=0.35, weights=None, classes=10)
    return calibrate_batchnorm(model, 96)


def se_block(x, ratio: int = 4):
    channels = x.shape[-1]
    s = keras.layers.GlobalAveragePooling2D(keepdims=True)(x)
    s = keras.layers.Conv2D(max(channels // ratio, 4), 1, activation="swish")(s)
    s = keras.layers.Conv2D(channels, 1, activation="sigmoid")(s)
    return keras.layers.Multiply()([x, s])


def mbconv(x, out_channels: int, expand: int, stride: int):
    """EfficientNet's block: expand, depthwise, squeeze-excite, project (+ residual)."""
    inp = x
    channels = x.shape[-1]
    x = keras.layers.Conv2D(channels * expand, 1, use_bias=False)(x)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.Activation("swish")(x)
    x = keras.layers.DepthwiseConv2D(3, strides=stride, padding="same", use_bias=False)(x)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.Activation("swish")(x)
    x = se_block(x)
    x = keras.layers.Conv2D(out_channels, 1, use_bias=False)(x)
    x = keras.layers.BatchNormalization()(x)
    if stride == 1 and channels == out_channels:
        x = keras.layers.Add()([x, inp])
    return x


def res_block(x, channels: int, stride: int):
    """ResNet's basic block with a projection shortcut when the shape changes."""
    shortcut = x
    y = keras.layers.Conv2D(channels, 3, strides=stride, padding="same", use_bias=False)(x)
    y = keras.layers.BatchNormalization()(y)
    y = keras.layers.ReLU()(y)
    y = keras.layers.Conv2D(channels, 3, padding="same", use_bias=False)(y)
    y = keras.layers.BatchNormalization()(y)
    if stride != 1 or x.shape[-1] != channels:
        shortcut = keras.layers.Conv2D(channels, 1, strides=stride, use_bias=False)(x)
        shortcut = keras.layers.BatchNormalization()(shortcut)
    return keras.layers.ReLU()(keras.layers.Add()([y, shortcut]))


def calibrate_batchnorm(model: keras.Model, size: int) -> keras.Model:
    """Trained-looking BatchNorm layers: random scales and offsets, and moving statistics taken from
    one batch of inputs, so that activations neither vanish nor explode through a deep random network
    (a dead layer would give a quantization scale the official int16 kernels refuse)."""
    rng = np.random.default_rng(SEED)
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            *_, mean, var = layer.get_weights()  # gamma without scale=False (InceptionV3), beta without center=False
            drawn = []
            if layer.scale:
                drawn.append(rng.uniform(0.5, 1.5, mean.shape).astype(np.float32))
            if layer.center:
                drawn.append(rng.normal(0.1, 0.2, mean.shape).astype(np.float32))
            layer.set_weights([*drawn, mean, var])
            layer.momentum = 0.0
    model(rng.uniform(-1, 1, (8, size, size, 3)).astype(np.float32), training=True)
    return model


def resnet_effnet() -> keras.Model:
    """A small CNN with ResNet blocks, EfficientNet MBConv blocks (swish, SE) and both poolings."""
    keras.utils.set_random_seed(SEED)
    inp = keras.Input((64, 64, 3), batch_size=1, name="image")
    x = keras.layers.Conv2D(16, 3, strides=2, padding="same", use_bias=False)(inp)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.ReLU()(x)
    x = res_block(x, 16, 1)
    x = keras.layers.MaxPooling2D(2)(x)
    x = mbconv(x, 24, 4, 2)
    x = mbconv(x, 24, 4, 1)
    x = res_block(x, 32, 2)
    x = keras.layers.AveragePooling2D(2)(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    x = keras.layers.Dense(10, name="logits")(x)
    return calibrate_batchnorm(keras.Model(inp, x), 64)


def keras_spec(name: str, make_model: Callable[[], keras.Model], quant: str, make_input, steps: int = 1,
               stateful: bool = False, notes: str = "") -> Spec:
    return Spec(name, lambda: convert_keras(make_model(), quant, make_input), single_call(make_input, steps),
                quant, stateful, notes)


# ---- recurrent ----------------------------------------------------------------------------------

def sequence_input(rng):
    return {"sequence": rng.normal(0, 1, (1, 12, 8)).astype(np.float32)}


def recurrent(cell: str, unroll: bool) -> Callable[[], keras.Model]:
    def make():
        keras.utils.set_random_seed(SEED)
        layer = {"lstm": keras.layers.LSTM, "gru": keras.layers.GRU}[cell]
        inp = keras.Input((12, 8), batch_size=1, name="sequence")
        x = layer(32, return_sequences=True, unroll=unroll)(inp)
        x = layer(32, unroll=unroll)(x)
        return keras.Model(inp, keras.layers.Dense(4)(x))
    return make


class FusedLstm(tf.Module):
    """Two stacked LSTMs written as Keras 2's ``standard_lstm`` with its ``api_implements`` attribute,
    which the converter fuses into UNIDIRECTIONAL_SEQUENCE_LSTM (Keras 3 layers become WHILE loops)."""

    UNITS = 32

    def __init__(self):
        rng = np.random.default_rng(SEED)
        u = self.UNITS
        self.layers = [tuple(tf.constant(rng.normal(0, s, shape).astype(np.float32)) for s, shape in
                             ((0.3, (fan_in, 4 * u)), (0.2, (u, 4 * u)), (0.1, (4 * u,))))
                       for fan_in in (8, u)]
        self.dense = tf.constant(rng.normal(0, 0.3, (u, 4)).astype(np.float32))
        import uuid

        self.fused = [tf.function(self.standard_lstm, autograph=False, experimental_attributes={
            "api_implements": f"lstm_{uuid.UUID(int=SEED + k)}", "api_preferred_device": "CPU",
            "time_major": False, "go_backwards": False}) for k in range(2)]

    @staticmethod
    def standard_lstm(inputs, init_h, init_c, kernel, recurrent_kernel, bias):
        def step(carry, x):
            h, c = carry
            z = tf.matmul(x, kernel) + tf.matmul(h, recurrent_kernel) + bias
            i, f, g, o = tf.split(z, 4, axis=1)  # Keras's gate order
            c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
            return tf.sigmoid(o) * tf.tanh(c), c
        hs, cs = tf.scan(step, tf.transpose(inputs, (1, 0, 2)), initializer=(init_h, init_c))
        outputs = tf.transpose(hs, (1, 0, 2))
        return outputs[:, -1], outputs, hs[-1], cs[-1], tf.constant(1.0)

    @tf.function(input_signature=[tf.TensorSpec((1, 12, 8), tf.float32, name="sequence")])
    def run(self, sequence):
        zeros = tf.zeros((1, self.UNITS))
        x = sequence
        for fused, (kernel, recurrent, bias) in zip(self.fused, self.layers):
            last, x, _, _, _ = fused(x, zeros, zeros, kernel, recurrent, bias)
        return {"prediction": tf.matmul(last, self.dense)}


def convert_concrete(module: tf.Module, function, quant: str, make_input) -> bytes:
    converter = tf.lite.TFLiteConverter.from_concrete_functions([function.get_concrete_function()], module)
    configure(converter, quant, representative(make_input))
    return converter.convert()


def fused_lstm_spec(quant: str) -> Spec:
    module = FusedLstm()
    return Spec(f"lstm_fused_{quant}", lambda: convert_concrete(module, module.run, quant, sequence_input),
                module_calls([("serving_default", sequence_input)]), quant)


# ---- transformer --------------------------------------------------------------------------------

def tokens_input(rng):
    return {"tokens": rng.normal(0, 1, (1, 16, 32)).astype(np.float32)}


def encoder_blocks(x, key_dim: int, hidden: int, width: int):
    """Two post-norm encoder blocks: 4-head self-attention, layer norm, a GELU dense layer of ``hidden``."""
    for _ in range(2):
        a = keras.layers.MultiHeadAttention(num_heads=4, key_dim=key_dim)(x, x)
        x = keras.layers.LayerNormalization(epsilon=1e-6)(x + a)
        f = keras.layers.Dense(hidden, activation="gelu")(x)
        f = keras.layers.Dense(width)(f)
        x = keras.layers.LayerNormalization(epsilon=1e-6)(x + f)
    return keras.layers.GlobalAveragePooling1D()(x)


def transformer() -> keras.Model:
    keras.utils.set_random_seed(SEED)
    inp = keras.Input((16, 32), batch_size=1, name="tokens")
    return keras.Model(inp, keras.layers.Dense(8)(encoder_blocks(inp, 8, 64, 32)))


def token_ids_input(rng):
    return {"token_ids": rng.integers(0, 1000, (1, 32)).astype(np.int32)}


def text_encoder() -> keras.Model:
    """Token ids -> embedding -> two encoder blocks -> pooled logits (issue 26's Keras encoder: its dynamic-range
    conversion was 4.4e-3 off the builtin kernels in BUILTIN mode)."""
    keras.utils.set_random_seed(SEED)
    inp = keras.Input((32,), batch_size=1, dtype="int32", name="token_ids")
    x = keras.layers.Embedding(1000, 64)(inp)
    return keras.Model(inp, keras.layers.Dense(10)(encoder_blocks(x, 16, 128, 64)))


# ---- tf.Module models ---------------------------------------------------------------------------

def module_calls(sequence: list[tuple[str, Callable[[np.random.Generator], dict[str, np.ndarray]]]]):
    """Calls by signature key, with seeded samples quantized for integer inputs."""
    def calls(data: bytes):
        details = signature_inputs(data)
        rng = np.random.default_rng(SEED)
        return [(key, {n: quantize_for(details[key][n], v) for n, v in make(rng).items()})
                for key, make in sequence]
    return calls


class WhileModule(tf.Module):
    """An RNN-like refinement repeated `steps` times (a runtime input): a WHILE loop that stays one."""

    def __init__(self):
        rng = np.random.default_rng(SEED)
        self.w = tf.constant(rng.normal(0, 0.3, (16, 16)).astype(np.float32))
        self.b = tf.constant(rng.normal(0, 0.1, (16,)).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec((1, 16), tf.float32, name="x"),
                                  tf.TensorSpec((), tf.int32, name="steps")])
    def iterate(self, x, steps):
        def body(i, h, total):
            h = tf.tanh(tf.matmul(h, self.w) + self.b + x)
            return i + 1, h, total + tf.reduce_sum(h)
        _, h, total = tf.while_loop(lambda i, h, t: i < steps, body, [tf.constant(0), x, tf.constant(0.0)])
        return {"state": h, "total": tf.reshape(total, [1])}


def while_calls():
    def make(n):
        return lambda rng: {"x": rng.normal(0, 1, (1, 16)).astype(np.float32), "steps": np.array(n, np.int32)}
    return module_calls([("serving_default", make(n)) for n in (5, 0, 1, 17)])


class TwoSignatures(tf.Module):
    """`embed` and `score` share weights; the SavedModel orders them differently from the subgraphs."""

    def __init__(self):
        rng = np.random.default_rng(SEED)
        self.w1 = tf.constant(rng.normal(0, 0.3, (12, 24)).astype(np.float32))
        self.w2 = tf.constant(rng.normal(0, 0.3, (24, 6)).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec((2, 12), tf.float32, name="features")])
    def embed(self, features):
        h = tf.nn.relu6(tf.matmul(features, self.w1))
        return {"embedding": tf.math.l2_normalize(h, axis=-1)}

    @tf.function(input_signature=[tf.TensorSpec((2, 24), tf.float32, name="embedding"),
                                  tf.TensorSpec((2, 6), tf.float32, name="bias")])
    def score(self, embedding, bias):
        logits = tf.matmul(embedding, self.w2) + bias
        return {"probs": tf.nn.softmax(logits), "best": tf.argmax(logits, axis=-1, output_type=tf.int32)}


def two_signature_calls():
    return module_calls([
        ("embed", lambda rng: {"features": rng.normal(0, 1, (2, 12)).astype(np.float32)}),
        ("score", lambda rng: {"embedding": rng.normal(0, 1, (2, 24)).astype(np.float32),
                               "bias": rng.normal(0, 0.1, (2, 6)).astype(np.float32)}),
        ("embed", lambda rng: {"features": rng.normal(0, 1, (2, 12)).astype(np.float32)}),
    ])


FEATURES, KERNEL, CHANNELS = 20, 5, 24


class Streaming(tf.Module):
    """microWakeWord's shape: each call takes one feature frame; ring buffers held in resource
    variables feed convolutions over the last KERNEL frames; a sigmoid gives the probability."""

    def __init__(self):
        rng = np.random.default_rng(SEED)
        self.buffer1 = tf.Variable(tf.zeros((1, KERNEL - 1, FEATURES)), trainable=False, name="buffer1")
        self.buffer2 = tf.Variable(tf.zeros((1, KERNEL - 1, CHANNELS)), trainable=False, name="buffer2")
        self.w1 = tf.constant(rng.normal(0, 0.2, (KERNEL, FEATURES, CHANNELS)).astype(np.float32))
        self.w2 = tf.constant(rng.normal(0, 0.15, (KERNEL, 1, CHANNELS)).astype(np.float32))  # depthwise
        self.w3 = tf.constant(rng.normal(0, 0.3, (CHANNELS, 1)).astype(np.float32))

    @staticmethod
    def _push(buffer: tf.Variable, frame):
        window = tf.concat([buffer.read_value(), frame], axis=1)
        buffer.assign(window[:, 1:, :])
        return window

    @tf.function(input_signature=[tf.TensorSpec((1, 1, FEATURES), tf.float32, name="frame")])
    def step(self, frame):
        window = self._push(self.buffer1, frame)
        h = tf.nn.relu(tf.nn.conv1d(window, self.w1, stride=1, padding="VALID"))
        window = self._push(self.buffer2, h)
        d = tf.nn.depthwise_conv2d(window[:, :, None, :], self.w2[:, :, :, None], [1, 1, 1, 1], "VALID")
        h = tf.nn.relu(tf.reshape(d, (1, CHANNELS)))
        return {"probability": tf.sigmoid(tf.matmul(h, self.w3))}


def frame_input(rng):
    return {"frame": rng.uniform(0, 2, (1, 1, FEATURES)).astype(np.float32)}


def streaming_spec(name: str, quant: str) -> Spec:
    module = Streaming()
    build = (lambda: convert_saved(module, {"serving_default": module.step}, quant,
                                   {"serving_default": frame_input}, variable_quantization=quant == "int8"))
    return Spec(name, build, module_calls([("serving_default", frame_input)] * 12), quant, stateful=True)


HEADS, HEAD_DIM, CACHE = 4, 16, 16
MODEL_DIM = HEADS * HEAD_DIM


class DecoderStep(tf.Module):
    """One decoding step of a causal attention layer: this token's key and value are written into the
    caches at `position` (DYNAMIC_UPDATE_SLICE), which come back as outputs for the next step."""

    def __init__(self):
        rng = np.random.default_rng(SEED)
        self.wq, self.wk, self.wv, self.wo = (
            tf.constant(rng.normal(0, 0.25, (MODEL_DIM, MODEL_DIM)).astype(np.float32)) for _ in range(4))
        self.w_ff = tf.constant(rng.normal(0, 0.25, (MODEL_DIM, 128)).astype(np.float32))
        self.w_out = tf.constant(rng.normal(0, 0.25, (128, MODEL_DIM)).astype(np.float32))

    @tf.function(input_signature=[
        tf.TensorSpec((1, 1, MODEL_DIM), tf.float32, name="token"),
        tf.TensorSpec((1, CACHE, MODEL_DIM), tf.float32, name="k_cache"),
        tf.TensorSpec((1, CACHE, MODEL_DIM), tf.float32, name="v_cache"),
        tf.TensorSpec((), tf.int32, name="position")])
    def step(self, token, k_cache, v_cache, position):
        from tensorflow.compiler.tf2xla.python import xla

        q, k, v = (tf.matmul(token, w) for w in (self.wq, self.wk, self.wv))
        start = tf.stack([0, position, 0])
        k_cache = xla.dynamic_update_slice(k_cache, k, start)
        v_cache = xla.dynamic_update_slice(v_cache, v, start)
        split = lambda t: tf.transpose(tf.reshape(t, (1, -1, HEADS, HEAD_DIM)), (0, 2, 1, 3))
        scores = tf.matmul(split(q), split(k_cache), transpose_b=True) / np.sqrt(HEAD_DIM).astype(np.float32)
        visible = tf.range(CACHE) <= position
        scores = tf.where(visible[None, None, None, :], scores, tf.fill(tf.shape(scores), -1e4))
        attended = tf.matmul(tf.nn.softmax(scores), split(v_cache))
        attended = tf.reshape(tf.transpose(attended, (0, 2, 1, 3)), (1, 1, MODEL_DIM))
        h = token + tf.matmul(attended, self.wo)
        h = h + tf.matmul(tf.nn.gelu(tf.matmul(h, self.w_ff)), self.w_out)
        return {"hidden": h, "k_cache_out": k_cache, "v_cache_out": v_cache}


def decoder_sample(rng, position: int, k_cache=None, v_cache=None):
    zeros = np.zeros((1, CACHE, MODEL_DIM), np.float32)
    return {"token": rng.normal(0, 1, (1, 1, MODEL_DIM)).astype(np.float32),
            "k_cache": zeros if k_cache is None else k_cache, "v_cache": zeros if v_cache is None else v_cache,
            "position": np.array(position, np.int32)}


def decoder_rep(rng):
    """Calibration sees filled caches too, so their quantization range is realistic."""
    position = int(rng.integers(0, CACHE))
    return decoder_sample(rng, position, rng.normal(0, 1.5, (1, CACHE, MODEL_DIM)).astype(np.float32),
                          rng.normal(0, 1.5, (1, CACHE, MODEL_DIM)).astype(np.float32))


def dequantize_from(details: dict, value: np.ndarray) -> np.ndarray:
    scale, zero = details["quantization"]
    if not np.issubdtype(value.dtype, np.integer) or scale == 0:
        return value.astype(np.float32)
    return ((value.astype(np.float32) - zero) * scale).astype(np.float32)


def decoder_calls(steps: int = 6):
    """Generation: each step's caches are the official builtin kernels' previous outputs (requantized to
    the input's scale when the model is integer), recorded as that step's inputs."""
    def calls(data: bytes):
        interpreter = Interpreter(model_content=data, num_threads=1,
                                  experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
        runner = interpreter.get_signature_runner("serving_default")
        details, out_details = runner.get_input_details(), runner.get_output_details()
        rng = np.random.default_rng(SEED)
        k = v = None
        out = []
        for position in range(steps):
            sample = decoder_sample(rng, position, k, v)
            inputs = {n: quantize_for(details[n], x) for n, x in sample.items()}
            out.append(("serving_default", inputs))
            result = runner(**inputs)
            k = dequantize_from(out_details["k_cache_out"], result["k_cache_out"])
            v = dequantize_from(out_details["v_cache_out"], result["v_cache_out"])
        return out
    return calls


def decoder_spec(name: str, quant: str) -> Spec:
    module = DecoderStep()
    build = lambda: convert_saved(module, {"serving_default": module.step}, quant, {"serving_default": decoder_rep})
    return Spec(name, build, decoder_calls(), quant)


# ---- LLM-style decoder with its weights after the FlatBuffer ------------------------------------

TF_DECODER = {"layers": 2, "width": 64, "heads": 4, "vocab": 256, "max_len": 32, "prefill_len": 8}


def tf_decoder_model():
    """``bench/models/tf_decoder_model.py``: the same code makes the > 2.5 GB benchmark model."""
    bench = str(HERE.parents[1] / "bench" / "models")
    if bench not in sys.path:
        sys.path.insert(0, bench)
    import tf_decoder_model

    return tf_decoder_model


def tf_decoder_build() -> bytes:
    """``_experimental_use_buffer_offset``: every weight after the FlatBuffer (Buffer.offset/size, offsets
    only 4-byte aligned), the layout the converter writes for every model past 2 GB."""
    m = tf_decoder_model()
    with tempfile.TemporaryDirectory() as d:
        m.save_module(m.TfDecoderConfig(**TF_DECODER), d)
        return m.convert(d, buffer_offset=True, lean=False)


def tf_decoder_calls(decode_steps: int = 4):
    """Greedy generation: prefill of a seeded prompt at position 0, then decode steps each fed the official
    builtin kernels' argmax token and caches from the step before (recorded as that step's inputs)."""
    def calls(data: bytes):
        interpreter = Interpreter(model_content=data, num_threads=1,
                                  experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
        c = TF_DECODER
        caches = {f"kv_cache_{kind}_{i}": np.zeros((1, c["max_len"], c["width"]), np.float32)
                  for i in range(c["layers"]) for kind in ("k", "v")}
        prompt = np.random.default_rng(SEED).integers(1, c["vocab"], (1, c["prefill_len"])).astype(np.int32)
        steps = [("prefill", prompt, 0)] + [("decode", None, c["prefill_len"] + k) for k in range(decode_steps)]
        out, token = [], None
        for key, tokens, position in steps:
            inputs = {"tokens": tokens if tokens is not None else np.array([[token]], np.int32),
                      "input_pos": np.array([position], np.int32), **caches}
            out.append((key, inputs))
            result = interpreter.get_signature_runner(key)(**inputs)
            token = int(np.argmax(result["logits"][0, -1]))
            caches = {n: np.array(result[n]) for n in caches}
        return out
    return calls


# ---- the list -----------------------------------------------------------------------------------

def specs() -> list[Spec]:
    out = []
    for quant in ("float32", "float16", "dynamic", "int8", "16x8"):
        out.append(keras_spec(f"mobilenet_v2_035_96_{quant}", mobilenet_v2, quant, image_input(96)))
        out.append(keras_spec(f"resnet_effnet_{quant}", resnet_effnet, quant, image_input(64)))
    for cell in ("lstm", "gru"):
        for unroll in (False, True):
            for quant in ("float32", "dynamic"):
                tag = "_unrolled" if unroll else ""
                out.append(keras_spec(f"{cell}{tag}_{quant}", recurrent(cell, unroll), quant, sequence_input))
    for quant in ("float32", "dynamic", "int8"):
        out.append(fused_lstm_spec(quant))
    # No lstm_int8: TF 2.21's calibrator segfaults (calibrator.py _feed_tensors) on every Keras 3 LSTM (a WHILE loop)
    # with a representative dataset, one layer or two, with or without TFLITE_BUILTINS_INT8.
    for quant in ("float32", "dynamic", "int8"):
        out.append(keras_spec(f"transformer_{quant}", transformer, quant, tokens_input))
    for quant in ("float32", "dynamic"):
        out.append(keras_spec(f"text_encoder_{quant}", text_encoder, quant, token_ids_input))
    while_module = WhileModule()
    out.append(Spec("while_loop_float32", lambda: convert_saved(
        while_module, {"serving_default": while_module.iterate}, "float32", {}), while_calls(), "float32"))
    two = TwoSignatures()
    out.append(Spec("two_signatures_float32", lambda: convert_saved(
        two, {"embed": two.embed, "score": two.score}, "float32", {}), two_signature_calls(), "float32"))
    out.append(streaming_spec("streaming_float32", "float32"))
    out.append(streaming_spec("streaming_int8", "int8"))
    for quant in ("float32", "dynamic", "int8"):
        out.append(decoder_spec(f"kv_decoder_{quant}", quant))
    out.append(Spec("tf_decoder_extended_float32", tf_decoder_build, tf_decoder_calls(), "float32",
                    notes="bench/models/tf_decoder_model.py " + json.dumps(TF_DECODER) + ", _experimental_use_buffer_offset"))
    return out


def main(names: list[str]) -> None:
    chosen = [s for s in specs() if not names or s.name in names]
    unknown = set(names) - {s.name for s in chosen}
    if unknown:
        sys.exit(f"unknown model(s): {sorted(unknown)}")
    for spec in chosen:
        write(spec)


if __name__ == "__main__":
    main(sys.argv[1:])
