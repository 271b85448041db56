"""Hash the covering trees of many prefixes on every fixture tokenizer.

Prints one sha256 per tokenizer over the full content of the trees (trunk, every
node's path, end flag and leaf array, rest, complete path) built for every byte
prefix of a few KB of Python source and of seeded random-model-like byte streams
(non-ASCII, CJK, emoji, digits, whitespace runs, stray invalid bytes). Run before
and after a change to the engine that must not change trees: the hashes must match.

    python benchmarks/tree_hashes.py [--code-bytes 3000] [--random-bytes 1500]
        [--only llama3,qwen3]   > hashes.txt   (timings go to stderr)
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
import sysconfig
import time
from pathlib import Path

from midword.engine import VCT, PrefixError, load_engine

from midword.testing import tokenizer_path
from midword.testing.corpus import MIXED_PIECES

ROOT = Path(__file__).resolve().parent.parent

TOKENIZERS = ["gpt35turbo", "gpt4o", "gptoss", "llama3", "qwen3", "deepseek_v3", "llama2", "gemma3"]
PIECES = [  # the replay's mix, then digits, contractions, Hangul, combining marks, ligatures
    *MIXED_PIECES,
    "12345",
    "3.14",
    "  \n\t",
    "'s",
    "ÀÉ",
    "가나다",
    "\u0301",
    "\ufb01",
    "ﬁ",
]


def tokenizer_paths(root: Path) -> dict[str, Path]:
    out = {n: tokenizer_path(n, root) for n in TOKENIZERS}
    out["default"] = root / "models/default/tokenizer.json"
    return out


def code_bytes(n: int) -> bytes:
    source = Path(sysconfig.get_paths()["stdlib"]) / "contextlib.py"
    return source.read_bytes()[:n]


def random_stream(seed: int, n: int) -> bytes:
    rng = random.Random(seed)
    out = bytearray()
    while len(out) < n:
        r = rng.random()
        if r < 0.6:
            out += rng.choice(PIECES).encode()
        elif r < 0.9:
            out += chr(
                rng.choice(
                    [
                        rng.randrange(32, 127),
                        rng.randrange(0xA0, 0x800),
                        rng.randrange(0x4E00, 0x9FFF),
                        rng.randrange(0x1F300, 0x1F64F),
                    ]
                )
            ).encode()
        else:
            out.append(rng.randrange(256))  # maybe invalid: PrefixError, byte dropped
    return bytes(out[:n])


def ints(ids: object) -> tuple[int, ...]:
    """Token ids as plain ints: the hash is of the values (numpy ints print otherwise)."""
    return tuple(int(t) for t in ids)  # type: ignore[attr-defined]


def feed(h: hashlib._Hash, vct: VCT, data: bytes) -> int:
    trees = 0
    for b in data:
        try:
            vct.push(b)
        except PrefixError as exc:
            h.update(b"E" + str(exc).encode())
            continue
        tree = vct.tree()
        trees += 1
        complete = None if tree.complete is None else ints(tree.complete)
        h.update(repr((ints(tree.trunk), tree.rest, complete)).encode())
        for node in tree.nodes:
            h.update(repr((ints(node.path), node.ends_at_prefix_end)).encode())
            h.update(node.leaves.astype("int64").tobytes())
        if len(vct.prefix) > 256:  # keep regions short-ish and exercise truncate
            vct.truncate(len(vct.prefix) - 200)
    return trees


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--code-bytes", type=int, default=3000)
    parser.add_argument("--random-bytes", type=int, default=1500)
    parser.add_argument("--only", default="", help="comma-separated tokenizer names")
    args = parser.parse_args()
    only = set(filter(None, args.only.split(",")))
    for name, path in tokenizer_paths(ROOT).items():
        if only and name not in only:
            continue
        started = time.perf_counter()
        engine = load_engine(str(path))
        h = hashlib.sha256()
        trees = feed(h, VCT(engine), code_bytes(args.code_bytes))
        for seed in range(3):
            trees += feed(h, VCT(engine), random_stream(seed, args.random_bytes // 3))
        print(f"{name:12s} {h.hexdigest()}  ({trees} trees)", flush=True)
        print(f"{name}: {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
