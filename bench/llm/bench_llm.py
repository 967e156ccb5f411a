"""Decode tokens/s and time to first token of a litert-torch LLM: litegpu against the official runtime.

    python bench/llm/bench_llm.py MODEL.tflite [--prompt 20] [--new 32] [--threads 2]

Same greedy loop for every runtime (prefill the prompt but its last token with the smallest prefill_<T>,
decode the last token, then one decode per new token; KV cache fed back; a model whose prefill returns logits,
as bench/models/decoder_model.py's, prefills the whole prompt): litegpu (``generate_stream``: the cache on the device
with XLA, in the interpreter's own tensors with the official interpreter), the official interpreter with its
builtin kernels and with XNNPACK (its default), both through its signature runners (the cache through numpy),
and litegpu with the cache passed through TensorBuffers (what it did before keeping it in the interpreter).
The runtimes alternate repeat by repeat, in one process.
With ``--litertlm BUNDLE`` (the same model bundled by bench/llm/litertlm_bundle.py; LiteRT-LM runs litert-torch's
mask-as-input or transposed-KV exports) also LiteRT-LM (``litert-lm-api``), the official LLM runtime, through
its own benchmark (same prompt length and new tokens; it reports its own TTFT and decode rate).
Time to first token = from the prompt to the first new token; tokens/s over the decode steps after it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
import harness  # noqa: E402


def official_loop(path: str, prompt: list[int], new: int, threads: int, builtin: bool):
    """The official interpreter's signature runners stepped by hand, the cache passed back through numpy:
    litert-torch's exports (``prefill_<T>`` without logits, one position per token: the prompt but its last
    token prefilled, the last token decoded) and ``bench/models/decoder_model.py``'s (one ``prefill`` with logits and
    one position: the whole prompt prefilled).  The prompt must fit one prefill."""
    interp = harness.official_interpreter(path, threads, builtin=builtin, allocate=False)
    decode = interp.get_signature_runner("decode")
    signatures = interp.get_signature_list()
    prefills = {int(k.split("_")[1]) if "_" in k else
                int(interp.get_signature_runner(k).get_input_details()["tokens"]["shape"][-1]): k
                for k in signatures if k == "prefill" or k.startswith("prefill_")}
    mask_shape = decode.get_input_details().get("mask", {}).get("shape")  # litert-torch's mask_as_input
    state = [k for k in decode.get_input_details() if k in signatures["decode"]["outputs"]]

    def mask(rows: int, position: int) -> dict:
        if mask_shape is None:
            return {}
        allowed = np.arange(mask_shape[-1])[None, :] <= (position + np.arange(rows))[:, None]
        return {"mask": np.where(allowed, 0, np.finfo(np.float32).min).astype(np.float32).reshape(1, 1, rows, -1)}

    def positions(runner, start: int, count: int) -> np.ndarray:
        shape = runner.get_input_details()["input_pos"]["shape"]
        return (np.arange(start, start + count) if int(np.prod(shape)) > 1 else np.array([start])).astype(np.int32)

    def run() -> tuple[float, float, list[int]]:
        start = time.perf_counter()
        kv = {k: np.zeros(v["shape"], v["dtype"]) for k, v in decode.get_input_details().items() if k in state}
        key = next(k for n, k in sorted(prefills.items()) if n >= len(prompt))
        runner = interp.get_signature_runner(key)
        with_logits = "logits" in signatures[key]["outputs"]
        body = prompt if with_logits else prompt[:-1]
        length = next(n for n, k in prefills.items() if k == key)
        tokens = np.zeros((1, length), np.int32)
        tokens[0, :len(body)] = body
        out = runner(tokens=tokens, input_pos=positions(runner, 0, length), **kv, **mask(length, 0))
        kv = {k: v for k, v in out.items() if k in state}
        if with_logits:
            token = int(np.argmax(out["logits"].reshape(length, -1)[len(body) - 1]))
            position, tokens_out, first = len(prompt), [token], time.perf_counter()
        else:
            token, position, tokens_out, first = prompt[-1], len(prompt) - 1, [], 0.0
        while len(tokens_out) < new:
            out = decode(tokens=np.array([[token]], np.int32), input_pos=positions(decode, position, 1), **kv,
                         **mask(1, position))
            kv = {k: v for k, v in out.items() if k in state}
            token = int(np.argmax(out["logits"].reshape(-1)))
            tokens_out.append(token)
            position += 1
            if len(tokens_out) == 1:
                first = time.perf_counter()
        end = time.perf_counter()
        return first - start, (new - 1) / (end - first), tokens_out

    return run


def litegpu_loop(path: str, prompt: list[int], new: int, threads: int, carried: bool = True,
                 engines: tuple[str, ...] | None = None):
    """``generate_stream``; ``carried=False`` passes the cache through TensorBuffers even where the official
    interpreter could keep it in its tensors (the code before issue 26), to measure what keeping it saves;
    ``engines`` limits the CPU engines (``("openvino",)`` keeps the official interpreter out: XLA runs the rest)."""
    import contextlib

    import litegpu
    from litegpu.runtime import generate as generate_module

    model = litegpu.CompiledModel.from_file(path, options=litegpu.Options(
        litegpu.HardwareAccelerator.CPU, cpu_options=litegpu.CpuOptions(num_threads=threads, engines=engines)))

    @contextlib.contextmanager
    def through_buffers():
        found = generate_module._CarriedCache.for_loop
        generate_module._CarriedCache.for_loop = classmethod(lambda cls, loop: None)
        try:
            yield
        finally:
            generate_module._CarriedCache.for_loop = found

    def run() -> tuple[float, float, list[int]]:
        with contextlib.nullcontext() if carried else through_buffers():
            start = time.perf_counter()
            out, first = [], 0.0
            for i, token in enumerate(litegpu.generate_stream(model, prompt, new)):
                out.append(token)
                if i == 0:
                    first = time.perf_counter()
            end = time.perf_counter()
        return first - start, (new - 1) / (end - first), out

    run.plan = model.plan.engine_summary()  # type: ignore[attr-defined]
    return run


def litert_lm_loop(bundle: str, prompt: list[int], new: int, threads: int):
    import litert_lm

    litert_lm.set_min_log_severity(litert_lm.LogSeverity.ERROR)

    def run() -> tuple[float, float, list[int]]:
        info = litert_lm.Benchmark(model_path=bundle, backend=litert_lm.interfaces.CPU(thread_count=threads),
                                   prefill_tokens=len(prompt), decode_tokens=new).run()
        if not info.last_decode_token_count:
            raise RuntimeError("LiteRT-LM decoded nothing (see its log)")
        return info.time_to_first_token_in_second, info.last_decode_tokens_per_second, []

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="+", help="one model, or several timed side by side (rows prefixed by "
                        "the file's name)")
    parser.add_argument("--prompt", type=int, default=20)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--litertlm", help="the same model as a .litertlm bundle: also time LiteRT-LM")
    parser.add_argument("--without-litert", action="store_true",
                        help="also time litegpu with the official interpreter kept out (XLA and OpenVINO)")
    parser.add_argument("--skip", nargs="*", default=[], help="runtimes to leave out, e.g. 'official builtin'")
    args = harness.parse_args(parser)
    prompt = [int(t) for t in np.random.default_rng(0).integers(1, 100, args.prompt)]
    runs = {}
    for path in args.model:
        label = "" if len(args.model) == 1 else f"{path.rsplit('/', 1)[-1].removesuffix('.tflite')}: "
        made = {"litegpu": lambda: litegpu_loop(path, prompt, args.new, args.threads),
                "litegpu, cache through buffers": lambda: litegpu_loop(path, prompt, args.new, args.threads, False),
                "official builtin": lambda: official_loop(path, prompt, args.new, args.threads, True),
                "official XNNPACK": lambda: official_loop(path, prompt, args.new, args.threads, False)}
        if args.without_litert:
            made["litegpu without the official interpreter"] = \
                lambda: litegpu_loop(path, prompt, args.new, args.threads, engines=("openvino",))
        for name, make in made.items():
            if name not in args.skip:
                runs[label + name] = _made_or_error(make)
    if args.litertlm:
        runs["LiteRT-LM (its benchmark)"] = litert_lm_loop(args.litertlm, prompt, args.new, args.threads)
    results: dict[str, list] = {k: [] for k in runs}
    errors: dict[str, str] = {}
    for name, run in list(runs.items()):
        try:
            run()  # compile / warm up
        except Exception as e:  # a runtime that cannot run the model is reported, not hidden
            errors[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
            del runs[name], results[name]
    for names in harness.rounds(list(runs), args.repeats):
        for name in names:
            results[name].append(runs[name]())
    print(harness.table_head(["runtime", "time to first token ms", "decode tokens/s", "decode ms / token",
                              "greedy tokens equal litegpu's"], "lrrrl"))
    for name, values in results.items():
        label = name[:name.index(": ") + 2] if ": " in name else ""
        ours = results.get(label + "litegpu", [[None, None, None]])[0][2]
        ttft = np.median([v[0] for v in values]) * 1e3
        rate = np.median([v[1] for v in values])
        same = "n/a (token ids not exposed)" if not values[0][2] else values[0][2] == ours
        print(f"| {name} | {ttft:.1f} | {rate:.0f} | {1e3 / rate:.2f} | {same} |")
    for name, error in errors.items():
        print(f"| {name} | cannot run: {error} | | | |")
    plans = "; ".join(f"{name}: {run.plan}" for name, run in runs.items() if hasattr(run, "plan"))
    print(f"\nlitegpu's plans: {plans}; {args.threads} threads, median of {args.repeats} alternated repeats")


def _made_or_error(make):
    """The loop ``make()`` returns, or one that raises what making it raised (reported as "cannot run")."""
    try:
        return make()
    except Exception as e:  # noqa: BLE001
        error = e  # ``e`` is unbound when the except block ends

        def failed():
            raise error
        return failed


if __name__ == "__main__":
    main()
