"""`SegmentEncoder`, the PSM prompt's prefix tokens kept from keystroke to keystroke by a
streaming covering tree, against the real ``tokenizers`` encoder while text is typed,
deleted and replaced at its end (the small model's tokenizer with FIM tokens, and two
real vocabularies)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from midword.engine import load_engine
from midword.engine.sample.fim import TEMPLATES

from midword.testing.fixtures import real_encoder
from midword.testing.vocab import with_special_tokens

SOURCE = Path(__file__).resolve().parents[2] / "models" / "default" / "tokenizer.json"


@pytest.mark.parametrize("name", ["fim", "gpt4o", "llama3"])
def test_segment_encoder_is_the_real_encoding_while_typing(tmp_path: Path, name: str) -> None:
    """The PSM prefix's tokens from the streaming tree (`SegmentEncoder`) are the real
    encoder's, while text is typed, deleted and replaced at its end."""
    from midword.engine.sample.fim import SegmentEncoder

    from midword.testing import CORPUS, tokenizer_path

    if name == "fim":
        path = with_special_tokens(SOURCE, TEMPLATES["qwen"].tokens, tmp_path / "tokenizer.json")
    else:
        path = tokenizer_path(name)
    encode, hf = SegmentEncoder(load_engine(str(path))), real_encoder(path)
    rng = random.Random(7)
    text = ""
    for step in range(300):
        if text and rng.random() < 0.25:
            text = text[: -rng.randint(1, min(6, len(text)))]  # backspaces
        else:
            piece = rng.choice(CORPUS)
            start = rng.randrange(len(piece))
            text += piece[start : start + rng.randint(1, 4)]
        assert encode(text) == hf.encode(text, add_special_tokens=False).ids, (step, text[-30:])
