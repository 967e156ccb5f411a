"""The fidelity sweep (``bench/fidelity/fidelity.py``, issue 33): every model the project can build or obtain, in BUILTIN mode
and through ``litegpu.Interpreter``, against the official builtin kernels on one thread, held to the rule in numbers
(float: 1e-5 of the largest output; integer: at most 1 LSB and at least 99 % exact).

The sweep itself is slow (each model is compiled in a process of its own: about an hour for all of them here); a
source that cannot be had here (no TensorFlow for the Keras zoo, no network for the wheels) is skipped with the
reason.  The fast tests check the rule and one model of each kind through the sweep's own code."""

import numpy as np
import pytest

from oracle import load_bench_module

fidelity = load_bench_module("fidelity")


@pytest.mark.slow
@pytest.mark.parametrize("source", fidelity.SOURCES)
def test_every_model_of_the_sweep_is_within_the_rule(source):
    cases = fidelity.cases((source,))
    if all(case.skipped for case in cases):
        pytest.skip("; ".join(sorted({case.skipped for case in cases})))
    outcomes = [fidelity.run_in_child(case) for case in cases]
    outside = [f"{o.name}: {o.status}: {o.detail}" for o in outcomes if o.status in ("FAIL", "error")]
    assert not outside, "\n".join(outside)


def test_the_rule_in_numbers():
    want = np.asarray([100.0, -3.0, 0.5], np.float32)
    assert fidelity.compare(want + np.float32(9e-4), want).ok            # 9e-6 of the largest
    assert not fidelity.compare(want + np.float32(2e-3), want).ok        # 2e-5 of it
    assert not fidelity.compare(np.asarray([100.0, np.nan, 0.5], np.float32), want).ok
    assert not fidelity.compare(want.astype(np.float64), want).ok        # another dtype
    q = np.zeros(1000, np.int8)
    one_off = q.copy()
    one_off[:10] = 1                                                     # 1 LSB on 1 %: within
    assert fidelity.compare(one_off, q).ok
    one_off[:11] = 1                                                     # on 1.1 %: outside
    assert not fidelity.compare(one_off, q).ok
    two_off = q.copy()
    two_off[0] = 2
    assert not fidelity.compare(two_off, q).ok


def test_subnormal_differences_count_as_zero():
    """XLA CPU (and the official XNNPACK path) flush subnormal results to zero; the builtin kernels keep them."""
    tiny = np.finfo(np.float32).tiny
    subnormal = np.asarray([-2.5637e-41, -1.8744e-41], np.float32)  # MobileViT-small's official outputs
    assert fidelity.compare(np.zeros(2, np.float32), subnormal).ok
    assert fidelity.compare(np.asarray([1.0, 0.0], np.float32), np.asarray([1.0, tiny / 2], np.float32)).ok
    assert not fidelity.compare(np.zeros(2, np.float32), np.asarray([tiny, tiny], np.float32)).ok  # normal: counts
    assert not fidelity.compare(np.asarray([1e-30], np.float32), np.asarray([2e-30], np.float32)).ok


def blaze_model(path):
    """A model without signatures (its inputs and outputs by tensor name), float16 weights behind DEQUANTIZE."""
    from litegpu.ir.builder import ModelBuilder
    from litegpu.ir.save import write_model

    rng = np.random.default_rng(0)
    b = ModelBuilder()
    x = b.input("image", (1, 8, 8, 4))
    w = b.tensor("w", (1, 5, 5, 4))
    b.op("DEQUANTIZE", [b.constant("w16", rng.uniform(-1, 1, (1, 5, 5, 4)).astype(np.float16))], [w])
    y = b.tensor("features", (1, 8, 8, 4))
    bias = b.constant("bias", rng.uniform(-1, 1, 4).astype(np.float32))
    b.op("DEPTHWISE_CONV_2D", [x, w, bias], [y], padding="SAME", stride_w=1, stride_h=1, depth_multiplier=1)
    b.output(y)
    write_model(b.build(), path)


def test_a_model_without_signatures_goes_through_the_sweep(tmp_path):
    blaze_model(tmp_path / "blaze.tflite")
    outcome = fidelity.run_case(fidelity.Case("blaze", "test", str(tmp_path / "blaze.tflite")))
    assert outcome.status == "pass", outcome.detail
    assert (outcome.calls, outcome.outputs, outcome.engines) == (1, 1, {"xla": 2})
    assert set(outcome.worst) == {"builtin", "interpreter"} and outcome.first_call_cpu_s > 0


def test_a_recorded_sequence_of_signature_calls_is_replayed():
    path = fidelity.HELDOUT / "models" / "two_signatures_float32.tflite"
    calls = fidelity.recorded_calls(path.with_suffix(".npz"))
    assert [key for key, _ in calls] == ["embed", "score", "embed"]
    outcome = fidelity.run_case(fidelity.Case(path.stem, "heldout", str(path)))
    assert outcome.status == "pass" and outcome.calls == 3, outcome.detail


def test_a_model_the_official_interpreter_cannot_run_is_skipped_with_the_reason(tmp_path):
    from litegpu.ir.builder import ModelBuilder
    from litegpu.ir.save import write_model

    b = ModelBuilder()
    x = b.input("x", (1, 4))
    y = b.tensor("y", (1, 4))
    b.op("NotAnOfficialOp", [x], [y], custom_options=b"")
    b.output(y)
    write_model(b.build(), tmp_path / "custom.tflite")
    outcome = fidelity.run_case(fidelity.Case("custom", "test", str(tmp_path / "custom.tflite")))
    assert outcome.status == "skipped" and "NotAnOfficialOp" in outcome.detail


def test_the_table_counts_each_source_and_names_the_worst():
    def outcome(name, source, status, worst=None, seconds=None, detail=""):
        return fidelity.Outcome(name, source, status, detail, worst=worst or {}, first_call_cpu_s=seconds,
                                xla_compile_wall_s=seconds and seconds / 2)

    table = fidelity.markdown([
        outcome("a_float32", "keras", "pass", {"builtin": "2.0e-07 of the largest"}, 10.0),
        outcome("a_int8", "keras", "pass", {"builtin": "1 LSB, 99.50% exact", "interpreter": "0 LSB, 100.00% exact"},
                70.0),
        outcome("b_16x8", "keras", "skipped", detail="the converter refuses it: no"),
        outcome("c", "wheels", "FAIL", {"builtin": "3.0e-05 of the largest"}, 5.0, "builtin call 0 y: 3.0e-05"),
    ])
    assert table.startswith("4 models in 2 sources: 3 run, 2 within the rule, 1 outside it, 0 errors, 1 skipped.")
    keras_row = next(line for line in table.splitlines() if line.startswith("| keras |"))
    assert keras_row == ("| keras | 3 | 2 | 2 | 1: the converter refuses it: no (b_16x8) | 2.0e-07 of the largest "
                         "(a_float32) | 1 LSB, 99.50% exact (a_int8) | 70.0 / 70.0 (a_int8) | 1 |")
    assert "| wheels | c |  |  | 3.0e-05 of the largest |  | 5.0 (2.5) | FAIL: builtin call 0 y: 3.0e-05 |" in table


def test_the_torch_source_holds_both_litert_torch_zoos(tmp_path, monkeypatch):
    (tmp_path / "litert_torch").mkdir()
    for path in (tmp_path / "torch_resnet18.tflite", tmp_path / "litert_torch" / "deit_tiny.tflite",
                 tmp_path / "keras_model.tflite"):
        path.write_bytes(b"")
    monkeypatch.setattr(fidelity, "TORCH_ZOO", tmp_path)
    assert [(c.name, c.skipped) for c in fidelity.cases(("torch",))] == [("torch_resnet18", None), ("deit_tiny", None)]
    monkeypatch.setattr(fidelity, "TORCH_ZOO", tmp_path / "absent")
    assert "not built" in fidelity.cases(("torch",))[0].skipped


def test_a_rerun_replaces_its_models_rows_and_keeps_the_others():
    rows = [fidelity.Outcome(name, source, "FAIL") for source, name in (("keras", "a"), ("torch", "b"), ("keras", "c"))]
    rerun = [fidelity.Outcome("b", "torch", "pass"), fidelity.Outcome("d", "keras", "pass")]
    merged = fidelity.updated(rows, rerun)
    assert [(o.source, o.name, o.status) for o in merged] == [
        ("keras", "a", "FAIL"), ("torch", "b", "pass"), ("keras", "c", "FAIL"), ("keras", "d", "pass")]
