"""Bundle a litert-torch LLM with a SentencePiece tokenizer into a ``.litertlm`` file with litert-lm-builder.

    python bench/llm/litertlm_bundle.py MODEL.tflite OUT.litertlm [--corpus TEXT_FILE]

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


def _random_words(vocab: int) -> str:
    """Seeded lines of random lowercase words, enough distinct pieces for a BPE vocabulary of ``vocab``."""
    import random

    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyz"
    lines = (" ".join("".join(rng.choice(letters) for _ in range(rng.randint(2, 8))) for _ in range(12))
             for _ in range(vocab * 4))
    return "\n".join(lines) + "\n"


def main() -> None:
    import sentencepiece as spm
    from litert_lm_builder import litertlm_builder as lb

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--corpus", type=Path, default=Path(__file__).resolve().parents[2] / "README.md")
    parser.add_argument("--vocab", type=int, default=128,
                        help="the tokenizer's pieces: the model's vocabulary (LiteRT-LM refuses a generated id past "
                             "them); past what the corpus holds, it is trained on seeded random words")
    parser.add_argument("--max-tokens", type=int, default=64, help="max_num_tokens of the LLM metadata")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = str(args.corpus)
        if args.vocab > 128:
            corpus = f"{tmp}/corpus.txt"
            Path(corpus).write_text(_random_words(args.vocab))
        spm.SentencePieceTrainer.train(input=corpus, model_prefix=f"{tmp}/tokenizer", vocab_size=args.vocab,
                                       model_type="bpe", pad_id=0, bos_id=1, eos_id=2, unk_id=3)
        Path(f"{tmp}/llm_metadata.textproto").write_text(
            METADATA.replace("max_num_tokens: 64", f"max_num_tokens: {args.max_tokens}"))
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
