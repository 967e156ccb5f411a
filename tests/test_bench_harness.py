"""bench/: the scripts grouped in area folders, found by name, and the shared harness (bench/harness.py) they time,
name the machine and print tables with."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from oracle import load_bench_module

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))
import harness  # noqa: E402


def scripts() -> list[Path]:
    return sorted(p for folder in harness.area_folders() for p in folder.glob("*.py"))


def test_every_script_lives_in_an_area_folder_under_a_name_used_once():
    assert [p.name for p in BENCH.glob("*.py")] == ["harness.py"]
    names = [p.stem for p in scripts()]
    assert len(names) > 30 and len(set(names)) == len(names), sorted(n for n in names if names.count(n) > 1)
    assert {"cpu", "gpu", "llm", "memory", "models", "serving", "startup", "tools"} <= {
        f.name for f in harness.area_folders()}


def test_load_bench_module_finds_a_script_in_its_folder_and_refuses_a_name_it_does_not_know():
    dm = load_bench_module("decoder_model")
    assert Path(dm.__file__).parent.name == "models" and hasattr(dm, "DecoderConfig")
    with pytest.raises(LookupError, match="no_such_script"):
        load_bench_module("no_such_script")


def test_importing_the_harness_makes_every_area_folder_importable():
    for folder in harness.area_folders():
        assert str(folder) in sys.path


def test_every_bench_path_the_repository_names_exists():
    """README, BENCHMARKS.md, the tests' and the sources' comments name scripts by path: a moved script leaves none
    pointing at nothing."""
    named = re.compile(r"(?<![\w/.-])bench/[\w./-]+\.(?:py|sh)\b")
    texts = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *(p for top in ("src", "tests", "bench")
                                                           for p in (ROOT / top).rglob("*")
                                                           if p.suffix in (".py", ".md", ".sh")
                                                           and not any(part.startswith(".") for part in p.parts))]
    missing = {(str(path.relative_to(ROOT)), found) for path in texts if path.is_file()
               for found in named.findall(path.read_text(errors="replace")) if not (ROOT / found).exists()}
    assert not missing, sorted(missing)


@pytest.mark.parametrize(("order", "expected"), [
    ("fixed", [["a", "b", "c"]] * 4),
    ("rotate", [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]),
])
def test_rounds_give_each_order(order, expected):
    assert list(harness.rounds("abc", 4, order)) == expected


def test_shuffled_rounds_are_seeded_permutations():
    first = list(harness.rounds("abcd", 20, "shuffle", seed=3))
    assert first == list(harness.rounds("abcd", 20, "shuffle", seed=3))
    assert all(sorted(r) == list("abcd") for r in first) and len({tuple(r) for r in first}) > 1
    with pytest.raises(ValueError, match="rotate"):
        next(harness.rounds("ab", 1, "random"))


class FakeClock:
    """A clock each runner advances by its own cost, so that the measured times are known exactly."""

    def __init__(self):
        self.now = 0.0
        self.calls: list[str] = []

    def __call__(self) -> float:
        return self.now

    def runner(self, name: str, cost: float):
        def run():
            self.calls.append(name)
            self.now += cost
        return run


def test_alternate_times_each_turn_of_calls_in_the_rounds_order_after_the_warm_up():
    clock = FakeClock()
    times = harness.alternate({"a": clock.runner("a", 2.0), "b": clock.runner("b", 5.0)}, 3, order="rotate",
                              calls=2, warmup=1, clock=clock)
    assert times == {"a": [2.0] * 3, "b": [5.0] * 3}
    assert clock.calls == ["a", "b"] + ["a", "a", "b", "b", "b", "b", "a", "a", "a", "a", "b", "b"]


def test_alternate_with_seconds_stops_at_the_deadline_but_not_before_min_rounds():
    runners = {"a": lambda: None, "b": lambda: None}
    times = harness.alternate(runners, 1000, seconds=0.0, min_rounds=3)
    assert len(times["a"]) == len(times["b"]) == 3
    assert len(harness.alternate(runners, 7, seconds=60.0)["a"]) == 7
    assert len(harness.timed(lambda: None, 4)) == 4


def test_statistics_in_milliseconds():
    assert harness.median_ms([0.001, 0.003, 0.002]) == pytest.approx(2.0)
    assert harness.percentile_ms([0.0, 0.010], 50) == pytest.approx(5.0)
    assert harness.geomean([2.0, 8.0]) == pytest.approx(4.0) and np.isnan(harness.geomean([]))


def test_table_head_and_rows():
    assert harness.table_head(["model", "ms", "plan"], "lrl") == "| model | ms | plan |\n|---|---:|---|"
    assert harness.table_row(["m", 1.5]) == "| m | 1.5 |"
    with pytest.raises(ValueError, match="2 columns"):
        harness.table_head(["a", "b"], "l")


def test_the_machine_is_named_with_cores_load_and_versions():
    info = harness.machine("numpy")
    assert info["cpus"] >= 1 and len(info["load_average"]) == 3 and info["numpy"] == np.__version__
    assert info["cpu"] and harness.version("no-such-package-here") == "not installed"
    line = harness.machine_line("numpy")
    assert line.startswith(f"Machine: {info['machine']} ") and f"{info['cpus']} cores, load " in line
    assert line.endswith(f", numpy {np.__version__}")


def test_parse_args_prints_the_machine_line_first(capsys):
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    assert harness.parse_args(parser, ["--runs", "5"]).runs == 5
    assert capsys.readouterr().out.startswith("Machine: ")


def test_random_inputs_are_seeded_and_within_each_dtype():
    details = [{"shape": [2, 3], "dtype": np.float32}, {"shape": [50], "dtype": np.uint8},
               {"shape": [4], "dtype": np.int32}, {"shape": [2], "dtype": np.bool_}]
    x = harness.random_inputs(details, seed=1)
    assert all(a.shape == tuple(d["shape"]) and a.dtype == d["dtype"] for a, d in zip(x, details))
    assert np.abs(x[0]).max() < 1 and x[1].min() >= 0 and x[1].max() < 100 and not x[3].any()
    assert all(np.array_equal(a, b) for a, b in zip(x, harness.random_inputs(details, seed=1)))
    assert harness.random_inputs(details[2:3], int_low=0)[0].min() >= 0


def test_write_json_replaces_the_file_whole(tmp_path):
    path = tmp_path / "out.json"
    path.write_text("old")
    harness.write_json(path, {"a": [1, 2]})
    assert json.loads(path.read_text()) == {"a": [1, 2]} and [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_the_official_runner_reads_every_output_back(tmp_path):
    pytest.importorskip("ai_edge_litert.interpreter")
    from litegpu.ir.builder import ModelBuilder
    from litegpu.ir.save import write_model

    b = ModelBuilder()
    x = b.input("x", (1, 4))
    y = b.tensor("y", (1, 4))
    b.op("ADD", [x, x], [y])
    b.output(y)
    path = tmp_path / "add.tflite"
    write_model(b.build(), path)
    inputs = harness.random_inputs([{"shape": [1, 4], "dtype": np.float32}])
    for builtin in (False, True):
        run, interpreter = harness.official_runner(path, inputs, 1, builtin=builtin)
        np.testing.assert_allclose(run()[0], 2 * inputs[0])
        np.testing.assert_allclose(harness.invoker(interpreter, inputs)()[0], 2 * inputs[0])


def test_the_zoos_are_found_where_litegpu_zoo_dir_says(tmp_path):
    """Built zoos outlive the worktree only outside it: LITEGPU_ZOO_DIR moves every zoo, each in a folder of its own."""
    import os
    import subprocess

    env = {**os.environ, "LITEGPU_ZOO_DIR": str(tmp_path)}
    printed = subprocess.run([sys.executable, "-c", "import harness; print(harness.ZOO_CACHE, harness.KERAS_ZOO, "
                              "harness.LITERT_TORCH_ZOO)"], cwd=BENCH, env=env, capture_output=True, text=True,
                             check=True).stdout.split()
    assert printed == [str(tmp_path), str(tmp_path / "keras"), str(tmp_path / "litert_torch")]


def test_child_row_reads_the_last_row_a_child_printed_and_says_why_there_is_none():
    row = harness.child_row([sys.executable, "-c", "print('ROW {\"a\": 1}'); print('ROW {\"a\": 2}')"], "m", 60)
    assert row == {"a": 2}
    failed = harness.child_row([sys.executable, "-c", "raise SystemExit('no such model')"], "m", 60)
    assert failed == {"model": "m", "error": "no such model"}
    slow = harness.child_row([sys.executable, "-c", "import time; time.sleep(30)"], "m", 0.5)
    assert slow["model"] == "m" and "timed out" in slow["error"]
