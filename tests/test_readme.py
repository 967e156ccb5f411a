"""The README's Python example runs as written (issue 35: it loaded a "model.tflite" nobody has)."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_first_python_example_runs_as_written(capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    example = blocks[0]
    assert "bundled_model()" in example
    exec(compile(example, "README.md", "exec"), {})
    printed = capsys.readouterr().out
    assert "(1, 896, 16) (1, 896, 1)" in printed


def test_the_install_lines_offer_a_users_install_beside_the_developers():
    text = README.read_text()
    assert "pip install .  " in text and 'pip install -e ".[test]"' in text
