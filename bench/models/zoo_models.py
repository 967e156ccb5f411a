"""The model zoo's definitions and converter; run with the TensorFlow venv, not litegpu's.

    nice /work/venv-tf/bin/python bench/models/zoo_models.py [--batch N] /work/zoo/keras [NAME ...]

Keras 3 applications with ``weights=None`` (no downloads here; random weights,
seeded, are fine for speed) and a small transformer encoder, each converted
with TensorFlow's own converter at batch 1 and at a larger batch for
throughput.  A model already in OUT_DIR is not converted again.  One JSON line
per model on stdout says what was made or why not.  Up to ~3 GB of memory a model,
VGG16 (138 M parameters) ~6 GB: it goes through a SavedModel (``_through_saved_model``).

Kept importable without TensorFlow (``python bench/cpu/zoo.py`` imports ZOO for
the model list); TensorFlow is imported only when converting.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conversion_log import convert_and_report  # noqa: E402

SEED = 0
LARGE_BATCH = 8
# Parameters above which a model goes through a SavedModel (``_through_saved_model``): VGG16 (138 M) alone; the
# others keep the path their earlier figures were measured on
FREEZE_LIMIT = 50_000_000

# name -> (keras.applications attribute or "transformer", input H/W or sequence length)
ZOO: dict[str, tuple[str, int]] = {
    "mobilenet_v2": ("MobileNetV2", 224),
    "mobilenet_v3_small": ("MobileNetV3Small", 224),
    "mobilenet_v3_large": ("MobileNetV3Large", 224),
    "resnet50": ("ResNet50", 224),
    "efficientnet_b0": ("EfficientNetB0", 224),
    "densenet121": ("DenseNet121", 224),
    "inception_v3": ("InceptionV3", 299),
    "vgg16": ("VGG16", 224),
    "convnext_tiny": ("ConvNeXtTiny", 224),
    "nasnet_mobile": ("NASNetMobile", 224),
    "transformer_encoder": ("transformer", 128),
}
BATCHES = (1, LARGE_BATCH)


def file_name(name: str, batch: int) -> str:
    return f"{name}_b{batch}.tflite"


def _keras_application(attr: str, size: int):
    import keras

    return getattr(keras.applications, attr)(weights=None, input_shape=(size, size, 3))


def _transformer(seq: int, dim: int = 256, heads: int = 4, layers: int = 4, vocab: int = 8000):
    """A BERT-small-like encoder: embeddings, post-norm attention blocks, GELU MLP, pooled head."""
    import keras
    from keras import layers as L

    tokens = keras.Input((seq,), dtype="int32")
    x = L.Embedding(vocab, dim)(tokens)
    positions = L.Embedding(seq, dim)(keras.ops.arange(seq)[None, :])
    x = x + positions
    for _ in range(layers):
        a = L.MultiHeadAttention(heads, dim // heads)(x, x)
        x = L.LayerNormalization(epsilon=1e-6)(x + a)
        h = L.Dense(dim * 4, activation="gelu")(x)
        x = L.LayerNormalization(epsilon=1e-6)(x + L.Dense(dim)(h))
    out = L.Dense(2)(L.GlobalAveragePooling1D()(x))
    return keras.Model(tokens, out)


def _frozen_in_python(model, spec):
    """The converter on a concrete function whose variables are folded into constants here first (Keras 3
    variables are not frozen by the converter itself on this path)."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    fn = tf.function(lambda x: model(x, training=False))
    return tf.lite.TFLiteConverter.from_concrete_functions([convert_variables_to_constants_v2(
        fn.get_concrete_function(spec))])


def _through_saved_model(model, spec, folder: Path):
    """The converter on Keras's own SavedModel export: it freezes the variables from the checkpoint once, in MLIR
    (VGG16 b1: 5.8 GB at the peak).  ``_frozen_in_python`` holds the weights as numpy arrays, as TensorProtos in a
    GraphDef and again in the graph that GraphDef is imported into (6.9 GB at VGG16's peak), then hands the
    serialized GraphDef to the converter's old path (grappler, then MLIR import), which went past 9 GB here and was
    killed at 12 GB before."""
    import tensorflow as tf

    model.export(str(folder), format="tf_saved_model", input_signature=[spec], verbose=False)
    return tf.lite.TFLiteConverter.from_saved_model(str(folder))


def build(name: str, batch: int, out: Path) -> dict:
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(SEED)
    attr, size = ZOO[name]
    if attr == "transformer":
        model = _transformer(size)
        spec = tf.TensorSpec([batch, size], tf.int32)
    else:
        model = _keras_application(attr, size)
        spec = tf.TensorSpec([batch, size, size, 3], tf.float32)
    with tempfile.TemporaryDirectory() as saved:
        converter = (_through_saved_model(model, spec, Path(saved) / "model") if model.count_params() > FREEZE_LIMIT
                     else _frozen_in_python(model, spec))
        data = converter.convert()
    tmp = out.with_suffix(".tflite.tmp")
    tmp.write_bytes(data)
    tmp.replace(out)  # a conversion cut short leaves no half-written model behind
    return {"params": int(model.count_params())}


def main(argv: list[str]) -> int:
    batches = BATCHES
    if argv[:1] == ["--batch"]:  # one batch size only: batch 1's zoo is whole before batch 8's starts
        batches, argv = (int(argv[1]),), argv[2:]
    out_dir = Path(argv[0])
    out_dir.mkdir(parents=True, exist_ok=True)
    names = argv[1:] or list(ZOO)
    for name in names:
        for batch in batches:
            path = out_dir / file_name(name, batch)
            record = {"model": name, "batch": batch, "file": path.name}
            convert_and_report(record, path, lambda: build(name, batch, path))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
