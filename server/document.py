"""The server's own copy of an open document: lines, incremental edits, the prompt window.

The text is a list of lines, each with its ``\\n`` except the last one (so a
text ending in a newline has an empty last line, as LSP counts them). An edit
re-splits only the lines it touches, so typing in a 10 MB buffer costs the
line, not the buffer.

The prompt window is the last ``window_bytes`` bytes before the cursor,
starting at a line boundary. Its start line is kept while typing (it moves
only when the window grows past 1.5x its size or an edit crosses it), so
consecutive prompts share their beginning and the live VCT and KV cache keep
their work.

>>> doc = Document("untitled:1", "def f():\\n    return 1\\n", 1)
>>> doc.apply_change(Range(1, 11, 1, 12), "42", "utf-16")
>>> doc.text()
'def f():\\n    return 42\\n'
>>> doc.prefix_window(Cursor(1, 13), window_bytes=4096)
b'def f():\\n    return 42'
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from .positions import clean_text, from_index, to_index, utf8_len

__all__ = ["Cursor", "Document", "EditObserver", "Range", "split_lines"]

GROW_LIMIT = 1.5  # the window start moves when the window exceeds this many times its size
_LONE_CR = re.compile(r"\r(?!\n)")
_LINE_BREAK = re.compile(r"(?<=\r\n)|(?<=\r)(?!\n)|(?<=\n)")


@dataclass(frozen=True)
class Range:
    """An LSP range: start line/character, end line/character (code units)."""

    start_line: int
    start_char: int
    end_line: int
    end_char: int


@dataclass(frozen=True)
class Cursor:
    """A position as (line, string index in that line's text)."""

    line: int
    index: int


# Told of every edit before it is applied: (document, start, end, inserted text), the
# positions in the text as it still is (server/retention.py follows accepted text with it).
EditObserver = Callable[["Document", Cursor, Cursor, str], None]


def split_lines(text: str) -> list[str]:
    """Lines with their endings (\\n, \\r\\n or a lone \\r); the last has none.

    >>> split_lines("a\\nb\\r\\n")
    ['a\\n', 'b\\r\\n', '']
    """
    if _LONE_CR.search(text) is None:  # the common case: split on \\n only (fast)
        parts = text.split("\n")
        return [p + "\n" for p in parts[:-1]] + [parts[-1]]
    return _LINE_BREAK.split(text)


def _body(line: str) -> str:
    """A line without its ending."""
    if line.endswith("\n"):
        line = line[:-1]
    return line[:-1] if line.endswith("\r") else line


class Document:
    """One open text document."""

    def __init__(self, uri: str, text: str, version: int, language_id: str = "") -> None:
        self.uri = uri
        self.version = version
        self.language_id = language_id
        self.lines = split_lines(clean_text(text))
        self._bytes = _total_bytes(self.lines)
        self.window_line: int | None = None  # start line of the prompt window
        self.last_edit: Cursor | None = None  # where the latest edit ended (the likely cursor)
        self.edits = 0  # changes applied so far
        # the last prompt window: didChange syncs to it, the request right after asks again
        self._window: tuple[int, Cursor, int, bytes] | None = None  # edits, cursor, size, bytes
        self.observers: list[EditObserver] = []  # empty but while accepted text is followed

    # ------------------------------------------------------------------ reading
    def text(self) -> str:
        return "".join(self.lines)

    def body(self, line: int) -> str:
        return _body(self.lines[line])

    def size_bytes(self) -> int:
        """UTF-8 bytes of the text (kept up to date by the edits, not summed on demand)."""
        return self._bytes

    def cursor(self, line: int, character: int, encoding: str) -> Cursor:
        """The cursor for an LSP position; lines past the end clamp to the end of the text."""
        if line < 0:
            return Cursor(0, 0)
        if line >= len(self.lines):
            last = len(self.lines) - 1
            return Cursor(last, len(self.body(last)))
        return Cursor(line, to_index(self.body(line), character, encoding))

    def position(self, cursor: Cursor, encoding: str) -> tuple[int, int]:
        """The LSP (line, character) of a cursor."""
        return cursor.line, from_index(self.body(cursor.line), cursor.index, encoding)

    def line_prefix(self, cursor: Cursor) -> str:
        return self.body(cursor.line)[: cursor.index]

    def line_suffix(self, cursor: Cursor) -> str:
        return self.body(cursor.line)[cursor.index :]

    # ------------------------------------------------------------------ editing
    def replace_all(self, text: str, version: int) -> None:
        self.edits += 1
        text = clean_text(text)
        if self.observers:  # seen as one change of the whole text
            last = len(self.lines) - 1
            self._notify(Cursor(0, 0), Cursor(last, len(self.body(last))), text)
        self.lines = split_lines(text)
        self._bytes = _total_bytes(self.lines)
        self.version = version
        self.window_line = None
        last = len(self.lines) - 1
        self.last_edit = Cursor(last, len(self.body(last)))

    def apply_change(self, change: Range, text: str, encoding: str) -> None:
        """Apply one incremental change (positions in ``encoding`` code units)."""
        self.edits += 1
        start = self.cursor(change.start_line, change.start_char, encoding)
        end = self.cursor(change.end_line, change.end_char, encoding)
        if (end.line, end.index) < (start.line, start.index):
            start, end = end, start
        text = clean_text(text)
        if self.observers:
            self._notify(start, end, text)
        head = self.lines[start.line][: start.index]
        tail = self.lines[end.line][end.index :]  # end.index never passes the line's body
        new = split_lines(head + text + tail)
        if end.line < len(self.lines) - 1:
            new.pop()  # the piece ends with the old line's ending: no empty line after it
        self._bytes += _total_bytes(new) - _total_bytes(self.lines[start.line : end.line + 1])
        self.lines[start.line : end.line + 1] = new
        self._shift_window(start.line, end.line, len(new))
        inserted = split_lines(text)
        last_line = start.line + len(inserted) - 1
        last_index = (start.index if len(inserted) == 1 else 0) + len(inserted[-1])
        self.last_edit = Cursor(last_line, last_index)

    def _notify(self, start: Cursor, end: Cursor, text: str) -> None:
        for observer in list(self.observers):  # an observer may remove itself
            observer(self, start, end, text)

    def _shift_window(self, first: int, last: int, new_count: int) -> None:
        if self.window_line is None:
            return
        if last < self.window_line:
            self.window_line += new_count - (last - first + 1)
        elif first < self.window_line:
            self.window_line = first  # the edit crossed the start: start at the edit

    # ------------------------------------------------------------------ prompt window
    def prefix_window(self, cursor: Cursor, window_bytes: int) -> bytes:
        """UTF-8 bytes from the window start to the cursor (the same call again, with no
        edit in between, gives the same bytes: they are kept)."""
        kept = self._window
        if kept is not None and kept[:3] == (self.edits, cursor, window_bytes):
            return kept[3]
        window = self._make_window(cursor, window_bytes)
        self._window = (self.edits, cursor, window_bytes, window)
        return window

    def _make_window(self, cursor: Cursor, window_bytes: int) -> bytes:
        head = self.line_prefix(cursor)
        start = self.window_line
        window = None
        if start is not None and start <= cursor.line:
            # the window from the kept start, measured by encoding it: C speed, and it is
            # the answer unless it grew past the limit
            window = self._encoded(start, cursor.line, head)
            if len(window) > GROW_LIMIT * window_bytes:
                window = None
        if window is None:
            start = self.window_line = self._fit_start(cursor, window_bytes)
        if start == cursor.line and utf8_len(head) > window_bytes:
            return _cut_long_line(head, window_bytes).encode("utf-8")
        return window if window is not None else self._encoded(start, cursor.line, head)

    def _encoded(self, start: int, line: int, head: str) -> bytes:
        """UTF-8 of lines ``start .. line - 1`` and then ``head``."""
        return ("".join(self.lines[start:line]) + head).encode("utf-8")

    def _fit_start(self, cursor: Cursor, window_bytes: int) -> int:
        """The earliest line start that keeps the window within ``window_bytes``."""
        size = utf8_len(self.line_prefix(cursor))
        start = cursor.line
        while start > 0:
            size += utf8_len(self.lines[start - 1])
            if size > window_bytes:
                break
            start -= 1
        return start


def _total_bytes(lines: list[str]) -> int:
    return sum(utf8_len(line) for line in lines)


def _cut_long_line(head: str, window_bytes: int) -> str:
    """The end of an overlong line, cut at a 256-character step so it stays stable."""
    keep = len(head)
    while keep > 0 and utf8_len(head[len(head) - keep :]) > window_bytes:
        keep = max(0, keep - max(1, keep // 8))
    drop = len(head) - keep
    drop += (-drop) % 256  # round the cut point up to a 256-character step
    return head[min(drop, len(head)) :]
