"""Accepted-and-retained characters: how much of an accepted inline item is still there.

An acceptance rate alone favours short suggestions, and an accepted suggestion may be
deleted a second later. So once an item is accepted, wholly or in part (the events of
server/acceptance.py), the server follows the text it inserted through the document's
later edits (`Document.observers`), and at checkpoints after the acceptance (30 s, 2 min
and 10 min; ``$MIDWORD_RETENTION_CHECKPOINTS`` names others, in seconds separated by
commas) it logs how much of that text is still in place, as a ``retained`` event:

* ``inserted``: characters inserted (code points, line breaks read as ``\\n``);
* ``retained``: characters of the inserted text still in the followed range, in order
  (the matching blocks of difflib's `SequenceMatcher` between the inserted text and the
  range's text now);
* ``similarity``: difflib's ratio of the two, ``2 * retained / (inserted + now)``: 1.0
  for an untouched range, lower when text was deleted from it or written into it.

An item whose document was closed before a checkpoint (or reopened: it may hold other
text) is logged with ``unknown: "closed"`` instead, and its checkpoints still due when
the server stops with ``unknown: "shutdown"``: nothing says what became of the text.
Like the rest of the log, these events hold numbers, never code.

How the range follows an edit that replaces ``[a, b)`` with new text:

* an edit before it shifts it; an edit after it, or text typed right at its start or
  its end, leaves it as it is (that text is the user's, not the suggestion's);
* an edit inside it grows or shrinks it;
* an edit that overlaps it takes its replacement into it (what the user wrote over the
  suggestion is compared with the suggestion);
* text inserted into an empty range fills it: the item deleted, then brought back by
  undo or retyped, counts again;
* text deleted from inside the range and written back at the same place by the next
  edit (an undo) rejoins it, even at its start or its end.

Edits are first narrowed to what they change (the common start and end of the old and
new text left out), so a client that sends whole lines or whole documents is followed as
closely as one that sends keystrokes.

>>> doc = Document("untitled:1", "x = max(a, b)\\n", 1)   # the item accepted at (0, 4)
>>> span = locate(doc, Cursor(0, 4), "max(a, b)")
>>> span = span.follow(Cursor(0, 11), Cursor(0, 12), "bb")          # b -> bb, inside
>>> span.follow(Cursor(0, 0), Cursor(0, 0), "y, ")                   # before: shifted
Span(start=Cursor(line=0, index=7), end=Cursor(line=0, index=17))
>>> measure("max(a, b)", "max(a, bb)")
(9, 0.9474)
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from typing import Any

from .document import Cursor, Document, split_lines

__all__ = [
    "CHECKPOINTS_ENV",
    "DEFAULT_CHECKPOINTS",
    "Followed",
    "Retention",
    "Span",
    "Where",
    "checkpoints_from_env",
    "end_of",
    "locate",
    "match_end",
    "measure",
    "narrowed",
    "text_between",
    "text_of",
]

log = logging.getLogger("midword.server")

CHECKPOINTS_ENV = "MIDWORD_RETENTION_CHECKPOINTS"
DEFAULT_CHECKPOINTS = (30.0, 120.0, 600.0)
# difflib's cost grows with len(inserted) * len(now); above this the comparison runs on
# a thread, so a range grown huge (a paste into it) never stalls the event loop
INLINE_MEASURE = 200_000
_LINE_ENDS = re.compile(r"\r\n?")
Emit = Callable[[dict[str, Any]], None]


def _key(cursor: Cursor) -> tuple[int, int]:
    return cursor.line, cursor.index


def end_of(start: Cursor, text: str) -> Cursor:
    """Where ``text`` ends when it is written at ``start``.

    >>> end_of(Cursor(3, 4), "ab\\ncd")
    Cursor(line=4, index=2)
    """
    pieces = split_lines(text)
    if len(pieces) == 1:
        return Cursor(start.line, start.index + len(text))
    return Cursor(start.line + len(pieces) - 1, len(pieces[-1]))


def _shifted(point: Cursor, old_end: Cursor, new_end: Cursor) -> Cursor:
    """A point at or after an edit's old end, moved with the text after the edit."""
    if point.line == old_end.line:
        return Cursor(new_end.line, new_end.index + point.index - old_end.index)
    return Cursor(point.line + new_end.line - old_end.line, point.index)


@dataclass(frozen=True)
class Span:
    """A followed range of a document: [start, end)."""

    start: Cursor
    end: Cursor

    def follow(self, a: Cursor, b: Cursor, text: str) -> Span:
        """The range once ``[a, b)`` is replaced by ``text`` (positions before the edit).

        >>> s = Span(Cursor(0, 4), Cursor(0, 8))
        >>> s.follow(Cursor(0, 4), Cursor(0, 4), "x")      # typed at its start: outside
        Span(start=Cursor(line=0, index=5), end=Cursor(line=0, index=9))
        >>> s.follow(Cursor(0, 8), Cursor(0, 8), "x")      # typed at its end: outside
        Span(start=Cursor(line=0, index=4), end=Cursor(line=0, index=8))
        >>> s.follow(Cursor(0, 2), Cursor(0, 6), "")       # deleted across its start
        Span(start=Cursor(line=0, index=2), end=Cursor(line=0, index=4))
        """
        new_end = end_of(a, text)
        if a == b and self.start == self.end == a:  # an empty range: what comes there fills it
            return Span(self.start, new_end)
        start, end = self._moved_start(a, b, new_end), self._moved_end(a, b, new_end)
        return Span(start, end if _key(end) >= _key(start) else start)

    def _moved_start(self, a: Cursor, b: Cursor, new_end: Cursor) -> Cursor:
        s = _key(self.start)
        if s < _key(a) or (s == _key(a) and a != b):
            return self.start
        if s < _key(b):  # inside the replaced text: the replacement joins the range
            return a
        return _shifted(self.start, b, new_end)

    def _moved_end(self, a: Cursor, b: Cursor, new_end: Cursor) -> Cursor:
        e = _key(self.end)
        if e <= _key(a):
            return self.end
        if e < _key(b):  # inside the replaced text: the replacement joins the range
            return new_end
        return _shifted(self.end, b, new_end)

    def restored(self, at: Cursor, text: str) -> Span:
        """The range once ``text``, deleted from it at ``at``, is written back (an undo):
        it rejoins the range, also at its start or its end.

        >>> Span(Cursor(0, 4), Cursor(0, 6)).restored(Cursor(0, 6), "ab")
        Span(start=Cursor(line=0, index=4), end=Cursor(line=0, index=8))
        """
        return Span(self.start, _shifted(self.end, at, end_of(at, text)))


# ---------------------------------------------------------------------- text helpers
def normalized(text: str) -> str:
    """Line breaks as ``\\n`` (the editor may have written the item with ``\\r\\n``)."""
    return _LINE_ENDS.sub("\n", text) if "\r" in text else text


def text_between(lines: list[str], start: Cursor, end: Cursor) -> str:
    """The text of ``lines`` (each with its ending) from ``start`` to ``end``."""
    if start.line == end.line:
        return lines[start.line][start.index : end.index]
    middle = "".join(lines[start.line + 1 : end.line])
    return lines[start.line][start.index :] + middle + lines[end.line][: end.index]


def _clamped(doc: Document, cursor: Cursor) -> Cursor:
    """A cursor within the text (line breaks the arithmetic did not foresee, such as a
    ``\\r`` typed before a ``\\n``, may leave one past a line's end)."""
    last = len(doc.lines) - 1
    if cursor.line > last:
        return Cursor(last, len(doc.body(last)))
    return Cursor(cursor.line, min(cursor.index, len(doc.body(cursor.line))))


def text_of(doc: Document, span: Span) -> str:
    """The range's text now, line breaks as ``\\n``."""
    start, end = _clamped(doc, span.start), _clamped(doc, span.end)
    if _key(end) <= _key(start):
        return ""
    return normalized(text_between(doc.lines, start, end))


def match_end(doc: Document, start: Cursor, text: str) -> Cursor | None:
    """Where ``text`` (line breaks as ``\\n``) ends if the document holds it at ``start``
    (with any line endings), else None.

    >>> doc = Document("untitled:1", "a = f(1,\\r\\n  2)\\r\\n", 1)
    >>> match_end(doc, Cursor(0, 4), "f(1,\\n  2)"), match_end(doc, Cursor(0, 4), "g")
    (Cursor(line=1, index=4), None)
    """
    line, index = start.line, start.index
    pieces = text.split("\n")
    for n, piece in enumerate(pieces):
        if line >= len(doc.lines):
            return None
        body = doc.body(line)
        if n == len(pieces) - 1:
            return Cursor(line, index + len(piece)) if body.startswith(piece, index) else None
        if body[index:] != piece or len(doc.lines[line]) == len(body):  # no line break here
            return None
        line, index = line + 1, 0
    return None  # not reached: split gives at least one piece


def locate(doc: Document, start: Cursor, text: str) -> Span:
    """The range the accepted ``text`` occupies from ``start``. Empty when it is not there
    (yet: a client may report the acceptance before the edit): the insertion that comes
    there fills it."""
    end = match_end(doc, start, text)
    if end is None:
        log.debug("accepted text not at its position: followed from an empty range")
        return Span(start, start)
    return Span(start, end)


def _common_prefix(a: str, b: str) -> int:
    """Length of the common start of two strings (bisection over slices: C speed, so a
    client that sends whole documents costs milliseconds, not a loop per character)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _common_suffix(a: str, b: str, limit: int) -> int:
    lo, hi = 0, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[len(a) - mid :] == b[len(b) - mid :]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def narrowed(old: str, start: Cursor, new: str) -> tuple[Cursor, Cursor, str]:
    """The change of ``old`` (the text from ``start``) into ``new`` without the start and
    end they share: (a, b, text), ``[a, b)`` replaced by ``text``.

    >>> narrowed("    return x\\n", Cursor(5, 0), "    return xy\\n")
    (Cursor(line=5, index=12), Cursor(line=5, index=12), 'y')
    """
    head = _common_prefix(old, new)
    if head and old[head - 1] == "\r" and "\n" in (old[head : head + 1], new[head : head + 1]):
        head -= 1  # never between the two characters of a \r\n
    tail = _common_suffix(old, new, min(len(old), len(new)) - head)
    old_cut, new_cut = len(old) - tail, len(new) - tail
    if (
        tail
        and old[old_cut] == "\n"
        and "\r" in (old[old_cut - 1 : old_cut], new[new_cut - 1 : new_cut])
    ):
        tail -= 1
        old_cut, new_cut = old_cut + 1, new_cut + 1
    return end_of(start, old[:head]), end_of(start, old[:old_cut]), new[head:new_cut]


def measure(inserted: str, now: str) -> tuple[int, float]:
    """(retained characters, similarity) of the range's text now against the inserted
    text: characters of ``inserted`` still there in order, and difflib's ratio.

    >>> measure("foo(bar)", "foo(bar)"), measure("foo(bar)", "")
    ((8, 1.0), (0, 0.0))
    """
    if inserted == now:
        return len(inserted), 1.0
    matcher = SequenceMatcher(None, inserted, now, autojunk=False)
    kept = sum(block.size for block in matcher.get_matching_blocks())
    total = len(inserted) + len(now)
    return kept, round(2 * kept / total, 4) if total else 1.0


# ---------------------------------------------------------------------- checkpoints
def checkpoints_from_env(environ: Mapping[str, str] | None = None) -> tuple[float, ...]:
    """The checkpoints (seconds after an acceptance): ``$MIDWORD_RETENTION_CHECKPOINTS``
    (e.g. ``0.2,0.5`` in tests), else 30 s, 2 min and 10 min.

    >>> checkpoints_from_env({CHECKPOINTS_ENV: "0.5, 0.2"}), checkpoints_from_env({})
    ((0.2, 0.5), (30.0, 120.0, 600.0))
    """
    raw = (os.environ if environ is None else environ).get(CHECKPOINTS_ENV, "").strip()
    if not raw:
        return DEFAULT_CHECKPOINTS
    try:
        values = tuple(sorted({float(part) for part in raw.split(",") if part.strip()}))
    except ValueError:
        values = ()
    if not values or not all(math.isfinite(v) and v >= 0 for v in values):
        log.warning(
            "%s=%r is not seconds separated by commas: using 30,120,600", CHECKPOINTS_ENV, raw
        )
        return DEFAULT_CHECKPOINTS
    return values


def _seconds(value: float) -> float | int:
    """A checkpoint as the log writes it: 30, not 30.0."""
    return int(value) if value == int(value) else value


# ---------------------------------------------------------------------- followed items
@dataclass
class Followed:
    """One accepted item: its tags, the text it inserted, and where that text is now."""

    item_id: str
    tags: dict[str, str]  # method, context, language
    inserted: str  # line breaks as \n
    doc: Document | None  # None when the document was not open at the acceptance
    documents: Mapping[str, Document]  # the open documents (to tell a closed one)
    span: Span
    due: list[float]  # checkpoints not logged yet
    timers: list[asyncio.TimerHandle] = field(default_factory=list)
    # text the latest edits deleted from inside the range, and where: written back there
    # by the next edit (an undo), it rejoins the range even at the range's start or end
    undo: tuple[Cursor, str] | None = None

    def follow(self, a: Cursor, b: Cursor, old: str, new: str) -> None:
        """Move the range with the edit that replaces ``old``, at ``[a, b)``, by ``new``."""
        if a == b and self.undo == (a, new):
            self.span, self.undo = self.span.restored(a, new), None
            return
        inside = _key(self.span.start) <= _key(a) and _key(b) <= _key(self.span.end)
        self.span = self.span.follow(a, b, new)
        self.undo = _deleted(self.undo, a, b, old) if inside and a != b and not new else None

    def is_open(self) -> bool:
        """The document is still open (not closed, nor closed and opened again)."""
        return self.doc is not None and self.documents.get(self.doc.uri) is self.doc

    def entry(self, checkpoint: float) -> dict[str, Any]:
        return {
            "time": round(time.time(), 3),
            "event": "retained",
            "id": self.item_id,
            **self.tags,
            "checkpoint": _seconds(checkpoint),
            "inserted": len(self.inserted),
        }


def _deleted(undo: tuple[Cursor, str] | None, a: Cursor, b: Cursor, old: str) -> tuple[Cursor, str]:
    """What an undo would write back after ``[a, b)`` (``old``) is deleted: the deletion
    before it too when the two are one run (backspaces, or the delete key, held down)."""
    if undo is not None:
        at, text = undo
        if b == at:  # a backspace before the earlier deletion
            return a, old + text
        if a == at:  # a delete after it
            return at, text + old
    return a, old


@dataclass(frozen=True)
class Where:
    """Where an item was offered: the document and the LSP position of its start."""

    uri: str
    line: int
    character: int


class Retention:
    """The accepted items being followed, their edits and their checkpoint timers."""

    def __init__(self, emit: Emit, checkpoints: Sequence[float] | None = None) -> None:
        self.emit = emit  # takes each retained event (AcceptanceLog queues it for the file)
        self.checkpoints = tuple(checkpoints) if checkpoints is not None else checkpoints_from_env()
        self.followed: dict[str, Followed] = {}
        self._by_doc: dict[Document, list[Followed]] = {}

    def accepted(
        self,
        item_id: str,
        tags: dict[str, str],
        where: Where,
        text: str,
        documents: Mapping[str, Document],
        encoding: str,
    ) -> Followed | None:
        """Follow the ``text`` an item inserted at ``where`` (or, for an item followed
        already, e.g. after a partial acceptance, the longer text accepted now). Timers
        start when a running event loop is there to run them; else call `check`."""
        text = normalized(text)
        if not text:
            return None
        if (followed := self.followed.get(item_id)) is not None:
            self._extend(followed, text)
            return followed
        doc = documents.get(where.uri)
        span = Span(Cursor(0, 0), Cursor(0, 0))
        if doc is not None:
            span = locate(doc, doc.cursor(where.line, where.character, encoding), text)
        followed = Followed(item_id, tags, text, doc, documents, span, list(self.checkpoints))
        self.followed[item_id] = followed
        if doc is not None:
            self._watch(doc, followed)
        self._schedule(followed)
        return followed

    def check(self, item_id: str, checkpoint: float) -> None:
        """Log one checkpoint of an item now (its timer calls this)."""
        followed = self.followed.get(item_id)
        if followed is None or checkpoint not in followed.due:
            return
        followed.due.remove(checkpoint)
        entry = followed.entry(checkpoint)
        if not followed.is_open():
            self.emit({**entry, "unknown": "closed"})
        else:
            assert followed.doc is not None  # is_open says so
            self._measure(entry, followed.inserted, text_of(followed.doc, followed.span))
        if not followed.due:
            self._forget(followed)

    def stop(self) -> None:
        """The server stops: every checkpoint still due is logged unknown."""
        for followed in list(self.followed.values()):
            for timer in followed.timers:
                timer.cancel()
            for checkpoint in followed.due:
                self.emit({**followed.entry(checkpoint), "unknown": "shutdown"})
            followed.due.clear()
            self._forget(followed)

    # ------------------------------------------------------------------ internals
    def _extend(self, followed: Followed, text: str) -> None:
        """A later acceptance of the same item took more of it (a partial acceptance,
        then the rest): the range and the text compared become the longer ones."""
        if len(text) <= len(followed.inserted) or not followed.is_open():
            return  # the same event again, or nothing left to look at
        assert followed.doc is not None
        end = match_end(followed.doc, followed.span.start, text)
        if end is None:
            log.debug(
                "%s: the longer accepted text is not in place: kept as it was", followed.item_id
            )
            return
        followed.span = Span(followed.span.start, end)
        followed.inserted = text

    def _schedule(self, followed: Followed) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no event loop (unit tests): checkpoints come through `check`
        for checkpoint in followed.due:
            followed.timers.append(
                loop.call_later(checkpoint, self.check, followed.item_id, checkpoint)
            )

    def _measure(self, entry: dict[str, Any], inserted: str, now: str) -> None:
        if len(inserted) * len(now) <= INLINE_MEASURE:
            self._emit_measured(entry, inserted, now)
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._emit_measured(entry, inserted, now)
            return
        loop.run_in_executor(None, self._emit_measured, entry, inserted, now)

    def _emit_measured(self, entry: dict[str, Any], inserted: str, now: str) -> None:
        retained, similarity = measure(inserted, now)
        self.emit({**entry, "retained": retained, "similarity": similarity})

    def _watch(self, doc: Document, followed: Followed) -> None:
        watched = self._by_doc.setdefault(doc, [])
        if not watched:
            doc.observers.append(self._on_edit)
        watched.append(followed)

    def _forget(self, followed: Followed) -> None:
        self.followed.pop(followed.item_id, None)
        doc = followed.doc
        watched = self._by_doc.get(doc) if doc is not None else None
        if doc is None or watched is None:
            return
        if followed in watched:
            watched.remove(followed)
        if not watched:
            del self._by_doc[doc]
            if self._on_edit in doc.observers:
                doc.observers.remove(self._on_edit)

    def _on_edit(self, doc: Document, start: Cursor, end: Cursor, text: str) -> None:
        """`Document.observers`: move every followed range of ``doc`` with one edit."""
        watched = self._by_doc.get(doc)
        if not watched:
            return
        a, b, new = narrowed(text_between(doc.lines, start, end), start, text)
        if a == b and not new:
            return  # the text did not change
        old = text_between(doc.lines, a, b)  # the document is not changed yet
        for followed in watched:
            followed.follow(a, b, old, new)
