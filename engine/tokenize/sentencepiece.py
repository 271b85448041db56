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
(:func:`~midword.engine.tokenize.sentencepiece_spec.check_sentencepiece`).
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

from ..errors import UnsupportedSentencePiece
from .bpe import (
    NO_MERGE,
    AddedToken,
    BPETokenizer,
    MergeTable,
    bpe_apply,
    bpe_last_merge,
    cache_root,
)
from .bpe import reorder_merges as _reorder
from .sentencepiece_spec import SPACE_PIECE, check_sentencepiece

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
            bytes_merges=False,  # (bpe_heap reads the packed table)
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


def bpe_heap(symbols: Sequence[int], merges: MergeTable) -> list[int]:
    """:func:`~.bpe.bpe_apply` (lowest rank first, leftmost among equals) in O(n log n):
    a heap of (rank, position) over a linked list, instead of a rescan per merge (a chunk
    of 300 '=' took 8 ms). A heap entry is stale once either of its symbols has changed.

    >>> merges = MergeTable.of({(0, 0): (0, 1), (1, 0): (1, 2)})  # 'aa', then 'aa' + 'a'
    >>> bpe_heap([0, 0, 0, 0, 0], merges)
    [1, 2]
    """
    get, stride, results = merges.packed.get, merges.stride, merges.results
    sym = [int(t) for t in symbols]
    n = len(sym)
    after = list(range(1, n + 1))  # the next live position (n: none)
    before = list(range(-1, n - 1))
    # entries ((rank, result) place, position, left, right): lowest rank first
    heap = [
        (hit, i, sym[i], sym[i + 1])
        for i in range(n - 1)
        if (hit := get(sym[i] * stride + sym[i + 1])) is not None
    ]
    heapq.heapify(heap)
    while heap:
        hit, i, a, b = heapq.heappop(heap)
        j = after[i]
        if j >= n or sym[i] != a or sym[j] != b:
            continue  # stale: a merge changed one side (a merged token never equals a part)
        sym[i] = results[hit]
        sym[j] = -1  # dead
        after[i] = after[j]
        if after[j] < n:
            before[after[j]] = i
        for x in (before[i], i):
            y = after[x] if x >= 0 else n
            if x >= 0 and y < n:
                hit = get(sym[x] * stride + sym[y])
                if hit is not None:
                    heapq.heappush(heap, (hit, x, sym[x], sym[y]))
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
