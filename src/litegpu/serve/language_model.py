"""An LLM served through the OpenAI API: a ``.litertlm`` bundle (model, SentencePiece tokenizer, start and stop
tokens, prompt template), or a litert-torch export with a SentencePiece tokenizer file; its text in and out
(the prompt template applied to chat messages, stop strings, text streamed as tokens come) and its generator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InvalidArgumentError, ModelFormatError, RequestError


@dataclass(frozen=True)
class Affixes:
    prefix: str = ""
    suffix: str = ""


@dataclass(frozen=True)
class ChatTemplate:
    """How chat messages become the prompt: LiteRT-LM's per-role affixes, or a Jinja template (Hugging Face's
    ``chat_template`` convention: ``messages``, ``add_generation_prompt``) where the bundle has one."""

    system: Affixes = Affixes()
    user: Affixes = Affixes()
    model: Affixes = Affixes()
    jinja: str = ""

    def render(self, messages: Sequence[dict[str, str]]) -> str:
        if self.jinja:
            return self._render_jinja(messages)
        parts = []
        for m in messages:
            affixes = {"system": self.system, "user": self.user, "assistant": self.model}[m["role"]]
            parts.append(f"{affixes.prefix}{m['content']}{affixes.suffix}")
        return "".join(parts) + self.model.prefix

    def _render_jinja(self, messages: Sequence[dict[str, str]]) -> str:
        from jinja2 import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        # sandboxed, as Hugging Face renders chat templates: a bundle's template is data, not code to trust
        environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        try:
            # the start tokens are prepended as ids, so the template's own bos_token is left empty
            return environment.from_string(self.jinja).render(messages=list(messages), add_generation_prompt=True,
                                                              bos_token="", eos_token="")
        except TemplateError as e:
            raise RequestError(f"the model's chat template refused these messages: {e}") from None


class LanguageModel:
    """One LLM: tokenizer, prompt template, start and stop tokens, cache length and generator."""

    kind = "llm"

    def __init__(self, name: str, compiled: Any, tokenizer: Any, *, start_tokens: Sequence[int],
                 stop_tokens: Sequence[int], template: ChatTemplate, max_sequences: int, source: Any = None):
        from ..runtime.generate import cache_length

        self.name, self.compiled, self.tokenizer = name, compiled, tokenizer
        self.start_tokens, self.stop_tokens = list(start_tokens), list(stop_tokens)
        self.template = template
        self.source = source  # the bundle, kept open while its model maps weights from it
        self.cache_length = cache_length(compiled)
        from ..runtime.continuous import ContinuousBatcher

        # Sequences decoded together, each in its own KV-cache slot, joining and leaving between steps.
        self.generator = ContinuousBatcher(compiled, max_sequences, prefill_signature=_prefill_name(compiled))

    @classmethod
    def from_bundle(cls, name: str, path: Path, *, max_sequences: int, **compile_options: Any) -> "LanguageModel":
        from ..runtime.litertlm import LitertLmBundle

        bundle = LitertLmBundle.open(path)
        templates = bundle.metadata.prompt_templates
        template = ChatTemplate(*(Affixes(a.prefix, a.suffix) for a in (templates.system, templates.user,
                                                                           templates.model)),
                                jinja=bundle.metadata.jinja_prompt_template)
        return cls(name, bundle.compiled_model(**compile_options), bundle.tokenizer, start_tokens=bundle.start_tokens,
                   stop_tokens=bundle.stop_tokens, template=template, max_sequences=max_sequences, source=bundle)

    @classmethod
    def from_export(cls, name: str, path: Path, tokenizer_path: Path, *, max_sequences: int,
                    **compile_options: Any) -> "LanguageModel":
        """A litert-torch export (prefill and decode signatures) with a SentencePiece model: the tokenizer's
        BOS and EOS are the start and stop tokens; the messages are joined without a template."""
        import litegpu

        try:
            import sentencepiece
        except ImportError:
            raise InvalidArgumentError('an LLM\'s tokenizer needs sentencepiece: pip install "litegpu[llm]"') \
                from None
        tokenizer = sentencepiece.SentencePieceProcessor()
        try:
            tokenizer.Load(str(tokenizer_path))
        except (OSError, RuntimeError) as e:
            raise ModelFormatError(f"{tokenizer_path}: not a SentencePiece model ({e}); Hugging Face tokenizers "
                                   "are not read yet") from None
        compiled = litegpu.CompiledModel.from_file(str(path), **compile_options)
        signatures = compiled.get_signature_list()
        if "decode" not in signatures or not _prefill_name(compiled):
            raise ModelFormatError(f"{path}: an LLM served with a tokenizer needs prefill and decode signatures; "
                                   f"it has {sorted(signatures)}")
        bos, eos = tokenizer.bos_id(), tokenizer.eos_id()
        return cls(name, compiled, tokenizer, start_tokens=[bos] if bos >= 0 else [],
                   stop_tokens=[eos] if eos >= 0 else [], template=ChatTemplate(), max_sequences=max_sequences)

    # ---- text ------------------------------------------------------------------------------
    def chat_prompt(self, messages: Sequence[dict[str, str]]) -> list[int]:
        return self.start_tokens + list(self.tokenizer.EncodeAsIds(self.template.render(messages)))

    def text_prompt(self, text: str) -> list[int]:
        return self.start_tokens + list(self.tokenizer.EncodeAsIds(text))

    def check_token_ids(self, tokens: Sequence[int]) -> list[int]:
        size = self.tokenizer.GetPieceSize()
        bad = [t for t in tokens if not isinstance(t, int) or not 0 <= t < size]
        if bad:
            raise RequestError(f"prompt token ids {bad[:5]} are outside the vocabulary (0..{size - 1})")
        return list(tokens)

    def new_tokens(self, prompt_length: int, asked: int | None, limits: Any) -> int:
        """How many tokens to generate: ``asked`` (max_tokens) or the room the cache leaves, within the limits;
        a prompt or a request past them is a RequestError saying by how much."""
        bounds = [x for x in (limits.max_prompt_tokens, self.cache_length) if x is not None]
        if bounds and prompt_length > min(bounds):
            raise RequestError(f"the prompt takes {prompt_length} tokens; model {self.name!r} takes at most "
                               f"{min(bounds)}")
        room = limits.max_tokens if self.cache_length is None else min(limits.max_tokens,
                                                                       self.cache_length - prompt_length + 1)
        if asked is None:
            if room < 1:
                raise RequestError(f"the prompt takes {prompt_length} tokens and leaves no room in model "
                                   f"{self.name!r}'s cache of {self.cache_length}")
            return room
        if asked < 1:
            raise RequestError(f"max_tokens must be at least 1, got {asked}")
        if asked > limits.max_tokens:
            raise RequestError(f"max_tokens is {asked}; this server allows at most {limits.max_tokens}")
        if asked > room:
            raise RequestError(f"the prompt takes {prompt_length} tokens and max_tokens asks {asked} more; model "
                               f"{self.name!r}'s cache holds {self.cache_length} (at most {room} new tokens)")
        return asked

    def submit(self, prompt: list[int], max_new_tokens: int, sampling: dict[str, Any]) -> Any:
        try:
            return self.generator.submit(prompt, max_new_tokens, stop_tokens=self.stop_tokens, **sampling)
        except InvalidArgumentError as e:
            raise RequestError(str(e)) from None

    def text_stream(self, stop: Sequence[str]) -> "TextStream":
        return TextStream(self.tokenizer, set(self.stop_tokens), stop)

    def warm_up(self) -> None:
        """One short greedy generation: prefill and decode compiled before the server says it is ready."""
        for _ in self.generator.submit(self.text_prompt("hello"), 2):
            pass

    def close(self) -> None:
        self.generator.close()
        self.compiled.close()


def _prefill_name(compiled: Any) -> str:
    """"prefill" (one signature, or litert-torch's ``prefill_<T>`` ones), or "" without any."""
    signatures = compiled.get_signature_list()
    return "prefill" if any(k == "prefill" or k.startswith("prefill_") for k in signatures) else ""


class TextStream:
    """Tokens in, text out as it becomes final: stop tokens end it (not shown), so does a stop string (the text
    before it is shown); text that could still be the start of a stop string is held back until it cannot."""

    def __init__(self, tokenizer: Any, stop_tokens: set[int], stop_strings: Sequence[str]):
        self.tokenizer, self.stop_tokens = tokenizer, stop_tokens
        self.stop_strings = [s for s in stop_strings if s]
        self.tokens: list[int] = []
        self.text = ""          # everything shown so far
        self.finish_reason: str | None = None

    def add(self, token: int) -> str:
        """The new text ``token`` makes final ('' when none); sets ``finish_reason`` "stop" at a stop."""
        if self.finish_reason is not None:
            return ""
        if token in self.stop_tokens:
            self.finish_reason = "stop"
            return self._flush()
        self.tokens.append(token)
        return self._visible(final=False)

    def finish(self) -> str:
        """What is left to show once generation ended without a stop ("length")."""
        if self.finish_reason is None:
            self.finish_reason = "length"
        return self._flush()

    def _flush(self) -> str:
        return self._visible(final=True)

    def _visible(self, final: bool) -> str:
        decoded = self.tokenizer.DecodeIds(self.tokens)
        if not decoded.startswith(self.text):  # pieces merged differently: wait for more tokens
            return ""
        for stop in self.stop_strings:
            at = decoded.find(stop, max(len(self.text) - len(stop) + 1, 0))
            if at >= 0:
                self.finish_reason = "stop"
                return self._show(decoded[:at])
        end = len(decoded)
        if not final:
            end -= max((_overlap(decoded, s) for s in self.stop_strings), default=0)
        return self._show(decoded[:end])

    def _show(self, upto: str) -> str:
        new = upto[len(self.text):]
        self.text = upto if len(upto) > len(self.text) else self.text
        return new


def _overlap(text: str, stop: str) -> int:
    """The longest end of ``text`` that begins ``stop``."""
    for n in range(min(len(text), len(stop) - 1), 0, -1):
        if stop.startswith(text[-n:]):
            return n
    return 0


__all__ = ["Affixes", "ChatTemplate", "LanguageModel", "TextStream"]
