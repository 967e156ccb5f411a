"""QUANTIZE from one quantized type to another against the official builtin kernels, over every input value
and scale ratios below and above one: int8 / uint8 / int16 / int32 in, int8 / uint8 / int16 / int32 out."""

import numpy as np
import pytest
from oracle import check_op_model, one_op_model

from litegpu.ir.builder import quantization

PAIRS = [("int8", "int8"), ("uint8", "uint8"), ("int8", "uint8"), ("uint8", "int8"), ("int16", "int16"),
         ("int16", "int8"), ("int16", "int32"), ("int32", "int8"), ("int32", "int16")]
SCALES = [(0.05, 0.1), (0.1, 0.05), (0.0731, 0.0193), (0.013, 0.2), (0.2, 0.013), (0.0625, 0.5)]


def _zero_point(dtype, value):
    if dtype in ("int16", "int32"):
        return 0  # the official kernels take only symmetric 16 / 32-bit requantization
    return value + (128 if dtype == "uint8" else 0)


@pytest.mark.parametrize("scales", SCALES, ids=lambda s: f"{s[0]}to{s[1]}")
@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: f"{p[0]}-{p[1]}")
def test_requantization_matches_the_official_kernels(pair, scales):
    src, dst = pair
    info = np.iinfo(src)
    x = np.arange(max(info.min, -4000), min(info.max, 4000) + 1).astype(src)
    model, feeds = one_op_model("QUANTIZE", [x], [(x.shape, dst)],
                                input_quant=[quantization(scales[0], _zero_point(src, 3))],
                                output_quant=quantization(scales[1], _zero_point(dst, -2)))
    check_op_model(model, feeds)
