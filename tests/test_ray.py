"""litegpu.ray.Predictor in a Ray Data pipeline on a local Ray instance (2 CPUs, 2 actors), 1,000 inputs,
every output checked against single runs; actors share one compile cache."""

import numpy as np
import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")

import litegpu  # noqa: E402
import litegpu.ray  # noqa: E402
from litegpu.ir.builder import ModelBuilder  # noqa: E402
from litegpu.ir.save import write_model  # noqa: E402


def small_model(path):
    rng = np.random.default_rng(0)
    b = ModelBuilder()
    x = b.input("features", (1, 16))
    w = b.constant("w", rng.normal(size=(8, 16)).astype(np.float32))
    bias = b.constant("b", rng.normal(size=(8,)).astype(np.float32))
    y = b.tensor("scores", (1, 8))
    b.op("FULLY_CONNECTED", [x, w, bias], [y], fused_activation_function="RELU")
    b.output(y)
    b.signature("serving_default", inputs={"features": x}, outputs={"scores": y})
    write_model(b.build(), path)
    return path


@pytest.mark.slow
def test_ray_data_pipeline_with_two_actors_matches_single_runs(tmp_path):
    path = str(small_model(tmp_path / "m.tflite"))
    rows = np.random.default_rng(1).normal(size=(1000, 16)).astype(np.float32)
    ray.init(num_cpus=2, include_dashboard=False, ignore_reinit_error=True, log_to_driver=False)
    try:
        dataset = ray.data.from_items([{"id": i, "features": rows[i]} for i in range(1000)])
        out = dataset.map_batches(litegpu.ray.Predictor, fn_constructor_kwargs={
            "model_path": path, "accelerator": "cpu", "cache_dir": str(tmp_path / "cache")},
            batch_size=100, concurrency=2, num_cpus=1)
        got = {int(r["id"]): np.asarray(r["scores"]) for r in out.take_all()}
    finally:
        ray.shutdown()
    model = litegpu.CompiledModel.from_file(path)
    assert sorted(got) == list(range(1000))
    for i in range(1000):
        np.testing.assert_allclose(got[i].reshape(1, 8), model.run({"features": rows[i:i + 1]})["scores"],
                                   rtol=1e-6, atol=1e-6)
    assert any((tmp_path / "cache").glob("*.bin"))  # the actors filled one shared cache


def test_predictor_maps_columns_and_passes_others_through(tmp_path):
    path = str(small_model(tmp_path / "m.tflite"))
    predictor = litegpu.ray.Predictor(path, columns={"x": "features"}, accelerator="cpu",
                                      cache_dir=str(tmp_path / "cache"))
    batch = {"x": np.ones((3, 16), np.float32), "id": np.array([7, 8, 9])}
    out = predictor(batch)
    assert list(out["id"]) == [7, 8, 9] and out["scores"].shape[0] == 3 and "x" not in out
    with pytest.raises(litegpu.errors.InvalidArgumentError, match="features"):
        predictor({"y": np.ones((3, 16), np.float32)})
    with pytest.raises(litegpu.errors.InvalidArgumentError, match="not inputs"):
        litegpu.ray.Predictor(path, columns={"x": "nope"}, accelerator="cpu", cache_dir=str(tmp_path / "cache"))
