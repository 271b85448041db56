"""Merges read off the token bytes (`TokenMerges`) are the packed table's (`MergeTable`):
the same lookups and the same BPE, for short words (a rescan per merge) and long runs
(each pair's merge kept)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from midword.engine import load_tokenizer
from midword.engine.tokenize.bpe import RESCAN_UP_TO, MergeTable, TokenMerges, bpe_apply

from midword.testing import CORPUS, tokenizer_path

NAMES = ["qwen3", "llama3", "gpt4o"]


@pytest.fixture(scope="module", params=NAMES)
def both(request: pytest.FixtureRequest) -> tuple[object, MergeTable]:
    tok = load_tokenizer(tokenizer_path(request.param))
    assert isinstance(tok.merges, TokenMerges)
    formed = np.flatnonzero((tok.left >= 0) & tok.reachable)
    return tok, MergeTable.of_normal_form(tok.left, tok.right, tok.rank, formed)


def _words(tok: object, seed: int) -> list[bytes]:
    """The corpus's pre-tokens, long runs, and random bytes (invalid UTF-8 too)."""
    rng = random.Random(seed)
    words = [w.encode() for text in CORPUS for w in tok.pretokenizer.split(text)]  # type: ignore[attr-defined]
    runs = [c * n for c in (b"=", b" ", b"\n", b"-", b"a", b"0") for n in (15, 16, 17, 40, 300)]
    runs += [b"0123456789abcdef" * 12, b"very_long_name_" * 10, "中文字".encode() * 20]
    noise = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 60))) for _ in range(300)]
    return words + runs + noise


def test_bpe_is_the_packed_tables(both: tuple[object, MergeTable]) -> None:
    tok, packed = both
    for word in _words(tok, 0):
        syms = [int(tok.byte_ids[b]) for b in word]  # type: ignore[attr-defined]
        assert bpe_apply(syms, tok.merges) == bpe_apply(syms, packed), word  # type: ignore[attr-defined]
    assert any(len(w) > RESCAN_UP_TO for w in _words(tok, 0))


def test_lookups_are_the_packed_tables(both: tuple[object, MergeTable]) -> None:
    """Every merge's pair, and pairs that merge to nothing (or to a token formed otherwise)."""
    tok, packed = both
    merges = tok.merges  # type: ignore[attr-defined]
    formed = np.flatnonzero((tok.left >= 0) & tok.reachable).tolist()  # type: ignore[attr-defined]
    rng = random.Random(1)
    pairs = [(int(tok.left[t]), int(tok.right[t])) for t in rng.sample(formed, 3000)]  # type: ignore[attr-defined]
    pairs += [(rng.choice(formed), rng.choice(formed)) for _ in range(3000)]
    pairs += [(int(tok.right[t]), int(tok.left[t])) for t in rng.sample(formed, 3000)]  # type: ignore[attr-defined]
    for a, b in pairs:
        assert merges.get(a, b) == packed.get(a, b), (a, b)
    assert len(merges) == len(packed)
