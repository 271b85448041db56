"""The covering tree's tail per key while one long open pre-token is typed, and on
replayed code.

1. Long open pre-tokens: types ``def f():\\n    x = `` then a run that stays one open pre-token (an identifier of
letters, or a run of spaces after a newline) key by key through the engine's push/tree
API, as the language server does, and times ``VCT.tree()`` (the tail's build, or its
cache hit) at the keys where the run is ``--lengths`` bytes long: the median over the last
``--window`` keys up to that length, over ``--rounds`` rounds. Each round starts from a
fresh VCT with the built tails and the word BPE memo forgotten (typing makes new regions
and words), the other engine caches warm as in a long session.

2. Typed code: the first ``--code-lines`` lines of the held-out ``contextlib.py`` pushed one
byte at a time on the shipped tokenizer (the language server's keys), ``tree()`` timed
after each: p50 / p90 / p95 / p99 over ``--rounds`` rounds (each as above).

Another checkout's engine can be timed on the same tokenizer files:
``PYTHONPATH=<a folder whose midword/ links that checkout's packages>`` (run it outside a
checkout, so that the current folder does not shadow it).

Run: python benchmarks/bench_tail.py [--tokenizers llama3,gpt4o,qwen3,default]
[--lengths 20,60,200] [--rounds 5] [--window 8] [--code-lines 80]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import sysconfig
import time
from pathlib import Path

from midword.engine import VCT, load_engine

from midword.testing import tokenizer_path

ROOT = Path(__file__).resolve().parent.parent  # this script's checkout: tokenizer files
LEAD = b"def f():\n    x = "
RUNS = {  # what is typed after LEAD: one open pre-token as long as it is typed
    "identifier": lambda n: b"abcdefghijklmnopqrstuvwxyz"[::-1] * (n // 26 + 1),
    "spaces": lambda n: b"\n" + b" " * n,
}


def _path(name: str) -> Path:
    return (
        ROOT / "models/default/tokenizer.json" if name == "default" else tokenizer_path(name, ROOT)
    )


def key_times(engine: object, run: bytes, upto: int, lead: bytes = LEAD) -> list[float]:
    """Seconds of ``tree()`` after each key of ``run[:upto]`` (after ``lead``)."""
    engine.tail_cache.clear()  # type: ignore[attr-defined]
    engine.tok.clear_bpe_memo()  # type: ignore[attr-defined]
    vct = VCT(engine)  # type: ignore[arg-type]
    vct.push_bytes(lead)
    vct.tree()
    out = []
    for b in run[:upto]:
        vct.push(b)
        started = time.perf_counter()
        vct.tree()
        out.append(time.perf_counter() - started)
    return out


def open_length(engine: object, run: bytes, upto: int) -> int:
    """Bytes of the region (after the last settled split) once ``run[:upto]`` is typed."""
    vct = VCT(engine)  # type: ignore[arg-type]
    vct.push_bytes(LEAD + run[:upto])
    return len(vct.buf) - vct.settled


def typed_code(lines: int, rounds: int) -> None:
    """Part 2: ``tree()`` per key replaying code on the shipped tokenizer."""
    source = Path(sysconfig.get_paths()["stdlib"]) / "contextlib.py"
    code = b"".join(source.read_bytes().splitlines(keepends=True)[:lines])
    engine = load_engine(str(_path("default")))
    key_times(engine, code, len(code), b"")  # warm
    times = sorted(t for _ in range(rounds) for t in key_times(engine, code, len(code), b""))
    cuts = [times[int(q * (len(times) - 1))] * 1e3 for q in (0.5, 0.9, 0.95, 0.99)]
    print(f"\ntyped code: {lines} lines of contextlib.py, {len(code)} keys, shipped tokenizer")
    print("tree() per key, p50 / p90 / p95 / p99: " + " / ".join(f"{c:.3f}" for c in cuts) + " ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizers", default="llama3,gpt4o,qwen3,default")
    parser.add_argument("--lengths", default="20,60,200")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--window", type=int, default=8)
    parser.add_argument("--code-lines", type=int, default=80)
    args = parser.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    print(f"{'tokenizer':12s} {'run':10s} {'bytes':>5s} {'region':>6s} {'ms/key p50':>10s}")
    for name in args.tokenizers.split(","):
        engine = load_engine(str(_path(name)))
        for kind, make in RUNS.items():
            run = make(max(lengths))
            typed = len(run) - max(lengths)  # the spaces' newline
            key_times(engine, run, max(lengths) + typed)  # warm the engine's other caches
            rounds = [key_times(engine, run, max(lengths) + typed) for _ in range(args.rounds)]
            for n in lengths:
                upto = n + typed
                window = [t for r in rounds for t in r[upto - args.window : upto]]
                ms = 1e3 * statistics.median(window)
                region = open_length(engine, run, upto)
                print(f"{name:12s} {kind:10s} {n:5d} {region:6d} {ms:10.3f}", flush=True)
    typed_code(args.code_lines, args.rounds)


if __name__ == "__main__":
    sys.exit(main())
