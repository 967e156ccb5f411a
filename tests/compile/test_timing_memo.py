"""The planner's memo of timed engine choices (``compile.timing_memo``): any two engines, keyed by their names."""

from __future__ import annotations

from litegpu.backends.cache import CompileCache
from litegpu.backends.engine import Engine, EngineSettings
from litegpu.ir import Model
from litegpu.ops import Target


class _Timed(Engine):
    """An engine whose timing verdict is fixed, counting how often it is timed."""

    target = Target.REFERENCE

    def __init__(self, name: str, verdict: str | None, cache=None, threads: int = 1):
        self.name, self.verdict, self.cache, self.timings = name, verdict, cache, 0
        self.settings = EngineSettings(num_threads=threads)

    def available(self):
        return True

    def unsupported(self, model, subgraph, op_indices):
        return {}

    def compile(self, model, op_range, settings, cache=None, cache_key=None):
        raise NotImplementedError

    def compile_cache(self):
        return self.cache, {"model_token": "m"}

    def version(self):
        return "1.0"

    def faster_than(self, model, op_ranges, other, scope):
        self.timings += 1
        return self.verdict


def _model() -> Model:
    return Model(subgraphs=(), source="m.tflite")


def test_a_verdict_is_timed_once_and_kept_for_the_same_engines(tmp_path):
    cache = CompileCache(tmp_path)
    first, other = _Timed("npu", "npu", cache), _Timed("cpu2", None)
    from litegpu.compile.timing_memo import TimingMemo

    memo = TimingMemo(first, other)
    assert memo.cached(_model(), "whole model") is None
    assert memo.faster(_model(), [], "whole model") == "npu"
    assert TimingMemo(_Timed("npu", "cpu2", cache), other).faster(_model(), [], "whole model") == "npu"
    assert first.timings == 1
    # another engine, another thread count or another scope: not the same verdict
    assert TimingMemo(_Timed("npu", None, cache), _Timed("gpu2", None)).cached(_model(), "whole model") is None
    assert TimingMemo(_Timed("npu", None, cache, threads=2), other).cached(_model(), "whole model") is None
    assert memo.cached(_model(), "subgraph 0 ops #0..#3") is None


def test_an_engine_with_no_opinion_leaves_the_other_engine_and_no_cache_keeps_nothing():
    from litegpu.compile.timing_memo import TimingMemo

    first = _Timed("npu", None)
    memo = TimingMemo(first, _Timed("cpu2", None))
    assert memo.faster(_model(), [], "whole model") == "cpu2"
    memo.remember(_model(), "whole model", "npu")
    assert memo.cached(_model(), "whole model") is None
    assert memo.faster(_model(), [], "whole model") == "cpu2" and first.timings == 2


def test_a_verdict_for_any_model_of_the_same_ops_is_found_from_another_model(tmp_path):
    from litegpu.compile.timing_memo import TimingMemo

    cache = CompileCache(tmp_path)
    memo = TimingMemo(_Timed("npu", None, cache), _Timed("cpu2", None))
    memo.remember(_model(), "structure abc", "cpu2", any_model=True)
    other_model = _Timed("npu", None, cache)
    other_model.compile_cache = lambda: (cache, {"model_token": "another"})
    assert TimingMemo(other_model, _Timed("cpu2", None)).cached(_model(), "structure abc", any_model=True) == "cpu2"
    assert TimingMemo(other_model, _Timed("cpu2", None)).cached(_model(), "structure abc") is None
