"""Exact verdicts for token sequences that may end inside a character, without encoding.

In byte mode a random model emits many partial characters, and the covering tree of a
prefix that ends inside one asks, for each token ``t`` that goes on with the open
character: does some completion ``c`` of the (new) partial character, then some probe
``y``, make a text ``text + c + y`` whose encoding starts with ``seq`` (the path plus
``t``)? :meth:`CanonicalChecks.encodes_with <midword.engine.tree.canonical.CanonicalChecks.encodes_with>` answers
by encoding: one text per witness completion and probe, up to a few thousand encodes
for a "no". This module answers the same question from its parts:

* the pre-tokenizer sees a completion only through its character class (the atoms of
  its patterns), so the pre-tokens of ``text + c + y`` are those of one representative
  of ``c``'s class: a few regex runs per class, shared by every ``t`` of the tree;
* encoding is per pre-token: the pre-tokens before the one holding ``c`` must encode to
  the start of ``seq``, and the rest of ``seq`` (it ends inside ``c``) must start the
  BPE of the pre-token ``W = P + R`` holding ``c`` (``P``: its bytes up to the end of
  ``seq``, ``R``: the rest of ``c`` and the part ``e`` of the probe the pre-token takes);
* by the pairwise theorem (a sequence is the BPE of its bytes iff its first token is
  reachable and every adjacent pair is valid), BPE(P + R) starts with ``s`` iff ``s``
  is canonical and ``(s[-1], f)`` is a valid pair, ``f`` the first token of BPE(R):
  the engine's :class:`~midword.engine.tree.completions.Completions` holds ``f`` for every
  completion and every probe ending, so all completions of a class are judged at once;
* under ``ignore_merges`` a pre-token that is itself a token is encoded as that token,
  which never ends inside ``c``: such completions are left out.

Data that ends on a character boundary is judged the same way, its last character
playing ``c`` (the same question for the trees' other exact candidates). Pair verdicts
are remembered by :class:`~midword.engine.tree.validity.Validity`, so a verdict costs a few
dictionary look-ups once the text's pre-token shapes are known.

It applies where encoding is exactly "pre-tokens, then BPE of each". Under an NFC
normalizer or with non-special added text (qwen3, deepseek_v3) the engine asks it only
about texts that NFC leaves as they are and that hold no added text, and only about the
completions NFC leaves alone there (``CanonicalChecks._verdicts_for``, ``CanonicalChecks._nfc_kept``); the
rest is encoded.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from typing import NamedTuple, Protocol

import numpy as np
import regex

from ..tokenize.bpe import BPETokenizer
from ..tokenize.class_machine import ClassMachine
from .completions import Completions
from .utf8 import ENDING_INDEX, PROBES, char_byte_offsets
from .validity import Validity

SHAPES_MEMO_SIZE = 4096  # (text, class) -> pre-token shapes, a few per covering tree


class VerdictSource(Protocol):
    """What the verdicts read of the per-tokenizer :class:`~midword.engine.tree.tables.Engine`."""

    tok: BPETokenizer
    validity: Validity
    machine: ClassMachine | None
    atoms: list[regex.Pattern[str]]

    def completions(self, partial: bytes) -> Completions: ...

    def class_groups(self, info: Completions) -> tuple[np.ndarray, np.ndarray]: ...

    def token_range(self, prefix: bytes) -> tuple[int, int]: ...


class Shape(NamedTuple):
    """Where the pre-tokenizer cuts ``text + c + y`` around ``c`` (``c`` at character
    ``len(text)``): character spans of the pre-tokens before the one holding ``c``, that
    one's start, and the probe bytes it takes after ``c``."""

    before: tuple[tuple[int, int], ...]
    start: int
    ending: bytes


class PartialVerdicts:
    """:meth:`decide` is ``CanonicalChecks.encodes_with`` for data that ends inside a character,
    where encoding is pre-tokens then BPE (the engine checks that per question)."""

    def __init__(self, engine: VerdictSource) -> None:
        self.engine = engine
        self.tok = engine.tok
        self._shapes: OrderedDict[tuple[object, object], tuple[Shape, ...]] = OrderedDict()
        self._signatures: dict[str, tuple[bool, ...]] = {}
        # (text, class) answered once by encoding: the next question about it splits it
        self._encoded_once: set[tuple[object, object]] = set()
        self._classes: dict[str, tuple[int, ...]] = {}  # text -> its characters' classes

    def decide(
        self, seq: tuple[int, ...], text: str, partial: bytes, allowed: np.ndarray | None = None
    ) -> bool:
        """Does ``text + c + y`` encode to tokens starting with ``seq`` for some
        completion ``c`` of ``partial`` (only those ``allowed`` marks, if given) and some
        probe ``y``? (``seq`` covers exactly ``text`` encoded plus ``partial``.)"""
        if not partial:
            return self._decide_whole(seq, text)
        info = self.engine.completions(partial)
        group, first = self.engine.class_groups(info)
        offsets = self._seq_offsets(seq)
        data = text.encode("utf-8")
        char_bytes = char_byte_offsets(text)
        succ = self.engine.validity.successors(seq[-1])
        heads: dict[tuple[tuple[tuple[int, int], ...], int], bool] = {}
        for g, rep in enumerate(first.tolist()):
            members: np.ndarray | None = None
            for shape in self.shapes(text, info.text[rep]):
                key = (shape.before, shape.start)
                if key not in heads:
                    i = self._open_start(seq, offsets, data, char_bytes, shape)
                    # seq's tail must be a prefix of a canonical sequence: canonical itself
                    tail = seq[i:] if i is not None else None
                    heads[key] = tail is not None and self._canonical(tail)
                if not heads[key]:
                    continue
                if members is None:
                    members = np.flatnonzero(group == g)
                    if allowed is not None:
                        members = members[allowed[members]]
                if not len(members):
                    break  # no completion of this class is asked about
                f = info.firsts(ENDING_INDEX[shape.ending])[members]
                ok = members[succ[f]]
                if len(ok) and self._not_all_whole(info, ok, data, char_bytes, shape):
                    return True
        return False

    def _decide_whole(self, seq: tuple[int, ...], text: str) -> bool:
        """:meth:`decide` for data that ends on a character boundary: its last character
        plays ``c``; the pre-token holding it either ends there (``seq``'s tail is its
        encoding) or goes on into the probe (its head is canonical, then a valid pair)."""
        if not text:
            return not seq
        head = text[:-1]
        key = self._shape_key(head, text[-1])
        # a text asked about once (one check in a tree): one encode answers most questions,
        # cheaper than splitting it 26 times; a text asked about again (a tree inside a
        # character asks about every token that completes it) is split once and shared
        if key not in self._shapes and key not in self._encoded_once:
            if len(self._encoded_once) >= SHAPES_MEMO_SIZE:
                self._encoded_once.clear()
            self._encoded_once.add(key)
            if tuple(self.tok.encode(text)[: len(seq)]) == seq:
                return True
        offsets = self._seq_offsets(seq)
        data = text.encode("utf-8")
        char_bytes = char_byte_offsets(text)
        for shape in self.shapes(head, text[-1], key):
            i = self._open_start(seq, offsets, data, char_bytes, shape)
            if i is None:
                continue
            tail, word = seq[i:], data[char_bytes[shape.start] :]
            if not shape.ending:
                if self._encodes_word(tail, word):
                    return True
            elif self._canonical(tail) and not self._whole(word + shape.ending):
                after = self.tok._bpe_cached(shape.ending)[0]
                if self.engine.validity.pair_valid(tail[-1], after):
                    return True
        return False

    # ------------------------------------------------------------ pre-tokens
    def shapes(
        self, text: str, rep: str, key: tuple[object, object] | None = None
    ) -> tuple[Shape, ...]:
        """The distinct :class:`Shape` of ``text + rep + y`` over the probes (kept per
        text and class: every completion of a class splits alike)."""
        if key is None:  # (a caller that has it already passes `_shape_key(text, rep)`)
            key = self._shape_key(text, rep)
        hit = self._shapes.get(key)
        if hit is not None:
            self._shapes.move_to_end(key)
            return hit
        n = len(text)
        found: dict[Shape, None] = {}
        for y in PROBES:
            spans = self.tok.pretokenizer.spans(text + rep + y)
            k = next((i for i, (s, e) in enumerate(spans) if s <= n < e), None)
            if k is None:
                continue  # no pre-token holds c (a pattern that drops text): no tokens end in it
            start, end = spans[k]
            found[Shape(tuple(spans[:k]), start, y[: end - n - 1].encode("utf-8"))] = None
        got = self._shapes[key] = tuple(found)
        if len(self._shapes) > SHAPES_MEMO_SIZE:
            self._shapes.popitem(last=False)
        return got

    def _shape_key(self, text: str, rep: str) -> tuple[object, object]:
        """What :meth:`shapes` depends on. Where the engine's class machine models the
        pre-tokenizer, splits depend only on each character's class (shapes are in
        characters), so texts of one class sequence share them: the tokens that go on
        past a partial character (``b"\\x80 the"``, ``b"\\x80 and"``) ask about many such
        texts (the machine numbers each distinct signature of the patterns' character
        tests once, so its class ids never collide). Elsewhere: the text itself and
        ``rep``'s class."""
        machine = self.engine.machine
        if machine is None:
            return text, self._signature(rep)
        classes = self._classes.get(text)  # a tree asks about one text many times
        if classes is None:
            if len(self._classes) >= SHAPES_MEMO_SIZE:
                self._classes.clear()
            classes = self._classes[text] = tuple(machine.classes(text))
        return classes, machine.char_class(rep)

    def _signature(self, ch: str) -> tuple[bool, ...]:
        """``ch``'s answers to every character test of the pre-tokenizer's patterns: its
        class, kept as is (a hash of it, ``Engine.char_class``, could collide)."""
        sig = self._signatures.get(ch)
        if sig is None:
            if len(self._signatures) >= SHAPES_MEMO_SIZE:
                self._signatures.clear()
            sig = self._signatures[ch] = tuple(
                a.fullmatch(ch) is not None for a in self.engine.atoms
            )
        return sig

    def _seq_offsets(self, seq: tuple[int, ...]) -> dict[int, int]:
        """Byte offset where each token of ``seq`` starts -> its index (the end too)."""
        lengths = (len(self.tok.token_bytes[t] or b"") for t in seq)
        return {off: i for i, off in enumerate(itertools.accumulate(lengths, initial=0))}

    def _open_start(
        self,
        seq: tuple[int, ...],
        offsets: dict[int, int],
        data: bytes,
        char_bytes: list[int],
        shape: Shape,
    ) -> int | None:
        """Index of the token of ``seq`` that starts ``c``'s pre-token, if the pre-tokens
        before it encode to the tokens of ``seq`` before it (else None)."""
        for s, e in shape.before:
            i, j = offsets.get(char_bytes[s]), offsets.get(char_bytes[e])
            if i is None or j is None:
                return None  # a token of seq crosses a pre-token boundary
            if not self._encodes_word(seq[i:j], data[char_bytes[s] : char_bytes[e]]):
                return None
        return offsets.get(char_bytes[shape.start])

    def _encodes_word(self, toks: tuple[int, ...], word: bytes) -> bool:
        """``tok.encode_word(word) == toks`` for tokens that spell ``word``, without BPE."""
        if self._whole(word):
            return toks == (self.tok.bytes_to_id[word],)
        return self._canonical(toks)

    def _canonical(self, toks: tuple[int, ...]) -> bool:
        """Is ``toks`` the BPE of its bytes? By the pairwise theorem: iff its first token
        is reachable and every adjacent pair is valid (pair verdicts are remembered)."""
        if not toks or not self.tok.reachable[toks[0]]:
            return False
        valid = self.engine.validity.pair_valid
        return all(valid(a, b) for a, b in itertools.pairwise(toks))

    def _whole(self, word: bytes) -> bool:
        """Would ignore_merges encode the pre-token ``word`` as one token?"""
        return self.tok.ignore_merges and word in self.tok.bytes_to_id

    def _not_all_whole(
        self,
        info: Completions,
        ok: np.ndarray,
        data: bytes,
        char_bytes: list[int],
        shape: Shape,
    ) -> bool:
        """Is some completion in ``ok`` not turned into one whole token (ignore_merges
        encodes a pre-token that is itself a token as that token, never ending inside
        ``c``)?"""
        if not self.tok.ignore_merges:
            return True
        head = data[char_bytes[shape.start] :] + info.partial
        lo, hi = self.engine.token_range(head)
        if len(ok) > hi - lo:
            return True  # more completions than tokens that could be whole pre-tokens
        ids = self.tok.bytes_to_id
        return any(head + info.rests[i].tobytes() + shape.ending not in ids for i in ok.tolist())
