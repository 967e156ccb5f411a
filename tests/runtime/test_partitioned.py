"""The partitioned runtime's engines: settings follow what an engine says of itself (``EngineInfo``), not its name."""

import dataclasses

import numpy as np

from litegpu import HardwareAccelerator as HA
from litegpu.backends import registry
from litegpu.compile import plan
from litegpu.ir.builder import ModelBuilder
from litegpu.runtime.partitioned import PartitionedModel


def add_mul_model():
    b = ModelBuilder()
    x = b.input("x", (2, 3))
    h, y = b.tensor("h", (2, 3)), b.tensor("y", (2, 3))
    b.op("ADD", [x, x], [h])
    b.op("MUL", [h, x], [y])
    b.output(y)
    return b.build()


def test_an_engine_holding_one_weight_precision_gets_the_models_precision_on_the_cpu():
    model = add_mul_model()
    runner = PartitionedModel(model, plan(model, HA.CPU, cpu_kernels="builtin"), precision="fp16")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(np.asarray(runner.run([x])[0]), (x + x) * x, rtol=1e-3)
    (name,) = {p.engine for p in runner.plan.partitions}
    assert registry.info(name).one_weight_precision and runner.engines[name].settings.precision == "fp16"
    # the same engine registered without the property keeps the CPU engines' settings
    info = registry.ENGINES[name]
    registry.register(dataclasses.replace(info, one_weight_precision=False))
    try:
        assert PartitionedModel(model, plan(model, HA.CPU, cpu_kernels="builtin"), precision="fp16")._cpu_settings(name).precision == "fp32"
    finally:
        registry.register(info)
