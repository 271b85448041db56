"""Pre-tokenization: the regex splits that come before BPE.

A :class:`Pretokenizer` is a chain of regex splits (each applied inside the
pieces of the previous one, as Hugging Face ``Sequence`` pre-tokenizers do).
Supported split encodings: ``Split`` with ``Isolated`` behaviour, ``Split``
with ``Removed`` + ``invert: true`` (the GPT-4o/GPT-3.5 files; the same thing
when the pattern covers all text), and ``ByteLevel`` with ``use_regex`` (the
GPT-2 pattern).

>>> p = Pretokenizer([(regex.compile(r"\\p{L}+|\\s+|\\p{N}{1,3}|[^\\s\\p{L}\\p{N}]+"), "isolated")])
>>> p.split("ab  12345!")
['ab', '  ', '123', '45', '!']
"""

from __future__ import annotations

from dataclasses import dataclass

import regex

GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


class PretokenizerError(ValueError):
    """The pre-tokenizer configuration is not one midword supports."""


@dataclass
class Pretokenizer:
    """A chain of regex splits; ``behaviors[i]`` is 'isolated' or 'keep_matches'."""

    splits: list[tuple[regex.Pattern[str], str]]

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Character spans of the pre-tokens of ``text``."""
        pieces = [(0, len(text))] if text else []
        for pattern, behavior in self.splits:
            nxt: list[tuple[int, int]] = []
            for start, end in pieces:
                nxt.extend(_split_piece(pattern, behavior, text, start, end))
            pieces = nxt
        return pieces

    def split(self, text: str) -> list[str]:
        return [text[s:e] for s, e in self.spans(text)]

    def boundaries(self, text: str) -> list[int]:
        """Character offsets where one pre-token ends and the next starts (0 excluded)."""
        return [e for _, e in self.spans(text)]


def _split_piece(
    pattern: regex.Pattern[str], behavior: str, text: str, start: int, end: int
) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    pos = start
    for m in pattern.finditer(text, start, end):
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
    splits: list[tuple[regex.Pattern[str], str]] = []
    _collect(spec, splits)
    return Pretokenizer(splits)


def _collect(spec: dict | None, splits: list[tuple[regex.Pattern[str], str]]) -> None:
    if not spec:
        return
    kind = spec.get("type")
    if kind == "Sequence":
        for sub in spec.get("pretokenizers") or []:
            _collect(sub, splits)
    elif kind == "Split":
        splits.append((_compile(spec), _behavior(spec)))
    elif kind == "ByteLevel":
        if spec.get("add_prefix_space"):
            raise PretokenizerError("ByteLevel add_prefix_space=true is not supported")
        if spec.get("use_regex", True):
            splits.append((regex.compile(GPT2_PATTERN), "isolated"))
    else:
        raise PretokenizerError(f"unsupported pre-tokenizer {kind!r}")


def _compile(spec: dict) -> regex.Pattern[str]:
    pattern = spec.get("pattern") or {}
    if "Regex" in pattern:
        return regex.compile(pattern["Regex"])
    if "String" in pattern:
        return regex.compile(regex.escape(pattern["String"]))
    raise PretokenizerError(f"Split without a pattern: {spec}")


def _behavior(spec: dict) -> str:
    behavior, invert = spec.get("behavior"), bool(spec.get("invert"))
    if behavior == "Isolated" and not invert:
        return "isolated"
    if behavior == "Removed" and invert:
        return "keep_matches"
    raise PretokenizerError(f"unsupported Split behavior {behavior!r} (invert={invert})")
