"""The byte-level BPE model itself: :class:`BPETokenizer` (token bytes, merges in normal
form, the reference encoder) and the merge helpers that every tokenizer family shares.

Loading a ``tokenizer.json`` into one lives in :mod:`tokenizer` (ByteLevel) and
:mod:`sentencepiece`; the covering-tree modules import only this one.

>>> bpe_apply([1, 2, 3], MergeTable.of({(1, 2): (0, 4), (4, 3): (1, 5)}))
[5]
"""

from __future__ import annotations

import heapq
import operator
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import regex

from ..errors import TokenizerError
from .pretok import Pretokenizer

__all__ = [
    "NO_MERGE",
    "AddedToken",
    "BPETokenizer",
    "MergeTable",
    "Merges",
    "TokenMerges",
    "TokenizerError",
    "bpe_apply",
    "bpe_last_merge",
    "cache_root",
    "narrow_ids",
    "reorder_merges",
    "sorted_vocabulary",
]

NO_MERGE = np.iinfo(np.int64).max  # rank of "never formed" (unreachable tokens, past the top)

BPE_MEMO_WORDS = 1 << 15  # pre-tokens whose BPE is kept (least recently used dropped)


class MergeTable:
    """Merges (left, right) -> (rank, result), packed into one dict of plain ints: key
    ``left * stride + right`` (``stride``: above every id), value the merge's place ``k``
    in (rank, result) order, whose result is ``results[k]`` and rank ``ranks[k]`` (``k``
    itself where ``ranks`` is None: merges in normal form, each rank forming one token).
    A dict of int tuples holds five objects per merge (37 MiB for Qwen2's 151k merges);
    this one holds one, its key (10 MiB with the dict), when its values are the
    tokenizer's own id objects (``ids``, shared with ``bytes_to_id``), and a lookup builds
    no tuple.

    Values compare as (rank, result) do: lowest rank first, as BPE applies them.

    >>> table = MergeTable.of({(1, 2): (0, 4), (4, 3): (1, 5)})
    >>> table.get(4, 3), table.get(3, 4), len(table)
    ((1, 5), None, 2)
    """

    __slots__ = ("packed", "ranks", "results", "stride")

    def __init__(
        self, packed: dict[int, int], stride: int, results: list[int], ranks: np.ndarray | None
    ) -> None:
        self.packed = packed
        self.stride = stride
        self.results = results
        self.ranks = ranks

    @classmethod
    def of(cls, merges: Mapping[tuple[int, int], tuple[int, int]]) -> MergeTable:
        """The table of a (left, right) -> (rank, result) mapping (tests, small tables)."""
        stride = max([x for (a, b), (_, out) in merges.items() for x in (a, b, out)], default=0) + 1
        order = sorted(set(merges.values()))
        place = {pair: k for k, pair in enumerate(order)}
        packed = {a * stride + b: place[pair] for (a, b), pair in merges.items()}
        ranks = np.array([r for r, _ in order], dtype=np.int64)
        return cls(packed, stride, [out for _, out in order], ranks)

    @classmethod
    def of_normal_form(
        cls,
        left: np.ndarray,
        right: np.ndarray,
        rank: np.ndarray,
        formed: np.ndarray,
        ids: Sequence[int] | None = None,
    ) -> MergeTable:
        """The merges that form the tokens ``formed`` (ids whose ``left``, ``right`` and
        ``rank`` say how), packed with numpy at once; ``stride`` is the vocabulary size.
        ``ids[i]`` is the int object for ``i`` (at least ``len(left)`` of them): values
        and results are those objects, not new ones."""
        stride = len(left)
        if ids is None:
            ids = list(range(stride))
        formed = formed[np.lexsort((formed, rank[formed]))]  # (rank, result) order
        keys = left[formed].astype(np.int64) * stride + right[formed]
        ranks = rank[formed].astype(np.int64)
        packed = dict(zip(keys.tolist(), ids[: len(formed)], strict=True))
        results = [ids[t] for t in formed.tolist()]
        identity = np.array_equal(ranks, np.arange(len(formed)))
        return cls(packed, stride, results, None if identity else ranks)

    def get(self, left: int, right: int) -> tuple[int, int] | None:
        """(rank, result) of the merge of ``left`` and ``right``; None if there is none."""
        k = self.packed.get(left * self.stride + right)
        if k is None:
            return None
        return (k if self.ranks is None else int(self.ranks[k])), self.results[k]

    def __len__(self) -> int:
        return len(self.packed)


class TokenMerges:
    """The merges of a tokenizer in normal form, read off its token bytes: the merge of
    ``a`` and ``b`` is the token ``t`` that ``bytes_to_id`` finds for ``bytes(a) +
    bytes(b)`` when ``left[t]`` is ``a`` (its bytes then make ``b`` its right part: no two
    tokens share bytes); ``place[t]`` is its place in (rank, result) order, as
    :class:`MergeTable`'s values. Two lists of the tokenizer's id objects, 2.3 MiB at
    Qwen2's 151k tokens, where the packed dict takes 10.8; a lookup costs 1.2-1.5x (and a
    pre-token's BPE is kept once made). :meth:`of_tokens` builds one only where that
    reading is exact.

    >>> tb = [b"a", b"b", b"ab", b"abb"]
    >>> m = TokenMerges.of_tokens(tb, {b: i for i, b in enumerate(tb)},
    ...     np.array([-1, -1, 0, 2]), np.array([-1, -1, 1, 1]), np.array([-1, -1, 0, 1]),
    ...     np.array([2, 3]), [0, 1, 2, 3])
    >>> m.get(0, 1), m.get(2, 1), m.get(1, 0), bpe_apply([0, 1, 1], m)
    ((0, 2), (1, 3), None, [3])
    """

    __slots__ = ("bytes_to_id", "left", "place", "rank", "token_bytes")

    def __init__(
        self,
        token_bytes: Sequence[bytes | None],
        bytes_to_id: Mapping[bytes, int],
        left: list[int],
        place: list[int | None],
        rank: np.ndarray,
    ) -> None:
        self.token_bytes = token_bytes
        self.bytes_to_id = bytes_to_id
        self.left = left  # left[t]: the left part of formed token t, -1 for any other
        self.place = place
        self.rank = rank

    @classmethod
    def of_tokens(
        cls,
        token_bytes: Sequence[bytes | None],
        bytes_to_id: Mapping[bytes, int],
        left: np.ndarray,
        right: np.ndarray,
        rank: np.ndarray,
        formed: np.ndarray,
        ids: Sequence[int],
    ) -> TokenMerges | None:
        """The merges that form the tokens ``formed``, or None where bytes do not tell
        them apart: two tokens with the same bytes, or a formed token whose bytes are not
        its two parts' (the packed :class:`MergeTable` serves those). ``ids[i]`` is the
        int object for ``i``: the lists hold those objects, not new ones."""
        tb = list(token_bytes)
        if len(bytes_to_id) != len(tb) - tb.count(None):
            return None
        tokens, lefts, rights = formed.tolist(), left[formed].tolist(), right[formed].tolist()
        # (C-level maps: a generator takes 0.15 s over 151k tokens)
        parts = map(operator.add, map(tb.__getitem__, lefts), map(tb.__getitem__, rights))
        if not all(map(operator.eq, map(tb.__getitem__, tokens), parts)):
            return None
        left_of: list[int] = [-1] * len(tb)
        for t, a in zip(tokens, lefts, strict=True):
            left_of[t] = ids[a]
        place: list[int | None] = [None] * len(tb)
        order = formed[np.lexsort((formed, rank[formed]))]  # (rank, result) order
        for k, t in enumerate(order.tolist()):
            place[t] = ids[k]
        return cls(token_bytes, bytes_to_id, left_of, place, rank)

    def get(self, left: int, right: int) -> tuple[int, int] | None:
        """(rank, result) of the merge of ``left`` and ``right``; None if there is none."""
        t = self.bytes_to_id.get(self.token_bytes[left] + self.token_bytes[right])  # type: ignore[operator]
        if t is None or self.left[t] != left:
            return None
        return int(self.rank[t]), t

    def __len__(self) -> int:
        return sum(k is not None for k in self.place)


Merges = MergeTable | TokenMerges


@dataclass(frozen=True)
class AddedToken:
    id: int
    content: str
    special: bool


class BPETokenizer:
    """Byte-level view of a BPE tokenizer, with merges in normal form.

    Arrays are indexed by token id (``size`` = max id + 1):

    - ``token_bytes[i]``: raw bytes of text token ``i`` (``None`` for special tokens and gaps)
    - ``left[i], right[i]``: the normal-form merge that forms ``i`` (-1 for single bytes and
      for tokens BPE cannot reach)
    - ``rank[i]``: rank of that merge (-1 for single bytes, ``NO_MERGE`` if unreachable)

    ``missing_bytes``: the bytes with no single-byte token (SmolLM2 lacks 21). The real
    encoder drops such a byte from the text, and so does :meth:`encode`; a token that
    holds one is unreachable.
    """

    def __init__(
        self,
        *,
        token_bytes: list[bytes | None],
        left: np.ndarray,
        right: np.ndarray,
        rank: np.ndarray,
        pretokenizer: Pretokenizer,
        normalize: Callable[[str], str] | None,
        added: Sequence[AddedToken],
        ignore_merges: bool,
        source: str,
        digest: str = "",
        normal_form: str | None = None,
        bytes_merges: bool = True,
    ) -> None:
        self.token_bytes = token_bytes
        self.size = len(token_bytes)
        # (ids in 4 bytes: 1.2 MiB less at 151k tokens; ranks keep NO_MERGE's 8)
        self.left = narrow_ids(left)
        self.right = narrow_ids(right)
        self.rank = rank
        self.pretokenizer = pretokenizer
        self.normalize = normalize
        # "NFC" when the normalizer is Unicode NFC and nothing else (the encoding-free
        # verdicts apply there to text NFC leaves alone); None otherwise
        self.normal_form = normal_form if normalize is not None else None
        self.ignore_merges = ignore_merges
        self.source = source
        self.digest = digest  # content hash of the tokenizer file: key of derived on-disk caches
        # one int object per id, shared by the tables below (a value ``enumerate`` makes is
        # an object of its own: 4 MiB each time at 151k tokens)
        ids = list(range(self.size))
        self.bytes_to_id: dict[bytes, int] = {
            b: ids[i] for i, b in enumerate(token_bytes) if b is not None
        }
        self.special_ids = sorted(a.id for a in added if a.special)
        self.added_text = {a.content: a.id for a in added if not a.special}
        self.added_bytes = [a.encode("utf-8") for a in self.added_text]
        self.added = list(added)
        self.is_text = np.array([b is not None for b in token_bytes], dtype=bool)
        self.reachable = self.is_text & (rank != NO_MERGE)
        # bytes with no single-byte token (SmolLM2 and the StarCoder family lack 21): the
        # real encoder drops them from the text, so no canonical sequence spells one
        self.missing_bytes = frozenset(b for b in range(256) if bytes([b]) not in self.bytes_to_id)
        self.byte_ids = np.array([self.bytes_to_id.get(bytes([b]), -1) for b in range(256)])
        # (left, right) -> (rank, result) in normal form: read off the token bytes where
        # they tell the merges apart (``bytes_merges``), else packed
        formed = np.flatnonzero((left >= 0) & self.reachable)
        by_bytes = bytes_merges and TokenMerges.of_tokens(
            token_bytes, self.bytes_to_id, left, right, rank, formed, ids
        )
        self.merges: Merges = (
            by_bytes
            if isinstance(by_bytes, TokenMerges)
            else MergeTable.of_normal_form(left, right, rank, formed, ids)
        )
        self._added_re = (
            regex.compile(
                "|".join(regex.escape(a) for a in sorted(self.added_text, key=len, reverse=True))
            )
            if self.added_text
            else None
        )
        # words seen lately: a buffer's window is encoded again and again, mostly the same
        # words; each keystroke also brings a word never seen before, so the bound is what
        # a long session keeps (32k words, about 8 MB)
        self._bpe_cached = lru_cache(maxsize=BPE_MEMO_WORDS)(self._bpe)

    # ----------------------------------------------------------------- encoding
    def normalize_text(self, text: str) -> str:
        return self.normalize(text) if self.normalize else text

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (normalized, special-token text treated as text)."""
        ids: list[int] = []
        for piece, added_id in self.split_added(self.normalize_text(text)):
            if added_id is not None:
                ids.append(added_id)
                continue
            for word in self.pretokenizer.split(piece):
                ids.extend(self.encode_word(word.encode("utf-8")))
        return ids

    def split_added(self, text: str) -> list[tuple[str, int | None]]:
        """Split on non-special added tokens (matched as text before pre-tokenization)."""
        if self._added_re is None:
            return [(text, None)] if text else []
        out: list[tuple[str, int | None]] = []
        pos = 0
        for m in self._added_re.finditer(text):
            if m.start() > pos:
                out.append((text[pos : m.start()], None))
            out.append((m.group(), self.added_text[m.group()]))
            pos = m.end()
        if pos < len(text):
            out.append((text[pos:], None))
        return out

    def encode_word(self, word: bytes) -> tuple[int, ...]:
        """BPE of one pre-token (with ``ignore_merges`` when the tokenizer has it)."""
        if self.ignore_merges:
            whole = self.bytes_to_id.get(word)
            if whole is not None:
                return (whole,)
        return self._bpe_cached(word)

    def clear_bpe_memo(self) -> None:
        """Forget the memoized BPE of pre-tokens (benchmarks time cold encodings with it)."""
        self._bpe_cached.cache_clear()

    def _bpe(self, word: bytes) -> tuple[int, ...]:
        if self.missing_bytes:  # dropped, as the real encoder drops a character it lacks
            word = bytes(b for b in word if b not in self.missing_bytes)
        return tuple(bpe_apply([int(self.byte_ids[b]) for b in word], self.merges))

    def decode(self, ids: Sequence[int]) -> bytes:
        """Raw bytes of text tokens (special tokens decode to nothing)."""
        return b"".join(self.token_bytes[i] or b"" for i in ids)

    def is_special(self, token_id: int) -> bool:
        return 0 <= token_id < self.size and self.token_bytes[token_id] is None


def narrow_ids(values: np.ndarray) -> np.ndarray:
    """Integer ``values`` (token ids, ranks, offsets, -1 for none) as int32 where they all
    fit, else as they are: tables indexed by token id take half the memory.

    >>> narrow_ids(np.array([-1, 5, 2**31 - 1])).dtype, narrow_ids(np.array([2**31])).dtype
    (dtype('int32'), dtype('int64'))
    """
    low, high = (int(values.min()), int(values.max())) if values.size else (0, 0)
    return values.astype(np.int32, copy=False) if low >= -(2**31) and high < 2**31 else values


def bpe_apply(symbols: Sequence[int], merges: Merges) -> list[int]:
    """Apply merges lowest rank first, leftmost first among equals (the HF heap order)."""
    if isinstance(merges, TokenMerges):
        return _apply_by_bytes(symbols, merges)
    get, stride, results = merges.packed.get, merges.stride, merges.results
    syms = list(symbols)
    while len(syms) > 1:
        best, at = None, 0  # the (rank, result) place of the first lowest merge, and where
        for pos in range(len(syms) - 1):
            hit = get(syms[pos] * stride + syms[pos + 1])
            if hit is not None and (best is None or hit < best):
                best, at = hit, pos
        if best is None:
            break
        syms[at : at + 2] = [results[best]]
    return syms


def _apply_by_bytes(symbols: Sequence[int], merges: TokenMerges) -> list[int]:
    """:func:`bpe_apply` over :class:`TokenMerges`: the same merges in the same order
    (a word of more than `RESCAN_UP_TO` symbols: :func:`_apply_long`)."""
    if len(symbols) > RESCAN_UP_TO:
        return _apply_long(symbols, merges)
    get, tb, left, place = merges.bytes_to_id.get, merges.token_bytes, merges.left, merges.place
    syms = list(symbols)
    parts: list[bytes] = [tb[s] for s in syms]  # type: ignore[misc]
    while len(syms) > 1:
        best, at, out = None, 0, 0  # the place of the first lowest merge, where, its token
        for pos in range(len(syms) - 1):
            t = get(parts[pos] + parts[pos + 1])
            if t is not None and left[t] == syms[pos]:
                k = place[t]
                if best is None or k < best:  # type: ignore[operator]
                    best, at, out = k, pos, t
        if best is None:
            break
        syms[at : at + 2] = [out]
        parts[at : at + 2] = [tb[out]]  # type: ignore[list-item]
    return syms


RESCAN_UP_TO = 16  # symbols up to which a rescan per merge beats keeping every pair's merge
_NO_PLACE = float("inf")  # above every place: no merge there


def _apply_long(symbols: Sequence[int], merges: TokenMerges) -> list[int]:
    """:func:`_apply_by_bytes` for a long word: each neighbouring pair's merge is looked
    up once, and again only where a merge made the pair new; the lowest kept place, the
    leftmost first (``index``), is merged. O(n) lookups for a run of n bytes, not O(n^2):
    a 300-byte ruler's BPE takes a third of the rescans' time."""
    get, tb, left, place = merges.bytes_to_id.get, merges.token_bytes, merges.left, merges.place
    syms = list(symbols)
    parts: list[bytes] = [tb[s] for s in syms]  # type: ignore[misc]
    keys: list[float] = []  # the place of each pair's merge (_NO_PLACE: none)
    outs: list[int] = []  # its token
    for pos in range(len(syms) - 1):
        t = get(parts[pos] + parts[pos + 1])
        ok = t is not None and left[t] == syms[pos]
        keys.append(place[t] if ok else _NO_PLACE)  # type: ignore[arg-type, index]
        outs.append(t if ok else -1)  # type: ignore[arg-type]
    while keys:
        best = min(keys)
        if best == _NO_PLACE:
            break
        at = keys.index(best)
        syms[at : at + 2] = [outs[at]]
        parts[at : at + 2] = [tb[outs[at]]]  # type: ignore[list-item]
        del keys[at], outs[at]
        for pos in (at - 1, at):  # the pairs the merged symbol is part of now
            if 0 <= pos < len(keys):
                t = get(parts[pos] + parts[pos + 1])
                ok = t is not None and left[t] == syms[pos]
                keys[pos] = place[t] if ok else _NO_PLACE  # type: ignore[assignment, index]
                outs[pos] = t if ok else -1  # type: ignore[assignment]
    return syms


def bpe_last_merge(
    syms: list[int], table: dict[tuple[int, int], tuple[int, int]]
) -> tuple[int, int, int] | None:
    """Heap BPE; return (left, right, result) of the last merge if it yields one symbol."""
    heap: list[tuple[int, int, int, int]] = []
    syms = list(syms)
    last = None
    while len(syms) > 1:
        heap.clear()
        for pos in range(len(syms) - 1):
            hit = table.get((syms[pos], syms[pos + 1]))
            if hit is not None:
                heapq.heappush(heap, (hit[0], pos, syms[pos], syms[pos + 1]))
        if not heap:
            return None
        r, pos, a, b = heap[0]
        last = (a, b, table[(a, b)][1])
        syms[pos : pos + 2] = [last[2]]
    return last


def sorted_vocabulary(
    token_bytes: list[bytes | None],
) -> tuple[list[bytes], np.ndarray, np.ndarray]:
    """(bytes, ids, lengths) of the text tokens sorted by bytes (equal bytes by id). No
    list of (bytes, id) pairs is kept beside them: 13 MiB of tuples at 151k tokens.

    >>> keys, ids, lengths = sorted_vocabulary([b"b", None, b"ab", b"a"])
    >>> keys, ids.tolist(), lengths.tolist()
    ([b'a', b'ab', b'b'], [3, 2, 0], [1, 2, 1])
    """
    ids = [i for i, b in enumerate(token_bytes) if b is not None]
    ids.sort(key=token_bytes.__getitem__)  # (stable: equal bytes stay in id order)
    keys: list[bytes] = [token_bytes[i] for i in ids]  # type: ignore[misc]
    lengths = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
    # (ids in int32, lengths in int16 where they fit: 1.5 MiB less at 151k tokens)
    short = lengths.astype(np.int16) if int(lengths.max(initial=0)) < 2**15 else lengths
    return keys, narrow_ids(np.array(ids, dtype=np.int64)), short


def reorder_merges(left: np.ndarray, right: np.ndarray, orig: np.ndarray) -> np.ndarray:
    """New ranks 0..M-1 so that every merge comes after the merges of its inputs."""
    formed = np.flatnonzero(left >= 0)
    key: dict[int, tuple[int, int, int]] = {}

    def major(t: int) -> tuple[int, int]:
        return (key[t][0], key[t][1]) if t in key else (-1, 0)

    for t in sorted(formed, key=lambda t: orig[t]):
        ka, kb = major(int(left[t])), major(int(right[t]))
        later = max(ka, kb)
        if later[0] < orig[t]:
            key[int(t)] = (int(orig[t]), 0, int(orig[t]))
        else:  # an input is formed later: move right after it
            key[int(t)] = (later[0], later[1] + 1, int(orig[t]))
    # inputs of a moved merge may themselves be moved later in this sweep: iterate to a fixpoint
    changed = True
    while changed:
        changed = False
        for t in formed:
            later = max(major(int(left[t])), major(int(right[t])))
            if (key[int(t)][0], key[int(t)][1]) <= later:
                key[int(t)] = (later[0], later[1] + 1, int(orig[t]))
                changed = True
    rank = np.where(orig == -1, -1, NO_MERGE).astype(np.int64)
    for new, t in enumerate(sorted(key, key=lambda t: key[t])):
        rank[t] = new
    return rank


def cache_root() -> Path:
    """Folder of derived tables ($MIDWORD_CACHE, else $XDG_CACHE_HOME/midword)."""
    root = os.environ.get("MIDWORD_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "midword"
    )
    return Path(root)
