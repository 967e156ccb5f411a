"""`litegpu serve` under load: requests/s and p50 / p99 latency at 1, 8, 32 and 64 concurrent clients for two tensor
models with batching off, on and auto (three servers, measured in turn at each level in a rotated order, three
rounds, the median reported; same inputs), and for an LLM total tokens/s and time to first token, sequences decoded
together against one at a time (two servers in turn).

    python bench/serving/serve.py [--clients 1,8,32,64] [--requests 400] [--llm BUNDLE] [--only tensor|llm]

Each server is a `litegpu serve` process on 127.0.0.1; the clients (aiohttp: httpx's async client tops out near 50
requests/s at 64 clients here) run in this process and send tensors as binary data, as Triton's perf_analyzer does.  Prints each figure as it is measured; `--json OUT` writes them all.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
import harness  # noqa: E402

ROOT = harness.ROOT
SHARED = harness.SHARED_MODELS
MODELS = {"two_signatures_float32/encode": SHARED / "two_signatures_float32.tflite",
          "mediapipe_face_detection_short_range": SHARED / "mediapipe_face_detection_short_range.tflite"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(models: list[str], *options: str) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    process = subprocess.Popen([sys.executable, "-m", "litegpu.cli.main", "serve", *models, "--port", str(port),
                                "--accelerator", "cpu", *options], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    while True:
        try:
            with urllib.request.urlopen(url + "/v2/health/ready", timeout=5):
                return process, url
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"server {options} did not start: {process.communicate()[1][-2000:]}")
            time.sleep(0.5)


def stop_server(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()


def _infer_body(path: Path, signature: str | None) -> tuple[bytes, dict[str, str]]:
    """A request in the binary tensor data extension (as Triton's perf_analyzer sends them), outputs binary."""
    import litegpu

    model = litegpu.CompiledModel.from_file(str(path), hardware_accel=litegpu.HardwareAccelerator.CPU)
    details = model.get_input_tensor_details(signature or 0)
    rng = np.random.default_rng(0)
    arrays = {n: rng.uniform(-1, 1, d["shape"]).astype(np.float32) for n, d in details.items()}
    head = json.dumps({"inputs": [{"name": n, "shape": list(a.shape), "datatype": "FP32",
                                   "parameters": {"binary_data_size": a.nbytes}} for n, a in arrays.items()],
                       "parameters": {"binary_data_output": True}}).encode()
    return head + b"".join(a.tobytes() for a in arrays.values()), {"Inference-Header-Content-Length": str(len(head))}


async def _load(url: str, request: tuple[bytes, dict[str, str]], clients: int, requests: int) -> dict[str, float]:
    import aiohttp

    latencies: list[float] = []
    left = [requests]

    async def client(http: aiohttp.ClientSession) -> None:
        while left[0] > 0:
            left[0] -= 1
            started = time.perf_counter()
            async with http.post(url, data=request[0], headers=request[1]) as response:
                await response.read()
                assert response.status == 200, await response.text()
            latencies.append(time.perf_counter() - started)

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=clients)) as http:
        started = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(clients)))
        elapsed = time.perf_counter() - started
    return {"rps": len(latencies) / elapsed, "p50_ms": harness.percentile_ms(latencies, 50),
            "p99_ms": harness.percentile_ms(latencies, 99)}


def tensor_models(levels: list[int], requests: int, rounds: int) -> dict:
    specs = [f"{name.split('/')[0]}={path}" for name, path in MODELS.items()]
    # one compile cache: the servers share the first one's engine and thread choices (timed at its start), so
    # that they differ in batching alone
    cache = tempfile.mkdtemp(prefix="litegpu-bench-serve-")
    servers = {mode: start_server(specs, "--batching", mode, "--max-batch", "32", "--max-delay-ms", "2",
                                  "--cache-dir", cache) for mode in ("off", "on", "auto")}
    results: dict = {"verdicts": {}}
    try:
        # let auto finish measuring before it is timed (it serves directly meanwhile)
        for name in MODELS:
            deadline = time.monotonic() + 600
            while True:
                with urllib.request.urlopen(f"{servers['auto'][1]}/v2/models/{name}") as response:
                    batching = json.load(response)["batching"]
                if not batching["reason"].startswith("measuring") or time.monotonic() > deadline:
                    results["verdicts"][name] = batching
                    break
                time.sleep(1)
        modes = list(servers)
        for name, path in MODELS.items():
            body = _infer_body(path, name.split("/")[1] if "/" in name else None)
            for clients in levels:
                count = max(requests, 8 * clients)
                runs: dict[str, list] = {mode: [] for mode in modes}
                for order in harness.rounds(modes, rounds, "rotate"):  # the modes in turn, the same body
                    for mode in order:
                        url = f"{servers[mode][1]}/v2/models/{name}/infer"
                        asyncio.run(_load(url, body, clients, clients * 2))  # warm the connections
                        runs[mode].append(asyncio.run(_load(url, body, clients, count)))
                for mode in modes:  # the median round of each figure
                    figures = {k: float(np.median([run[k] for run in runs[mode]])) for k in runs[mode][0]}
                    results.setdefault(name, {}).setdefault(str(clients), {})[mode] = figures
                    print(f"{name} {clients:>2} clients batching {mode:>4}: {figures['rps']:8.1f} req/s  p50 "
                          f"{figures['p50_ms']:7.2f} ms  p99 {figures['p99_ms']:7.2f} ms", flush=True)
    finally:
        for process, _ in servers.values():
            stop_server(process)
    return results


async def _chat(url: str, clients: int, per_client: int, max_tokens: int) -> dict[str, float]:
    import aiohttp

    first_tokens: list[float] = []
    tokens = [0]
    request = {"model": "chat", "messages": [{"role": "user", "content": "what is litegpu"}], "max_tokens": max_tokens,
               "stream": True, "stream_options": {"include_usage": True}}

    async def client(http: aiohttp.ClientSession) -> None:
        for _ in range(per_client):
            started = time.perf_counter()
            first = None
            async with http.post(url + "/v1/chat/completions", json=request) as response:
                async for line in response.content:
                    if not line.startswith(b"data: {"):
                        continue
                    event = json.loads(line[6:])
                    if first is None and event["choices"] and event["choices"][0]["delta"].get("content"):
                        first = time.perf_counter() - started
                    if event.get("usage"):
                        tokens[0] += event["usage"]["completion_tokens"]
            first_tokens.append(first if first is not None else time.perf_counter() - started)

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=clients)) as http:
        started = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(clients)))
        elapsed = time.perf_counter() - started
    return {"tokens_per_s": tokens[0] / elapsed, "ttft_p50_ms": harness.percentile_ms(first_tokens, 50),
            "ttft_p99_ms": harness.percentile_ms(first_tokens, 99)}


def llm(bundle: Path, levels: list[int], max_tokens: int, rounds: int) -> dict:
    """Total tokens/s and time to first token with sequences decoded together (the continuous batcher's default
    slots) against one sequence at a time (``--max-sequences 1``, the same batcher), the two servers in turn."""
    servers = {"batched": start_server([f"chat={bundle}"]), "one at a time": start_server([f"chat={bundle}"],
                                                                                         "--max-sequences", "1")}
    results: dict[str, dict] = {}
    try:
        for _, url in servers.values():
            asyncio.run(_chat(url, 1, 2, max_tokens))  # warm
        modes = list(servers)
        for clients in levels:
            per_client = max(1, 16 // clients) if clients < 16 else 1
            runs: dict[str, list] = {mode: [] for mode in modes}
            for r in range(rounds):
                for mode in modes[r % 2:] + modes[:r % 2]:
                    runs[mode].append(asyncio.run(_chat(servers[mode][1], clients, per_client, max_tokens)))
            for mode in modes:
                figures = {k: float(np.median([run[k] for run in runs[mode]])) for k in runs[mode][0]}
                results.setdefault(str(clients), {})[mode] = figures
                print(f"LLM {clients:>2} clients, {mode:>13}: {figures['tokens_per_s']:8.1f} tokens/s  time to first "
                      f"token p50 {figures['ttft_p50_ms']:8.1f} ms  p99 {figures['ttft_p99_ms']:8.1f} ms", flush=True)
            ratio = results[str(clients)]["batched"]["tokens_per_s"] / results[str(clients)]["one at a time"]["tokens_per_s"]
            print(f"LLM {clients:>2} clients: batched / one at a time {ratio:.2f}x", flush=True)
    finally:
        for process, _ in servers.values():
            stop_server(process)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="1,8,32,64")
    parser.add_argument("--requests", type=int, default=300, help="requests per level and mode (at least 8 per client)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per level (median reported); the machine is shared")
    parser.add_argument("--llm", type=Path, default=ROOT / "tests" / "heldout" / "litert_torch" / "smollm_tiny.litertlm")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--only", choices=("tensor", "llm"), default=None, help="run one half of the bench")
    parser.add_argument("--json", type=Path, default=None)
    args = harness.parse_args(parser)
    levels = [int(c) for c in args.clients.split(",")]
    results = {}
    if args.only != "llm":
        results["tensor"] = tensor_models(levels, args.requests, args.rounds)
    if args.only != "tensor":
        results["llm"] = llm(args.llm, levels, args.max_tokens, args.rounds)
    if args.json:
        harness.write_json(args.json, results)


if __name__ == "__main__":
    main()
