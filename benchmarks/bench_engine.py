"""Engine figures per tokenizer: load time (first and cached), resident memory, push cost
per byte, valid-successor mask time, tree build time and tree size at random cut points
of code, and a keystroke at the end of a few long runs (:data:`RUNS`: the slow case of
SentencePiece, whose trees cover everything since the last hard boundary).

Resident memory is the growth of VmRSS (/proc/self/status) when a fresh Python process,
with midword already imported, loads the engine from its on-disk cache: what a server
holds per tokenizer. "First trees" are the first trees another fresh process builds after
that load (the first keystrokes of a session: nothing kept yet but the disk tables).

"Chain caches cleared" forgets built tails and the leaf tables' masks per chain of
pre-tokenizer states (the tables themselves, per-state runs included, stay: they are the
engine's, loaded from disk); "every engine cache cleared" also forgets pair validity,
completions and whole words (:meth:`Engine.clear_caches`; the whole words of heads that
start many tokens stay, saved with the tables: engine/tree/saved_words.py).

The code is the Python sources of the checkout this script sits in, then the Python
standard library's (local on every machine, nothing downloaded) until there is enough for
--push-bytes. Another checkout's engine can be timed on the same text and tokenizer files:
``PYTHONPATH=<a folder whose midword/ links that checkout's packages>`` (run it outside a
checkout, so that the current folder does not shadow it).

Run: python benchmarks/bench_engine.py [--tokenizers llama3,gpt4o] [--cuts 30] [--push-bytes 20000]
[--first-runs 5]  (first trees: per tree, the median over that many fresh processes)
"""

from __future__ import annotations

import argparse
import os
import pickle
import random
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from midword.testing import tokenizer_path

ROOT = Path(__file__).resolve().parent.parent  # this script's checkout: text and fixtures
FIRST_TREES = 5  # trees timed in a fresh process


def _code(need: int) -> bytes:
    """At least ``need`` bytes of Python (less only if the standard library is short)."""
    own = [ROOT / d for d in ("engine", "midword", "server", "benchmarks", "tests")]
    files = [f for d in own for f in sorted(d.rglob("*.py"))]
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files += sorted(f for f in stdlib.glob("*.py"))  # top level only: no vendored test data
    parts, size = [], 0
    for f in files:
        if size >= need:
            break
        parts.append(f.read_bytes())
        size += len(parts[-1])
    return b"".join(parts)


def _us(seconds: list[float]) -> str:
    seconds = sorted(seconds)
    p99 = seconds[min(len(seconds) - 1, int(0.99 * len(seconds)))]
    return f"median {1e6 * statistics.median(seconds):7.1f} us  p99 {1e6 * p99:7.1f} us"


def _ms(seconds: list[float]) -> str:
    seconds = sorted(seconds)
    p99 = seconds[min(len(seconds) - 1, int(0.99 * len(seconds)))]
    return f"median {1000 * statistics.median(seconds):8.2f} ms  p99 {1000 * p99:8.2f} ms"


def bench(name: str, code: bytes, cuts: int, push_bytes: int, first_runs: int = 1) -> None:
    from midword.engine import VCT, build_tree, engine_for, load_tokenizer

    path = tokenizer_path(name, ROOT)
    windows = _windows(code, cuts)
    with tempfile.TemporaryDirectory() as cold:
        os.environ["MIDWORD_CACHE"] = cold
        t = time.perf_counter()
        engine_for(load_tokenizer(path))
        first = time.perf_counter() - t
        t = time.perf_counter()
        engine = engine_for(load_tokenizer(path))
        cached = time.perf_counter() - t
        resident = _resident_mib(path, cold)
        # per tree, the median over first_runs fresh processes (one run: its times)
        runs = [_first_trees(path, cold, windows[:FIRST_TREES]) for _ in range(first_runs)]
        first_trees = [statistics.median(times) for times in zip(*runs, strict=True)]
    print(
        f"{name}: load first {first:.2f} s, cached {cached:.2f} s, vocab {engine.tok.size}, "
        f"resident +{resident:.0f} MiB"
    )
    shown = ", ".join(f"{1000 * s:.1f}" for s in first_trees)
    each = f", median of {first_runs} processes" if first_runs > 1 else ""
    print(f"  first trees of a fresh process after a cached load (ms{each}): {shown}")

    if getattr(engine, "is_sentencepiece", False):
        code = code.replace("\u2581".encode(), b"_")  # SentencePiece reads U+2581 as a space
    state = VCT(engine)
    costs = []
    for b in code[:push_bytes]:
        t = time.perf_counter()
        state.push(b)
        costs.append(time.perf_counter() - t)
    print(f"  push per byte ({len(costs):,} bytes of Python): {_us(costs)}")

    rng = random.Random(0)
    masks = []
    for token in rng.sample(range(engine.tok.size), 20):
        if engine.tok.token_bytes[token] is None:
            continue
        engine.validity.clear_caches()  # measure the uncached cost
        t = time.perf_counter()
        engine.validity.successors(token)
        masks.append(time.perf_counter() - t)
    print(f"  successor mask, uncached: {_ms(masks)}")

    builds, alls, colds, warms, keys, extra_nodes, at_end = [], [], [], [], [], [], 0
    for window in windows:
        _clear(engine)
        t = time.perf_counter()
        tree = build_tree(engine, window)
        builds.append(time.perf_counter() - t)
        engine.clear_caches()
        t = time.perf_counter()
        build_tree(engine, window)
        alls.append(time.perf_counter() - t)
        colds.append(_tree_time(engine, window, clear_tables=True))
        warms.append(_tree_time(engine, window, clear_tables=False))
        keys.append(_keystroke_time(engine, window))
        extra_nodes.append(tree.internal_count - 1)
        at_end += any(n.ends_at_prefix_end for n in tree.nodes)
    print(f"  tree build (push 200 bytes + tree), {cuts} random cuts:")
    print(f"    chain caches cleared:                             {_ms(builds)}")
    print(f"    every engine cache cleared:                       {_ms(alls)}")
    print(f"  tree() alone, chain caches cleared:                 {_ms(colds)}")
    print(f"  tree() alone, chain masks warm:                     {_ms(warms)}")
    print(f"  keystroke (push 1 byte + tree()), masks warm:        {_ms(keys)}")
    print(
        f"  internal nodes beyond the trunk: mean {statistics.mean(extra_nodes):.2f}; "
        f"cuts with a node ending at the cut: {at_end}/{cuts}"
    )
    runs = [_keystroke_time(engine, run) for run in RUNS]
    print(f"  keystroke at the end of long runs ({len(RUNS)} texts, see RUNS): {_ms(runs)}")


# Runs no pre-token split or hard boundary ends: a comment ruler, deep indentation (Gemma
# has added tokens for runs of up to 31 spaces), a hex string, a long identifier.
RUNS = [
    b"# " + b"=" * 300,
    b"x = 1\n" + b" " * 30,
    b"h = '" + b"0123456789abcdef" * 12,
    b"value = self." + b"very_long_name_" * 10,
]


_RSS_PROBE = """
import sys
from midword.engine import engine_for, load_tokenizer

def rss():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))

before = rss()
engine = engine_for(load_tokenizer(sys.argv[1]))
print(rss() - before)
"""


def _windows(code: bytes, cuts: int) -> list[bytes]:
    """The 200 bytes before each of ``cuts`` random cut points (whole characters)."""
    rng = random.Random(1)
    out = []
    for _ in range(cuts):
        cut = rng.randrange(200, len(code))
        while 0x80 <= code[cut] < 0xC0:
            cut -= 1
        out.append(code[cut - 200 : cut])
    return out


def _resident_mib(path: Path, folder: str) -> float:
    """VmRSS growth (MiB) of a fresh process loading the engine (cache in $MIDWORD_CACHE)."""
    return int(_child(_RSS_PROBE, [str(path)], folder).split()[-1]) / 1024


_FIRST_TREES_PROBE = """
import pickle, sys, time
from midword.engine import build_tree, engine_for, load_tokenizer

engine = engine_for(load_tokenizer(sys.argv[1]))
with open(sys.argv[2], "rb") as f:
    windows = pickle.load(f)
for window in windows:
    t = time.perf_counter()
    build_tree(engine, window)
    print(time.perf_counter() - t)
"""


def _first_trees(path: Path, folder: str, windows: list[bytes]) -> list[float]:
    """Seconds per tree of a fresh process that loads the engine (cached) and builds
    trees at ``windows``, in order."""
    data = Path(folder) / "windows.pickle"
    data.write_bytes(pickle.dumps(windows))
    return [float(v) for v in _child(_FIRST_TREES_PROBE, [str(path), str(data)], folder).split()]


def _child(script: str, args: list[str], folder: str) -> str:
    """Stdout of a fresh Python running ``script``, from ``folder`` (not a checkout: the
    current folder would come first on sys.path and could shadow $PYTHONPATH)."""
    out = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        check=True,
        cwd=folder,
    )
    return out.stdout


def _clear(engine, clear_tables: bool = True) -> None:
    """Forget cached trees (and the leaf tables' per-state masks) to time a real build."""
    engine.tail_cache.clear()
    if clear_tables and getattr(engine, "tables", None) is not None:
        engine.tables.clear_caches()


def _tree_time(engine, window: bytes, clear_tables: bool) -> float:
    from midword.engine import VCT

    state = VCT(engine)
    state.push_bytes(window)
    _clear(engine, clear_tables)
    t = time.perf_counter()
    state.tree()
    return time.perf_counter() - t


def _keystroke_time(engine, window: bytes) -> float:
    from midword.engine import VCT

    state = VCT(engine)
    state.push_bytes(window[:-1])
    state.tree()
    engine.tail_cache.clear()
    t = time.perf_counter()
    state.push(window[-1])
    state.tree()
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tokenizers", default="llama3,qwen3,deepseek_v3,gptoss,gpt4o,gpt35turbo,llama2,gemma3"
    )
    parser.add_argument("--cuts", type=int, default=30)
    parser.add_argument("--push-bytes", type=int, default=20000)
    parser.add_argument(
        "--first-runs", type=int, default=1, help="fresh processes timing the first trees"
    )
    args = parser.parse_args()
    code = _code(max(args.push_bytes, 200_000))
    for name in args.tokenizers.split(","):
        bench(name, code, args.cuts, args.push_bytes, args.first_runs)


if __name__ == "__main__":
    main()
