"""GPU measurements of the open issues; each subcommand prints a table (and ``--json OUT`` writes the numbers).

    PYTHONPATH=src python bench/gpu/bench_gpu.py bandwidth                   # device memory bandwidth (copy)
    PYTHONPATH=src python bench/gpu/bench_gpu.py run-async                   # issue 3: run_async overlap
    PYTHONPATH=src python bench/gpu/bench_gpu.py boundaries                  # issue 6: split model, per crossing
    PYTHONPATH=src python bench/gpu/bench_gpu.py decode --gigabytes 3 --weights float16  # issue 9 (float32|int8|int4)

``--accelerator gpu`` (the default) refuses to run where JAX sees no GPU.  ``--accelerator cpu`` is a dry run
of the same code with the XLA CPU device standing in for the GPU (the environment claims a GPU and hands out
the CPU device, so GPU plans, splits and the float view of quantized models are what runs): it proves the
logic, and its numbers say nothing about a GPU.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
import harness  # noqa: E402
from harness import median_ms, timed  # noqa: E402

ROOT = harness.ROOT


# ---- the device -------------------------------------------------------------------------------------

def jax_module() -> Any:
    from litegpu.backends.xla.device import jax_module as litegpu_jax

    return litegpu_jax()


def environment(accelerator: str) -> Any:
    """The Environment models are made with: the real one (GPU), or the CPU standing in for a GPU."""
    import litegpu

    if accelerator == "gpu":
        return litegpu.Environment.create()

    class CpuStandingInForGpu(litegpu.Environment):
        @staticmethod
        def platforms() -> set[str]:
            return {"cpu", "gpu"}

        def device(self, platform: str) -> Any:
            return super().device("cpu")

    return CpuStandingInForGpu()


def require(accelerator: str) -> Any:
    """The JAX device the measurement runs on; exits with a clear message when there is no GPU."""
    from litegpu.backends.xla.device import available_platforms, device_for

    platforms = available_platforms()
    if accelerator == "gpu" and "gpu" not in platforms:
        sys.exit(f"bench_gpu.py: JAX sees no GPU on this machine (platforms: {', '.join(sorted(platforms))}). "
                 "Run it where `python -c 'import jax; print(jax.devices(\"gpu\"))'` lists one, or pass "
                 "--accelerator cpu for a dry run of the logic on the CPU (its numbers mean nothing for a GPU).")
    device = device_for(accelerator)
    print(f"device: {device} ({getattr(device, 'device_kind', accelerator)})"
          + ("  [DRY RUN: the CPU stands in for the GPU]" if accelerator == "cpu" else ""), flush=True)
    return device


def compiled(source: Any, accelerator: str, *, precision: str = "fp32", cache_dir: Path | None = None) -> Any:
    import litegpu

    flags = litegpu.HardwareAccelerator.GPU | litegpu.HardwareAccelerator.CPU
    options = litegpu.Options(flags, gpu_options=litegpu.GpuOptions(precision=precision),
                              serialization_dir=str(cache_dir) if cache_dir else None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the plan is printed instead
        if isinstance(source, (bytes, bytearray)):
            return litegpu.CompiledModel.from_buffer(bytes(source), options=options,
                                                     environment=environment(accelerator))
        return litegpu.CompiledModel.from_file(str(source), options=options, environment=environment(accelerator))


def block(values: Any) -> Any:
    """Wait until device values are computed (numpy values already are)."""
    for v in values if isinstance(values, (list, tuple)) else [values]:
        if hasattr(v, "block_until_ready"):
            v.block_until_ready()
    return values


def machine(device: Any) -> dict:
    return {"device": str(device), "device_kind": getattr(device, "device_kind", "?"), **harness.machine("jax")}


# ---- bandwidth --------------------------------------------------------------------------------------

def measure_bandwidth(device: Any, nbytes: int, repeats: int, inner: int = 8) -> dict:
    """Device memory bandwidth: a jitted ``x + 1`` over ``nbytes`` of float32 reads and writes every byte
    once (XLA cannot skip the copy: the result is a new buffer), so bytes moved = 2 * nbytes.

    The copy runs ``inner`` times inside one program (a loop XLA cannot fold: each pass reads the last one's
    result), so that the host's dispatch and wait, about 0.1-0.5 ms, are paid once per ``inner`` copies: timed
    one program a copy, the H200's 1 GB copy gave 2006 GB/s where its memory moves over 4 TB/s (2026-11-26)."""
    jax = jax_module()
    import jax.numpy as jnp

    n = nbytes // 4
    x = jax.device_put(np.zeros(n, np.float32), device)
    bumps = jax.jit(lambda a: jax.lax.fori_loop(0, inner, lambda _, v: v + jnp.float32(1), a))
    times = [t / inner for t in timed(lambda: bumps(x).block_until_ready(), repeats)]
    best, median = min(times), statistics.median(times)
    # read only (what a decode step mostly does): a sum per pass, each pass's input shifted by the last sum
    sums = jax.jit(lambda a: jax.lax.fori_loop(0, inner, lambda _, t: t + jnp.sum(a + t * 0), jnp.float32(0)))
    reads = statistics.median([t / inner for t in timed(lambda: sums(x).block_until_ready(), repeats)])
    return {"array_bytes": n * 4, "bytes_moved": 2 * n * 4, "median_s": median, "min_s": best,
            "copies_per_program": inner, "read_median_s": reads, "read_bandwidth_Bps": n * 4 / reads,
            "bandwidth_Bps": 2 * n * 4 / median, "bandwidth_best_Bps": 2 * n * 4 / best}


def cmd_bandwidth(args: argparse.Namespace) -> dict:
    device = require(args.accelerator)
    result = measure_bandwidth(device, int(args.bandwidth_gb * 1e9), args.repeats)
    print(f"copy of {result['array_bytes'] / 1e9:.2f} GB (read + write): median {result['median_s'] * 1e3:.3f} ms, "
          f"{result['bandwidth_Bps'] / 1e9:.0f} GB/s (best {result['bandwidth_best_Bps'] / 1e9:.0f} GB/s); "
          f"read only {result['read_bandwidth_Bps'] / 1e9:.0f} GB/s")
    return {"machine": machine(device), "bandwidth": result}


# ---- run-async: overlap of host work with a GPU run -------------------------------------------------

def matmul_chain(size: int, layers: int) -> bytes:
    """x [size, size] through ``layers`` FULLY_CONNECTED + TANH: 2 * size**3 flops per layer, one output."""
    from litegpu.ir.builder import ModelBuilder
    from litegpu.ir.save import to_bytes

    rng = np.random.default_rng(0)
    b = ModelBuilder()
    h = b.input("x", (size, size))
    for i in range(layers):
        w = b.constant(f"w{i}", (rng.standard_normal((size, size), np.float32) / np.sqrt(size)).astype(np.float32))
        z, a = b.tensor(f"z{i}", (size, size)), b.tensor(f"a{i}", (size, size))
        b.op("FULLY_CONNECTED", [h, w, -1], [z])
        b.op("TANH", [z], [a])
        h = a
    b.output(h)
    return to_bytes(b.build())


def host_work(iterations: int, block_rows: np.ndarray) -> float:
    """Numpy work on the host thread that issued the run (a stand-in for pre/post-processing)."""
    total = 0.0
    for _ in range(iterations):
        total += float(np.tanh(block_rows @ block_rows.T).sum())
    return total


def calibrate_host_work(target_s: float, block_rows: np.ndarray) -> int:
    """Iterations of ``host_work`` that take about ``target_s`` seconds."""
    n = 1
    while True:
        start = time.perf_counter()
        host_work(n, block_rows)
        took = time.perf_counter() - start
        if took >= 0.05 or n >= 1 << 20:
            return max(1, round(n * target_s / took))
        n *= 2


def cmd_run_async(args: argparse.Namespace) -> dict:
    import litegpu

    device = require(args.accelerator)
    model = compiled(matmul_chain(args.size, args.layers), args.accelerator)
    x = np.random.default_rng(1).standard_normal((args.size, args.size)).astype(np.float32)
    jax = jax_module()
    inputs = [litegpu.TensorBuffer.from_dlpack(jax.device_put(x, model.environment.device("gpu")))]
    outputs = model.create_output_buffers(0)

    def run_alone() -> None:
        model.run_async(0, inputs, outputs).wait()

    run_times = timed(run_alone, args.repeats)
    run_s = statistics.median(run_times)
    rows = np.random.default_rng(2).standard_normal((64, 256)).astype(np.float32)
    iterations = calibrate_host_work(run_s, rows)
    host_times = timed(lambda: host_work(iterations, rows), args.repeats, warmup=1)
    host_s = statistics.median(host_times)

    def overlapped() -> None:
        event = model.run_async(0, inputs, outputs)
        host_work(iterations, rows)
        event.wait()

    both_times = timed(overlapped, args.repeats)
    both_s = statistics.median(both_times)
    # 1: the host work hid completely behind the run (or the run behind it); 0: they ran one after the other
    overlap = (run_s + host_s - both_s) / min(run_s, host_s)
    flops = 2 * args.size ** 3 * args.layers
    result = {"machine": machine(device), "size": args.size, "layers": args.layers, "repeats": args.repeats,
              "run_ms": run_s * 1e3, "run_tflops": flops / run_s / 1e12, "host_ms": host_s * 1e3,
              "host_iterations": iterations, "run_async_plus_host_ms": both_s * 1e3, "overlap_fraction": overlap,
              "serial_ms": (run_s + host_s) * 1e3}
    print(f"model: {args.layers} x FULLY_CONNECTED+TANH on [{args.size}, {args.size}] float32 "
          f"({flops / 1e9:.1f} GFLOP), input on the device, outputs left there")
    print("| what | median ms |\n|---|---:|")
    print(f"| (a) run_async + wait, alone | {run_s * 1e3:.2f} |")
    print(f"| (b) host numpy work alone ({iterations} iterations) | {host_s * 1e3:.2f} |")
    print(f"| (c) run_async, host work, wait | {both_s * 1e3:.2f} |")
    print(f"| (a) + (b), if nothing overlapped | {(run_s + host_s) * 1e3:.2f} |")
    print(f"overlap fraction ((a) + (b) - (c)) / min((a), (b)): {overlap:.2f}  "
          f"(1 = the shorter one hid completely, 0 = serial)")
    return result


# ---- boundaries: a model split across GPU and CPU ---------------------------------------------------

def detector_bytes() -> bytes:
    """The detector of tests/compile/test_plan_partitions.py (convolutions on the GPU, NMS and WHERE on the CPU)."""
    from litegpu.ir.save import to_bytes

    path = ROOT / "tests" / "compile" / "test_plan_partitions.py"
    spec = importlib.util.spec_from_file_location("_bench_plan_partitions", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return to_bytes(module.detector_model())


def where_of(value: Any) -> str:
    from litegpu.backends.xla.device import is_device_array

    if is_device_array(value):
        return next(iter(value.devices())).platform
    return "host"


def traced_run(signature: Any, inputs: Sequence[Any]) -> tuple[list[dict], list[dict]]:
    """One run of a split signature, step by step with a wait after each: (partitions, transfers) timings.

    Mirrors ``PartitionedSignature.run``: each tensor moves at most once per destination per run."""
    sg = signature.subgraph
    values: dict[int, Any] = dict(zip(sg.inputs, inputs))
    placed: dict = {}
    signature.transfers = 0
    parts, moves = [], []
    for k, unit in enumerate(signature.units):
        for t in unit.op_range.inputs:
            if (t, unit.where) in placed:
                continue
            source, before = where_of(values[t]), signature.transfers
            start = time.perf_counter()
            block(signature._placed(values, placed, t, unit))
            took = time.perf_counter() - start
            if signature.transfers > before:
                tensor = sg.tensors[t]
                moves.append({"tensor": tensor.name, "from": source, "to": unit.where, "into_partition": k,
                              "bytes": int(np.asarray(values[t]).nbytes) if source == "host" else
                              int(values[t].nbytes), "s": took})
        args = [placed[(t, unit.where)] for t in unit.op_range.inputs]
        start = time.perf_counter()
        results = block(unit.run(args))
        parts.append({"partition": k, "where": unit.where, "ops": len(unit.op_range.op_indices),
                      "s": time.perf_counter() - start})
        values.update(zip(unit.op_range.outputs, results))
    return parts, moves


def cmd_boundaries(args: argparse.Namespace) -> dict:
    device = require(args.accelerator)
    model = compiled(args.model.read_bytes() if args.model else detector_bytes(), args.accelerator)
    plan = model.plan
    if not plan.is_split:
        sys.exit(f"bench_gpu.py: the model is not split across devices ({plan.summary()}); nothing to measure")
    print(plan.summary())
    for i, p in enumerate(plan.partitions):
        print(f"  partition {i}: {p.device} ({p.target.value}), ops {list(p.op_indices)}")
    details = list(model.get_input_tensor_details(0).values())
    feeds = harness.random_inputs(details, seed=1234)
    buffers, outputs = model.create_input_buffers(0), model.create_output_buffers(0)
    for b, x in zip(buffers, feeds):
        b.write(x)

    def whole() -> None:
        model.run_by_index(0, buffers, outputs)
        for o in outputs:
            o.read()

    whole_times = timed(whole, args.runs)
    signature = model._partitioned().signature(0)
    sg_inputs = [dict(zip([d["index"] for d in details], feeds))[t] for t in signature.subgraph.inputs]
    traced_run(signature, sg_inputs)  # warm-up: compiles every partition
    runs = [traced_run(signature, sg_inputs) for _ in range(args.runs)]
    parts = [{**p, "median_ms": median_ms([r[0][i]["s"] for r in runs])} for i, p in enumerate(runs[0][0])]
    moves = [{**m, "median_us": statistics.median([r[1][i]["s"] for r in runs]) * 1e6} for i, m in enumerate(runs[0][1])]
    for p in parts:
        p.pop("s")
    for m in moves:
        m.pop("s")
    print(f"\nwhole run (run_by_index + read every output): median {median_ms(whole_times):.3f} ms over {args.runs}")
    print("\nstep by step, waiting after each step (so the sum exceeds the pipelined whole run):")
    print("| step | where | median |\n|---|---|---:|")
    for p in parts:
        print(f"| partition {p['partition']} ({p['ops']} ops) | {p['where']} | {p['median_ms']:.3f} ms |")
    for m in moves:
        print(f"| move {m['tensor']!r} ({m['bytes']} B) before partition {m['into_partition']} | "
              f"{m['from']} -> {m['to']} | {m['median_us']:.1f} us |")
    total_moves = sum(m["median_us"] for m in moves) / 1e3
    total_parts = sum(p["median_ms"] for p in parts)
    print(f"\nsum of partitions {total_parts:.3f} ms, sum of {len(moves)} crossings {total_moves:.3f} ms")
    return {"machine": machine(device), "plan": plan.summary(), "runs": args.runs,
            "whole_median_ms": median_ms(whole_times), "partitions": parts, "transfers": moves}


# ---- decode: tokens per second against the weight-reading bound ------------------------------------

def device_param_bytes(model: Any) -> int:
    """Bytes of the weights litegpu holds on the device(s) for this model."""
    state = model._state
    if hasattr(state, "params"):  # a whole-model plan: the XLA engine's state
        states = [state]
    elif hasattr(state, "_states"):  # a split plan, litegpu before 2026-11-28: the runtime held the states
        states = list(state._states.values())
    else:  # a split plan: the XLA engine holds a state per platform
        states = [s for engine in state.engines.values() for _, s in getattr(engine, "_states", {}).values()]
    try:  # 4-bit weights: two a byte on the device (jax's nbytes counts one byte each)
        from litegpu.backends.xla.state import array_bytes
    except ImportError:  # litegpu before 2026-11-26
        array_bytes = lambda v: int(v.nbytes)  # noqa: E731
    return int(sum(array_bytes(v) for s in states for v in s.params.values()))


def host_pick_generate(model: Any, prompt: list[int], n: int) -> list[int]:
    """Greedy decoding as ``litegpu.generate`` did before 2026-11-25, for comparison: each step's logits read
    back to the host and the next token picked there, each step waited for before the next."""
    from litegpu.runtime.generate import _Loop, _prefill

    loop = _Loop(model, "prefill", "decode", "tokens", "input_pos", "logits")
    last = _prefill(loop, prompt, 0)
    tokens, position = [], len(prompt)
    while True:
        tokens.append(int(np.argmax(last)))
        if len(tokens) == n:
            return tokens
        last = loop.step(loop.decode, [tokens[-1]], position)[0]
        position += 1


def warm_first_token(path: Path, args: argparse.Namespace, prompt: list[int]) -> dict:
    """A second process with the compile cache the first one wrote (``--cache-dir``): its wall time from start to
    the first token, and its own load and first-generate seconds (``first-token``)."""
    import subprocess

    command = [sys.executable, str(Path(__file__).resolve()), "first-token", "--model", str(path),
               "--cache-dir", str(args.cache_dir), "--accelerator", args.accelerator, "--precision", args.precision,
               "--prompt", ",".join(map(str, prompt))]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - start
    found = [ln for ln in done.stdout.splitlines() if ln.startswith("FIRST-TOKEN ")]
    if done.returncode != 0 or not found:
        return {"error": (done.stderr or done.stdout)[-800:], "process_s": wall}
    return {**json.loads(found[-1].removeprefix("FIRST-TOKEN ")), "process_s": wall}


def cmd_first_token(args: argparse.Namespace) -> dict:
    """Load a model and generate one token, timed (the child of ``decode --cache-dir``)."""
    import litegpu

    start = time.perf_counter()
    model = compiled(args.model, args.accelerator, precision=args.precision, cache_dir=args.cache_dir)
    load_s = time.perf_counter() - start
    start = time.perf_counter()
    token = litegpu.generate(model, [int(t) for t in args.prompt.split(",")], 1)
    result = {"load_s": load_s, "first_generate_s": time.perf_counter() - start, "token": token}
    print("FIRST-TOKEN " + json.dumps(result), flush=True)
    return result


def kv_cache_bytes(config: Any) -> int:
    """Bytes of the decoder's float32 KV caches (``bench/models/decoder_model.py``: [1, max_len, width] per layer, K and V)."""
    return 2 * config.layers * config.max_len * config.width * 4


def bytes_read_per_token(config: Any) -> int:
    """The fewest bytes a decode step of ``config`` reads: every weight but the embedding table (one row of it)
    and, as the exported graph attends over its whole KV buffer (masked), every cache row."""
    embedding_row = 1 if config.weights in ("int8", "int4") else {"float32": 4, "float16": 2}[config.weights]
    embedding = config.vocab * config.width * embedding_row
    return config.weight_bytes() - embedding + config.width * embedding_row + kv_cache_bytes(config)


def streamed(model: Any, prompt: list[int], n: int, options: dict) -> tuple[list[int], list[float]]:
    """``generate_stream``'s tokens and the seconds after the call at which each arrived."""
    import litegpu

    start, tokens, arrivals = time.perf_counter(), [], []
    for token in litegpu.generate_stream(model, prompt, n, **options):
        tokens.append(token)
        arrivals.append(time.perf_counter() - start)
    return tokens, arrivals


def decode_at(model: Any, prompt: list[int], steps: int, repeats: int, options: dict, chunk: int) -> dict:
    """Decode time per token after ``prompt`` (the first new token is fed at position ``len(prompt)``).

    Two measures: ``s_per_token`` from the arrival times of the streamed tokens, from the end of the first
    device chunk to the last token (the prefill, the first chunk's compile-free launch and the host's start are
    outside it); and ``difference_s_per_token``, (generate(steps) - generate(1)) / (steps - 1), the measure of
    before, which carries the prefill's variation.  Also the token-by-token loop (``chunk_tokens=0``) timed
    on the same prompt, whose tokens must equal the chunked loop's."""
    import litegpu

    one = timed(lambda: litegpu.generate(model, prompt, 1, **options), repeats, warmup=1)
    runs = [streamed(model, prompt, steps, options) for _ in range(repeats + 1)][1:]  # the first one warms up
    tokens = runs[0][0]
    skip = max(chunk, 1)  # tokens 1..chunk come with the first launch
    steady = [(arrivals[-1] - arrivals[skip]) / (len(arrivals) - 1 - skip) for _, arrivals in runs]
    whole = [arrivals[-1] for _, arrivals in runs]
    litegpu.generate(model, prompt, 2, chunk_tokens=0)  # its one-step program compiled outside the timing
    start = time.perf_counter()
    reference = litegpu.generate(model, prompt, steps, chunk_tokens=0)
    by_token_s = time.perf_counter() - start
    if len(tokens) != steps or tokens != reference or any(t != tokens for t, _ in runs):
        print(f"WARNING: generate gave {len(tokens)} of {steps} tokens; equal to the token-by-token loop's: "
              f"{tokens == reference}; the same in every run: {all(t == tokens for t, _ in runs)}", flush=True)
    return {"position": len(prompt), "steps": steps, "s_per_token": statistics.median(steady),
            "s_per_token_runs": steady,
            "difference_s_per_token": (statistics.median(whole) - statistics.median(one)) / (steps - 1),
            "token_by_token_s_per_token": (by_token_s - statistics.median(one)) / (steps - 1),
            "generated": len(tokens), "equal_to_token_by_token": tokens == reference, "tokens": tokens[:16]}


def profiled_decode(model: Any, prompt: list[int], chunk: int, options: dict, folder: Path) -> None:
    """A ``jax.profiler`` trace of a few decode chunks (warm), for the launch gaps between kernels."""
    import litegpu

    jax = jax_module()
    litegpu.generate(model, prompt, 3 * chunk + 1, **options)
    with jax.profiler.trace(str(folder)):
        litegpu.generate(model, prompt, 3 * chunk + 1, **options)


def cmd_decode(args: argparse.Namespace) -> dict:
    import litegpu
    from decoder_model import config_for_bytes, write_decoder

    from litegpu.backends.xla import state as xla_state

    device = require(args.accelerator)
    if args.fold_share is not None:  # A/B of float16 weights converted at load on a GPU (backends/xla/state.py)
        xla_state.FOLD_GROWTH_DEVICE_SHARE = args.fold_share
    config = config_for_bytes(int(args.gigabytes * 1e9), width=args.width, heads=max(1, args.width // 128),
                              vocab=args.vocab, max_len=args.max_len, prefill_len=args.prefill_len,
                              weights=args.weights)
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="litegpu-decode-"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"decoder_{args.weights}_{args.gigabytes:g}gb_{args.width}x{args.max_len}.tflite"
    try:
        if not path.exists():
            start = time.perf_counter()
            write_decoder(config, path, extended_buffers=True)
            print(f"wrote {path} ({path.stat().st_size / 1e9:.2f} GB) in {time.perf_counter() - start:.0f} s: {config}",
                  flush=True)
        start = time.perf_counter()
        model = compiled(path, args.accelerator, precision=args.precision, cache_dir=args.cache_dir)
        load_s = time.perf_counter() - start
        positions = args.positions or [config.prefill_len]
        prompts = [[(7 * i + 3) % (config.vocab - 1) + 1 for i in range(p)] for p in positions]
        # As many tokens as the cache holds after the longest prompt, or --steps
        room = config.max_len - max(positions) + 1
        steps = min(args.steps, room) if args.steps else room
        start = time.perf_counter()
        print(f"loaded in {load_s:.1f} s", flush=True)  # progress: a step stopped at its time limit says where
        first = litegpu.generate(model, prompts[0], 2)  # compiles prefill and decode
        compile_s = time.perf_counter() - start
        print(f"first generate (compiles prefill and decode) {compile_s:.1f} s", flush=True)

        chunked = "chunk_tokens" in inspect.signature(litegpu.generate).parameters  # litegpu since 2026-11-26
        options = {"chunk_tokens": args.chunk} if chunked and args.chunk is not None else {}
        try:
            from litegpu.backends.xla.generate import DEFAULT_CHUNK
        except ImportError:
            DEFAULT_CHUNK = 0
        chunk = options.get("chunk_tokens", DEFAULT_CHUNK if chunked else 0)
        at = []
        for prompt in prompts:
            at.append(decode_at(model, prompt, steps, args.repeats, options, chunk))
            print(f"position {len(prompt)}: {at[-1]['s_per_token'] * 1e3:.3f} ms/token", flush=True)
        if at[0]["tokens"][:2] != first:  # reported, not fatal: the timing still stands
            print(f"WARNING: greedy decoding is not deterministic: {at[0]['tokens'][:2]} then {first}", flush=True)
        if args.trace:
            profiled_decode(model, prompts[0], max(chunk, 1), options, args.trace)
        host_per_token_s = None
        if args.host_pick:
            prompt = prompts[0]
            host_one = timed(lambda: host_pick_generate(model, prompt, 1), args.repeats, warmup=1)
            host_many = timed(lambda: host_pick_generate(model, prompt, steps), args.repeats, warmup=0)
            host_per_token_s = (statistics.median(host_many) - statistics.median(host_one)) / (steps - 1)
        weight_bytes, on_device = config.weight_bytes(), device_param_bytes(model)
        read_bytes = bytes_read_per_token(config)
        bandwidth = measure_bandwidth(device, int(args.bandwidth_gb * 1e9), 10)
        bound = bandwidth["bandwidth_Bps"] / read_bytes
        for row in at:
            row["tokens_per_s"] = 1 / row["s_per_token"]
            row["fraction_of_bound"] = row["tokens_per_s"] / bound
            row["bound_s_per_token"] = 1 / bound
        per_token_s = at[0]["s_per_token"]
        result = {
            "machine": machine(device), "config": repr(config), "file_bytes": path.stat().st_size,
            "weight_bytes": weight_bytes, "device_weight_bytes": on_device, "precision": args.precision,
            "kv_cache_bytes": kv_cache_bytes(config), "bytes_read_per_token": read_bytes,
            "xla_flags": os.environ.get("XLA_FLAGS", ""),
            "plan": model.plan.summary(), "load_s": load_s, "first_generate_s": compile_s, "decode_steps": steps,
            "positions": at, "decode_s_per_token": per_token_s, "tokens_per_s": 1 / per_token_s,
            "bandwidth": bandwidth,
            "host_pick_s_per_token": host_per_token_s, "chunk_tokens": chunk,
            "generate_chunks": chunked, "litegpu": str(Path(litegpu.__file__).parent),
            "fold_growth_device_share": xla_state.FOLD_GROWTH_DEVICE_SHARE,
            "bound_tokens_per_s": bound, "fraction_of_bound": at[0]["fraction_of_bound"],
            "bound_tokens_per_s_device_bytes": bandwidth["bandwidth_Bps"] / on_device if on_device else None,
            "tokens": at[0]["tokens"], "deterministic": at[0]["tokens"][:2] == first,
            "generated": at[0]["generated"], "equal_to_token_by_token": all(r["equal_to_token_by_token"] for r in at),
            "first_token_cold_s": load_s + compile_s if args.cache_dir else None,
            "first_token_warm": warm_first_token(path, args, prompts[0]) if args.cache_dir else None}
    finally:
        if not args.keep:
            path.unlink(missing_ok=True)
            folder.rmdir()
    print(f"plan: {result['plan']}; load {load_s:.1f} s, first generate (compiles) {compile_s:.1f} s")
    warm = result["first_token_warm"]
    if warm:
        print(f"first token: cold {result['first_token_cold_s']:.1f} s; warm (second process, compile cache) "
              + (f"{warm['load_s'] + warm['first_generate_s']:.1f} s ({warm['process_s']:.1f} s with the process "
                 "start)" if "error" not in warm else f"failed: {warm['error'][-300:]}"))
    print("| quantity | value |\n|---|---:|")
    print(f"| weights in the file ({args.weights}) | {weight_bytes / 1e9:.3f} GB |")
    print(f"| weights held on the device | {on_device / 1e9:.3f} GB |")
    print(f"| bytes a token reads (weights but the embedding table, every KV cache row) | {read_bytes / 1e9:.3f} GB |")
    print(f"| measured bandwidth (copy of {bandwidth['array_bytes'] / 1e9:.2f} GB; read only) | "
          f"{bandwidth['bandwidth_Bps'] / 1e9:.0f} GB/s; {bandwidth['read_bandwidth_Bps'] / 1e9:.0f} GB/s |")
    print(f"| bound: bytes per token / copy bandwidth | {1e3 / bound:.3f} ms/token |")
    for row in at:
        print(f"| position {row['position']}: decode, median of {args.repeats} x {steps} tokens (chunk {chunk}) | "
              f"{row['s_per_token'] * 1e3:.3f} ms/token = {row['tokens_per_s']:.1f} tokens/s, "
              f"**{row['fraction_of_bound']:.2f} of the bound**; difference measure "
              f"{row['difference_s_per_token'] * 1e3:.3f}; token by token {row['token_by_token_s_per_token'] * 1e3:.3f} "
              f"ms/token; tokens equal: {row['equal_to_token_by_token']} |")
    if host_per_token_s is not None:
        print(f"| the same, each token picked on the host (generate before 2026-11-25) | "
              f"{host_per_token_s * 1e3:.2f} ms/token |")
    if os.environ.get("XLA_FLAGS"):
        print(f"| XLA_FLAGS | {os.environ['XLA_FLAGS']} |")
    return result


# ---- main -------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, fn: Callable, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        p.set_defaults(fn=fn)
        p.add_argument("--accelerator", choices=("gpu", "cpu"), default="gpu",
                       help="gpu (default; refused without one) or cpu: a dry run with the CPU standing in")
        p.add_argument("--json", type=Path, help="also write the numbers here")
        return p

    p = add("bandwidth", cmd_bandwidth, "device memory bandwidth from a timed copy")
    p.add_argument("--bandwidth-gb", type=float, default=1.0)
    p.add_argument("--repeats", type=int, default=20)
    p = add("run-async", cmd_run_async, "how much run_async overlaps host work with the device's")
    p.add_argument("--size", type=int, default=4096, help="matrix size (default 4096: a few ms per layer on a GPU)")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--repeats", type=int, default=20)
    p = add("boundaries", cmd_boundaries, "time each partition and each boundary crossing of a split model")
    p.add_argument("--model", type=Path, help="a .tflite whose GPU|CPU plan is split (default: the test detector)")
    p.add_argument("--runs", type=int, default=50)
    p = add("decode", cmd_decode, "decode tokens/s of a generated decoder against the bandwidth bound")
    p.add_argument("--gigabytes", type=float, default=3.0, help="weight bytes of the decoder written")
    p.add_argument("--weights", choices=("float16", "float32", "int8", "int4"), default="float16")
    p.add_argument("--precision", choices=("fp32", "fp16", "fp16_fp32_accum"), default="fp32")
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--max-len", type=int, default=256)
    p.add_argument("--prefill-len", type=int, default=16)
    p.add_argument("--steps", type=int, default=0, help="tokens generated per timed call (default: as many as "
                   "the cache holds)")
    p.add_argument("--chunk", type=int, help="generate(chunk_tokens=...): decode steps per launch (0: one per token)")
    p.add_argument("--host-pick", action="store_true", help="also time the loop of before 2026-11-25 (tokens "
                   "picked on the host)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--bandwidth-gb", type=float, default=1.0)
    p.add_argument("--keep", type=Path, help="write the model into this folder and keep it (reused when present)")
    p.add_argument("--fold-share", type=float, help="backends.xla.state.FOLD_GROWTH_DEVICE_SHARE for this run (0: float16 "
                   "weights stay float16 on a GPU, converted in every step)")
    p.add_argument("--cache-dir", type=Path, help="compile cache: the first token timed cold (this process, which "
                   "writes it) and warm (a second process that reads it)")
    p.add_argument("--positions", type=int, nargs="+", help="decode after prompts of these lengths (default: one "
                   "prefill's length): a token's cost at these cache positions")
    p.add_argument("--trace", type=Path, help="write a jax.profiler trace of a few decode chunks into this folder")
    p = add("first-token", cmd_first_token, "load a model and generate one token, timed (decode --cache-dir)")
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--cache-dir", type=Path)
    p.add_argument("--precision", choices=("fp32", "fp16", "fp16_fp32_accum"), default="fp32")
    p.add_argument("--prompt", default="1,2,3")
    args = parser.parse_args(argv)
    result = args.fn(args)
    result["command"] = " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])])
    if args.json:
        harness.write_json(args.json, result, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
