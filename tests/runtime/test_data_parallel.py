"""Data parallel batched runs over several devices, tested with 4 fake CPU devices in a child process (the
device count is fixed when JAX starts, and the rest of the suite keeps one)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent("""
    import os, sys
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    import numpy as np, jax
    import litegpu
    from litegpu.ir.builder import ModelBuilder
    from litegpu.ir.save import to_bytes
    from litegpu.runtime.batched import BatchingError

    rng = np.random.default_rng(0)
    b = ModelBuilder()
    x = b.input("x", (1, 32))
    w = b.constant("w", rng.normal(size=(64, 32)).astype(np.float32))
    shape = b.constant("shape", np.array([1, 8, 8], np.int32))
    h, y = b.tensor("h", (1, 64)), b.tensor("y", (1, 8, 8))
    b.op("FULLY_CONNECTED", [x, w, -1], [h], fused_activation_function="RELU")
    b.op("RESHAPE", [h, shape], [y])
    b.output(y)
    model = litegpu.CompiledModel.from_buffer(to_bytes(b.build()))
    xs = rng.normal(size=(12, 32)).astype(np.float32)
    single = model.batched()(xs)
    parallel = model.batched(devices="all")
    assert len(parallel.devices) == 4
    np.testing.assert_allclose(parallel(xs), single, rtol=1e-6, atol=1e-6)
    # the program's outputs live on all four devices, in example order
    (program,) = parallel._programs.values()
    (out,) = program(parallel._params(model._signature(0), parallel._backends[0]), [xs.reshape(12, 1, 32)])
    assert len(out.sharding.device_set) == 4
    np.testing.assert_allclose(np.asarray(out).reshape(12, 8, 8), single, rtol=1e-6, atol=1e-6)
    # inputs already sharded over the devices are used where they are
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("examples",))
    sharded = jax.device_put(xs, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("examples")))
    np.testing.assert_allclose(parallel(sharded), single, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(model.batched(devices=[1, 3])(xs), single, rtol=1e-6, atol=1e-6)
    try:
        parallel(xs[:6])
        raise SystemExit("6 examples on 4 devices did not raise")
    except BatchingError as e:
        assert "evenly" in str(e)
    try:
        model.batched(devices=9)
        raise SystemExit("9 devices did not raise")
    except litegpu.errors.InvalidArgumentError:
        pass
    print("OK")
""")


def test_data_parallel_on_four_fake_devices_equals_one_device():
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0 and done.stdout.strip().endswith("OK"), done.stderr[-3000:]
