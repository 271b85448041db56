"""DeepSeek-Coder GGUF files (v1: 1.3B, 6.7B, 33B): ``tokenizer.ggml.pre = deepseek-coder``
rebuilt as the model's own tokenizer.json has it, served exactly by midword (split, encoder
and covering trees against ``tokenizers`` and the brute-force oracle), and a tiny model
written as llama.cpp writes DeepSeek-Coder (llama, linear rope factor 4) completed end
to end. The tokenizer is a DeepSeek-Coder-like one: the shipped model's vocabulary and
merges under DeepSeek-Coder's pre-tokenizer."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from midword.engine import load_engine, load_tokenizer
from midword.engine.gguf import convert as mg
from midword.engine.tokenize.bytelevel import chars_to_bytes
from midword.engine.tokenize.pretok import parse_pretokenizer
from tokenizers import Tokenizer

from ..oracle import (
    assert_trees_match_brute_force,
    real_encoder,
)
from .test_gguf import DEFAULT_TOKENIZER, EXTRA_TEXTS, python_sources, write_vocab_gguf
from .test_gguf_rope import DEEPSEEK_LINEAR, tiny_model, write_file

gguf = pytest.importorskip("gguf")


def _split(pattern: str) -> dict:
    return {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}


# As DeepSeek-Coder's tokenizer.json writes it (llama.cpp's llama-vocab.cpp lists the same
# regexes for 'deepseek-coder', with "\p{N}" for the Digits step)
DEEPSEEK_CODER_PRE = {
    "type": "Sequence",
    "pretokenizers": [
        _split("[\r\n]"),
        _split("\\s?\\p{L}+"),
        _split("\\s?\\p{P}+"),
        _split("[一-龥ࠀ-一가-퟿]+"),
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
    ],
}
DEEPSEEK_TEXTS = [
    "a\r\nb", "x = 12045\r\n", "foo(bar, baz)", "  return x;", "中文字テキスト한국어 abc",
    "don't ...!!", "\t\tif (a && b) {\n", "é\u0301 ½ ⅻ ٣", "a  \n  b", "!!!x", " .5",
]  # fmt: skip


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = json.loads(DEFAULT_TOKENIZER.read_text())
    spec["pre_tokenizer"] = DEEPSEEK_CODER_PRE
    path = tmp_path_factory.mktemp("ds") / "reference.json"
    path.write_text(json.dumps(spec, ensure_ascii=False))
    return path


@pytest.fixture(scope="module")
def rebuilt(reference: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reference written to GGUF metadata as llama.cpp's converter does, rebuilt."""
    folder = tmp_path_factory.mktemp("rebuilt")
    write_vocab_gguf(folder / "v.gguf", json.loads(reference.read_text()), "deepseek-coder")
    (folder / "tokenizer.json").write_text(
        json.dumps(mg.tokenizer_json(mg.GGUFFile(folder / "v.gguf")), ensure_ascii=False)
    )
    return folder / "tokenizer.json"


def test_rebuilt_pre_tokenizer_is_the_models(rebuilt: Path) -> None:
    assert json.loads(rebuilt.read_text())["pre_tokenizer"] == DEEPSEEK_CODER_PRE


def test_split_of_every_character_like_tokenizers() -> None:
    """midword's split (Python ``regex``) against ``tokenizers``' (Oniguruma) over every
    code point at once and random mixes of the characters each split tests."""
    ours = parse_pretokenizer(DEEPSEEK_CODER_PRE)
    theirs = Tokenizer.from_str(
        json.dumps(
            {**json.loads(DEFAULT_TOKENIZER.read_text()), "pre_tokenizer": DEEPSEEK_CODER_PRE}
        )
    ).pre_tokenizer

    def hf_split(text: str) -> list[str]:
        return [chars_to_bytes(p).decode() for p, _ in theirs.pre_tokenize_str(text)]

    # every code point, those of Unicode versions newer than Oniguruma's included
    every = "".join(map(chr, [*range(1, 0xD800), *range(0xE000, 0x110000)]))
    assert ours.split(every) == hf_split(every)
    rng = random.Random(7)
    alphabet = [*"ab Z\r\n\t.,(!'_1٣²中한ࠀ\u3000\u00a0é", "  ", "\r\n", "...", "中文"]
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 14)))
        assert ours.split(text) == hf_split(text), text


def test_encoder_matches_the_reference(reference: Path, rebuilt: Path) -> None:
    """The rebuilt file through ``tokenizers`` and through midword's encoder give the
    reference's ids on code, the edge cases of the other tests and DeepSeek's own."""
    ref, ours = real_encoder(reference), real_encoder(rebuilt)
    tok = load_tokenizer(rebuilt, use_cache=False)
    texts = DEEPSEEK_TEXTS + EXTRA_TEXTS + python_sources(30)
    for text in texts:
        want = ref.encode(text, add_special_tokens=False).ids
        assert ours.encode(text, add_special_tokens=False).ids == want, text[:60]
        assert tok.encode(text) == want, text[:60]
    pieces = ref.encode("x = 12\r\n", add_special_tokens=False).tokens
    assert pieces[-4:] == ["1", "2", "č", "Ċ"]  # single digits, CR and LF alone


def test_trees_against_brute_force(rebuilt: Path) -> None:
    """Covering trees of the rebuilt tokenizer equal tests/oracle.py's brute force over
    the real encoder, on prefixes ending in digits, words, punctuation, CR/LF and CJK."""
    eng, hf = load_engine(str(rebuilt)), real_encoder(rebuilt)
    rng = random.Random(11)
    prefixes = [b"x = 12", b"foo(ba", b"a\r\n", b"a\r", b"  ret", b"don't", b"x..", b"\n    1"]
    prefixes += ["中文字".encode()[:7], "a 한".encode()]
    assert_trees_match_brute_force(eng, hf, prefixes, rng)


def test_complete_accepts_a_deepseek_coder_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """`midword complete --model x.gguf` end to end (in this process: no second torch
    start) on a file written as llama.cpp writes DeepSeek-Coder: llama, linear rope
    factor 4 (rope base 100,000), 'deepseek-coder'."""
    from midword.cli import main

    source = tiny_model(DEEPSEEK_LINEAR, theta=100000.0, max_positions=64, seed=3)
    file = write_file(tmp_path / "ds.gguf", source, pre="deepseek-coder")
    monkeypatch.setenv("MIDWORD_CACHE", str(tmp_path / "cache"))
    argv = ["complete", "--model", str(file), "--backend", "torch", "--device", "cpu"]
    argv += ["--max-tokens", "3", "--json"]  # the conversion (llama.cpp runs the file as is)
    assert main([*argv, "x = 12"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out.splitlines()[-1])["completion"] is not None
    assert "dequantizing ds.gguf" in err
    (folder,) = (tmp_path / "cache" / "gguf").iterdir()
    config = json.loads((folder / "config.json").read_text())
    assert config["rope_parameters"] == {**DEEPSEEK_LINEAR, "rope_theta": 100000.0}
    spec = json.loads((folder / "tokenizer.json").read_text())
    assert spec["pre_tokenizer"] == DEEPSEEK_CODER_PRE
