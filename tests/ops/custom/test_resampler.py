import numpy as np
import pytest

from litegpu.backends import ReferenceBackend
from litegpu.errors import LiteGpuError
from litegpu.ir import read_model
from litegpu.ir.builder import ModelBuilder
from litegpu.ir.save import to_bytes
from oracle import assert_close


def expected_resample(data, warp):
    """Point by point, as TensorFlow Addons' CPU kernel writes it."""
    n, h, w, c = data.shape
    flat = warp.reshape(n, -1, 2)
    out = np.zeros((n, flat.shape[1], c), np.float64)

    def pixel(b, yy, xx):
        return data[b, yy, xx].astype(np.float64) if 0 <= xx < w and 0 <= yy < h else np.zeros(c)

    for b in range(n):
        for p, (x, y) in enumerate(flat[b].astype(np.float64)):
            if not (x > -1 and y > -1 and x < w and y < h):
                continue
            x0, y0 = int(np.floor(x)), int(np.floor(y))
            dx, dy = x0 + 1 - x, y0 + 1 - y
            out[b, p] = (dy * (dx * pixel(b, y0, x0) + (1 - dx) * pixel(b, y0, x0 + 1))
                         + (1 - dy) * (dx * pixel(b, y0 + 1, x0) + (1 - dx) * pixel(b, y0 + 1, x0 + 1)))
    return out.reshape(warp.shape[:-1] + (c,)).astype(np.float32)


def resampler_model(data_shape, warp_shape):
    b = ModelBuilder()
    data = b.input("data", data_shape)
    warp = b.input("warp", warp_shape)
    y = b.tensor("y", warp_shape[:-1] + data_shape[-1:])
    b.op("Resampler", [data, warp], [y])
    b.output(y)
    return read_model(to_bytes(b.build()))


def run_both(model, inputs):
    from litegpu.backends.xla.backend import XlaBackend

    return {"reference": ReferenceBackend(model).run(inputs)[0], "xla": np.asarray(XlaBackend(model).run(inputs)[0])}


@pytest.mark.parametrize("data_shape, warp_shape", [
    ((1, 4, 5, 3), (1, 6, 7, 2)),
    ((2, 3, 3, 1), (2, 10, 2)),      # warp of any rank: a list of points per image
    ((1, 1, 1, 2), (1, 3, 3, 2)),    # a one-pixel image
    ((2, 5, 4, 4), (2, 2, 3, 4, 2)),
])
def test_resampler_random_points(data_shape, warp_shape):
    rng = np.random.default_rng(0)
    data = rng.standard_normal(data_shape).astype(np.float32)
    h, w = data_shape[1:3]
    # spans the image and a margin of two pixels around it, where corners fall outside
    xy = rng.uniform(-2, 2, warp_shape) + np.array([w / 2, h / 2]) * rng.uniform(0, 2, warp_shape)
    warp = xy.astype(np.float32)
    want = expected_resample(data, warp)
    for name, got in run_both(resampler_model(data_shape, warp_shape), [data, warp]).items():
        assert_close(got, want, 1e-5, 1e-5, name)


def test_resampler_integer_points_and_borders():
    data = np.arange(12, dtype=np.float32).reshape(1, 3, 4, 1)
    warp = np.array([[[0, 0], [3, 2], [1.5, 1], [3.5, 0], [-0.5, 1], [4, 1], [-1, -1], [1, 2.5]]], np.float32)
    want = np.array([[[0], [11], [5.5], [1.5], [2], [0], [0], [4.5]]], np.float32)
    assert_close(expected_resample(data, warp), want, 0, 1e-6, "numpy expectation")
    for name, got in run_both(resampler_model((1, 3, 4, 1), (1, 8, 2)), [data, warp]).items():
        assert_close(got, want, 1e-6, 1e-6, name)


def test_resampler_rejects_batch_mismatch():
    model = resampler_model((2, 3, 3, 1), (1, 4, 2))
    with pytest.raises(LiteGpuError, match="Resampler"):
        ReferenceBackend(model).run([np.zeros((2, 3, 3, 1), np.float32), np.zeros((1, 4, 2), np.float32)])
