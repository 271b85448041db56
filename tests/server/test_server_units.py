"""Units of the server without a transport: positions, documents, options, scope rules."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st
from midword.server.cleanup import clean_completion
from midword.server.document import Cursor, Document, Range, split_lines
from midword.server.options import ServerOptions, needs_reload, parse_options
from midword.server.positions import clean_text, from_index, to_index, units
from midword.server.scope import identifier_split, indent_unit, scope_for

CODECS = {"utf-8": ("utf-8", 1), "utf-16": ("utf-16-le", 2), "utf-32": ("utf-32-le", 4)}
TEXT = st.text(alphabet=st.sampled_from(list("ab \t\n\r中😀é")), max_size=40)


@given(TEXT, st.sampled_from(["utf-8", "utf-16", "utf-32"]))
def test_index_and_column_round_trip(line: str, encoding: str) -> None:
    for index in range(len(line) + 1):
        column = from_index(line, index, encoding)
        codec, width = CODECS[encoding]
        assert column == len(line[:index].encode(codec)) // width
        assert to_index(line, column, encoding) == index
    assert to_index(line, units(line, encoding) + 5, encoding) == len(line)  # clamps


def test_column_inside_a_surrogate_pair_rounds_down() -> None:
    assert to_index("😀x", 1, "utf-16") == 0
    assert to_index("😀x", 2, "utf-16") == 1


def test_lone_surrogates_become_replacement_characters() -> None:
    assert clean_text("a\udc00b") == "a\ufffdb"
    doc = Document("untitled:1", "x\ud800y", 1)
    assert doc.text().encode("utf-8") == "x\ufffdy".encode()


@given(TEXT)
def test_split_lines_keeps_every_character(text: str) -> None:
    lines = split_lines(text)
    assert "".join(lines) == text
    assert all(not line.endswith(("\n", "\r")) or line for line in lines)
    assert len(lines) == text.replace("\r\n", "\n").replace("\r", "\n").count("\n") + 1


def _apply(text: str, start: int, end: int, new: str, doc: Document) -> str:
    """Apply an edit given as string indices through LSP positions (UTF-16)."""

    def pos(i: int) -> tuple[int, int]:
        before = text[:i]
        line = len(split_lines(before)) - 1
        column = split_lines(before)[-1]
        return line, len(column.encode("utf-16-le")) // 2

    (sl, sc), (el, ec) = pos(start), pos(end)
    doc.apply_change(Range(sl, sc, el, ec), new, "utf-16")
    return text[:start] + new + text[end:]


@pytest.mark.parametrize("seed", range(20))
def test_random_edits_match_string_edits(seed: int) -> None:
    rng = random.Random(seed)
    pieces = ["a", "bc", "\n", "\r\n", " ", "中", "😀", "\n\n", "x\ny"]
    text = "".join(rng.choice(pieces) for _ in range(30))
    doc = Document("untitled:1", text, 1)
    for _ in range(60):
        start = rng.randrange(len(text) + 1)
        end = min(len(text), start + rng.randrange(4))
        if text[start - 1 : start + 1] == "\r\n" or text[end - 1 : end + 1] == "\r\n":
            continue  # an edit between \r and \n changes where lines break; LSP clients avoid it
        text = _apply(text, start, end, rng.choice(pieces + [""]), doc)
        assert doc.text() == text
        assert doc.size_bytes() == len(text.encode("utf-8"))  # kept, not summed
    doc.replace_all("中x", 9)
    assert doc.size_bytes() == 4


def test_positions_past_the_end_clamp() -> None:
    doc = Document("untitled:1", "ab\ncd", 1)
    assert doc.cursor(7, 0, "utf-16") == Cursor(1, 2)
    assert doc.cursor(0, 99, "utf-16") == Cursor(0, 2)
    doc.apply_change(Range(9, 9, 9, 9), "!", "utf-16")
    assert doc.text() == "ab\ncd!"


def test_window_starts_on_a_line_and_stays_put_while_typing() -> None:
    doc = Document("untitled:1", "".join(f"line {i}\n" for i in range(100)), 1)
    cursor = Cursor(100, 0)
    first = doc.prefix_window(cursor, window_bytes=64)
    assert len(first) <= 64 and first.startswith(b"line ")
    start = doc.window_line
    for i in range(40):  # typing keeps the start until the window grows past 1.5x
        doc.apply_change(Range(100, i, 100, i), "x", "utf-16")
        window = doc.prefix_window(Cursor(100, i + 1), window_bytes=64)
        if doc.window_line == start:
            assert window.startswith(first)
    assert doc.window_line != start  # it moved eventually
    assert len(doc.prefix_window(Cursor(100, 40), 64)) <= 96


def test_window_of_an_overlong_line_is_bounded() -> None:
    doc = Document("untitled:1", "x" * 10_000, 1)
    window = doc.prefix_window(Cursor(0, 10_000), window_bytes=1000)
    assert 0 < len(window) <= 1000


def test_options_defaults_problems_and_reload() -> None:
    assert parse_options(None)[0] == ServerOptions()
    opts, problems = parse_options({"maxTokens": 0, "method": "magic", "topP": 0.5})
    assert opts.max_tokens == 48 and opts.method == "bytesampler" and opts.top_p == 0.5
    assert len(problems) == 2 and all("midword." in p for p in problems)
    assert parse_options({"midword": {"temperature": 0.3}})[0].temperature == 0.3
    assert parse_options([1, 2])[1]  # not an object
    base = ServerOptions(max_tokens=7)
    assert parse_options({"temperature": 1}, base)[0].max_tokens == 7  # live change keeps others
    assert needs_reload(base, ServerOptions(device="cpu"))
    assert not needs_reload(base, ServerOptions(temperature=2))


def test_scope_mid_line_is_one_line_and_trims_the_suffix() -> None:
    scope = scope_for("    x = f(", ")", "auto", ["<|endoftext|>"])
    assert not scope.multiline
    assert clean_completion("a)\nmore", scope, "    ") == "a"
    assert clean_completion("a, b) + 1", scope, "    ") == "a, b"
    # the completion's own brackets stay; the first one it cannot match is the suffix's
    assert clean_completion("a, g(b)))", scope, "    ") == "a, g(b)"
    assert clean_completion("a, g(b)", scope, "    ") == "a, g(b)"
    assert clean_completion("a<|endoftext|>b", scope, "    ") == "a"


def test_scope_block_rules() -> None:
    opening = scope_for("def f(x):", "", "auto")
    text = "\n    y = x\n    return y\nprint(f(1))\n"
    assert clean_completion(text, opening, "    ") == "\n    y = x\n    return y"
    blank = scope_for("    ", "", "auto")
    assert (
        clean_completion("a = 1\n    b = 2\n\n\n    c = 3\n", blank, "    ") == "a = 1\n    b = 2"
    )
    assert clean_completion("a\n  b\nc", scope_for("  ", "", "never"), "  ") == "a"
    braces = scope_for("if (x) {", "", "auto")
    assert clean_completion("\n  y();\n}\nz();\n", braces, "  ") == "\n  y();\n}"
    many = "\n".join(["    s"] * 40)
    assert clean_completion(many, blank, "    ").count("\n") < 16


def test_reindent_follows_the_document() -> None:
    blank = scope_for("\t", "", "auto")
    assert clean_completion("a:\n        b", blank, "\t") == "a:\n\t\tb"
    assert indent_unit(["x", "\tif y:", "\t\tz"]) == "\t"
    spaces = scope_for("  ", "", "auto")
    assert clean_completion("a:\n\tb", spaces, "  ") == "a:\n  b"


def test_identifier_split() -> None:
    assert identifier_split("x = self.assertEq", "ual(a)") == ("assertEq", "ual")
    assert identifier_split("x = ", "foo") == ("", "foo")
    assert identifier_split("中文", "字 x") == ("中文", "字")
