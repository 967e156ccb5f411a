import numpy as np
import pytest

from litegpu.backends import ReferenceBackend
from litegpu.errors import LiteGpuError
from litegpu.ir.builder import ModelBuilder
from litegpu.ir.save import to_bytes
from oracle import check_op_model, random_input, run_official, run_ours_builtin, same_bits

RESIZE_MODES = [(False, False), (True, False), (False, True)]  # (align_corners, half_pixel_centers)


def resize_model(name, shape, size, align_corners, half_pixel_centers, dtype="float32"):
    b = ModelBuilder()
    x = b.input("x", shape, dtype)
    s = b.constant("size", np.array(size, np.int32))
    y = b.tensor("y", (shape[0], *size, shape[3]), dtype)
    b.op(name, [x, s], [y], align_corners=align_corners, half_pixel_centers=half_pixel_centers)
    b.output(y)
    return b.build()


@pytest.mark.parametrize("name", ["RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"])
@pytest.mark.parametrize("align_corners,half_pixel_centers", RESIZE_MODES)
@pytest.mark.parametrize("in_hw,out_hw", [
    ((4, 4), (8, 8)),      # 2x upscale (the official 2x2 fast path)
    ((5, 3), (7, 10)),     # non-integer upscale
    ((9, 8), (4, 3)),      # downscale
    ((3, 3), (1, 1)),      # align_corners with a single output pixel
    ((1, 4), (3, 4)),      # single input row
    ((6, 6), (6, 6)),
])
def test_resize_matches_official(name, align_corners, half_pixel_centers, in_hw, out_hw):
    shape = (2, *in_hw, 3)
    model = resize_model(name, shape, out_hw, align_corners, half_pixel_centers)
    check_op_model(model, [random_input(shape)])


@pytest.mark.parametrize("align_corners,half_pixel_centers", RESIZE_MODES)
@pytest.mark.parametrize("in_hw,out_hw,depth", [
    ((8, 8), (16, 16), 48),  # MediaPipe pose landmarks' half-pixel upscales (an ulp off: 2e-5 at the output)
    ((4, 5), (8, 10), 11),   # 2x (without either option: the official 2x2 kernel)
    ((5, 3), (7, 10), 3),
    ((9, 8), (4, 3), 5),
])
def test_float_resize_bilinear_in_builtin_mode_is_the_builtin_kernel_bit_for_bit(align_corners, half_pixel_centers,
                                                                                in_hw, out_hw, depth):
    shape = (1, *in_hw, depth)
    model = resize_model("RESIZE_BILINEAR", shape, out_hw, align_corners, half_pixel_centers)
    x = random_input(shape)
    want = run_official(to_bytes(model), [x])[0]
    same = same_bits(run_ours_builtin(model, [x])[0], want)
    assert same.all(), f"{int((~same).sum())} of {same.size} values differ"


@pytest.mark.parametrize("align_corners,half_pixel_centers", RESIZE_MODES)
def test_resize_nearest_neighbor_int32(align_corners, half_pixel_centers):
    shape = (1, 5, 7, 2)
    model = resize_model("RESIZE_NEAREST_NEIGHBOR", shape, (8, 3), align_corners, half_pixel_centers, "int32")
    check_op_model(model, [random_input(shape, np.int32)])


def test_resize_rejects_align_corners_with_half_pixel_centers():
    model = resize_model("RESIZE_BILINEAR", (1, 2, 2, 1), (4, 4), True, True)
    with pytest.raises(LiteGpuError, match="RESIZE_BILINEAR"):
        ReferenceBackend(model).run([random_input((1, 2, 2, 1))])


def block_model(name, shape, out_shape, block_size, dtype="float32"):
    b = ModelBuilder()
    x = b.input("x", shape, dtype)
    y = b.tensor("y", out_shape, dtype)
    b.op(name, [x], [y], block_size=block_size)
    b.output(y)
    return b.build()


@pytest.mark.parametrize("dtype", ["float32", "int32", "int64"])
@pytest.mark.parametrize("shape,block", [((1, 2, 3, 8), 2), ((2, 3, 2, 18), 3), ((1, 1, 1, 4), 2), ((1, 2, 2, 5), 1)])
def test_depth_to_space_matches_official(dtype, shape, block):
    n, h, w, c = shape
    model = block_model("DEPTH_TO_SPACE", shape, (n, h * block, w * block, c // block ** 2), block, dtype)
    check_op_model(model, [random_input(shape, dtype)])


@pytest.mark.parametrize("dtype", ["float32", "int32", "int64"])
@pytest.mark.parametrize("shape,block", [((1, 4, 6, 2), 2), ((2, 6, 3, 1), 3), ((1, 2, 2, 3), 2)])
def test_space_to_depth_matches_official(dtype, shape, block):
    n, h, w, c = shape
    model = block_model("SPACE_TO_DEPTH", shape, (n, h // block, w // block, c * block ** 2), block, dtype)
    check_op_model(model, [random_input(shape, dtype)])


def test_depth_to_space_rejects_depth_not_multiple_of_block():
    model = block_model("DEPTH_TO_SPACE", (1, 2, 2, 6), (1, 4, 4, 1), 2)
    with pytest.raises(LiteGpuError, match="DEPTH_TO_SPACE.*multiple"):
        ReferenceBackend(model).run([random_input((1, 2, 2, 6))])


def batch_space_model(name, shape, out_shape, block, pairs, dtype="float32"):
    b = ModelBuilder()
    x = b.input("x", shape, dtype)
    bs = b.constant("block_shape", np.array(block, np.int32))
    p = b.constant("pairs", np.array(pairs, np.int32).reshape(len(block), 2))
    y = b.tensor("y", out_shape, dtype)
    b.op(name, [x, bs, p], [y])
    b.output(y)
    return b.build()


@pytest.mark.parametrize("dtype", ["float32", "int32", "int64"])
@pytest.mark.parametrize("shape,block,pads", [
    ((1, 4, 4, 1), [2, 2], [[0, 0], [0, 0]]),
    ((2, 4, 6, 3), [2, 3], [[0, 0], [0, 0]]),
    ((1, 5, 3, 2), [2, 2], [[1, 0], [0, 1]]),
    ((2, 3, 3, 1), [3, 2], [[2, 1], [1, 0]]),
    ((2, 5, 2), [3], [[1, 0]]),                 # 3-D input: one spatial dim
])
def test_space_to_batch_nd_matches_official(dtype, shape, block, pads):
    padded = [shape[1 + i] + sum(pads[i]) for i in range(len(block))]
    out = (shape[0] * int(np.prod(block)), *(p // b for p, b in zip(padded, block)), *shape[1 + len(block):])
    model = batch_space_model("SPACE_TO_BATCH_ND", shape, out, block, pads, dtype)
    check_op_model(model, [random_input(shape, dtype)])


@pytest.mark.parametrize("dtype", ["float32", "int32", "int64"])
@pytest.mark.parametrize("shape,block,crops", [
    ((4, 2, 2, 1), [2, 2], [[0, 0], [0, 0]]),
    ((12, 2, 2, 3), [2, 3], [[0, 0], [0, 0]]),
    ((8, 3, 2, 2), [2, 2], [[1, 0], [0, 1]]),
    ((6, 2, 3, 1), [3, 2], [[2, 1], [1, 0]]),
    ((6, 2, 2), [3], [[1, 2]]),                 # 3-D input: one spatial dim
])
def test_batch_to_space_nd_matches_official(dtype, shape, block, crops):
    full = [shape[1 + i] * block[i] for i in range(len(block))]
    out = (shape[0] // int(np.prod(block)), *(f - sum(c) for f, c in zip(full, crops)), *shape[1 + len(block):])
    model = batch_space_model("BATCH_TO_SPACE_ND", shape, out, block, crops, dtype)
    check_op_model(model, [random_input(shape, dtype)])


def test_space_to_batch_nd_rejects_indivisible_spatial_dims():
    model = batch_space_model("SPACE_TO_BATCH_ND", (1, 5, 4, 1), (4, 2, 2, 1), [2, 2], [[0, 0], [0, 0]])
    with pytest.raises(LiteGpuError, match="SPACE_TO_BATCH_ND.*multiples"):
        ReferenceBackend(model).run([random_input((1, 5, 4, 1))])
