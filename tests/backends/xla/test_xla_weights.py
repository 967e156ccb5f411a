"""How XlaState / XlaBackend hold and convert weights (issue 9: big models on the CPU).

float16, int8 and int4 weights stay program parameters in their stored type and are converted where
each layer uses them, so a compiled decoder's temporary memory is about one layer's float32 weights,
not all of them; big quantized weights are parameters (int4 still packed), not program constants;
folded results are shared by the signatures; and tying a conversion to the activations never
changes a value.
"""

import numpy as np
import pytest
from oracle import load_bench_module

from litegpu.backends.xla import device as xla_device, state as xla_state, tracer as xla_tracer, backend as xla_backend
from litegpu.backends.graph import GraphRunner
from litegpu.ops import Target
from litegpu.ops._common import tie_to

jax = pytest.importorskip("jax")
dm = load_bench_module("decoder_model")

WIDTH, LAYERS = 256, 4


def _config(weights, layers=LAYERS):
    return dm.DecoderConfig(weights=weights, layers=layers, width=WIDTH, heads=2, vocab=512, max_len=32,
                            prefill_len=4)


def _layer_float32_bytes(config):
    return 4 * (4 * config.width * config.width + 3 * config.width * config.hidden)


def _signature_inputs(model, key):
    sig = next(s for s in model.signatures if s.key == key)
    sg = model.subgraphs[sig.subgraph_index]
    rng = np.random.default_rng(1)
    inputs = []
    for t in sg.inputs:
        tensor = sg.tensors[t]
        if tensor.dtype == "int32":
            inputs.append(np.full(tensor.shape, 3, np.int32))
        else:
            inputs.append(rng.standard_normal(tensor.shape).astype(np.float32) * 0.1)
    return sig.subgraph_index, inputs


def _compile(model, key, state):
    index, inputs = _signature_inputs(model, key)
    backend = xla_backend.XlaBackend(model, index, state=state)
    lowered = backend._program.lower(backend.params, backend.variables, inputs)
    return backend, index, inputs, lowered, lowered.compile()


def _check_against_reference(model, backend, index, inputs):
    expected = GraphRunner(model, Target.REFERENCE).run_subgraph(index, inputs)
    for got, want in zip(backend.run(inputs), expected):
        np.testing.assert_allclose(np.asarray(got), want, rtol=2e-5, atol=2e-5)


@pytest.fixture
def no_folding(monkeypatch):
    monkeypatch.setattr(xla_state, "FOLD_BUDGET_BYTES", 0)
    monkeypatch.setattr(xla_state, "FOLD_GROWTH_BUDGET_BYTES", 0, raising=False)


@pytest.fixture
def quantized_params(monkeypatch):
    """Small models keep quantized weights in the program: make these small ones parameters."""
    monkeypatch.setattr(xla_state, "INT_PARAMS_MODEL_BYTES", 0, raising=False)
    monkeypatch.setattr(xla_state, "INT_PARAM_MIN_BYTES", 1024, raising=False)


@pytest.mark.parametrize("weights", ["float16", "int4"])
def test_converted_weights_take_one_layer_of_temp_memory(no_folding, quantized_params, weights):
    config = _config(weights)
    model = dm.build_decoder(config)
    state = xla_state.XlaState(model, xla_device.device_for("cpu"))
    backend, index, inputs, _, compiled = _compile(model, "decode", state)
    temp = compiled.memory_analysis().temp_size_in_bytes
    # All layers converted up front would take LAYERS x this.
    assert temp < 2 * _layer_float32_bytes(config), (temp, _layer_float32_bytes(config))
    _check_against_reference(model, backend, index, inputs)


@pytest.mark.parametrize("weights,stored", [("int8", np.int8), ("int4", np.uint8)])
def test_big_quantized_weights_are_parameters_not_constants(quantized_params, weights, stored):
    config = _config(weights, layers=2)
    model = dm.build_decoder(config)
    state = xla_state.XlaState(model, xla_device.device_for("cpu"))
    matrices = [p for p in state.params.values() if p.dtype == stored]
    elements = config.width * config.hidden
    # int4 stays packed, two values a byte, as in the file.
    assert any(p.size == (elements // 2 if weights == "int4" else elements) for p in matrices)
    weight_bytes = sum(p.nbytes for p in matrices)
    backend, index, inputs, lowered, _ = _compile(model, "prefill", state)
    # As constants the weights would be in the program text (as int32 or float32, in hex).
    assert len(lowered.as_text()) < weight_bytes
    _check_against_reference(model, backend, index, inputs)


def test_small_quantized_models_keep_weights_in_the_program():
    state = xla_state.XlaState(dm.build_decoder(_config("int8", layers=2)), xla_device.device_for("cpu"))
    assert not [p for p in state.params.values() if p.dtype == np.int8]


def test_signatures_share_folded_weights():
    config = _config("float16", layers=2)
    model = dm.build_decoder(config)
    state = xla_state.XlaState(model, xla_device.device_for("cpu"))
    prefill, decode = (next(s.subgraph_index for s in model.signatures if s.key == k) for k in ("prefill", "decode"))
    by_subgraph = {sg: {key for (where, _), key in state.folded.items() if where == sg} for sg in (prefill, decode)}
    # embedding, 7 matrices per layer, lm_head: each folded once for both signatures
    assert len(by_subgraph[prefill]) == 2 + 7 * config.layers
    assert by_subgraph[prefill] == by_subgraph[decode]
    assert not [p for p in state.params.values() if p.dtype == np.float16]  # the originals were dropped


def test_tying_never_changes_a_value():
    import jax.numpy as jnp
    from jax import lax

    weights = np.array([-0.0, 0.0, np.nan, np.inf, -np.inf, 1e-45, -3.5, 65504], np.float32)  # 1e-45: subnormal
    for anchor in ([np.inf, 1], [np.nan, 1], [-0.0, 2], [7, 1]):
        anchor = np.asarray(anchor, np.float32)
        tied = jax.jit(lambda w, a: tie_to(jnp, lax, w, xla_tracer._zero_after([a])))(weights, anchor)
        assert np.asarray(tied).tobytes() == weights.tobytes()
        ints = np.array([-128, 0, 127], np.int8)
        tied = jax.jit(lambda w, a: tie_to(jnp, lax, w, xla_tracer._zero_after([a])))(ints, anchor)
        assert np.asarray(tied).tobytes() == ints.tobytes()


def test_a_weight_tied_to_a_vmapped_value_stays_one_weight():
    """Under ``jax.vmap`` (batched runs, continuous batching's decode step) the tie's zero comes from the first
    example alone: the int8 weight is widened once for all examples, not copied per example."""
    import jax.numpy as jnp
    from jax import lax

    weight = np.arange(-32, 32, dtype=np.int8).reshape(8, 8)

    def product(x):
        return x @ tie_to(jnp, lax, jnp.asarray(weight), xla_tracer._zero_after([x])).astype(jnp.float32)

    x = np.random.default_rng(0).normal(size=(5, 1, 8)).astype(np.float32)
    hlo = jax.jit(jax.vmap(product)).lower(x).as_text()
    widened = [line for line in hlo.splitlines() if "stablehlo.convert" in line and "xi8>" in line]
    assert widened and all("tensor<8x8xi8>" in line for line in widened)
    np.testing.assert_allclose(jax.jit(jax.vmap(product))(x), x @ weight.astype(np.float32), rtol=1e-6)


# int4 takes 40 s of CI (slow); float16 runs the same splitting
@pytest.mark.parametrize("weights", ["float16", pytest.param("int4", marks=pytest.mark.slow)])
def test_big_subgraphs_compile_in_parts_with_the_same_results(no_folding, quantized_params, monkeypatch, weights):
    """A big model's subgraph of many ops is compiled as parts (xla_backend.PART_OPS), cut between layers where
    only the hidden state crosses; the parts give the whole program's results (to float rounding: XLA fuses
    differently across a cut).  Layers looped over (``SCAN_MIN_BLOCKS``) make a small program already: here they
    are traced one by one, as layers that differ are."""
    model = dm.build_decoder(_config(weights))
    monkeypatch.setattr(xla_state, "SCAN_MIN_BLOCKS", 0)
    state = xla_state.XlaState(model, xla_device.device_for("cpu"))
    for key in ("prefill", "decode"):
        index, inputs = _signature_inputs(model, key)
        whole = xla_backend.XlaBackend(model, index, state=state)
        monkeypatch.setattr(xla_backend, "SPLIT_MODEL_BYTES", 0)
        monkeypatch.setattr(xla_backend, "PART_OPS", 20)
        split = xla_backend.XlaBackend(model, index, state=state)
        monkeypatch.undo()
        assert len(split._parts) >= 3 and not whole._parts
        # cutting reads no constant's values: Tensor.data would unpack int4 weights and keep the copy
        assert not any("data" in vars(t) for t in model.subgraphs[index].tensors if t.dtype == "int4")
        sg = model.subgraphs[index]
        for part in split._parts[1:]:  # cut where little crosses: no [width, width] weight, only activations
            assert all(xla_state._tensor_bytes(sg.tensors[t]) < WIDTH * WIDTH for t in part.op_range.inputs)
        for got, want in zip(split.run(inputs), whole.run(inputs)):
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)
        shapes = [(np.shape(x), np.asarray(x).dtype) for x in inputs]
        assert split.output_shapes(shapes) == whole.output_shapes(shapes)


# int4 takes 67 s of CI (slow); int8 runs the same loop over stored weights
@pytest.mark.parametrize("weights", ["int8", pytest.param("int4", marks=pytest.mark.slow)])
def test_sliced_quantized_matmuls_loop_over_the_stored_weights(no_folding, quantized_params, monkeypatch, weights):
    """FULLY_CONNECTED weights converted in slices (ops.matmul.CONVERTED_WEIGHT_CHUNK_BYTES) are read from the
    stored parameter inside one XLA loop (slices of LOOPED_SLICE_BYTES, then a tail), not one kernel per
    slice: the same values as slice by slice (to float rounding), and the reference's."""
    from litegpu.ops import matmul

    monkeypatch.setattr(matmul, "CONVERTED_WEIGHT_CHUNK_BYTES", 48 << 10)  # 15 slices of a 704 x 256 matrix
    monkeypatch.setattr(matmul, "LOOPED_SLICE_BYTES", 40 << 10)  # 14 to 40 rows a slice, then a tail
    model = dm.build_decoder(_config(weights, layers=2))
    state = xla_state.XlaState(model, xla_device.device_for("cpu"))
    for key in ("prefill", "decode"):
        looped, index, inputs, lowered, _ = _compile(model, key, state)
        assert "stablehlo.while" in lowered.as_text()
        with monkeypatch.context() as m:
            m.setattr(xla_tracer._XlaRunner, "stored_weight", lambda self, sg, index: None)
            sliced, _, _, chained, _ = _compile(model, key, state)
        assert "stablehlo.while" not in chained.as_text()
        for got, want in zip(looped.run(inputs), sliced.run(inputs)):
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-6)
        _check_against_reference(model, looped, index, inputs)


@pytest.mark.parametrize("platform, share, device_free_bytes",
                         [("cpu", None, None), ("gpu", None, 1 << 30), ("gpu", 0.25, 1 << 30), ("gpu", 0.25, 1 << 10)])
def test_on_an_accelerator_float16_weights_stay_float16_unless_a_share_of_its_memory_is_given(
        monkeypatch, platform, share, device_free_bytes):
    """Past the host budget (0 here) float16 weights stay float16 on the CPU; on a GPU they stay float16 too
    (converted inside the kernels that read them), unless FOLD_GROWTH_DEVICE_SHARE of its free memory is given
    to float32 copies made at load, and they fit in it."""
    monkeypatch.setattr(xla_state, "FOLD_GROWTH_BUDGET_BYTES", 0)
    if share is not None:
        monkeypatch.setattr(xla_state, "FOLD_GROWTH_DEVICE_SHARE", share)
    monkeypatch.setattr(xla_state, "device_available_bytes", lambda device: (device_free_bytes, "test"))
    config = _config("float16", layers=2)
    model = dm.build_decoder(config)
    state = xla_state.XlaState(model, xla_device.device_for("cpu"), platform=platform)
    dtypes = {np.dtype(p.dtype) for p in state.params.values() if p.size >= config.width * config.width}
    folded = share is not None and device_free_bytes >= 1 << 20  # a quarter of the free memory holds float32
    assert dtypes == ({np.dtype(np.float32)} if folded else {np.dtype(np.float16)})
    backend, index, inputs, _, _ = _compile(model, "decode", state)
    _check_against_reference(model, backend, index, inputs)


def test_int4_weights_reach_the_device_without_a_kept_unpacked_copy():
    """An accelerator takes int4 weights in ml_dtypes' int4 (XLA packs them two to a byte); the values are
    unpacked straight into that type for the transfer and not kept on the tensor (``Tensor.data`` would keep an
    int8 copy of every weight on the host)."""
    import ml_dtypes

    model = dm.build_decoder(dm.DecoderConfig(weights="int4", layers=1, width=64, heads=2, vocab=64))
    weight = next(t for sg in model.subgraphs for t in sg.tensors if t.dtype == "int4" and t.has_data)
    held = xla_state._param_array(weight, native_sub_byte=True)
    assert held.dtype == np.dtype(ml_dtypes.int4) and held.shape == tuple(weight.shape)
    assert "data" not in vars(weight)
    nibbles = np.stack([weight.raw & 15, weight.raw >> 4], axis=-1).reshape(-1).astype(np.int8)  # low first
    expected = np.where(nibbles > 7, nibbles - 16, nibbles)[:weight.num_elements].reshape(weight.shape)
    assert np.array_equal(held.astype(np.int8), expected)
