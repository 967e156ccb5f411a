"""How far XNNPACK and OpenVINO alone are from the official builtin kernels on integer and hybrid models.

    python bench/cpu/integer_distance.py MODEL.tflite ... [--draws 5]
    python bench/cpu/integer_distance.py --per-op MODEL.tflite INTERMEDIATES.npz

Whole models: random inputs (``--draws`` of them), every output compared with the builtin kernels' (integer
outputs: largest difference in units and the share of equal values; float outputs: relative error).
``--per-op``: each op alone through OpenVINO, fed the builtin kernels' own intermediates (an ``.npz`` of
``t<index>:<name>`` arrays, as ``../shared/models/mobilenet_v3_small_int8.intermediates.npz``), to see which op
kinds differ.  This is why litegpu keeps integer and hybrid ops on its exact kernels (BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
import harness  # noqa: E402


def _inputs(details: list[dict], rng: np.random.Generator) -> list[np.ndarray]:
    out = []
    for d in details:
        if np.dtype(d["dtype"]).kind == "f":
            out.append(rng.uniform(-1, 1, d["shape"]).astype(d["dtype"]))
        else:
            out.append(rng.integers(-100, 100, d["shape"]).astype(d["dtype"]))
    return out


def _distance(results: list[tuple]) -> str:
    if results[0][0] == "float":
        return f"{max(r[1] for r in results):.1e} relative"
    return f"{max(r[1] for r in results)} units, {min(r[2] for r in results):.1%} exact"


def whole_models(paths: list[Path], draws: int) -> None:
    import openvino as ov

    core = ov.Core()
    print(harness.table_head(["model", "XNNPACK", "OpenVINO alone"], "lll"))
    for path in paths:
        builtin = harness.official_interpreter(path, builtin=True)
        xnnpack = harness.official_interpreter(path, 2)
        try:
            compiled = core.compile_model(core.read_model(str(path)), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        except Exception:
            compiled = None
        rng = np.random.default_rng(0)
        found: dict[str, list] = {"xnnpack": [], "openvino": []}
        for _ in range(draws):
            ins = _inputs(builtin.get_input_details(), rng)
            outs = {}
            for name, it in (("builtin", builtin), ("xnnpack", xnnpack)):
                outs[name] = harness.invoker(it, ins)()
            if compiled is not None:
                r = compiled(ins)
                outs["openvino"] = [r[o] for o in compiled.outputs]
            for name in found:
                for got, want in zip(outs.get(name, []), outs["builtin"]):
                    got = np.asarray(got)
                    if want.dtype.kind == "f":
                        found[name].append(("float", float(np.abs(got - want).max() / (np.abs(want).max() + 1e-12))))
                    else:
                        diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
                        found[name].append(("int", int(diff.max()), float((diff == 0).mean())))
        ov_text = _distance(found["openvino"]) if found["openvino"] else "cannot load"
        print(f"| {path.stem} | {_distance(found['xnnpack'])} | {ov_text} |", flush=True)


def per_op(path: Path, intermediates: Path) -> None:
    import litegpu
    from litegpu.backends.engine import EngineSettings
    from litegpu.backends.graph import OpRange
    from litegpu.backends.openvino import OpenVinoExecutable
    from litegpu.ir import execution_order

    model = litegpu.ir.read_model(str(path))
    with np.load(intermediates) as z:
        values = {int(k.split(":")[0][1:]): z[k] for k in z.files if k.startswith("t")}
    sg = model.subgraphs[0]
    stats: dict[str, list] = collections.defaultdict(list)
    for i in execution_order(sg, model.source):
        op = sg.operators[i]
        ins = [t for t in op.inputs if t >= 0 and sg.tensors[t].data is None]
        if any(t not in values for t in ins) or op.outputs[0] not in values:
            continue
        part = OpenVinoExecutable(model, OpRange(0, (i,), tuple(ins), (op.outputs[0],)), EngineSettings(2))
        got = part.run([values[t] for t in ins])[0]
        diff = np.abs(got.astype(np.int64) - values[op.outputs[0]].astype(np.int64))
        stats[op.opcode_name].append((int(diff.max()), float((diff == 0).mean())))
    print(harness.table_head(["op", "count", "largest difference (units)", "lowest share exact"], "lrrr"))
    for name, found in stats.items():
        print(f"| {name} | {len(found)} | {max(f[0] for f in found)} | {min(f[1] for f in found):.1%} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--draws", type=int, default=5)
    parser.add_argument("--per-op", action="store_true", help="MODEL INTERMEDIATES.npz: each op through OpenVINO")
    args = harness.parse_args(parser)
    if args.per_op:
        per_op(args.models[0], args.models[1])
    else:
        whole_models(args.models, args.draws)


if __name__ == "__main__":
    main()
