"""What a tokenizer.json says of SentencePiece: whether it is one, and whether midword models it.

A SentencePiece BPE file (Llama 2, Mistral v1, Gemma: byte fallback, spaces written ``▁``)
is recognised by `is_sentencepiece`; `check_sentencepiece` reads the two settings the
tokenizer needs (a dummy ``▁`` in front of the text, a split before every space) from its
normalizer, pre-tokenizer and decoder, and refuses, by name, every setting that
engine/tokenize/sentencepiece.py does not model exactly (`UnsupportedSentencePiece`). Only the
file's JSON is read here: no vocabulary, no tables.

Example:
    >>> is_sentencepiece({"model": {"type": "BPE", "byte_fallback": True}})
    True
    >>> check_sentencepiece({"model": {"type": "BPE"}}, Path("t.json"))
    Traceback (most recent call last):
    ...
    midword.engine.errors.UnsupportedSentencePiece: t.json: SentencePiece without byte_fallback (unknown characters become <unk>) is not supported
"""

from __future__ import annotations

from pathlib import Path

from ..errors import UnsupportedSentencePiece

__all__ = ["SPACE_PIECE", "UnsupportedSentencePiece", "check_sentencepiece", "is_sentencepiece"]

SPACE_PIECE = "\u2581"  # how SentencePiece writes a space


def is_sentencepiece(spec: dict) -> bool:
    """A BPE model with byte fallback or ``▁`` spaces and no ByteLevel step."""
    model = spec.get("model") or {}
    text = str(spec.get("normalizer")) + str(spec.get("pre_tokenizer")) + str(spec.get("decoder"))
    return model.get("type") == "BPE" and (
        bool(model.get("byte_fallback")) or SPACE_PIECE in text or "Metaspace" in text
    )


def check_sentencepiece(spec: dict, file: Path) -> tuple[bool, bool]:
    """(dummy prefix, split before every space) of a supported file; raises
    :class:`UnsupportedSentencePiece` naming any feature that is not modelled exactly.

    >>> spec = {"model": {"type": "BPE", "byte_fallback": True}, "normalizer": {"type": "Replace",
    ...         "pattern": {"String": " "}, "content": "▁"}}
    >>> check_sentencepiece(spec, Path("t.json"))
    (False, False)
    """
    model = spec["model"]
    bad = _model_problem(model)
    if bad:
        raise UnsupportedSentencePiece(f"{file}: SentencePiece {bad} is not supported")
    lead, replaced = _normalizer(spec.get("normalizer"), file)
    pre_lead, split, pre_replaced = _pre_tokenizer(spec.get("pre_tokenizer"), replaced, file)
    if not (replaced or pre_replaced):
        raise UnsupportedSentencePiece(f"{file}: spaces are never written as '▁' (no Replace)")
    _decoder(spec.get("decoder"), file)
    return lead or pre_lead, split


def _model_problem(model: dict) -> str | None:
    if not model.get("byte_fallback"):
        return "without byte_fallback (unknown characters become <unk>)"
    for key in ("dropout", "continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            return f"{key}={model[key]!r}"
    if model.get("ignore_merges"):
        return "ignore_merges (a whole text found in the vocabulary is one token)"
    return None


def _normalizer(spec: dict | None, file: Path) -> tuple[bool, bool]:
    """(prepends '▁', replaces ' ' with '▁') for Prepend / Replace, alone or in a Sequence."""
    parts = (
        (spec.get("normalizers") or [] if spec.get("type") == "Sequence" else [spec])
        if spec
        else []
    )
    lead = replaced = False
    for part in parts:
        kind = part.get("type")
        if kind == "Prepend" and part.get("prepend") == SPACE_PIECE:
            lead = True
        elif kind == "Replace" and _is_space_replace(part):
            replaced = True
        else:
            raise UnsupportedSentencePiece(f"{file}: SentencePiece normalizer {kind!r} ({part})")
    return lead, replaced


def _is_space_replace(part: dict) -> bool:
    return (part.get("pattern") or {}).get("String") == " " and part.get("content") == SPACE_PIECE


def _pre_tokenizer(spec: dict | None, replaced: bool, file: Path) -> tuple[bool, bool, bool]:
    """(dummy prefix, split, replaces spaces) of Metaspace / a no-op Split / nothing."""
    if not spec:
        return False, False, False
    parts = spec.get("pretokenizers") or [] if spec.get("type") == "Sequence" else [spec]
    lead = split = replaces = False
    for part in parts:
        kind = part.get("type")
        if kind == "Split" and replaced and (part.get("pattern") or {}).get("String") == " ":
            continue  # spaces are already '▁' when it runs: it never splits
        if kind != "Metaspace" or part.get("replacement") != SPACE_PIECE:
            raise UnsupportedSentencePiece(f"{file}: SentencePiece pre_tokenizer {kind!r} ({part})")
        scheme = part.get("prepend_scheme") or (
            "always" if part.get("add_prefix_space") else "never"
        )
        if scheme != "never":
            raise UnsupportedSentencePiece(
                f"{file}: Metaspace prepend_scheme {scheme!r} is not supported: it adds the "
                "dummy '▁' only where the text does not start with a space, so ' x' and 'x' "
                "encode alike"
            )
        replaces = True
        split = split or bool(part.get("split", True))
    return lead, split, replaces


def _decoder(spec: dict | None, file: Path) -> None:
    known = {"Replace", "ByteFallback", "Fuse", "Strip", "Metaspace"}
    parts = (
        (spec.get("decoders") or [] if spec.get("type") == "Sequence" else [spec]) if spec else []
    )
    for part in parts:
        if part.get("type") not in known:
            raise UnsupportedSentencePiece(f"{file}: SentencePiece decoder {part.get('type')!r}")
