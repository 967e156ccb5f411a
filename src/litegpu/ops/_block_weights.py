"""Circle's own weight types, dequantized inside the op that reads them: FULLY_CONNECTED and GATHER.

Not an op module (the leading underscore keeps ``_catalog`` from importing it as one): FULLY_CONNECTED
(``matmul.py``) and GATHER (``slicing.py``) call it for a weight of one of these types.

**ggml's blocks** (GGML_Q4_0, Q4_1, Q8_0, Q8_1).  The circle schema says they "follow the GGML
quantization spec ... placed with weight value in buffer following ggml's struct": a weight [units, depth]
is ggml's [ne1 = units, ne0 = depth], blocks of 32 along depth, each block ggml's ``block_q*`` struct
(``ggml-common.h``), little-endian:

    q4_0 (18 bytes): float16 d, 16 bytes qs   value (q - 8) * d
    q4_1 (20 bytes): float16 d, float16 m, qs  value q * d + m
    q8_0 (34 bytes): float16 d, int8 qs[32]    value q * d
    q8_1 (36 bytes): float16 d, float16 s, qs  value q * d (s = d * sum(q) serves dot products only)

where the 4-bit element j of a block is the low nibble of qs[j] and element j + 16 its high nibble (not
interleaved as TFLite packs int4).  onert (ONE's runtime) runs q4_0 and q8_0 weights, through ggml itself:

- GATHER is ``ggml_get_rows``: the rows picked, dequantized to float32 (``dequantize_row_q*``): exact here.
- FULLY_CONNECTED is ``ggml_mul_mat``: ggml does not multiply by dequantized weights; it quantizes each
  input row per block of 32 to its kernel's activation type (q8_0 for q4_0 and q8_0 weights, q8_1 for
  q4_1: ``quantize_row_q8_*_ref``: d = amax / 127, q = roundf(x * (1 / d)), d stored as float16, q8_1's
  s = float16(d * sum(q))) and sums, per block, the exact integer dot product of the two blocks' quants
  times both scales: y = sum_b sumi * (d_w * d_x) (+ m_w * s_x for q4_1, whose quants are not centred).
  That is what litegpu computes (measured: onert's outputs within 2.4e-7, a float32 rounding per block
  of its SIMD kernels' order, where dequantize-then-multiply differed by 1.8e-2).  q8_1 weights have no
  ggml kernel (ggml uses q8_1 for activations only): their values d * q are q8_0's, and litegpu multiplies
  them as q8_0's.

**UINT4** weights are affine (scale, zero point, per tensor or per output channel): no ONE kernel
multiplies them (onert refuses UINT4), so FULLY_CONNECTED gives the dequantize-then-multiply result
y = x . ((q - zero_point) * scale)^T, computed as (x . (q - zero_point)^T) * scale; GATHER gives the
dequantized rows.

**MXFP4 / MXINT8** are refused: a circle file has no place for an MX tensor's shared exponents
(``MXQuantization`` holds only the axis), and ONE uses these types for activations between QUANTIZE and
DEQUANTIZE, not for stored weights.

On XLA the weights stay as the file holds them: the ggml bytes (one uint8 parameter, scales inside the
blocks), UINT4 in XLA's 4-bit type on a GPU.  The product is taken block by block on the quants (exact
integer partial sums in float32: |sumi| <= 32 * 128 * 127 < 2^24), and the scales multiply the partial
sums, never a materialized float weight (as ``matmul._blockwise_fc_partial_sums`` for TFLite's blockwise
int4), so XLA converts the quants inside the product's kernel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ModelExecutionError
from . import _fixedpoint as fp

BLOCK = 32  # elements per ggml block (QK4_0 = QK4_1 = QK8_0 = QK8_1)


@dataclass(frozen=True)
class GgmlLayout:
    block_bytes: int
    bits: int               # 4: nibbles, 8: int8 quants
    header_halves: int      # float16 fields before the quants (d; d, m; d, s)
    centre: int             # subtracted from the stored quant (q4_0: 8)
    has_min: bool           # q4_1: value q * d + m
    activation: str         # ggml's vec_dot_type for this weight type: the input rows' quantization


GGML = {
    "ggml_q4_0": GgmlLayout(18, 4, 1, 8, False, "q8_0"),
    "ggml_q4_1": GgmlLayout(20, 4, 2, 0, True, "q8_1"),
    "ggml_q8_0": GgmlLayout(34, 8, 1, 0, False, "q8_0"),
    "ggml_q8_1": GgmlLayout(36, 8, 2, 0, False, "q8_0"),
}
MX_TYPES = ("mxfp4", "mxint8")
MX_REFUSAL = ("circle has no place for the shared exponents of an MX weight (MXQuantization holds only the "
              "axis; ONE uses MXFP4 / MXINT8 for activations between QUANTIZE and DEQUANTIZE)")


def is_block_weight(dtype: str) -> bool:
    return dtype in GGML


def block_reason(w: Any, what: str) -> str | None:
    """Why a ggml weight of this IR tensor cannot be read (None: it can): a constant [units, depth] with whole
    blocks along depth."""
    if w.raw is None or w.raw.size == 0:
        return f"{w.dtype} {what} must be a constant of the model"
    if len(w.shape) != 2 or w.shape[1] % BLOCK:
        return f"{w.dtype} {what} must be [units, depth] with depth a multiple of {BLOCK}, got {list(w.shape)}"
    return None


def uint4_reason(w: Any, what: str) -> str | None:
    """UINT4 weights need affine quantization, per tensor or along axis 0 (their units / rows)."""
    q = w.quantization
    if q is None or not q.is_affine:
        return f"uint4 {what} need a quantization scale"
    if q.details is not None:
        return f"uint4 {what} with {q.details.get('type')} quantization are not supported"
    if len(q.scale) > 1 and (q.quantized_dimension != 0 or len(q.scale) != w.shape[0]):
        return (f"uint4 {what} quantized along axis {q.quantized_dimension} with {len(q.scale)} scales are not "
                f"supported (per tensor, or one scale per row of {w.shape[0]})")
    return None


# --- decoding ggml blocks ---------------------------------------------------------------------------------

def _halves(xp: Any, lax: Any, pairs: Any) -> Any:
    """float32 values of little-endian float16 fields (uint8 [..., 2])."""
    bits = pairs[..., 0].astype(xp.uint16) | (pairs[..., 1].astype(xp.uint16) << 8)
    if lax is None:
        return np.ascontiguousarray(bits).view(np.float16).astype(np.float32)
    return lax.bitcast_convert_type(bits, xp.float16).astype(xp.float32)


def decode_blocks(xp: Any, lax: Any, raw: Any, dtype: str, rows: int, depth: int) -> tuple[list, Any, Any]:
    """(quants, d [rows, blocks] float32, m [rows, blocks] float32 for q4_1 else None) of ``raw``, the ggml
    bytes of ``rows`` rows of ``depth`` elements.  ``quants``: int8 arrays whose concatenation along the last
    axis is the blocks' quants [rows, blocks, 32] (centred: q4_0's minus 8): 4-bit blocks as their low and
    high nibbles [rows, blocks, 16] each, which a product takes apart (XLA GPU fuses the nibbles' unpacking
    into the product's kernel, not a concatenation of them), 8-bit ones as one array."""
    layout = GGML[dtype]
    blocks = depth // BLOCK
    shape = (rows, blocks, layout.block_bytes)
    data = xp.asarray(raw).reshape(shape)
    d = _halves(xp, lax, data[..., 0:2])
    m = _halves(xp, lax, data[..., 2:4]) if layout.has_min else None
    start = 2 * layout.header_halves
    if layout.bits == 4:
        qs = data[..., start:start + BLOCK // 2]
        centre = np.int8(layout.centre)
        quants = [(qs & 0x0F).astype(xp.int8) - centre, (qs >> 4).astype(xp.int8) - centre]
    else:
        # the bytes read as int8 before slicing (a bitcast of the whole parameter costs nothing)
        signed = np.asarray(raw).view(np.int8) if lax is None else lax.bitcast_convert_type(xp.asarray(raw), xp.int8)
        quants = [signed.reshape(shape)[..., start:start + BLOCK]]
    return quants, d, m


def dequantize_rows(xp: Any, lax: Any, raw: Any, dtype: str, rows: int, depth: int) -> Any:
    """float32 [rows, depth] as ggml's ``dequantize_row_q*``: q * d (+ m), one float32 rounding each."""
    quants, d, m = decode_blocks(xp, lax, raw, dtype, rows, depth)
    values = xp.concatenate(quants, axis=-1).astype(xp.float32) * d[..., None]
    if m is not None:
        values = values + m[..., None]
    return values.reshape(rows, depth)


# --- the input rows quantized as ggml's kernels do ----------------------------------------------------------

def quantize_rows_q8(xp: Any, x: Any) -> tuple[Any, Any, Any]:
    """``quantize_row_q8_0_ref`` / ``q8_1_ref`` of float32 rows [rows, depth]: (quants [rows, blocks, 32] int32,
    d [rows, blocks] as stored (float16, as float32), s [rows, blocks] = float16(d * sum(q)) as float32).
    d = amax / 127 in float32, quants = roundf(x * (1 / d)) (0 for an all-zero block)."""
    rows, depth = x.shape
    blocks = x.astype(xp.float32).reshape(rows, depth // BLOCK, BLOCK)
    amax = xp.max(xp.abs(blocks), axis=-1)
    d = fp.divide_f32_exactly(xp, amax, 127.0)
    nonzero = d != 0
    inverse = xp.where(nonzero, xp.float32(1) / xp.where(nonzero, d, xp.float32(1)), xp.float32(0)).astype(xp.float32)
    quants = fp.round_half_away_from_zero(xp, (blocks * inverse[..., None]).astype(xp.float32)).astype(xp.int32)
    stored_d = d.astype(xp.float16).astype(xp.float32)
    sums = (quants.sum(axis=-1).astype(xp.float32) * d).astype(xp.float16).astype(xp.float32)
    return quants, stored_d, sums


# --- FULLY_CONNECTED ----------------------------------------------------------------------------------------

def ggml_fc_reference(x: np.ndarray, raw: np.ndarray, dtype: str, units: int, depth: int) -> np.ndarray:
    """float32 [rows, units] of ggml's ``ggml_mul_mat`` (see the module doc), blocks summed in order."""
    quants, d_w, m_w = decode_blocks(np, None, raw, dtype, units, depth)
    q_x, d_x, s_x = quantize_rows_q8(np, x)
    quants = np.concatenate(quants, axis=-1).astype(np.int64)
    sumi = np.einsum("rbk,ubk->rub", q_x.astype(np.int64), quants).astype(np.float32)
    y = np.zeros((x.shape[0], units), np.float32)
    for b in range(depth // BLOCK):
        y = y + sumi[:, :, b] * (d_w[None, :, b] * d_x[:, None, b])
        if m_w is not None:
            y = y + m_w[None, :, b] * s_x[:, None, b]
    return y


def ggml_fc_partial_sums(xp: Any, lax: Any, rows_q8: tuple, raw: Any, dtype: str, units: int, depth: int) -> Any:
    """XLA GPU: float32 [rows, units]: the blocks' integer partial sums as one product batched over the blocks
    (exact in float32), then the scales on the partial sums.  ``rows_q8``: ``quantize_rows_q8`` of the input
    rows; ``raw``: the ggml bytes of ``units`` rows."""
    quants, d_w, m_w = decode_blocks(xp, lax, raw, dtype, units, depth)
    q_x, d_x, s_x = rows_q8
    q_x = q_x.astype(xp.float32)
    width = BLOCK // len(quants)
    partial = None  # [blocks, rows, units]: per half-block products, added (integers, exact)
    for h, half in enumerate(quants):
        product = lax.dot_general(q_x[..., h * width:(h + 1) * width], half.astype(xp.float32),
                                  (((2,), (2,)), ((1,), (1,))), precision=lax.Precision.HIGHEST)
        partial = product if partial is None else partial + product
    y = xp.sum(partial * (d_x.T[:, :, None] * d_w.T[:, None, :]), axis=0)
    return y if m_w is None else y + _minimum_term(xp, lax, s_x, m_w)


def ggml_fc_dequantized(xp: Any, lax: Any, rows_q8: tuple, raw: Any, dtype: str, units: int, depth: int) -> Any:
    """XLA CPU: the same quantized rows and quants, each times its scale (exact in float32: a quant of 8 bits
    at most times a float16), in one float matmul: sum_b d_w d_x sumi regrouped as sum_k (q_x d_x)(q_w d_w),
    equal to ``ggml_fc_partial_sums`` up to float32 rounding.  A CPU runs a matmul far faster than a product
    batched over blocks of 32 (a q4_0 MLP 1024-4096-1024, 16 rows: 5.5 against 32 ms, BENCHMARKS.md)."""
    quants, d_w, m_w = decode_blocks(xp, lax, raw, dtype, units, depth)
    q_x, d_x, s_x = rows_q8
    rows = q_x.shape[0]
    x = (q_x.astype(xp.float32) * d_x[..., None]).reshape(rows, depth)
    w = (xp.concatenate(quants, axis=-1).astype(xp.float32) * d_w[..., None]).reshape(units, depth)
    y = lax.dot_general(x, w, (((1,), (1,)), ((), ())), precision=lax.Precision.HIGHEST)
    return y if m_w is None else y + _minimum_term(xp, lax, s_x, m_w)


def ggml_fc_block_sums(xp: Any, lax: Any, rows_q8: tuple, raw: Any, dtype: str, units: int, depth: int) -> Any:
    """XLA CPU, few rows (a decode step): the blocks' integer dot products as an elementwise product reduced
    over each block (int32, exact), then the scales: XLA CPU fuses it into one loop over the weight's bytes,
    where a product over converted weights first writes them out (a q4_0 11008 x 4096 matrix-vector product:
    41 ms against 233 ms dequantized and 347 ms batched over the blocks, measured on 2 cores)."""
    quants, d_w, m_w = decode_blocks(xp, lax, raw, dtype, units, depth)
    q_x, d_x, s_x = rows_q8
    width = BLOCK // len(quants)
    products = None
    for h, half in enumerate(quants):
        term = half[None].astype(xp.int32) * q_x[:, None, :, h * width:(h + 1) * width]
        products = term if products is None else products + term
    sumi = xp.sum(products, axis=-1)  # [rows, units, blocks]
    y = xp.sum(sumi.astype(xp.float32) * (d_w[None] * d_x[:, None, :]), axis=-1)
    return y if m_w is None else y + _minimum_term(xp, lax, s_x, m_w)


def _minimum_term(xp: Any, lax: Any, s_x: Any, m_w: Any) -> Any:
    """q4_1's sum_b m_w * s_x (s_x = float16(d_x * sum q_x), as ggml stores it)."""
    return lax.dot_general(s_x, m_w, (((1,), (1,)), ((), ())), precision=lax.Precision.HIGHEST)


def uint4_fc(xp: Any, lax: Any, x: Any, q: Any, scales: Any, zero_points: Any, stored: Any = None) -> Any:
    """float32 [rows, units] of float rows times UINT4 weights q [units, depth] (values 0..15): numpy gives
    the dequantize-then-multiply product.  XLA multiplies by q - 8 and adds (8 - zero_point) * sum(x): with
    ``stored``, the weight as the GPU holds it (XLA's uint4), q - 8 is the uint4 XOR 8 read as int4, which
    XLA GPU converts inside the product's kernel (it converts no uint4 there: a float32 copy of the weight
    was made for a prefill, ``bench/gpu/gpu_compile.py``); then the scales multiply the product."""
    if lax is None:
        weights = ((q.astype(np.float32) - zero_points[:, None]) * scales[:, None]).astype(np.float32)
        return x.astype(np.float32) @ weights.T
    if stored is not None and stored.dtype == xp.uint4:
        centred = lax.bitcast_convert_type(stored ^ xp.uint4(8), xp.int4).astype(xp.float32)
    else:
        centred = q.astype(xp.float32) - xp.float32(8)
    x = x.astype(xp.float32)
    y = lax.dot_general(x, centred, (((1,), (1,)), ((), ())), precision=lax.Precision.HIGHEST)
    y = y + xp.sum(x, axis=-1, keepdims=True) * (xp.float32(8) - xp.asarray(zero_points))[None, :]
    return y * xp.asarray(scales)[None, :]


def affine_parameters(ctx: Any, t: Any, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """(scales, zero points) float32 per row of an affine UINT4 tensor (one value broadcast, or one per row)."""
    q = t.quantization
    scales = np.asarray(q.scale, np.float32)
    zero_points = np.asarray(q.zero_point or [0], np.float32)
    if scales.size not in (1, rows) or zero_points.size not in (1, scales.size):
        raise ModelExecutionError(f"{ctx.op}: the uint4 tensor {t.name!r} has {scales.size} scales and "
                                  f"{zero_points.size} zero points for {rows} rows")
    return np.broadcast_to(scales, (rows,)).copy(), np.broadcast_to(zero_points, (rows,)).copy()


# --- ggml weights as TFLite weights, for XNNPACK --------------------------------------------------------------
#
# XNNPACK multiplies float rows by int4 weights blockwise (``qd8_f32_qb4w``: one scale per block, kept as
# bfloat16, positive and normal as float16 in the file) and by int8 weights per channel (``qd8_f32_qc8w``, float32
# scales), each input row quantized to int8 as a whole.  A ggml weight maps onto those exactly where its values
# are sums of such weights:
#
# - q4_0 (q in -8..7 times a float16 d of either sign; ggml's quantizer makes half the scales negative, and gives
#   the block's largest value the quant -8): a negative block is (-q - 1) * |d| + |d|, its quants -q - 1 in
#   -8..7 again, and |d| times the sum of the block's inputs a float FULLY_CONNECTED of [units, depth / 32]
#   weights on those sums (a 32nd of the work).  A scale bfloat16 does not hold is hi + lo, hi its leading 8
#   significant bits and lo the rest (3 bits: bfloat16 holds it), each a copy of the weight along depth fed
#   the input once more (CONCATENATION): twice the int4 products.  Scales too small for a normal float16 (lo of
#   a small d) are scaled up by a power of two that the input is multiplied by first (exact).
# - q8_0 / q8_1 rows whose blocks all share one scale: per-channel int8.  Rows of several scales (what ggml
#   writes) have no exact form there, and stay on XLA.
#
# The products then differ from ggml's as XNNPACK's row quantization differs from ggml's per block of 32 (a
# ggml-quantized 11008 x 4096 weight: 0.9 % of the largest output off the float product of the same weights,
# ggml's own rounding 0.6 %).

# float16's smallest normal and largest finite values: XNNPACK refuses subnormal block scales
_HALF_TINY, _HALF_MAX = 2.0 ** -14, 65504.0


@dataclass(frozen=True)
class TfliteWeights:
    """ggml weights [units, depth] as TFLite weights for a FULLY_CONNECTED whose input is first multiplied by
    ``input_scale`` (a power of two; 1: not at all) and concatenated ``copies`` times along its last axis, plus
    (``block_sums``) a float FULLY_CONNECTED on the sums of the input's blocks of ``BLOCK``."""

    values: np.ndarray     # int8 [units, copies * depth]: int4 range where ``dtype`` is int4
    dtype: str             # "int4" (blockwise, blocks of ``BLOCK``) or "int8" (per channel)
    scales: np.ndarray     # float16 [units, copies * depth / BLOCK] (int4), float32 [units] (int8)
    copies: int
    input_scale: float
    block_sums: np.ndarray | None = None  # float32 [units, depth / BLOCK]: what each block adds to its every value

    def dequantized(self) -> np.ndarray:
        """float64 [units, depth]: the weights these stand for, the copies summed (each product is exact)."""
        units = self.values.shape[0]
        if self.dtype == "int8":
            w = self.values.astype(np.float64) * self.scales.astype(np.float64)[:, None]
        else:
            blocks = self.values.reshape(units, -1, BLOCK).astype(np.float64)
            w = (blocks * self.scales.astype(np.float64)[..., None]).reshape(units, -1)
        w = w.reshape(units, self.copies, -1).sum(axis=1) * self.input_scale
        if self.block_sums is not None:
            w = w + np.repeat(self.block_sums.astype(np.float64), BLOCK, axis=1)
        return w


def as_tflite_weights(raw: np.ndarray, dtype: str, units: int, depth: int) -> TfliteWeights | str:
    """``raw`` (ggml bytes of [units, depth]) as weights XNNPACK multiplies (see above), or why there are none."""
    quants, d, _ = decode_blocks(np, None, raw, dtype, units, depth)
    q = np.concatenate(quants, axis=-1)  # [units, blocks, 32]
    if dtype in ("ggml_q8_0", "ggml_q8_1"):
        return _per_channel_int8(q, d, units, depth)
    if dtype != "ggml_q4_0":
        return f"{dtype} weights have no exact form in XNNPACK's kernels (q4_0 and q8_0 do)"
    negative = d < 0
    values = np.where(negative[..., None], -q - 1, q).astype(np.int8)  # -8..7
    parts = _bfloat16_parts(np.abs(d))
    nonzero = np.concatenate(parts, axis=1)
    nonzero = nonzero[nonzero != 0]
    input_scale = 1.0
    if nonzero.size:
        smallest, largest = float(nonzero.min()), float(nonzero.max())
        if smallest < _HALF_TINY:
            input_scale = 2.0 ** math.floor(math.log2(smallest / _HALF_TINY))
        if largest / input_scale > _HALF_MAX:
            return (f"block scales from {smallest:.3g} to {largest:.3g}: more than float16's normal range, which "
                    "XNNPACK's block scales must fit")
    # a block of scale 0 gets scale 1 and zero values (XNNPACK refuses a zero scale)
    copies = [np.where((scale == 0)[..., None], 0, values).reshape(units, depth) for scale in parts]
    scales = np.concatenate([np.where(scale == 0, 1.0, scale / input_scale) for scale in parts], axis=1)
    block_sums = np.where(negative, -d, 0).astype(np.float32) if negative.any() else None
    return TfliteWeights(np.concatenate(copies, axis=1), "int4", scales.astype(np.float16), len(parts),
                         input_scale, block_sums)


def _bfloat16_parts(scale: np.ndarray) -> list[np.ndarray]:
    """float32 scales (float16 values, >= 0) as one or two arrays of values bfloat16 holds, summing to them
    exactly: the leading 8 significant bits, and the rest where any scale has more."""
    hi = (scale.astype(np.float32).view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
    lo = scale - hi  # exact: at most the 3 low bits of a float16's significand
    return [hi, lo] if np.any(lo != 0) else [hi]


def _per_channel_int8(q: np.ndarray, d: np.ndarray, units: int, depth: int) -> TfliteWeights | str:
    """q8 blocks as int8 weights per channel, where every row's blocks share one scale."""
    if np.any(d != d[:, :1]):
        return ("q8_0 rows with more than one block scale: XNNPACK's int8 weights take one scale per row "
                "(its blockwise kernels take int4 only)")
    scale = d[:, 0]
    values = np.where((scale < 0)[:, None, None], -q.astype(np.int16), q).reshape(units, depth)
    if values.max(initial=0) > 127:
        return "a row of negative scale holds the quant -128, whose negation int8 lacks"
    scale = np.where(scale == 0, 1.0, np.abs(scale)).astype(np.float32)
    values = np.where((d[:, :1] == 0), 0, values).astype(np.int8)
    return TfliteWeights(values, "int8", scale, 1, 1.0)


# --- GATHER -------------------------------------------------------------------------------------------------

def gather_rows(ctx: Any, table: Any, indices: Any) -> Any:
    """float32 [*indices.shape, depth]: the rows of the ggml or UINT4 table [units, depth] that ``indices`` pick,
    dequantized (only those rows are decoded)."""
    xp, lax, t = ctx.xp, ctx.lax, ctx.input(0)
    units, depth = t.shape
    flat = xp.reshape(indices, (-1,))
    count = int(math.prod(indices.shape))
    if t.dtype in GGML:
        stored = xp.reshape(xp.asarray(table), (units, -1))
        rows = dequantize_rows(xp, lax, xp.take(stored, flat, axis=0), t.dtype, count, depth)
    else:
        scales, zero_points = affine_parameters(ctx, t, units)
        picked = xp.take(xp.asarray(table), flat, axis=0).astype(xp.float32)
        if lax is None:
            rows = ((picked - zero_points[flat][:, None]) * scales[flat][:, None]).astype(np.float32)
        else:
            zero, scale = xp.take(xp.asarray(zero_points), flat), xp.take(xp.asarray(scales), flat)
            rows = (picked - zero[:, None]) * scale[:, None]
    return xp.reshape(rows, tuple(indices.shape) + (depth,))
