"""Whole words of the heads that start many tokens, saved with the engine's disk tables.

Under ``ignore_merges`` (Llama 3, gpt-oss) a covering tree asks, for the bytes ``head``
of the open pre-token, which tokens T and probe endings e make ``head + T + e`` itself a
token (:meth:`~midword.engine.tree.tables.Engine.whole_words`). The work grows with the
number of tokens that start with ``head``: ``b" "`` starts 58k-107k tokens of a
128k-200k vocabulary, 45-60 ms in Python, paid by the first tree of every process.

So the answers for every head that starts at least :data:`SAVED_RANGE` tokens (a few
hundred heads, about 1 MB) are computed when the engine is first built and kept on disk
(``words-<tokenizer hash>-...npz``), together with the positions of the tokens that end
with each probe ending (what :meth:`~midword.engine.tree.tables.Engine._ending_runs` searches).
Other heads cost well under a millisecond to compute. A file that is damaged, of another
layout, or inconsistent with the vocabulary is rebuilt, never trusted.

>>> from midword.engine import load_engine  # doctest: +SKIP
>>> engine = load_engine("llama3/tokenizer.json")  # doctest: +SKIP
>>> engine.saved_words.get(b" ") is not None  # doctest: +SKIP
True
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np

from ..disk_arrays import load_intact, save_arrays, within
from ..tokenize.bpe import BPETokenizer
from .tail_types import ONLY_BARE, WholeWords
from .utf8 import PROBE_ENDINGS


class WordSource(Protocol):
    """What the saved words read of the per-tokenizer :class:`~midword.engine.tree.tables.Engine`."""

    tok: BPETokenizer
    sorted_keys: list[bytes]
    sorted_len: np.ndarray
    max_token_len: int

    def cache_file(self, kind: str) -> Path | None: ...

    def token_range(self, prefix: bytes) -> tuple[int, int]: ...

    def scan_whole_words(self, head: bytes) -> WholeWords: ...

    def ending_positions(self) -> np.ndarray: ...


# a head whose token range holds this many tokens has its answer saved; a smaller one is
# computed in about 0.2 ms
SAVED_RANGE = 128
WORDS_VERSION = "1"  # the file's layout (the tokenizer's content hash names the file)
_ENDINGS_KEY = np.frombuffer(repr(PROBE_ENDINGS).encode(), dtype=np.uint8)  # bit k: ending k
_SAVED = (
    "version", "endings", "min_range", "vocab", "heads", "head_len", "counts", "ids",
    "ext_bits", "ends_at",
)  # fmt: skip
assert len(PROBE_ENDINGS) <= 32, "ext_bits holds one bit per probe ending in a uint32"
assert PROBE_ENDINGS[0] == b"", "bit 0 stands for the bare ending"


class SavedWords:
    """The saved answers, by head (see the module docstring)."""

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        self.ids = arrays["ids"]  # int32, the answers end to end, in head order
        self.ext_bits = arrays["ext_bits"]  # uint32, bit k: ending PROBE_ENDINGS[k]
        self.ends_at = arrays["ends_at"].astype(np.int64)  # Engine._ends_at's positions
        heads = arrays["heads"].tobytes()
        head_cuts = np.cumsum(arrays["head_len"]).tolist()
        stops = np.cumsum(arrays["counts"]).tolist()
        self._where: dict[bytes, tuple[int, int]] = {}
        for k, (cut, stop) in enumerate(zip(head_cuts, stops, strict=True)):
            start = head_cuts[k - 1] if k else 0
            self._where[heads[start:cut]] = (stops[k - 1] if k else 0, stop)
        self._sets = _EndingSets()  # the few distinct ending sets, shared by every answer

    def get(self, head: bytes) -> WholeWords | None:
        """The saved answer for ``head``, or None when it was not saved (a small range)."""
        span = self._where.get(head)
        if span is None:
            return None
        a, b = span
        exts = list(map(self._sets.__getitem__, self.ext_bits[a:b].tolist()))
        return WholeWords(self.ids[a:b].astype(np.int64), exts)


class _EndingSets(dict[int, frozenset[bytes]]):
    """Ending bits -> the set of endings they stand for, made on first use."""

    def __missing__(self, bits: int) -> frozenset[bytes]:
        got = (
            ONLY_BARE
            if bits == 1
            else frozenset(e for k, e in enumerate(PROBE_ENDINGS) if bits >> k & 1)
        )
        self[bits] = got
        return got


def _ending_bits(exts: frozenset[bytes]) -> int:
    return sum(1 << k for k, e in enumerate(PROBE_ENDINGS) if e in exts)


def saved_words_for(engine: WordSource) -> SavedWords:
    """The engine's saved answers: read from its cache file, else computed and saved."""
    path = engine.cache_file("words")
    arrays = load_words(path, engine)
    if arrays is None:
        arrays = build_words(engine)
        save_arrays(path, arrays)
    return SavedWords(arrays)


def build_words(engine: WordSource, min_range: int = SAVED_RANGE) -> dict[str, np.ndarray]:
    """The arrays of the cache file: every head with at least ``min_range`` tokens in its
    range, the engine's computed answer for each, and the ending positions."""
    heads = big_heads(engine, min_range)
    answers = [engine.scan_whole_words(h) for h in heads]
    return {
        "version": np.array(WORDS_VERSION),
        "endings": _ENDINGS_KEY,
        "min_range": np.array(min_range),
        "vocab": np.array([engine.tok.size, len(engine.sorted_keys)], dtype=np.int64),
        "heads": np.frombuffer(b"".join(heads), dtype=np.uint8),
        "head_len": np.array([len(h) for h in heads], dtype=np.int32),
        "counts": np.array([len(w.ids) for w in answers], dtype=np.int64),
        "ids": np.concatenate([w.ids for w in answers] or [[]]).astype(np.int32),
        "ext_bits": np.array(
            [_ending_bits(exts) for w in answers for exts in w.exts], dtype=np.uint32
        ),
        "ends_at": engine.ending_positions().astype(np.int32),
    }


def big_heads(engine: WordSource, min_range: int = SAVED_RANGE) -> list[bytes]:
    """Every non-empty byte string that at least ``min_range`` tokens start with, sorted
    (found by descending from shorter heads: a longer head never starts more tokens)."""
    lengths = engine.sorted_len
    flat = np.frombuffer(b"".join(engine.sorted_keys), dtype=np.uint8)
    starts = np.cumsum(lengths) - lengths
    out, todo = [], [b""]
    while todo:
        head = todo.pop()
        lo, hi = engine.token_range(head)
        longer = lo + np.flatnonzero(lengths[lo:hi] > len(head))
        for byte in np.unique(flat[starts[longer] + len(head)]).tolist():
            child = head + bytes([byte])
            a, b = engine.token_range(child)
            if b - a >= min_range:
                out.append(child)
                todo.append(child)
    return sorted(out)


def load_words(path: Path | None, engine: WordSource) -> dict[str, np.ndarray] | None:
    """The arrays saved at ``path``, or None when there are none, or the file is damaged
    (a bad CRC, a torn write), of another layout or threshold, or does not fit the
    engine's vocabulary: the caller rebuilds it then."""
    a = load_intact(path)
    if a is None or sorted(a) != sorted(_SAVED) or str(a["version"]) != WORDS_VERSION:
        return None
    if not np.array_equal(a["endings"], _ENDINGS_KEY) or int(a["min_range"]) != SAVED_RANGE:
        return None
    size, span = engine.tok.size, len(engine.sorted_keys) + 1
    if a["vocab"].tolist() != [size, span - 1]:
        return None
    ids, bits, ends = a["ids"], a["ext_bits"], a["ends_at"]
    fits = (
        len(a["head_len"]) == len(a["counts"])
        and int(a["head_len"].sum()) == len(a["heads"])
        and int(a["counts"].sum()) == len(ids) == len(bits)
        and within(a["head_len"], 1, engine.max_token_len + 1)
        and within(ids, 0, size)
        and within(bits, 1, 1 << len(PROBE_ENDINGS))
        and within(ends, 0, (len(PROBE_ENDINGS) - 1) * span)
        and bool(np.all(np.diff(ends) > 0))
    )
    return a if fits else None
