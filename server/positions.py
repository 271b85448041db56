"""Every LSP position <-> string index <-> byte offset conversion lives here.

LSP counts a position's ``character`` in the negotiated encoding's code units:
UTF-16 by default (what VS Code and Neovim 0.7 send), UTF-8 or UTF-32 when the
client offers them. Python strings count code points; the engine counts UTF-8
bytes. Columns past the end of a line clamp to the line's end (as LSP says),
and a column inside a surrogate pair or a multi-byte character rounds down to
the character's start.

>>> to_index("aé😀b", 4, "utf-16")   # a, é, then the two UTF-16 units of 😀
3
>>> to_index("aé😀b", 7, "utf-8")    # a (1) + é (2) + 😀 (4) bytes
3
>>> from_index("aé😀b", 3, "utf-16")
4
>>> utf8_len("aé😀")
7
"""

from __future__ import annotations

__all__ = ["ENCODINGS", "clean_text", "from_index", "to_index", "units", "utf8_len"]

ENCODINGS = ("utf-8", "utf-16", "utf-32")


def _char_units(ch: str, encoding: str) -> int:
    code = ord(ch)
    if encoding == "utf-16":
        return 2 if code > 0xFFFF else 1
    if encoding == "utf-8":
        return 1 if code < 0x80 else 2 if code < 0x800 else 3 if code < 0x10000 else 4
    return 1


def units(text: str, encoding: str) -> int:
    """Length of ``text`` in the encoding's code units.

    >>> units("😀", "utf-16"), units("😀", "utf-8"), units("😀", "utf-32")
    (2, 4, 1)
    """
    if encoding == "utf-32" or text.isascii():
        return len(text)
    return sum(_char_units(ch, encoding) for ch in text)


def to_index(line: str, column: int, encoding: str) -> int:
    """String index of code-unit ``column`` in ``line`` (clamped to the line)."""
    if column <= 0:
        return 0
    if encoding == "utf-32" or line.isascii():
        return min(column, len(line))
    seen = 0
    for i, ch in enumerate(line):
        seen += _char_units(ch, encoding)
        if seen > column:
            return i
    return len(line)


def from_index(line: str, index: int, encoding: str) -> int:
    """Code-unit column of string index ``index`` in ``line``."""
    return units(line[: max(0, index)], encoding)


def utf8_len(text: str) -> int:
    """Length in UTF-8 bytes (of text already cleaned by `clean_text`)."""
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def clean_text(text: str) -> str:
    """Replace lone surrogates (invalid UTF-16 a client may send) with U+FFFD.

    Both take one UTF-16 unit, so positions computed by the client stay valid.

    >>> clean_text("a\\ud800b")
    'a\\ufffdb'
    """
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return "".join("\ufffd" if 0xD800 <= ord(ch) <= 0xDFFF else ch for ch in text)
