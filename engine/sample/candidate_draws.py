"""An exact draw among candidate continuations that scores only part of their byte trie.

`draw_continuation` samples candidate ``k`` with probability proportional to ``w_k ** (1/T)``,
``w_k`` its exact score (`score_continuations`'s) and ``T`` the temperature: what a
temperature transform of all the renormalized scores gives, without computing them all.

It is adaptive rejection sampling over the trie, as `LazyTree` does over the covering tree.
Every trie node ``n`` carries a bound ``U[n]`` on the sum of the transformed weights of the
candidates at or below it, from its log-probability ``r`` alone (the candidates below
extend its bytes), with ``p = 1/T`` and ``m`` those candidates:

- ``end="identifier"``: the names that end below ``n`` are different texts, so their
  scores add up to at most ``exp(r)``: ``U = exp(p r)`` when ``p >= 1``, and by Hölder's
  inequality ``U = m ** (1 - p) * exp(p r)`` when ``p < 1``;
- ``end="none"``, or names where one goes on from another with a byte that ends a name
  (``a``, ``a.b``): each score is at most ``exp(r)``: ``U = m * exp(p r)``.

Once ``n`` is scored (its next-byte distribution, so its children's log-probabilities and,
for a name, its ending), ``B[n]`` = its own weight plus its children's bounds, at most
``U[n]``. A round walks down from the root, choosing at each node its own candidate or a
child with weights from those numbers; entering an unscored child scores it and goes on
with probability ``B/U``, else the round starts again with the tighter bounds. The factors
telescope: every candidate ends a round with probability ``weight / B[root]``, the same
constant for all of them, so an accepted candidate is an exact draw.

The trie's nodes are the root, the candidates and its branch points (`_Shape`): a child at
the end of a run of bytes gets ``U`` from the probability of the run's first byte (its
parent's distribution has it; the same candidates lie below, and the run's probability is
at most that), and entering it scores it once at its end. Any bounds that hold keep the
draw exact; tighter ones only waste fewer rounds.

>>> from midword.engine import load_engine
>>> from midword.engine.model.fake import FakeModel
>>> engine = load_engine("models/default")
>>> sampler = ByteSampler(FakeModel(engine.tok.size, seed=1), engine, track_prefix=False)
>>> rng = np.random.default_rng(0)
>>> found = draw_continuation(sampler, b"self.assertEq", [b"ual", b"in", b"rue"], rng=rng)
>>> found.best.continuation in (b"ual", b"in", b"rue")
True
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence

import numpy as np

from .candidates import (
    _DONE,
    END_CONDITIONS,
    CandidateScore,
    Likeliest,
    _BestFirst,
    _Shape,
    _Trie,
    ending_logprob,
)
from .sampling import ByteSampler
from .transform import NEG_INF, Transform, logsumexp

__all__ = ["draw_continuation"]


def draw_continuation(
    sampler: ByteSampler,
    prefix: bytes,
    continuations: Sequence[bytes],
    end: str = "none",
    *,
    rng: np.random.Generator,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    min_mass: float = 0.0,
    should_stop: Callable[[], bool] | None = None,
    by_bytes: bool = False,
) -> Likeliest:
    """A candidate drawn exactly from the scores transformed as `Transform` does (power
    ``1/temperature``, then top-k, then top-p; see the module docstring), once the
    candidates are known to hold ``min_mass`` of the probability (`likeliest_continuation`
    decides it; its bounds are returned, and ``best`` is None when they hold less). With
    top-k or top-p the candidates are taken best first until the kept ones are certain
    (`_nucleus`). The sampler is left at ``prefix``. ``by_bytes``: the slow per-byte
    reference walk of the trie (the same distribution; a seed may draw differently).
    """
    if end not in END_CONDITIONS:
        raise ValueError(f"unknown end {end!r}; expected one of {', '.join(END_CONDITIONS)}")
    Transform(temperature, top_k, top_p)  # checks them
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 to draw, got {temperature}")
    trie = _Trie(sampler, prefix, should_stop, by_bytes=by_bytes)
    decided = _BestFirst(trie, continuations, end).run(min_mass)
    drawn = None
    if decided.best is not None and decided.mass_low >= min_mass:
        power = 1.0 / temperature
        if top_k or top_p < 1:
            kept = _nucleus(_BestFirst(trie, continuations, end), power, top_k, top_p)
            weights = np.array([power * w for _, w in kept])
            drawn = _score(trie, end, kept[_pick(weights, rng)][0])
        else:
            shape = _Shape(continuations, end, compress=not by_bytes)
            drawn = _Rejection(trie, shape, end, power).draw(rng)
    sampler.reset(prefix)
    return Likeliest(drawn, decided.mass_low, decided.mass_high, len(trie.dists))


def _nucleus(
    search: _BestFirst, power: float, top_k: int, top_p: float
) -> list[tuple[bytes, float]]:
    """The candidates `Transform` keeps, best first, with their scores: the first ``top_k``,
    then those with less than ``top_p`` of the (transformed, renormalized) mass before
    them. The mass is known within bounds (what `next_done` gave, and a bound on the
    rest); a candidate is kept or dropped once they decide, else more are taken."""
    done: list[tuple[bytes, float]] = []
    while not top_k or len(done) < top_k:
        if top_p == 1 or top_k:
            found = search.next_done()
        else:  # top-p alone: stop at the first one the bounds drop
            found = _next_kept(search, done, power, top_p)
        if found is None:
            break
        done.append(found)
    if not top_k or top_p == 1:
        return done
    logw = np.array([power * w for _, w in done])
    return done[: _top_p_count(logw - logsumexp(logw), top_p)]


def _next_kept(
    search: _BestFirst, done: list[tuple[bytes, float]], power: float, top_p: float
) -> tuple[bytes, float] | None:
    """The next candidate if top-p keeps it (None: it is dropped, or there is none): kept
    when the mass before it is under ``top_p`` of the least the total can be, dropped when
    it is at least ``top_p`` of the most; in between, more candidates tighten the bounds."""
    before = logsumexp(np.array([power * w for _, w in done]))
    ahead: list[tuple[bytes, float]] = []  # taken to tighten the bounds, in order
    while True:
        taken = logsumexp(np.array([before, *(power * w for _, w in ahead)]))
        rest = search.rest_bound(power)
        if ahead and before < math.log(top_p) + taken:
            _give_back(search, ahead[1:])
            return ahead[0]
        if before >= math.log(top_p) + np.logaddexp(taken, rest):
            return None
        found = search.next_done()
        if found is None:
            if not ahead:
                return None
            _give_back(search, ahead[1:])
            return ahead[0]
        ahead.append(found)


def _give_back(search: _BestFirst, taken: list[tuple[bytes, float]]) -> None:
    """Put finished candidates back on the search's heap (next_done returns them again)."""
    for path, score in taken:
        heapq.heappush(search.heap, (-score, _DONE, search.order[path], path))


def _top_p_count(logp: np.ndarray, top_p: float) -> int:
    """How many of these normalized, decreasing log-probs top-p keeps (those with less than
    ``top_p`` of the mass strictly before them).

    >>> _top_p_count(np.log(np.array([0.5, 0.3, 0.2])), 0.6)
    2
    """
    p = np.exp(logp)
    return int(np.count_nonzero(np.cumsum(p) - p < top_p))


def _score(trie: _Trie, end: str, path: bytes) -> CandidateScore:
    reach = trie.reach(path)
    if end == "none":
        return CandidateScore(path, reach, reach)
    after = trie.dist(path)
    return CandidateScore(path, reach + ending_logprob(after), reach, after)


class _Rejection:
    """Adaptive rejection sampling over the candidates' trie (logs of the transformed
    weights: ``own`` a node's own candidate, ``bound`` U, ``sums`` B of scored nodes)."""

    def __init__(self, trie: _Trie, shape: _Shape, end: str, power: float) -> None:
        self.trie, self.shape, self.end, self.power = trie, shape, end, power
        self.own: dict[bytes, float] = {}
        self.sums: dict[bytes, float] = {}
        self.bound: dict[bytes, float] = {b"": self._bound(b"", 0.0)}

    def draw(self, rng: np.random.Generator) -> CandidateScore | None:
        """An exact draw (None when every candidate has probability zero)."""
        while self.sums.get(b"", 0.0) > NEG_INF:
            path = self._round(rng)
            if path is not None:
                return _score(self.trie, self.end, path)
        return None

    def _round(self, rng: np.random.Generator) -> bytes | None:
        """One walk from the root: the candidate it ends at, or None when it was rejected."""
        path = b""
        if not self._enter(path, rng):
            return None
        while True:
            kids = self._kids(path)
            weights = np.array([self.own[path], *(self.bound[c] for c in kids)])
            k = _pick(weights, rng)
            if k == 0:
                return path
            path = kids[k - 1]
            if not self._enter(path, rng):
                return None

    def _enter(self, path: bytes, rng: np.random.Generator) -> bool:
        """Score ``path`` if it was not, and go on with probability B / U."""
        if path in self.sums:
            return True
        before = self.bound[path]
        self._expand(path)
        return math.log(1.0 - rng.random()) <= self.sums[path] - before  # log(u), u in (0, 1]

    def _expand(self, path: bytes) -> None:
        reach = self.trie.reach(path)  # a node reached by a run of bytes may have zero
        own = NEG_INF
        if path in self.shape.order and reach > NEG_INF:
            ended = ending_logprob(self.trie.dist(path)) if self.end == "identifier" else 0.0
            own = self.power * (reach + ended)
        self.own[path] = own
        for child in self._kids(path):  # bounded by the first byte of the run to it
            first = self.trie.reach(child[: len(path) + 1]) if reach > NEG_INF else NEG_INF
            self.bound[child] = self._bound(child, first)
        for depth in range(len(path), -1, -1):  # the node, then its ancestors, tighter
            node = path[:depth]
            if node not in self.own:  # inside a run of bytes: not a node
                continue
            total = logsumexp(
                np.array([self.own[node], *(self.bound[c] for c in self._kids(node))])
            )
            self.sums[node] = self.bound[node] = total

    def _bound(self, path: bytes, reach: float) -> float:
        """log U of a node reached with log-probability ``reach`` (module docstring)."""
        if reach == NEG_INF:
            return NEG_INF
        many = math.log(self.shape.many(path))
        if not self.shape.disjoint:  # each score is at most the node's probability
            return many + self.power * reach
        return self.power * reach + (0.0 if self.power >= 1 else (1 - self.power) * many)

    def _kids(self, path: bytes) -> list[bytes]:
        return self.shape.kids(path)


def _pick(logw: np.ndarray, rng: np.random.Generator) -> int:
    """An index drawn with probability proportional to ``exp(logw)``.

    >>> _pick(np.array([NEG_INF, 0.0, NEG_INF]), np.random.default_rng(0))
    1
    """
    weights = np.exp(logw - logw.max())
    cdf = np.cumsum(weights)
    return int(min(cdf.searchsorted(rng.random() * cdf[-1], side="right"), logw.size - 1))
