"""Text in and out of an LLM: prompt templates (per-role affixes, Jinja), stop strings held back while they may
still come, the cache's limits on prompts and max_tokens."""

import pytest

from litegpu.errors import RequestError
from litegpu.serve.config import Limits
from litegpu.serve.language_model import Affixes, ChatTemplate, TextStream

from serving import BUNDLE

pytest.importorskip("sentencepiece")
pytest.importorskip("litert_lm_builder")


@pytest.fixture(scope="module")
def tokenizer():
    from litegpu.runtime.litertlm import LitertLmBundle

    return LitertLmBundle.open(BUNDLE).tokenizer


def test_affix_templates():
    template = ChatTemplate(Affixes("[s]", "[/s]"), Affixes("<user> ", " "), Affixes("<model> ", " "))
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"}, {"role": "user", "content": "again"}]
    assert template.render(messages) == "[s]be brief[/s]<user> hi <model> hello <user> again <model> "


def test_jinja_templates_are_sandboxed():
    template = ChatTemplate(jinja="{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
                                  "{% if add_generation_prompt %}<model>{% endif %}")
    assert template.render([{"role": "user", "content": "hi"}]) == "<user>hi<model>"
    hostile = ChatTemplate(jinja="{{ messages.__class__.__mro__[1].__subclasses__() }}")
    with pytest.raises(RequestError, match="chat template"):
        hostile.render([{"role": "user", "content": "hi"}])


def _stream_text(tokenizer, text, stops):
    stream = TextStream(tokenizer, {2}, stops)
    pieces = [stream.add(t) for t in tokenizer.EncodeAsIds(text)]
    pieces.append(stream.finish())
    return "".join(pieces), stream.finish_reason, pieces


def test_text_stream_stops_at_a_stop_string_and_token(tokenizer):
    text = "run the model on the machine"
    assert _stream_text(tokenizer, text, [])[:2] == (text, "length")
    shown, reason, pieces = _stream_text(tokenizer, text, ["on the"])
    assert (shown, reason) == ("run the model ", "stop")
    assert not any("on" in p for p in pieces)  # never shown, even in part
    stream = TextStream(tokenizer, {2}, [])
    shown = "".join(stream.add(t) for t in tokenizer.EncodeAsIds("run")) + stream.add(2)
    assert shown == "run" and stream.finish_reason == "stop" and stream.add(5) == ""


class _Model:
    name, cache_length = "m", 64

    from litegpu.serve.language_model import LanguageModel
    new_tokens = LanguageModel.new_tokens


def test_new_tokens_within_the_cache_and_limits():
    model, limits = _Model(), Limits(max_tokens=50)
    assert model.new_tokens(10, None, limits) == 50 and model.new_tokens(20, None, limits) == 45
    assert model.new_tokens(20, 45, limits) == 45
    for prompt, asked, message in [(65, None, "takes at most 64"), (20, 46, "at most 45 new tokens"),
                                   (10, 0, "at least 1"), (10, 51, "allows at most 50"), (64, None, None)]:
        if message is None:
            assert model.new_tokens(prompt, asked, limits) == 1
            continue
        with pytest.raises(RequestError, match=message):
            model.new_tokens(prompt, asked, limits)
    with pytest.raises(RequestError, match="takes at most 16"):
        model.new_tokens(17, None, Limits(max_prompt_tokens=16))
