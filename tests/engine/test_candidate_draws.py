"""Exact draws among candidate continuations (engine/sample/candidate_draws.py): over many
draws the frequencies are the temperature-transformed exact scores (score_continuations,
checked against brute force in test_candidates.py), for names that end, names that nest
(one goes on from another with a byte that ends a name) and plain continuations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from midword.engine.sample.candidate_draws import _nucleus, _Rejection, draw_continuation
from midword.engine.sample.candidates import (
    _BestFirst,
    _Shape,
    _Trie,
    likeliest_continuation,
    score_continuations,
)
from midword.engine.sample.transform import Transform

from .test_candidates import _Setup

PREFIX = b"self.assertEq"
DRAWS = 3000
CASES = [  # (candidates, end)
    ([b"ual", b"uals", b"ualsAny", b"", b"uil", b"in"], "identifier"),
    ([b"ual", b"ual(", b"ual(x", b"ual.x", b"uals"], "identifier"),  # nested names
    ([b"ual", b"uals", b"u", b"in"], "none"),  # overlapping continuations
]


@pytest.fixture(scope="module")
def setup() -> _Setup:
    return _Setup("default")


def _expected(setup: _Setup, conts: list[bytes], end: str, temperature: float) -> np.ndarray:
    scores = score_continuations(setup.sampler, PREFIX, conts, end)
    logw = np.array([s.logprob for s in scores]) / temperature
    weights = np.exp(logw - logw.max())
    return weights / weights.sum()


@pytest.mark.parametrize(("conts", "end"), CASES)
@pytest.mark.parametrize("temperature", [1.0, 0.5, 2.0])
def test_draws_follow_the_transformed_scores(
    setup: _Setup, conts: list[bytes], end: str, temperature: float
) -> None:
    """Each draw starts from the loose bounds (a fresh search), on one trie whose scores
    are computed once: so every draw is a first draw, rejections and all."""
    want = _expected(setup, conts, end, temperature)
    trie = _Trie(setup.sampler, PREFIX, None)
    shape = _Shape(conts, end)
    rng = np.random.default_rng(7)
    fresh = [_Rejection(trie, shape, end, 1.0 / temperature) for _ in range(DRAWS)]
    drawn = [search.draw(rng).continuation for search in fresh]
    freq = np.array([drawn.count(c) for c in conts]) / DRAWS
    assert np.allclose(freq, want, atol=0.03), (freq.round(3), want.round(3))
    assert len(trie.dists) <= len({c[:d] for c in conts for d in range(len(c) + 1)})


def test_a_draw_carries_the_exact_score(setup: _Setup) -> None:
    conts, end = CASES[0]
    scores = {
        s.continuation: s.logprob for s in score_continuations(setup.sampler, PREFIX, conts, end)
    }
    found = draw_continuation(setup.sampler, PREFIX, conts, end, rng=np.random.default_rng(1))
    assert found.best.logprob == pytest.approx(scores[found.best.continuation], abs=1e-12)
    assert found.mass_low <= sum(math.exp(v) for v in scores.values()) <= found.mass_high + 1e-9
    assert setup.sampler.prefix == PREFIX


def test_too_little_mass_draws_nothing(setup: _Setup) -> None:
    conts, end = CASES[0]
    total = sum(math.exp(s.logprob) for s in score_continuations(setup.sampler, PREFIX, conts, end))
    rng = np.random.default_rng(1)
    under = draw_continuation(setup.sampler, PREFIX, conts, end, rng=rng, min_mass=total * 1.01)
    assert under.best is None and under.mass_high < total * 1.01
    over = draw_continuation(setup.sampler, PREFIX, conts, end, rng=rng, min_mass=total * 0.99)
    assert over.best is not None and over.mass_low >= total * 0.99
    with pytest.raises(ValueError, match="temperature"):
        draw_continuation(setup.sampler, PREFIX, conts, end, rng=rng, temperature=0)


@pytest.mark.parametrize(("conts", "end"), CASES)
def test_mass_bounds_hold_for_nested_names(setup: _Setup, conts: list[bytes], end: str) -> None:
    """Names that nest are not different texts: the bounds count each score on its own."""
    scores = score_continuations(setup.sampler, PREFIX, conts, end)
    total = sum(math.exp(s.logprob) for s in scores)
    for min_mass in (0.0, total * 0.9, total * 1.1, 1.0):
        found = likeliest_continuation(setup.sampler, PREFIX, conts, end, min_mass=min_mass)
        assert found.mass_low - 1e-12 <= total <= found.mass_high + 1e-12, (min_mass, found)


TRANSFORMS = [  # (temperature, top_k, top_p)
    (1.0, 0, 0.5),
    (1.0, 0, 0.9),
    (0.5, 0, 0.8),
    (2.0, 0, 0.95),
    (1.0, 2, 1.0),
    (0.7, 3, 0.6),
    (1.0, 0, 1e-9),
]


@pytest.mark.parametrize(("conts", "end"), CASES)
@pytest.mark.parametrize(("temperature", "top_k", "top_p"), TRANSFORMS)
def test_the_nucleus_is_the_transforms(
    setup: _Setup, conts: list[bytes], end: str, temperature: float, top_k: int, top_p: float
) -> None:
    """The candidates kept best first are those `Transform` keeps of all the exact scores."""
    scores = score_continuations(setup.sampler, PREFIX, conts, end)
    kept = Transform(temperature, top_k, top_p).apply(np.array([s.logprob for s in scores]))
    want = {c for c, lp in zip(conts, kept, strict=True) if lp > float("-inf")}
    trie = _Trie(setup.sampler, PREFIX, None)
    search = _BestFirst(trie, conts, end)
    got = _nucleus(search, 1.0 / temperature, top_k, top_p)
    assert {path for path, _ in got} == want
    assert [w for _, w in got] == sorted((w for _, w in got), reverse=True)


def test_nucleus_draws_follow_the_transform(setup: _Setup) -> None:
    conts, end = CASES[0]
    scores = score_continuations(setup.sampler, PREFIX, conts, end)
    want = np.exp(Transform(0.8, 0, 0.9).apply(np.array([s.logprob for s in scores])))
    rng = np.random.default_rng(5)
    drawn = [
        draw_continuation(
            setup.sampler, PREFIX, conts, end, rng=rng, temperature=0.8, top_p=0.9
        ).best.continuation
        for _ in range(600)
    ]
    freq = np.array([drawn.count(c) for c in conts]) / len(drawn)
    assert np.allclose(freq, want, atol=0.06), (freq.round(3), want.round(3))
