"""Covering-tree build times on replayed typing, the figures behind the tree-builder notes.

1. Typed code: the first --code-bytes bytes of the held-out ``contextlib.py`` pushed one byte
   at a time into a VCT on the shipped tokenizer, the tree built after every byte (what the
   language server does per keystroke): mean, p95 and p99 per key, and how many keys built a
   new tree (the rest come from the engine's tail cache).
2. Inside characters: a fixed mix of code, CJK, emoji and accented text (--mixed-bytes bytes)
   pushed the same way on each of --tokenizers (llama3; qwen3 with its NFC normalizer and
   added text; deepseek_v3 with added text), trees ending inside a character timed apart
   from the others, with the encoding-free verdicts (engine/tree/partial_leaves.py) and with the
   encoding path they replace (``Engine.partial_fast = False``), each on a fresh engine,
   interleaved byte by byte; the trees of both are compared.
3. CJK prose typed as an input method commits it, a whole character per key (the
   language server's keystrokes in Chinese, Japanese or Korean), on the same tokenizers:
   tree per key, both ways, trees compared.

    python benchmarks/bench_tree_replay.py [--code-bytes 3000] [--mixed-bytes 600]
        [--tokenizers llama3,qwen3,deepseek_v3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sysconfig
import time
from pathlib import Path

from midword.engine import VCT, engine_for, load_engine, load_tokenizer, split_utf8

from midword.models import shipped_test_model
from midword.testing import tokenizer_path
from midword.testing.corpus import MIXED_PIECES

PIECES = MIXED_PIECES


def _ms(seconds: float) -> str:
    return f"{1000 * seconds:.3f} ms"


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _tree_after(vct: VCT, key: int | bytes) -> tuple[float, bool, tuple]:
    """Push one byte (or a key's bytes); (seconds to build the tree, ends inside a
    character, the tree)."""
    if isinstance(key, int):
        vct.push(key)
    else:
        vct.push_bytes(key)
    started = time.perf_counter()
    tree = vct.tree()
    seconds = time.perf_counter() - started
    inside = bool(split_utf8(vct.prefix[vct.settled :])[1])
    return seconds, inside, (tuple(tree.trunk), [(n.path, n.leaves.tolist()) for n in tree.nodes])


def typed_code(nbytes: int) -> None:
    source = Path(sysconfig.get_paths()["stdlib"]) / "contextlib.py"
    data = "\n".join(source.read_text().split("\n")[:300]).encode()[:nbytes]
    vct = VCT(load_engine(str(shipped_test_model())))
    times = [_tree_after(vct, b)[0] for b in data]
    built = sum(1 for s in times if s > 50e-6)
    print(f"1. typed code, shipped tokenizer: {len(times)} keys, about {built} built a new tree")
    print(
        f"   tree per key: mean {_ms(statistics.mean(times))}, p95 {_ms(_quantile(times, 0.95))}, "
        f"p99 {_ms(_quantile(times, 0.99))}"
    )


CJK_PROSE = (
    "机器学习是人工智能的一个分支。它使用统计方法让计算机从数据中学习，而不需要明确编程。"
    "深度学习使用多层神经网络。東京は日本の首都です。한국어 텍스트도 있습니다."
)


def _replay(
    name: str, keys: list[int] | list[bytes]
) -> dict[bool, list[tuple[float, bool, tuple]]]:
    """Push ``keys`` into two fresh VCTs on tokenizer ``name`` (encoding-free verdicts and
    the encoding path), alternating which goes first so neither runs colder."""
    vcts = {}
    for fast in (True, False):
        engine = engine_for(load_tokenizer(str(tokenizer_path(name))))  # fresh caches each
        engine.partial_fast = fast
        vcts[fast] = VCT(engine)
    runs: dict[bool, list[tuple[float, bool, tuple]]] = {True: [], False: []}
    for i, key in enumerate(keys):
        for fast in (True, False) if i % 2 else (False, True):
            runs[fast].append(_tree_after(vcts[fast], key))
    return runs


def _identical(runs: dict[bool, list[tuple[float, bool, tuple]]]) -> bool:
    return all(a[2] == b[2] for a, b in zip(runs[True], runs[False], strict=True))


def _path_name(fast: bool) -> str:
    return "encoding-free verdicts" if fast else "encoding (partial_fast=False)"


def cjk_prose(name: str) -> None:
    keys = [ch.encode() for ch in CJK_PROSE]
    runs = _replay(name, keys)
    print(f"\n3. CJK prose, {name}: {len(keys)} keys, trees identical: {_identical(runs)}")
    for fast, rows in runs.items():
        times = [s for s, _, _ in rows]
        print(
            f"   {_path_name(fast):30s} tree per key: mean {_ms(statistics.mean(times))}, "
            f"p95 {_ms(_quantile(times, 0.95))}"
        )


def inside_characters(nbytes: int, name: str) -> None:
    rng = random.Random(5)
    data = "".join(rng.choice(PIECES) for _ in range(nbytes)).encode()[:nbytes]
    runs = _replay(name, list(data))
    print(f"\n2. mixed text, {name}: {len(data)} bytes, trees identical: {_identical(runs)}")
    for fast, rows in runs.items():
        inside = [s for s, mid, _ in rows if mid]
        other = [s for s, mid, _ in rows if not mid]
        print(
            f"   {_path_name(fast):30s} inside a character: {len(inside)} trees, "
            f"mean {_ms(statistics.mean(inside))}; others: mean {_ms(statistics.mean(other))}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--code-bytes", type=int, default=3000)
    parser.add_argument("--mixed-bytes", type=int, default=600)
    parser.add_argument("--tokenizers", default="llama3,qwen3,deepseek_v3")
    args = parser.parse_args()
    typed_code(args.code_bytes)
    for name in args.tokenizers.split(","):
        inside_characters(args.mixed_bytes, name)
    for name in args.tokenizers.split(","):
        cjk_prose(name)


if __name__ == "__main__":
    main()
