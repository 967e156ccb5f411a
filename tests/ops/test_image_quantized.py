"""Quantized resizes and block rearrangements against the official kernels.

RESIZE_BILINEAR takes three integer paths in the official runtime: uint8 the optimized
float32 kernel (weights in float32, +0.5, truncation), int8 and int16 the integer kernel
(10-bit weights).  RESIZE_NEAREST_NEIGHBOR on 8-bit types without align_corners or
half_pixel_centers takes a 16.16 fixed-point scale.  The rest copy values."""

import numpy as np
import pytest
from oracle import assert_reference_rejects, check_built, full_range, one_op_model

from litegpu.ir.builder import quantization

RESIZE_MODES = [(False, False), (True, False), (False, True)]  # (align_corners, half_pixel_centers)
RESIZE_SIZES = [
    ((4, 4), (8, 8)),      # 2x upscale
    ((5, 3), (7, 10)),     # non-integer upscale
    ((9, 8), (4, 3)),      # downscale
    ((3, 3), (1, 1)),      # a single output pixel
    ((1, 4), (3, 4)),      # a single input row
    ((7, 6), (19, 23)),    # odd ratios: positions land near halves
]


def quant(dtype, scale=0.05):
    return quantization(scale, {"int8": -3, "uint8": 130, "int16": 0}[dtype])


def resize(name, x, out_hw, align_corners, half_pixel_centers):
    q = quant(x.dtype.name)
    out = (x.shape[0], *out_hw, x.shape[3])
    return one_op_model(name, [x, ("const", np.asarray(out_hw, np.int32))], [(out, x.dtype.name, q)],
                        input_quant=[q], align_corners=align_corners, half_pixel_centers=half_pixel_centers)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16"])
@pytest.mark.parametrize("align_corners,half_pixel_centers", RESIZE_MODES)
@pytest.mark.parametrize("in_hw,out_hw", RESIZE_SIZES)
def test_quantized_resize_bilinear(dtype, align_corners, half_pixel_centers, in_hw, out_hw):
    x = full_range((2, *in_hw, 3), dtype)
    check_built(resize("RESIZE_BILINEAR", x, out_hw, align_corners, half_pixel_centers))


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_resize_bilinear_8x_half_pixel_fast_path(dtype):
    # uint8 with depth % 8 == 0 and an exact 8x upscale takes a fixed-point special kernel
    x = full_range((1, 3, 2, 8), dtype)
    check_built(resize("RESIZE_BILINEAR", x, (24, 16), False, True))


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "bool", "float16"])
@pytest.mark.parametrize("align_corners,half_pixel_centers", RESIZE_MODES)
@pytest.mark.parametrize("in_hw,out_hw", RESIZE_SIZES + [((3, 7), (5, 9)), ((7, 3), (17, 4))])
def test_resize_nearest_neighbor_types(dtype, align_corners, half_pixel_centers, in_hw, out_hw):
    shape = (1, *in_hw, 2)
    if dtype == "bool":
        x = np.random.default_rng(0).random(shape) < 0.5
    elif dtype == "float16":
        x = np.random.default_rng(0).uniform(-4, 4, shape).astype(np.float16)
    else:
        x = full_range(shape, dtype)
    q = quant(dtype) if dtype not in ("bool", "float16") else None
    out = (1, *out_hw, 2)
    check_built(one_op_model("RESIZE_NEAREST_NEIGHBOR", [x, ("const", np.asarray(out_hw, np.int32))],
                             [(out, dtype, q)], input_quant=[q], align_corners=align_corners,
                             half_pixel_centers=half_pixel_centers))


@pytest.mark.parametrize("dtype", ["int8", "uint8", "bool", "int16"])
def test_resize_nearest_neighbor_8bit_fixed_point_scale(dtype):
    # 2 -> 82 rows: output row 41 reads input row 1 with the 16.16 scale, row 0 with the float
    # one (41 * float32(2 / 82) < 1); 8-bit types take the former, int16 the latter
    x = np.arange(2 * 4).reshape(1, 2, 4, 1) % 2 == 1 if dtype == "bool" else full_range((1, 2, 4, 1), dtype)
    q = None if dtype == "bool" else quant(dtype)
    check_built(one_op_model("RESIZE_NEAREST_NEIGHBOR", [x, ("const", np.asarray([82, 94], np.int32))],
                             [((1, 82, 94, 1), dtype, q)], input_quant=[q]))


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("name,shape,out", [("DEPTH_TO_SPACE", (1, 2, 3, 8), (1, 4, 6, 2)),
                                            ("SPACE_TO_DEPTH", (2, 4, 6, 3), (2, 2, 3, 12))])
def test_quantized_depth_space_copy_values(dtype, name, shape, out):
    # the official kernels ignore the output's quantization: values are copied
    check_built(one_op_model(name, [full_range(shape, dtype)], [(out, dtype, quant(dtype, 0.3))],
                             input_quant=[quant(dtype)], block_size=2))


@pytest.mark.parametrize("name", ["DEPTH_TO_SPACE", "SPACE_TO_DEPTH"])
def test_depth_space_refuse_int16(name):
    shape, out = ((1, 2, 2, 4), (1, 4, 4, 1)) if name == "DEPTH_TO_SPACE" else ((1, 2, 2, 1), (1, 1, 1, 4))
    built = one_op_model(name, [full_range(shape, "int16")], [(out, "int16", quant("int16"))],
                         input_quant=[quant("int16")], block_size=2)
    assert_reference_rejects(built, name)

def batch_space(name, x, block, pairs, out, in_q, out_q):
    return one_op_model(name, [x, ("const", np.asarray(block, np.int32)),
                               ("const", np.asarray(pairs, np.int32).reshape(len(block), 2))],
                        [(out, x.dtype.name, out_q)], input_quant=[in_q])


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16"])
def test_quantized_space_to_batch_pads_with_the_zero_point(dtype):
    x = full_range((1, 5, 3, 2), dtype)
    q = quant(dtype)
    check_built(batch_space("SPACE_TO_BATCH_ND", x, [2, 2], [[1, 0], [0, 1]], (4, 3, 2, 2), q, q))


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16"])
def test_quantized_batch_to_space(dtype):
    x = full_range((8, 3, 2, 2), dtype)
    q = quant(dtype)
    check_built(batch_space("BATCH_TO_SPACE_ND", x, [2, 2], [[1, 0], [0, 1]], (2, 5, 3, 2), q, q))


@pytest.mark.parametrize("name", ["SPACE_TO_BATCH_ND", "BATCH_TO_SPACE_ND"])
@pytest.mark.parametrize("dtype,in_q,out_q", [("int8", (0.1, 3), (0.2, 3)), ("uint8", (0.1, 3), (0.1, 4)),
                                              ("int16", (0.1, 2), (0.1, 2))])
def test_batch_space_refuse_a_requantization(name, dtype, in_q, out_q):
    shape, out = ((1, 4, 4, 1), (4, 2, 2, 1)) if name == "SPACE_TO_BATCH_ND" else ((4, 2, 2, 1), (1, 4, 4, 1))
    built = batch_space(name, full_range(shape, dtype), [2, 2], [[0, 0], [0, 0]], out,
                        quantization(*in_q), quantization(*out_q))
    assert_reference_rejects(built, name)
