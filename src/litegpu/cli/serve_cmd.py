"""``litegpu serve MODEL_OR_DIR ...``: the models behind HTTP (``litegpu.serve``; ``pip install "litegpu[serve]"``).

Tensor models answer the Open Inference Protocol v2 (Triton's and KServe's clients), LLMs the OpenAI API.
127.0.0.1 unless ``--host`` says otherwise; ``--api-key`` (or ``$LITEGPU_API_KEY``) makes every request need
``Authorization: Bearer KEY``; ``--ray ADDRESS|local`` deploys the same application as Ray Serve replicas.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from ..errors import InvalidArgumentError


def _config(args: Any) -> Any:
    from ..serve.config import Limits, ServeConfig, api_key_from, model_specs

    limits = Limits(max_body_bytes=args.max_body_mb << 20, max_tensor_bytes=args.max_tensor_mb << 20,
                    max_prompt_tokens=args.max_prompt_tokens, max_tokens=args.max_tokens_limit)
    return ServeConfig(model_specs(args.models, args.tokenizer or []), host=args.host, port=args.port,
                       accelerator=args.accelerator, api_key=api_key_from(args.api_key), max_batch=args.max_batch,
                       max_delay_ms=args.max_delay_ms, batching=args.batching, max_sequences=args.max_sequences,
                       grace_s=args.grace_s, cache_dir=args.cache_dir, limits=limits)


def _check_installed() -> None:
    missing = [m for m in ("fastapi", "uvicorn", "prometheus_client") if not _importable(m)]
    if missing:
        raise InvalidArgumentError(f"litegpu serve needs {', '.join(missing)}: pip install \"litegpu[serve]\"")


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def run_serve(args: Any) -> int:
    _check_installed()
    config = _config(args)
    logging.basicConfig(level=logging.INFO, format="litegpu serve: %(message)s", stream=sys.stderr)
    if config.host not in ("127.0.0.1", "localhost", "::1") and config.api_key is None:
        logging.getLogger("litegpu.serve").warning("listening on %s without --api-key: anyone who reaches this "
                                                   "address can use the models", config.host)
    if args.ray is not None:
        from ..serve.ray_deployment import run_on_ray

        run_on_ray(config, args.ray, replicas=args.replicas, gpus_per_replica=args.gpus_per_replica)
        return 0
    from ..serve.app import Service, run

    run(Service(config))
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("serve", help="serve models over HTTP: Open Inference Protocol v2, OpenAI API for LLMs",
                       description="Serve .tflite / .circle models (Open Inference Protocol v2: Triton's and "
                                   "KServe's clients) and LLMs (.litertlm bundles, or exports with --tokenizer: the "
                                   "OpenAI API) from one process.")
    p.add_argument("models", nargs="+", metavar="MODEL_OR_DIR",
                   help="a model file, NAME=FILE, or a folder (each .tflite, .circle, .litertlm in it); a model is "
                        "served under its name (the file's stem by default)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--accelerator", default="gpu,cpu", metavar="cpu|gpu|gpu,cpu",
                   help="where the models run (default gpu,cpu: the GPU where there is one)")
    p.add_argument("--api-key", default=None, help="require Authorization: Bearer KEY on every request (default: "
                                                   "$LITEGPU_API_KEY when set)")
    p.add_argument("--max-batch", type=int, default=32, help="requests run together at most (default 32)")
    p.add_argument("--max-delay-ms", type=float, default=2.0,
                   help="how long a request waits for others to join its batch (default 2)")
    p.add_argument("--batching", choices=("auto", "on", "off"), default="auto",
                   help="auto (default): on the GPU always, on the CPU where measured to pay; on; off")
    p.add_argument("--max-sequences", type=int, default=32, help="LLM sequences decoded together (default 32)")
    p.add_argument("--tokenizer", action="append", metavar="NAME=FILE",
                   help="a SentencePiece model making the litert-torch export NAME an OpenAI model (repeatable)")
    p.add_argument("--max-body-mb", type=int, default=64, help="largest request body, MiB (default 64)")
    p.add_argument("--max-tensor-mb", type=int, default=64, help="largest input tensor, MiB (default 64)")
    p.add_argument("--max-prompt-tokens", type=int, default=None,
                   help="longest prompt (default: what the model's KV cache holds)")
    p.add_argument("--max-tokens-limit", type=int, default=4096,
                   help="most new tokens one completion may ask for (default 4096)")
    p.add_argument("--grace-s", type=float, default=30.0,
                   help="on SIGTERM, how long requests in flight may take to finish (default 30)")
    p.add_argument("--cache-dir", default=None, metavar="DIR",
                   help="compile cache: compiled programs and engine choices kept for the next start (shared by "
                        "servers and Ray replicas on one machine)")
    p.add_argument("--ray", default=None, metavar="ADDRESS|local",
                   help="deploy as Ray Serve replicas on this Ray cluster (local: start one here)")
    p.add_argument("--replicas", type=int, default=1, help="Ray Serve replicas (default 1)")
    p.add_argument("--gpus-per-replica", type=float, default=0.0, help="GPUs each Ray replica takes (default 0)")
    p.set_defaults(handler=run_serve)
