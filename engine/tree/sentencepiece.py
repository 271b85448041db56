"""The covering-tree half of SentencePiece BPE with byte fallback: the per-tokenizer
tables (:class:`SentencePieceEngine`) and the tree's tail over characters, with the
byte-fallback branch (the tokenizer half, and the facts exactness rests on, are in
:mod:`midword.engine.tokenize.sentencepiece`).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from ..errors import PrefixError
from ..tokenize.bpe import BPETokenizer, sorted_vocabulary
from ..tokenize.sentencepiece import EMPTY, SPACE_PIECE_BYTES, SentencePieceTokenizer
from .completions import completion_points, utf8_length
from .tail_cache import TailCache
from .tail_types import TailNode
from .utf8 import char_byte_offsets, split_utf8
from .validity import Validity


class SentencePieceEngine:
    """Per-tokenizer tables for SentencePiece trees (what :class:`~.vct.VCT` and the
    samplers read of an engine)."""

    is_sentencepiece = True

    def __init__(self, tok: SentencePieceTokenizer) -> None:
        self.tok = tok
        self.lead = tok.lead
        self.missing_bytes: frozenset[int] = frozenset()
        self.validity = Validity(tok)
        self.sorted_keys, self.sorted_ids, self.sorted_len = sorted_vocabulary(tok.token_bytes)
        self.sorted_pos = np.full(tok.size, -1, dtype=np.int64)  # token id -> its index there
        self.sorted_pos[self.sorted_ids] = np.arange(len(self.sorted_ids))
        self.max_token_len = int(self.sorted_len.max())
        self.tail_cache = TailCache()
        self.starts = tok.reachable & ~tok.is_added  # a plain token that may start a piece
        # characters the encoder never spells by fallback (U+2581: it reads it as a space)
        self._is_atom = np.zeros(0x110000, dtype=bool)  # by code point (1.1 MB, no isin)
        self._is_atom[[ord(c) for c in tok.atom_id]] = True
        self._is_atom[0x2581] = True
        self.fallback_first = self._fallback_mask(b"")
        self.added_ids = np.array(sorted(tok.added_text.values()), dtype=np.int64)
        self.space_first = np.array([b is not None and b[:1] == b" " for b in tok.token_bytes])
        # the same flags in sorted_ids' order (allowed_span slices them)
        self._starts_sorted = self.starts[self.sorted_ids]
        self._space_first_sorted = self.space_first[self.sorted_ids]
        self._free_sorted = (tok.is_added | self.fallback_first)[self.sorted_ids]

    def clear_caches(self) -> None:
        self.tail_cache.clear()
        self.validity.clear_caches()

    def token_range(self, prefix: bytes) -> tuple[int, int]:
        lo = bisect.bisect_left(self.sorted_keys, prefix)
        hi = bisect.bisect_left(self.sorted_keys, prefix + b"\xff" * (self.max_token_len + 1))
        return lo, hi

    @lru_cache(maxsize=4096)  # noqa: B019 (one engine per tokenizer, kept for the process)
    def _fallback_mask(self, partial: bytes) -> np.ndarray:
        """Fallback tokens that may come next after the fallback bytes ``partial`` of a
        character outside the vocabulary (its first byte when ``partial`` is empty)."""
        mask = np.zeros(self.tok.size, dtype=bool)
        if partial:
            points = completion_points(partial)
            points = points[~self._is_atom[points]]
            # byte len(partial) of each one's UTF-8 (all as long as partial[0] says)
            shift = 6 * (utf8_length(partial[0]) - 1 - len(partial))
            seen = np.zeros(256, dtype=bool)
            seen[0x80 | ((points >> shift) & 0x3F)] = True
            nxt = np.flatnonzero(seen).tolist()
        else:
            nxt = [b for b in range(0x80) if chr(b) not in self.tok.atom_id]
            for lead in range(0xC2, 0xF5):
                if not self._is_atom[completion_points(bytes([lead]))].all():
                    nxt.append(lead)
        mask[[int(self.tok.fallback_ids[b]) for b in sorted(nxt)]] = True
        return mask

    def may_fall_back(self, partial: bytes) -> bool:
        """Does some character outside the vocabulary start with the bytes ``partial``?"""
        return bool(self._fallback_mask(partial[:-1])[self.tok.fallback_ids[partial[-1]]])

    # ------------------------------------------------------------- the tree
    def interfering(self, head: bytes) -> np.ndarray:
        """Token ids that, right after ``head``, would complete an added text begun in it."""
        ranges = self._blocked_ranges(head)
        return np.concatenate([self.sorted_ids[lo:hi] for lo, hi in ranges]) if ranges else EMPTY

    def _blocked_ranges(self, head: bytes) -> tuple[tuple[int, int], ...]:
        """:meth:`interfering` as disjoint ranges of ``sorted_ids`` (see :meth:`_ranges_after`)."""
        rests = self.tok.pending_rests(head)
        return self._ranges_after(rests) if rests else ()

    @lru_cache(maxsize=4096)  # noqa: B019 (one engine per tokenizer, kept for the process)
    def _ranges_after(self, rests: tuple[bytes, ...]) -> tuple[tuple[int, int], ...]:
        """The tokens that would complete an added text begun as one of ``rests``, as
        ranges of ``sorted_ids``: one per need that no shorter need is a prefix of (a token
        starting with the longer one starts with the shorter too), empty ones left out.
        Gemma's space runs give ~30 needs after ~30 spaces, most covering every token that
        starts with a space (half the vocabulary); after '<', thousands, mostly empty."""
        kept: list[bytes] = []
        for need in sorted(set(self.tok.needs_after(rests))):
            if not kept or not need.startswith(kept[-1]):  # (sorted: a prefix comes first)
                kept.append(need)
        return tuple(r for r in map(self.token_range, kept) if r[0] < r[1])

    def allowed(self, path: Sequence[int], head: bytes, cands: np.ndarray | None) -> np.ndarray:
        """Of ``cands`` (every token when None): those that may follow ``path``, whose
        text is ``head``, as its next token (a boolean mask over ``cands``)."""
        tok = self.tok
        succ = self._successors(path)
        ranges = self._blocked_ranges(head)
        if cands is None:
            return self._allowed_all(succ, ranges)
        ok = self.starts[cands]
        if succ is not None:
            ok = ok & (succ[cands] | self.space_first[cands] if tok.split else succ[cands])
        ok = ok | tok.is_added[cands] | self.fallback_first[cands]
        if ranges:
            where = self.sorted_pos[cands]
            for lo, hi in ranges:
                ok &= (where < lo) | (where >= hi)
        return ok

    def allowed_span(self, path: Sequence[int], head: bytes, lo: int, hi: int) -> np.ndarray:
        """:meth:`allowed` over ``sorted_ids[lo:hi]`` (a :meth:`token_range`: the
        straddlers), from tables kept in that order: one gather (the successors) where
        the candidates' own flags took five, and the blocked ranges cut as slices."""
        succ = self._successors(path)
        ok = self._starts_sorted[lo:hi]
        if succ is not None:
            follow = succ[self.sorted_ids[lo:hi]]
            if self.tok.split:
                follow |= self._space_first_sorted[lo:hi]
            ok = ok & follow
        ok = ok | self._free_sorted[lo:hi]  # (a fresh array: the slices above are views)
        for a, b in self._blocked_ranges(head):
            if max(a, lo) < min(b, hi):
                ok[max(a, lo) - lo : min(b, hi) - lo] = False
        return ok

    def _successors(self, path: Sequence[int]) -> np.ndarray | None:
        """Tokens that may follow ``path``'s last one inside a piece (None: any may)."""
        last = path[-1] if path else None
        if last is None or self.tok.is_added[last] or self.tok.is_fallback[last]:
            return None
        return self.validity.successors(last)

    def _allowed_all(
        self, succ: np.ndarray | None, ranges: tuple[tuple[int, int], ...]
    ) -> np.ndarray:
        plain = self.starts
        if succ is not None:
            if self.tok.split:  # a space starts a new piece: no merge reaches back over it
                succ = succ | self.space_first
            plain = plain & succ
        ok = plain | self.tok.is_added | self.fallback_first  # a fallback character: hard boundary
        for lo, hi in ranges:
            ok[self.sorted_ids[lo:hi]] = False  # (ok is a fresh array: '|' made it)
        return ok


def build_sp_tail(
    engine: SentencePieceEngine, region: bytes
) -> tuple[tuple[int, ...], list[TailNode]]:
    """The branching tail of ``region`` (bytes after the last hard boundary) and the
    tokens every covering shares (moved to the trunk)."""
    cached = engine.tail_cache.get(region)
    if cached is not None:
        return cached
    result = _SPTail(engine, region).run()
    engine.tail_cache.put(region, result)
    return result


class _SPTail:
    def __init__(self, engine: SentencePieceEngine, region: bytes) -> None:
        self.engine = engine
        self.tok = engine.tok
        self.region = region
        self.text, self.partial = split_utf8(region)
        self.offs = char_byte_offsets(self.text)
        self.cuts = self.tok.hard_cuts(self.text)

    def run(self) -> tuple[tuple[int, ...], list[TailNode]]:
        leaves: dict[tuple[int, ...], np.ndarray] = {}
        at_end: set[tuple[int, ...]] = set()
        n = len(self.region)
        for k in range(len(self.text) + 1):
            pos = self.offs[k]
            if n - pos >= self.engine.max_token_len:
                continue  # no token is long enough to start here and reach past the end
            path = tuple(self.tok.encode_prefix(self.text, k, self.cuts))
            if pos == n:
                leaves[path] = np.flatnonzero(self.engine.allowed(path, self.region, None))
                at_end.add(path)
            else:
                leaves[path] = self._straddlers(path, pos)
        if self.partial and self.engine.may_fall_back(self.partial):
            whole = self.tok.encode_prefix(self.text, len(self.text), self.cuts)
            path = tuple(whole) + tuple(int(self.tok.fallback_ids[b]) for b in self.partial)
            nxt = self.engine._fallback_mask(self.partial)
            leaves[path] = np.flatnonzero(nxt)
            at_end.add(path)
        return _as_tail(leaves, at_end, n, self.tok)

    def _straddlers(self, path: tuple[int, ...], pos: int) -> np.ndarray:
        rest = self.region[pos:]
        lo, hi = self.engine.token_range(rest)
        if lo == hi:
            return EMPTY
        ok = self.engine.allowed_span(path, self.region[:pos], lo, hi)
        ok &= self.engine.sorted_len[lo:hi] > len(rest)
        return np.sort(self.engine.sorted_ids[lo:hi][ok])


def _as_tail(
    leaves: dict[tuple[int, ...], np.ndarray],
    at_end: set[tuple[int, ...]],
    n: int,
    tok: BPETokenizer,
) -> tuple[tuple[int, ...], list[TailNode]]:
    """Tree nodes (every prefix of a kept path) parents first, the shared start moved out."""
    kept = {p for p, got in leaves.items() if len(got) or p in at_end}
    nodes = {p[:j] for p in kept for j in range(len(p) + 1)}
    children: dict[tuple[int, ...], int] = {}
    for p in nodes:
        if p:
            children[p[:-1]] = children.get(p[:-1], 0) + 1
    trunk: tuple[int, ...] = ()
    while trunk not in kept and children.get(trunk, 0) == 1:
        trunk = next(p for p in nodes if len(p) == len(trunk) + 1 and p[:-1] == trunk)
    out = []
    for p in sorted((p for p in nodes if p[: len(trunk)] == trunk), key=lambda p: (len(p), p)):
        got = leaves.get(p, EMPTY) if p in kept else EMPTY
        ends = len(tok.decode(p)) == n
        out.append(TailNode(p[len(trunk) :], ends, np.asarray(got, dtype=np.int64)))
    return trunk, out


def check_text(data: bytes, offset: int) -> None:
    """Refuse a prefix holding U+2581: the encoder reads it as a space."""
    at = data.find(SPACE_PIECE_BYTES)
    if at >= 0:
        raise PrefixError(
            f"U+2581 at byte {offset + at}: a SentencePiece tokenizer encodes it as a space, "
            "so no token sequence spells it"
        )
