"""Compile time against depth (issue 25): the XLA compile of a decoder's prefill and decode programs with 4 and with
32 layers of the same width, with the repeated layers traced once in a loop (``backends.xla.layer_scan``, the default)
and traced layer by layer (``SCAN_MIN_BLOCKS = 0``), each measured in a fresh process, alternating.

    python bench/memory/compile_depth.py                         # XLA CPU, float32, width 512
    python bench/memory/compile_depth.py --weights float16 --platform gpu-deviceless   # for an H100, no GPU needed

``gpu-deviceless`` needs JAX's CUDA plugin (``bench/gpu/gpu_compile.py``'s venv).  The figure the issue asks for is the
ratio 32 layers / 4 layers, at most 1.5x.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
import harness  # noqa: E402


def measure(layers: int, scan: bool, args: argparse.Namespace) -> dict:
    """In this process: build the decoder, trace and compile both programs; seconds."""
    sys.path.insert(0, str(harness.ROOT / "src"))
    if args.platform == "gpu-deviceless":
        os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from decoder_model import DecoderConfig, build_decoder

    from litegpu.backends.xla import device as xla_device, state as xla_state, backend as xla_backend
    from litegpu.compile.float_view import model_for_platform
    from litegpu.compile.rewrites import rewrite_for_xla
    from litegpu.ir import numpy_dtype

    xla_state.SCAN_MIN_BLOCKS = 3 if scan else 0
    config = DecoderConfig(layers=layers, width=args.width, heads=max(1, args.width // 64), vocab=args.vocab,
                           max_len=args.max_len, prefill_len=args.prefill_len, weights=args.weights)
    platform = "gpu" if args.platform == "gpu-deviceless" else "cpu"
    model = model_for_platform(rewrite_for_xla(build_decoder(config)), platform)
    jax = xla_device.jax_module()
    if platform == "gpu":
        from litegpu.backends.xla.deviceless import DevicelessTarget

        device = DevicelessTarget.cuda(args.target)
    else:
        device = xla_device.device_for("cpu")
    started = time.perf_counter()
    state = xla_state.XlaState(model, device, platform=platform)
    load_s = time.perf_counter() - started
    result = {"layers": layers, "scan": scan, "scanned_subgraphs": sorted(state.regions), "load_s": load_s}
    for sig in model.signatures:
        backend = xla_backend.XlaBackend(model, sig.subgraph_index, platform, state=state)
        sg = model.subgraphs[sig.subgraph_index]
        specs = [jax.ShapeDtypeStruct(tuple(sg.tensors[t].shape), numpy_dtype(sg.tensors[t].dtype),
                                      sharding=state.sharding) for t in sg.inputs]
        started = time.perf_counter()
        lowered = backend.lower(specs)
        traced = time.perf_counter()
        lowered.compile(compiler_options=backend.compiler_options or None)
        result[sig.key] = {"trace_s": traced - started, "compile_s": time.perf_counter() - traced}
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, nargs=2, default=(4, 32))
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--max-len", type=int, default=256)
    parser.add_argument("--prefill-len", type=int, default=16)
    parser.add_argument("--weights", default="float32", choices=("float32", "float16", "int8", "int4"))
    parser.add_argument("--platform", default="cpu", choices=("cpu", "gpu-deviceless"))
    parser.add_argument("--target", default="h100")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", nargs=2, metavar=("LAYERS", "SCAN"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(int(args.child[0]), args.child[1] == "1", args)))
        return 0
    print(harness.machine_line(), flush=True)
    passed = [a for a in (argv if argv is not None else sys.argv[1:])]
    results: dict[tuple, list] = {}
    for order in harness.rounds([(scan, layers) for scan in (True, False) for layers in args.layers], args.rounds):
        for scan, layers in order:
            out = subprocess.run([sys.executable, __file__, *passed, "--child", str(layers), "1" if scan else "0"],
                                 capture_output=True, text=True, check=True)
            results.setdefault((layers, scan), []).append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"XLA {args.platform}, {args.weights} decoder, width {args.width}; median of {args.rounds} processes")
    print(harness.table_head(["layers", "layers traced once in a loop", "load s", "prefill compile s",
                              "decode compile s", "total s"], "rlrrrr"))
    totals = {}
    for (layers, scan), runs in sorted(results.items(), key=lambda kv: (not kv[0][1], kv[0][0])):
        pre = statistics.median(r["prefill"]["trace_s"] + r["prefill"]["compile_s"] for r in runs)
        dec = statistics.median(r["decode"]["trace_s"] + r["decode"]["compile_s"] for r in runs)
        load = statistics.median(r["load_s"] for r in runs)
        totals[(layers, scan)] = pre + dec
        print(f"| {layers} | {'yes' if runs[0]['scanned_subgraphs'] else 'no'} | {load:.2f} | {pre:.2f} | {dec:.2f} | "
              f"{pre + dec:.2f} |")
    shallow, deep = args.layers
    for scan in (True, False):
        print(f"{'loop' if scan else 'layer by layer'}: {deep} / {shallow} layers = "
              f"{totals[(deep, scan)] / totals[(shallow, scan)]:.2f}x")
    if args.json:
        harness.write_json(args.json, {f"{k[0]}_{'scan' if k[1] else 'unrolled'}": v for k, v in results.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
