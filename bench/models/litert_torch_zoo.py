"""The litert-torch zoo: twelve vision models of the LiteRT GPU docs' model table, from torchvision, timm and
Hugging Face, converted by litert-torch with random weights (nothing is downloaded: ``pretrained=False``,
configs built in code), fp32, batch 1, 224 x 224.  Issue 38's four slow models (PVTv2-b1, MobileViT-small,
EfficientFormerV2-s0, MnasNet 0.5) are among them.

Rebuild (a venv of its own, so the shared environment's torch is left alone; about 1-2 GB of memory per model):

    python -m venv /work/venv-lt
    /work/venv-lt/bin/pip install litert-torch timm torchvision transformers
    /work/venv-lt/bin/python bench/models/litert_torch_zoo.py /work/zoo/litert_torch [NAME ...]

Writes ``NAME.tflite`` (a model already there is kept) and one JSON line per model; then measure with
``PYTHONPATH=src python bench/cpu/engines.py /work/zoo/litert_torch/*.tflite --variants xnnpack openvino litegpu``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conversion_log import convert_named  # noqa: E402

SEED = 0


def _import_torchvision():
    """torchvision, imported where its native library cannot load: PyPI's torchvision is built for CUDA torch
    (its ``_C.so`` wants ``libc10_cuda.so``) and the torch here is the CPU build.  Its import then fails
    registering fake kernels for ``torchvision::nms`` / ``qnms``, ops that only its native library defines; the
    classifiers built here use neither, so their schemas are defined (without kernels) for the import to pass."""
    import importlib.util
    import os

    import torch

    if "torchvision" in sys.modules:
        return sys.modules["torchvision"]
    native = os.path.join(os.path.dirname(importlib.util.find_spec("torchvision").origin), "_C.so")
    try:
        torch.ops.load_library(native)
    except OSError:
        global _SCHEMAS  # the Library object must outlive this call, or its definitions go with it
        _SCHEMAS = torch.library.Library("torchvision", "DEF")
        for op in ("nms", "qnms"):
            _SCHEMAS.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    import torchvision

    return torchvision


_SCHEMAS = None


def _torchvision(name: str):
    torchvision = _import_torchvision()

    return torchvision.models.get_model(name, weights=None)


def _timm(name: str):
    import timm

    return timm.create_model(name, pretrained=False)


def _hf(config_name: str, model_name: str):
    """A Hugging Face classifier at its config's defaults, returning plain logits."""
    import torch
    import transformers

    inner = getattr(transformers, model_name)(getattr(transformers, config_name)())

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x).logits

    return Logits()


# name -> builder of an nn.Module taking a [1, 3, 224, 224] image
ZOO = {
    "pvt_v2_b1": lambda: _timm("pvt_v2_b1"),
    "mobilevit_small": lambda: _hf("MobileViTConfig", "MobileViTForImageClassification"),
    "efficientformerv2_s0": lambda: _timm("efficientformerv2_s0"),
    "mnasnet0_5": lambda: _torchvision("mnasnet0_5"),
    "mobilenet_v2": lambda: _torchvision("mobilenet_v2"),
    "mobilenet_v3_large": lambda: _torchvision("mobilenet_v3_large"),
    "efficientnet_b0": lambda: _torchvision("efficientnet_b0"),
    "resnet18": lambda: _torchvision("resnet18"),
    "squeezenet1_1": lambda: _torchvision("squeezenet1_1"),
    "shufflenet_v2_x1_0": lambda: _torchvision("shufflenet_v2_x1_0"),
    "convnext_tiny": lambda: _torchvision("convnext_tiny"),
    "deit_tiny": lambda: _timm("deit_tiny_patch16_224"),
}


def build(name: str, out: Path) -> dict:
    _import_torchvision()  # before litert_torch, timm and transformers, which import it
    import litert_torch
    import torch

    torch.manual_seed(SEED)
    model = ZOO[name]().eval()
    with torch.no_grad():
        edge = litert_torch.convert(model, (torch.randn(1, 3, 224, 224),))
    tmp = out.with_suffix(".tflite.tmp")
    edge.export(str(tmp))
    tmp.replace(out)  # a conversion cut short leaves no half-written model behind
    return {"params": int(sum(p.numel() for p in model.parameters()))}


def main(argv: list[str]) -> int:
    return convert_named(argv, list(ZOO), lambda name: f"{name}.tflite", "litert-torch", build)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
