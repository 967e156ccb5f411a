"""The IREE engine (issue 28): what it compiles for which device, how it is chosen, and runs on a Vulkan device.

The pure parts (target choice, the module's device target, the support policy with a made-up device) run
everywhere; compiling needs ``iree-base-compiler``; running needs a Vulkan device, which on a machine
without a GPU is Mesa's software lavapipe (``apt-get install mesa-vulkan-drivers``): slow, but every code
path of the engine runs on it (the model tests themselves run through this engine in tests/gpu).
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

import litegpu as lg
from litegpu.backends.iree import engine as iree
from litegpu.backends.engine import EngineSettings
from litegpu.backends.iree.vulkan import VulkanDevice
from litegpu.compile import plan as make_plan
from litegpu.errors import AcceleratorUnavailableError, EngineCompileError, InvalidArgumentError
from litegpu.ir import read_model
from litegpu.ir.builder import ModelBuilder, quantization
from litegpu.ir.save import to_bytes
from litegpu.ops import Target

GPU, CPU = lg.HardwareAccelerator.GPU, lg.HardwareAccelerator.CPU


def fake_vulkan(name: str, vendor_id: int, **changes) -> VulkanDevice:
    """A Vulkan device as the loader would describe it (lavapipe's numbers, then ``changes``)."""
    base = VulkanDevice(index=0, name=name, vendor_id=vendor_id, device_id=1, device_type="discrete GPU",
                        api_version="1.3.250", driver="test", uuid="00" * 16, memory_bytes=8 << 30, float64=True,
                        float16=True, int64=True, int16=True, int8=True, storage16=True, storage8=True,
                        subgroup_size=32, subgroup_arithmetic=True, subgroup_shuffle=True,
                        max_workgroup_size=(1024, 1024, 64), max_workgroup_invocations=1024,
                        max_workgroup_memory_bytes=49152, max_workgroup_count=(2**32 - 1, 65535, 65535),
                        vulkan_1_2=True)
    return dataclasses.replace(base, **changes)


@pytest.fixture(autouse=True)
def default_target(monkeypatch):
    """The target choice as it is without LITEGPU_IREE_VULKAN_TARGET (tests that want it set it)."""
    monkeypatch.delenv(iree.TARGET_ENV, raising=False)


def needs_compiler():
    pytest.importorskip("iree.compiler", reason="iree-base-compiler is not installed (pip install \"litegpu[vulkan]\")")


def vulkan_device() -> iree.IreeDevice:
    """The Vulkan device the engine runs on here (lavapipe on a machine without a GPU), or skip."""
    if iree.missing_package():
        pytest.skip(iree.missing_package())
    found = iree.iree_devices(allow_software=True)
    if not found or found[0].api != "vulkan":
        pytest.skip(f"no Vulkan device: {iree.no_device_reason(True)} (Debian: apt-get install mesa-vulkan-drivers)")
    return found[0]


def affine_model(shape=(2, 3, 4)) -> bytes:
    """y = x * 3 + w (w a weight, so the program takes a parameter), and z = y > 4 (a boolean output)."""
    b = ModelBuilder()
    x = b.input("x", shape)
    w = b.constant("w", np.arange(np.prod(shape), dtype=np.float32).reshape(shape) / 7)
    scaled, y, z = b.tensor("scaled", shape), b.tensor("y", shape), b.tensor("z", shape, "bool")
    b.op("MUL", [x, b.constant("three", np.array(3.0, np.float32))], [scaled])
    b.op("ADD", [scaled, w], [y])
    b.op("GREATER", [y, b.constant("four", np.array(4.0, np.float32))], [z])
    b.output(y)
    b.output(z)
    return to_bytes(b.build())


def affine(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    w = np.arange(x.size, dtype=np.float32).reshape(x.shape) / 7
    y = x * np.float32(3) + w
    return y, y > 4


def on_iree(source, precision="fp32", flags=GPU | CPU, **options):
    return lg.CompiledModel.from_buffer(source, options=lg.Options(
        flags, gpu_options=lg.GpuOptions(precision=precision, engine="iree"), **options))


# ---- choosing the target (no device needed) ------------------------------------------------------------

@pytest.mark.parametrize("vendor, name, target", [
    (0x10DE, "NVIDIA H100 80GB HBM3", "ampere"), (0x10DE, "NVIDIA GeForce RTX 4090", "ampere"),
    (0x10DE, "NVIDIA GeForce RTX 2080 Ti", "turing"), (0x10DE, "Tesla V100-SXM2-16GB", "volta"),
    (0x1002, "AMD Radeon RX 7900 XTX (RADV NAVI31)", "rdna3"), (0x1002, "AMD Radeon Graphics (RADV REMBRANDT)", "rdna2"),
    (0x13B5, "Mali-G715", "valhall4"), (0x5143, "Adreno (TM) 740", "adreno"),
    (0x8086, "Intel(R) Arc(tm) A770 Graphics (DG2)", None), (0x10005, "llvmpipe (LLVM 15.0.6, 256 bits)", None),
    (0x10DE, "NVIDIA Quadro K620", None)])
def test_iree_names_the_gpus_it_knows_and_describes_the_others_from_the_device(vendor, name, target, monkeypatch):
    """By default every device is described from its own properties; "named" takes IREE's description where it
    knows the GPU (its float16 compile of a MediaPipe model for "ampere" never finished: not the default)."""
    device = fake_vulkan(name, vendor)
    assert iree.named_vulkan_target(device) == target
    assert iree.compile_target(iree.IreeDevice("vulkan", name, False, True, True, device)).attribute is not None
    monkeypatch.setenv(iree.TARGET_ENV, "named")
    chosen = iree.compile_target(iree.IreeDevice("vulkan", name, False, True, True, device))
    if target is None:
        assert chosen.attribute is not None and "subgroup_size_choices = [32]" in chosen.attribute
        assert not any(f.startswith("--iree-vulkan-target=") for f in chosen.flags)
    else:
        assert f"--iree-vulkan-target={target}" in chosen.flags and chosen.attribute is None
    assert "--iree-input-demote-f64-to-f32=false" in chosen.flags  # float64 stays float64 where the device has it


def test_the_device_description_carries_its_number_types_and_limits(monkeypatch):
    monkeypatch.delenv(iree.TARGET_ENV, raising=False)
    device = fake_vulkan("Some iGPU", 0x8086, float64=False, int64=False, storage8=False, subgroup_size=16,
                         max_workgroup_memory_bytes=65536, api_version="1.2.200")
    attribute = iree.vulkan_target_attribute(device)
    assert "compute = fp32|int32|fp16|int16|int8," in attribute and "fp64" not in attribute
    assert "storage = b32|b16," in attribute
    assert "subgroup_size_choices = [16]" in attribute and "max_workgroup_memory_bytes = 65536" in attribute
    assert 'features = "spirv:v1.5,cap:Shader"' in attribute  # Vulkan 1.2: SPIR-V 1.5
    assert f"max_workgroup_counts = [{2**31 - 1}, 65535, 65535]" in attribute  # clamped to the attribute's i32
    chosen = iree.compile_target(iree.IreeDevice("vulkan", device.name, False, False, True, device))
    assert "--iree-input-demote-f64-to-f32=false" not in chosen.flags


def test_a_conservative_target_without_subgroup_operations_is_tried_second():
    device = fake_vulkan("Some iGPU", 0x8086)
    first, second = iree.compile_target(iree.IreeDevice("vulkan", device.name, False, True, True, device)).attempts()
    assert "subgroup = shuffle|arithmetic" in first.attribute and "subgroup = none" in second.attribute
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(iree.TARGET_ENV, "named")
        named = iree.compile_target(iree.IreeDevice("vulkan", "NVIDIA H100", False, True, True,
                                                    fake_vulkan("NVIDIA H100", 0x10DE)))
    assert [t.attribute is None for t in named.attempts()] == [True, False]
    plain = fake_vulkan("No subgroups", 0x8086, subgroup_arithmetic=False, subgroup_shuffle=False)
    assert len(iree.compile_target(iree.IreeDevice("vulkan", "x", False, True, True, plain)).attempts()) == 1


def test_vulkan_programs_record_their_command_buffers_per_call():
    """No memoized command buffers with indirect bindings on Vulkan: IREE 3.13's driver ran them on stale buffers."""
    device = iree.IreeDevice("vulkan", "Intel(R) Arc(tm) A770 Graphics", False, True, True, fake_vulkan("Arc", 0x8086))
    for target in iree.compile_target(device).attempts():
        assert "--iree-hal-indirect-command-buffers=false" in target.flags


def test_the_target_can_be_forced_by_environment(monkeypatch):
    device = fake_vulkan("NVIDIA GeForce RTX 4090", 0x10DE)
    gpu = iree.IreeDevice("vulkan", device.name, False, True, True, device)
    monkeypatch.setenv(iree.TARGET_ENV, "device")
    assert iree.compile_target(gpu).attribute == iree.vulkan_target_attribute(device)
    monkeypatch.setenv(iree.TARGET_ENV, "turing")
    assert "--iree-vulkan-target=turing" in iree.compile_target(gpu).flags
    elsewhere = iree.vulkan_target_attribute(fake_vulkan("Another GPU", 0x10DE, subgroup_size=64))
    monkeypatch.setenv(iree.TARGET_ENV, elsewhere)  # what bench/gpu/iree_precompile.py compiled for
    chosen = iree.compile_target(gpu)
    assert chosen.attribute == elsewhere and chosen.description == f"vulkan:{elsewhere}"


def test_the_device_target_goes_into_the_module_header():
    with_attributes = "module @jit_f attributes {mhlo.num_partitions = 1 : i32} {\n  func.func public @main() {}\n}"
    out = iree.with_device_target(with_attributes, "#T")
    assert out.startswith("module @jit_f attributes {hal.device.targets = [#T], mhlo.num_partitions")
    bare = "module @jit_f {\n}"
    assert iree.with_device_target(bare, "#T") == "module @jit_f attributes {hal.device.targets = [#T]} {\n}"
    with pytest.raises(EngineCompileError):
        iree.with_device_target("func.func @main() {}", "#T")


# ---- the support policy ---------------------------------------------------------------------------------

def int8_fully_connected() -> bytes:
    b = ModelBuilder()
    x = b.input("x", (1, 4), "int8", quantization=quantization(0.5, 0))
    w = b.constant("w", np.ones((3, 4), np.int8), quantization=quantization(0.25, 0))
    y = b.tensor("y", (1, 3), "int8", quantization=quantization(1.0, 0))
    b.op("FULLY_CONNECTED", [x, w, -1], [y])
    b.output(y)
    return to_bytes(b.build())


def test_exact_integer_kernels_are_refused_and_the_float_view_is_not():
    """IREE 3.13 compiles parts of TFLite's exact integer kernels wrongly; a quantized model's float view (its
    QUANTIZE / DEQUANTIZE edges included) is float arithmetic, and moving int8 values (a variable) no arithmetic."""
    from litegpu.compile.float_view import float_view

    model = read_model(int8_fully_connected())
    engine = iree.IreeEngine(device=iree.IreeDevice("vulkan", "gpu", False, True, True))
    assert "exact TFLite integer kernel" in engine.unsupported(model, 0, [0])[0]
    view = float_view(model)
    assert engine.unsupported(view, 0, range(len(view.subgraphs[0].operators))) == {}


def split_model() -> bytes:
    """y = twice(x + x) * x, ``twice`` a custom op from Python without a JAX function: the CPU runs it."""
    b = ModelBuilder()
    x = b.input("x", (2, 3))
    h, c, y = b.tensor("h", (2, 3)), b.tensor("c", (2, 3)), b.tensor("y", (2, 3))
    b.op("ADD", [x, x], [h])
    b.op("LitegpuTestTwice", [h], [c], custom_options=b"")
    b.op("MUL", [c, x], [y])
    b.output(y)
    return to_bytes(b.build())


@pytest.fixture
def twice():
    lg.register_custom_op("LitegpuTestTwice", lambda x, options: np.asarray(x) * 2)
    yield
    lg.unregister_custom_op("LitegpuTestTwice")


def test_the_plan_names_the_engine_and_refused_ops_fall_back_to_the_cpu(twice):
    engine = iree.IreeEngine(device=iree.IreeDevice("vulkan", "gpu", False, True, True))
    plan = make_plan(read_model(split_model()), GPU | CPU, warn=False, gpu_engine=engine)
    assert [(p.device, p.engine) for p in plan.partitions] == [("GPU", "iree"), ("CPU", "xla"), ("GPU", "iree")]
    assert plan.summary() == "2 operations will run on the GPU (IREE), and the remaining 1 on the CPU (1 on XLA)"
    assert [u.opcode for u in plan.unsupported] == ["LitegpuTestTwice"]


# ---- choosing the engine ---------------------------------------------------------------------------------

def test_gpu_options_take_an_engine_by_name():
    assert lg.GpuOptions(engine="iree").engine == "iree"
    with pytest.raises(InvalidArgumentError, match="xla, iree"):
        lg.GpuOptions(engine="vulkan")


def test_without_any_gpu_the_reason_names_iree_too(monkeypatch):
    monkeypatch.setattr(iree, "iree_devices", lambda allow_software=False: [])
    model = affine_model()
    with pytest.raises(AcceleratorUnavailableError, match="IREE has no GPU to run on"):
        on_iree(model, flags=GPU)
    with pytest.warns(UserWarning, match="IREE has no GPU to run on"):
        fallback = on_iree(model)
    assert fallback.accelerator == "CPU"


def test_a_software_vulkan_device_is_never_chosen_unless_asked_for(monkeypatch):
    lavapipe = fake_vulkan("llvmpipe (LLVM 15.0.6, 256 bits)", 0x10005, device_type="CPU (software)")
    monkeypatch.setattr(iree, "vulkan_devices", lambda: [lavapipe])
    monkeypatch.setattr(iree, "_metal_devices", lambda: [])
    assert iree.iree_devices() == [] and len(iree.iree_devices(allow_software=True)) == 1
    if iree.missing_package() is None:
        assert "software" in iree.no_device_reason()
    with pytest.warns(UserWarning, match="JAX sees no GPU"):
        model = lg.CompiledModel.from_buffer(affine_model(), options=lg.Options(GPU | CPU))
    assert model.accelerator == "CPU"


# ---- compiling (the compiler, no device) ---------------------------------------------------------------

def tiny_stablehlo() -> str:
    from litegpu.backends.xla.device import jax_module

    jax = jax_module()

    def f(w, x):
        y = jax.numpy.tanh(x @ w)
        return y, y > 0

    spec = jax.ShapeDtypeStruct
    return jax.export.export(jax.jit(f), platforms=["cpu"])(spec((8, 4), np.float32), spec((2, 8), np.float32)).mlir_module()


def test_the_device_description_compiles():
    needs_compiler()
    device = fake_vulkan("Some iGPU", 0x8086, float64=False)
    target = iree.compile_target(iree.IreeDevice("vulkan", device.name, False, False, True, device))
    vmfb = iree.run_compiler(iree.with_device_target(tiny_stablehlo(), target.attribute), target.flags, 120)
    assert len(vmfb) > 1000


def test_metal_compiles_without_a_mac():
    """Apple GPUs: the same program compiled for IREE's Metal target (its shaders compiled by the Mac at load);
    not run here (documented as untested in the README)."""
    needs_compiler()
    target = iree.compile_target(iree.IreeDevice("metal", "Apple M2", False, False, True))
    assert "--iree-hal-target-device=metal" in target.flags
    vmfb = iree.run_compiler(tiny_stablehlo(), target.flags, 120)
    assert len(vmfb) > 1000


# ---- running on the Vulkan device ------------------------------------------------------------------------

def test_a_model_runs_on_the_vulkan_device_and_matches():
    device = vulkan_device()
    model = on_iree(affine_model())
    assert model.accelerator == "GPU" and model.is_fully_accelerated() and model.plan.target is Target.IREE
    assert "on the GPU (IREE)" in model.plan.summary()
    x = np.random.default_rng(0).normal(size=(2, 3, 4)).astype(np.float32)
    y, z = affine(x)
    got = model.run({"x": x})
    np.testing.assert_allclose(got["y"], y, rtol=1e-6)
    np.testing.assert_array_equal(got["z"], z)
    outputs = model.create_output_buffers(0)
    model.run_by_index(0, [lg.TensorBuffer(x)], outputs)
    assert outputs[0].is_on_device and outputs[0].device.platform == "vulkan" and outputs[0].device == device
    np.testing.assert_allclose(outputs[0].read(), y, rtol=1e-6)


def test_outputs_stay_on_the_device_and_chain_asynchronously():
    vulkan_device()
    b = ModelBuilder()
    x = b.input("x", (64, 64))
    y = b.tensor("y", (64, 64))
    b.op("ADD", [x, b.constant("one", np.array(1.0, np.float32))], [y])
    b.output(y)
    model = on_iree(to_bytes(b.build()))
    buffers = [model.create_output_buffers(0) for _ in range(4)]
    start = np.zeros((64, 64), np.float32)
    events = [model.run_async(0, [lg.TensorBuffer(start)], buffers[0])]
    for previous, current in zip(buffers, buffers[1:]):
        events.append(model.run_async(0, previous, current))
    assert all(isinstance(b[0]._data(), iree.IreeArray) for b in buffers)  # never read back in between
    assert events[-1].wait(timeout=60) and all(e.is_ready() for e in events)
    np.testing.assert_array_equal(buffers[-1][0].read(), np.full((64, 64), 4.0, np.float32))


@pytest.mark.parametrize("nbytes", [1, 4095, 4096, 4097, 3 * 4096 + 8])
def test_results_read_back_whatever_their_size(nbytes):
    """Vulkan drivers that import host memory want it page-aligned (lavapipe refuses IREE's own to_host)."""
    device = vulkan_device()
    session = iree.session_for(device)
    values = (np.arange(nbytes) % 251).astype(np.uint8)
    view = session.upload(values)
    with session.lock:
        _, fence, _ = session.next_fence()
    fence.signal()  # the array "was made" by a call that is already done
    np.testing.assert_array_equal(session.read_back(view, fence, np.uint8), values)


def test_fp16_stores_and_computes_in_half_precision():
    vulkan_device()
    model = on_iree(affine_model(), precision="fp16")
    x = np.random.default_rng(1).normal(size=(2, 3, 4)).astype(np.float32)
    got = model.run({"x": x})["y"]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, affine(x)[0], rtol=2e-3, atol=2e-3)


def test_two_models_generate_the_same_tokens_every_time():
    """IREE's memoized command buffers (recorded once, replayed with indirect bindings) ran on buffers freed since on
    IREE 3.13's Vulkan driver: after a first model had generated, a second one's second generation prefilled with
    its first tokens overwritten by the program's own [0, input_pos, 0] index (``compile_target`` turns them off)."""
    vulkan_device()
    from oracle import load_bench_module

    dm = load_bench_module("decoder_model")
    config = dm.DecoderConfig(weights="float16", layers=2, width=64, heads=4, vocab=128, max_len=40, prefill_len=8)
    prompt = [3, 1, 4, 1, 5]
    expected = lg.generate(lg.CompiledModel.from_model(dm.build_decoder(config), options=lg.Options(CPU)), prompt, 20)
    first, second = (lg.CompiledModel.from_model(dm.build_decoder(config), options=lg.Options(
        GPU | CPU, gpu_options=lg.GpuOptions(engine="iree"))) for _ in range(2))
    got = [lg.generate(model, prompt, 20, chunk_tokens=0) for model in (first, first, second, second, first)]
    assert got == [expected] * len(got)


def test_the_vmfb_is_kept_in_the_compile_cache(tmp_path, monkeypatch):
    vulkan_device()
    x = np.ones((2, 3, 4), np.float32)
    first = on_iree(affine_model(), serialization_dir=str(tmp_path))
    expected = first.run({"x": x})["y"]
    assert any(tmp_path.rglob("*")), "nothing was stored"

    def no_compiling(*args, **kwargs):
        raise AssertionError("compiled again instead of loading the cached .vmfb")

    monkeypatch.setattr(iree, "run_compiler", no_compiling)
    second = on_iree(affine_model(), serialization_dir=str(tmp_path))
    np.testing.assert_array_equal(second.run({"x": x})["y"], expected)
    unit = second._partitioned().signature(0).units[0]
    assert unit.executable.loaded_from_cache


def test_a_partition_iree_cannot_compile_runs_on_the_cpu_and_the_failure_is_remembered(monkeypatch, tmp_path):
    vulkan_device()
    attempts = []

    def broken(mlir, flags, timeout_s):
        attempts.append(timeout_s)
        raise RuntimeError("iree-compile failed (exit code 1): error: failed to legalize operation")

    monkeypatch.setattr(iree, "run_compiler", broken)
    monkeypatch.setenv("LITEGPU_IREE_COMPILE_TIMEOUT", "42")
    x = np.ones((2, 3, 4), np.float32)
    for expected_message in ("failed to legalize operation", "remembered in the compile cache"):
        model = on_iree(affine_model(), serialization_dir=str(tmp_path))
        with pytest.warns(RuntimeWarning, match=f"IREE could not compile it.*{expected_message}.*runs on the CPU instead"):
            got = model.run({"x": x})
        np.testing.assert_allclose(got["y"], affine(x)[0], rtol=1e-6)
        assert model._partitioned().signature(0).units[0].engine == "xla"
    # the device's target, then the one without subgroup operations; the second model took the verdict from the cache
    assert attempts == [42.0, 42.0]


def test_a_compile_that_never_finishes_is_stopped(monkeypatch):
    needs_compiler()
    with pytest.raises(RuntimeError, match="did not finish in 0 s"):
        iree.run_compiler(tiny_stablehlo(), ("--iree-hal-target-device=vulkan",), 0.001)


class _LosesTheDevice:
    """A program context whose next call fails as IREE's Vulkan driver does when the device is lost."""

    def __init__(self, context):
        self.context, self.calls = context, 0

    def invoke(self, function, args, results):
        self.calls += 1
        raise RuntimeError("Error invoking function: c/runtime/src/iree/hal/drivers/vulkan/queue.c:2867: DATA_LOSS; "
                           "[vkSignalSemaphore] VK_ERROR_DEVICE_LOST; while invoking native function hal.fence.await")


def lose_the_device_on_the_next_call(model) -> tuple[object, _LosesTheDevice]:
    executable = model._partitioned().signature(0).units[0].executable
    (key, program), = executable._programs.items()
    lost = _LosesTheDevice(program.context)
    executable._programs[key] = dataclasses.replace(program, context=lost)
    return executable, lost


def test_a_lost_device_is_opened_again_and_the_call_run_again():
    """Seen once on lavapipe in a full test run: VK_ERROR_DEVICE_LOST in the middle of a call; the device is opened
    again, the weights uploaded again, the program loaded again, and the call (its inputs on the host) run again."""
    vulkan_device()
    model = on_iree(affine_model())
    x = np.random.default_rng(2).normal(size=(2, 3, 4)).astype(np.float32)
    model.run({"x": x})
    executable, lost = lose_the_device_on_the_next_call(model)
    old_session = executable.session
    with pytest.warns(RuntimeWarning, match="the device was lost .*VK_ERROR_DEVICE_LOST.* opened again"):
        got = model.run({"x": x})
    assert lost.calls == 1 and old_session.lost and executable.session is not old_session
    np.testing.assert_allclose(got["y"], affine(x)[0], rtol=1e-6)
    np.testing.assert_allclose(model.run({"x": x})["y"], affine(x)[0], rtol=1e-6)  # and it stays usable


def test_a_call_whose_inputs_were_on_the_lost_device_says_so():
    vulkan_device()
    model = on_iree(affine_model())
    x = np.ones((2, 3, 4), np.float32)
    outputs = model.create_output_buffers(0)
    model.run_by_index(0, [lg.TensorBuffer(x)], outputs)
    assert outputs[0].is_on_device
    lose_the_device_on_the_next_call(model)
    with pytest.raises(lg.DeviceLostError, match=r"inputs \[0\] were on it: run the model again from host inputs"):
        model.run_by_index(0, [outputs[0]], model.create_output_buffers(0))
