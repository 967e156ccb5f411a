"""A .litertlm bundle (bench/litertlm_bundle.py: the tiny int4 SmolLM, a SentencePiece tokenizer, LLM metadata)
read with litert-lm-builder, answering text through the Python API and the `generate` / `chat` commands."""

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("litert_lm_builder")
pytest.importorskip("sentencepiece")

import litegpu  # noqa: E402
from litegpu.runtime.litertlm import LitertLmBundle  # noqa: E402

BUNDLE = Path(__file__).resolve().parents[1] / "heldout" / "litert_torch" / "smollm_tiny.litertlm"


def test_the_bundle_gives_its_sections_tokenizer_and_metadata():
    bundle = LitertLmBundle.open(BUNDLE)
    assert {s.kind for s in bundle.sections} >= {"TFLiteModel", "SP_Tokenizer", "LlmMetadataProto"}
    assert bundle.start_tokens == [1] and bundle.stop_tokens == [2]
    assert bundle.prompt_template.turn("hi") == "<user> hi <model> "
    assert bundle.tokenizer.DecodeIds(bundle.tokenizer.EncodeAsIds("run the model")) == "run the model"
    assert set(bundle.compiled_model().get_signature_list()) == {"prefill_8", "prefill_32", "decode"}


def test_chat_text_is_the_decoded_greedy_tokens():
    bundle = LitertLmBundle.open(BUNDLE)
    prompt = bundle.prompt_tokens("what is litegpu")
    tokens = litegpu.generate(bundle.compiled_model(), prompt, 10, stop_tokens=bundle.stop_tokens)
    tokens = tokens[:tokens.index(2)] if 2 in tokens else tokens
    assert bundle.chat("what is litegpu", 10) == bundle.tokenizer.DecodeIds(tokens)
    assert "".join(bundle.chat_stream("what is litegpu", 10)) == bundle.chat("what is litegpu", 10)


def _cli(*args, stdin=""):
    return subprocess.run([sys.executable, "-m", "litegpu.cli.main", *args], input=stdin, capture_output=True,
                          text=True, timeout=300)


def test_generate_and_chat_from_the_command_line():
    expected = LitertLmBundle.open(BUNDLE).chat("run the model", 6)
    done = _cli("generate", str(BUNDLE), "--prompt", "run the model", "--max-tokens", "6")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == expected + "\n"
    done = _cli("chat", str(BUNDLE), "--max-tokens", "6", stdin="run the model\n\nrun the model\n")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == [expected, expected]


def test_a_file_that_is_not_a_bundle_is_one_clear_line(tmp_path):
    bad = tmp_path / "x.litertlm"
    bad.write_bytes(b"not a bundle at all")
    done = _cli("generate", str(bad), "--prompt", "hi")
    assert done.returncode == 2 and "not a .litertlm file" in done.stderr
    with pytest.raises(litegpu.errors.ModelFormatError):
        LitertLmBundle.open(bad)
