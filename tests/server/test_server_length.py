"""Suggestion length (issue 38): the ``maxLines`` and ``minConfidence`` options, the scope
they give, and what typing through a shown completion may bring back."""

from __future__ import annotations

import pytest
from midword.server.document import Cursor
from midword.server.options import parse_options
from midword.server.reuse import TypedThrough
from midword.server.scope import BLOCK_LINES, scope_for

BLOCK = "\n    a = 1\n    b = 2\n    c = 3\n    d = 4"  # after "def f():": four lines


def test_options_take_max_lines_and_min_confidence_with_checks() -> None:
    options, problems = parse_options({"maxLines": 1, "minConfidence": "auto"})
    assert (options.max_lines, options.min_confidence, problems) == (1, "auto", [])
    assert parse_options({"minConfidence": 0.25})[0].min_confidence == 0.25
    defaults = parse_options({})[0]
    assert (defaults.max_lines, defaults.min_confidence) == (0, 0.0)  # off: today's behaviour
    for key, bad in [
        ("maxLines", -1),
        ("maxLines", 2.5),
        ("maxLines", "1"),
        ("minConfidence", 1),
        ("minConfidence", -0.5),
        ("minConfidence", "high"),
        ("minConfidence", True),
    ]:
        options, problems = parse_options({key: bad})
        assert (options.max_lines, options.min_confidence) == (0, 0.0), key
        assert len(problems) == 1 and problems[0].startswith(f"midword.{key} = "), problems


@pytest.mark.parametrize("policy", ["auto", "always"])
@pytest.mark.parametrize("limit", [0, 1, 2, 3, 40])
def test_max_lines_caps_the_lines_of_a_block(policy: str, limit: int) -> None:
    """At most ``limit`` lines: ``limit - 1`` line breaks; 1 is single-line mode."""
    scope = scope_for("def f():", "", policy, max_lines=limit)
    end = scope.cut(BLOCK)
    shown = BLOCK if end is None else BLOCK[:end]
    want = min(limit or BLOCK_LINES, BLOCK.count("\n") + 1)
    assert shown.count("\n") + 1 == want, (shown, limit)
    assert scope.multiline == (limit != 1)


def test_max_lines_counts_from_the_cursor_line_on_an_empty_line() -> None:
    text = "x = 1\ny = 2\nz = 3\nw = 4"
    for limit in (1, 2, 3):
        end = scope_for("", "", "auto", max_lines=limit).cut(text)
        assert end is not None and text[:end] == "\n".join(text.split("\n")[:limit])


@pytest.mark.parametrize("limit", [1, 2, 3])
def test_typing_through_never_brings_back_lines_beyond_the_limit(limit: int) -> None:
    """The rest of a shown completion typed through is a suffix of what was shown: each
    step's rest fits the limit (the shown text was cut to it)."""
    scope = scope_for("", "", "always", max_lines=limit)
    raw = "a = 1\nb = 2\nc = 3\nd = 4"
    end = scope.cut(raw)
    shown = raw if end is None else raw[:end]
    through = TypedThrough()
    through.shown("a.py", edits=0, cursor=Cursor(0, 0), text=shown)
    line, index = 0, 0
    for edits, ch in enumerate(shown[:-1], start=1):
        at = Cursor(line, index)
        line, index = (line + 1, 0) if ch == "\n" else (line, index + 1)
        through.edited("a.py", edits, at, ch, Cursor(line, index))
        rest = through.rest("a.py", edits, Cursor(line, index))
        assert rest == shown[edits:]
        assert rest.count("\n") + 1 <= limit
