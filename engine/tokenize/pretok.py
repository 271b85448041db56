"""Pre-tokenization: the regex splits that come before BPE.

A :class:`Pretokenizer` is a chain of regex splits (each applied inside the
pieces of the previous one, as Hugging Face ``Sequence`` pre-tokenizers do).
Supported split encodings: ``Split`` with ``Isolated`` behaviour, ``Split``
with ``Removed`` + ``invert: true`` (the GPT-4o/GPT-3.5 files; the same thing
when the pattern covers all text), ``ByteLevel`` with ``use_regex`` (the
GPT-2 pattern), and ``Digits`` (StarCoder and SmolLM2 put it first: every
digit, or every run of digits, is a pre-token of its own).

Every pattern is compiled by :func:`~midword.engine.tokenize.unicode_versions.compile_as_tokenizers`,
so that its character properties answer from the Unicode version of ``tokenizers``' regex
engine (16.0), not the ``regex`` module's own (17.0); the split patterns keep their source
as written in ``pattern`` (:mod:`~midword.engine.tokenize.class_machine` parses it).

>>> p = Pretokenizer([(regex.compile(r"\\p{L}+|\\s+|\\p{N}{1,3}|[^\\s\\p{L}\\p{N}]+"), "isolated")])
>>> p.split("ab  12345!")
['ab', '  ', '123', '45', '!']
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import regex

from ..errors import PretokenizerError
from .unicode_versions import (
    compile_as_tokenizers,
    compile_with_own_tables,
    holds_late_characters,
    numeric_class,
)

GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
# HF ``Digits`` tests Rust's char::is_numeric: the general categories Nd, Nl and No, i.e.
# \p{N}, but of Rust's Unicode version (17.0), not Oniguruma's (see numeric_class)
DIGIT_PATTERN = numeric_class()
DIGIT_RUN_PATTERN = DIGIT_PATTERN + "+"


class TokenizerRegex:
    """A tokenizer's regex, matching as ``tokenizers`` does (see :mod:`.unicode_versions`).

    ``pattern`` is the source as written; ``compiled`` the ``regex`` pattern that runs,
    ``fast`` its twin on the ``regex`` module's own tables, for text without a character
    the two Unicode versions tell apart (most text: the split then takes half the time).

    >>> TokenizerRegex(r"\\p{L}+").pattern
    '\\\\p{L}+'
    >>> [m.group() for m in TokenizerRegex(r"\\p{L}+").finditer("x\\ua7cey")]
    ['x', 'y']
    """

    __slots__ = ("compiled", "fast", "finditer", "pattern")

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self.compiled = compile_as_tokenizers(pattern)
        self.fast = compile_with_own_tables(pattern)
        self.finditer = self.compiled.finditer  # (bound once: the encoder's hot call)

    def __getattr__(self, name: str) -> object:
        """The compiled pattern's other methods (``match``, ``sub``, ...)."""
        if name in TokenizerRegex.__slots__:  # (not set yet: while unpickling)
            raise AttributeError(name)
        return getattr(self.compiled, name)

    def __repr__(self) -> str:
        return f"TokenizerRegex({self.pattern!r})"

    def __reduce__(self) -> tuple:
        return TokenizerRegex, (self.pattern,)


@dataclass
class Pretokenizer:
    """A chain of regex splits; ``behaviors[i]`` is 'isolated' or 'keep_matches'."""

    splits: list[tuple[TokenizerRegex, str]]

    def __post_init__(self) -> None:
        self.splits = [
            (p if isinstance(p, TokenizerRegex) else TokenizerRegex(p.pattern), behavior)
            for p, behavior in self.splits
        ]

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Character spans of the pre-tokens of ``text``."""
        pieces = [(0, len(text))] if text else []
        late = holds_late_characters(text)
        for pattern, behavior in self.splits:
            finditer = pattern.finditer if late else pattern.fast.finditer
            nxt: list[tuple[int, int]] = []
            for start, end in pieces:
                nxt.extend(_split_piece(finditer, behavior, text, start, end))
            pieces = nxt
        return pieces

    def split(self, text: str) -> list[str]:
        return [text[s:e] for s, e in self.spans(text)]


def _split_piece(
    finditer: Callable[[str, int, int], Iterator[regex.Match[str]]],
    behavior: str,
    text: str,
    start: int,
    end: int,
) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    pos = start
    for m in finditer(text, start, end):
        if m.start() == m.end():
            continue
        if m.start() > pos and behavior == "isolated":
            out.append((pos, m.start()))
        out.append((m.start(), m.end()))
        pos = m.end()
    if pos < end and behavior == "isolated":
        out.append((pos, end))
    return out


def parse_pretokenizer(spec: dict | None) -> Pretokenizer:
    """Build a :class:`Pretokenizer` from the ``pre_tokenizer`` entry of tokenizer.json."""
    splits: list[tuple[TokenizerRegex, str]] = []
    _collect(spec, splits)
    return Pretokenizer(splits)


def _collect(spec: dict | None, splits: list[tuple[TokenizerRegex, str]]) -> None:
    if not spec:
        return
    kind = spec.get("type")
    if kind == "Sequence":
        for sub in spec.get("pretokenizers") or []:
            _collect(sub, splits)
    elif kind == "Split":
        splits.append((_compile(spec), _behavior(spec)))
    elif kind == "Digits":
        # Isolated split on each numeric character, or on each maximal run of them
        individual = bool(spec.get("individual_digits", False))
        splits.append(
            (TokenizerRegex(DIGIT_PATTERN if individual else DIGIT_RUN_PATTERN), "isolated")
        )
    elif kind == "ByteLevel":
        if spec.get("add_prefix_space"):
            raise PretokenizerError("ByteLevel add_prefix_space=true is not supported")
        if spec.get("use_regex", True):
            splits.append((TokenizerRegex(GPT2_PATTERN), "isolated"))
    else:
        raise PretokenizerError(f"unsupported pre-tokenizer {kind!r}")


def _compile(spec: dict) -> TokenizerRegex:
    pattern = spec.get("pattern") or {}
    if "Regex" in pattern:
        return TokenizerRegex(pattern["Regex"])
    if "String" in pattern:
        return TokenizerRegex(regex.escape(pattern["String"]))
    raise PretokenizerError(f"Split without a pattern: {spec}")


def _behavior(spec: dict) -> str:
    behavior, invert = spec.get("behavior"), bool(spec.get("invert"))
    if behavior == "Isolated" and not invert:
        return "isolated"
    if behavior == "Removed" and invert:
        return "keep_matches"
    raise PretokenizerError(f"unsupported Split behavior {behavior!r} (invert={invert})")
