"""Tokenizer regexes read Unicode as Hugging Face ``tokenizers`` does.

``tokenizers`` runs a pre-tokenizer's ``Split`` and ``ByteLevel`` regexes with Oniguruma,
whose tables are Unicode 16.0; the ``regex`` module midword runs them with knows Unicode
17.0. To Oniguruma the 4,803 characters 17.0 assigned are unassigned (``\\p{Cn}``: no letter,
no digit, matched by ``[^\\s\\p{L}\\p{N}]``), and U+0295, a lowercase letter (Ll) until 17.0
made it Lo, is still one. :func:`compile_as_tokenizers` compiles a pattern so that every
character property in it (``\\p{..}``, ``\\P{..}``, ``\\d``, ``\\w``, ``\\s``, POSIX classes
and their negations, in or out of ``[...]``) answers as in Unicode 16.0; the rest of the
pattern means what it meant (it is re-emitted in the ``regex`` module's version-1 syntax,
whose nested sets do the set arithmetic, with the set operators of its classes escaped).

>>> compile_as_tokenizers(r"\\p{L}+").findall("x\\ua7cey")  # U+A7CE: a 17.0 capital letter
['x', 'y']
>>> regex.findall(r"\\p{L}+", "x\\ua7cey")
['x꟎y']

``tokenizers``' ``Digits`` tests Rust's ``char::is_numeric``, whose tables (Rust's standard
library) are those of Unicode 17.0: :func:`numeric_class` writes that set so that it
survives the rewrite. The tests (tests/engine/test_unicode_versions.py) compare every code point
with ``tokenizers`` itself; when either side moves to a new Unicode version they fail, and
``python -m midword.engine.tokenize.unicode_versions`` prints the ranges below afresh.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

import numpy as np
import regex

TOKENIZERS_UNICODE = "16.0"  # Oniguruma's tables (the onig crate that tokenizers links)

# The code points Unicode 17.0 assigned (all 4,803: Oniguruma's 16.0 tables have none)
ASSIGNED_AFTER: tuple[tuple[int, int], ...] = (
    (0x088F, 0x088F), (0x0C5C, 0x0C5C), (0x0CDC, 0x0CDC), (0x1ACF, 0x1ADD), (0x1AE0, 0x1AEB),
    (0x20C1, 0x20C1), (0x2B96, 0x2B96), (0xA7CE, 0xA7CF), (0xA7D2, 0xA7D2), (0xA7D4, 0xA7D4),
    (0xA7F1, 0xA7F1), (0xFBC3, 0xFBD2), (0xFD90, 0xFD91), (0xFDC8, 0xFDCE), (0x10940, 0x10959),
    (0x10EC5, 0x10EC7), (0x10ED0, 0x10ED8), (0x10EFA, 0x10EFB), (0x11B60, 0x11B67),
    (0x11DB0, 0x11DDB), (0x11DE0, 0x11DE9), (0x16EA0, 0x16EB8), (0x16EBB, 0x16ED3),
    (0x16FF2, 0x16FF6), (0x187F8, 0x187FF), (0x18D09, 0x18D1E), (0x18D80, 0x18DF2),
    (0x1CCFA, 0x1CCFC), (0x1CEBA, 0x1CED0), (0x1CEE0, 0x1CEF0), (0x1E6C0, 0x1E6DE),
    (0x1E6E0, 0x1E6F5), (0x1E6FE, 0x1E6FF), (0x1F6D8, 0x1F6D8), (0x1F777, 0x1F77A),
    (0x1F8D0, 0x1F8D8), (0x1FA54, 0x1FA57), (0x1FA8A, 0x1FA8A), (0x1FA8E, 0x1FA8E),
    (0x1FAC8, 0x1FAC8), (0x1FACD, 0x1FACD), (0x1FAEA, 0x1FAEA), (0x1FAEF, 0x1FAEF),
    (0x1FBFA, 0x1FBFA), (0x2B73A, 0x2B73F), (0x2CEA2, 0x2CEAD), (0x323B0, 0x33479),
)  # fmt: skip
# Characters whose properties 17.0 changed -> a character that has, in the regex module's
# tables, the properties they had in 16.0 (U+0250: a lowercase Latin letter of the same
# block, as U+0295 was before 17.0 made it Lo)
RECATEGORIZED: dict[int, int] = {0x0295: 0x0250}
UNASSIGNED = 0xFFFE  # a noncharacter: unassigned (Cn, script Unknown) in every version
_LOWEST_LATE = chr(min(min(RECATEGORIZED), ASSIGNED_AFTER[0][0]))

_PROPERTY = regex.compile(r"\\[pP](?:\{[^}]*\}|[A-Za-z])|\\[dDwWsS]|\[:\^?[A-Za-z_]+:\]")
_ESCAPE = regex.compile(
    r"\\(?:x\{[0-9A-Fa-f]+\}|x[0-9A-Fa-f]{2}|u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|N\{[^}]*\}"
    r"|0[0-7]{0,2}|[1-7][0-7]{2}|.)",
    regex.DOTALL,
)
_SET_SPECIAL = frozenset("[]-&|~^\\")  # characters with a meaning inside a version-1 set


@lru_cache(maxsize=4096)
def compile_as_tokenizers(pattern: str) -> regex.Pattern[str]:
    """``pattern`` compiled to match as ``tokenizers`` (Oniguruma, Unicode 16.0) matches it.

    Raises ``regex.error`` for a pattern the ``regex`` module rejects.
    """
    exact = regex.compile(as_tokenizers_source(pattern), flags=regex.V1)
    _TWINS[exact.pattern] = compile_with_own_tables(pattern)
    return exact


@lru_cache(maxsize=4096)
def compile_with_own_tables(pattern: str) -> regex.Pattern[str]:
    """The same pattern reading the ``regex`` module's own tables: it matches as
    :func:`compile_as_tokenizers`'s does in text that :func:`holds_late_characters` says
    has none, and runs faster (the set differences cost half as much again per character)."""
    return regex.compile(as_tokenizers_source(pattern, properties=False), flags=regex.V1)


_TWINS: dict[str, regex.Pattern[str]] = {}


def own_tables_twin(compiled: object) -> regex.Pattern[str] | None:
    """The :func:`compile_with_own_tables` twin of a :func:`compile_as_tokenizers` result
    (None for any other pattern)."""
    source = getattr(compiled, "pattern", None)
    return _TWINS.get(source) if isinstance(source, str) else None


def holds_late_characters(text: str) -> bool:
    """Whether ``text`` holds a character whose properties differ between the versions.

    >>> holds_late_characters("x = 1"), holds_late_characters("x\ua7cey")
    (False, True)
    """
    if text.isascii() or max(text) < _LOWEST_LATE:
        return False
    return _late_characters().search(text) is not None


def late_mask(codes: np.ndarray) -> np.ndarray:
    """Which of these code points are such characters (vectorized: all of Unicode in ms)."""
    lows, highs = _late_bounds()
    at = np.searchsorted(lows, codes, side="right") - 1
    return (at >= 0) & (codes <= highs[np.maximum(at, 0)])


@lru_cache(maxsize=1)
def _late_bounds() -> tuple[np.ndarray, np.ndarray]:
    spans = _ranges(sorted([*_assigned_after(), *RECATEGORIZED]))
    return np.array([lo for lo, _ in spans]), np.array([hi for _, hi in spans])


@lru_cache(maxsize=1)
def _late_characters() -> regex.Pattern[str]:
    return regex.compile(f"[{_ranges_source([*_assigned_after(), *RECATEGORIZED])}]")


def as_tokenizers_source(pattern: str, *, properties: bool = True) -> str:
    """The version-1 source :func:`compile_as_tokenizers` compiles.

    >>> as_tokenizers_source(r"[^\\s\\p{L}]a")[:33]  # (\\s is the same in both versions)
    '[^\\\\s[\\\\p{L}--[\\\\U0000088f\\\\U00000c5c'
    """
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("(?#", i):  # a comment: kept whole (it may hold a bracket)
            end = pattern.find(")", i)
            end = len(pattern) if end < 0 else end + 1
            out.append(pattern[i:end])
        elif pattern[i] == "[":
            end = _emit_set(pattern, i, properties, out)
        else:
            item, end, _ = _item(pattern, i, properties, in_set=False)
            out.append(item)
        i = end
    return "".join(out)


def _emit_set(pattern: str, start: int, properties: bool, out: list[str]) -> int:
    """Re-emit the version-0 set at ``start`` item by item; returns the index after it.

    A ``-`` between two plain items is a range there, a literal anywhere else.
    """
    i, parts = start + 1, ["["]
    if pattern.startswith("^", i):
        parts.append("^")
        i += 1
    first = True  # a ``]`` right after the opening bracket is a literal
    while i < len(pattern) and (pattern[i] != "]" or first):
        first = False
        item, i, is_property = _item(pattern, i, properties, in_set=True)
        ranged = pattern.startswith("-", i) and i + 1 < len(pattern) and pattern[i + 1] != "]"
        if ranged and not is_property:
            upper, end, upper_is_property = _item(pattern, i + 1, properties, in_set=True)
            if not upper_is_property:
                item, i = f"{item}-{upper}", end
        parts.append(item)
    if i >= len(pattern):  # unterminated: left for regex.compile to reject
        out.append(pattern[start:])
        return len(pattern)
    out.append("".join(parts) + "]")
    return i + 1


def _item(pattern: str, i: int, properties: bool, in_set: bool) -> tuple[str, int, bool]:
    """One item at ``i``: (its version-1 text, the index after it, whether a property);
    a property as Unicode 16.0 has it where ``properties``, else as written."""
    prop = _PROPERTY.match(pattern, i)
    if prop is not None and (in_set or pattern[i] == "\\"):
        return (_as_set(prop.group()) if properties else prop.group()), prop.end(), True
    if pattern[i] == "\\":
        esc = _ESCAPE.match(pattern, i)
        end = esc.end() if esc is not None else len(pattern)
        return pattern[i:end], end, False
    ch = pattern[i]
    return ("\\" + ch if in_set and ch in _SET_SPECIAL else ch), i + 1, False


@lru_cache(maxsize=256)
def _as_set(prop: str) -> str:
    """A property as the version-1 set of the characters it has in Unicode 16.0: the
    17.0 characters answer as an unassigned one does, the recategorized ones as their
    stand-ins. (A block property would be wrong for the 17.0 characters of its block; no
    known pre-tokenizer uses one.)"""
    test = regex.compile(f"[{prop}]" if prop.startswith("[:") else prop)
    late = "".join(map(chr, _assigned_after()))
    now = {late[m.start()] for m in test.finditer(late)}
    then = test.fullmatch(chr(UNASSIGNED)) is not None
    remove = [ord(c) for c in late if c in now and not then]
    add = [ord(c) for c in late if c not in now and then]
    for code, stand_in in RECATEGORIZED.items():
        now_in, then_in = (test.fullmatch(chr(c)) is not None for c in (code, stand_in))
        if now_in != then_in:
            (remove if now_in else add).append(code)
    if not remove and not add:
        return prop
    body = f"{prop}--[{_ranges_source(remove)}]" if remove else prop
    return f"[{body}]" if not add else f"[[{body}]{_ranges_source(add)}]"


@lru_cache(maxsize=1)
def _assigned_after() -> tuple[int, ...]:
    return tuple(c for lo, hi in ASSIGNED_AFTER for c in range(lo, hi + 1))


def _ranges_source(codes: Iterable[int]) -> str:
    return "".join(
        f"\\U{lo:08x}" if lo == hi else f"\\U{lo:08x}-\\U{hi:08x}"
        for lo, hi in _ranges(sorted(codes))
    )


def _ranges(codes: list[int]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for c in codes:
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return [(lo, hi) for lo, hi in out]


@lru_cache(maxsize=1)
def numeric_class() -> str:
    """Rust's ``char::is_numeric`` (Nd, Nl, No of Unicode 17.0) as a set that means the
    same after the rewrite: ``\\p{N}`` plus the 17.0 numbers Oniguruma does not know.

    >>> numeric_class()
    '[\\\\p{N}\\\\U00011de0-\\\\U00011de9\\\\U00016ff4-\\\\U00016ff6]'
    """
    numeric = regex.compile(r"\p{N}")
    late = [c for c in _assigned_after() if numeric.fullmatch(chr(c))]
    return f"[\\p{{N}}{_ranges_source(late)}]"


def _print_tables() -> None:  # pragma: no cover - a maintenance tool
    """Print the code points ``tokenizers`` (Oniguruma) leaves unassigned and the
    ``regex`` module assigns: the new :data:`ASSIGNED_AFTER` when either side moves."""
    from tokenizers import Regex, pre_tokenizers

    every = "".join(map(chr, [*range(0xD800), *range(0xE000, 0x110000)]))
    split = pre_tokenizers.Split(Regex(r"\p{Cn}"), behavior="removed", invert=True)
    unassigned = {ord(c) for piece, _ in split.pre_tokenize_str(every) for c in piece}
    assigned_here = {m.start() for m in regex.finditer(r"\P{Cn}", every)}
    # (positions are code points below the surrogates; shift the rest)
    codes = sorted(p if p < 0xD800 else p + 0x800 for p in assigned_here)
    later = [c for c in codes if c in unassigned]
    print(", ".join(f"(0x{lo:04X}, 0x{hi:04X})" for lo, hi in _ranges(later)))


if __name__ == "__main__":  # pragma: no cover
    _print_tables()
