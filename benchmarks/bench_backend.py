"""Benchmark of the scoring session against plain transformers forward passes.

A random Llama (hidden 256, 4 layers, vocab 8192 by default; float32) scores
N new tokens three ways:

1. cold: N trunk tokens from an empty cache, session vs ``model(input_ids)``;
2. tree: N trie nodes on a cached trunk of 512, session (tree mask, GC) vs a
   plain forward of N tokens on a transformers cache of the same trunk;
3. step: 1 new trunk token on a cached trunk (the per-keystroke case).

"overhead" is session time minus baseline time per call: our bookkeeping (plan,
mask, row selection, float64 log-softmax) plus the cost of the 4D mask.

Run: python benchmarks/bench_backend.py [--tokens 64] [--threads 2] [--repeats 20]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of `fn` in milliseconds, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def random_trie(rng: random.Random, n_nodes: int, vocab: int) -> list[tuple[int, ...]]:
    """Paths to every node of a random trie with `n_nodes` nodes (depth <= 4)."""
    nodes: list[tuple[int, ...]] = [()]
    while len(nodes) < n_nodes + 1:
        parent = rng.choice([n for n in nodes if len(n) < 4])
        child = parent + (rng.randrange(vocab),)
        if child not in nodes:
            nodes.append(child)
    return nodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=64, help="N new tokens per call")
    parser.add_argument("--trunk", type=int, default=512, help="cached trunk length")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    import torch
    from midword.engine import HFModel, KVCache

    from midword.testing.tiny_models import build_tiny_llama

    if args.threads:
        torch.set_num_threads(args.threads)
    model = build_tiny_llama(8192, hidden=256, layers=4, heads=4, dtype="float32").to(args.device)
    hf = HFModel(model)
    rng = random.Random(0)
    n, device = args.tokens, hf.device
    print(
        f"random Llama: hidden 256, 4 layers, vocab 8192, float32, {device}, "
        f"{torch.get_num_threads()} threads, N={n}, trunk={args.trunk}, median of {args.repeats}"
    )
    rows = [bench_cold(hf, rng, n, args.repeats), bench_cold_lean(hf, rng, n, args.repeats)]
    rows.append(bench_tree(hf, rng, n, args, KVCache))
    rows.append(bench_step(hf, rng, args, KVCache))
    print(f"{'case':<38}{'session ms':>12}{'baseline ms':>13}{'overhead ms':>13}{'ratio':>8}")
    for name, ours, base in rows:
        print(f"{name:<38}{ours:>12.2f}{base:>13.2f}{ours - base:>13.2f}{ours / base:>8.2f}")


def bench_cold(hf: object, rng: random.Random, n: int, repeats: int) -> tuple[str, float, float]:
    """N trunk tokens from an empty cache vs one plain forward without cache."""
    import torch

    trunk = [rng.randrange(8192) for _ in range(n)]
    ids = torch.tensor([trunk], device=hf.device)  # [1, N]

    def ours() -> None:
        session = hf.session()
        session.logprobs(trunk, [()])

    def base() -> None:
        with torch.inference_mode():
            hf.model(input_ids=ids, use_cache=False)

    return f"cold: {n} trunk tokens", median_ms(ours, repeats), median_ms(base, repeats)


def bench_cold_lean(hf: object, rng: random.Random, n: int, repeats: int):
    """As `bench_cold`, but the baseline also computes only the last 8 positions' logits."""
    import torch

    trunk = [rng.randrange(8192) for _ in range(n)]
    ids = torch.tensor([trunk], device=hf.device)  # [1, N]

    def ours() -> None:
        hf.session().logprobs(trunk, [()])

    def base() -> None:
        with torch.inference_mode():
            hf.model(input_ids=ids, use_cache=False, logits_to_keep=8)

    name = f"cold: {n} tokens, base keeps 8 logits"
    return name, median_ms(ours, repeats), median_ms(base, repeats)


def bench_tree(hf: object, rng: random.Random, n: int, args: object, cache_cls: type):
    """N trie nodes on a cached trunk vs N tokens on a plain transformers cache."""
    import torch

    trunk = [rng.randrange(8192) for _ in range(args.trunk)]
    tries = [random_trie(rng, n, 8192) for _ in range(2)]
    session = hf.session()
    session.logprobs(trunk, [()])
    flip = [0]

    def ours() -> None:  # alternate two tries: every call evaluates N new nodes and GCs N
        flip[0] ^= 1
        session.logprobs(trunk, tries[flip[0]])

    kv = cache_cls()  # our adapter, used here only to drop the rows a call appended
    with torch.inference_mode():
        hf.model(input_ids=torch.tensor([trunk], device=hf.device), **kv.forward_kwargs(hf.model))
    new = torch.tensor([[rng.randrange(8192) for _ in range(n)]], device=hf.device)  # [1, N]

    def base() -> None:
        with torch.inference_mode():
            hf.model(input_ids=new, **kv.forward_kwargs(hf.model), use_cache=True)
            kv.select_rows(range(args.trunk))

    name = f"tree: {n} nodes on trunk {args.trunk}"
    return name, median_ms(ours, args.repeats), median_ms(base, args.repeats)


def bench_step(hf: object, rng: random.Random, args: object, cache_cls: type):
    """One new trunk token per call (typing), vs one cached decoding step."""
    import torch

    trunk = [rng.randrange(8192) for _ in range(args.trunk)]
    session = hf.session()
    session.logprobs(trunk, [()])
    extra = [trunk + [t] for t in (11, 12)]
    flip = [0]

    def ours() -> None:  # alternate the last token: one eval + one dropped row per call
        flip[0] ^= 1
        session.logprobs(extra[flip[0]], [()])

    kv = cache_cls()  # our adapter, used here only to drop the rows a call appended
    with torch.inference_mode():
        hf.model(input_ids=torch.tensor([trunk], device=hf.device), **kv.forward_kwargs(hf.model))
    one = torch.tensor([[11]], device=hf.device)  # [1, 1]

    def base() -> None:
        with torch.inference_mode():
            hf.model(input_ids=one, **kv.forward_kwargs(hf.model), use_cache=True)
            kv.select_rows(range(args.trunk))

    name = f"step: 1 token on trunk {args.trunk}"
    return name, median_ms(ours, args.repeats), median_ms(base, args.repeats)


if __name__ == "__main__":
    main()
