"""Probe continuations and UTF-8 helpers shared by the covering-tree modules.

A token sequence covers a prefix when it is a prefix of the canonical encoding of
*some* text that starts with the prefix. "Some text" is: any character that completes
a partial last character, then one of the continuations in :data:`PROBES` (end of text,
space, letters, digits, punctuation, newline, CJK ...), the same set the brute-force
oracle in the tests uses.

>>> split_utf8("aé".encode()[:2])
('a', b'\\xc3')
>>> char_byte_offsets("aé中", 10)
[10, 11, 13, 16]
"""

from __future__ import annotations

import codecs
import itertools
import unicodedata

from ..errors import PrefixError
from .completions import nfc_composing

# fmt: off
PROBES: tuple[str, ...] = (
    "", " ", "a", "A", "0", ".", "\n", "'", "(", "中", "\t", "_", " a", "é", "\x00",
    "s", "t", "m", "d", "re", "ve", "ll",  # contraction suffixes after "'"
    "e", "l", "E", "L",  # ... and their ends after "'r", "'v", "'l" (any case: (?i:'ve))
)
# fmt: on
# the starts y[:j] of probes (b"" included): what a pre-token may take of a probe
PROBE_ENDINGS: tuple[bytes, ...] = tuple(
    sorted({y[:j].encode("utf-8") for y in PROBES for j in range(len(y) + 1)})
)
ENDING_INDEX: dict[bytes, int] = {e: k for k, e in enumerate(PROBE_ENDINGS)}
SHORT_PROBES: tuple[str, ...] = ("",)  # after 4 known characters the splits inside them are fixed


def complete_head(data: bytes) -> str | None:
    """Decode the complete characters at the start of ``data`` (None if it starts mid-char)."""
    if data and 0x80 <= data[0] < 0xC0:
        return None
    dec = codecs.getincrementaldecoder("utf-8")()
    try:
        return dec.decode(data, final=False)
    except UnicodeDecodeError:
        return None


def split_utf8(data: bytes) -> tuple[str, bytes]:
    """Split into decoded complete characters and a trailing partial character.

    Raises :class:`PrefixError` for invalid UTF-8 anywhere but a truncated last character.
    """
    dec = codecs.getincrementaldecoder("utf-8")()
    try:
        text = dec.decode(data, final=False)
    except UnicodeDecodeError as exc:
        raise PrefixError(f"prefix is not valid UTF-8 at byte {exc.start}") from exc
    partial = dec.getstate()[0]
    return text, partial


def continuation_run(data: bytes) -> int:
    """How many continuation bytes (0x80-0xBF) ``data`` starts with."""
    n = 0
    while n < len(data) and 0x80 <= data[n] < 0xC0:
        n += 1
    return n


def split_lenient(data: bytes) -> tuple[str, bytes]:
    """Like :func:`split_utf8` but for token bytes that may start mid-character."""
    start = 0
    while start < len(data) and 0x80 <= data[start] < 0xC0 and start < 3:
        start += 1
    dec = codecs.getincrementaldecoder("utf-8")()
    try:
        text = dec.decode(data[start:], final=False)
    except UnicodeDecodeError:
        return "", b""
    return text, dec.getstate()[0]


def is_one_char(data: bytes) -> bool:
    try:
        return len(data.decode("utf-8")) == 1
    except UnicodeDecodeError:
        return False


def nfc_boundary(ch: str) -> bool:
    """True when NFC never merges ``ch`` with what comes before it."""
    return unicodedata.combining(ch) == 0 and ch not in nfc_composing()


NFC_TAIL_CHARS = 8  # a longer run of merging characters: no tail (use the safe flags as they are)


def nfc_tail(text: str) -> str | None:
    """The end of ``text`` from its last character NFC never merges with what precedes
    (None when there is none among the last NFC_TAIL_CHARS characters).

    >>> nfc_tail("ab\u0301")
    'b\u0301'
    """
    for i in range(len(text) - 1, max(-1, len(text) - 1 - NFC_TAIL_CHARS), -1):
        if nfc_boundary(text[i]):
            return text[i:]
    return None


def nfc_bytes(text: str) -> bytes:
    return unicodedata.normalize("NFC", text).encode("utf-8")


def last_chars(data: bytes, n: int) -> str:
    """The last ``n`` characters (or fewer) of ``data``, which holds whole characters:
    only a few bytes are decoded (a character the slice cuts is dropped at its front)."""
    return data[-4 * (n + 1) :].decode("utf-8", errors="ignore")[-n:]


def char_byte_offsets(text: str, start: int = 0) -> list[int]:
    """Byte offset of every character boundary of ``text`` (``start`` added), ends included.

    >>> char_byte_offsets("aé中", 10)
    [10, 11, 13, 16]
    """
    return list(itertools.accumulate((len(ch.encode("utf-8")) for ch in text), initial=start))
