"""Every character that completes a partial UTF-8 character, and what BPE makes of it.

A token sequence that ends inside a character is kept when *some* character completes
it canonically (docs/design.md, "What exact means"). Once the next byte is typed, the tree
checks the character byte by byte, so anything short of all completions breaks the
chain rule P(x) P(b | x) = P(xb). There are up to 262,144 of them (a bare 4-byte lead),
too many to encode one by one, but BPE sees little of each: by the pairwise theorem a
token ``t`` that ends at the partial character is followed canonically iff ``(t, f)`` is
a valid pair, where ``f`` is the first token of BPE(rest + ending) (``rest``: the bytes
that complete the character, ``ending``: what the pre-token takes of the text after it).
:class:`Completions` holds ``f`` for every completion and every probe ending, computed
with shortcuts that are exact: the symbol that holds a text's first byte is always a
prefix of the text (so most firsts are a single byte), and a merge that joins the rest
to the ending forms a token that starts with continuation bytes and goes on into the
next character (a handful per vocabulary).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..disk_arrays import load_intact, save_arrays
from ..tokenize.bpe import BPETokenizer

_LENGTH_RANGES = {2: (0x80, 0x800), 3: (0x800, 0x10000), 4: (0x10000, 0x110000)}


def utf8_length(lead: int) -> int:
    return 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4


@lru_cache(maxsize=256)
def completion_points(partial: bytes) -> np.ndarray:
    """Code points of every character whose UTF-8 encoding starts with ``partial`` (the
    lead byte and 0-2 continuation bytes of a valid character), in order."""
    total = utf8_length(partial[0])
    missing = total - len(partial)
    value = partial[0] & (0xFF >> (total + 1))
    for b in partial[1:]:
        value = (value << 6) | (b & 0x3F)
    lo, hi = value << (6 * missing), (value + 1) << (6 * missing)
    first, end = _LENGTH_RANGES[total]
    cps = np.arange(max(lo, first), min(hi, end), dtype=np.int64)
    return cps[(cps < 0xD800) | (cps > 0xDFFF)]  # surrogates are not characters


@dataclass(frozen=True)
class ByteFacts:
    """What the vocabulary says about continuation bytes. ``starts``: bool [256, 256],
    some token starts with bytes ``a b``; ``bridges``: (u, v) for every token ``u + v``
    that starts with continuation bytes ``u`` and goes on into a new character ``v``."""

    starts: np.ndarray
    bridges: tuple[tuple[bytes, bytes], ...]
    _heads: dict[bytes, tuple[bytes, ...]] = field(default_factory=dict, compare=False)

    def heads_for(self, ending: bytes) -> tuple[bytes, ...]:
        """The distinct ``u`` of bridges ``u + v`` with ``v`` a prefix of ``ending``
        (kept per ending: every partial character asks about the same few endings)."""
        got = self._heads.get(ending)
        if got is None:
            got = self._heads[ending] = tuple(
                sorted({u for u, v in self.bridges if ending.startswith(v)})
            )
        return got

    @classmethod
    def of(cls, tok: BPETokenizer, words: Iterable[bytes | None] | None = None) -> ByteFacts:
        """The facts of ``tok``'s vocabulary, read from ``words`` (default: every token;
        those that start with a continuation byte are enough, in any order)."""
        starts = np.zeros((256, 256), dtype=bool)
        bridges = []
        for b in tok.token_bytes if words is None else words:
            if b is None or len(b) < 2 or not 0x80 <= b[0] < 0xC0:
                continue
            starts[b[0], b[1]] = True
            q = next((i for i, x in enumerate(b) if not 0x80 <= x < 0xC0), None)
            if q is not None:
                bridges.append((b[:q], b[q:]))
        return cls(starts, tuple(sorted(bridges)))  # (sorted: the same whatever the order)


@dataclass
class Completions:
    """All completions of one partial character (see the module docstring).

    ``text``: the characters, in code point order; ``rests``: uint8 [n, missing], the
    bytes after the partial; ``first``: first token of BPE(rest); ``cross``: per probe
    ending (index into the endings) where BPE(rest + ending) starts differently, the
    characters and that token; ``safe``: NFC never changes the character nor merges it
    with what comes before (all True without a normalizer).
    """

    partial: bytes
    cps: np.ndarray
    text: str
    rests: np.ndarray
    first: np.ndarray
    cross: dict[int, tuple[np.ndarray, np.ndarray]]
    safe: np.ndarray
    derived: dict[str, object] = field(default_factory=dict)  # per-tokenizer extras

    def __len__(self) -> int:
        return len(self.text)

    def firsts(self, k: int) -> np.ndarray:
        """First token of BPE(rest + ending ``k``) for every character."""
        hit = self.cross.get(k)
        if hit is None:
            return self.first
        out = self.first.copy()
        out[hit[0]] = hit[1]
        return out

    def index(self, rest: bytes) -> int | None:
        """Position of the character ``partial + rest`` (None if it is not one)."""
        try:
            ch = (self.partial + rest).decode("utf-8")
        except UnicodeDecodeError:
            return None
        if len(ch) != 1:
            return None
        i = int(np.searchsorted(self.cps, ord(ch)))
        return i if i < len(self.cps) and self.cps[i] == ord(ch) else None


def build_completions(
    tok: BPETokenizer, facts: ByteFacts, partial: bytes, endings: tuple[bytes, ...]
) -> Completions:
    cps = completion_points(partial)
    text = "".join(map(chr, cps.tolist()))
    width = utf8_length(partial[0])
    raw = np.frombuffer(text.encode("utf-8"), dtype=np.uint8).reshape(len(cps), width)
    rests = raw[:, len(partial) :]
    first = _first_tokens(tok, facts, rests)
    cross = {}
    for k, ending in enumerate(endings):
        idx = _may_bridge(facts, rests, ending) if ending else np.zeros(0, dtype=np.int64)
        got = np.array(
            [tok._bpe_cached(rests[i].tobytes() + ending)[0] for i in idx.tolist()],
            dtype=np.int64,
        )
        differs = got != first[idx]
        if differs.any():
            cross[k] = (idx[differs], got[differs])
    return Completions(partial, cps, text, rests, first, cross, _nfc_safe(tok, text))


def _first_tokens(tok: BPETokenizer, facts: ByteFacts, rests: np.ndarray) -> np.ndarray:
    """First token of BPE(rest) for every rest. The symbol holding a text's first byte
    is always a prefix of the text, so that byte stays alone unless some token starts
    with the first two bytes; only then is BPE run."""
    byte_ids = np.asarray(tok.byte_ids, dtype=np.int64)
    out = byte_ids[rests[:, 0]]
    if rests.shape[1] > 1:
        for i in np.flatnonzero(facts.starts[rests[:, 0], rests[:, 1]]).tolist():
            out[i] = tok._bpe_cached(rests[i].tobytes())[0]
    return out


def _may_bridge(facts: ByteFacts, rests: np.ndarray, ending: bytes) -> np.ndarray:
    """Rests after which a merge may join the rest to ``ending``: the joined symbol is a
    token made of a suffix of the rest and a prefix of the ending. Elsewhere BPE(rest +
    ending) is BPE(rest) + BPE(ending)."""
    width = rests.shape[1]
    hit = np.zeros(len(rests), dtype=bool)
    for u in facts.heads_for(ending):
        if len(u) <= width:
            tail = np.frombuffer(u, dtype=np.uint8)
            hit |= (rests[:, width - len(u) :] == tail).all(axis=1)
    return np.flatnonzero(hit)


def _nfc_safe(tok: BPETokenizer, text: str) -> np.ndarray:
    if tok.normalize is None:
        return np.ones(len(text), dtype=bool)
    composing = nfc_composing()
    return np.array(
        [
            unicodedata.combining(ch) == 0
            and ch not in composing
            and unicodedata.is_normalized("NFC", ch)
            for ch in text
        ],
        dtype=bool,
    )


NFC_CACHE_VERSION = "1"  # the layout of the nfc-composing file (the Unicode version names it)
_SCAN_CHUNK = 256  # code points per NFD check in `scan_nfc_composing`
# Hangul vowel and trailing jamo: NFC composes them algorithmically (no decomposition data)
_HANGUL_JAMO = frozenset(map(chr, [*range(0x1161, 0x1176), *range(0x11A8, 0x11C3)]))


@lru_cache(maxsize=1)
def nfc_composing() -> frozenset[str]:
    """Characters NFC may merge into the character before them (second halves of
    canonical compositions, Hangul vowel and trailing jamo).

    Read from the disk cache (one file per Unicode version of :mod:`unicodedata`), else
    found by :func:`scan_nfc_composing` and saved: the scan costs the first tree of a
    process 5-10 ms, the file under a millisecond.

    >>> "\u0301" in nfc_composing() and "a" not in nfc_composing()
    True
    """
    path = nfc_cache_file()
    got = load_nfc_composing(path)
    if got is None:
        got = scan_nfc_composing()
        save_nfc_composing(path, got)
    return got


def nfc_cache_file() -> Path:
    """Where :func:`nfc_composing` is kept: named by the Unicode version, as the answer
    changes with it."""
    from ..tokenize.bpe import cache_root

    return cache_root() / f"nfc-composing-{unicodedata.unidata_version}-{NFC_CACHE_VERSION}.npz"


def scan_nfc_composing() -> frozenset[str]:
    """:func:`nfc_composing` computed from :mod:`unicodedata`: the second code point of
    every two-part canonical decomposition. Only blocks of code points that NFD changes
    are read one by one: a character with a canonical decomposition never survives NFD,
    so a block NFD leaves alone holds none (most of the 1.1M code points)."""
    out = set(_HANGUL_JAMO)
    points = np.arange(0x110000, dtype=np.uint32)
    points = points[(points < 0xD800) | (points > 0xDFFF)]  # surrogates do not decode
    every = points.astype("<u4").tobytes().decode("utf-32-le")
    for start in range(0, len(every), _SCAN_CHUNK):
        block = every[start : start + _SCAN_CHUNK]
        if unicodedata.is_normalized("NFD", block):
            continue
        for ch in block:
            parts = unicodedata.decomposition(ch).split()
            if len(parts) == 2 and not parts[0].startswith("<"):
                out.add(chr(int(parts[1], 16)))
    return frozenset(out)


def load_nfc_composing(path: Path) -> frozenset[str] | None:
    """The characters saved at ``path``; None when there is no file, or it is damaged,
    of another Unicode version or layout, or holds what cannot be the answer."""
    saved = load_intact(path)
    if saved is None or sorted(saved) != ["points", "unicode", "version"]:
        return None
    if str(saved["unicode"]) != unicodedata.unidata_version:
        return None
    if str(saved["version"]) != NFC_CACHE_VERSION:
        return None
    points = saved["points"]
    if points.ndim != 1 or points.dtype.kind not in "iu" or not len(points):
        return None
    got = frozenset(map(chr, points.tolist()))
    valid = (
        bool(np.all(np.diff(points) > 0))
        and int(points[0]) >= 0
        and int(points[-1]) < 0x110000
        and not any(0xD800 <= p <= 0xDFFF for p in points.tolist())
        and _HANGUL_JAMO.issubset(got)  # always in (added by hand: Hangul is algorithmic)
    )
    return got if valid else None


def save_nfc_composing(path: Path, chars: frozenset[str]) -> None:
    points = np.array(sorted(map(ord, chars)), dtype=np.int32)
    arrays = {
        "points": points,
        "unicode": np.array(unicodedata.unidata_version),
        "version": np.array(NFC_CACHE_VERSION),
    }
    save_arrays(path, arrays)
