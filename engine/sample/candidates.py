"""Exact scores of given continuations of a byte prefix (issue 39): how likely the model's
text goes on with each candidate's bytes, optionally with the identifier ending there.

An editor's language server knows the names that may follow ``self.assertEq`` (``ual``,
``ualsAny``, ...); the model may not. For each candidate continuation ``c`` of the prefix
``x`` this module computes, exactly,

- ``end="none"``: log P(text starts with x c | text starts with x);
- ``end="identifier"``: log P(text starts with x c, and the byte after it does not go on
  with an identifier | text starts with x), where "does not go on" is the text ending
  there or a next byte outside `IDENTIFIER_BYTES`.

The identifier bytes are the ASCII letters, digits and ``_``, and every byte from 0x80 up:
Python (and most languages an editor completes) allow Unicode letters in names, so a
non-ASCII character right after a name is taken to continue it (a name followed at once by
``→`` in a comment counts as unfinished: a small loss, never a wrong name).

The ending is the sum of the exact probabilities of the texts that end the name (each
non-identifier byte, and the end of text), not one minus the identifier bytes' share: the
next-byte probabilities may sum to a little under one (the rest is mass on token sequences
no text encodes to, see `ByteSampler`), and that mass is no text, so it ends no name.

The candidates are walked as a byte trie over one `ByteSampler`: each distinct prefix of
a candidate asks its next-byte distribution once (the chain rule makes their product the
candidate's probability), the sampler's covering tree moves by `ByteSampler.reset`, and
its session keeps the KV cache of what the prefixes share. A branch the model gives
probability zero is not walked further.

Scoring every candidate costs one model call per distinct prefix of a candidate. When only
one is wanted, less does: `likeliest_continuation` expands the trie best first (a node's
probability bounds every candidate below it) and stops once the best is certain, and
`~midword.engine.sample.candidate_draws.draw_continuation` draws one exactly at a
temperature by rejection over the same trie. Both bound the candidates' total probability,
for a caller that needs a minimum before it trusts them.

>>> from midword.engine import load_engine
>>> from midword.engine.model.fake import FakeModel
>>> engine = load_engine("models/default")
>>> sampler = ByteSampler(FakeModel(engine.tok.size, seed=1), engine, track_prefix=False)
>>> scores = score_continuations(sampler, b"self.assertEq", [b"ual", b"uals"], end="none")
>>> [s.continuation for s in scores]
[b'ual', b'uals']
>>> scores[1].logprob <= scores[0].logprob <= 0
True
>>> ended = score_continuations(sampler, b"self.assertEq", [b"ual"], end="identifier")[0]
>>> ended.logprob <= ended.reach_logprob == scores[0].reach_logprob
True
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import BackendError
from .generate import Interrupted
from .sampling import ByteSampler, NextBytes
from .transform import NEG_INF, logsumexp

__all__ = [
    "END_CONDITIONS",
    "ENDING_BYTES",
    "IDENTIFIER_BYTES",
    "CandidateScore",
    "Likeliest",
    "ending_logprob",
    "likeliest_continuation",
    "score_continuations",
    "typed_identifier",
]

END_CONDITIONS = ("identifier", "none")

_ASCII_NAME = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"
# bytes that go on with an identifier: ASCII name characters, and any byte of a non-ASCII
# character (a lead byte starts one, a continuation byte finishes one a candidate cut)
IDENTIFIER_BYTES: frozenset[int] = frozenset(_ASCII_NAME) | frozenset(range(0x80, 0x100))
# the bytes after which the name has ended, as an index array for the 256-byte rows
ENDING_BYTES = np.array([b for b in range(256) if b not in IDENTIFIER_BYTES], dtype=np.int64)


@dataclass(frozen=True)
class CandidateScore:
    """The exact score of one continuation of the prefix (natural logs).

    ``logprob`` is under the end condition asked; ``reach_logprob`` = log P(text starts
    with prefix + continuation | prefix), whatever follows; ``after`` is the next-byte
    distribution after prefix + continuation when it was computed (``end="identifier"``
    and a reachable continuation), for a caller that goes on from there."""

    continuation: bytes
    logprob: float
    reach_logprob: float
    after: NextBytes | None = None


def ending_logprob(dist: NextBytes) -> float:
    """log P(the identifier ends here | text so far): the end of text, or a next byte
    outside `IDENTIFIER_BYTES`, from an exact next-byte distribution.

    >>> nxt = np.full(256, NEG_INF); nxt[ord("(")] = np.log(0.25); nxt[ord("s")] = np.log(0.5)
    >>> round(float(np.exp(ending_logprob(NextBytes(nxt, np.log(0.125))))), 6)
    0.375
    """
    return logsumexp(np.append(dist.next[ENDING_BYTES], dist.eos))


def typed_identifier(prefix: bytes) -> bytes:
    """The identifier bytes at the end of ``prefix``: what was typed of the current name.

    >>> typed_identifier(b"self.assertEq"), typed_identifier(b"x = self."), typed_identifier(b"")
    (b'assertEq', b'', b'')
    >>> typed_identifier("y = größe".encode()).decode()
    'größe'
    """
    start = len(prefix)
    while start > 0 and prefix[start - 1] in IDENTIFIER_BYTES:
        start -= 1
    return prefix[start:]


class _Trie:
    """Next-byte distributions and log-probabilities of byte strings after the prefix, each
    computed once: a distribution is one `ByteSampler.next_bytes` (a model call) at
    prefix + path; a path's log-probability is the chain of its bytes' conditionals."""

    def __init__(
        self, sampler: ByteSampler, prefix: bytes, should_stop: Callable[[], bool] | None
    ) -> None:
        self.sampler = sampler
        self.prefix = prefix
        self.should_stop = should_stop
        self.dists: dict[bytes, NextBytes] = {}
        self.reaches: dict[bytes, float] = {b"": 0.0}  # path -> log P(path | prefix)

    def reach(self, path: bytes) -> float:
        """log P(text goes on with ``path`` | prefix), from its longest known prefix on; a
        byte after a zero is never asked about (the covering tree might refuse it)."""
        depth = len(path)
        while path[:depth] not in self.reaches:
            depth -= 1
        here = self.reaches[path[:depth]]
        for d in range(depth, len(path)):
            if here > NEG_INF:
                here += float(self.dist(path[:d]).next[path[d]])
            self.reaches[path[: d + 1]] = here
        return here

    def dist(self, path: bytes) -> NextBytes:
        """The exact next-byte distribution after prefix + path."""
        if path not in self.dists:
            if self.should_stop is not None and self.should_stop():
                raise Interrupted("scoring interrupted")
            self.sampler.reset(self.prefix + path)
            self.dists[path] = _checked(self.sampler.next_bytes(), len(path))
        return self.dists[path]


def _checked(dist: NextBytes, depth: int) -> NextBytes:
    """``dist``, unless the prefix itself has no mass (the conditionals are then undefined:
    the sampler divides zero by zero); deeper, a zero was never walked into."""
    if depth == 0 and np.isnan(dist.next).all():
        raise BackendError("the model gives no mass to this prefix: nothing to score against")
    return dist


def score_continuations(
    sampler: ByteSampler,
    prefix: bytes,
    continuations: Sequence[bytes],
    end: str = "none",
    *,
    should_stop: Callable[[], bool] | None = None,
) -> list[CandidateScore]:
    """The exact score of each continuation of ``prefix`` (see the module docstring), in the
    order given (repeats allowed, scored once). The sampler is left at ``prefix``.

    ``should_stop`` is polled before each model call (True raises `Interrupted`). Raises
    ValueError for an unknown ``end``, PrefixError for a prefix no token sequence covers.
    """
    if end not in END_CONDITIONS:
        raise ValueError(f"unknown end {end!r}; expected one of {', '.join(END_CONDITIONS)}")
    trie = _Trie(sampler, prefix, should_stop)
    scored: dict[bytes, CandidateScore] = {}
    for cont in sorted(set(continuations)):  # sorted: the sampler moves little between them
        reach = trie.reach(cont)
        if end == "none" or reach == NEG_INF:
            scored[cont] = CandidateScore(cont, reach, reach)
            continue
        after = trie.dist(cont)
        scored[cont] = CandidateScore(cont, reach + ending_logprob(after), reach, after)
    sampler.reset(prefix)
    return [scored[c] for c in continuations]


@dataclass(frozen=True)
class Likeliest:
    """What `likeliest_continuation` found: the likeliest candidate (None when every one has
    probability zero, or the candidates were found to hold less than ``min_mass`` first),
    bounds on the candidates' total probability, and the distributions it computed."""

    best: CandidateScore | None
    mass_low: float
    mass_high: float
    scored: int


def likeliest_continuation(
    sampler: ByteSampler,
    prefix: bytes,
    continuations: Sequence[bytes],
    end: str = "none",
    *,
    min_mass: float = 0.0,
    should_stop: Callable[[], bool] | None = None,
) -> Likeliest:
    """The candidate with the highest exact score (`score_continuations`'s), by best-first
    search of the byte trie: a trie node's log-probability bounds every candidate below it
    (probabilities are at most one), so nodes are expanded from the likeliest, and the
    search stops once a finished candidate beats every node left and the candidates' total
    probability is known to be at least ``min_mass`` or under it. Ties go to the earlier
    candidate. Only the distributions on the way are computed: a model that wants ``ual``
    after ``self.assertEq`` never scores the trie below ``self.assertEqI``.

    >>> from midword.engine import load_engine
    >>> from midword.engine.model.fake import FakeModel
    >>> engine = load_engine("models/default")
    >>> sampler = ByteSampler(FakeModel(engine.tok.size, seed=1), engine, track_prefix=False)
    >>> conts = [b"ual", b"uals", b"ualsAny", b"in", b"rue"]
    >>> found = likeliest_continuation(sampler, b"self.assertEq", conts)
    >>> scores = score_continuations(sampler, b"self.assertEq", conts)
    >>> found.best.logprob == max(s.logprob for s in scores)
    True
    >>> found.mass_low <= sum(math.exp(s.logprob) for s in scores) <= found.mass_high
    True
    """
    if end not in END_CONDITIONS:
        raise ValueError(f"unknown end {end!r}; expected one of {', '.join(END_CONDITIONS)}")
    search = _BestFirst(_Trie(sampler, prefix, should_stop), continuations, end)
    found = search.run(min_mass)
    sampler.reset(prefix)
    return found


class _Shape:
    """The candidates' byte trie: each candidate's first place in the list (``order``), the
    next bytes below each node (``children``) and how many candidates lie strictly below
    it (``below``). ``disjoint``: with ``end="identifier"``, no candidate goes on from
    another with a byte that ends a name (``a`` and ``a.b``: the texts where ``a`` ends
    include those of ``a.b``), so the candidates' scores are of different texts."""

    def __init__(self, continuations: Sequence[bytes], end: str) -> None:
        self.order: dict[bytes, int] = {}
        for i, cont in enumerate(continuations):
            self.order.setdefault(cont, i)
        self.children: dict[bytes, set[int]] = {}
        self.below: dict[bytes, int] = {}
        self.disjoint = end == "identifier"
        for cont in self.order:
            for d in range(len(cont)):
                self.children.setdefault(cont[:d], set()).add(cont[d])
                self.below[cont[:d]] = self.below.get(cont[:d], 0) + 1
                if cont[:d] in self.order and cont[d] not in IDENTIFIER_BYTES:
                    self.disjoint = False

    def many(self, path: bytes) -> int:
        """The candidates at or below ``path``."""
        return self.below.get(path, 0) + (path in self.order)


_DONE, _NODE = 0, 1  # heap entries: a finished candidate (first at equal weights), a node


class _BestFirst:
    """Best-first search over the candidates' byte trie (see `likeliest_continuation`).

    The heap holds (-log weight, kind, order, path): finished candidates with their exact
    score, and trie nodes still to expand with their log-probability, which bounds the
    score of each candidate below them. A node's share of the total mass is at most its
    probability when the candidates are disjoint (`_Shape`: the names that end below it
    are different texts), and that times the candidates it stands for otherwise."""

    def __init__(self, trie: _Trie, continuations: Sequence[bytes], end: str) -> None:
        self.trie, self.end = trie, end
        self.shape = shape = _Shape(continuations, end)
        self.order, self.children = shape.order, shape.children
        self.heap: list[tuple[float, int, int, bytes]] = []
        self.low = 0.0  # the finished candidates' probability
        self._enter(b"", 0.0)

    def _enter(self, path: bytes, reach: float) -> None:
        """Push what ``path`` (reached with log-probability ``reach``) stands for."""
        if reach == NEG_INF:
            return
        if self.end == "none" and path in self.order:  # its score is its reach
            heapq.heappush(self.heap, (-reach, _DONE, self.order[path], path))
        if self.end == "identifier" or path in self.children:
            heapq.heappush(self.heap, (-reach, _NODE, len(self.heap), path))

    def _expand(self, path: bytes) -> None:
        dist = self.trie.dist(path)
        reach = self.trie.reach(path)
        if self.end == "identifier" and path in self.order:
            score = reach + ending_logprob(dist)
            if score > NEG_INF:
                heapq.heappush(self.heap, (-score, _DONE, self.order[path], path))
        for byte in sorted(self.children.get(path, ())):
            self._enter(path + bytes([byte]), self.trie.reach(path + bytes([byte])))

    def high(self) -> float:
        """An upper bound on the candidates' total probability."""
        total = self.low
        for key, kind, _, path in self.heap:
            total += math.exp(-key) * self._stands_for(kind, path)
        return total

    def _stands_for(self, kind: int, path: bytes) -> int:
        """How many candidate scores a heap entry's weight bounds, one by one."""
        if kind == _DONE or self.shape.disjoint:
            return 1
        if self.end == "none":
            return self.shape.below[path]  # its own score is an entry of its own
        return self.shape.many(path)  # its own is pushed when it is expanded

    def next_done(self) -> tuple[bytes, float] | None:
        """The next candidate in decreasing order of score, with its score (None after the
        last): nodes are expanded until a finished candidate tops the heap."""
        while self.heap:
            key, kind, _, path = heapq.heappop(self.heap)
            if kind == _DONE:
                return path, -key
            self._expand(path)
        return None

    def rest_bound(self, power: float) -> float:
        """log of a bound on the sum of the scores to the power ``power`` of the candidates
        not yet returned by `next_done` (see candidate_draws.py for each case)."""
        bounds = [NEG_INF]
        for key, kind, _, path in self.heap:
            if kind == _DONE or not self.shape.disjoint:
                bounds.append(math.log(self._stands_for(kind, path)) - power * key)
            else:  # names that end below are different texts: Hölder's inequality under 1
                many = 0.0 if power >= 1 else (1 - power) * math.log(self.shape.many(path))
                bounds.append(many - power * key)
        return logsumexp(np.array(bounds))

    def run(self, min_mass: float) -> Likeliest:
        best: tuple[bytes, float] | None = None
        while self.heap and not self._decided(best is not None, min_mass):
            key, kind, _, path = heapq.heappop(self.heap)
            if kind == _NODE:
                self._expand(path)
                continue
            self.low += math.exp(-key)
            best = best or (path, -key)
        found = None if best is None else self._score(*best)
        return Likeliest(found, self.low, self.high(), len(self.trie.dists))

    def _decided(self, have_best: bool, min_mass: float) -> bool:
        if have_best and self.low >= min_mass:
            return True
        return self.high() < min_mass  # guidance is off whatever the best is

    def _score(self, path: bytes, logprob: float) -> CandidateScore:
        after = self.trie.dists.get(path) if self.end == "identifier" else None
        return CandidateScore(path, logprob, self.trie.reach(path), after)
