"""Repeated layers traced once in a loop (``backends.xla.layer_scan`` and the XLA backend's scan over them): found in
the decoders of bench/models/decoder_model.py, refused where blocks differ in what kernels read as constants, and giving
the same results as the subgraph traced op by op, with the weights held once (stacked)."""

from pathlib import Path

import numpy as np
import pytest

from litegpu.backends.xla import device as xla_device, state as xla_state, backend as xla_backend
from litegpu.backends.xla.layer_scan import find_blocks
from litegpu.backends.reference import ReferenceBackend
from litegpu.compile.float_view import float_view
from oracle import load_bench_module

dm = load_bench_module("decoder_model")


def decoder(weights="float32", layers=5, **kw):
    config = dm.DecoderConfig(layers=layers, width=64, heads=4, vocab=96, max_len=24, prefill_len=4, weights=weights,
                              **kw)
    return config, dm.build_decoder(config)


@pytest.mark.parametrize("weights", ["float32", "float16", "int4"])
def test_the_layers_of_a_decoder_are_found(weights):
    config, model = decoder(weights)
    for sg in model.subgraphs:
        blocks = find_blocks(sg, is_weight=lambda t: t.raw is not None and t.raw.size > 0 and t.num_elements > 256)
        assert blocks is not None and blocks.count == config.layers
        # every op of a layer is in the blocks; the embedding before, the final norm and the head after
        assert len(blocks.before) + blocks.count * blocks.period + len(blocks.after) == len(sg.operators)
        caches = {t for _, per_block in blocks.stacked for t in per_block if t in sg.inputs}
        assert len(caches) == 2 * config.layers  # the KV cache inputs, one slot for k and one for v
        assert len(blocks.last) == 1 and len(blocks.collected) == 2  # the hidden state; the new caches


def test_blocks_whose_quantization_differs_are_not_looped_but_the_float_view_of_them_is():
    """Per-channel int8 scales differ from layer to layer, and the hybrid kernels read them as constants; the
    GPU's float view scales the weights with a MUL by a constant instead, which the loop stacks."""
    config, model = decoder("int8")
    assert all(find_blocks(sg) is None for sg in model.subgraphs)
    for sg in float_view(model).subgraphs:
        blocks = find_blocks(sg)
        assert blocks is not None and blocks.count == config.layers


def test_too_few_repeats_are_traced_as_they_are():
    _, model = decoder(layers=2)
    assert all(find_blocks(sg) is None for sg in model.subgraphs)


@pytest.mark.parametrize("weights, platform", [("float32", "cpu"), ("float16", "cpu"), ("float16", "gpu"),
                                               ("int8", "gpu"), ("int4", "gpu")])
def test_looped_layers_compute_what_the_ops_traced_one_by_one_compute(monkeypatch, weights, platform):
    """``platform`` gpu: the GPU's rules (parameters, lowerings, the float view) on the XLA CPU device."""
    config, model = decoder(weights)
    if platform == "gpu":
        model = float_view(model)
    rng = np.random.default_rng(3)
    sig = next(s for s in model.signatures if s.key == "prefill")
    sg = model.subgraphs[sig.subgraph_index]
    inputs = [np.asarray(rng.integers(1, config.vocab, (1, config.prefill_len)), np.int32), np.asarray([2], np.int32)]
    inputs += [rng.standard_normal(sg.tensors[t].shape).astype(np.float32) for t in sg.inputs[2:]]
    results = {}
    for scan in (3, 0):
        monkeypatch.setattr(xla_state, "SCAN_MIN_BLOCKS", scan)
        state = xla_state.XlaState(model, xla_device.device_for("cpu"), platform=platform)
        assert (sig.subgraph_index in state.regions) == bool(scan)
        backend = xla_backend.XlaBackend(model, sig.subgraph_index, "cpu", state=state)
        if platform == "gpu":
            backend.target = xla_backend.Target.XLA_GPU
        results[scan] = [np.asarray(y) for y in backend.run(inputs)]
        if scan:
            stacked = [v for k, v in state.params.items() if k.startswith("stack ")]
            assert stacked and all(v.shape[0] == config.layers for v in stacked)
            # each weight held once: the stacks replace the layers' own parameters
            in_stacks = {int(b) for k in state.params if k.startswith("stack ")
                         for b in k.rsplit("buffers ", 1)[1].split(",") if b.isdigit()}
            assert in_stacks and not any(k.startswith(f"buffer {b} ") for k in state.params for b in in_stacks)
    for looped, unrolled in zip(results[3], results[0]):
        np.testing.assert_allclose(looped, unrolled, rtol=2e-5, atol=2e-5)
    if weights == "float32":
        expected = ReferenceBackend(model, sig.subgraph_index).run(inputs)
        for looped, want in zip(results[3], expected):
            np.testing.assert_allclose(looped, want, rtol=1e-4, atol=1e-4)


LITERT_TORCH_DEEP = Path(__file__).resolve().parents[2] / "heldout" / "litert_torch" / "smollm_5layers_int4_block32.tflite"


@pytest.mark.skipif(not LITERT_TORCH_DEEP.exists(), reason="the 5-layer litert-torch export is not here")
def test_litert_torch_layers_with_their_composites_loop_with_the_same_results(monkeypatch):
    """litert-torch calls one decomposition subgraph per layer (RMSNorm, attention composites); alike, they loop.
    The first layer makes what the later ones share, so the loop starts at the second."""
    from litegpu.compile.rewrites import rewrite_for_xla
    from litegpu.ir import read_model

    model = rewrite_for_xla(read_model(LITERT_TORCH_DEEP))
    decode = next(s for s in model.signatures if s.key == "decode")
    sg = model.subgraphs[decode.subgraph_index]
    blocks = find_blocks(sg, model=model)
    assert blocks is not None and blocks.count == 4 and any(
        sg.operators[op].opcode_name == "STABLEHLO_COMPOSITE" for op in blocks.blocks[0])
    rng = np.random.default_rng(0)
    inputs = []
    for t in sg.inputs:
        tensor = sg.tensors[t]
        if "pos" in tensor.name:
            inputs.append(np.asarray([7], np.int32))
        elif tensor.dtype == "int32":
            inputs.append(rng.integers(1, 100, tensor.shape).astype(np.int32))
        else:
            inputs.append(rng.standard_normal(tensor.shape).astype(np.float32))
    results, held = {}, {}
    for scan in (3, 0):
        monkeypatch.setattr(xla_state, "SCAN_MIN_BLOCKS", scan)
        state = xla_state.XlaState(model, xla_device.device_for("cpu"), platform="gpu")
        assert (decode.subgraph_index in state.regions) == bool(scan)
        held[scan] = state.weight_bytes()
        backend = xla_backend.XlaBackend(model, decode.subgraph_index, "cpu", state=state)
        backend.target = xla_backend.Target.XLA_GPU
        results[scan] = [np.asarray(y) for y in backend.run(inputs)]
    for looped, unrolled in zip(results[3], results[0]):
        np.testing.assert_allclose(looped, unrolled, rtol=1e-5, atol=1e-5)
    # the prefills loop over 3 layers, decode over 4: they share one stack per weight, read at an offset
    assert held[3] == held[0]


def blaze_blocks(blocks: int = 4, channels: int = 16, seed: int = 0):
    """BlazePalm's shape of block (MediaPipe's palm and face detectors): a 5x5 DEPTHWISE_CONV_2D, a PRELU, and
    last the DEQUANTIZE of the next block's float16 filter, so that each block reads a filter the block before
    made from its own weights (a carried value that only weights make); the depthwise bias is one tensor for all."""
    from litegpu.ir.builder import ModelBuilder

    rng = np.random.default_rng(seed)
    b = ModelBuilder()
    h = b.input("x", (1, 8, 8, channels))

    def dequantized(name, shape):
        out = b.tensor(name, shape)
        b.op("DEQUANTIZE", [b.constant(f"{name}_f16", rng.uniform(-0.5, 0.5, shape).astype(np.float16))], [out])
        return out

    filt = dequantized("w0", (1, 5, 5, channels))
    bias = dequantized("bias", (channels,))
    for k in range(blocks):
        y = b.tensor(f"dw{k}", (1, 8, 8, channels))
        b.op("DEPTHWISE_CONV_2D", [h, filt, bias], [y], padding="SAME", stride_w=1, stride_h=1, depth_multiplier=1)
        alpha = dequantized(f"alpha{k}", (1, 1, channels))
        h = b.tensor(f"h{k}", (1, 8, 8, channels))
        b.op("PRELU", [y, alpha], [h])
        filt = dequantized(f"w{k + 1}", (1, 5, 5, channels))
    out = b.tensor("y", (1, 8, 8, channels))
    b.op("DEPTHWISE_CONV_2D", [h, filt, bias], [out], padding="SAME", stride_w=1, stride_h=1, depth_multiplier=1)
    b.output(out)
    return b.build(), [rng.uniform(-1, 1, (1, 8, 8, channels)).astype(np.float32)]


def test_a_filter_the_block_before_dequantized_is_each_blocks_own():
    """A carried value that a block computes from weights alone is traced when the block's step leaves, with that
    block's weights (it was traced from the first block's: every later block ran the second block's filter, and
    the palm detector's outputs were thousands off)."""
    from oracle import assert_builtin_bits

    model, inputs = blaze_blocks()
    state = xla_state.XlaState(model, xla_device.device_for("cpu"), official_float_order=True)
    region = state.regions[0]
    assert region.count == 4 and any(
        model.main.operators[region.blocks[0][j]].opcode_name == "DEQUANTIZE" for _, _, (j, _) in region.carried)
    assert_builtin_bits(model, inputs)
