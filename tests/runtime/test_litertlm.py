"""A .litertlm bundle (bench/llm/litertlm_bundle.py: the tiny int4 SmolLM, a SentencePiece tokenizer, LLM metadata)
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


@pytest.fixture(scope="module")
def transposed_bundle(tmp_path_factory) -> Path:
    """A bundle of the export LiteRT-LM itself runs: litert-torch's transposed KV-cache layout."""
    out = tmp_path_factory.mktemp("bundle") / "transposed.litertlm"
    done = subprocess.run([sys.executable, str(Path(__file__).resolve().parents[2] / "bench" / "llm" / "litertlm_bundle.py"),
                           str(BUNDLE.parent / "smollm_tiny_transposed_kv.tflite"), str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def test_a_transposed_kv_bundle_knows_its_cache_length(transposed_bundle):
    bundle = LitertLmBundle.open(transposed_bundle)
    assert litegpu.runtime.generate.cache_length(bundle.compiled_model()) == 64
    assert bundle.chat("what is litegpu", 10)  # the room left after the prompt comes from the T axis


@pytest.mark.slow
def test_chat_gives_the_text_litert_lm_gives(transposed_bundle):
    """LiteRT-LM (litert-lm-api, the official LLM runtime) on the same bundle, greedy, prompt template applied."""
    litert_lm = pytest.importorskip("litert_lm")
    prompt = "what is litegpu"
    with litert_lm.Engine(str(transposed_bundle), backend=litert_lm.interfaces.CPU(thread_count=1)) as engine:
        session = engine.create_session(apply_prompt_template=True, max_output_tokens=12,
                                        sampler_config=litert_lm.SamplerConfig(top_k=1))
        session.run_prefill([prompt])
        official = session.run_decode().texts[0]
        session.close()
    assert official and LitertLmBundle.open(transposed_bundle).chat(prompt, 12) == official


def test_generate_runs_the_model_on_the_accelerator_asked_for(monkeypatch, capsys):
    from litegpu.cli.main import main

    asked = []
    real = LitertLmBundle.compiled_model

    def compiled(self, **kwargs):
        asked.append(kwargs.get("hardware_accel"))
        return real(self, **kwargs)

    monkeypatch.setattr(LitertLmBundle, "compiled_model", compiled)
    assert main(["generate", str(BUNDLE), "--prompt", "run the model", "--max-tokens", "2",
                 "--accelerator", "gpu,cpu"]) == 0
    assert asked[0] == litegpu.HardwareAccelerator.GPU | litegpu.HardwareAccelerator.CPU
    assert capsys.readouterr().out.strip()
