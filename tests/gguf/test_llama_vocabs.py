"""GGUF tokenizers rebuilt from metadata, held to llama.cpp's own tokenizer.

The vocabulary-only files llama.cpp tests its tokenizer with (``ggml-vocab-*.gguf``) are
rebuilt as midword loads any GGUF file; each is exact (covering trees equal the
brute-force oracle over ``llama_tokenize``, tests/llama_vocab_support.py) or refused at
load by a reason that names what is not modelled. Never silently wrong.
"""

from __future__ import annotations

import itertools
import json
import random
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from midword.engine import (
    BYTE_TO_CHAR,
    GGUFError,
    TokenizerError,
    build_tree,
    load_engine,
    load_tokenizer,
)
from midword.engine.gguf.added import CONTROL, NORMAL, USER_DEFINED, as_llama_cpp_reads
from midword.engine.gguf.sentencepiece import (
    SentencePieceVocab,
    _rank_bpe,
    sentencepiece_merges,
    spm_segment,
)

from ..llama_vocab_support import (
    CODE_FAMILIES,
    NAMES,
    LlamaVocab,
    assert_trees_match_llama,
    inp_texts,
    vocab_file,
)
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


# ------------------------------------------------------------------ against llama.cpp
# what each of llama.cpp's files is: exact, or refused at load with these words
EXACT = (
    "starcoder", "refact", "deepseek-coder", "qwen2", "llama-spm", "phi-3", "gpt-2", "llama-bpe",
)  # fmt: skip
REFUSED = {
    "deepseek-llm": "'deepseek-llm' is not a pre-tokenizer midword models exactly",
    "command-r": "Command-R's tokenizer.json also NFC-normalizes",
    "falcon": "Falcon's tokenizer.json splits digit runs",
    "mpt": "MPT's GPT-NeoX tokenizer.json also NFC-normalizes",
    "gemma-4": "tokenizer.ggml.model = 'gemma4'",
}
# edge prefixes: runs of spaces, digits, partial UTF-8, CJK, emoji, code
EDGES = [
    b" ", b"  ", b"   ", b"\t\t", b"a  b", b"x\n\n  ", b"12", b"x = 12345", b"v1.2.3",
    b"  \xe4", b"a  \xe4\xb8", "caf\u00e9".encode(), b"caf\xc3", "中文字".encode(),
    "😀 ".encode(), "😀".encode()[:3], b"def f(self):\n    ret", b"if (a && b) {\n\t",
    b"don't", b"x->y", "a\u00a0b".encode(),
]  # fmt: skip
CUT = 6  # each .inp text cut at every byte position up to this


def test_every_file_is_exact_or_refused_by_name() -> None:
    """The 13 files split into EXACT and REFUSED, and nothing else."""
    assert sorted([*EXACT, *REFUSED]) == sorted(NAMES)
    assert set(CODE_FAMILIES) <= set(EXACT)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_at_load_with_the_reason(name: str) -> None:
    with pytest.raises(TokenizerError, match=re.escape(REFUSED[name])):
        load_tokenizer(vocab_file(name))


@pytest.fixture(scope="module")
def loaded() -> Iterator[Callable[[str], tuple[object, LlamaVocab]]]:
    """(midword's engine, llama.cpp's vocabulary) of a file, loaded once per module."""
    seen: dict[str, tuple[object, LlamaVocab]] = {}

    def get(name: str) -> tuple[object, LlamaVocab]:
        if name not in seen:
            path = vocab_file(name)
            seen[name] = (load_engine(str(path)), LlamaVocab(name))
        return seen[name]

    yield get


@pytest.mark.parametrize("name", EXACT)
def test_encodings_equal_llama_cpp(name: str, loaded) -> None:  # noqa: ANN001
    """midword's encoder gives llama_tokenize's ids on llama.cpp's own test texts and the
    edge prefixes (after the model's own steps: Qwen2's NFC), and every token's bytes are
    llama.cpp's piece."""
    eng, vocab = loaded(name)
    texts = inp_texts(name) + [e.decode("utf-8", "ignore") for e in EDGES]
    for text in texts:
        assert [int(t) for t in eng.tok.encode(text)] == vocab.tokenize(text), (name, text)
    for i, spelled in enumerate(eng.tok.token_bytes[: vocab.size]):
        assert spelled is None or spelled == vocab.token_bytes[i], (name, i, spelled)


def cut_prefixes(name: str, share: float = 1.0) -> list[bytes]:
    """llama.cpp's test texts cut at every byte position up to CUT (``share`` of those
    cuts, drawn by the file's name), and the edges."""
    cuts = sorted({t.encode()[:k] for t in inp_texts(name) for k in range(1, CUT + 1)})
    kept = random.Random(name).sample(cuts, round(len(cuts) * share))
    return sorted(set(kept) | set(EDGES))


@pytest.mark.parametrize("name", EXACT)
def test_trees_against_llama_cpp(name: str, loaded) -> None:  # noqa: ANN001
    """Covering trees equal the brute force over llama.cpp's tokenizer
    (tests/llama_vocab_support.py)."""
    eng, vocab = loaded(name)
    # Half the cuts of each file (a brute force costs seconds a prefix): each file has its
    # own half, and the 21 edges always go in.
    prefixes = cut_prefixes(name, share=0.5)
    assert_trees_match_llama(eng, vocab, prefixes, seed=len(name), n_sample=25)


def test_a_word_and_a_lead_byte_under_nfc(loaded) -> None:  # noqa: ANN001
    """Every sequence of Qwen2's tree at 'caf\xc3', every leaf included, starts the
    encoding of some text. ('caf', '\xc3') does only when particular text follows the
    character ("cafÈ다" encodes as 'caf' '\xc3' '\x88다'), which no probe supplies: it is
    confirmed through its leaves, each confirmed by llama.cpp."""
    from ..oracle import canonical_prefixes, confirmed_through_leaves, tree_sequences

    eng, vocab = loaded("qwen2")
    tree = build_tree(eng, b"caf\xc3")
    trunk = tuple(int(t) for t in tree.trunk)
    ends = [int(t) for n in tree.nodes if n.ends_at_prefix_end for t in n.leaves]
    every = {trunk + s for s in tree_sequences(tree, ends)}
    memo: dict[tuple[int, ...], bool] = {}
    bad = every - canonical_prefixes(vocab, vocab, sorted(every), memo)  # type: ignore[arg-type]
    word_and_lead = (vocab.token_bytes.index(b"caf"), vocab.token_bytes.index(b"\xc3"))
    assert bad == {word_and_lead}  # (the probes miss it)
    assert bad == confirmed_through_leaves(vocab, vocab, bad, every, memo)  # type: ignore[arg-type]
    assert tuple(vocab.tokenize("caf\u00c8\ub2e4")[:2]) == word_and_lead


# ------------------------------------------------------------------ the rules, without llama.cpp
def _tied_runs_vocab() -> SentencePieceVocab:
    """Llama 2's shape: letters, '▁a'-style words, and the runs of '▁' up to 16 all tied
    at the lowest score."""
    space = "\u2581"
    texts = [space, "a", "b", space + "a", "ab", space + "ab", "ba"]
    scores = [-1.0, -2.0, -3.0, -4.0, -5.0, -6.0, -7.0]
    texts += [space * n for n in range(2, 17)]
    scores += [-1e9] * 15
    return SentencePieceVocab(texts, [NORMAL] * len(texts), scores, "test")


def test_tied_runs_merge_as_llama_cpp_breaks_ties() -> None:
    """The runs' merges, ranked after every other, give llama.cpp's segmentation (ties to
    the leftmost pair) on every text of '▁', 'a' and 'b' up to 9 characters, and runs up
    to 70."""
    vocab = _tied_runs_vocab()
    merges = sentencepiece_merges(vocab)
    score = dict(zip(vocab.tokens, vocab.scores, strict=True))
    assert [len(m[0]) + len(m[1]) for m in merges[-15:]][:4] == [2, 4, 8, 16]
    alphabet = ["\u2581", "a", "b"]
    for n in range(1, 10):
        for chars in itertools.product(alphabet, repeat=n):
            assert _rank_bpe(list(chars), merges) == spm_segment(list(chars), score)[0], chars
    for n in range(1, 70):
        assert _rank_bpe(["\u2581"] * n, merges) == spm_segment(["\u2581"] * n, score)[0]


def test_ties_that_are_not_runs_stay_refused() -> None:
    vocab = _tied_runs_vocab()
    vocab.scores[4] = vocab.scores[5]  # 'ab' and '▁ab' tie
    with pytest.raises(GGUFError, match="have the same score"):
        sentencepiece_merges(vocab)


def test_llama_cpp_control_overrides() -> None:
    """Texts llama.cpp makes control tokens: always for end-of-generation texts, for a
    FIM role only when the file names no token for it, refused when two could be it."""
    tokens = ["x", "</s>", "<｜fim▁hole｜>", "<SUF>"]
    users = [NORMAL, USER_DEFINED, USER_DEFINED, NORMAL]
    assert as_llama_cpp_reads(tokens[:3], users[:3], set()) == [NORMAL, CONTROL, CONTROL]
    assert as_llama_cpp_reads(tokens[:3], users[:3], {"fim_suf"})[2] == USER_DEFINED
    with pytest.raises(GGUFError, match="both look like llama.cpp's fim_suf token"):
        as_llama_cpp_reads(tokens, users, set())
