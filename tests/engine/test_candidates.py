"""Exact scores of candidate continuations (engine/sample/candidates.py) against brute force:
every canonical token sequence covering prefix + candidate (+ each byte that ends a name,
and the end of text) scored by plain forward passes of a fake model, on a ByteLevel
tokenizer (the shipped model's) and a SentencePiece one (Mistral's, with its dummy space)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from midword.engine import PrefixError, load_engine
from midword.engine.model.fake import FakeModel
from midword.engine.sample.candidates import likeliest_continuation, score_continuations
from midword.engine.sample.sampling import ByteSampler

from midword.testing import real_encoder, tokenizer_path

from ..lm_oracle import LMOracle, _lse

TOL = 1e-9
NEG_INF = float("-inf")
DEFAULT = Path(__file__).resolve().parents[2] / "models" / "default" / "tokenizer.json"
# the bytes after which a name has ended, written out here apart from the engine's table
ENDING = [b for b in range(128) if not (chr(b).isalnum() or chr(b) == "_")]


class _Setup:
    """An engine, a fake model, a sampler on it and the brute-force oracle beside it."""

    def __init__(self, name: str) -> None:
        path = DEFAULT if name == "default" else tokenizer_path(name)
        self.engine = load_engine(str(path.parent if name == "default" else path))
        model = FakeModel(self.engine.tok.size, seed=3, scale=1.0)
        self.sampler = ByteSampler(model, self.engine, track_prefix=False)
        hf = real_encoder(path)
        self.lead = getattr(self.engine, "lead", b"")  # SentencePiece's dummy-prefix space
        if self.lead:
            from .test_sentencepiece import InternalEncoder

            hf = InternalEncoder(hf, self.lead)
        self.oracle = LMOracle(model, hf, self.engine.tok, self.sampler.start_id)

    def brute(self, prefix: bytes, cont: bytes, end: str) -> float:
        """The score by brute force: P(x c) / P(x), or the sum over the texts x c b with b
        ending the name, and x c itself, over P(x)."""
        x = self.lead + prefix
        below = self.oracle.prefix_logprob(x)
        if end == "none":
            return self.oracle.prefix_logprob(x + cont) - below
        texts = [self.oracle.prefix_logprob(x + cont + bytes([b])) for b in ENDING]
        return _lse([*texts, self.oracle.eos_logprob(x + cont)]) - below


@pytest.fixture(scope="module")
def setups() -> dict[str, _Setup]:
    return {}


def _setup(name: str, setups: dict[str, _Setup]) -> _Setup:
    if name not in setups:
        setups[name] = _Setup(name)
    return setups[name]


def _assert_close(got: float, want: float, what: object) -> None:
    assert (got == want == NEG_INF) or abs(got - want) < TOL, (what, got, want)


# (tokenizer, prefix, candidates, end condition): mid-word, after a dot, after a space
CASES = [
    ("default", b"self.assertEq", [b"ual", b"uals", b"ualsAny", b"", b"uil"], "none"),
    ("default", b"self.assertEq", [b"ual", b"uals", b"", b"uil"], "identifier"),
    ("default", b"os.", [b"path", b"pathsep", b"getcwd"], "identifier"),
    ("default", b"x = ", [b"None", b"Nonsense", b"foo_bar2"], "identifier"),
    ("default", b"    ret", [b"urn", b"ry"], "identifier"),
    ("llama2", b"self.assertEq", [b"ual", b"uals", b""], "identifier"),
    ("llama2", b"return ", [b"None", b"Non"], "none"),
    ("llama2", b"x = ", [b"self"], "identifier"),
]


@pytest.mark.parametrize(("name", "prefix", "candidates", "end"), CASES)
def test_scores_equal_brute_force(
    setups: dict[str, _Setup], name: str, prefix: bytes, candidates: list[bytes], end: str
) -> None:
    setup = _setup(name, setups)
    scores = score_continuations(setup.sampler, prefix, candidates, end=end)
    assert [s.continuation for s in scores] == candidates
    assert setup.sampler.prefix == prefix  # left where it was asked
    for cont, score in zip(candidates, scores, strict=True):
        _assert_close(score.logprob, setup.brute(prefix, cont, end), (prefix, cont))
        _assert_close(score.reach_logprob, setup.brute(prefix, cont, "none"), (prefix, cont))
        assert score.logprob <= score.reach_logprob + TOL
        assert (score.after is not None) == (end == "identifier")


def test_names_that_end_are_disjoint_events(setups: dict[str, _Setup]) -> None:
    """A name that ends after ``ua`` and one that ends after ``ual`` are different texts:
    the ended scores of names that extend each other add up to at most one."""
    setup = _setup("default", setups)
    names = [b"", b"u", b"ua", b"ual", b"uals", b"ualsAny", b"ali"]
    scores = score_continuations(setup.sampler, b"self.assertEq", names, end="identifier")
    total = sum(np.exp(s.logprob) for s in scores)
    assert 0 < total <= 1 + TOL


def test_repeats_are_scored_once_in_the_order_given(setups: dict[str, _Setup]) -> None:
    setup = _setup("default", setups)
    once = score_continuations(setup.sampler, b"def f", [b"oo", b"(x"], end="identifier")
    again = score_continuations(setup.sampler, b"def f", [b"(x", b"oo", b"(x"], end="identifier")
    assert [s.logprob for s in again] == [once[1].logprob, once[0].logprob, once[1].logprob]


def test_the_trie_is_walked_once_per_distinct_prefix(
    setups: dict[str, _Setup], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The byte-by-byte walk (the reference the faster walk is checked against,
    tests/engine/test_candidate_runs.py): one next-byte distribution per distinct trie node
    that is asked; a candidate shares its path with the others."""
    setup = _setup("default", setups)
    asked: list[bytes] = []
    real = setup.sampler.next_bytes

    def counting(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        asked.append(setup.sampler.prefix)
        return real(*args, **kwargs)

    monkeypatch.setattr(setup.sampler, "next_bytes", counting)
    x = b"self.assertEq"
    score_continuations(setup.sampler, x, [b"uals", b"uil", b"ual"], end="none", by_bytes=True)
    assert sorted(asked) == sorted(x + p for p in [b"", b"u", b"ua", b"ual", b"ui"])
    asked.clear()
    names = [b"uals", b"uil", b"ual"]
    score_continuations(setup.sampler, x, names, end="identifier", by_bytes=True)
    nodes = [b"", b"u", b"ua", b"ual", b"ui", b"uals", b"uil"]
    assert sorted(asked) == sorted(x + p for p in nodes)


def test_an_impossible_byte_stops_the_walk(setups: dict[str, _Setup]) -> None:
    """0xFF never occurs in UTF-8: probability zero, and the bytes after it are never
    pushed (the covering tree would refuse them)."""
    setup = _setup("default", setups)
    scores = score_continuations(setup.sampler, b"x = ", [b"\xffab", b"a"], end="identifier")
    assert scores[0].logprob == scores[0].reach_logprob == NEG_INF
    assert scores[0].after is None
    _assert_close(scores[1].logprob, setup.brute(b"x = ", b"a", "identifier"), b"a")
    with pytest.raises(PrefixError):
        setup.sampler.reset(b"x = \xffab")


def test_unknown_end_is_refused(setups: dict[str, _Setup]) -> None:
    with pytest.raises(ValueError, match="unknown end"):
        score_continuations(_setup("default", setups).sampler, b"x", [b"y"], end="word")


SEARCHES = [  # (tokenizer, prefix, candidates): several share long paths, some never fit
    ("default", b"self.assertEq", [b"ual", b"uals", b"ualsAny", b"", b"uil", b"\xffx"]),
    ("default", b"os.", [b"path", b"pathsep", b"getcwd", b"environ", b"sep", b"name"]),
    ("llama2", b"x = ", [b"self", b"None", b"Non", b"x"]),
]


@pytest.mark.parametrize(("name", "prefix", "candidates"), SEARCHES)
@pytest.mark.parametrize("end", ["identifier", "none"])
def test_the_likeliest_is_the_brute_force_best(
    setups: dict[str, _Setup], name: str, prefix: bytes, candidates: list[bytes], end: str
) -> None:
    """Best-first search finds the candidate of highest brute-force score, with that score,
    and bounds that hold the total; with a min_mass it goes on until the total is known to
    be over it or under it."""
    setup = _setup(name, setups)
    truth = [setup.brute(prefix, c, end) if c != b"\xffx" else NEG_INF for c in candidates]
    total = sum(np.exp(t) for t in truth)
    found = likeliest_continuation(setup.sampler, prefix, candidates, end)
    best = int(np.argmax(truth))
    assert found.best is not None and found.best.continuation == candidates[best]
    _assert_close(found.best.logprob, truth[best], candidates[best])
    assert found.mass_low - TOL <= total <= found.mass_high + TOL
    assert setup.sampler.prefix == prefix
    for min_mass in (total / 2, total * 2):  # decided either way, with bounds that hold
        more = likeliest_continuation(setup.sampler, prefix, candidates, end, min_mass=min_mass)
        assert more.mass_low - TOL <= total <= more.mass_high + TOL
        if min_mass < total:
            assert more.best.continuation == found.best.continuation
            assert more.best.logprob == found.best.logprob and more.mass_low >= min_mass
        else:
            assert more.mass_high < min_mass


def test_the_search_scores_fewer_nodes_than_the_walk(setups: dict[str, _Setup]) -> None:
    """Thirty names over a peaked fake model: the likeliest needs a part of the trie."""
    setup = _setup("default", setups)
    peaked = FakeModel(setup.engine.tok.size, seed=4, scale=4.0)
    sampler = ByteSampler(peaked, setup.engine, track_prefix=False)
    names = [f"{a}{b}_{c}".encode() for a in "abc" for b in "xyz" for c in ("run", "go")]
    names += [b"assertEqual", b"assertIn", b"setUp"]
    scores = score_continuations(sampler, b"self.", names, end="identifier")
    found = likeliest_continuation(sampler, b"self.", names, end="identifier")
    assert found.best.logprob == max(s.logprob for s in scores)
    full = len({n[:d] for n in names for d in range(len(n) + 1)})  # every trie node
    assert found.scored < full / 2, (found.scored, full)


def test_ties_go_to_the_earlier_candidate(setups: dict[str, _Setup]) -> None:
    setup = _setup("default", setups)
    # b"" and b"" + nothing: with end none the empty continuation (probability one) wins
    found = likeliest_continuation(setup.sampler, b"x = ", [b"a", b"", b"b"], end="none")
    assert found.best.continuation == b"" and found.best.logprob == 0.0
    both = likeliest_continuation(setup.sampler, b"x = ", [b"a", b"a"], end="none")
    assert both.best.continuation == b"a"
