"""What a completion may span (its scope), from the cursor's line and the lines above.

The clean-up of the text before it reaches the editor is server/cleanup.py.

Rules (the complaints users have about completion tools, handled on purpose):

* mid-line (text before the cursor on its line, or text after it): one line;
* on an empty line, or at the end of a line that opens a block (``:``, ``{``,
  ``(``, ``[``, ``=>``): a multi-line block that stops at a dedent below the
  block, after more than one blank line in a row, or at ``max_lines``;
* never repeat what already follows the cursor on the line;
* lines after the first use the document's indentation (tabs or spaces);
* no special-token text (``<|endoftext|>`` and the like) ever appears.

>>> scope = scope_for("    x = foo(", ")", "auto")
>>> scope.multiline
False
>>> block = scope_for("def f(x):", "", "auto")
>>> text = "\\n    return x\\n\\ndef g():\\n"
>>> text[: block.cut(text)]
'\\n    return x'
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = [
    "IndentCounts",
    "Scope",
    "identifier_split",
    "indent_unit",
    "scope_for",
    "suffix_window",
]

OPENERS = (":", "{", "(", "[", "=>")
TAB_WIDTH = 4
BLOCK_LINES = 16  # the most lines a block completion spans (maxLines may lower it)
CLOSERS = ("}", ")", "]")
_IDENT_TAIL = re.compile(r"[\w$]*$")  # the partial identifier before the cursor
_IDENT_HEAD = re.compile(r"^[\w$]*")
_LEADING_WS = re.compile(r"^[ \t]*")


@dataclass(frozen=True)
class Scope:
    """How far a completion may go from one cursor."""

    multiline: bool
    min_indent: int = 0  # a later line indented less than this ends a block
    closer_indent: int = -1  # a closing bracket at this indent ends the block (included)
    suffix: str = ""  # the text after the cursor on its line
    max_lines: int = BLOCK_LINES
    max_blank: int = 1
    specials: tuple[str, ...] = field(default_factory=tuple)
    # the end of the line before the cursor: a marker half typed there is not completed
    typed_tail: str = ""

    def cut(self, text: str) -> int | None:
        """Where ``text`` (the completion so far) must end, or None to go on."""
        end = _special_cut(text, self.specials, self.typed_tail)
        if not self.multiline:
            newline = text.find("\n")
            found = [i for i in (end, newline if newline >= 0 else None) if i is not None]
            return min(found) if found else None
        block = self._block_cut(text if end is None else text[:end])
        return block if block is not None else end

    def _block_cut(self, text: str) -> int | None:
        lines = text.split("\n")
        offset = len(lines[0])  # index of the "\n" that ends line 0
        blank_run_start: int | None = None
        blanks = 0
        for number, line in enumerate(lines[1:], start=1):
            complete = number < len(lines) - 1
            if not line.strip():
                if complete:
                    blanks += 1
                    blank_run_start = offset if blanks == 1 else blank_run_start
                    if blanks > self.max_blank:
                        return blank_run_start
                offset += 1 + len(line)
                continue
            indent = _width(line)
            if not line.strip(" \t") and not complete:
                break  # the indentation of this line is not known yet
            if (
                self.closer_indent >= 0
                and indent == self.closer_indent
                and (line.lstrip().startswith(CLOSERS))
            ):
                return offset + 1 + len(line) if complete else None
            if indent < self.min_indent:
                return blank_run_start if blanks else offset
            if number >= self.max_lines:
                return offset
            blanks, blank_run_start = 0, None
            offset += 1 + len(line)
        return None


def scope_for(
    line_prefix: str,
    line_suffix: str,
    policy: str,
    specials: Sequence[str] = (),
    max_lines: int = 0,
) -> Scope:
    """The scope at a cursor; ``policy`` is "auto", "always" or "never"; ``max_lines``
    (the ``maxLines`` option, 0: no limit) caps the lines a completion spans: it holds at
    most ``max_lines - 1`` line breaks, so 1 is single-line mode.

    >>> scope_for("", "", "always", max_lines=2).cut("a\\nb\\nc")
    3
    >>> scope_for("def f(x):", "", "auto", max_lines=1).multiline
    False
    """
    specials = tuple(s for s in specials if s)
    longest = max((len(s) for s in specials), default=1)
    tail = line_prefix[-(longest - 1) :] if longest > 1 else ""
    indent = _width(line_prefix)
    stripped = line_prefix.strip()
    opens = stripped.endswith(OPENERS)
    blank_after = not line_suffix.strip()
    multiline = (
        blank_after
        and max_lines != 1
        and (policy == "always" or (policy == "auto" and (not stripped or opens)))
    )
    if not multiline:
        return Scope(False, suffix=line_suffix, specials=specials, typed_tail=tail)
    lines = min(max_lines, BLOCK_LINES) if max_lines else BLOCK_LINES
    if opens:
        return Scope(
            True, indent + 1, indent, line_suffix, lines, specials=specials, typed_tail=tail
        )
    return Scope(True, indent, -1, line_suffix, lines, specials=specials, typed_tail=tail)


def _width(line: str) -> int:
    """Columns of a line's leading whitespace (a tab counts as 4)."""
    return len(_LEADING_WS.match(line).group().expandtabs(TAB_WIDTH))


def _special_cut(text: str, specials: Sequence[str], typed_tail: str = "") -> int | None:
    """Where the first special-token text would appear in ``typed_tail + text``, as an
    index of ``text`` (0 when a marker begun before the cursor would be finished).

    >>> _special_cut("|> y", ["<|eot|>"], "# <|eot")
    0
    >>> _special_cut("x = 1<|eot|>", ["<|eot|>"], "# <|")
    5
    """
    joined = typed_tail + text
    # an occurrence that ends inside the typed tail was typed whole: not the completion's
    starts = (joined.find(s, max(0, len(typed_tail) - len(s) + 1)) for s in specials)
    found = [i for i in starts if i >= 0]
    return max(0, min(found) - len(typed_tail)) if found else None


def indent_unit(lines: Sequence[str]) -> str:
    """The document's indentation unit: a tab, or the usual step between space indents.

    >>> indent_unit(["def f():", "\\tpass"])
    '\\t'
    >>> indent_unit(["if x:", "  y", "  if z:", "    w"])
    '  '
    """
    counts = IndentCounts()
    for line in lines:
        counts.add(line)
    return counts.unit()


@dataclass
class IndentCounts:
    """`indent_unit`'s tallies over lines so far: ``add`` takes the next line, ``unit``
    decides. The server keeps the tallies of the lines above the cursor between
    keystrokes and adds the cursor's line to a copy."""

    tabs: int = 0
    spaces: int = 0
    previous: int = 0  # width of the last non-blank line's indentation
    steps: dict[int, int] = field(default_factory=dict)  # indent increase -> times seen

    def add(self, line: str) -> None:
        if not line.strip():
            return
        lead = _LEADING_WS.match(line).group()
        if lead.startswith("\t"):
            self.tabs += 1
        elif lead:
            self.spaces += 1
        width = len(lead.expandtabs(4))
        if width > self.previous:
            self.steps[width - self.previous] = self.steps.get(width - self.previous, 0) + 1
        self.previous = width

    def copy(self) -> IndentCounts:
        return IndentCounts(self.tabs, self.spaces, self.previous, dict(self.steps))

    def unit(self) -> str:
        if self.tabs > self.spaces:
            return "\t"
        if not self.steps:
            return "    "
        return " " * max(self.steps, key=lambda step: (self.steps[step], -step))


def identifier_split(line_prefix: str, completion: str) -> tuple[str, str]:
    """(partial identifier before the cursor, its continuation at the start of the completion).

    >>> identifier_split("    self.assertEq", "ual(x, 1)")
    ('assertEq', 'ual')
    """
    partial = _IDENT_TAIL.search(line_prefix).group()
    continuation = _IDENT_HEAD.match(completion).group()
    return partial, continuation


def suffix_window(lines: Sequence[str], line: int, index: int, limit: int) -> bytes:
    """The text after the cursor that a fill-in-the-middle prompt holds: the rest of the
    cursor's line (``lines`` keep their endings; ``index`` is the cursor's in its line),
    then the whole lines after it while the UTF-8 size stays within ``limit``. It ends on a
    line boundary, and typing before the cursor leaves it as it is.

    >>> suffix_window(["x = f(\\n", "a)\\n", "print(x)\\n", ""], 0, 6, 12)
    b'\\na)\\n'
    >>> suffix_window(["abcdef"], 0, 1, 3)
    b'bcd'
    """
    rest = lines[line][index:].encode("utf-8")
    if len(rest) >= limit:  # one long line: cut it (at a character)
        return rest[:limit].decode("utf-8", "ignore").encode("utf-8")
    parts, size = [rest], len(rest)
    for number in range(line + 1, len(lines)):
        data = lines[number].encode("utf-8")
        if size + len(data) > limit:
            break
        parts.append(data)
        size += len(data)
    return b"".join(parts)
