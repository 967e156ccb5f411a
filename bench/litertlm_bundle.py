"""Bundle a litert-torch LLM with a SentencePiece tokenizer into a ``.litertlm`` file with litert-lm-builder.

    python bench/litertlm_bundle.py MODEL.tflite OUT.litertlm [--corpus TEXT_FILE]

The tokenizer is trained here (128 pieces, the tiny SmolLM's vocabulary size) on ``--corpus`` (default: this
repository's README.md); the LLM metadata names start token 1, stop token 2 and a user / model prompt template.
Needs ``sentencepiece`` and ``litert-lm-builder`` (``pip install "litegpu[llm]"``).  The test fixture
``tests/heldout/litert_torch/smollm_tiny.litertlm`` was made this way from ``smollm_tiny_int4_block32.tflite``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

METADATA = '''
start_token { token_ids { ids: 1 } }
stop_tokens { token_ids { ids: 2 } }
prompt_templates { user { prefix: "<user> " suffix: " " } model { prefix: "<model> " suffix: " " } }
max_num_tokens: 64
'''


def main() -> None:
    import sentencepiece as spm
    from litert_lm_builder import litertlm_builder as lb

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--corpus", type=Path, default=Path(__file__).resolve().parents[1] / "README.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        spm.SentencePieceTrainer.train(input=str(args.corpus), model_prefix=f"{tmp}/tokenizer", vocab_size=128,
                                       model_type="bpe", pad_id=0, bos_id=1, eos_id=2, unk_id=3)
        Path(f"{tmp}/llm_metadata.textproto").write_text(METADATA)
        builder = lb.LitertLmFileBuilder()
        builder.add_system_metadata(lb.Metadata(key="Authors", value="litegpu tests", dtype=lb.DType.STRING))
        builder.add_llm_metadata(f"{tmp}/llm_metadata.textproto")
        builder.add_sentencepiece_tokenizer(f"{tmp}/tokenizer.model")
        builder.add_tflite_model(str(args.model), lb.TfLiteModelType.PREFILL_DECODE)
        with open(args.out, "wb") as f:
            builder.build(f)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
