"""Snippets of the user's other files in the prompt, before the buffer's own window.

A name defined in another open file is one a small model cannot guess; seen in
the prompt, it can copy it. Snippets come from the other open documents of the
same language, the most recently edited or opened first (up to `MAX_FILES`),
each the lines around its latest edit (its top when never edited), within a byte
budget. They are written as line comments in the language's own syntax, each
file under a ``Path:`` line, so the prompt stays valid code in that language. That
form was kept by measurement (issue 38; ``midword bench prompt``, docs/benchmarks.md):
the block lowers the bits per character of what follows, and neither the other
`STYLES` (the lines uncommented, another header) did measurably better.

The block sits at the very start of the prompt, and it is kept while the user
types in one place: it is chosen again only when the buffer's window is rebuilt
(its start line moved) or when another file was opened, edited or closed since
it was chosen. Typing in the buffer then only extends the prompt's end, and the
live covering tree and KV cache keep their work.

A file that matches ``excludeFiles`` (server/where.py: ``.env``, keys, credentials)
is never quoted, whatever its language: its text must not reach the prompt, which a
team server (``engine: vllm``) receives over the network. A change of the patterns
chooses every block again.

>>> comment_prefix("python"), comment_prefix("typescript"), comment_prefix("plaintext")
('#', '//', None)
>>> print(format_snippet("utils.py", ["def parse_args(argv):", "", "    return argv"], "#"))
# Path: utils.py
# def parse_args(argv):
#
#     return argv
<BLANKLINE>
>>> print(format_snippet("utils.py", ["def parse_args(argv):"], "#", "code"))
# Path: utils.py
def parse_args(argv):
<BLANKLINE>
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

from .document import Document
from .positions import utf8_len
from .where import excluded_by

__all__ = ["STYLES", "ContextFiles", "comment_prefix", "format_snippet"]

MAX_FILES = 4  # other files quoted at most
# How a snippet is written, under a header line: "comment", each line commented, under
# "Path: <path>" (the server's); "compare", the same under "Compare this snippet from
# <path>:"; "code", the lines as they are, under the "Path:" header.
STYLES = ("comment", "compare", "code")
MIN_SNIPPET_BYTES = 128  # a file whose share of the budget is smaller is left out

_LINE_COMMENTS: dict[str, tuple[str, ...]] = {
    "#": (
        "python", "shellscript", "ruby", "perl", "r", "yaml", "toml", "makefile",
        "dockerfile", "powershell", "elixir", "julia", "nim", "coffeescript",
    ),
    "//": (
        "c", "cpp", "csharp", "java", "javascript", "javascriptreact", "typescript",
        "typescriptreact", "go", "rust", "swift", "kotlin", "scala", "dart", "php",
        "objective-c", "objective-cpp", "groovy", "zig", "jsonc",
    ),
    "--": ("lua", "sql", "haskell", "elm"),
    ";": ("clojure", "lisp", "scheme"),
    "%": ("latex", "erlang", "matlab"),
}  # fmt: skip
_COMMENT_OF = {lang: mark for mark, langs in _LINE_COMMENTS.items() for lang in langs}


def comment_prefix(language_id: str) -> str | None:
    """The line-comment mark of an LSP language id; None where there is none known."""
    return _COMMENT_OF.get(language_id.lower())


def format_snippet(path: str, lines: Sequence[str], mark: str, style: str = "comment") -> str:
    """``lines`` (without endings) under a header line naming ``path``, as line comments
    (``style`` "comment" or "compare") or as they are ("code"); see `STYLES`."""
    if style == "code":
        body = list(lines)
    else:
        body = [f"{mark} {line}" if line.strip() else mark for line in lines]
    head = f"Compare this snippet from {path}:" if style == "compare" else f"Path: {path}"
    return "\n".join([f"{mark} {head}", *body]) + "\n"


@dataclass(frozen=True)
class _Frozen:
    window_line: int | None  # the buffer's window start when the block was chosen
    clock: int  # the latest event in another file then
    budget: int
    exclude: tuple[str, ...]  # the excludeFiles patterns it was chosen under
    block: bytes


class ContextFiles:
    """Chooses each buffer's block of other files' snippets, and keeps it while it may;
    ``style`` is how each is written (one of `STYLES`)."""

    def __init__(self, style: str = "comment") -> None:
        if style not in STYLES:
            raise ValueError(f"unknown snippet style {style!r} (one of {', '.join(STYLES)})")
        self.style = style
        self._clock = 0
        self._touched: dict[str, int] = {}  # uri -> clock of its latest open or edit
        self._last_close = 0  # clock of the latest close
        self._frozen: dict[str, _Frozen] = {}

    def touched(self, uri: str) -> None:
        """A document was opened or edited."""
        self._clock += 1
        self._touched.pop(uri, None)
        self._touched[uri] = self._clock  # insertion order: least recent first

    def closed(self, uri: str) -> None:
        """A document was closed: the other buffers' blocks may quote it."""
        self._clock += 1
        self._touched.pop(uri, None)
        self._frozen.pop(uri, None)
        self._last_close = self._clock

    def block(
        self,
        doc: Document,
        documents: Mapping[str, Document],
        budget: int,
        exclude: tuple[str, ...] = (),
    ) -> bytes:
        """UTF-8 of the block for ``doc`` (b"" when there is nothing to quote), never
        quoting a file that matches a pattern of ``exclude``. Call after
        ``doc.prefix_window`` so that its window start is the current one."""
        if budget <= 0 or comment_prefix(doc.language_id) is None:
            return b""
        elsewhere = self._latest_elsewhere(doc.uri)
        kept = self._frozen.get(doc.uri)
        if (
            kept is not None
            and kept.window_line == doc.window_line
            and kept.clock >= elsewhere
            and kept.budget == budget
            and kept.exclude == exclude
        ):
            return kept.block
        block = self._choose(doc, documents, budget, exclude).encode("utf-8")
        self._frozen[doc.uri] = _Frozen(doc.window_line, self._clock, budget, exclude, block)
        return block

    def _latest_elsewhere(self, uri: str) -> int:
        """The clock of the latest open, edit or close of any document but ``uri``."""
        others = (clock for other, clock in self._touched.items() if other != uri)
        return max(max(others, default=0), self._last_close)

    def _choose(
        self,
        doc: Document,
        documents: Mapping[str, Document],
        budget: int,
        exclude: tuple[str, ...],
    ) -> str:
        mark = comment_prefix(doc.language_id)
        assert mark is not None
        recent = [
            u
            for u in reversed(self._touched)
            if u != doc.uri and u in documents and excluded_by(u, exclude) is None
        ]
        same = [documents[u] for u in recent if documents[u].language_id == doc.language_id]
        same = same[: min(MAX_FILES, budget // MIN_SNIPPET_BYTES)]  # the most recent first
        parts: list[str] = []
        left = budget
        for number, other in enumerate(same):
            share = left // (len(same) - number)  # what is left, split over the files left
            if share < MIN_SNIPPET_BYTES:
                continue
            path = _relative_path(other.uri, doc.uri)
            header = utf8_len(format_snippet(path, [], mark, self.style))
            per_line = 0 if self.style == "code" else len(mark) + 1
            lines = _lines_around(other, share - header, per_line)
            if lines:
                part = format_snippet(path, lines, mark, self.style)
                parts.append(part)
                left -= utf8_len(part)
        return "".join(parts)


def _lines_around(doc: Document, budget: int, per_line: int) -> list[str]:
    """The lines around ``doc``'s latest edit (its top when never edited) whose comment
    form fits ``budget`` bytes (each line costs ``per_line`` bytes more, and its ending)."""
    count = len(doc.lines)
    center = doc.last_edit.line if doc.last_edit is not None else 0
    center = min(max(center, 0), count - 1)
    first, last = center, center - 1  # the range taken: [first, last]
    used = 0
    below_first = doc.last_edit is None  # a file never edited is quoted from its top
    while True:
        candidates = [last + 1] if below_first else [first - 1, last + 1]
        grew = False
        for line in candidates:
            if not 0 <= line < count or (first <= line <= last):
                continue
            cost = utf8_len(doc.body(line)) + per_line + 1
            if used + cost > budget:
                continue
            used += cost
            first, last = min(first, line), max(last, line)
            grew = True
        if not grew:
            break
    lines = [doc.body(i) for i in range(first, last + 1)]
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def _relative_path(uri: str, relative_to: str) -> str:
    """The file path of ``uri``, relative to ``relative_to``'s folder when both are files."""
    target, base = urlparse(uri), urlparse(relative_to)
    if target.scheme != "file":
        return uri
    path = unquote(target.path)
    if base.scheme == "file":
        try:
            return os.path.relpath(path, os.path.dirname(unquote(base.path)))
        except ValueError:  # another drive on Windows
            return path
    return os.path.basename(path)
