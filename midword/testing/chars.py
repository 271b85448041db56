"""The characters a brute-force check tries where a text ends inside a UTF-8 character.

The engine decides over every completion at once (its leaf tables); a brute-force oracle
encodes text, so it needs the characters themselves. Used by the tests' oracle and by the
completeness harness (:mod:`midword.testing.completeness`), to weigh its cuts.

Example:
    >>> char_completions("é".encode()[:1])[:3]
    ('À', 'Á', 'Â')
    >>> len(char_completions(b"\\xf0"))  # a bare 4-byte lead: sampled, not all 196,608
    127
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache

from midword.engine import completion_points, utf8_length

SAMPLE_ABOVE = 64  # more completions than this are sampled when three bytes are missing


@lru_cache(maxsize=4096)
def all_completions(partial: bytes) -> tuple[str, ...]:
    """Every character whose UTF-8 encoding starts with ``partial``."""
    return tuple(chr(c) for c in completion_points(partial).tolist())


@lru_cache(maxsize=4096)
def sample_completions(partial: bytes) -> tuple[str, ...]:
    """All completions when there are few, else one per (Unicode category, next byte):
    what a brute-force check can afford for many candidates at once."""
    chars = all_completions(partial)
    if len(chars) <= SAMPLE_ABOVE:
        return chars
    seen: set[tuple[str, int]] = set()
    out: list[str] = []
    for ch in chars:
        key = (unicodedata.category(ch), ch.encode("utf-8")[len(partial)])
        if key not in seen:
            seen.add(key)
            out.append(ch)
    return tuple(out)


@lru_cache(maxsize=4096)
def char_completions(partial: bytes) -> tuple[str, ...]:
    """Characters that complete a partial UTF-8 character, as the brute-force oracle
    tries them: every one when one or two bytes are missing (up to 4,096), one per
    (Unicode category, next byte) when three are (a bare 4-byte lead has up to 262,144
    completions, too many to encode)."""
    if utf8_length(partial[0]) - len(partial) > 2:
        return sample_completions(partial)
    return all_completions(partial)
