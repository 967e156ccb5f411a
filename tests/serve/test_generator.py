"""The LLM generator behind the OpenAI routes (the continuous batcher where present, else one sequence at a time):
a sequence's greedy tokens equal `litegpu.generate`'s, from threads and asyncio alike; cancelled and closed
sequences end."""

import asyncio

import pytest

import litegpu
from litegpu.errors import ClosedError, InvalidArgumentError
from litegpu.serve.generator import make_generator

from serving import BUNDLE

pytest.importorskip("sentencepiece")
pytest.importorskip("litert_lm_builder")


@pytest.fixture(scope="module")
def model():
    from litegpu.runtime.litertlm import LitertLmBundle

    return LitertLmBundle.open(BUNDLE).compiled_model(hardware_accel=litegpu.HardwareAccelerator.CPU)


def test_tokens_equal_generate_alone_from_threads_and_asyncio(model):
    generator = make_generator(model, 4)
    try:
        prompts = [[1, 5, 9, 14], [1, 7, 7], [1, 30, 31, 32, 33, 34]]
        expected = [litegpu.generate(model, p, 6) for p in prompts]
        handles = [generator.submit(p, 6) for p in prompts]
        assert [list(h) for h in handles] == expected
        assert [(h.prompt_tokens, h.generated) for h in handles] == [(len(p), 6) for p in prompts]
        assert all(h.first_token_s is not None and h.first_token_s >= 0 for h in handles)

        async def collect():
            async def tokens(handle):
                return [t async for t in handle]
            return await asyncio.gather(*(tokens(generator.submit(p, 6)) for p in prompts))

        assert asyncio.run(collect()) == expected
    finally:
        generator.close()


def test_cancel_and_close(model):
    generator = make_generator(model, 2)
    running = generator.submit([1, 5, 9], 50)
    waiting = generator.submit([1, 5, 9], 50)
    waiting.cancel()
    waiting.cancel()  # idempotent
    assert len(list(waiting)) < 50
    running.cancel()
    list(running)  # ends (at once, or with what was generated before the cancel)
    assert generator.stats()["waiting"] == 0
    with pytest.raises(InvalidArgumentError, match="cache"):
        generator.submit([1] * 60, 10)
    generator.close()
    with pytest.raises(ClosedError):
        generator.submit([1, 5], 2)
