"""GGUF tokenizers rebuilt from metadata, held to llama.cpp's own tokenizer.

The vocabulary-only files llama.cpp tests its tokenizer with (``ggml-vocab-*.gguf``) are
rebuilt as midword loads any GGUF file; each is exact (covering trees equal the
brute-force oracle over ``llama_tokenize``, tests/llama_vocab_support.py) or refused at
load by a reason that names what is not modelled. Never silently wrong.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from midword.engine import BYTE_TO_CHAR, build_tree, load_engine

from ..oracle import assert_trees_match_brute_force, real_encoder
from .test_gguf import DEFAULT_TOKENIZER
from .test_gguf_deepseek import DEEPSEEK_CODER_PRE


# ------------------------------------------------------------------ without llama.cpp
@pytest.fixture(scope="module")
def shadowing_added_text(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """DeepSeek-Coder's shape: chained splits (the tail's head-key shortcut), and added
    text 'ő' with the bytes of a vocabulary token 'Åĳ' of a lower id (its 'õ' 32000
    and 'Ãµ')."""
    spec = json.loads(DEFAULT_TOKENIZER.read_text())
    spec["pre_tokenizer"] = DEEPSEEK_CODER_PRE
    size = 1 + max(spec["model"]["vocab"].values())
    left, right = (BYTE_TO_CHAR[b] for b in "ő".encode())
    spec["model"]["vocab"][left + right] = size
    merges = spec["model"]["merges"]
    merges.append(f"{left} {right}" if isinstance(merges[0], str) else [left, right])
    spec["added_tokens"].append(
        {"id": size + 1, "content": "ő", "single_word": False, "lstrip": False,
         "rstrip": False, "normalized": False, "special": False}
    )  # fmt: skip
    path = tmp_path_factory.mktemp("shadow") / "tokenizer.json"
    path.write_text(json.dumps(spec, ensure_ascii=False))
    return path


def test_added_text_shadowing_a_vocabulary_token(shadowing_added_text: Path) -> None:
    """The tail no longer crashes on an added token without bytes of its own, and the
    added token, not the shadowed vocabulary token, is the one the trees hold (as the
    encoder gives it): equal to the brute-force oracle over ``tokenizers``."""
    eng = load_engine(str(shadowing_added_text))
    hf = real_encoder(shadowing_added_text)
    shadowed, added = eng.tok.size - 2, eng.tok.size - 1
    assert eng.tok.token_bytes[shadowed] is None
    assert eng.tok.token_bytes[added] == "ő".encode()
    for text in ["  caf\u0151 x", "\u0151\u0151", "x = \u0151t\u0151"]:
        assert eng.tok.encode(text) == hf.encode(text).ids
    prefixes = [b"hello wor", b"  caf", b"  caf\xc5", "caf\u0151".encode(), b"x = 12", b"a\r\n  d"]
    assert_trees_match_brute_force(eng, hf, prefixes, random.Random(5))
    nodes = build_tree(eng, b"caf\xc5").nodes
    assert any(added in n.leaves for n in nodes)  # the added '\u0151' covers the partial char
