"""The clean-up of a completion before it reaches the editor, in one place.

`clean_completion` gives the text to insert: cut to its scope (server/scope.py), without
the part of its first line that already follows the cursor, with the document's
indentation on the lines after the first. `cut_repeats` then drops what repeats the lines
below the cursor (no duplicated code), and with fill-in-the-middle `suffix_repeat_cut`
stops generation as soon as it runs into the suffix.

>>> from midword.server.scope import scope_for
>>> clean_completion("a, b)", scope_for("    x = foo(", ")", "auto"), "    ")
'a, b'

A model that sees only the text before the cursor often writes the next lines of the
file again (users report it against Continue, Copilot and llama.vim). Lines compare
with their surrounding whitespace stripped; blank lines are skipped on both sides.

* A multi-line completion is cut before its first line that repeats the document's
  next non-blank lines (up to `MATCH_LINES` of them must agree, so a lone ``}`` or
  ``pass`` in the middle of a completion does not cut it when the lines after differ).
* A single-line completion that is the rest of the cursor's line is dropped, and so is
  one that makes the cursor's line a copy of the next non-blank line.
* With fill-in-the-middle the model sees the suffix and may run on into it: generation
  stops as soon as a complete line after the first starts repeating the suffix's next
  lines (`suffix_repeat_cut`), instead of being trimmed afterwards.

>>> cut_repeats("x = 1\\ny = 2\\nz = 3", "", ["y = 2", "z = 3", "print(x)"], "")
'x = 1'
>>> cut_repeats("\\n    return a", "def f(a):", ["    return a"], "")
''
>>> cut_repeats("b)", "f(a, ", [], " b)")
''
>>> cut_repeats("x = 1\\n}\\ny = 2", "", ["}", "z = 3"], "")
'x = 1\\n}\\ny = 2'
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from .scope import CLOSERS

if TYPE_CHECKING:
    from .scope import Scope

__all__ = [
    "MATCH_LINES",
    "clean_completion",
    "cut_repeats",
    "following_lines",
    "suffix_repeat_cut",
]

Cut = Callable[[str], "int | None"]  # text so far -> where it must end, or None

MIN_REPEAT_CHARS = 6  # a one-line repeat shorter than this ("}", "pass") may be meant
_LEADING_WS = re.compile(r"^[ \t]*")
MATCH_LINES = 3  # how many of the next document lines a repeat must match (fewer if it ends)


def clean_completion(text: str, scope: Scope, unit: str) -> str:
    """The text to insert: cut to the scope, no repeat of the text after the cursor on its
    line, the document's indentation (``unit``) on the lines after the first."""
    end = scope.cut(text)
    if end is not None:
        text = text[:end]
    text = _trim_suffix_overlap(text, scope.suffix)
    if scope.multiline:
        text = _reindent(text.rstrip(), unit)
    return text


def _trim_suffix_overlap(text: str, suffix: str) -> str:
    """Drop the part of the first line that the text after the cursor already has.

    A closing bracket that closes something opened before the cursor is where the
    suffix takes over, when the suffix starts with that bracket:

    >>> _trim_suffix_overlap("args, f(x)))", ")")
    'args, f(x)'
    >>> _trim_suffix_overlap("x = 1", "")
    'x = 1'
    """
    wanted = suffix.strip()
    if not wanted:
        return text
    first, newline, rest = text.partition("\n")
    if wanted[0] in CLOSERS:  # brackets the completion opens are its own to close
        closer = _first_unmatched_closer(first)
        if closer is None or first[closer] != wanted[0]:
            return text
        first = first[:closer].rstrip()
    elif first.rstrip().endswith(wanted):
        first = first.rstrip()[: -len(wanted)]
    elif wanted in first:
        first = first[: first.index(wanted)]
    else:
        return text
    return first if not newline else first + newline + rest


def _first_unmatched_closer(line: str) -> int | None:
    """Index of the first closing bracket with no opener before it on ``line``."""
    depth = 0
    for index, char in enumerate(line):
        if char in "([{":
            depth += 1
        elif char in CLOSERS:
            if depth == 0:
                return index
            depth -= 1
    return None


def _reindent(text: str, unit: str) -> str:
    """Lines after the first use ``unit``'s character for their leading whitespace."""
    lines = text.split("\n")
    width = 4 if unit == "\t" else len(unit)
    for i in range(1, len(lines)):
        lead = _LEADING_WS.match(lines[i]).group()
        if unit == "\t" and " " in lead:
            columns = len(lead.expandtabs(width))
            new = "\t" * (columns // width) + " " * (columns % width)
        elif unit != "\t" and "\t" in lead:
            new = lead.expandtabs(width)
        else:
            continue
        lines[i] = new + lines[i][len(lead) :]
    return "\n".join(lines)


def cut_repeats(
    text: str, line_prefix: str, following: Sequence[str], line_suffix: str = ""
) -> str:
    """``text`` without the part that repeats what follows the cursor.

    ``line_prefix``/``line_suffix``: the cursor's line before and after the cursor;
    ``following``: the document's lines after the cursor's line (blank ones allowed).
    """
    if "\n" not in text:
        return _single_line(text, line_prefix, following, line_suffix)
    lines = text.split("\n")
    # the first line completes the cursor's line: compare the whole line it makes
    compared = [(line_prefix + lines[0]).strip()] + [line.strip() for line in lines[1:]]
    below = [line.strip() for line in following if line.strip()]
    if not below:
        return text
    for start, line in enumerate(compared):
        if line and _repeats_from(compared[start:], below):
            return _cut_before_line(lines, start)
    return text


def _single_line(text: str, line_prefix: str, following: Sequence[str], line_suffix: str) -> str:
    """A one-line completion: dropped when it is the rest of the cursor's line, or when
    the line it makes is the next non-blank line (a stop before the suffix's repeat
    leaves just that), unless that line is too short to tell (``}``, ``pass``).

    >>> cut_repeats("self.x = x", "    ", ["", "    self.x = x", "    self.y = y"], "")
    ''
    >>> cut_repeats("}", "  ", ["  }"], "")
    '}'
    """
    suffix = line_suffix.strip()
    if suffix:
        return "" if text.strip() == suffix else text
    whole = (line_prefix + text).strip()
    below = next((line.strip() for line in following if line.strip()), "")
    substantial = len(whole) >= MIN_REPEAT_CHARS and any(c.isalnum() for c in whole)
    return "" if substantial and whole == below else text


def _repeats_from(candidate: list[str], below: list[str]) -> bool:
    """The non-blank lines of ``candidate`` start the same as ``below`` (up to MATCH_LINES)."""
    mine = [line for line in candidate if line]
    wanted = min(len(mine), len(below), MATCH_LINES)
    return mine[:wanted] == below[:wanted]


def _cut_before_line(lines: list[str], start: int) -> str:
    """The text of ``lines[:start]`` without trailing blank lines ('' for the first)."""
    if start == 0:
        return ""
    return "\n".join(lines[:start]).rstrip()


def following_lines(lines: Iterable[str], limit: int = 2 * MATCH_LINES + 8) -> list[str]:
    """The first non-blank ``lines`` (at most ``limit`` of them): all `cut_repeats` needs.

    >>> following_lines(["", "a", "  ", "b"], limit=1)
    ['a']
    """
    found: list[str] = []
    for line in lines:
        if line.strip():
            found.append(line)
            if len(found) >= limit:
                break
    return found


def suffix_repeat_cut(cut: Cut, suffix: bytes) -> Cut:
    """``cut``, and also where the completion starts repeating the lines after the
    cursor's line that ``suffix`` (a FIM prompt's text after the cursor) holds: before a
    complete line, not the first, that with the complete lines after it equals the
    suffix's next non-blank lines (`MATCH_LINES` of them, fewer if it has fewer).

    >>> stop = suffix_repeat_cut(lambda text: None, b")\\n    total = a + b\\n    return total\\n")
    >>> text = "\\n    total = a + b\\n    return total\\n"
    >>> stop(text), stop("\\n    total = a + b\\n    return tot") is None
    (0, True)
    """
    wanted = _lines_after_first(suffix.decode("utf-8", "replace"), MATCH_LINES)
    if not wanted:
        return cut

    def cut_or_repeat(text: str) -> int | None:
        end = cut(text)
        repeat = _repeat_start(text if end is None else text[:end], wanted)
        return end if repeat is None else repeat

    return cut_or_repeat


def _lines_after_first(text: str, count: int) -> list[str]:
    """The first ``count`` non-blank lines of ``text`` after its first line, stripped; read
    line by line up to them (a suffix holds a few KB, asked about on every keystroke).

    >>> _lines_after_first("x)\\n  a\\n\\n b \\nc\\n", 2), _lines_after_first("x", 2)
    (['a', 'b'], [])
    """
    wanted: list[str] = []
    start = text.find("\n")
    while start >= 0 and len(wanted) < count:
        end = text.find("\n", start + 1)
        line = text[start + 1 : end if end >= 0 else len(text)].strip()
        if line:
            wanted.append(line)
        start = end
    return wanted


def _repeat_start(text: str, wanted: list[str]) -> int | None:
    """Index of the newline before the first complete line (after line 0) from which the
    complete non-blank lines start with all of ``wanted``; None when there is none yet."""
    lines = text.split("\n")
    complete = [line.strip() for line in lines[:-1]]  # the last line may still grow
    offset = len(lines[0])
    for number in range(1, len(complete)):
        mine = [line for line in complete[number:] if line]
        if complete[number] and mine[: len(wanted)] == wanted:
            return offset
        offset += 1 + len(lines[number])
    return None
