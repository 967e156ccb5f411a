"""Which models a server serves, under which names: only those named at start."""

import pytest

from litegpu.errors import InvalidArgumentError
from litegpu.serve.config import Limits, ServeConfig, api_key_from, model_specs


def _touch(folder, *names):
    for name in names:
        (folder / name).write_bytes(b"")
    return folder


def test_files_names_and_folders(tmp_path):
    _touch(tmp_path, "a.tflite", "b.circle", "c.litertlm", "notes.txt")
    specs = model_specs([str(tmp_path)])
    assert [(s.name, s.path.name, s.is_bundle) for s in specs] == [("a", "a.tflite", False), ("b", "b.circle", False),
                                                                   ("c", "c.litertlm", True)]
    named = model_specs([f"first={tmp_path / 'a.tflite'}", str(tmp_path / "b.circle")])
    assert [s.name for s in named] == ["first", "b"]


@pytest.mark.parametrize("arguments, message", [
    (["missing.tflite"], "no such file or folder"),
    (["{tmp}/notes.txt"], "serve takes"),
    (["{tmp}/a.tflite", "{tmp}/a.tflite"], "two models are named ['a']"),
    (["bad name={tmp}/a.tflite"], "cannot name a model"),
    (["x={tmp}"], "a folder's models are named by their files"),
])
def test_bad_model_arguments(tmp_path, arguments, message):
    _touch(tmp_path, "a.tflite", "notes.txt")
    with pytest.raises(InvalidArgumentError, match=__import__("re").escape(message)):
        model_specs([a.format(tmp=tmp_path) for a in arguments])


def test_tokenizers_name_a_served_export(tmp_path):
    _touch(tmp_path, "llm.tflite", "tok.model", "c.litertlm")
    spec = model_specs([str(tmp_path / "llm.tflite")], [f"llm={tmp_path / 'tok.model'}"])[0]
    assert spec.tokenizer == tmp_path / "tok.model"
    with pytest.raises(InvalidArgumentError, match="MODEL_NAME=FILE"):
        model_specs([str(tmp_path / "llm.tflite")], [f"other={tmp_path / 'tok.model'}"])
    with pytest.raises(InvalidArgumentError, match="has its own"):
        model_specs([str(tmp_path / "c.litertlm")], [f"c={tmp_path / 'tok.model'}"])


def test_settings_are_checked(tmp_path, monkeypatch):
    specs = model_specs([str(_touch(tmp_path, "a.tflite") / "a.tflite")])
    assert ServeConfig(specs).host == "127.0.0.1"  # this machine only, unless told otherwise
    for bad in ({"batching": "maybe"}, {"max_batch": 0}, {"max_delay_ms": -1}, {"port": 70000}):
        with pytest.raises(InvalidArgumentError):
            ServeConfig(specs, **bad)
    with pytest.raises(InvalidArgumentError, match="max_tokens"):
        Limits(max_tokens=0)
    monkeypatch.setenv("LITEGPU_API_KEY", "from-env")
    assert api_key_from(None) == "from-env" and api_key_from("given") == "given"
    with pytest.raises(InvalidArgumentError, match="empty"):
        api_key_from(" ")
