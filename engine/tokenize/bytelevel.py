"""The GPT-2 ByteLevel alphabet: every byte as one printable unicode character.

>>> BYTE_TO_CHAR[ord(" ")]
'Ġ'
>>> chars_to_bytes("Ġhello")
b' hello'
"""

from __future__ import annotations


def _build_byte_to_char() -> list[str]:
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    table: dict[int, int] = {b: b for b in printable}
    shift = 0
    for b in range(256):
        if b not in table:
            table[b] = 256 + shift
            shift += 1
    return [chr(table[b]) for b in range(256)]


BYTE_TO_CHAR: list[str] = _build_byte_to_char()
CHAR_TO_BYTE: dict[str, int] = {c: b for b, c in enumerate(BYTE_TO_CHAR)}


def chars_to_bytes(text: str) -> bytes:
    """Map a ByteLevel token string back to raw bytes (KeyError if not ByteLevel)."""
    return bytes(CHAR_TO_BYTE[c] for c in text)
