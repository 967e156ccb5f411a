"""Export a tiny SmolLM-architecture decoder with litert-torch's generative API, in every weight format.

    /work/torchenv/bin/python bench/litert_torch_llm.py OUT_DIR [none dynamic_int8 dynamic_int4_block32 fp16]

Random weights (seed 0), SmolLM's fake config (2 layers, vocab 128, 576 wide, GQA, RoPE, RMSNorm),
``prefill_8`` / ``prefill_32`` and ``decode`` signatures, an external KV cache of 64 positions, the
converter's defaults otherwise (prefill without logits, one input_pos per token).  Needs torch and
litert-torch (not litegpu dependencies).  The generative converter imports TFLite's schema module through
``tensorflow``; without TensorFlow installed the same module from ``ai_edge_litert`` stands in.
The small ones are the test fixtures in ``tests/heldout/litert_torch/``.
"""

import importlib
import importlib.machinery
import sys
import types


def _schema_without_tensorflow() -> None:
    try:
        import tensorflow  # noqa: F401
        return
    except ImportError:
        pass
    schema = importlib.import_module("ai_edge_litert.schema_py_generated")
    for name in ("tensorflow", "tensorflow.lite", "tensorflow.lite.python"):
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
        module.__path__ = []
        sys.modules.setdefault(name, module)
    sys.modules["tensorflow.lite.python.schema_py_generated"] = schema


def main(argv: list[str]) -> int:
    _schema_without_tensorflow()
    import torch
    from litert_torch.generative.examples.smollm import smollm
    from litert_torch.generative.utilities import converter
    from litert_torch.generative.utilities.export_config import ExportConfig

    out_dir, formats = argv[0], argv[1:] or ["none", "dynamic_int8", "dynamic_int4_block32", "fp16"]
    torch.manual_seed(0)
    model = smollm.SmolLM(smollm.get_fake_model_config(), mask_cache_size=64).eval()
    for quantize in formats:
        converter.convert_to_tflite(model, output_path=out_dir, output_name_prefix=f"smollm_tiny_{quantize}",
                                    prefill_seq_len=[8, 32], kv_cache_max_len=64, quantize=quantize,
                                    export_config=ExportConfig())
        print("exported", quantize, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
