"""Export a tiny SmolLM-architecture decoder with litert-torch's generative API, in every weight format.

    /work/torchenv/bin/python bench/llm/litert_torch_llm.py OUT_DIR [FORMAT ...] [--mask-as-input] [--transposed-kv] [--prefill=8,32] [--layers=N]
        [--real=VOCAB] [--kv=N] [--scale=S]

``--real=VOCAB`` exports SmolLM-135M's own widths (feed-forward 1536) with VOCAB tokens as ``smollm_real_*``,
``--kv`` the KV cache length (default 64), ``--scale`` multiplies every weight after the seeded init (sharp logits).

FORMAT is one of the converter's ``quantize`` values (litert-torch 0.10, ``converter.QuantizationName``):
``none`` (float32), ``fp16``, ``dynamic_int8``, ``weight_only_int8``, ``dynamic_int4_block32``,
``dynamic_int4_block128``; or one of the two schemes litert-torch's ``quantize/supported_schemes.py`` lists that no
flag value names, ``dynamic_int4_block64`` and ``dynamic_int4_block256``, made with the same recipe builder
(``quant_recipes.full_dynamic_recipe`` with INT4 weights and that block size).  Without FORMAT: all eight.

Random weights (seed 0), SmolLM's fake config (2 layers, vocab 128, 576 wide, 9 heads of 64 in 3 query groups,
feed-forward 64, RoPE, RMSNorm), ``prefill_8`` / ``prefill_32`` and ``decode`` signatures, an external KV cache
of 64 positions, the converter's defaults otherwise (prefill without logits, one input_pos per token).  Blocks
of 128 and 256 must divide every quantized input dimension, which 576 and 64 do not (the quantizer refuses:
"Quantized dimension 576 ... is not divisible by block size 128"), so those two formats use the same
architecture 512 wide, 8 heads of 64 in 2 query groups, feed-forward 256.  ``--mask-as-input`` and
``--transposed-kv`` set ExportConfig's ``mask_as_input`` / ``kvcache_layout=KV_LAYOUT_TRANSPOSED``; ``--prefill``
the prefill lengths (default 8 and 32).

Writes ``OUT_DIR/smollm_tiny_<FORMAT>[_mask_as_input][_transposed_kv].tflite``.  Needs torch and litert-torch
(not litegpu dependencies).  The generative converter imports TFLite's schema module through ``tensorflow``;
without TensorFlow installed the same module from ``ai_edge_litert`` stands in.  The small ones are the test
fixtures in ``tests/heldout/litert_torch/`` (its README says which is which).
"""

import importlib
import importlib.machinery
import os
import sys
import types

FLAG_FORMATS = ["none", "fp16", "dynamic_int8", "weight_only_int8", "dynamic_int4_block32", "dynamic_int4_block128"]
SCHEME_FORMATS = ["dynamic_int4_block64", "dynamic_int4_block256"]
WIDE_BLOCKS = ("dynamic_int4_block128", "dynamic_int4_block256")


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


LAYERS = 2  # SmolLM's fake config; ``--layers=N`` changes it (deeper exports: the layer loop of backends/xla/layer_scan.py)
# ``--real=VOCAB``: SmolLM-135M's own widths (feed-forward 1536) with VOCAB tokens, in place of the fake config's
# feed-forward 64 and vocabulary 128: the widths where the hybrid kernels' row quantization and blocks matter.
REAL_VOCAB = 0


def _config(quantize):
    from litert_torch.generative.examples.smollm import smollm
    config = smollm.get_fake_model_config()
    if REAL_VOCAB:
        config = smollm.get_model_config()
        config.vocab_size = REAL_VOCAB
    config.num_layers = LAYERS
    if quantize in WIDE_BLOCKS:
        config.embedding_dim = 512
        config.block_config(0).attn_config.num_heads = 8
        config.block_config(0).attn_config.num_query_groups = 2
        if not REAL_VOCAB:  # 1536 is a multiple of 256 already
            config.block_config(0).ff_config.intermediate_size = 256
    return config


def _scheme_recipes(converter) -> None:
    """Let the converter take the supported schemes no flag names, through its own recipe builder."""
    from litert_torch.generative.quantize import quant_attrs, quant_recipes
    flag_recipe, flag_suffix = converter.get_quant_recipe_from_flag, converter.create_quantize_suffix
    blocks = {"dynamic_int4_block64": quant_attrs.Granularity.BLOCKWISE_64,
              "dynamic_int4_block256": quant_attrs.Granularity.BLOCKWISE_256}

    def recipe(quantize, config):
        if quantize in blocks:
            return quant_recipes.full_dynamic_recipe(mcfg=config, weight_dtype=quant_attrs.Dtype.INT4,
                                                     granularity=blocks[quantize])
        return flag_recipe(quantize, config)

    converter.get_quant_recipe_from_flag = recipe
    converter.create_quantize_suffix = lambda q: f"q4_block{q[len('dynamic_int4_block'):]}" if q in blocks \
        else flag_suffix(q)


def main(argv: list[str]) -> int:
    _schema_without_tensorflow()
    import torch
    from litert_torch.generative.examples.smollm import smollm
    from litert_torch.generative.layers import kv_cache
    from litert_torch.generative.utilities import converter
    from litert_torch.generative.utilities.export_config import ExportConfig

    mask_as_input, transposed = "--mask-as-input" in argv, "--transposed-kv" in argv
    prefill = next((a.split("=", 1)[1] for a in argv if a.startswith("--prefill=")), "8,32")
    global LAYERS, REAL_VOCAB
    LAYERS = int(next((a.split("=", 1)[1] for a in argv if a.startswith("--layers=")), LAYERS))
    REAL_VOCAB = int(next((a.split("=", 1)[1] for a in argv if a.startswith("--real=")), 0))
    kv_length = int(next((a.split("=", 1)[1] for a in argv if a.startswith("--kv=")), 64))
    # ``--scale=S`` multiplies every weight by S after the seeded init: random weights of the default init give
    # nearly flat logits, where greedy tokens are rounding ties; scaled up, logits are sharp
    weight_scale = float(next((a.split("=", 1)[1] for a in argv if a.startswith("--scale=")), 1))
    prefix = "smollm_real" if REAL_VOCAB else "smollm_tiny"
    prefill_lengths = [int(n) for n in prefill.split(",")]
    args = [a for a in argv if not a.startswith("--")]
    out_dir, formats = args[0], args[1:] or FLAG_FORMATS + SCHEME_FORMATS
    unknown = set(formats) - set(FLAG_FORMATS + SCHEME_FORMATS)
    if unknown:
        raise SystemExit(f"unknown format(s) {sorted(unknown)}; known: {FLAG_FORMATS + SCHEME_FORMATS}")
    _scheme_recipes(converter)
    export_config = ExportConfig(mask_as_input=mask_as_input)
    if transposed:
        export_config.kvcache_layout = kv_cache.KV_LAYOUT_TRANSPOSED
    variant = "_mask_as_input" * mask_as_input + "_transposed_kv" * transposed
    for quantize in formats:
        torch.manual_seed(0)
        config = _config(quantize)
        model = smollm.SmolLM(config, mask_cache_size=0 if mask_as_input else kv_length).eval()
        if weight_scale != 1:
            with torch.no_grad():
                for parameter in model.parameters():
                    parameter.mul_(weight_scale)
        written = converter.convert_to_tflite(model, output_path=out_dir, output_name_prefix=prefix,
                                              prefill_seq_len=prefill_lengths, kv_cache_max_len=kv_length,
                                              quantize=quantize, config=config, export_config=export_config)
        final = os.path.join(out_dir, f"{prefix}_{quantize}{variant}.tflite")
        os.replace(written, final)
        print("exported", quantize, final, os.path.getsize(final), "bytes", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
