"""SentencePiece BPE with byte fallback (Llama 2, Mistral v1, Gemma), exact.

Such a tokenizer runs BPE over *characters*, not bytes: a character the vocabulary
holds is one base symbol (an *atom*), any other character becomes its UTF-8 bytes as
``<0xNN>`` tokens (byte fallback), which no merge ever touches. Spaces are written
``▁`` (U+2581); some files also put a ``▁`` in front of the text (the dummy prefix).

midword's byte view: a token's bytes are its piece with ``▁`` read as a space, and
``<0xNN>`` is the byte NN. The text the tokenizer sees is the user's text behind the
dummy space (``lead``), so a tree is built over ``lead + prefix``. A user text that
holds U+2581 itself is refused: it encodes like a space and cannot be spelled back.

Exactness rests on three facts, checked against the real ``tokenizers`` encoder by
the tests:

- BPE never merges across two neighbouring characters that no token holds side by
  side, nor across a byte-fallback character: the text splits there into pieces
  encoded on their own (*hard boundaries*; the covering tree settles them).
- Inside a piece, a token sequence is the encoding of its own text iff every token
  is reachable and every adjacent pair is valid (the pairwise theorem, which holds
  for any base alphabet), so a covering sequence is the encoding of the text before
  its last token plus one valid last token, or the encoding of the text before a
  partial character plus that character's first fallback bytes when some character
  outside the vocabulary starts with them (the byte-fallback branch).
- Non-special added text is matched first, leftmost-longest; a token that would
  complete one begun before it is never the encoder's choice.

What is not modelled exactly is refused at load by name
(:func:`~midword.engine.sentencepiece_spec.check_sentencepiece`).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import os
import re
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from .bpe import (
    NO_MERGE,
    AddedToken,
    BPETokenizer,
    bpe_apply,
    bpe_last_merge,
    cache_root,
)
from .bpe import reorder_merges as _reorder
from .completions import completion_points, utf8_length
from .sentencepiece_spec import SPACE_PIECE, UnsupportedSentencePiece, check_sentencepiece
from .tail import TailCache, TailNode
from .utf8 import PrefixError, char_byte_offsets, split_utf8
from .validity import Validity

SPACE_PIECE_BYTES = SPACE_PIECE.encode("utf-8")
BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")
EMPTY = np.zeros(0, dtype=np.int64)
HARD_MEMO_SIZE = 1 << 16  # neighbour pairs whose verdict is kept
PENDING_MEMO_SIZE = 1 << 16  # region ends whose pending added-text starts are kept
HEAP_BPE_FROM = 16  # symbols in a chunk above which bpe_heap beats bpe_apply's rescans


# ------------------------------------------------------------- the tokenizer
class SentencePieceTokenizer(BPETokenizer):
    """Character-level BPE with byte fallback in midword's byte view.

    Beyond :class:`BPETokenizer`: ``lead`` (b" " when the dummy prefix is on),
    ``split`` (Metaspace split: every space starts a piece), ``atom_id`` (character ->
    its one-character token), ``fallback_ids[b]`` (the ``<0xNN>`` token of byte b),
    ``is_fallback``, ``dead`` (tokens that hold a non-special added text: never the
    encoder's output) and ``pairs`` (sorted codes of neighbouring characters inside
    some token: any other neighbours are a hard boundary).
    """

    def __init__(
        self,
        *,
        pieces: dict[str, int],
        merges: list,
        added: Sequence[AddedToken],
        lead: bool,
        split: bool,
        source: str,
        digest: str = "",
        cache: Path | None = None,
    ) -> None:
        token_bytes, fallback = _sp_token_bytes(pieces, added)
        atom_id = {
            p.replace(SPACE_PIECE, " "): i
            for p, i in pieces.items()
            if len(p) == 1 and token_bytes[i] is not None
        }
        saved = _load_cache(cache)
        if saved is not None:
            left, right, rank = saved["left"], saved["right"], saved["rank"]
        else:
            left, right, rank = _sp_normal_form(token_bytes, atom_id, merges, pieces)
        # the encoder matches an added text's '▁' against a space (Gemma's runs of spaces)
        usable = [AddedToken(a.id, a.content.replace(SPACE_PIECE, " "), a.special) for a in added]
        super().__init__(
            token_bytes=token_bytes,
            left=left,
            right=right,
            rank=rank,
            pretokenizer=_NO_PRETOKENIZER,
            normalize=None,
            added=usable,
            ignore_merges=False,
            source=source,
            digest=digest,
        )
        self.lead = b" " if lead else b""
        self.split = split
        self.atom_id = atom_id
        self.fallback_ids = fallback
        self.is_fallback = np.zeros(self.size, dtype=bool)
        self.is_fallback[fallback] = True
        self.is_added = np.zeros(self.size, dtype=bool)
        self.is_added[list(self.added_text.values())] = True
        self._check_added(file=source)
        # canonical single bytes: an ASCII atom, else its fallback token (never both)
        self.bytes_to_id = {b: i for i, b in enumerate(token_bytes) if b is not None}
        for b in range(256):
            one = bytes([b])
            self.bytes_to_id[one] = atom_id.get(chr(b), fallback[b]) if b < 0x80 else fallback[b]
        self.byte_ids = np.array([self.bytes_to_id[bytes([b])] for b in range(256)])
        self.missing_bytes = frozenset()
        self.dead = saved["dead"] if saved is not None else self._dead_tokens()
        dup = [int(fallback[b]) for b in range(0x80) if chr(b) in atom_id]
        self.reachable = self.reachable & ~self.dead & ~self.is_fallback
        self.reachable[dup] = False
        if saved is not None:
            self.pairs = saved["pairs"]
        else:
            self.pairs = _neighbour_codes(
                token_bytes, self.is_text & ~self.is_fallback & ~self.dead
            )
            _save_cache(cache, left=left, right=right, rank=rank, dead=self.dead, pairs=self.pairs)
        self.pairs_list = self.pairs.tolist()  # (bisect on a list: no numpy call per pair)
        self._hard_memo: dict[str, bool] = {}
        self._prefix_set = frozenset(a[:k] for a in self.added_bytes for k in range(1, len(a)))
        self._pending_memo: dict[bytes, tuple[int, ...]] = {}
        self._added_firsts = frozenset(a[0] for a in self.added_bytes)
        self._added_lasts = frozenset(a[-1] for a in self.added_text)
        self._added_sorted = sorted(self.added_bytes)
        self._longest_added = max(map(len, self.added_bytes), default=0)
        self._added_lengths = sorted({len(a) for a in self.added_text})
        twos: dict[str, set[int]] = {}
        for a in self.added_text:
            if len(a) > 1:
                twos.setdefault(a[:2], set()).add(len(a))
        self._lengths_by_two = {c: sorted(ns, reverse=True) for c, ns in twos.items()}
        firsts = sorted({a[0] for a in self.added_text})
        self._added_first_re = (
            re.compile("[" + "".join(map(re.escape, firsts)) + "]") if firsts else None
        )
        self._chars_cached = lru_cache(maxsize=200_000)(self._bpe_chars)

    def _check_added(self, file: str) -> None:
        for text in self.added_text:
            if any(ch not in self.atom_id for ch in text):
                raise UnsupportedSentencePiece(
                    f"{file}: non-special added token {text!r} holds a character outside "
                    "the vocabulary"
                )
        if self.lead and self.added_text:
            raise UnsupportedSentencePiece(
                f"{file}: a dummy prefix with non-special added tokens (each piece between "
                "added texts would get its own '▁')"
            )

    def _dead_tokens(self) -> np.ndarray:
        """Plain tokens holding a non-special added text: the encoder splits it out first."""
        dead = np.zeros(self.size, dtype=bool)
        if self.split:  # every space starts a piece: no token holds one after its start
            for i, b in enumerate(self.token_bytes):
                if b is not None and b" " in b[1:]:
                    dead[i] = True
        if not self.added_bytes:
            return dead
        # where an added text may start, then a set lookup per length: a regex of Gemma's
        # 6,406 alternatives took 1.6 s over the vocabulary
        added = frozenset(self.added_bytes)
        lengths: dict[int, list[int]] = {}
        for a in sorted(added, key=len):
            lengths.setdefault(a[0], []).append(len(a))
        starts = re.compile(b"[" + b"".join(re.escape(bytes([c])) for c in sorted(lengths)) + b"]")
        for i, b in enumerate(self.token_bytes):
            if b is None or self.is_added[i]:
                continue
            for found in starts.finditer(b):
                j = found.start()
                if any(b[j : j + n] in added for n in lengths[b[j]] if j + n <= len(b)):
                    dead[i] = True
                    break
        return dead

    # ---------------------------------------------------------------- encoding
    def encode(self, text: str) -> list[int]:
        """Token ids of a user's ``text`` (the dummy prefix added when on)."""
        text = text.replace(SPACE_PIECE, " ")
        return self.encode_internal(self.lead.decode() + text if text else text)

    def encode_internal(self, text: str) -> list[int]:
        """Token ids of ``text`` as the model sees it (after the dummy prefix)."""
        return self.encode_prefix(text, len(text), self.hard_cuts(text))

    def encode_prefix(self, text: str, k: int, cuts: Sequence[int]) -> list[int]:
        """Token ids of ``text[:k]`` as the model sees it, given ``cuts``, the hard
        boundaries of ``text`` (:meth:`hard_cuts`): they depend on neighbours alone, so one
        list serves every prefix (a tree encodes up to ~30 prefixes of one region).

        >>> pieces = {"a": 0, "b": 1, "ab": 2} | {f"<0x{b:02X}>": 3 + b for b in range(256)}
        >>> tok = SentencePieceTokenizer(pieces=pieces, merges=["a b"], added=[], lead=False,
        ...                              split=False, source="doc")
        >>> cuts = tok.hard_cuts("abba")  # 'b' never stands before 'b' or 'a' in a token
        >>> cuts, tok.encode_prefix("abba", 3, cuts), tok.encode_internal("abb")
        ([2, 3], [2, 1], [2, 1])
        """
        ids: list[int] = []
        start = 0
        for piece, added_id in self.split_added(text[:k]):
            end = start + len(piece)
            if added_id is not None:
                ids.append(added_id)
            else:
                inside = cuts[bisect.bisect_right(cuts, start) : bisect.bisect_left(cuts, end)]
                for a, b in itertools.pairwise([start, *inside, end]):
                    ids.extend(self._chars_cached(text[a:b]))
            start = end
        return ids

    def encode_word(self, word: bytes) -> tuple[int, ...]:
        return tuple(self.encode_internal(word.decode("utf-8")))

    def chunks(self, text: str) -> list[str]:
        """``text`` cut at every hard boundary (BPE never merges across one)."""
        bounds = [0, *self.hard_cuts(text), len(text)] if text else []
        return [text[a:b] for a, b in itertools.pairwise(bounds)]

    def hard_cuts(self, text: str) -> list[int]:
        """Offsets k of ``text`` with a hard boundary between ``text[k - 1]`` and ``text[k]``."""
        hard = self.hard
        return [k for k in range(1, len(text)) if hard(text[k - 1], text[k])]

    def hard(self, a: str, b: str) -> bool:
        """Is the boundary between neighbours ``a`` and ``b`` one BPE never merges across?"""
        got = self._hard_memo.get(a + b)
        if got is None:
            if len(self._hard_memo) > HARD_MEMO_SIZE:
                self._hard_memo.clear()
            got = self._hard_memo[a + b] = self._hard(a, b)
        return got

    def _hard(self, a: str, b: str) -> bool:
        if a not in self.atom_id or b not in self.atom_id or (self.split and b == " "):
            return True
        code = (ord(a) << 21) | ord(b)
        k = bisect.bisect_left(self.pairs_list, code)
        return k >= len(self.pairs_list) or self.pairs_list[k] != code

    def _bpe_chars(self, chunk: str) -> tuple[int, ...]:
        symbols: list[int] = []
        for ch in chunk:
            atom = self.atom_id.get(ch)
            if atom is not None:
                symbols.append(atom)
            else:
                symbols.extend(int(self.fallback_ids[b]) for b in ch.encode("utf-8"))
        if len(symbols) > HEAP_BPE_FROM:
            return tuple(bpe_heap(symbols, self.merges))
        return tuple(int(t) for t in bpe_apply(symbols, self.merges))

    # ------------------------------------------------------------ added text
    def pending_starts(self, head: bytes) -> list[int]:
        """Byte offsets j where ``head[j:]`` is a proper prefix of a non-special added text.

        Only the last ``_longest_added`` bytes matter: their answer (counted from the end)
        is kept, since streaming asks about every region and the one a byte shorter."""
        if not self._prefix_set:
            return []
        key = head[-self._longest_added :]
        back = self._pending_memo.get(key)
        if back is None:
            if len(self._pending_memo) > PENDING_MEMO_SIZE:
                self._pending_memo.clear()
            firsts, prefixes = self._added_firsts, self._prefix_set
            back = self._pending_memo[key] = tuple(
                len(key) - j
                for j in range(len(key))
                if key[j] in firsts and key[j:] in prefixes  # (most bytes start no added text)
            )
        return [len(head) - b for b in back]

    def split_added(self, text: str) -> list[tuple[str, int | None]]:
        """Leftmost-longest non-special added text, as the base class's regex finds it, by
        lookups per length (the regex over Gemma's 6,406 texts costs ~100 us a call)."""
        out: list[tuple[str, int | None]] = []
        pos = i = 0
        while self._added_first_re is not None:
            found = self._added_first_re.search(text, i)  # (skips what starts none at C speed)
            if found is None:
                break
            i = found.start()
            n = self._added_at(text, i)
            if n:
                if i > pos:
                    out.append((text[pos:i], None))
                out.append((text[i : i + n], self.added_text[text[i : i + n]]))
                pos = i = i + n
            else:
                i += 1
        if pos < len(text):
            out.append((text[pos:], None))
        return out

    def _added_at(self, text: str, i: int) -> int:
        """Length of the longest added text at ``text[i]`` (0: none). Lengths are tried by
        the first two characters: a space starts Gemma's 30 space runs, but ' a' none."""
        room = len(text) - i
        for n in self._lengths_by_two.get(text[i : i + 2], ()):
            if n <= room and text[i : i + n] in self.added_text:
                return n
        return 1 if text[i] in self.added_text else 0

    def ends_with_added(self, text: str) -> bool:
        """Does ``text`` end with a whole non-special added text?"""
        if not text or text[-1] not in self._added_lasts:
            return False
        return any(text[-n:] in self.added_text for n in self._added_lengths if n <= len(text))

    def completing_needs(self, head: bytes) -> list[bytes]:
        """The bytes that, right after ``head``, would complete an added text begun in it."""
        return self.needs_after(self.pending_rests(head))

    def pending_rests(self, head: bytes) -> tuple[bytes, ...]:
        """The ends of ``head`` that are proper prefixes of a non-special added text."""
        return tuple(head[j:] for j in self.pending_starts(head))

    def needs_after(self, rests: Sequence[bytes]) -> list[bytes]:
        """What completes an added text after each begun part of it in ``rests``."""
        needs = []
        for rest in rests:
            k = bisect.bisect_left(self._added_sorted, rest)
            while k < len(self._added_sorted) and self._added_sorted[k].startswith(rest):
                if len(self._added_sorted[k]) > len(rest):  # (one already whole is the path's)
                    needs.append(self._added_sorted[k][len(rest) :])
                k += 1
        return needs


class _NoPretokenizer:
    """SentencePiece has no pre-tokenizer here: hard boundaries play its part."""

    splits: list = []

    def split(self, text: str) -> list[str]:
        return [text] if text else []

    def spans(self, text: str) -> list[tuple[int, int]]:
        return [(0, len(text))] if text else []


_NO_PRETOKENIZER = _NoPretokenizer()


def _sp_token_bytes(
    pieces: dict[str, int], added: Sequence[AddedToken]
) -> tuple[list[bytes | None], np.ndarray]:
    size = max([*pieces.values(), *(a.id for a in added)]) + 1
    out: list[bytes | None] = [None] * size
    fallback = np.full(256, -1, dtype=np.int64)
    for piece, i in pieces.items():
        m = BYTE_PIECE.fullmatch(piece)
        if m:
            fallback[int(m.group(1), 16)] = i
            out[i] = bytes([int(m.group(1), 16)])
        else:
            out[i] = piece.replace(SPACE_PIECE, " ").encode("utf-8")
    for a in added:
        if a.special:
            out[a.id] = None
        elif out[a.id] is None:
            out[a.id] = a.content.encode("utf-8")
    lacking = [f"<0x{b:02X}>" for b in range(256) if fallback[b] < 0]
    if lacking:
        raise UnsupportedSentencePiece(
            f"byte fallback without the byte tokens {', '.join(lacking[:8])}"
            + (" ..." if len(lacking) > 8 else "")
        )
    return out, fallback


def bpe_heap(symbols: Sequence[int], merges: dict[tuple[int, int], tuple[int, int]]) -> list[int]:
    """:func:`~.bpe.bpe_apply` (lowest rank first, leftmost among equals) in O(n log n):
    a heap of (rank, position) over a linked list, instead of a rescan per merge (a chunk
    of 300 '=' took 8 ms). A heap entry is stale once either of its symbols has changed.

    >>> merges = {(0, 0): (0, 1), (1, 0): (1, 2)}  # 'aa' first, then 'aa' + 'a'
    >>> bpe_heap([0, 0, 0, 0, 0], merges)
    [1, 2]
    """
    sym = [int(t) for t in symbols]
    n = len(sym)
    after = list(range(1, n + 1))  # the next live position (n: none)
    before = list(range(-1, n - 1))
    heap = [
        (hit[0], i, sym[i], sym[i + 1])
        for i in range(n - 1)
        if (hit := merges.get((sym[i], sym[i + 1]))) is not None
    ]
    heapq.heapify(heap)
    while heap:
        _, i, a, b = heapq.heappop(heap)
        j = after[i]
        if j >= n or sym[i] != a or sym[j] != b:
            continue  # stale: a merge changed one side (a merged token never equals a part)
        sym[i] = int(merges[(a, b)][1])  # (an id from numpy in BPETokenizer.merges)
        sym[j] = -1  # dead
        after[i] = after[j]
        if after[j] < n:
            before[after[j]] = i
        for x in (before[i], i):
            y = after[x] if x >= 0 else n
            if x >= 0 and y < n:
                hit = merges.get((sym[x], sym[y]))
                if hit is not None:
                    heapq.heappush(heap, (hit[0], x, sym[x], sym[y]))
    return [t for t in sym if t >= 0]


def _sp_normal_form(
    token_bytes: list[bytes | None], atom_id: dict[str, int], merges: list, pieces: dict[str, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Normal form over characters: one-character tokens and byte tokens are the base;
    a longer token is reachable iff BPE on its own characters yields it."""
    table: dict[tuple[int, int], tuple[int, int]] = {}
    for r, m in enumerate(merges):
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        la, lb, lr = pieces.get(a), pieces.get(b), pieces.get(a + b)
        if la is not None and lb is not None and lr is not None:
            table.setdefault((la, lb), (r, lr))
    size = len(token_bytes)
    left = np.full(size, -1, dtype=np.int64)
    right = np.full(size, -1, dtype=np.int64)
    orig = np.full(size, NO_MERGE, dtype=np.int64)
    for piece, i in pieces.items():
        if token_bytes[i] is None:
            continue
        if len(piece) == 1 or BYTE_PIECE.fullmatch(piece):
            orig[i] = -1
            continue
        singles = [atom_id.get(ch) for ch in piece.replace(SPACE_PIECE, " ")]
        if None in singles:
            continue
        last = bpe_last_merge(singles, table)  # type: ignore[arg-type]
        if last is not None and last[2] == i:
            left[i], right[i], orig[i] = last[0], last[1], table[(last[0], last[1])][0]
    return left, right, _reorder(left, right, orig)


def _neighbour_codes(token_bytes: list[bytes | None], use: np.ndarray) -> np.ndarray:
    codes: set[int] = set()
    for i in np.flatnonzero(use).tolist():
        text = token_bytes[i].decode("utf-8")  # type: ignore[union-attr]
        for a, b in itertools.pairwise(text):
            codes.add((ord(a) << 21) | ord(b))
    return np.array(sorted(codes), dtype=np.int64)


def _load_cache(cache: Path | None) -> dict[str, np.ndarray] | None:
    if cache is None or not cache.is_file():
        return None
    with np.load(cache) as arrays:
        return {k: arrays[k] for k in arrays.files}


def _save_cache(cache: Path | None, **arrays: np.ndarray) -> None:
    if cache is None:
        return
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(f".{os.getpid()}.tmp.npz")  # writers may race: unique, then rename
    np.savez(tmp, **arrays)
    tmp.replace(cache)


def load_sentencepiece(
    spec: dict, file: Path, digest: str, use_cache: bool
) -> SentencePieceTokenizer:
    """The :class:`SentencePieceTokenizer` of a parsed tokenizer.json (checked first)."""
    lead, split = check_sentencepiece(spec, file)
    added = [
        AddedToken(int(a["id"]), str(a["content"]), bool(a.get("special", False)))
        for a in spec.get("added_tokens") or []
    ]
    model = spec["model"]
    return SentencePieceTokenizer(
        pieces=model["vocab"],
        merges=model.get("merges") or [],
        added=added,
        lead=lead,
        split=split,
        source=str(file),
        digest=digest if use_cache else "",
        cache=cache_root() / f"sp-{digest}.npz" if use_cache else None,
    )


# ---------------------------------------------------------------- the engine
class SentencePieceEngine:
    """Per-tokenizer tables for SentencePiece trees (what :class:`~.vct.VCT` and the
    samplers read of an engine)."""

    is_sentencepiece = True

    def __init__(self, tok: SentencePieceTokenizer) -> None:
        self.tok = tok
        self.lead = tok.lead
        self.missing_bytes: frozenset[int] = frozenset()
        self.validity = Validity(tok)
        ids = [i for i, b in enumerate(tok.token_bytes) if b is not None]
        self.sorted_bytes = sorted((tok.token_bytes[i], i) for i in ids)
        self.sorted_keys = [b for b, _ in self.sorted_bytes]
        self.sorted_ids = np.array([i for _, i in self.sorted_bytes], dtype=np.int64)
        self.sorted_len = np.array([len(b) for b, _ in self.sorted_bytes], dtype=np.int64)
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
