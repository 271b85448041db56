"""midword's pre-tokenizers read Unicode as Hugging Face ``tokenizers`` does.

``tokenizers`` runs Split and ByteLevel regexes with Oniguruma (Unicode 16.0 tables) and
``Digits`` with Rust's ``char::is_numeric`` (17.0); the ``regex`` module midword runs them
with has 17.0 tables. Checked against ``tokenizers`` itself: the tables of
engine/tokenize/unicode_versions.py, every character test of every fixture and GGUF pattern over
every code point, the splits of the fixture tokenizers with every code point in a few
contexts, encodings of texts full of 17.0 characters, and covering trees of prefixes
ending in or after one (tests/oracle.py's brute force).
"""

from __future__ import annotations

import json
import pickle
import random
from functools import cache

import numpy as np
import pytest
import regex
from midword.engine import load_engine, load_tokenizer
from midword.engine.gguf import convert as mg
from midword.engine.tokenize.class_machine import ClassMachine
from midword.engine.tokenize.pretok import (
    DIGIT_PATTERN,
    DIGIT_RUN_PATTERN,
    TokenizerRegex,
    parse_pretokenizer,
)
from midword.engine.tokenize.unicode_versions import (
    ASSIGNED_AFTER,
    RECATEGORIZED,
    as_tokenizers_source,
    compile_as_tokenizers,
    holds_late_characters,
    late_mask,
)
from midword.engine.tree.tables import _ATOM
from tokenizers import Regex, Tokenizer, pre_tokenizers

from midword.testing import real_encoder, tokenizer_path

from ..oracle import assert_trees_match_brute_force

REGEX_FIXTURES = ["gpt35turbo", "gpt4o", "gptoss", "llama3", "qwen3", "deepseek_v3"]
ALL_FIXTURES = [*REGEX_FIXTURES, "llama2", "gemma3"]  # (SentencePiece: no regex split)
CONTEXTS = ["a{c}b", "1{c}2", " {c}", "{c}{c}", "'{c}"]
CHEAP_CONTEXTS = ["a{c}b", "{c}{c}"]
UNIFORM = regex.compile(
    r"[\p{Cn}\p{Co}]"
)  # for the 950k unassigned and private-use ones above the BMP
PROPERTY = regex.compile(r"\\[pPsSdDwW]|\[:")
CASE_GROUP = regex.compile(r"\(\?i:([^()]*)\)")


@cache
def every_code_point() -> tuple[int, ...]:
    return (*range(1, 0xD800), *range(0xE000, 0x110000))


@cache
def every_character() -> str:
    return "".join(map(chr, every_code_point()))


def late_characters() -> list[str]:
    """The characters whose properties differ between the two Unicode versions."""
    late = [chr(c) for lo, hi in ASSIGNED_AFTER for c in range(lo, hi + 1)]
    return late + [chr(c) for c in RECATEGORIZED]


def onig_runs(pattern: str, text: str) -> list[tuple[int, int]]:
    """Spans of the matches of ``pattern`` in ``text``, as Oniguruma (``tokenizers``) finds them."""
    split = pre_tokenizers.Split(Regex(pattern), behavior="removed", invert=True)
    return [tuple(offsets) for _, offsets in split.pre_tokenize_str(text)]


def hf_pre_tokenizer(spec: dict) -> pre_tokenizers.PreTokenizer:
    base = json.loads(tokenizer_path("llama3").read_text())
    return Tokenizer.from_str(json.dumps({**base, "pre_tokenizer": spec})).pre_tokenizer


def without_byte_mapping(spec: dict) -> dict:
    """The spec less its ByteLevel steps that split nothing (they only map bytes)."""
    steps = spec.get("pretokenizers") if spec.get("type") == "Sequence" else [spec]
    kept = [s for s in steps if s["type"] != "ByteLevel" or s.get("use_regex", True)]
    return {"type": "Sequence", "pretokenizers": kept}


def fixture_pre_tokenizer(name: str) -> dict:
    return json.loads(tokenizer_path(name).read_text())["pre_tokenizer"]


def split_patterns() -> list[str]:
    """Every regex Oniguruma runs in the fixtures' and the GGUF recipes' pre-tokenizers
    (the ``Digits`` steps, Rust code, have their own test)."""
    specs = [fixture_pre_tokenizer(n) for n in REGEX_FIXTURES]
    specs += [r.pre_tokenizer for r in mg.PRE_TOKENIZERS.values()]
    patterns = {p.pattern for spec in specs for p, _ in parse_pretokenizer(spec).splits}
    return sorted(patterns - {DIGIT_PATTERN, DIGIT_RUN_PATTERN})


# ------------------------------------------------------------------ the tables
def test_the_tables_are_the_difference_between_the_two_engines() -> None:
    """ASSIGNED_AFTER is exactly what the regex module assigns and Oniguruma does not,
    and each recategorized character has its stand-in's general category there."""
    text, codes = every_character(), every_code_point()
    unassigned_there = {codes[i] for lo, hi in onig_runs(r"\p{Cn}+", text) for i in range(lo, hi)}
    assigned_here = {codes[m.start()] for m in regex.finditer(r"\P{Cn}", text)}
    late = {c for lo, hi in ASSIGNED_AFTER for c in range(lo, hi + 1)}
    assert assigned_here & unassigned_there == late
    for code, stand_in in RECATEGORIZED.items():
        for category in ("Lu", "Ll", "Lt", "Lm", "Lo"):
            there = onig_runs(rf"\p{{{category}}}", chr(code)) != []
            assert there == (regex.fullmatch(rf"\p{{{category}}}", chr(stand_in)) is not None)


def character_tests() -> list[str]:
    """The character tests of those patterns (sets, escapes, literals), each once; those
    inside ``(?i:...)`` case-folded, as the patterns make them."""
    tests: set[str] = set()
    for pattern in split_patterns():
        tests.update(_ATOM.findall(CASE_GROUP.sub("", pattern)))
        for group in CASE_GROUP.findall(pattern):
            tests.update(f"(?i:{atom})" for atom in _ATOM.findall(group))
    return sorted(tests)


@pytest.mark.parametrize("test", character_tests())
def test_character_tests_answer_as_oniguruma_for_every_code_point(test: str) -> None:
    """Each character test the fixture and GGUF patterns make, as midword compiles it,
    holds for the same code points as Oniguruma's (runs of it compared): over every code
    point for a test of a property, over the BMP for literals and explicit ranges."""
    text = every_character() if PROPERTY.search(test) else every_character()[:0xD7FF]
    runs = f"(?:{test})+"
    ours = [m.span() for m in compile_as_tokenizers(runs).finditer(text)]
    assert ours == onig_runs(runs, text)


@pytest.mark.parametrize("individual", [True, False])
def test_digits_like_rust_for_every_code_point(individual: bool) -> None:
    """``Digits`` (Rust's ``char::is_numeric``, Unicode 17.0) splits every code point,
    and a run of each, as midword's digit pattern does."""
    spec = {"type": "Digits", "individual_digits": individual}
    ours, theirs = parse_pretokenizer(spec), pre_tokenizers.Digits(individual)
    text = "".join(c + c + "a" for c in every_character())
    assert ours.spans(text) == [tuple(o) for _, o in theirs.pre_tokenize_str(text)]


def test_late_characters_are_found_wherever_they_are() -> None:
    """The fast path's test (text without such characters splits on the ``regex``
    module's own tables) finds exactly the late characters, among every code point."""
    text = every_character()
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    found = {chr(c) for c in codes[late_mask(codes)]}
    assert found == set(late_characters())
    assert all(holds_late_characters(f"ab {c}") for c in found)
    assert not holds_late_characters("".join(c for c in text if c not in found))


def test_old_reading_differs_so_the_tests_can_fail() -> None:
    """The regex module alone calls a 17.0 capital a letter; midword does not."""
    assert regex.findall(r"\p{L}+", "x\ua7cey") == ["x\ua7cey"]
    assert compile_as_tokenizers(r"\p{L}+").findall("x\ua7cey") == ["x", "y"]


# ------------------------------------------------------------------ splits
def _texts(codes: list[int], contexts: list[str]) -> list[str]:
    return ["".join(ctx.replace("{c}", chr(c)) for c in codes) for ctx in contexts]


def _split_specs(name: str) -> tuple:
    spec = mg.PRE_TOKENIZERS[name[5:]].pre_tokenizer if name.startswith("gguf:") else None
    spec = without_byte_mapping(spec or fixture_pre_tokenizer(name))
    return parse_pretokenizer(spec), hf_pre_tokenizer(spec)


def _assert_same_splits(name: str, codes: list[int], contexts: list[str]) -> None:
    ours, theirs = _split_specs(name)
    for text in _texts(codes, contexts):
        want = [tuple(offsets) for _, offsets in theirs.pre_tokenize_str(text)]
        assert ours.spans(text) == want


def _uniform_above_bmp(code: int) -> bool:
    """Unassigned or private use above the BMP (950k code points of those two kinds)."""
    return code >= 0x10000 and UNIFORM.match(chr(code)) is not None


@pytest.mark.parametrize("name", REGEX_FIXTURES)
def test_splits_of_every_code_point_in_contexts_like_tokenizers(name: str) -> None:
    """One long text per context (a letter, a digit, a space or the character itself on
    either side, an apostrophe before), each holding every code point but the unassigned
    and private-use ones above the BMP (whose character tests are checked one by one
    above, and whose splits the slow test below checks): the same split lists."""
    codes = [c for c in every_code_point() if not _uniform_above_bmp(c)]
    _assert_same_splits(name, codes, CONTEXTS)


@pytest.mark.slow
@pytest.mark.parametrize("name", [*REGEX_FIXTURES, "gguf:starcoder"])
def test_splits_of_the_rest_in_contexts_like_tokenizers(name: str) -> None:
    """The unassigned and private-use code points above the BMP, between letters and
    doubled; StarCoder's recipe (``Digits`` before the GPT-2 split) also as the fast
    test checks the fixtures."""
    if name.startswith("gguf:"):
        rich = [c for c in every_code_point() if not _uniform_above_bmp(c)]
        _assert_same_splits(name, rich, CONTEXTS)
    rest = [c for c in every_code_point() if _uniform_above_bmp(c)]
    _assert_same_splits(name, rest, CHEAP_CONTEXTS)


@pytest.mark.parametrize("name", REGEX_FIXTURES)
def test_class_machine_sees_a_late_letter_as_unassigned(name: str) -> None:
    """The class machine (covering trees' pre-token model) classes a 17.0 letter with
    an unassigned code point, not with a letter; U+0295 with the lowercase letters."""
    spec = without_byte_mapping(fixture_pre_tokenizer(name))
    patterns = [p.pattern for p, _ in parse_pretokenizer(spec).splits]
    machine = ClassMachine.for_chain(patterns) if len(patterns) > 1 else ClassMachine(patterns[0])
    assert machine.char_class("\ua7ce") == machine.char_class("\u0378")
    assert machine.char_class("\ua7ce") != machine.char_class("A")
    assert machine.char_class("\u0295") == machine.char_class("\u0250")


# ------------------------------------------------------------------ encodings and trees
def _rich_texts(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    late = late_characters()
    common = [*"ab Zé1٣²'s\n\t.,(中한\u0301", "  ", "'ll", "x = 1", "don't", "ʕ"]
    return [
        "".join(
            rng.choice(late) if rng.random() < 0.5 else rng.choice(common)
            for _ in range(rng.randrange(1, 30))
        )
        for _ in range(count)
    ]


@pytest.mark.parametrize("name", ALL_FIXTURES)
def test_encodings_of_texts_full_of_late_characters(name: str) -> None:
    """midword's encoder gives ``tokenizers``' ids on texts half made of 17.0 characters."""
    path = tokenizer_path(name)
    tok, hf = load_tokenizer(path), real_encoder(path)
    for text in _rich_texts(1, 300):
        assert tok.encode(text) == hf.encode(text, add_special_tokens=False).ids, ascii(text)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["llama3", "gpt4o", "deepseek_v3"])
def test_trees_after_and_inside_late_characters(name: str) -> None:
    """Covering trees of prefixes ending after a 17.0 letter, digit or symbol, inside one,
    and after U+0295 equal the brute-force oracle's."""
    path = tokenizer_path(name)
    eng, hf = load_engine(str(path)), real_encoder(path)
    prefixes = [
        "x\ua7ce".encode(),
        "x\ua7cey".encode(),
        "x \U00011de1".encode(),
        "12\U00011de3".encode(),
        "a\u0295".encode(),
        "b\U00010940".encode()[:-1],
        "a\U0001fa8a".encode(),
    ]
    assert_trees_match_brute_force(eng, hf, prefixes, random.Random(17), n_sample=60)


# ------------------------------------------------------------------ the rewrite
V0_SETS = [
    r"[--a]", r"[+--]", r"[\s-a]", r"[]a]", r"[^]a]", r"[a&&b]", r"[a||b]", r"[a~~b]",
    r"[[]", r"[a[b]", r"[\]x]", r"[\\-a]", r"[^\r\n\p{L}\p{N}]", r"[\p{L}-z]", r"[a-\d]",
    r"(?#[)x", r"[[:alpha:]_]", r"[\x41-\x43\u00e9]", r"(?i:[\p{Lu}k])", r"\S\D\W",
]  # fmt: skip


@pytest.mark.parametrize("pattern", V0_SETS)
def test_rewrite_keeps_every_other_meaning(pattern: str) -> None:
    """Away from the late characters a rewritten pattern matches what the version-0
    pattern did (set operators and brackets inside sets are literals there)."""
    late = set(late_characters())
    text = "".join(c for c in map(chr, range(0x20, 0x3000)) if c not in late)
    old = [m.span() for m in regex.finditer(pattern, text)]
    new = [m.span() for m in compile_as_tokenizers(pattern).finditer(text)]
    assert new == old, as_tokenizers_source(pattern)


def test_split_patterns_keep_their_source_and_pickle() -> None:
    """``pattern`` is the source as written (the class machine and tables parse it)."""
    source = r"[^\r\n\p{L}\p{N}]?\p{L}+|\s+"
    compiled = TokenizerRegex(source)
    assert compiled.pattern == source
    again = pickle.loads(pickle.dumps(compiled))
    assert again.pattern == source
    assert [m.group() for m in again.finditer("x\ua7cey")] == ["x", "\ua7cey"]
