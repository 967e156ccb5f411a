"""Issue 6: a model split across GPU and CPU matches the official interpreter; custom ops on the GPU.

The detector of tests/compile/test_plan_partitions.py (convolutions on the GPU, NON_MAX_SUPPRESSION_V4 and
WHERE on the CPU, GATHER back on the GPU) runs through ``CompiledModel`` with ``GPU | CPU``.  The
cost of each boundary crossing is measured by ``bench/gpu/bench_gpu.py boundaries``.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpu_support import compiled, expected_platform, gpu_target, load_test_module, require_accelerator

pytestmark = pytest.mark.gpu
require_accelerator()

import litegpu as lg  # noqa: E402
from litegpu.ir.save import to_bytes  # noqa: E402

runtime_plan = load_test_module("runtime/test_plan.py", "_gpu_runtime_plan")
custom = load_test_module("runtime/test_custom_ops.py", "_gpu_custom_ops")


def split_detector():
    model, image = runtime_plan._detector()
    return compiled(to_bytes(model)), model, image


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_detector_split_across_gpu_and_cpu_matches_the_official_interpreter(seed):
    cm, model, image = split_detector()
    assert cm.accelerator == "GPU" and cm.plan.is_split and not cm.is_fully_accelerated()
    assert [p.device for p in cm.plan.partitions] == ["GPU", "CPU", "GPU"]
    x = image(seed)
    expected = runtime_plan._official(model, [x])
    inputs, outputs = cm.create_input_buffers(0), cm.create_output_buffers(0)
    inputs[0].write(x)
    cm.run_by_index(0, inputs, outputs)
    runtime_plan._assert_matches([outputs[0].read(), outputs[1].read()], expected[:2])
    # GATHER ran in the last GPU partition: its result stays on the GPU until read
    assert outputs[0].is_on_device and outputs[0].device.platform == expected_platform()
    runtime_plan._assert_matches(list(cm.run([x]).values()), expected)  # WHERE's row count is data-dependent
    # image to the GPU; boxes, scores and the mask to the host; NMS's selection back to the GPU
    assert cm._partitioned().signature(0).transfers == 5
    cm.close()


def test_detector_async_split_run_completes_and_matches():
    cm, model, image = split_detector()
    x = image(4)
    inputs, outputs = cm.create_input_buffers(0), cm.create_output_buffers(0)
    inputs[0].write(x)
    event = cm.run_async(0, inputs, outputs)
    assert event.wait(timeout=120)
    runtime_plan._assert_matches([outputs[0].read(), outputs[1].read()],
                                 runtime_plan._official(model, [x])[:2])


@pytest.fixture
def calls():
    record = {"numpy": 0, "jax": 0, "options": []}
    yield record
    lg.unregister_custom_op(custom.NAME)


def test_custom_op_with_jax_fn_runs_inside_the_gpu_program(calls):
    lg.register_custom_op(custom.NAME, custom.numpy_fn(calls), jax_fn=custom.jax_fn(calls))
    cm = compiled(to_bytes(custom.custom_model(custom.flex({"scale": 0.5, "shift": 4.0}))))
    assert cm.is_fully_accelerated() and cm.plan.target is gpu_target()
    got = cm(custom.X)
    np.testing.assert_allclose(got, custom.expected(custom.X, 0.5, 4.0), rtol=1e-6)
    assert calls["jax"] == 1 and calls["numpy"] == 0  # traced once into the GPU program, no host callback


def test_custom_op_without_jax_fn_splits_the_model_and_still_matches(calls):
    lg.register_custom_op(custom.NAME, custom.numpy_fn(calls))
    cm = compiled(to_bytes(custom.custom_model(custom.flex({"scale": 2.0, "shift": 1.0}))))
    assert [p.device for p in cm.plan.partitions] == ["GPU", "CPU", "GPU"]
    np.testing.assert_allclose(cm(custom.X), custom.expected(custom.X), rtol=1e-6)
    assert calls["numpy"] >= 1
