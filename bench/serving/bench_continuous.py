"""Continuous batching against one sequence at a time: total tokens/s of N concurrent LLM requests.

    python bench/serving/bench_continuous.py [--weights float32 int8] [--layers 4] [--width 1024]
                                             [--sequences 1 8 32] [--prompt 8] [--new 32] [--rounds 2] [--steps-per-launch 1] [--json out.json]
                                             [--accelerator gpu]

A decoder of ``bench/models/decoder_model.py`` (made in memory) runs on XLA CPU (``CpuOptions(engines=())``, the engine
a GPU plan uses, on the host), or on the GPU with ``--accelerator gpu`` (``bench/gpu/gpu_checks.sh decode``).  For each N, N requests (random prompts of ``--prompt`` tokens, ``--new`` greedy
tokens each) go through a ``ContinuousBatcher`` all at once (one decode step per launch for every sequence, the
KV caches stacked on the device), and through ``litegpu.generate`` one after the other (its device loop,
16 tokens per launch: the fastest single-sequence path).  Both sides are warmed up first (every slot count
compiled) and alternate round by round in one process; the sequences whose batched tokens are the ones
``generate`` gives them are counted (float rounding can differ between the batched and the single-sequence
programs, and a dynamic-range model can turn an ulp into another token).  Reported per N: total
tokens/s (all tokens of the N requests over the wall time from the first submit to the last token, prefills
included), the ratio, and the batched requests' median time to first token.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
import harness  # noqa: E402


def make_model(weights: str, args: argparse.Namespace):
    import litegpu
    from decoder_model import DecoderConfig, build_decoder
    from litegpu.ir.save import to_bytes

    config = DecoderConfig(layers=args.layers, width=args.width, heads=args.heads, vocab=args.vocab,
                           max_len=args.max_len, prefill_len=args.prompt, weights=weights)
    options = litegpu.Options(litegpu.HardwareAccelerator.CPU, cpu_options=litegpu.CpuOptions(engines=()))
    if args.accelerator == "gpu":
        options = litegpu.Options(litegpu.HardwareAccelerator.GPU | litegpu.HardwareAccelerator.CPU)
    return config, litegpu.CompiledModel.from_buffer(to_bytes(build_decoder(config)), options=options)


def batched_run(batcher, prompts: list[list[int]], new: int) -> tuple[float, list[list[int]], float]:
    start = time.perf_counter()
    handles = [batcher.submit(p, new) for p in prompts]
    tokens = [h.result() for h in handles]
    elapsed = time.perf_counter() - start
    return elapsed, tokens, statistics.median(h.first_token_s for h in handles)


def one_at_a_time(model, prompts: list[list[int]], new: int) -> tuple[float, list[list[int]]]:
    import litegpu

    start = time.perf_counter()
    tokens = [litegpu.generate(model, p, new) for p in prompts]
    return time.perf_counter() - start, tokens


def bench(weights: str, args: argparse.Namespace) -> list[dict]:
    from litegpu.runtime.continuous import ContinuousBatcher

    config, model = make_model(weights, args)
    rng = np.random.default_rng(0)
    requests = {n: [rng.integers(1, config.vocab, args.prompt).tolist() for _ in range(n)] for n in args.sequences}
    batcher = ContinuousBatcher(model, max(args.sequences), steps_per_launch=args.steps_per_launch)
    start = time.perf_counter()
    batcher.warm_up()
    for n in args.sequences:  # every slot count's programs, and generate's
        batched_run(batcher, requests[n], 2)
    one_at_a_time(model, requests[1] if 1 in requests else requests[min(requests)][:1], args.new)
    print(f"{weights}: {config.weight_bytes() / 1e6:.0f} MB of weights, warm-up {time.perf_counter() - start:.1f} s, "
          f"batcher engine {batcher.stats()['engine']}", flush=True)
    times: dict[tuple[int, str], list[float]] = {}
    first_tokens: dict[int, list[float]] = {}
    same: dict[int, list[int]] = {}  # per round: the sequences whose batched tokens are generate's
    for round_ in range(args.rounds):
        for n in args.sequences:
            for side in harness.rotated(("batched", "alone"), round_):
                if side == "batched":
                    elapsed, tokens, ttft = batched_run(batcher, requests[n], args.new)
                    first_tokens.setdefault(n, []).append(ttft)
                else:
                    elapsed, tokens = one_at_a_time(model, requests[n], args.new)
                times.setdefault((n, side), []).append(elapsed)
                if side == "batched":
                    batched_tokens = tokens
                else:
                    alone_tokens = tokens
            same.setdefault(n, []).append(sum(a == b for a, b in zip(batched_tokens, alone_tokens)))
            print(f"  round {round_ + 1}, {n} sequences: batched {times[(n, 'batched')][-1]:.2f} s, "
                  f"one at a time {times[(n, 'alone')][-1]:.2f} s", flush=True)
    batcher.close()
    rows = []
    for n in args.sequences:
        total = n * args.new
        batched = total / statistics.median(times[(n, "batched")])
        alone = total / statistics.median(times[(n, "alone")])
        rows.append({"weights": weights, "sequences": n, "batched_tokens_per_s": batched,
                     "alone_tokens_per_s": alone, "ratio": batched / alone,
                     "ttft_ms": 1e3 * statistics.median(first_tokens[n]), "same_tokens": min(same[n])})
    return rows


def markdown(rows: list[dict]) -> str:
    lines = ["| weights | sequences | batched tokens/s | one at a time tokens/s | ratio | batched TTFT p50 ms "
             "| sequences with generate's tokens |", "|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['weights']} | {r['sequences']} | {r['batched_tokens_per_s']:.0f} | "
              f"{r['alone_tokens_per_s']:.0f} | {r['ratio']:.2f} | {r['ttft_ms']:.0f} | "
              f"{r['same_tokens']} / {r['sequences']} |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", nargs="+", default=["float32"], choices=("float32", "float16", "int8", "int4"))
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--max-len", type=int, default=128)
    parser.add_argument("--prompt", type=int, default=8, help="prompt tokens (also the prefill length)")
    parser.add_argument("--new", type=int, default=32, help="tokens generated per request")
    parser.add_argument("--sequences", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps-per-launch", type=int, default=1, help="the batcher's decode steps per launch")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--accelerator", choices=("cpu", "gpu"), default="cpu",
                        help="cpu: XLA on the host (the engine a GPU plan uses); gpu: litegpu's GPU plan")
    args = harness.parse_args(parser, argv)
    rows = [row for weights in args.weights for row in bench(weights, args)]
    print(markdown(rows))
    if args.json:
        harness.write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
