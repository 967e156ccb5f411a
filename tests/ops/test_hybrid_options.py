"""The dynamic-range (hybrid) FULLY_CONNECTED over its option space, and a dynamic-range transformer encoder
op by op, against the official builtin kernels.

A hybrid kernel quantizes each input row on the fly, so a one-ulp difference in a float input can move a
row's rounding and change the output by a quantization step: whole-model comparisons of dynamic-range
models inherit the float ops' summation-order noise (see the encoder test).  What must hold, and what these
tests check, is that every hybrid op given the official inputs gives the official outputs bit for bit.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from litegpu.ir import Buffer, Quantization, read_model
from litegpu.ir.builder import quantization
from litegpu.ir.save import to_bytes, write_model
from oracle import assert_close, litert, one_op_model, run_official, run_ours

UNITS, DEPTH = 24, 32


def int8_weights(w: np.ndarray, per_channel: bool) -> tuple[np.ndarray, Quantization]:
    """Symmetric int8 weights as the converter's dynamic-range quantization makes them."""
    if per_channel:
        scale = (np.maximum(np.abs(w).max(axis=1), 1e-12) / 127).astype(np.float32)
        return np.clip(np.round(w / scale[:, None]), -127, 127).astype(np.int8), quantization(scale, 0, axis=0)
    scale = np.float32(max(float(np.abs(w).max()), 1e-12) / 127)
    return np.clip(np.round(w / scale), -127, 127).astype(np.int8), quantization(float(scale), 0)


@pytest.mark.parametrize("activation", ["NONE", "RELU"])
@pytest.mark.parametrize("in_shape", [(2, 7, DEPTH), (7, DEPTH), (1, 1, DEPTH)], ids=str)
@pytest.mark.parametrize("keep_num_dims", [False, True])
@pytest.mark.parametrize("asymmetric", [False, True])
@pytest.mark.parametrize("per_channel", [False, True])
def test_hybrid_fully_connected_matches_official(per_channel, asymmetric, keep_num_dims, in_shape, activation):
    rng = np.random.default_rng(0)
    w, q = int8_weights(rng.normal(size=(UNITS, DEPTH)).astype(np.float32), per_channel)
    x = (rng.normal(size=in_shape) * 3).astype(np.float32)
    out = in_shape[:-1] + (UNITS,) if keep_num_dims else (int(np.prod(in_shape[:-1])), UNITS)
    bias = rng.normal(size=UNITS).astype(np.float32)
    model, feeds = one_op_model("FULLY_CONNECTED", [x, ("const", w), ("const", bias)],
                                [(out, "float32")], input_quant={1: q}, keep_num_dims=keep_num_dims,
                                asymmetric_quantize_inputs=asymmetric, fused_activation_function=activation)
    check_exact_on_reference(model, feeds)


def check_exact_on_reference(model, feeds, expected=None) -> None:
    """Our reference kernels bit for bit; the XLA lowering within float rounding (it may fuse the scale
    multiplications in another order)."""
    data = to_bytes(model)
    if expected is None:
        expected = run_official(data, feeds)[0]
    ours = read_model(data)
    assert_close(run_ours(ours, feeds, False)[0], expected, 0, 0, "reference")
    assert_close(run_ours(ours, feeds, True)[0], expected, 1e-6, 1e-6 * float(np.abs(expected).max()), "xla")


# ---- a dynamic-range transformer encoder, op by op ----------------------------------------------

def dynamic_range_encoder(float_model: Path, out: Path) -> Path:
    """The float encoder with every constant FULLY_CONNECTED weight as int8 per channel, asymmetric inputs
    (what the TF converter's dynamic-range quantization produces)."""
    m = read_model(float_model)
    sg = m.subgraphs[0]
    tensors, buffers, ops = list(sg.tensors), list(m.buffers), []
    for op in sg.operators:
        t = tensors[op.inputs[1]] if op.opcode_name == "FULLY_CONNECTED" else None
        if t is not None and t.dtype == "float32" and t.data is not None:
            q, quant = int8_weights(np.asarray(t.data, np.float32), per_channel=True)
            buffers.append(Buffer(np.frombuffer(q.tobytes(), np.uint8).copy()))
            tensors[t.index] = replace(t, dtype="int8", buffer=len(buffers) - 1, quantization=quant, raw=None)
            options = dict(op.options)
            options["asymmetric_quantize_inputs"] = True
            op = replace(op, options=type(op.options)(options))
        ops.append(op)
    write_model(replace(m, subgraphs=(replace(sg, tensors=tuple(tensors), operators=tuple(ops)),),
                        buffers=tuple(buffers)), out)
    return out


@pytest.mark.slow
def test_dynamic_range_encoder_hybrid_ops_match_official_given_official_inputs(shared_models, tmp_path):
    path = dynamic_range_encoder(shared_models / "transformer_encoder_float32.tflite", tmp_path / "encoder.tflite")
    ids = np.load(shared_models / "transformer_encoder_float32.reference.npz")["serving_default/in/input_ids"]
    official = litert.Interpreter(model_path=str(path), experimental_preserve_all_tensors=True,
                                  experimental_op_resolver_type=litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    official.allocate_tensors()
    official.set_tensor(official.get_input_details()[0]["index"], ids)
    official.invoke()
    sg = read_model(path).subgraphs[0]
    hybrid = [op for op in sg.operators
              if op.opcode_name == "FULLY_CONNECTED" and sg.tensors[op.inputs[1]].dtype == "int8"]
    assert len(hybrid) >= 20
    for op in hybrid:
        w_t = sg.tensors[op.inputs[1]]
        inputs = [official.get_tensor(op.inputs[0]), ("const", np.asarray(w_t.data))]
        if len(op.inputs) > 2 and op.inputs[2] >= 0:
            inputs.append(("const", np.asarray(sg.tensors[op.inputs[2]].data)))
        out_t = sg.tensors[op.outputs[0]]
        model, feeds = one_op_model("FULLY_CONNECTED", inputs, [(out_t.shape, "float32")],
                                    input_quant={1: w_t.quantization}, **dict(op.options))
        expected = official.get_tensor(op.outputs[0])
        assert_close(run_official(to_bytes(model), feeds)[0], expected, 0, 0, f"op #{op.index} alone (official)")
        check_exact_on_reference(model, feeds, expected)


def test_asymmetric_input_quantization_rounds_the_product_then_adds_the_zero_point():
    """Row range [-7.9375, 8]: scale 1/16, zero point -1, so x * 16 lands on exact .5 ties.  The official
    kernel rounds them half away from zero before adding the zero point (-27.5 -> -28, 26.5 -> 27); rounding
    zero_point + x * 16 would give -28 -> -29 / 25.5 -> 26 and half-even 26.5 -> 26.  An identity weight
    matrix makes the output (q - zero_point) / 16."""
    row = np.array([[-7.9375, 8.0, -1.71875, 1.71875, 1.65625, -1.65625, -0.03125, 0.03125]], np.float32)
    model, feeds = one_op_model("FULLY_CONNECTED", [row, ("const", np.eye(8, dtype=np.int8))], [((1, 8), "float32")],
                                input_quant={1: quantization(1.0, 0)}, asymmetric_quantize_inputs=True)
    expected = np.array([[-127, 128, -28, 28, 27, -27, -1, 1]], np.float32) / 16
    assert_close(run_official(to_bytes(model), feeds)[0], expected, 0, 0, "official")
    check_exact_on_reference(model, feeds, expected)
