"""Write a .circle model whose weights are circle's own types, for ``bench/gpu/gpu_compile.py`` (issue 27):
an embedding of GGML_Q8_0 (vocab x width, GATHER), FULLY_CONNECTED layers of GGML_Q4_0 (width -> hidden, RELU)
and GGML_Q4_1 (hidden -> width), and a UINT4 projection to the vocabulary (per-row scales and zero points).

    python bench/models/circle_weights_model.py OUT.circle [--tokens 1] [--vocab 8192 --width 1024 --hidden 4096]
    .venv-cuda/bin/python bench/gpu/gpu_compile.py OUT.circle     # device weights vs file, weights held wider

The blocks are packed from ggml's struct layouts by ``tests/ops/test_circle_weights.py`` (random quants).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "ops"))

from test_circle_weights import _uint4_weight, make_ggml  # noqa: E402

from litegpu.ir.builder import ModelBuilder  # noqa: E402
from litegpu.ir.save import write_model  # noqa: E402


def build(tokens: int, vocab: int, width: int, hidden: int):
    b = ModelBuilder()
    ids = b.input("tokens", (tokens,), "int32")

    def weight(name: str, dtype: str, units: int, depth: int, seed: int) -> int:
        raw, _ = make_ggml(dtype, units, depth, seed=seed)
        return b.tensor(name, (units, depth), dtype, buffer=b.add_buffer(raw), raw=raw)

    h = b.tensor("h", (tokens, width))
    b.op("GATHER", [weight("embedding", "ggml_q8_0", vocab, width, 1), ids], [h], axis=0)
    a = b.tensor("a", (tokens, hidden))
    b.op("FULLY_CONNECTED", [h, weight("up", "ggml_q4_0", hidden, width, 2), -1], [a], fused_activation_function="RELU")
    c = b.tensor("c", (tokens, width))
    b.op("FULLY_CONNECTED", [a, weight("down", "ggml_q4_1", width, hidden, 3), -1], [c])
    raw, _, quant = _uint4_weight(vocab, width, per_channel=True, seed=4)
    head = b.tensor("head", (vocab, width), "uint4", buffer=b.add_buffer(raw), raw=raw, quantization=quant)
    logits = b.tensor("logits", (tokens, vocab))
    b.op("FULLY_CONNECTED", [c, head, -1], [logits])
    b.output(logits)
    return b.build()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--tokens", type=int, default=1)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=4096)
    args = parser.parse_args()
    write_model(build(args.tokens, args.vocab, args.width, args.hidden), args.out)


if __name__ == "__main__":
    main()
