"""Typing through a shown completion: the next request is answered from its rest.

When the user types the characters the shown completion starts with, the
completion is still the model's answer for the new cursor (the text before it
grew by exactly what the model predicted), so the next inline request gets its
rest with no model call, as Tabby does for up to `MAX_TYPED` characters. The
live covering tree and KV cache still follow the text: every edit posts the
usual background sync (server/worker.py), reused or not.

Only an exact match counts: each edit must insert, at the cursor the record
expects, text equal to the completion's next characters. Any other edit (a
deletion, a replacement, text elsewhere, an auto-closed bracket) forgets the
record, and the next request goes to the model.

>>> from midword.server.document import Cursor
>>> through = TypedThrough()
>>> through.shown("a.py", edits=3, cursor=Cursor(0, 4), text="ument(x)")
>>> through.edited("a.py", edits=4, at=Cursor(0, 4), text="u", after=Cursor(0, 5))
>>> through.rest("a.py", edits=4, cursor=Cursor(0, 5))
'ment(x)'
>>> through.edited("a.py", edits=5, at=Cursor(0, 5), text="x", after=Cursor(0, 6))
>>> through.rest("a.py", edits=5, cursor=Cursor(0, 6)) is None
True
"""

from __future__ import annotations

from dataclasses import dataclass

from .document import Cursor

__all__ = ["MAX_TYPED", "TypedThrough"]

MAX_TYPED = 50  # characters typed through one completion before the model is asked again


@dataclass
class _Shown:
    """A completion shown at ``cursor`` of the document after ``edits`` edits, and how
    much of it was typed since (the cursor and edit count move with the typing)."""

    text: str
    cursor: Cursor
    edits: int
    typed: int = 0

    @property
    def rest(self) -> str:
        return self.text[self.typed :]


class TypedThrough:
    """The last shown completion of each document, followed through exact typing."""

    def __init__(self) -> None:
        self._shown: dict[str, _Shown] = {}

    def shown(self, uri: str, edits: int, cursor: Cursor, text: str) -> None:
        """The completion ``text`` was answered at ``cursor`` (document after ``edits``)."""
        if text:
            self._shown[uri] = _Shown(text, cursor, edits)
        else:
            self._shown.pop(uri, None)

    def edited(self, uri: str, edits: int, at: Cursor | None, text: str, after: Cursor) -> None:
        """One edit was applied, the document's ``edits``-th: ``text`` inserted at ``at``
        (None: not a pure insertion), leaving the cursor at ``after``."""
        record = self._shown.get(uri)
        if record is None:
            return
        follows = (
            at is not None
            and record.edits == edits - 1
            and at == record.cursor
            and text != ""
            and record.typed + len(text) <= MAX_TYPED
            and record.rest.startswith(text)
            and len(text) < len(record.rest)  # typed to the end: nothing left to show
        )
        if not follows:
            del self._shown[uri]
            return
        record.typed += len(text)
        record.cursor, record.edits = after, edits

    def rest(self, uri: str, edits: int, cursor: Cursor) -> str | None:
        """The rest of the completion typed through, for a request at ``cursor`` of the
        document after ``edits`` edits; None when there is none to reuse."""
        record = self._shown.get(uri)
        if record is None or record.typed == 0:
            return None
        if record.edits != edits or record.cursor != cursor:
            return None
        return record.rest

    def forget(self, uri: str | None = None) -> None:
        """Forget one document's record (closed), or all of them (new options or model)."""
        if uri is None:
            self._shown.clear()
        else:
            self._shown.pop(uri, None)
