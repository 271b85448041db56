"""midword's engine: exact next-byte distributions and completions from a BPE language
model, by the Valid Covering Tree (every canonical token sequence that covers a byte
prefix) and the ByteSampler on top of it.

The public API is the names in ``__all__``; they are imported on first use, so
``import midword.engine`` stays cheap (no torch, no tables built). Example::

    from midword.engine import ByteSampler, build_tree, load_engine, load_hf_model

    engine = load_engine("models/default")  # per-tokenizer tables, once per process
    tree = build_tree(engine, b"parser = argparse.ArgumentPar")
    print(tree.trunk, tree.internal_count, tree.leaf_count)

    model = load_hf_model("models/default")  # torch and transformers load here
    sampler = ByteSampler(model, engine)
    sampler.push(b"def fib(n):\\n    ret")
    print(sampler.next_bytes().next[ord("u")])  # log P(next byte = "u" | prefix)

Modules, from the bottom up: :mod:`.utf8` (probe continuations, UTF-8 helpers),
:mod:`.tokenizer` / :mod:`.pretok` / :mod:`.validity` (BPE, pre-tokenizer, pair
validity), :mod:`.leaf_tables`, :mod:`.partial_leaves` / :mod:`.canonical` (leaf
verdicts), :mod:`.tail` (the tree's branching tail), :mod:`.tables` (the per-tokenizer
:class:`Engine`), :mod:`.vct` (the streaming tree), then :mod:`.sampling`,
:mod:`.generate`, :mod:`.lazy_pbp`, :mod:`.ensemble` and the model backends
(:mod:`.backend`, :mod:`.hf_backend`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .backend import BackendError, ScoringModel
    from .fim import FimCompleter, FimTemplate, resolve_fim
    from .generate import Completer, Completion, Settings
    from .hf_backend import load_hf_model
    from .sampling import ByteSampler
    from .tables import Engine, load_engine
    from .tail import TailNode
    from .tokenizer import BPETokenizer, TokenizerError, load_tokenizer
    from .utf8 import PrefixError, UncoverableByteError
    from .vct import VCT, Tree, build_tree

# public name -> the module (under midword.engine) that defines it
_HOMES: dict[str, str] = {
    "BackendError": "backend",
    "ScoringModel": "backend",
    "FimCompleter": "fim",
    "FimTemplate": "fim",
    "resolve_fim": "fim",
    "Completer": "generate",
    "Completion": "generate",
    "Settings": "generate",
    "load_hf_model": "hf_backend",
    "ByteSampler": "sampling",
    "Engine": "tables",
    "load_engine": "tables",
    "TailNode": "tail",
    "BPETokenizer": "tokenizer",
    "TokenizerError": "tokenizer",
    "load_tokenizer": "tokenizer",
    "PrefixError": "utf8",
    "UncoverableByteError": "utf8",
    "VCT": "vct",
    "Tree": "vct",
    "build_tree": "vct",
}

__all__ = [
    "BPETokenizer",
    "BackendError",
    "ByteSampler",
    "Completer",
    "Completion",
    "Engine",
    "FimCompleter",
    "FimTemplate",
    "PrefixError",
    "ScoringModel",
    "Settings",
    "TailNode",
    "TokenizerError",
    "Tree",
    "UncoverableByteError",
    "VCT",
    "build_tree",
    "load_engine",
    "load_hf_model",
    "load_tokenizer",
    "resolve_fim",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value  # the next look-up is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
