"""MediaPipe custom ops: the official package cannot run them, so each is checked
against an independent loop-by-loop port of MediaPipe's C++ kernel, and
Convolution2DTransposeBias also against the official TRANSPOSE_CONV (+ bias)."""

import math
import struct

import numpy as np
import pytest
from flatbuffers import flexbuffers

from litegpu.errors import LiteGpuError, ModelFormatError
from litegpu.ir import read_model
from litegpu.ir.builder import ModelBuilder
from litegpu.ir.save import to_bytes
from oracle import assert_close, random_input, run_official, run_ours

SAME, VALID = 1, 2
LOWEST = np.finfo(np.float32).min


def both_backends(model, inputs):
    """Our reference and XLA outputs, after checking they agree with each other."""
    model = read_model(to_bytes(model))
    ref = run_ours(model, inputs, xla=False)
    xla = run_ours(model, inputs, xla=True)
    for i, (r, x) in enumerate(zip(ref, xla)):
        assert_close(x, r, 1e-5, 1e-5, f"xla output {i} vs reference")
    return ref


def one_custom_op(name, inputs, outputs, options, version=1):
    """inputs/outputs: lists of (name, shape); options: raw bytes."""
    b = ModelBuilder()
    ins = [b.input(n, s) for n, s in inputs]
    outs = [b.tensor(n, s) for n, s in outputs]
    b.op(name, ins, outs, custom_options=options, version=version)
    b.output(*outs)
    return b.build()


# --------------------------------------------------------------------------- Convolution2DTransposeBias

def mediapipe_out_size(size, k, s, padding):
    total = max(0, k - (size - 1) % s - 1) if padding == SAME else 0
    return s * (size - 1) + k - total


@pytest.mark.parametrize("padding", [SAME, VALID])
@pytest.mark.parametrize("stride", [(1, 1), (2, 2), (3, 2)])
@pytest.mark.parametrize("kernel", [(2, 2), (3, 3), (4, 1)])
@pytest.mark.parametrize("size", [(5, 5), (4, 7), (1, 1)])
def test_transpose_conv_bias_matches_official_transpose_conv(padding, stride, kernel, size):
    rng = np.random.default_rng(3)
    (h, w), (kh, kw), (sh, sw) = size, kernel, stride
    weights = rng.standard_normal((4, kh, kw, 3)).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    out_shape = (2, mediapipe_out_size(h, kh, sh, padding), mediapipe_out_size(w, kw, sw, padding), 4)
    x = random_input((2, h, w, 3), seed=4)

    # the official builtin, fed the output shape MediaPipe's kernel computes
    b = ModelBuilder()
    xi = b.input("x", x.shape)
    shape = b.constant("shape", np.array(out_shape, np.int32))
    wi, bi = b.constant("w", weights), b.constant("b", bias)
    y = b.tensor("y", out_shape)
    b.op("TRANSPOSE_CONV", [shape, wi, xi, bi], [y], padding="SAME" if padding == SAME else "VALID",
         stride_w=sw, stride_h=sh, version=3)
    b.output(y)
    expected = run_official(to_bytes(b.build()), [x])[0]

    b = ModelBuilder()
    xi = b.input("x", x.shape)
    wi, bi = b.constant("w", weights), b.constant("b", bias)
    y = b.tensor("y", out_shape)
    b.op("Convolution2DTransposeBias", [xi, wi, bi], [y], custom_options=struct.pack("<3i", padding, sw, sh))
    b.output(y)
    got = both_backends(b.build(), [x])[0]
    assert_close(got, expected, 1e-5, 1e-5, "Convolution2DTransposeBias vs TRANSPOSE_CONV")


def test_transpose_conv_bias_accepts_longer_struct_and_rejects_short_one():
    weights = np.random.default_rng(0).standard_normal((2, 2, 2, 2)).astype(np.float32)

    def model(options):
        b = ModelBuilder()
        x = b.input("x", (1, 3, 3, 2))
        w = b.constant("w", weights)
        bias = b.constant("b", np.ones(2, np.float32))
        y = b.tensor("y", (1, 6, 6, 2))
        b.op("Convolution2DTransposeBias", [x, w, bias], [y], custom_options=options)
        b.output(y)
        return read_model(to_bytes(b.build()))

    x = random_input((1, 3, 3, 2))
    # TfLiteTransposeConvParams grew an activation field; the kernel reads only the first three
    long = run_ours(model(struct.pack("<5i", SAME, 2, 2, 0, 0)), [x], xla=False)[0]
    short = run_ours(model(struct.pack("<3i", SAME, 2, 2)), [x], xla=False)[0]
    np.testing.assert_array_equal(long, short)
    for bad in (struct.pack("<2i", SAME, 2), None, struct.pack("<3i", 7, 2, 2), struct.pack("<3i", SAME, 0, 2)):
        with pytest.raises(ModelFormatError, match=r"Convolution2DTransposeBias \(#0\)"):
            run_ours(model(bad), [x], xla=False)


# --------------------------------------------------------------------------- MaxPoolingWithArgmax2D

def pool_struct(padding, stride, filt, activation=0):
    (sh, sw), (fh, fw) = stride, filt
    # TfLitePoolParams, with its trailing computed-padding fields
    return struct.pack("<10i", padding, sw, sh, fw, fh, activation, 0, 0, 0, 0)


def port_max_pool_argmax(x, padding, stride, filt, act_range=(LOWEST, np.finfo(np.float32).max)):
    (sh, sw), (fh, fw) = stride, filt
    n, h, w, c = x.shape
    if padding == SAME:
        oh, ow = math.ceil(h / sh), math.ceil(w / sw)
    else:
        oh, ow = (h - fh + sh) // sh, (w - fw + sw) // sw
    ph = max(0, ((oh - 1) * sh + fh - h) // 2)
    pw = max(0, ((ow - 1) * sw + fw - w) // 2)
    out = np.zeros((n, oh, ow, c), np.float32)
    idx = np.zeros((n, oh, ow, c), np.float32)
    for b in range(n):
        for oy in range(oh):
            for ox in range(ow):
                for ch in range(c):
                    y0, x0 = oy * sh - ph, ox * sw - pw
                    best, by, bx = LOWEST, 0, 0
                    for fy in range(max(0, -y0), min(fh, h - y0)):
                        for fx in range(max(0, -x0), min(fw, w - x0)):
                            v = x[b, y0 + fy, x0 + fx, ch]
                            if v > best:
                                best, by, bx = v, fy, fx
                    out[b, oy, ox, ch] = min(max(best, act_range[0]), act_range[1])
                    idx[b, oy, ox, ch] = np.float32(by * fw + bx) + np.float32(0.1)
    return out, idx


POOL_CASES = [  # padding, stride, filter, size
    (SAME, (2, 2), (2, 2), (6, 6)),
    (SAME, (2, 2), (3, 3), (7, 5)),
    (VALID, (2, 2), (3, 3), (7, 5)),
    (VALID, (1, 2), (2, 3), (4, 6)),
    (SAME, (3, 3), (2, 2), (5, 4)),
]


@pytest.mark.parametrize("padding, stride, filt, size", POOL_CASES)
def test_max_pool_with_argmax_matches_kernel_port_and_official_max_pool(padding, stride, filt, size):
    x = random_input((2,) + size + (3,), seed=5)
    x[0, 0, 0, 0] = -np.inf
    x[1, 1, 1, 1] = np.nan
    x[1, :2, :2, 2] = 1.5  # ties: the first tap in row-major order wins
    oh, ow = port_max_pool_argmax(x, padding, stride, filt)[0].shape[1:3]
    model = one_custom_op("MaxPoolingWithArgmax2D", [("x", x.shape)],
                          [("y", (2, oh, ow, 3)), ("i", (2, oh, ow, 3))], pool_struct(padding, stride, filt))
    got_y, got_i = both_backends(model, [x])
    want_y, want_i = port_max_pool_argmax(x, padding, stride, filt)
    np.testing.assert_array_equal(got_y, want_y)
    np.testing.assert_array_equal(got_i, want_i)

    # pooled values agree with the official MAX_POOL_2D where no NaN is involved
    clean = np.nan_to_num(x, nan=0.0, neginf=-5.0)
    b = ModelBuilder()
    xi = b.input("x", x.shape)
    y = b.tensor("y", (2, oh, ow, 3))
    b.op("MAX_POOL_2D", [xi], [y], padding="SAME" if padding == SAME else "VALID", stride_h=stride[0],
         stride_w=stride[1], filter_height=filt[0], filter_width=filt[1])
    b.output(y)
    official = run_official(to_bytes(b.build()), [clean])[0]
    np.testing.assert_array_equal(both_backends(model, [clean])[0], official)


def test_max_pool_with_argmax_all_minus_inf_window_and_relu6():
    x = np.full((1, 2, 2, 1), -np.inf, np.float32)
    model = one_custom_op("MaxPoolingWithArgmax2D", [("x", x.shape)], [("y", (1, 1, 1, 1)), ("i", (1, 1, 1, 1))],
                          pool_struct(VALID, (2, 2), (2, 2)))
    y, i = both_backends(model, [x])
    assert y[0, 0, 0, 0] == LOWEST and i[0, 0, 0, 0] == np.float32(0.1)

    x = random_input((1, 4, 4, 2), seed=6, low=-10, high=10)
    model = one_custom_op("MaxPoolingWithArgmax2D", [("x", x.shape)], [("y", (1, 2, 2, 2)), ("i", (1, 2, 2, 2))],
                          pool_struct(VALID, (2, 2), (2, 2), activation=3))
    y, i = both_backends(model, [x])
    want_y, want_i = port_max_pool_argmax(x, VALID, (2, 2), (2, 2), act_range=(0.0, 6.0))
    np.testing.assert_array_equal(y, want_y)
    np.testing.assert_array_equal(i, want_i)


# --------------------------------------------------------------------------- MaxUnpooling2D

def port_max_unpooling(x, indices, stride, filt):
    (sh, sw), (fh, fw) = stride, filt
    n, h, w, c = x.shape
    oh, ow = h * fh, w * fw
    ph = max(0, int(((h - 1) * sh + fh - oh) / 2))
    pw = max(0, int(((w - 1) * sw + fw - ow) / 2))
    out = np.zeros((n, oh, ow, c), np.float32)
    for b in range(n):
        for iy in range(h):
            for ix in range(w):
                for ch in range(c):
                    idx = int(indices[b, iy, ix, ch])  # truncates like C
                    mx = int(math.fmod(idx, fw))
                    my = int(idx / fw)
                    oy, ox = iy * sh - ph + my, ix * sw - pw + mx
                    if 0 <= ox < ow and 0 <= oy < oh:
                        out[b, oy, ox, ch] = x[b, iy, ix, ch]
    return out


@pytest.mark.parametrize("stride, filt, size", [((2, 2), (2, 2), (3, 4)), ((1, 1), (2, 2), (3, 3)),
                                                 ((3, 2), (2, 3), (2, 3))])
def test_max_unpooling_matches_kernel_port(stride, filt, size):
    rng = np.random.default_rng(7)
    x = random_input((2,) + size + (3,), seed=8)
    taps = filt[0] * filt[1]
    # in-window taps, plus out-of-range and negative ones the kernel must skip or truncate
    indices = (rng.integers(-2, taps + 2, size=x.shape) + 0.1).astype(np.float32)
    out_shape = (2, size[0] * filt[0], size[1] * filt[1], 3)
    model = one_custom_op("MaxUnpooling2D", [("x", x.shape), ("i", x.shape)], [("y", out_shape)],
                          pool_struct(SAME, stride, filt))
    got = both_backends(model, [x, indices])[0]
    np.testing.assert_array_equal(got, port_max_unpooling(x, indices, stride, filt))


def test_max_unpooling_inverts_max_pool_with_argmax():
    x = random_input((1, 6, 6, 2), seed=9)
    pooled, idx = port_max_pool_argmax(x, SAME, (2, 2), (2, 2))
    model = one_custom_op("MaxUnpooling2D", [("x", pooled.shape), ("i", idx.shape)], [("y", x.shape)],
                          pool_struct(SAME, (2, 2), (2, 2)))
    got = both_backends(model, [pooled, idx])[0]
    assert np.all((got == 0) | (got == x))
    np.testing.assert_array_equal(got.reshape(1, 3, 2, 3, 2, 2).max(axis=(2, 4)), pooled)


# --------------------------------------------------------------------------- Landmarks2TransformMatrix

def mat_mul(a, b):
    return [[sum(a[r][k] * b[k][c] for k in range(len(b))) for c in range(len(b[0]))] for r in range(len(a))]


def port_landmarks_to_matrix_v2(lm, opts):
    pts = lm.reshape(-1, 3).astype(np.float64)
    idx = opts["subset_idxs"]
    left, right = pts[opts["left_rotation_idx"]], pts[opts["right_rotation_idx"]]
    r = opts["target_rotation_radians"] - math.atan2(right[1] - left[1], right[0] - left[0])
    rot = [[math.cos(r), -math.sin(r), 0], [math.sin(r), math.cos(r), 0], [0, 0, 1]]
    inv = [[math.cos(-r), -math.sin(-r), 0], [math.sin(-r), math.cos(-r), 0], [0, 0, 1]]
    rotated = [mat_mul(rot, [[pts[i][0]], [pts[i][1]], [1.0]]) for i in idx]
    xs, ys = [p[0][0] for p in rotated], [p[1][0] for p in rotated]
    w, h = max(xs) - min(xs), max(ys) - min(ys)
    centre = mat_mul(inv, [[(max(xs) + min(xs)) / 2], [(max(ys) + min(ys)) / 2], [1.0]])
    ow, oh = opts["output_width"], opts["output_height"]
    shift = [[1, 0, 0, centre[0][0]], [0, 1, 0, centre[1][0]], [0, 0, 1, 0], [0, 0, 0, 1]]
    rot4 = [[math.cos(-r), -math.sin(-r), 0, 0], [math.sin(-r), math.cos(-r), 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]
    sx, sy = opts["scale_x"] * w / ow, opts["scale_y"] * h / oh
    scale = [[sx, 0, 0, 0], [0, sy, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]
    shift2 = [[1, 0, 0, -ow / 2], [0, 1, 0, -oh / 2], [0, 0, 1, 0], [0, 0, 0, 1]]
    return np.array(mat_mul(mat_mul(mat_mul(shift, rot4), scale), shift2), np.float32).reshape(1, 4, 4)


def port_landmarks_to_matrix_v1(lm, opts):
    pts = lm.reshape(-1, 3).astype(np.float64)
    left, right = pts[opts["left_rotation_idx"]], pts[opts["right_rotation_idx"]]
    a = -math.atan((right[1] - left[1]) / (right[0] - left[0]))
    mx = my = -100000.0
    nx = ny = 100000.0
    for i in opts["subset"]:
        x, y = pts[i][0], pts[i][1]
        rx, ry = x * math.cos(a) - y * math.sin(a), x * math.sin(a) + y * math.cos(a)
        mx, my, nx, ny = max(mx, rx), max(my, ry), min(nx, rx), min(ny, ry)
    rng, m = opts["landmarks_range"], opts["bbox_size_multiplier"]
    bw, bh = (mx - nx) * m, (my - ny) * m
    cx, cy = (mx + nx) / 2, (my + ny) / 2
    rcx = cx * math.cos(-a) - cy * math.sin(-a)
    rcy = cx * math.sin(-a) + cy * math.cos(-a)
    scale = [[bw / rng, 0, 0], [0, bh / rng, 0], [0, 0, 1]]
    rot = [[math.cos(-a), -math.sin(-a), rcx / rng * 2 - 1], [math.sin(-a), math.cos(-a), rcy / rng * 2 - 1],
           [0, 0, 1]]
    (ih, iw), (oh, ow) = opts["input_hw"], opts["output_hw"]
    rel = [[2 / (ow - 1), 0, -1], [0, 2 / (oh - 1), -1], [0, 0, 1]]
    ab = [[(iw - 1) / 2, 0, (iw - 1) / 2], [0, (ih - 1) / 2, (ih - 1) / 2], [0, 0, 1]]
    t = mat_mul(mat_mul(mat_mul(ab, rot), scale), rel)
    return np.array([[t[0][0], t[0][1], 0, t[0][2]], [t[1][0], t[1][1], 0, t[1][2]],
                     [t[2][0], t[2][1], t[2][2], 0], [0, 0, 0, 1]], np.float32).reshape(1, 4, 4)


@pytest.mark.parametrize("target, subset", [(0.0, [0, 1, 2, 3, 4, 5]), (math.pi / 2, [2, 7, 3]), (-0.3, [9, 0])])
def test_landmarks_to_transform_matrix_v2(target, subset):
    lm = random_input((1, 10, 3), seed=10, low=0, high=200)
    opts = {"subset_idxs": subset, "left_rotation_idx": 1, "right_rotation_idx": 4,
            "target_rotation_radians": target, "output_height": 256, "output_width": 192,
            "scale_x": 1.5, "scale_y": 1.25}
    model = one_custom_op("Landmarks2TransformMatrix", [("lm", lm.shape)], [("m", (1, 4, 4))],
                          bytes(flexbuffers.Dumps(opts)), version=2)
    got = both_backends(model, [lm])[0]
    # an odd-length subset pairs its last index with itself: same extremes
    want = port_landmarks_to_matrix_v2(lm, opts)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def test_landmarks_to_transform_matrix_v1():
    lm = random_input((1, 1, 1, 30), seed=11, low=0, high=64)
    opts = {"dimensions": 3, "landmarks_range": 64, "left_rotation_idx": 0, "right_rotation_idx": 5,
            "bbox_size_multiplier": 1.5, "input_hw": [480, 640], "output_hw": [128, 96],
            "subset": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]}
    model = one_custom_op("Landmarks2TransformMatrix", [("lm", lm.shape)], [("m", (1, 4, 4))],
                          bytes(flexbuffers.Dumps(opts)), version=1)
    got = both_backends(model, [lm])[0]
    np.testing.assert_allclose(got, port_landmarks_to_matrix_v1(lm, opts), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("options, match", [
    (b"\x01\x02\x03", "FlexBuffer"),
    (None, "no custom options"),
    (bytes(flexbuffers.Dumps({"subset_idxs": [0, 1], "left_rotation_idx": 0})), "lack 'right_rotation_idx'"),
    (bytes(flexbuffers.Dumps([1, 2])), "expected a map"),
])
def test_landmarks_to_transform_matrix_bad_options_name_the_op(options, match):
    model = read_model(to_bytes(one_custom_op("Landmarks2TransformMatrix", [("lm", (1, 4, 3))], [("m", (1, 4, 4))],
                                              options, version=2)))
    with pytest.raises(ModelFormatError, match=r"Landmarks2TransformMatrix \(#0\)") as info:
        run_ours(model, [random_input((1, 4, 3))], xla=False)
    assert info.match(match)


def test_landmark_index_outside_input_is_an_error():
    opts = {"subset_idxs": [0, 7], "left_rotation_idx": 0, "right_rotation_idx": 1,
            "target_rotation_radians": 0.0, "output_height": 4, "output_width": 4, "scale_x": 1.0, "scale_y": 1.0}
    model = read_model(to_bytes(one_custom_op("Landmarks2TransformMatrix", [("lm", (1, 4, 3))], [("m", (1, 4, 4))],
                                              bytes(flexbuffers.Dumps(opts)), version=2)))
    with pytest.raises(LiteGpuError, match="subset_idxs 7 is outside the 4 landmarks"):
        run_ours(model, [random_input((1, 4, 3))], xla=False)


# --------------------------------------------------------------------------- TransformLandmarks

def port_transform_landmarks(lm, matrix, dims, scale):
    m = matrix.reshape(-1)
    out = lm.copy()
    flat, res = lm.reshape(-1, dims), out.reshape(-1, dims)
    for i in range(flat.shape[0]):
        x, y = flat[i, 0], flat[i, 1]
        res[i, 0] = m[0] * x + m[1] * y + m[2] * 0 + m[3] * scale
        res[i, 1] = m[4] * x + m[5] * y + m[6] * 0 + m[7] * scale
    return out


@pytest.mark.parametrize("dims", [2, 3])
def test_transform_landmarks_v2(dims):
    lm = random_input((1, 7, dims), seed=12)
    matrix = random_input((1, 4, 4), seed=13)
    model = one_custom_op("TransformLandmarks", [("lm", lm.shape), ("m", matrix.shape)], [("y", lm.shape)],
                          None, version=2)
    got = both_backends(model, [lm, matrix])[0]
    np.testing.assert_allclose(got, port_transform_landmarks(lm, matrix, dims, 1.0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dims, scale", [(3, 2.5), (2, 1.0)])
def test_transform_landmarks_v1(dims, scale):
    lm = random_input((1, 2, 3, 6), seed=14)
    matrix = random_input((1, 4, 4), seed=15)
    model = one_custom_op("TransformLandmarks", [("lm", lm.shape), ("m", matrix.shape)], [("y", lm.shape)],
                          bytes(flexbuffers.Dumps({"dimensions": dims, "scale": scale})), version=1)
    got = both_backends(model, [lm, matrix])[0]
    np.testing.assert_allclose(got, port_transform_landmarks(lm, matrix, dims, scale), rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------- TransformTensorBilinear

def port_transform_tensor(x, matrix, out_hw, out_c, align_corners):
    m = matrix.reshape(-1).astype(np.float32)
    mx, my = list(m[0:4]), list(m[4:8])
    if align_corners:  # in double, stored back to float
        mx[3] = np.float32(float(mx[3]) + (float(mx[0]) * 0.5 + float(mx[1]) * 0.5 - 0.5))
        my[3] = np.float32(float(my[3]) + (float(my[0]) * 0.5 + float(my[1]) * 0.5 - 0.5))
    _, h, w, _ = x.shape
    out = np.zeros((1,) + tuple(out_hw) + (out_c,), np.float32)

    def read(yy, xx, c):
        return 0.0 if yy < 0 or xx < 0 or yy >= h or xx >= w else x[0, yy, xx, c]

    for oy in range(out_hw[0]):
        for ox in range(out_hw[1]):
            # float arithmetic, like the kernel's float4 dot product
            tx = mx[0] * np.float32(ox) + mx[1] * np.float32(oy) + mx[2] * np.float32(0) + mx[3]
            ty = my[0] * np.float32(ox) + my[1] * np.float32(oy) + my[2] * np.float32(0) + my[3]
            if tx < 0 or tx > w - 1 or ty < 0 or ty > h - 1:
                continue
            fx, fy = math.floor(tx), math.floor(ty)
            rx, ry = float(tx - np.float32(fx)), float(ty - np.float32(fy))
            for c in range(out_c):
                up = (1 - rx) * read(fy, fx, c) + rx * read(fy, fx + 1, c)
                lo = (1 - rx) * read(fy + 1, fx, c) + rx * read(fy + 1, fx + 1, c)
                out[0, oy, ox, c] = ry * lo + (1 - ry) * up
    return out


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("matrix", [
    [[0.5, 0.1, 0, 1.0], [-0.1, 0.6, 0, 0.5]],     # rotation + scale, partly outside
    [[1, 0, 0, 0], [0, 1, 0, 0]],                  # identity: hits the last row/column exactly
    [[1.7, 0, 0, -2.0], [0, 1.3, 0, -1.0]],
])
def test_transform_tensor_bilinear(version, matrix):
    x = random_input((1, 6, 7, 3), seed=16)
    m = np.eye(4, dtype=np.float32)
    m[:2] = np.array(matrix, np.float32)
    m = m.reshape(1, 4, 4)
    out_shape = (1, 5, 6, 2)
    opts = ({"mode": "bilinear", "output_size": [5, 6]} if version == 1 else {"output_height": 5, "output_width": 6})
    model = one_custom_op("TransformTensorBilinear", [("x", x.shape), ("m", m.shape)], [("y", out_shape)],
                          bytes(flexbuffers.Dumps(opts)), version=version)
    got = both_backends(model, [x, m])[0]
    want = port_transform_tensor(x, m, (5, 6), 2, align_corners=version == 2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------- the real model

def test_selfie_segmentation_runs_and_gives_a_mask(shared_models):
    from litegpu.backends import ReferenceBackend
    from litegpu.errors import UnsupportedOpError

    model = read_model(str(shared_models / "mediapipe_selfie_segmentation.tflite"))
    image = random_input((1, 256, 256, 3), seed=1234, low=0.0, high=1.0)
    try:
        (mask,) = ReferenceBackend(model).run([image])
    except UnsupportedOpError as e:  # ops other engineers are still adding
        pytest.skip(f"model needs an op litegpu lacks so far: {e}")
    assert mask.shape == (1, 256, 256, 1) and mask.dtype == np.float32
    assert np.all((mask >= 0) & (mask <= 1))
    from litegpu.backends.xla.backend import XlaBackend

    (compiled,) = XlaBackend(model).run([image])
    assert_close(np.asarray(compiled), mask, 1e-5, 1e-5, "XLA vs reference on the real model")
