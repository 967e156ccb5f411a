"""Grouped CONV_2D with one input channel per group (ConvNeXt's 7x7 layers as the converter writes them),
8-bit: bit-exact with the official kernel (its reference per-channel kernel: gemmlowp rounding), and compiled
by XLA within a small memory limit (a GEMM per group made XLA's simplifier loop until std::bad_alloc aborted
the process: a 29 MB int8 ConvNeXt-Tiny needed more than 16 GB)."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from oracle import check_op_model, one_op_model

from litegpu.ir.builder import quantization


def grouped_int8_conv(groups, size, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 127, (1, size, size, groups)).astype(np.int8)
    w = rng.integers(-127, 127, (groups, 7, 7, 1)).astype(np.int8)
    bias = rng.integers(-1000, 1000, (groups,)).astype(np.int32)
    w_scales = list(rng.uniform(0.005, 0.02, groups).astype(np.float32))
    return one_op_model("CONV_2D", [x, ("const", w), ("const", bias)], [((1, size, size, groups), "int8")],
                        input_quant=[quantization(0.05, 3), quantization(w_scales, [0] * groups, axis=0),
                                     quantization([0.05 * s for s in w_scales], [0] * groups, axis=0)],
                        output_quant=quantization(0.2, -1), padding="SAME", stride_w=1, stride_h=1)


@pytest.mark.parametrize("groups, size", [(8, 9), (96, 14)])
def test_grouped_int8_conv_matches_the_official_kernel(groups, size):
    model, feeds = grouped_int8_conv(groups, size)
    check_op_model(model, feeds)


def test_convnext_sized_grouped_conv_compiles_within_3_gb():
    """96 groups of 7x7 on 56x56 under XLA in a process limited to 3 GB of address space."""
    script = textwrap.dedent(f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
        sys.path.insert(0, {str(__import__("pathlib").Path(__file__).parents[1])!r})
        import numpy as np
        from oracle import run_ours
        from ops.test_conv_grouped import grouped_int8_conv
        model, feeds = grouped_int8_conv(96, 56)
        np.save(sys.argv[1], run_ours(model, feeds, xla=True)[0])
    """)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        out = f"{tmp}/y.npy"
        done = subprocess.run([sys.executable, "-c", script, out], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        model, feeds = grouped_int8_conv(96, 56)
        from oracle import run_official
        from litegpu.ir.save import to_bytes

        np.testing.assert_array_equal(np.load(out), run_official(to_bytes(model), feeds)[0])
