"""CompiledModel.batched(): N examples of a batch-1 model as one vmapped XLA program, equal to N single runs."""

import numpy as np
import pytest

import litegpu as lg
from litegpu.ir.builder import ModelBuilder
from litegpu.ir.save import to_bytes
from litegpu.runtime.batched import BatchingError

EXACT = lg.Options(lg.HardwareAccelerator.CPU, cpu_options=lg.CpuOptions(kernel_mode=lg.CpuKernelMode.BUILTIN))


def hard_coded_batch_model():
    """x [1, 6] -> RESHAPE to the constant [1, 2, 3] -> MUL -> RESHAPE to [1, 6]: resize cannot change the batch."""
    b = ModelBuilder()
    x = b.input("x", (1, 6))
    to3 = b.constant("to3", np.array([1, 2, 3], np.int32))
    to2 = b.constant("to2", np.array([1, 6], np.int32))
    scale = b.constant("scale", np.array([1.0, 2.0, 3.0], np.float32))
    r, m, y = b.tensor("r", (1, 2, 3)), b.tensor("m", (1, 2, 3)), b.tensor("y", (1, 6))
    b.op("RESHAPE", [x, to3], [r])
    b.op("MUL", [r, scale], [m])
    b.op("RESHAPE", [m, to2], [y])
    b.output(y)
    return to_bytes(b.build())


def test_a_hard_coded_batch_of_one_runs_n_examples():
    model = lg.CompiledModel.from_buffer(hard_coded_batch_model())
    xs = np.arange(30, dtype=np.float32).reshape(5, 6)
    got = model.batched()(xs)
    assert got.shape == (5, 6)
    np.testing.assert_array_equal(got, np.concatenate([model(x[None]) for x in xs]))


def _random_batch(details, n, seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for name, d in details.items():
        shape = (n,) + tuple(d["shape"][1:])
        kind = np.dtype(d["dtype"]).kind
        out[name] = (rng.uniform(-1, 1, shape) if kind == "f" else rng.integers(-100, 100, shape)).astype(d["dtype"])
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mobilenet_v3_small_float32", "mobilenet_v3_small_int8",
                                  "mediapipe_hand_landmark_lite", "transformer_encoder_float32"])
def test_batched_real_models_equal_single_runs(shared_models, name):
    exact = lg.CompiledModel.from_file(str(shared_models / f"{name}.tflite"), options=EXACT)
    feed = _random_batch(exact.get_input_tensor_details(0), 4)
    got = lg.CompiledModel.from_file(str(shared_models / f"{name}.tflite")).batched().run(feed)
    for i in range(4):
        single = exact.run({k: v[i:i + 1] for k, v in feed.items()})
        for k, want in single.items():
            have = got[k][i:i + 1] if want.shape[:1] == (1,) else got[k][i]
            if want.dtype.kind in "iu":
                np.testing.assert_array_equal(have, want)
            else:  # vmapped convolutions may sum in another order: measured up to 1.1e-5 of the largest value
                assert np.abs(have - want).max() <= 5e-5 * np.abs(want).max(), (k, i)


def test_models_with_state_refuse_naming_what_holds_it(shared_models):
    model = lg.CompiledModel.from_file(str(shared_models / "microwakeword_okay_nabu.tflite"))
    batch = _random_batch(model.get_input_tensor_details(0), 2)
    with pytest.raises(BatchingError, match="VAR_HANDLE|CALL_ONCE|variable"):
        model.batched().run(batch)


def test_data_dependent_shapes_refuse_naming_the_op():
    b = ModelBuilder()
    x = b.input("x", (1, 4))
    y = b.tensor("y", (1, 2), "int64", shape_signature=(-1, 2))
    b.op("WHERE", [x], [y])
    b.output(y)
    model = lg.CompiledModel.from_buffer(to_bytes(b.build()), options=EXACT)
    with pytest.raises(BatchingError, match="WHERE"):
        model.batched()(np.ones((3, 4), np.float32))


def test_a_malformed_batch_is_a_clear_error():
    model = lg.CompiledModel.from_buffer(hard_coded_batch_model())
    with pytest.raises(BatchingError, match=r"\[N, 6\]"):
        model.batched()(np.ones((5, 7), np.float32))
    with pytest.raises(lg.errors.TensorBufferError, match="float32"):
        model.batched()(np.ones((5, 6), np.int32))
