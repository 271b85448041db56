"""Issue 3's inference-token figure per tokenizer: tokens a prompt-boundary solve evaluates
over plain BPE, on random 100-character windows of code (paper table 2; goal <= +0.8).

Plain BPE evaluates 1 + len(encode(window)) tokens (BOS and the prompt) before it samples
its first token. Two ByteSampler solves are counted:

- tree: BOS, the trunk and one token per internal node of the Valid Covering Tree (the
  whole tree in one tree-attention call: what the prefix probability, the next-byte
  distribution and so each step of byte mode cost). It depends only on the tokenizer,
  so it is read off the tree; a cross-check on the shipped model compares it with the
  inference tokens its session really reports on the first --check windows.
- lazy: PBP mode's default solve (engine/sample/lazy_pbp.py), which scores an internal node
  only when its leaf search enters it. It depends on the model, so it is measured: the
  session's inference tokens of a real one-leaf PBP completion, sampled (temperature 1,
  seed = window index) and greedy. Models: the shipped default model (trained), and for
  every tokenizer a token bigram model counted from the shipped model's training split
  of the standard library (midword/testing/bigram.py), a real if weak model of code; the
  default tokenizer gets both, so the bigram can be compared with the trained model.

The windows are `midword bench overhead`'s (same seed, same held-out stdlib files).

    python benchmarks/bench_tree_overhead.py [--windows 1000] [--tokenizers ...]
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType

from midword.engine import VCT, Completer, Engine, Settings, Tree, load_engine

from midword.bench import data
from midword.bench.overhead import make_window
from midword.models import CHECKOUT_TEST_MODEL, shipped_test_model
from midword.testing import TOKENIZERS, tokenizer_path
from midword.testing.bigram import BigramModel

DEFAULT_MODEL = shipped_test_model()


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


def lazy_overheads(completer: Completer, windows: list[str], temperature: float) -> list[int]:
    """Inference tokens of one-leaf lazy PBP completions over plain BPE, per window."""
    out = []
    session = completer.session
    for i, text in enumerate(windows):
        session.reset()  # every solve starts from an empty cache, as plain BPE's count does
        before = session.inference_tokens
        settings = Settings(max_tokens=1, temperature=temperature, seed=i, solve="lazy")
        completer.complete(text.encode("utf-8"), settings)
        used = session.inference_tokens - before
        out.append(used - (1 + len(completer.tok.encode(text))))
    return out


@functools.cache
def load_shipped() -> tuple[object, Engine]:
    """The shipped model and its engine (loaded once: the cross-check and the table)."""
    from midword.modelargs import load_model_and_engine

    args = argparse.Namespace(
        model=str(DEFAULT_MODEL), tokenizer=None, device="cpu", dtype="float32"
    )
    return load_model_and_engine(args)


def _train_script() -> ModuleType:
    """models/train_default.py of the checkout, imported from its file (it is a script,
    not a module of the package)."""
    path = CHECKOUT_TEST_MODEL.parent / "train_default.py"
    spec = importlib.util.spec_from_file_location("train_default", path)
    if not path.is_file() or spec is None or spec.loader is None:
        sys.exit(f"{path} is missing: this benchmark runs from a source checkout")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def training_texts() -> list[str]:
    """The shipped model's training split of this interpreter's standard library."""
    _train_script()  # puts models/ on sys.path: the script's steps are the package `training`
    corpus = importlib.import_module("training.corpus")
    return corpus.load_corpus(corpus.stdlib_root()).train_texts


def bigram_for(engine: Engine, path: Path, texts: list[str]) -> BigramModel:
    from tokenizers import Tokenizer

    encoded = Tokenizer.from_file(str(path)).encode_batch(texts, add_special_tokens=False)
    start = engine.tok.special_ids[0] if engine.tok.special_ids else 0
    return BigramModel(engine.tok.size, [e.ids for e in encoded], start_id=int(start))


def cross_check(windows: list[str]) -> int:
    """The tree count against the default model's session count; returns windows checked."""
    from midword.bench.overhead import Runner

    model, engine = load_shipped()
    runner = Runner(model, engine)
    for text in windows:
        measured = runner.window(text)["overhead"]
        counted = overheads(engine, [text])[0]
        if measured != counted:
            sys.exit(f"count mismatch on {text!r}: session {measured}, tree {counted}")
    return len(windows)


def row(
    name: str, model_name: str, tree: list[int], lazy: list[int], greedy: list[int], s: float
) -> str:
    return (
        f"{name:12s} {model_name:8s} {len(tree):7d} {statistics.fmean(tree):+7.2f} "
        f"{statistics.fmean(lazy):+7.2f} {max(lazy):+4d} {statistics.fmean(greedy):+7.2f} {s:6.1f}"
    )


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
    texts = training_texts()
    print("extra inference tokens per solve over plain BPE (mean; max of lazy samples)")
    print(
        f"{'tokenizer':12s} {'model':8s} {'windows':>7s} {'tree':>7s} {'lazy':>7s} {'max':>4s} "
        f"{'greedy':>7s} {'s':>6s}"
    )
    for name in ["default", *args.tokenizers.split(",")]:
        path = DEFAULT_MODEL / "tokenizer.json" if name == "default" else tokenizer_path(name)
        start = time.perf_counter()
        engine = load_engine(str(DEFAULT_MODEL if name == "default" else path))
        tree = overheads(engine, windows)
        models = [("trained", load_shipped()[0])] if name == "default" else []
        models.append(("bigram", bigram_for(engine, path, texts)))
        for model_name, model in models:
            completer = Completer(model, engine)
            lazy = lazy_overheads(completer, windows, temperature=1.0)
            greedy = lazy_overheads(completer, windows, temperature=0.0)
            print(
                row(name, model_name, tree, lazy, greedy, time.perf_counter() - start), flush=True
            )


if __name__ == "__main__":
    main()
