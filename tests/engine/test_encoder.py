"""The reference encoder (our BPE + pre-tokenizer) equals the real `tokenizers` library."""

from __future__ import annotations

import random

import pytest
from midword.engine import load_engine, load_tokenizer
from midword.engine.errors import TokenizerError
from tokenizers import Regex as HFRegex
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from midword.testing import CORPUS, real_encoder, tokenizer_path

CL100K = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _fragments(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    text = "".join(CORPUS)
    out = []
    for _ in range(n):
        i = rng.randrange(len(text))
        out.append(text[i : i + rng.randrange(1, 60)])
    return out


def test_encoder_matches_tokenizers(tokenizer_name: str) -> None:
    path = tokenizer_path(tokenizer_name)
    ours = load_engine(str(path)).tok
    hf = real_encoder(path)
    for text in CORPUS + _fragments(0, 400):
        assert ours.encode(text) == hf.encode(text, add_special_tokens=False).ids, repr(text)


def train_small_bpe(tmp_path, use_split: bool) -> str:
    """A small ByteLevel BPE trained here (the kind of tokenizer midword ships)."""
    tok = Tokenizer(models.BPE())
    if use_split:
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(HFRegex(CL100K), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 20, trainer=trainer)
    path = tmp_path / ("split.json" if use_split else "gpt2.json")
    tok.save(str(path))
    return str(path)


@pytest.mark.parametrize("use_split", [True, False])
def test_trained_bpe_matches(tmp_path, use_split: bool) -> None:
    path = train_small_bpe(tmp_path, use_split)
    ours = load_tokenizer(path, use_cache=False)
    hf = real_encoder(path)
    for text in CORPUS + _fragments(1, 300):
        assert ours.encode(text) == hf.encode(text, add_special_tokens=False).ids, repr(text)


def test_special_token_text_is_text() -> None:
    path = tokenizer_path("gpt4o")
    ours = load_engine(str(path)).tok
    ids = ours.encode("<|endoftext|>")
    assert len(ids) > 1 and not any(ours.is_special(i) for i in ids)
    assert ours.decode(ids) == b"<|endoftext|>"


def test_unsupported_tokenizers_are_rejected(tmp_path) -> None:
    for model in (models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]"), models.Unigram()):
        tok = Tokenizer(model)
        path = tmp_path / "t.json"
        tok.save(str(path))
        with pytest.raises(TokenizerError, match="unsupported tokenizer model"):
            load_tokenizer(path)
    sp = Tokenizer(models.BPE({"a": 0, "b": 1, "ab": 2}, [("a", "b")]))
    sp.pre_tokenizer = pre_tokenizers.Metaspace()
    sp.save(str(tmp_path / "sp.json"))
    # a SentencePiece-style file goes to that loader, which names what it cannot model
    with pytest.raises(TokenizerError, match="without byte_fallback"):
        load_tokenizer(tmp_path / "sp.json")
    with pytest.raises(TokenizerError, match="no tokenizer.json"):
        load_tokenizer(tmp_path / "missing")


def test_class_machine_matches_regex(tokenizer_name: str) -> None:
    """The class machine behind the exact leaf tables ends every anchored match where the
    regex module does (each level of a chain of splits, from every start offset)."""
    from midword.engine.tokenize.class_machine import ClassMachine

    tok = load_engine(str(tokenizer_path(tokenizer_name))).tok
    for pattern, _ in tok.pretokenizer.splits:
        machine = ClassMachine(pattern.pattern)
        for text in CORPUS + _fragments(2, 300):
            classes = machine.classes(text)
            for start in range(len(text)):
                m = pattern.match(text, start)
                want = m.end() if m is not None and m.end() > start else None
                got = machine.match_end(classes, start)
                assert got == want or (m is not None and m.end() == start), (text, start)
