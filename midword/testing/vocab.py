"""Vocabularies derived from real ones for tests: the same tokenizer without some bytes.

SmolLM2 and the StarCoder family lack single-byte tokens for some bytes. ``derive_tokenizer``
makes a small vocabulary like that from any ByteLevel tokenizer.json, so the engine's
exactness tests and the language server's tests run on one with a tiny model.
"""

from __future__ import annotations

import json
from pathlib import Path

from midword.engine import BYTE_TO_CHAR

__all__ = ["HOLDING_MISSING", "MISSING", "derive_tokenizer", "with_special_tokens"]

# most of SmolLM2's missing bytes: control characters, bytes UTF-8 never uses, the 4-byte
# leads 0xf1 and 0xf2; and two vocabulary entries that hold one (never to be offered)
MISSING = (0x04, 0x13, 0x14, 0x1D, 0xC0, 0xC1, 0xF1, 0xF2, *range(0xF5, 0x100))
HOLDING_MISSING = ["a\x04", "\x13("]  # vocabulary entries no merge forms


def derive_tokenizer(source: Path, missing: tuple[int, ...], extra: list[str], out: Path) -> Path:
    """A valid tokenizer.json: ``source`` without the single-byte tokens of ``missing``
    and every token and merge that holds one, ids renumbered in order, plus ``extra``
    texts as vocabulary entries that no merge forms."""
    spec = json.loads(source.read_text())
    gone = {BYTE_TO_CHAR[b] for b in missing}
    model = spec["model"]
    kept = [t for t, _ in sorted(model["vocab"].items(), key=lambda kv: kv[1]) if not gone & set(t)]
    kept += ["".join(BYTE_TO_CHAR[b] for b in text.encode()) for text in extra]
    vocab = {t: i for i, t in enumerate(kept)}
    merges = [m for m in model["merges"] if not gone & set("".join(m))]
    for added in spec["added_tokens"]:
        added["id"] = vocab[added["content"]]
    spec["model"] = {**model, "vocab": vocab, "merges": merges}
    out.write_text(json.dumps(spec))
    return out


def with_special_tokens(source: Path, tokens: tuple[str, ...], out: Path) -> Path:
    """``source`` (a tokenizer.json) with exactly ``tokens`` as its special tokens besides
    its first (the end of text), added after its vocabulary: fill-in-the-middle sentinels
    for tests (``engine/sample/fim.py`` finds them). Special tokens ``source`` has already (the
    shipped model's FIM sentinels) are dropped first and the ids renumbered, so tests see
    the same tokens whatever the source carries."""
    spec = json.loads(source.read_text())
    added = sorted(spec["added_tokens"], key=lambda a: a["id"])
    dropped = {a["content"] for a in added[1:] if a.get("special")}
    ordered = sorted(spec["model"]["vocab"].items(), key=lambda kv: kv[1])
    vocab = {text: i for i, (text, _) in enumerate(t for t in ordered if t[0] not in dropped)}
    spec["model"]["vocab"] = vocab
    kept = [a for a in added if a["content"] not in dropped]
    for a in kept:
        a["id"] = vocab.get(a["content"], a["id"])
    for offset, text in enumerate(tokens):
        kept.append(
            {
                "id": len(vocab) + offset,
                "content": text,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
        )
    spec["added_tokens"] = kept
    out.write_text(json.dumps(spec))
    return out
