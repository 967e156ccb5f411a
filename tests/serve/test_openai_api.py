"""The OpenAI API through the official `openai` package on the tiny SmolLM bundle: chat, streaming and completions
give the text of `litegpu.generate`'s greedy tokens; usage counts; stop strings; bad requests are OpenAI's error
objects with a 4xx; a client that goes away mid-stream frees its sequence."""

import json
import time

import httpx
import pytest

import litegpu

openai = pytest.importorskip("openai")

QUESTION = "what is litegpu"


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def chat_model(server):
    return server.service.models["chat"]


def _greedy_text(model, prompt, count):
    tokens = litegpu.generate(model.compiled, prompt, count, stop_tokens=model.stop_tokens)
    if tokens and tokens[-1] in model.stop_tokens:
        tokens = tokens[:-1]
    return model.tokenizer.DecodeIds(tokens), len(tokens)


def test_chat_gives_the_greedy_tokens_text_and_usage(client, chat_model):
    prompt = chat_model.chat_prompt([{"role": "user", "content": QUESTION}])
    assert prompt == chat_model.start_tokens + chat_model.tokenizer.EncodeAsIds(f"<user> {QUESTION} <model> ")
    expected, _ = _greedy_text(chat_model, prompt, 12)
    answer = client.chat.completions.create(model="chat", messages=[{"role": "user", "content": QUESTION}],
                                            max_tokens=12)
    assert answer.choices[0].message.content == expected
    assert answer.choices[0].message.role == "assistant"
    assert answer.usage.prompt_tokens == len(prompt)
    assert answer.usage.completion_tokens == 12 and answer.choices[0].finish_reason == "length"
    assert answer.usage.total_tokens == len(prompt) + 12


def test_streamed_chat_is_the_same_text_and_ends_with_done(client, server):
    whole = client.chat.completions.create(model="chat", messages=[{"role": "user", "content": QUESTION}],
                                           max_tokens=12).choices[0].message.content
    chunks = list(client.chat.completions.create(model="chat", messages=[{"role": "user", "content": QUESTION}],
                                                 max_tokens=12, stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == whole
    assert chunks[-1].usage.completion_tokens == 12 and chunks[-2].choices[0].finish_reason == "length"
    with httpx.stream("POST", server.url + "/v1/chat/completions", timeout=60,
                      json={"model": "chat", "messages": [{"role": "user", "content": QUESTION}], "max_tokens": 4,
                            "stream": True}) as response:
        lines = [line for line in response.iter_lines() if line]
    assert response.headers["content-type"].startswith("text/event-stream")
    assert lines[-1] == "data: [DONE]" and all(line.startswith("data: ") for line in lines)


def test_completions_answer_the_raw_prompt(client, chat_model):
    prompt = chat_model.text_prompt("the model")
    expected, _ = _greedy_text(chat_model, prompt, 8)
    answer = client.completions.create(model="chat", prompt="the model", max_tokens=8)
    assert answer.choices[0].text == expected and answer.usage.prompt_tokens == len(prompt)
    streamed = client.completions.create(model="chat", prompt="the model", max_tokens=8, stream=True)
    assert "".join(c.choices[0].text for c in streamed) == expected
    by_ids = client.completions.create(model="chat", prompt=chat_model.tokenizer.EncodeAsIds("the model"),
                                       max_tokens=8)
    assert by_ids.choices[0].text == expected


def test_a_stop_string_ends_the_answer_before_it(client):
    whole = client.completions.create(model="chat", prompt="the model", max_tokens=12).choices[0].text
    cut = whole[3:5]
    assert cut, whole
    stopped = client.completions.create(model="chat", prompt="the model", max_tokens=12, stop=[cut])
    assert stopped.choices[0].text == whole[:whole.index(cut)]
    assert stopped.choices[0].finish_reason == "stop"
    streamed = client.completions.create(model="chat", prompt="the model", max_tokens=12, stop=cut, stream=True)
    assert "".join(c.choices[0].text for c in streamed) == whole[:whole.index(cut)]


def test_a_seeded_sample_repeats(client):
    def sample():
        return client.chat.completions.create(model="chat", messages=[{"role": "user", "content": QUESTION}],
                                              max_tokens=8, temperature=0.9, seed=7, extra_body={"top_k": 20},
                                              ).choices[0].message.content
    assert sample() == sample()


def test_a_tiny_top_p_keeps_only_the_likeliest_token_so_sampling_gives_the_greedy_answer(client):
    def answer(**sampling):
        return client.chat.completions.create(model="chat", messages=[{"role": "user", "content": QUESTION}],
                                              max_tokens=8, seed=3, **sampling).choices[0].message.content
    assert answer(temperature=1.0, top_p=1e-6) == answer(temperature=0)


def test_models_lists_the_llms(client):
    assert [m.id for m in client.models.list()] == ["chat"]
    assert client.models.retrieve("chat").id == "chat"


@pytest.mark.parametrize("settings, error, message", [
    ({"max_tokens": -5}, "BadRequestError", "max_tokens must be at least 1"),
    ({"max_tokens": 100}, "BadRequestError", "cache holds 64"),
    ({"messages": [{"role": "user", "content": "word " * 200}]}, "BadRequestError", "takes at most 64"),
    ({"model": "nope"}, "NotFoundError", "no model 'nope'"),
    ({"model": "two_signatures_float32"}, "BadRequestError", "is not an LLM"),
    ({"temperature": -1}, "BadRequestError", "temperature"),
    ({"n": 2}, "BadRequestError", "n must be 1"),
    ({"messages": []}, "BadRequestError", "messages"),
])
def test_a_bad_request_is_an_openai_error(client, settings, error, message):
    request = {"model": "chat", "messages": [{"role": "user", "content": QUESTION}], "max_tokens": 4, **settings}
    with pytest.raises(getattr(openai, error), match=message):
        client.chat.completions.create(**request)


def test_malformed_json_is_an_openai_error_object(server):
    response = httpx.post(server.url + "/v1/chat/completions", content=b'{"model": ', timeout=30)
    assert response.status_code == 400
    error = response.json()["error"]
    assert "not valid JSON" in error["message"] and error["type"] == "invalid_request_error"


def test_a_client_that_disconnects_mid_stream_frees_its_sequence(server, chat_model, client):
    generator = chat_model.generator
    with httpx.stream("POST", server.url + "/v1/completions", timeout=60,
                      json={"model": "chat", "prompt": "the model", "max_tokens": 40, "stream": True}) as response:
        first = next(line for line in response.iter_lines() if line)
        assert json.loads(first.removeprefix("data: "))["object"] == "text_completion"
    deadline = time.monotonic() + 30
    while generator.stats()["active"] or generator.stats()["waiting"]:
        assert time.monotonic() < deadline, generator.stats()
        time.sleep(0.02)
    # and the next request is answered
    assert client.completions.create(model="chat", prompt="the model", max_tokens=3).usage.completion_tokens == 3
