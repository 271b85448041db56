"""Exact scores of candidate names: the per-byte trie walk against runs crossed with one
tree scoring (engine/sample/candidates.py), side by side on the shipped model.

The prefix is Python's own ``unittest/case.py`` up to a ``self.`` (at most --context
bytes, from a line start); the candidates are the attribute names written after ``self.``
in that file (--names of them). For each walk: the model calls (session scorings), the
tokens evaluated and the wall time of `score_continuations` (``end="identifier"``) and of
`likeliest_continuation`, and the largest score difference between the two walks.

Run: python benchmarks/bench_candidates.py [--names 50] [--context 1200] [--repeats 3]
[--dtype float64]  (float64: the walks agree to ~1e-14; float32 rows to ~1e-5)
"""

from __future__ import annotations

import argparse
import re
import time
import unittest.case
from collections.abc import Callable
from pathlib import Path

from midword.engine import ByteSampler, load_engine, load_hf_model
from midword.engine.sample.candidates import likeliest_continuation, score_continuations


def workload(names: int, context: int) -> tuple[bytes, list[bytes]]:
    """(a prefix ending in ``self.``, attribute names found after ``self.`` in the file)."""
    text = Path(unittest.case.__file__).read_text()
    found = list(dict.fromkeys(re.findall(r"self\.([A-Za-z_]\w*)", text)))
    cut = text.index("self.", len(text) // 2) + len("self.")
    start = text.find("\n", cut - context, cut) + 1
    return text[start:cut].encode(), [n.encode() for n in found[:names]]


def measure(sampler: ByteSampler, prefix: bytes, run: Callable[[], object]) -> tuple:
    """(session calls, tokens evaluated, seconds, result) of one run from a warm prefix."""
    calls = [0]
    session = sampler.session
    real = session.logprob_rows  # type: ignore[attr-defined]

    def counted(trunk, paths):  # noqa: ANN001, ANN202
        calls[0] += 1
        return real(trunk, paths)

    sampler.reset(prefix)
    sampler.next_bytes()  # the prompt window in the KV cache, as after a keystroke
    session.logprob_rows = counted  # type: ignore[attr-defined]
    tokens = session.inference_tokens
    t0 = time.perf_counter()
    try:
        result = run()
    finally:
        del session.logprob_rows  # type: ignore[attr-defined]
    return calls[0], session.inference_tokens - tokens, time.perf_counter() - t0, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/default")
    parser.add_argument("--names", type=int, default=50)
    parser.add_argument("--context", type=int, default=1200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtype", default="auto", help="float64: differences to rounding")
    args = parser.parse_args()
    engine = load_engine(args.model)
    sampler = ByteSampler(load_hf_model(args.model, dtype=args.dtype), engine, track_prefix=False)
    prefix, names = workload(args.names, args.context)
    print(f"prefix: {len(prefix)} bytes ending {prefix[-30:]!r}; {len(names)} names, ", end="")
    print(
        f"{sum(map(len, names))} bytes, {len({n[:d] for n in names for d in range(len(n) + 1)})} trie nodes"
    )
    print(f"{'what':<34} {'walk':<6} {'calls':>6} {'tokens':>7} {'seconds':>8}")
    scores: dict[bool, list] = {}
    for what, call in (
        ("score_continuations (identifier)", score_continuations),
        ("likeliest_continuation (identifier)", likeliest_continuation),
    ):
        for by_bytes in (True, False):
            best = None
            for _ in range(args.repeats):
                got = measure(
                    sampler,
                    prefix,
                    lambda c=call, b=by_bytes: c(sampler, prefix, names, "identifier", by_bytes=b),
                )
                best = got if best is None or got[2] < best[2] else best
            calls, tokens, seconds, result = best
            if call is score_continuations:
                scores[by_bytes] = [s.logprob for s in result]
            walk = "byte" if by_bytes else "runs"
            print(f"{what:<34} {walk:<6} {calls:>6} {tokens:>7} {seconds:>8.3f}")
    diff = max(
        (abs(a - b) for a, b in zip(scores[True], scores[False], strict=True) if a != b),
        default=0.0,
    )
    print(f"largest score difference between the walks: {diff:.2e}")


if __name__ == "__main__":
    main()
