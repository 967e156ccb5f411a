"""Circle's own weight types read by FULLY_CONNECTED and GATHER (ops/_block_weights.py), differentially.

The models are built with litegpu's builder and written as .circle.  The blocks are packed here from
ggml's struct definitions (``ggml-common.h``), independently of the module under test, from quants and
scales chosen by the test, so the dequantized weights are known exactly.  References:

- GATHER: the known weights' rows, exactly; onert (ggml_get_rows) for q4_0 and q8_0.
- FULLY_CONNECTED: on inputs whose blocks ggml's q8 quantization holds exactly, the dequantize-then-multiply
  product (so the activation quantization is checked to be ggml's, to a float32 summation order); on random
  inputs, onert (q4_0, q8_0: ggml_mul_mat) and the dequantize-then-multiply product within the bound of
  ggml's activation rounding (half a step of each block's scale).
- UINT4: the dequantize-then-multiply product (no ONE kernel reads UINT4).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from circle_oracle import check_circle_model, ggml_quantized_q4_0, have_onert, onert_outputs, run_backends

from litegpu.backends import ReferenceBackend
from litegpu.errors import UnsupportedOpError
from litegpu.format import CIRCLE
from litegpu.ir import read_model
from litegpu.ir.builder import ModelBuilder, quantization
from litegpu.ir.dtypes import pack_sub_byte
from litegpu.ir.save import to_bytes

GGML_TYPES = ["ggml_q4_0", "ggml_q4_1", "ggml_q8_0", "ggml_q8_1"]
# what onert 0.1.0 runs (measured): FULLY_CONNECTED without bias on q4_0 and q8_0 weights (the types its
# GGMLHelper.cc maps to ggml), GATHER on q4_0 tables (a q8_0 table fails at inference)
ONERT_RUNS = [("fc", "ggml_q4_0"), ("fc", "ggml_q8_0"), ("gather", "ggml_q4_0")]


def _half_bytes(values: np.ndarray) -> np.ndarray:
    return np.asarray(values, np.float16).view(np.uint8).reshape(*np.shape(values), 2)


def make_ggml(dtype: str, units: int, depth: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(the file's bytes, the float32 weights they stand for) of a [units, depth] weight of ggml type ``dtype``."""
    rng = np.random.default_rng(seed)
    blocks = depth // 32
    d = rng.uniform(0.005, 0.05, (units, blocks)).astype(np.float16)
    if dtype in ("ggml_q4_0", "ggml_q4_1"):
        q = rng.integers(0, 16, (units, blocks, 32))
        nibbles = (q[..., :16] | (q[..., 16:] << 4)).astype(np.uint8)  # element j low, j + 16 high
        if dtype == "ggml_q4_0":
            raw = [_half_bytes(d), nibbles]
            w = (q - 8).astype(np.float32) * d.astype(np.float32)[..., None]
        else:
            m = rng.uniform(-0.3, 0.0, (units, blocks)).astype(np.float16)
            raw = [_half_bytes(d), _half_bytes(m), nibbles]
            w = q.astype(np.float32) * d.astype(np.float32)[..., None] + m.astype(np.float32)[..., None]
    else:
        q = rng.integers(-128, 128, (units, blocks, 32))
        head = [_half_bytes(d)]
        if dtype == "ggml_q8_1":
            head.append(_half_bytes(d.astype(np.float32) * q.sum(axis=-1)))  # s = d * sum(q)
        raw = head + [q.astype(np.int8).view(np.uint8)]
        w = q.astype(np.float32) * d.astype(np.float32)[..., None]
    return np.concatenate(raw, axis=-1).reshape(-1), w.reshape(units, depth).astype(np.float32)


def fc_model(dtype: str, raw: np.ndarray, units: int, depth: int, rows: int = 3, bias: np.ndarray | None = None,
             activation: str = "NONE", **tensor_kwargs):
    b = ModelBuilder()
    x = b.input("x", (rows, depth))
    w = b.tensor("w", (units, depth), dtype, buffer=b.add_buffer(raw), raw=raw, **tensor_kwargs)
    bias_index = b.constant("bias", bias) if bias is not None else -1
    y = b.tensor("y", (rows, units))
    b.op("FULLY_CONNECTED", [x, w, bias_index], [y], fused_activation_function=activation)
    b.output(y)
    return b.build()


def gather_model(dtype: str, raw: np.ndarray, units: int, depth: int, indices_shape=(2, 3), **tensor_kwargs):
    b = ModelBuilder()
    i = b.input("i", indices_shape, "int32")
    w = b.tensor("table", (units, depth), dtype, buffer=b.add_buffer(raw), raw=raw, **tensor_kwargs)
    y = b.tensor("y", (*indices_shape, depth))
    b.op("GATHER", [w, i], [y], axis=0)
    b.output(y)
    return b.build()


def q8_exact_rows(rows: int, depth: int, seed: int = 1) -> np.ndarray:
    """Rows that ggml's q8 quantization holds exactly: per block of 32, integers in [-127, 127] with one of
    them +-127, times a power of two (d = 2^e exactly, also as float16), block sums within +-2048 (q8_1's
    s = d * sum is then a float16 too)."""
    rng = np.random.default_rng(seed)
    q = rng.integers(-60, 61, (rows, depth // 32, 32))
    q[..., 0] = np.where(rng.random((rows, depth // 32)) < 0.5, 127, -127)
    scale = 2.0 ** rng.integers(-8, -2, (rows, depth // 32, 1))
    return (q * scale).reshape(rows, depth).astype(np.float32)


@pytest.mark.parametrize("dtype", GGML_TYPES)
def test_ggml_gather_gives_the_dequantized_rows_exactly(dtype):
    raw, w = make_ggml(dtype, 10, 96)
    model = gather_model(dtype, raw, 10, 96)
    indices = np.array([[9, 0, 3], [3, 7, 1]], np.int32)
    for name, outputs in run_backends(read_model(to_bytes(model, CIRCLE)), [indices]).items():
        np.testing.assert_array_equal(outputs[0], w[indices], err_msg=name)


@pytest.mark.parametrize("dtype", GGML_TYPES)
def test_ggml_fc_on_inputs_q8_holds_exactly_is_the_dequantized_product(dtype):
    raw, w = make_ggml(dtype, 12, 128, seed=2)
    x = q8_exact_rows(4, 128)
    bias = np.linspace(-1, 1, 12).astype(np.float32)
    expected = x.astype(np.float64) @ w.astype(np.float64).T + bias
    # float32 summation (in any order) of the exact products: within a few ulps of the sum of their magnitudes
    slack = 2.0 ** -20 * (np.abs(x).astype(np.float64) @ np.abs(w).astype(np.float64).T + np.abs(bias))
    for name, outputs in run_backends(read_model(to_bytes(fc_model(dtype, raw, 12, 128, rows=4, bias=bias), CIRCLE)),
                                      [x]).items():
        error = np.abs(outputs[0] - expected)
        assert (error <= slack).all(), f"{name}: {error.max()} (slack {slack.min()})"


@pytest.mark.parametrize("dtype", GGML_TYPES)
def test_ggml_fc_on_random_inputs_stays_within_ggmls_activation_rounding(dtype):
    """ggml rounds each input block to its q8 step d_x = amax / 127: the product may differ from the float one
    by at most sum_k |w_k| * d_x / 2 (plus the float16 rounding of d_x): checked per output, and that it does
    differ (the inputs are not multiplied in float)."""
    raw, w = make_ggml(dtype, 16, 256, seed=3)
    x = np.random.default_rng(4).standard_normal((5, 256)).astype(np.float32)
    blocks = x.reshape(5, 8, 32)
    step = np.abs(blocks).max(axis=-1) / 127  # [rows, blocks]
    bound = np.einsum("rb,ubk->ru", step * (0.5 + 2 ** -10), np.abs(w.reshape(16, 8, 32)) + 1e-6) + 1e-5
    exact = x.astype(np.float64) @ w.astype(np.float64).T
    for name, outputs in run_backends(read_model(to_bytes(fc_model(dtype, raw, 16, 256, rows=5), CIRCLE)),
                                      [x]).items():
        error = np.abs(outputs[0] - exact)
        assert (error <= bound).all(), f"{name}: {error.max()} above the bound"
        assert error.max() > 1e-4, f"{name}: no activation rounding seen"
    ref, xla = run_backends(read_model(to_bytes(fc_model(dtype, raw, 16, 256, rows=5), CIRCLE)), [x]).values()
    np.testing.assert_allclose(xla[0], ref[0], rtol=1e-5, atol=1e-5)


needs_onert = pytest.mark.skipif(not have_onert(), reason="needs onert (pip install onert)")


@needs_onert
@pytest.mark.parametrize("kind, dtype", ONERT_RUNS)
def test_ggml_fc_and_gather_match_onert(kind, dtype, tmp_path: Path):
    raw, w = make_ggml(dtype, 24, 192, seed=5)
    x = np.random.default_rng(6).standard_normal((3, 192)).astype(np.float32)
    # 1-D indices: onert's ggml gather gives rows 3 to 5 of [[23, 0, 5], [5, 11, 2]] wrong (NaN, 8e4: measured),
    # the same indices as a vector right; our rank-2 gather is checked against the known rows above
    indices = np.array([23, 0, 5, 5, 11, 2], np.int32)
    model, inputs = ((fc_model(dtype, raw, 24, 192), [x]) if kind == "fc" else
                     (gather_model(dtype, raw, 24, 192, indices_shape=(6,)), [indices]))
    path = tmp_path / f"{kind}.circle"
    path.write_bytes(to_bytes(model, CIRCLE))
    want = onert_outputs(path, inputs, tmp_path)
    assert want is not None, f"onert refused the {kind} model of {dtype}, which it ran when this test was written"
    for name, outputs in run_backends(read_model(path.read_bytes()), inputs).items():
        np.testing.assert_allclose(outputs[0], want[0], rtol=1e-5, atol=1e-6, err_msg=name)
    if kind == "fc":  # onert's product is ggml's, not the float one: this comparison tells them apart
        assert np.abs(want[0] - x @ w.T).max() > 1e-3


def test_ggml_fc_applies_the_fused_activation_and_keeps_dims():
    raw, w = make_ggml("ggml_q8_0", 8, 64, seed=7)
    b = ModelBuilder()
    x = b.input("x", (2, 3, 64))
    wt = b.tensor("w", (8, 64), "ggml_q8_0", buffer=b.add_buffer(raw), raw=raw)
    y = b.tensor("y", (2, 3, 8))
    b.op("FULLY_CONNECTED", [x, wt, -1], [y], fused_activation_function="RELU6", keep_num_dims=True)
    b.output(y)
    xs = q8_exact_rows(6, 64, seed=8).reshape(2, 3, 64)
    expected = np.clip(xs.astype(np.float64) @ w.T.astype(np.float64), 0, 6).astype(np.float32)
    check_circle_model(b.build(), [xs], [expected], rtol=2e-6, atol=2e-6)


def _uint4_weight(units: int, depth: int, per_channel: bool, seed: int = 9):
    rng = np.random.default_rng(seed)
    q = rng.integers(0, 16, (units, depth))
    scales = rng.uniform(0.01, 0.1, units if per_channel else 1).astype(np.float32)
    zero_points = rng.integers(0, 16, units if per_channel else 1)
    w = ((q - zero_points.reshape(-1, 1)) * scales.reshape(-1, 1)).astype(np.float32)
    return pack_sub_byte(q, "uint4"), w, quantization(list(scales), list(zero_points), 0)


@pytest.mark.parametrize("per_channel", [False, True])
def test_uint4_fc_and_gather_are_the_dequantized_product_and_rows(per_channel):
    raw, w, quant = _uint4_weight(12, 40, per_channel)
    x = np.random.default_rng(10).standard_normal((3, 40)).astype(np.float32)
    check_circle_model(fc_model("uint4", raw, 12, 40, quantization=quant), [x],
                       [(x.astype(np.float64) @ w.astype(np.float64).T).astype(np.float32)], rtol=1e-5, atol=1e-5)
    indices = np.array([[11, 0, 4], [4, 4, 1]], np.int32)
    check_circle_model(gather_model("uint4", raw, 12, 40, quantization=quant), [indices], [w[indices]],
                       rtol=1e-6, atol=1e-7)


def _refusal(model, inputs) -> str:
    with pytest.raises(UnsupportedOpError) as caught:
        ReferenceBackend(read_model(to_bytes(model, CIRCLE))).run(inputs)
    return str(caught.value)


def test_mx_weights_are_refused_with_the_reason():
    raw = np.zeros(8 * 64 // 2, np.uint8)
    x = np.zeros((3, 64), np.float32)
    assert "no place for the shared exponents" in _refusal(fc_model("mxfp4", raw, 8, 64), [x])
    assert "no place for the shared exponents" in _refusal(
        gather_model("mxint8", np.zeros(8 * 64, np.uint8), 8, 64), [np.zeros((2, 3), np.int32)])


def test_ggml_weights_without_whole_blocks_per_row_and_gathers_inside_rows_are_refused():
    raw = np.zeros(5 * 34, np.uint8)  # [4, 40]: 160 elements, 5 blocks of the file, but rows of 1.25 blocks
    assert "depth a multiple of 32" in _refusal(fc_model("ggml_q8_0", raw, 4, 40), [np.zeros((3, 40), np.float32)])
    table = np.zeros(4 * 2 * 18, np.uint8)
    b = ModelBuilder()
    i = b.input("i", (2,), "int32")
    t = b.tensor("table", (4, 64), "ggml_q4_0", buffer=b.add_buffer(table), raw=table)
    out = b.tensor("y", (4, 2))
    b.op("GATHER", [t, i], [out], axis=1)  # would pick elements inside the blocks
    b.output(out)
    assert "gathered by rows" in _refusal(b.build(), [np.zeros(2, np.int32)])


def test_ggml_gather_names_an_index_out_of_range():
    raw, _ = make_ggml("ggml_q4_1", 4, 32)
    from litegpu.errors import ModelExecutionError

    with pytest.raises(ModelExecutionError, match="index 4 is out of range"):
        ReferenceBackend(read_model(to_bytes(gather_model("ggml_q4_1", raw, 4, 32, indices_shape=(2,)), CIRCLE))).run(
            [np.array([1, 4], np.int32)])


def test_uint4_product_from_the_gpus_4bit_weight_is_the_dequantized_one():
    """A GPU holds UINT4 weights in XLA's uint4 (backends/xla/backend.py): the product reads them as int4 (XOR 8),
    which XLA GPU converts inside its kernel.  Here on the CPU, the same arithmetic against numpy's."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    from jax import lax

    from litegpu.ops import _block_weights as bw

    rng = np.random.default_rng(14)
    q = rng.integers(0, 16, (6, 40)).astype(np.uint8)
    scales, zero_points = rng.uniform(0.01, 0.1, 6).astype(np.float32), rng.integers(0, 16, 6).astype(np.float32)
    x = rng.standard_normal((3, 40)).astype(np.float32)
    stored = jnp.asarray(q).astype(jnp.uint4)
    got = jax.jit(lambda x, s: bw.uint4_fc(jnp, lax, x, s.astype(jnp.uint8), scales, zero_points, s))(x, stored)
    np.testing.assert_allclose(np.asarray(got), bw.uint4_fc(np, None, x, q, scales, zero_points), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kernel_mode", [None, "BUILTIN", "REFERENCE"])
def test_circle_weight_model_through_compiled_model_on_the_cpu(kernel_mode):
    """Both CPU kernel modes (and numpy): the ops with circle weights stay off the engines that read TFLite."""
    import litegpu as lg

    raw, w = make_ggml("ggml_q4_1", 16, 64, seed=15)
    q_raw, q_w, quant = _uint4_weight(8, 64, per_channel=True)
    b = ModelBuilder()
    x = b.input("x", (2, 64))
    w1 = b.tensor("w1", (16, 64), "ggml_q4_1", buffer=b.add_buffer(raw), raw=raw)
    h = b.tensor("h", (2, 16))
    b.op("FULLY_CONNECTED", [x, w1, -1], [h])
    t = b.tensor("table", (8, 64), "uint4", buffer=b.add_buffer(q_raw), raw=q_raw, quantization=quant)
    i = b.input("i", (3,), "int32")
    g = b.tensor("g", (3, 64))
    b.op("GATHER", [t, i], [g], axis=0)
    b.output(h, g)
    data = to_bytes(b.build(), CIRCLE)
    mode = None if kernel_mode is None else getattr(lg.CpuKernelMode, kernel_mode)
    model = lg.CompiledModel.from_buffer(data, options=lg.Options(
        lg.HardwareAccelerator.CPU, cpu_options=lg.CpuOptions(kernel_mode=mode, num_threads=2)))
    xs, idx = q8_exact_rows(2, 64, seed=16), np.array([7, 0, 3], np.int32)
    got_h, got_g = model(xs, idx)
    np.testing.assert_allclose(np.asarray(got_h), (xs.astype(np.float64) @ w.T).astype(np.float32), rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(np.asarray(got_g), q_w[idx], rtol=1e-6, atol=1e-7)


# ---- ggml weights as TFLite's blockwise int4 / per-channel int8, for XNNPACK ---------------------------------

def dequantized(raw: np.ndarray, dtype: str, units: int, depth: int) -> np.ndarray:
    from litegpu.ops import _block_weights as bw

    return bw.dequantize_rows(np, None, raw, dtype, units, depth).astype(np.float64)


@pytest.mark.parametrize("scales,copies", [
    ("bfloat16", 1),       # positive scales bfloat16 holds: litert-torch's form, one copy
    ("float16", 2),        # positive float16 scales: their leading bits and the rest
    ("ggml", 2),           # ggml's quantizer: signed scales (and block sums), the quant -8 in every block
    ("tiny", 2),           # scales that are float16 subnormals
    ("zeros", 2),          # blocks of zeros (scale 0), and a row of them
])
def test_q4_0_weights_become_int4_blocks_exactly(scales, copies):
    from litegpu.ops import _block_weights as bw

    units, depth = 8, 128
    rng = np.random.default_rng(11)
    if scales in ("bfloat16", "float16"):
        raw, _ = make_ggml("ggml_q4_0", units, depth, seed=11)
        if scales == "bfloat16":
            blocks = raw.reshape(units, -1, 18).copy()
            d = blocks[..., :2].copy().view(np.float16)[..., 0].astype(np.float32)
            blocks[..., :2] = _half_bytes((d.view(np.uint32) & 0xFFFF0000).view(np.float32))
            raw = blocks.reshape(-1)
    else:
        w = rng.standard_normal((units, depth)).astype(np.float32) * (1e-4 if scales == "tiny" else 0.05)
        if scales == "zeros":
            w[0] = 0
            w[1:, :64] = 0
        raw = ggml_quantized_q4_0(w)
    mapped = bw.as_tflite_weights(raw, "ggml_q4_0", units, depth)
    assert mapped.dtype == "int4" and mapped.copies == copies
    assert mapped.values.shape == (units, copies * depth)
    assert mapped.values.min() >= -8 and mapped.values.max() <= 7
    s = mapped.scales.astype(np.float32)
    assert np.all(s >= 2.0 ** -14) and np.all(np.isfinite(s))  # what XNNPACK takes: positive, normal
    assert not np.any(s.view(np.uint32) & 0xFFFF)  # ... and bfloat16 holds (it keeps them so)
    # the low bits of a float16 scale are mostly subnormal as float16: the input is scaled up first
    assert (mapped.input_scale == 1) == (scales == "bfloat16")
    # a negative block adds its |d| times the block's inputs' sum: ggml's scales only
    assert (mapped.block_sums is not None) == (scales not in ("bfloat16", "float16"))
    np.testing.assert_array_equal(mapped.dequantized(), dequantized(raw, "ggml_q4_0", units, depth))


def test_q8_0_rows_of_one_scale_become_int8_per_channel_exactly():
    from litegpu.ops import _block_weights as bw

    units, depth = 6, 96
    rng = np.random.default_rng(12)
    d = np.repeat(rng.uniform(-0.05, 0.05, (units, 1)), depth // 32, axis=1).astype(np.float16)
    d[2] = 0
    q = rng.integers(-127, 128, (units, depth // 32, 32)).astype(np.int8)
    q[0, 0, 0] = -128 if d[0, 0] > 0 else 127
    raw = np.concatenate([_half_bytes(d), q.view(np.uint8)], axis=-1).reshape(-1)
    mapped = bw.as_tflite_weights(raw, "ggml_q8_0", units, depth)
    assert mapped.dtype == "int8" and mapped.copies == 1 and mapped.input_scale == 1
    assert mapped.scales.dtype == np.float32 and np.all(mapped.scales > 0)
    np.testing.assert_array_equal(mapped.dequantized(), dequantized(raw, "ggml_q8_0", units, depth))


def test_ggml_weights_without_an_exact_form_say_why():
    from litegpu.ops import _block_weights as bw

    raw, _ = make_ggml("ggml_q8_0", 4, 64, seed=13)  # a scale per block
    assert "one scale per row" in bw.as_tflite_weights(raw, "ggml_q8_0", 4, 64)
    raw, _ = make_ggml("ggml_q4_1", 4, 64, seed=13)
    assert "no exact form" in bw.as_tflite_weights(raw, "ggml_q4_1", 4, 64)
    d = np.full((4, 2), -0.01, np.float16)  # a negative row holding -128
    q = np.full((4, 2, 32), -128, np.int8)
    raw = np.concatenate([_half_bytes(d), q.view(np.uint8)], axis=-1).reshape(-1)
    assert "-128" in bw.as_tflite_weights(raw, "ggml_q8_0", 4, 64)
    w = np.ones((4, 64), np.float32)
    w[0, :32] = 1e4  # scales 1250 (needs no scaling) beside 1.2e-4 whose low bits need 2^-24: past float16's range
    w[1, 32:] = 1e-3
    w[1, 32] = 0.9e-3
    assert "float16's normal range" in bw.as_tflite_weights(ggml_quantized_q4_0(w), "ggml_q4_0", 4, 64)
