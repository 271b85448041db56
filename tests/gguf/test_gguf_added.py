"""Added tokens of a rebuilt tokenizer.json keep their ids (engine/gguf/added.py): where
`keeps_written_ids` spares loading the file into ``tokenizers``, ``tokenizers`` agrees."""

from __future__ import annotations

import json
from typing import Any

import pytest
from midword.engine import GGUFError
from midword.engine.gguf.added import added_token, keeps_written_ids
from midword.engine.gguf.reader import GGUFFile
from midword.engine.gguf.tokenizer import tokenizer_json
from tokenizers import Tokenizer

from ..llama_vocab_support import NAMES, vocab_file
from .test_gguf import DEFAULT_TOKENIZER


def _ids_tokenizers_gives(spec: dict[str, Any]) -> list[int | None]:
    tok = Tokenizer.from_str(json.dumps(spec))
    return [tok.token_to_id(a["content"]) for a in spec["added_tokens"]]


def _small_spec() -> dict[str, Any]:
    """The default model's tokenizer.json (ids 0..4095) with no added tokens of its own."""
    spec = json.loads(DEFAULT_TOKENIZER.read_text())
    spec["added_tokens"] = []
    return spec


def _cases(n: int, in_vocab: str) -> dict[str, tuple[list[dict[str, Any]], bool]]:
    """Added tokens placed every way, and whether the shortcut may take them."""
    return {
        "next ids in order": ([added_token(n, "<a>", True), added_token(n + 1, "<b>", False)], True),
        "none": ([], True),
        "a gap after the vocabulary": ([added_token(n + 1, "<a>", True)], False),
        "a gap between two": ([added_token(n, "<a>", True), added_token(n + 2, "<b>", True)], False),
        "out of order": ([added_token(n + 1, "<a>", True), added_token(n, "<b>", True)], False),
        "among the vocabulary": ([added_token(3, "<a>", True)], False),
        "text the vocabulary has": ([added_token(n, in_vocab, True)], False),
        "empty text": ([added_token(n, "", True)], False),
        "the same text twice": ([added_token(n, "<a>", True), added_token(n + 1, "<a>", False)], False),
    }  # fmt: skip


@pytest.mark.parametrize("case", list(_cases(0, "")))
def test_the_shortcut_agrees_with_tokenizers(case: str) -> None:
    spec = _small_spec()
    vocab = spec["model"]["vocab"]
    added, expected = _cases(len(vocab), next(iter(vocab)))[case]
    spec["added_tokens"] = added
    assert keeps_written_ids(vocab, added) is expected
    if expected:
        assert _ids_tokenizers_gives(spec) == [a["id"] for a in added]


def test_a_vocabulary_with_a_hole_is_asked() -> None:
    """Ids that are not 0..n-1 (a token left out, as UNUSED ones are) go to tokenizers."""
    spec = _small_spec()
    vocab = spec["model"]["vocab"]
    del vocab[next(iter(vocab))]
    assert not keeps_written_ids(vocab, [added_token(len(vocab), "<a>", True)])


@pytest.mark.parametrize("name", NAMES)
def test_llama_cpp_vocabularies_keep_their_ids(name: str) -> None:
    """Every file of llama.cpp's tests rebuilt: its added tokens have, in tokenizers, the
    ids they are written with, whichever way that was made sure of; Qwen2's and Llama 3's
    take the shortcut."""
    try:
        spec = tokenizer_json(GGUFFile(vocab_file(name)))
    except GGUFError:
        pytest.skip(f"{name}: refused at load (test_llama_vocabs.py says why)")
    added = spec["added_tokens"]
    assert _ids_tokenizers_gives(spec) == [a["id"] for a in added]
    if name in ("qwen2", "llama-bpe"):
        assert keeps_written_ids(spec["model"]["vocab"], added)
