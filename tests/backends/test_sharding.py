"""Weights split over several devices (``Options(devices=...)``, ``litegpu.backends.sharding``), tested with
4 fake CPU devices in a child process (the device count is fixed when JAX starts; the suite keeps one).

The decoders are the project's generator (``bench/models/decoder_model.py``: float32, int8 per-channel, int4
blockwise) and litert-torch exports (float16, dynamic int8, int4 block32, the transposed KV layout): on
1, 2 and 4 devices, the same greedy tokens, the same logits within 1e-5 relative, about 1/N of the weight
bytes on each device, and the KV cache split by head where the head count allows it.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from litegpu.backends import sharding
from litegpu.ir.builder import ModelBuilder

ROOT = Path(__file__).resolve().parents[2]
LITERT_TORCH = ROOT / "tests" / "heldout" / "litert_torch"

SCRIPT = textwrap.dedent("""
    import os, sys
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    sys.path.insert(0, sys.argv[1])
    import numpy as np, jax
    import litegpu
    import decoder_model as dm

    def decoders(tmp):
        for weights, width in (("float32", 256), ("int8", 256), ("int4", 512)):
            config = dm.DecoderConfig(layers=2, width=width, heads=4, vocab=512, max_len=32, prefill_len=8,
                                      weights=weights)
            path = os.path.join(tmp, f"decoder_{weights}.tflite")
            dm.write_decoder(config, path)
            yield path, "prefill"
        for name in sys.argv[3:]:
            yield os.path.join(sys.argv[2], name + ".tflite"), "prefill_8"

    def decode_inputs(model):
        details = model.get_input_tensor_details("decode")
        feed = {n: np.zeros(d["shape"], d["dtype"]) for n, d in details.items()}
        feed["tokens"] = np.full(details["tokens"]["shape"], 11, details["tokens"]["dtype"])
        rng = np.random.default_rng(0)
        for n in feed:
            if n.startswith("kv"):
                feed[n] = rng.normal(size=feed[n].shape).astype(feed[n].dtype)
        return feed

    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        for path, prefill in decoders(tmp):
            results = {}
            for n in (1, 2, 4):
                options = litegpu.Options(litegpu.HardwareAccelerator.CPU, devices=n)
                model = litegpu.CompiledModel.from_file(path, options=options)
                tokens = litegpu.generate(model, [3, 1, 4, 1, 5, 9, 2, 6, 5, 3], 8, prefill_signature=prefill)
                logits = model.run(decode_inputs(model), signature_key="decode")["logits"]
                report = model.weight_placement()
                assert report.devices == n
                measured = report.measured_bytes_per_device
                assert len(measured) == n and len(set(measured)) == 1, measured
                assert measured[0] <= report.sharded_bytes / n + report.replicated_bytes + 1, report.describe()
                results[n] = (tokens, logits, measured[0], report)
                if n == 4:  # the decode step's KV cache comes back split by head where heads divide evenly
                    backend = model._backend(model._signature("decode"))
                    caches = [t for t, axis in backend._cache_out.items()]
                    print(os.path.basename(path), "caches split by head:", len(caches), flush=True)
            tokens1, logits1, bytes1, _ = results[1]  # one device: small int8 weights are program constants
            for n in (2, 4):
                tokens, logits, per_device, report = results[n]
                assert tokens == tokens1, (path, n, tokens, tokens1)
                error = np.abs(logits - logits1).max() / max(np.abs(logits1).max(), 1e-30)
                assert error <= 1e-5, (path, n, error)
                total = report.sharded_bytes + report.replicated_bytes  # quantized weights: parameters here
                share = per_device / total
                assert total >= 0.9 * bytes1 and share <= 1 / n + report.replicated_bytes / total + 1e-6, (
                    path, n, share, report.describe())
                print(os.path.basename(path), n, "devices: bytes per device", round(share, 3), "of one; error",
                      f"{error:.1e}", flush=True)
    print("OK")
""")


def run_child(*models: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(ROOT / "bench" / "models"), str(LITERT_TORCH), *models],
                          capture_output=True, text=True, timeout=1200, env=env)
    assert done.returncode == 0 and done.stdout.strip().endswith("OK"), done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
def test_decoders_give_the_same_tokens_and_logits_on_one_two_and_four_devices():
    out = run_child("smollm_tiny_fp16", "smollm_tiny_dynamic_int8", "smollm_tiny_int4_block32",
                    "smollm_tiny_transposed_kv")
    assert "decoder_float32.tflite caches split by head: 4" in out


@pytest.mark.slow  # 85 s of CI: the splitting itself is tested on the small models above
def test_a_float32_decoder_splits_its_weights_over_four_devices():
    out = run_child()
    assert "decoder_float32.tflite 4 devices" in out


# ---- the placement rules, without devices -------------------------------------------------------------

def _fc_model(out_features: int, in_features: int, dtype=np.float32):
    b = ModelBuilder()
    x = b.input("x", (1, in_features))
    w = b.constant("w", np.ones((out_features, in_features), dtype))
    y = b.tensor("y", (1, out_features))
    b.op("FULLY_CONNECTED", [x, w, -1], [y])
    b.output(y)
    return b.build()


def test_fully_connected_weights_split_on_their_output_axis():
    model = _fc_model(256, 128)
    axes = sharding.weight_axes(model, 4)
    (where, (axis, reason)), = axes.items()
    assert axis == 0 and "FULLY_CONNECTED" in reason


def test_a_weight_that_does_not_divide_evenly_is_replicated_and_says_why():
    model = _fc_model(255, 128)
    (axis, reason), = sharding.weight_axes(model, 4).values()
    assert axis is None and "does not split evenly" in reason


def test_small_weights_stay_replicated():
    model = _fc_model(16, 16)
    t = model.subgraphs[0].tensors[1]
    placement = sharding.placement_for(t, 16 * 16 * 4, sharding.weight_axes(model, 4), (0, 1), 4)
    assert placement.axis is None and "KiB" in placement.reason


def test_kv_caches_split_by_head_in_both_layouts():
    shapes = {"kv_cache_k_0": (1, 64, 4, 32), "kv_cache_v_0": (1, 64, 4, 32)}
    assert sharding._head_axis("kv_cache_k_0", shapes, 4) == 2
    transposed = {"kv_cache_k_0": (1, 4, 64, 32), "kv_cache_v_0": (1, 4, 32, 64)}
    assert sharding._head_axis("kv_cache_v_0", transposed, 2) == 1
    assert sharding._head_axis("kv_cache_k_0", {"kv_cache_k_0": (1, 64, 3, 64)}, 2) is None  # 3 heads on 2


def test_devices_must_be_named_sensibly():
    import litegpu

    with pytest.raises(litegpu.errors.InvalidArgumentError):
        litegpu.Options(devices=object())
    model = _fc_model(256, 128)
    from litegpu.ir.save import to_bytes

    with pytest.raises(litegpu.errors.InvalidArgumentError, match="device"):
        litegpu.CompiledModel.from_buffer(to_bytes(model), options=litegpu.Options(devices=64))


class _FakeGpu:
    def __init__(self, limit):
        self.limit = limit

    def memory_stats(self):
        return {"bytes_limit": self.limit} if self.limit else None


def test_weights_bigger_than_one_device_split_over_all_of_them_unasked():
    gpus = [_FakeGpu(80 << 30) for _ in range(4)]
    assert sharding.devices_for_weights(100 << 30, gpus) == gpus
    assert sharding.devices_for_weights(10 << 30, gpus) is None          # fits one
    assert sharding.devices_for_weights(100 << 30, gpus[:1]) is None     # nothing to split over
    assert sharding.devices_for_weights(100 << 30, [_FakeGpu(None)] * 4) is None  # no statistics (CPU)
