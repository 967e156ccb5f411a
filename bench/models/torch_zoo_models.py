"""Zoo models made by the PyTorch converter (litert-torch), the most common source of new .tflite files.

Hugging Face architectures built from their configs with random weights (nothing is downloaded), converted
with ``litert_torch.convert`` in fp32, batch 1.  Run with a Python that has torch and litert-torch
(not a litegpu dependency):

    /work/torchenv/bin/python bench/models/torch_zoo_models.py bench/.zoo [NAME ...]

NAME is a key of ``ZOO``, or one with ``_dynamic`` appended (litert-torch's dynamic-range recipe).

Writes ``torch_<name>.tflite`` beside the Keras zoo, so ``bench/cpu/zoo.py run`` and ``bench/cpu/engines.py`` measure
them with the rest.  torchvision and timm are not used: their wheels do not install beside the CPU torch
available here; the Hugging Face versions of the same architectures stand in for them.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conversion_log import convert_named  # noqa: E402

SEED = 0


def _image_model(config_name: str, model_name: str, **config):
    import transformers

    cfg = getattr(transformers, config_name)(**config)
    return getattr(transformers, model_name)(cfg), "image"


def _text_model(config_name: str, model_name: str, **config):
    import transformers

    cfg = getattr(transformers, config_name)(**config)
    return getattr(transformers, model_name)(cfg), "text"


# name -> builder returning (module, input kind)
ZOO = {
    "hf_resnet50": lambda: _image_model("ResNetConfig", "ResNetForImageClassification", layer_type="bottleneck",
                                        depths=[3, 4, 6, 3], hidden_sizes=[256, 512, 1024, 2048]),
    "hf_mobilenet_v2": lambda: _image_model("MobileNetV2Config", "MobileNetV2ForImageClassification"),
    "hf_convnext_tiny": lambda: _image_model("ConvNextConfig", "ConvNextForImageClassification"),
    "hf_vit_base": lambda: _image_model("ViTConfig", "ViTForImageClassification"),
    "hf_bert_base": lambda: _text_model("BertConfig", "BertForSequenceClassification"),
    "hf_distilbert": lambda: _text_model("DistilBertConfig", "DistilBertForSequenceClassification"),
    # architectures of the LiteRT GPU docs' model table (issue 26 names them among the models litegpu ran slower
    # than the best engine): MobileViT-small, PVTv2-b0, MobileNetV1 at the configs' defaults (EfficientNet's is B7)
    "hf_mobilevit_small": lambda: _image_model("MobileViTConfig", "MobileViTForImageClassification"),
    "hf_pvt_v2_b0": lambda: _image_model("PvtV2Config", "PvtV2ForImageClassification"),
    "hf_efficientnet_b0": lambda: _image_model("EfficientNetConfig", "EfficientNetForImageClassification",
                                               width_coefficient=1.0, depth_coefficient=1.0, image_size=224,
                                               hidden_dim=1280),
    "hf_mobilenet_v1": lambda: _image_model("MobileNetV1Config", "MobileNetV1ForImageClassification"),
}
# NAME + this suffix: the same model with litert-torch's dynamic-range recipe (int8 weights, activations quantized
# on the fly by the hybrid kernels): the converter's ``quant_recipes.full_dynamic_recipe()``
DYNAMIC = "_dynamic"


class _Logits:
    """The model's logits as a plain tensor output (the converter wants tensors, not ModelOutput)."""

    def __init__(self, model):
        import torch

        class Wrapped(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, x):
                return self.inner(x).logits

        self.module = Wrapped(model).eval()


def build(name: str, out: Path) -> dict:
    import litert_torch
    import torch

    torch.manual_seed(SEED)
    dynamic = name.endswith(DYNAMIC)
    model, kind = ZOO[name.removesuffix(DYNAMIC)]()
    sample = (torch.randn(1, 3, 224, 224),) if kind == "image" else (torch.randint(0, 1000, (1, 128)),)
    wrapped = _Logits(model.eval()).module
    quant = {}
    if dynamic:
        from litert_torch.generative.quantize import quant_recipes

        quant = {"quant_config": quant_recipes.full_dynamic_recipe()}
    with torch.no_grad():
        edge = litert_torch.convert(wrapped, sample, **quant)
    edge.export(str(out))
    return {"params": int(sum(p.numel() for p in model.parameters()))}


def main(argv: list[str]) -> int:
    return convert_named(argv, list(ZOO), lambda name: f"torch_{name}.tflite", "litert-torch", build)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
