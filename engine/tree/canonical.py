"""Canonical checks by encoding: does some probed text that starts with given bytes
encode to tokens that start with a given sequence?

The covering tree asks this of the candidates its tables do not decide (tokens near
added text or under NFC, nodes inside a character). :class:`CanonicalChecks` answers
from pre-token shapes and pair validity where encoding is exactly "pre-tokens, then BPE
of each" (:class:`~midword.engine.tree.partial_leaves.PartialVerdicts`), and by encoding one
text per witness completion and probe elsewhere; answers are kept (LRU).
"""

from __future__ import annotations

import unicodedata
from collections import OrderedDict
from functools import cached_property
from typing import Protocol

import numpy as np

from ..errors import PrefixError
from .completions import Completions
from .partial_leaves import PartialVerdicts, VerdictSource
from .utf8 import NFC_TAIL_CHARS, PROBES, nfc_bytes, nfc_tail, split_utf8

CANONICAL_MEMO_SIZE = 1 << 16  # (sequence, data) verdicts kept per engine


class CanonicalSource(VerdictSource, Protocol):
    """What the canonical checks read of the per-tokenizer :class:`~midword.engine.tree.tables.Engine`."""

    is_added: np.ndarray
    partial_fast: bool  # False: always encode (the tests' reference for the shape verdicts)

    def witness_chars(
        self, before: bytes, partial: bytes, last: int | None = None
    ) -> list[str]: ...

    def safe_after(self, tail: str | None, info: Completions) -> np.ndarray: ...


class CanonicalChecks:
    """The canonical checks of one engine, with their kept answers.

    ``memo``: (seq, data) -> verdict, least recently used first, at most ``memo_size``.
    """

    def __init__(self, engine: CanonicalSource) -> None:
        self.engine = engine
        self.tok = engine.tok
        self.memo: OrderedDict[tuple[tuple[int, ...], bytes], bool] = OrderedDict()
        self.memo_size = CANONICAL_MEMO_SIZE
        self._partial: PartialVerdicts | None = None

    def clear(self) -> None:
        """Forget every kept answer and the shape verdicts' memos."""
        self.memo.clear()
        self._partial = None

    def extends(self, seq: tuple[int, ...], data: bytes) -> bool:
        """Does some probed text that starts with ``data`` encode to tokens starting with
        ``seq``? A pure function of its arguments, so answers are kept (LRU): a node's
        ``data`` is the region up to it plus the candidate, the same from byte to byte
        until the settled point moves, and each answer costs up to a few dozen encodes."""
        key = (seq, data)
        hit = self.memo.get(key)
        if hit is not None:
            self.memo.move_to_end(key)
            return hit
        got = self.memo[key] = self.encodes_with(seq, data)
        if len(self.memo) > self.memo_size:
            self.memo.popitem(last=False)
        return got

    def encodes_with(self, seq: tuple[int, ...], data: bytes) -> bool:
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
            heads = [text + c for c in self.engine.witness_chars(before, partial, seq[-1])]
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
        """The encoding-free verdicts of :meth:`encodes_with` (built on first use).

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
            self._partial = PartialVerdicts(self.engine)
        return self._partial

    def _verdicts_for(self, seq: tuple[int, ...], text: str) -> PartialVerdicts | None:
        """`partial_verdicts` where they may apply to this question: the probed texts
        ``text + c + y`` hold no added text, and NFC leaves ``text`` as it is (what NFC
        does to each completion ``c``: `_nfc_kept`)."""
        fast = self.partial_verdicts() if self.engine.partial_fast else None
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
        if any(self.engine.is_added[t] for t in seq):
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
        info = self.engine.completions(partial)
        tail = nfc_tail(text[-NFC_TAIL_CHARS:])
        safe = self.engine.safe_after(tail, info)
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
                others = [c for c in others if nfc_bytes(tail + c).startswith(start)]
            if len(info.derived) < 256:
                info.derived[key] = others
        return safe, others  # type: ignore[return-value]
