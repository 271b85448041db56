"""The per-tokenizer tables every covering tree over one tokenizer shares (:class:`Engine`).

An engine holds the tokenizer, pair validity, the vocabulary sorted by bytes, the
pre-tokenizer's character classes and class machine, per-token facts (may a token end
a pre-token, start one, be cut by it), the leaf tables and the kept answers of the
canonical checks and the tail builder. Load one per tokenizer with :func:`load_engine`.

>>> engine = load_engine("models/default")  # doctest: +SKIP
>>> lo, hi = engine.token_range(b"def")  # doctest: +SKIP
>>> engine.sorted_keys[lo:hi]  # doctest: +SKIP
[b'def', b'default', b'defaults', b'defined']
"""

from __future__ import annotations

import bisect
import unicodedata
from functools import lru_cache
from pathlib import Path

import numpy as np
import regex

from ..disk_arrays import load_arrays, save_arrays
from ..errors import TokenizerError
from ..gguf.tokenizer import load_tokenizer
from ..tokenize.bpe import sorted_vocabulary
from ..tokenize.char_atoms import signature_groups
from ..tokenize.class_machine import ClassMachine, UnsupportedPattern
from ..tokenize.sentencepiece import SentencePieceTokenizer
from ..tokenize.tokenizer import BPETokenizer, cache_root
from ..tokenize.unicode_versions import compile_as_tokenizers
from .canonical import CanonicalChecks
from .completions import ByteFacts, Completions, build_completions, utf8_length
from .leaf_cache import VCT_CACHE_VERSION
from .leaf_tables import LeafTables
from .saved_words import saved_words_for
from .sentencepiece import SentencePieceEngine
from .tail_cache import TailCache
from .tail_types import ONLY_BARE, Hyp, WholeWords
from .utf8 import (
    NFC_TAIL_CHARS,
    PROBE_ENDINGS,
    PROBES,
    complete_head,
    continuation_run,
    is_one_char,
    last_chars,
    nfc_tail,
    split_lenient,
)
from .validity import Validity

# completions kept per engine: a tree that ends inside a character asks about ~64 new
# partials (one per continuation byte); most are 64 characters (a few kB each)
COMPLETIONS_MEMO_SIZE = 1024
WHOLE_WORDS_MEMO_SIZE = 4096  # heads whose whole words are kept
_ENDINGS = sorted(set(PROBE_ENDINGS) - {b""})  # the probe endings of Engine._ending_runs

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
                out.append(compile_as_tokenizers(wrapped))  # (as the splits test it)
            except regex.error:
                continue
    return out


class Engine:
    """Per-tokenizer tables shared by every VCT over that tokenizer."""

    def __init__(self, tok: BPETokenizer) -> None:
        self.tok = tok
        # bytes no token spells alone (a prefix holding one cannot be covered), and the
        # tokens that hold one (never offered; None when the vocabulary lacks no byte)
        self.missing_bytes: frozenset[int] = tok.missing_bytes
        self.holds_missing = _holds_missing(tok)
        self.validity = Validity(tok)
        self.atoms = _class_atoms([p.pattern for p, _ in tok.pretokenizer.splits])
        self._class_ids: dict[str, int] = {}
        # the vocabulary sorted by bytes: the bytes, the ids, the lengths
        self.sorted_keys, self.sorted_ids, self.sorted_len = sorted_vocabulary(tok.token_bytes)
        self.max_token_len = int(self.sorted_len.max())
        added = np.zeros(tok.size, dtype=bool)
        added[list(tok.added_text.values())] = True
        # a pre-token may start with any reachable token, or be one whole ignore_merges token
        self.starts_ok = (tok.reachable | (tok.is_text & tok.ignore_merges)) & ~added
        # non-special added tokens are matched before pre-tokenization: checked by encoding
        self.added_ids = sorted(tok.added_text.values())
        self.is_added = added
        self._facts: ByteFacts | None = None
        # every character that completes a partial one, with BPE's view of each (LRU)
        self.completions = lru_cache(maxsize=COMPLETIONS_MEMO_SIZE)(self._completions_of)
        self.whole_words = lru_cache(maxsize=WHOLE_WORDS_MEMO_SIZE)(self._whole_words_of)
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
        self.tail_cache = TailCache()  # built tails by region (tail.build_tail)
        self._ends_at: tuple[np.ndarray, int] | None = None  # _ending_runs
        # under ignore_merges: the whole words of heads that start many tokens, from disk
        self.saved_words = saved_words_for(self) if tok.ignore_merges else None
        if self.saved_words is not None:
            self._ends_at = (self.saved_words.ends_at, len(self.sorted_keys) + 1)
        # region shape -> its probe hypotheses (tail._TailBuilder._probe_hyps)
        self.hyps_memo: dict[tuple, tuple[Hyp, ...]] = {}
        # verdicts from pre-token shapes and pair validity (False: encode, the tests' oracle)
        self.partial_fast = True
        self.canonical = CanonicalChecks(self)

    def clear_caches(self) -> None:
        """Forget every answer kept for speed: built tails, canonical verdicts,
        completions, whole words, hypotheses by shape, leaf-table masks and pair
        verdicts. The tables stay; trees built afterwards are the same, only slower at
        first (what benchmarks of cold paths and tests of kept answers need)."""
        self.completions.cache_clear()
        self.whole_words.cache_clear()
        self.tail_cache.clear()
        self.hyps_memo.clear()
        self.canonical.clear()
        self.validity.clear_caches()
        if self.tables is not None:
            self.tables.clear_caches()

    def extends_canonically(self, seq: tuple[int, ...], data: bytes) -> bool:
        """Does some probed text that starts with ``data`` encode to tokens starting with
        ``seq``? (:meth:`CanonicalChecks.extends`, answers kept.)"""
        return self.canonical.extends(seq, data)

    def char_class(self, ch: str) -> int:
        cid = self._class_ids.get(ch)
        if cid is None:
            sig = tuple(a.fullmatch(ch) is not None for a in self.atoms)
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
            exact, never = self._beyond_head_keys()
            # (added text is matched before the split: its own tokens are never cut)
            ids = np.flatnonzero((irregular | exact) & (self.whole_ok | self.is_added) & ~never)
            irregular = irregular | exact | never
            self._head_keys = (first_key, reps, self.key_long, irregular, ids.tolist())
        return self._head_keys

    def _beyond_head_keys(self) -> tuple[np.ndarray, np.ndarray]:
        """Tokens whose first characters do not tell their verdict: (those checked one by
        one, those never a leaf). Checked: non-special added text (it ends the pre-token
        before it: DeepSeek-Coder's added 'ú' after "\t\t" leaves '\t\t' whole) and
        tokens that start with a character they do not complete (b"\xcc": the character
        completing it decides where the pre-token ends, and its head is empty). Never:
        tokens that hold added text without being it ('ús' beside 'ú'), since the encoder
        cuts every occurrence of added text out of the text before anything else."""
        exact = self.is_added.copy()
        never = np.zeros(self.tok.size, dtype=bool)
        added = sorted((a.encode("utf-8") for a in self.tok.added_text if a), key=len)
        # one search for all of them (hundreds of added texts, tens of thousands of tokens)
        holds = regex.compile(b"|".join(regex.escape(a) for a in reversed(added))).search
        for i, b in enumerate(self.tok.token_bytes):
            if b is None or exact[i]:
                continue
            never[i] = bool(added) and holds(b) is not None
            exact[i] = not never[i] and complete_head(b) == ""
        return exact, never

    def _first_keys(self) -> tuple[np.ndarray, list[str]]:
        """Group tokens by the classes of their first three characters (regex behaviour)."""
        keys: dict[tuple, int] = {}
        reps: list[str] = []
        out = np.full(self.tok.size, -1, dtype=np.int64)
        for i, b in enumerate(self.tok.token_bytes):
            if b is None:
                continue
            head = complete_head(b)
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
        cache = self.cache_file("vct")
        saved = load_arrays(cache)
        if saved is not None:
            return saved["tail_ok"], saved["whole_ok"], saved["irregular"]
        # the head-key shortcut's table is only needed where the class machine is not used
        irregular = self._irregular(self._first_keys()[0]) if self.machine is None else None
        empty = np.zeros(0, dtype=bool)
        tables = self._tail_ok(), self._whole_ok(), irregular if irregular is not None else empty
        save_arrays(cache, dict(zip(("tail_ok", "whole_ok", "irregular"), tables, strict=True)))
        return tables

    def _tail_ok(self) -> np.ndarray:
        """False for tokens that end inside a character when no text completing that
        character keeps the token whole (BPE or the normalizer always rewrites it)."""
        ok = np.ones(self.tok.size, dtype=bool)
        for i, b in enumerate(self.tok.token_bytes):
            if b is None or 0x80 <= b[0] < 0xC0:
                continue
            text, partial = split_lenient(b)
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
    def _completions_of(self, partial: bytes) -> Completions:
        """Every character that completes ``partial``, with BPE's view of each
        (:attr:`completions` keeps them)."""
        if self._facts is None:
            # the tokens that start with a continuation byte: one run of the sorted vocabulary
            lo, hi = self.token_range(b"\x80")[0], self.token_range(b"\xbf")[1]
            self._facts = ByteFacts.of(self.tok, self.sorted_keys[lo:hi])
        return build_completions(self.tok, self._facts, partial, PROBE_ENDINGS)

    def class_reps(self, partial: bytes) -> list[str]:
        """One completion per class of characters the pre-tokenizer tells apart."""
        info = self.completions(partial)
        _, first = self.class_groups(info)
        return [info.text[i] for i in sorted(first.tolist())]

    def class_groups(self, info: Completions) -> tuple[np.ndarray, np.ndarray]:
        """(class group of each completion, first completion of each group), cached."""
        got = info.derived.get("class_groups")
        if got is None:
            group, first, _ = signature_groups(self.atoms, info.text)
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
            tail = nfc_tail(last_chars(before, NFC_TAIL_CHARS))
            safe = self.safe_after(tail, info)
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
        group, _ = self.class_groups(info)
        cols = [group, info.first] + [info.firsts(k) for k in sorted(info.cross)]
        keys = np.stack(cols, axis=1)
        kept = np.flatnonzero(safe)
        _, first = np.unique(keys[kept], axis=0, return_index=True)
        # NFC may change or merge an unsafe character: each one is tried as it is
        return np.union1d(kept[first], np.flatnonzero(~safe))

    def safe_after(self, tail: str | None, info: Completions) -> np.ndarray:
        """``info.safe`` widened by the text before the partial: a completion NFC could
        merge with some predecessors but leaves alone after this one behaves as a safe one.

        ``tail`` is that text from its last character NFC never merges with what precedes
        (normalization never reaches across it; see `nfc_tail`). When ``tail`` plus the
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
                    if len(ch) == n and ch[0] >= 0xE0 and is_one_char(ch):
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
            text, _ = split_lenient(b)
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
            text, _ = split_lenient(self.tok.token_bytes[i])  # type: ignore[arg-type]
            window = len(text[:4]) - 1
            cuts_whole = {e for _, e in spans(text) if e < window}
            cuts_head = {e for _, e in spans(text[:4]) if e < window}
            out[i] = cuts_whole != cuts_head
        return out

    def _whole_words_of(self, head: bytes) -> WholeWords:
        """Tokens T and probe endings e (``b""`` included) with ``head + T + e`` a token
        (:attr:`whole_words` keeps them per head): saved on disk for heads that start
        many tokens (:mod:`.saved_words`), else computed."""
        if self.saved_words is not None:
            got = self.saved_words.get(head)
            if got is not None:
                return got
        return self.scan_whole_words(head)

    def scan_whole_words(self, head: bytes) -> WholeWords:
        """:meth:`whole_words` computed from the sorted vocabulary (what is saved)."""
        lo, hi = self.token_range(head)
        keys, get, n = self.sorted_keys, self.tok.bytes_to_id.get, len(head)
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
        return WholeWords(np.fromiter(out, dtype=np.int64, count=len(out)), list(out.values()))

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
            runs = np.array([continuation_run(b) for b in self.sorted_keys[lo:hi]])
            lengths = self.sorted_len[lo:hi]
            keep = runs == np.minimum(lengths, missing)
            got = self._continuing[missing] = self.sorted_ids[lo:hi][keep]
        return got

    def _ending_runs(self, lo: int, hi: int) -> list[tuple[bytes, list[int]]]:
        """Per non-empty probe ending: the positions in ``sorted_keys[lo:hi]`` of tokens
        that end with it (:meth:`ending_positions`, read from disk under ignore_merges)."""
        if self._ends_at is None:
            self._ends_at = (self.ending_positions(), len(self.sorted_keys) + 1)
        positions, span = self._ends_at
        base = np.arange(len(_ENDINGS), dtype=np.int64) * span
        starts = positions.searchsorted(base + lo).tolist()
        stops = positions.searchsorted(base + hi).tolist()
        return [
            (ext, (positions[a:b] - k * span).tolist())
            for k, (ext, a, b) in enumerate(zip(_ENDINGS, starts, stops, strict=True))
            if b > a
        ]

    def ending_positions(self) -> np.ndarray:
        """The positions in ``sorted_keys`` of the tokens that end with each non-empty
        probe ending (``_ENDINGS``), as one sorted array: ending k's shifted by k times
        (vocabulary size + 1), so that one search finds every ending's run."""
        # the vocabulary's bytes end to end: a word's last k bytes, read at its end
        flat = np.frombuffer(b"".join(self.sorted_keys), dtype=np.uint8)
        stop = np.cumsum(self.sorted_len)
        span = len(self.sorted_keys) + 1
        shifted = []
        for k, e in enumerate(_ENDINGS):
            hit = self.sorted_len >= len(e)
            for back, byte in enumerate(reversed(e), start=1):
                hit &= flat[np.maximum(stop - back, 0)] == byte
            shifted.append(np.flatnonzero(hit) + k * span)
        return np.concatenate(shifted)

    def token_range(self, prefix: bytes) -> tuple[int, int]:
        """Indices into ``sorted_keys`` of tokens that start with ``prefix``."""
        lo = bisect.bisect_left(self.sorted_keys, prefix)
        hi = bisect.bisect_left(self.sorted_keys, prefix + b"\xff" * (self.max_token_len + 1))
        return lo, hi


def _holds_missing(tok: BPETokenizer) -> np.ndarray | None:
    """Per token: does it hold a byte of ``tok.missing_bytes``? None when there are none.

    Such a token is never the encoder's output for text without that byte, and text with
    it is out of the model (the real encoder drops the byte), so no covering offers it.
    A vocabulary that lacks a byte some probe continuation needs is refused: the covering
    tree's definition asks about text that continues with every probe.
    """
    if not tok.missing_bytes:
        return None
    lacking = sorted({b for y in PROBES for b in y.encode("utf-8")} & tok.missing_bytes)
    if lacking:
        raise TokenizerError(
            "vocabulary lacks single-byte tokens for bytes the covering tree needs "
            f"({', '.join(f'0x{b:02x}' for b in lacking)}): not supported"
        )
    missing = bytes(sorted(tok.missing_bytes))
    out = np.zeros(tok.size, dtype=bool)
    for i, word in enumerate(tok.token_bytes):
        out[i] = word is not None and len(word.translate(None, missing)) < len(word)
    return out


def _no_cut_inside(spans: list[tuple[int, int]], length: int) -> bool:
    return not any(0 < end < length for _, end in spans)


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


# ------------------------------------------------------------------ loading
_ENGINES: dict[str, Engine] = {}


def load_engine(path: str) -> Engine:
    """Load (once per process) the engine tables for a tokenizer.json or model directory."""
    from ..tokenize.tokenizer import resolve_tokenizer_path

    key = str(resolve_tokenizer_path(path).resolve())
    eng = _ENGINES.get(key)
    if eng is None:
        eng = _ENGINES[key] = engine_for(load_tokenizer(key))
    return eng


def engine_for(tok: BPETokenizer) -> Engine:
    """The engine of a loaded tokenizer (SentencePiece files get their own kind)."""
    if isinstance(tok, SentencePieceTokenizer):
        return SentencePieceEngine(tok)  # type: ignore[return-value]
    return Engine(tok)
