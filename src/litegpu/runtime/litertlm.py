"""``.litertlm`` bundles (LiteRT-LM's format): the model, its tokenizer and its LLM metadata in one file.

Read with the format's own library, ``litert-lm-builder`` (``pip install "litegpu[llm]"``): its header reader
gives the sections, their byte ranges and metadata; the TFLite section is read in place from a memory map, the
SentencePiece tokenizer section by ``sentencepiece``, the LLM metadata section (start and stop tokens, prompt
templates) by the format's protobuf.

    bundle = litegpu.LitertLmBundle.open("model.litertlm")
    for piece in bundle.chat_stream("Hello"):   # text, streamed token by token
        print(piece, end="", flush=True)

``litegpu generate FILE.litertlm --prompt "..."`` and ``litegpu chat FILE.litertlm`` do the same on the command
line.  The model runs with ``litegpu.generate_stream`` (its KV cache on the device).
"""

from __future__ import annotations

import io
import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidArgumentError, ModelFormatError

PREFILL_DECODE = "tf_lite_prefill_decode"


def _library() -> tuple[Any, Any, Any]:
    try:
        from litert_lm_builder import litertlm_core, litertlm_peek
        from litert_lm_builder.runtime.proto import llm_metadata_pb2
    except ImportError:
        raise InvalidArgumentError('.litertlm files are read with litert-lm-builder: pip install "litegpu[llm]"') \
            from None
    return litertlm_core, litertlm_peek, llm_metadata_pb2


@dataclass(frozen=True)
class Section:
    kind: str                       # "TFLiteModel", "SP_Tokenizer", "LlmMetadataProto", ...
    begin: int
    end: int
    items: dict = field(default_factory=dict)


@dataclass
class PromptTemplate:
    user_prefix: str = ""
    user_suffix: str = ""
    model_prefix: str = ""
    model_suffix: str = ""

    def turn(self, text: str) -> str:
        """A user turn, then the start of the model's."""
        return f"{self.user_prefix}{text}{self.user_suffix}{self.model_prefix}"


class LitertLmBundle:
    """An opened ``.litertlm`` file: its sections, tokenizer, metadata and compiled model."""

    def __init__(self, path: str, sections: list[Section], data: mmap.mmap, metadata: Any):
        self.path, self.sections, self._data, self.metadata = path, sections, data, metadata
        self._tokenizer: Any = None
        self._model: Any = None

    @classmethod
    def open(cls, path: str | os.PathLike) -> "LitertLmBundle":
        core, peek, llm_metadata_pb2 = _library()
        path = os.fspath(path)
        if not os.path.isfile(path):
            raise ModelFormatError(f"{path}: no such file")
        try:
            header = peek.read_litertlm_header(path, io.StringIO())
        except Exception as e:  # a wrong magic number, a truncated header: the file is not a bundle
            raise ModelFormatError(f"{path}: not a .litertlm file ({type(e).__name__}: {e})") from None
        listing = header.SectionMetadata()
        sections = []
        for i in range(listing.ObjectsLength() if listing is not None else 0):
            o = listing.Objects(i)
            items = {}
            for j in range(o.ItemsLength()):
                entry = peek.kvp_to_dict(o.Items(j))
                items[entry["key"]] = entry["value"]
            sections.append(Section(core.any_section_data_type_to_string(o.DataType()), int(o.BeginOffset()),
                                    int(o.EndOffset()), items))
        with open(path, "rb") as f:
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        for s in sections:
            if not 0 <= s.begin <= s.end <= len(data):
                raise ModelFormatError(f"{path}: section {s.kind} spans bytes {s.begin}..{s.end} of a "
                                       f"{len(data)}-byte file")
        metadata = llm_metadata_pb2.LlmMetadata()
        found = [s for s in sections if s.kind == "LlmMetadataProto"]
        if found:
            try:
                metadata.ParseFromString(bytes(data[found[0].begin:found[0].end]))
            except Exception as e:
                raise ModelFormatError(f"{path}: the LLM metadata section does not parse: {e}") from None
        return cls(path, sections, data, metadata)

    # ---- contents --------------------------------------------------------------------------
    def _section(self, kind: str, **items: str) -> Section:
        for s in self.sections:
            if s.kind == kind and all(s.items.get(k) == v for k, v in items.items()):
                return s
        raise ModelFormatError(f"{self.path}: no {kind} section{f' with {items}' if items else ''} (it has "
                               f"{[s.kind for s in self.sections]})")

    def model_bytes(self) -> memoryview:
        """The prefill/decode TFLite model, in place in the file."""
        s = self._section("TFLiteModel", model_type=PREFILL_DECODE)
        return memoryview(self._data)[s.begin:s.end]

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            try:
                import sentencepiece
            except ImportError:
                raise InvalidArgumentError('the bundle\'s tokenizer needs sentencepiece: pip install "litegpu[llm]"') \
                    from None
            s = self._section("SP_Tokenizer")
            processor = sentencepiece.SentencePieceProcessor()
            processor.LoadFromSerializedProto(bytes(self._data[s.begin:s.end]))
            self._tokenizer = processor
        return self._tokenizer

    @property
    def start_tokens(self) -> list[int]:
        return list(self.metadata.start_token.token_ids.ids) if self.metadata.HasField("start_token") else []

    @property
    def stop_tokens(self) -> list[int]:
        return [i for t in self.metadata.stop_tokens for i in t.token_ids.ids]

    @property
    def prompt_template(self) -> PromptTemplate:
        t = self.metadata.prompt_templates
        return PromptTemplate(t.user.prefix, t.user.suffix, t.model.prefix, t.model.suffix)

    def compiled_model(self, **kwargs: Any) -> Any:
        """The bundle's model as a CompiledModel (kwargs as ``CompiledModel.from_buffer``'s), made once."""
        if self._model is None:
            from .compiled_model import CompiledModel

            self._model = CompiledModel.from_buffer(self.model_bytes(), **kwargs)
        return self._model

    # ---- text ------------------------------------------------------------------------------
    def prompt_tokens(self, text: str) -> list[int]:
        return self.start_tokens + list(self.tokenizer.EncodeAsIds(self.prompt_template.turn(text)))

    def chat_stream(self, text: str, max_new_tokens: int = 64, **generate_options: Any) -> Iterator[str]:
        """The model's answer to ``text``, piece by piece as its tokens come (stops at a stop token)."""
        from .generate import generate_stream

        model = self.compiled_model()
        prompt = self.prompt_tokens(text)
        room = self._room(model, len(prompt))
        tokens: list[int] = []
        shown = ""
        stops = set(self.stop_tokens)
        for token in generate_stream(model, prompt, min(max_new_tokens, room), stop_tokens=stops,
                                     **generate_options):
            if token in stops:
                break
            tokens.append(token)
            text_so_far = self.tokenizer.DecodeIds(tokens)
            if text_so_far.startswith(shown):  # pieces can merge: show what is new
                yield text_so_far[len(shown):]
                shown = text_so_far

    def chat(self, text: str, max_new_tokens: int = 64, **generate_options: Any) -> str:
        return "".join(self.chat_stream(text, max_new_tokens, **generate_options))

    @staticmethod
    def _room(model: Any, prompt_length: int) -> int:
        """New tokens the KV cache leaves after the prompt."""
        from .generate import cache_length

        length = cache_length(model)
        if length is None:
            return 1 << 30
        if length - prompt_length + 1 < 1:
            raise InvalidArgumentError(f"the prompt takes {prompt_length} tokens; the model's cache holds {length}")
        return length - prompt_length + 1

    def close(self) -> None:
        if self._model is not None:
            self._model.close()
        self._model = None
        try:
            self._data.close()
        except BufferError:  # the compiled model still maps weights from it; the OS frees it at exit
            pass


__all__ = ["LitertLmBundle", "PromptTemplate", "Section"]
