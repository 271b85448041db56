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

The candidates are walked as a byte trie over one `ByteSampler`, whose covering tree moves
by `ByteSampler.reset` and whose session keeps the KV cache of what the prefixes share.
A run of bytes where the trie does not branch is crossed with one tree scoring at its end,
not one per byte: log P(x y | x) = log P(x y) - log P(x), and the sampler gives both
prefix probabilities relative to the trunk of ``x`` (`ByteSampler.relative_prefix`: the
~1,500 prompt tokens they share cancel, only the trunk tokens after them are read). That
is the chain rule the per-byte walk multiplies out, so the scores are the same to
rounding. One byte past a scored node is read from that node's next-byte distribution, as
the per-byte walk does, so a byte the model gives probability zero is never pushed; a
run whose covering tree does not exist (`PrefixError`: a byte no token has) has
probability zero. ``by_bytes=True`` keeps the per-byte walk, one next-byte distribution
per distinct prefix of a candidate, as the slow reference the tests compare with.

Scoring every candidate costs about one model call per candidate (its end). When only one
is wanted, less does: `likeliest_continuation` expands the trie best first (a node's
probability bounds every candidate below it) and stops once the best is certain, and
`~midword.engine.sample.candidate_draws.draw_continuation` draws one exactly at a
temperature by rejection over the same trie; both score one tree per branch point or
candidate they open, and bound a node they have not opened by the probability of its first
byte. Both bound the candidates' total probability, for a caller that needs a minimum
before it trusts them.

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

from ..errors import BackendError, PrefixError
from .generate import Interrupted
from .sampling import ByteSampler, NextBytes, TrunkAnchor
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
    prefix + path, which also gives log P(prefix + path) relative to the prefix's trunk.

    A path's log-probability is read from its longest known prefix on: one byte past a
    scored node from that node's distribution, a longer run from one scoring at its end
    (the difference of the two prefix log-probabilities, see the module docstring).
    ``by_bytes``: the per-byte reference walk instead, the chain of every byte's
    conditional, one distribution per byte."""

    def __init__(
        self,
        sampler: ByteSampler,
        prefix: bytes,
        should_stop: Callable[[], bool] | None,
        *,
        by_bytes: bool = False,
    ) -> None:
        self.sampler = sampler
        self.prefix = prefix
        self.should_stop = should_stop
        self.by_bytes = by_bytes
        self.dists: dict[bytes, NextBytes] = {}
        self.reaches: dict[bytes, float] = {b"": 0.0}  # path -> log P(path | prefix)
        self._anchor: TrunkAnchor | None = None  # the prefix's trunk, once scored
        self._root = 0.0  # log P(prefix) relative to that trunk

    def reach(self, path: bytes) -> float:
        """log P(text goes on with ``path`` | prefix), from its longest known prefix on; a
        byte after a zero is never asked about (the covering tree might refuse it)."""
        depth = len(path)
        while path[:depth] not in self.reaches:
            depth -= 1
        here = self.reaches[path[:depth]]
        if self.by_bytes:
            for d in range(depth, len(path)):
                if here > NEG_INF:
                    here += float(self.dist(path[:d]).next[path[d]])
                self.reaches[path[: d + 1]] = here
            return here
        if here > NEG_INF and depth < len(path) and (not depth or path[:depth] in self.dists):
            here += float(self.dist(path[:depth]).next[path[depth]])  # one byte: free
            depth += 1
            self.reaches[path[:depth]] = here
        if depth < len(path):  # a run of bytes: one scoring at its end
            here = self._measure(path) if here > NEG_INF else NEG_INF
            self.reaches[path] = here
        return here

    def dist(self, path: bytes) -> NextBytes:
        """The exact next-byte distribution after prefix + path (a path of probability
        zero is never asked about)."""
        if path not in self.dists:
            if self.by_bytes:
                self._stop_check()
                self.sampler.reset(self.prefix + path)
                self.dists[path] = _checked(self.sampler.next_bytes(), len(path))
            else:
                reach = self._measure(path)
                self.reaches.setdefault(path, reach)
                if path not in self.dists:
                    raise PrefixError(f"no token sequence covers {self.prefix + path!r}")
        return self.dists[path]

    def _stop_check(self) -> None:
        if self.should_stop is not None and self.should_stop():
            raise Interrupted("scoring interrupted")

    def _measure(self, path: bytes) -> float:
        """Score the tree at prefix + path (its distribution is kept) and return log
        P(path | prefix) = log P(prefix + path) - log P(prefix), both relative to the
        prefix's trunk (`ByteSampler.relative_prefix`); -inf where no token sequence
        covers prefix + path (`PrefixError`) or the tree has no mass."""
        if path and not self.dists:
            self.dist(b"")  # the root first: the trunk to measure from, and log P(prefix)
        self._stop_check()
        if self._anchor is None:
            self.sampler.reset(self.prefix)  # the anchor is the prefix's own trunk
        with self.sampler.relative_prefix(self._anchor) as anchor:
            self._anchor = anchor
            try:
                self.sampler.reset(self.prefix + path)
            except PrefixError:
                if not path:
                    raise
                self.sampler.reset(self.prefix)  # a failed push leaves part of it pushed
                return NEG_INF
            with np.errstate(invalid="ignore"):  # a tree without mass: NaN conditionals
                dist = _checked(self.sampler.next_bytes(), len(path))
        self.dists[path] = dist
        assert dist.prefix_logprob is not None
        if not path:
            self._root = dist.prefix_logprob
            return 0.0
        if dist.prefix_logprob == NEG_INF:
            return NEG_INF
        return dist.prefix_logprob - self._root


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
    by_bytes: bool = False,
) -> list[CandidateScore]:
    """The exact score of each continuation of ``prefix`` (see the module docstring), in the
    order given (repeats allowed, scored once). The sampler is left at ``prefix``.

    ``should_stop`` is polled before each model call (True raises `Interrupted`). Raises
    ValueError for an unknown ``end``, PrefixError for a prefix no token sequence covers.
    ``by_bytes``: the slow per-byte reference walk (the same scores, to rounding).
    """
    if end not in END_CONDITIONS:
        raise ValueError(f"unknown end {end!r}; expected one of {', '.join(END_CONDITIONS)}")
    trie = _Trie(sampler, prefix, should_stop, by_bytes=by_bytes)
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
    by_bytes: bool = False,
) -> Likeliest:
    """The candidate with the highest exact score (`score_continuations`'s), by best-first
    search of the byte trie: a trie node's log-probability bounds every candidate below it
    (probabilities are at most one), so nodes are expanded from the likeliest, and the
    search stops once a finished candidate beats every node left and the candidates' total
    probability is known to be at least ``min_mass`` or under it. Ties go to the earlier
    candidate. Only the distributions on the way are computed: a model that wants ``ual``
    after ``self.assertEq`` never scores the trie below ``self.assertEqI``; and a node is
    one where the trie branches or a candidate ends, a run of bytes between two of them
    one scoring (``by_bytes``: one per byte, the slow reference search).

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
    trie = _Trie(sampler, prefix, should_stop, by_bytes=by_bytes)
    search = _BestFirst(trie, continuations, end)
    found = search.run(min_mass)
    sampler.reset(prefix)
    return found


class _Shape:
    """The candidates' byte trie: each candidate's first place in the list (``order``), the
    next bytes below each prefix (``children``) and how many candidates lie strictly below
    it (``below``). ``disjoint``: with ``end="identifier"``, no candidate goes on from
    another with a byte that ends a name (``a`` and ``a.b``: the texts where ``a`` ends
    include those of ``a.b``), so the candidates' scores are of different texts.

    The searches walk its ``nodes``: the root, the candidates and the prefixes where the
    trie branches, each node's ``kids`` the next nodes below it (a run of bytes with one
    child each between them is crossed at once). ``compress=False``: every prefix is a
    node, the per-byte reference trie."""

    def __init__(self, continuations: Sequence[bytes], end: str, compress: bool = True) -> None:
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
        self.nodes = {b"", *self.order}
        self.nodes.update(p for p, kids in self.children.items() if len(kids) > 1 or not compress)
        self._kids: dict[bytes, list[bytes]] = {}

    def kids(self, path: bytes) -> list[bytes]:
        """The nodes right below node ``path``, by their first byte."""
        if path not in self._kids:
            found = []
            for byte in sorted(self.children.get(path, ())):
                kid = path + bytes([byte])
                while kid not in self.nodes:  # one child: neither a branch nor a candidate
                    (only,) = self.children[kid]
                    kid += bytes([only])
                found.append(kid)
            self._kids[path] = found
        return self._kids[path]

    def many(self, path: bytes) -> int:
        """The candidates at or below ``path``."""
        return self.below.get(path, 0) + (path in self.order)


# heap entries: a finished candidate (first at equal weights), a node whose probability is
# known, a node not yet reached whose weight is a bound (the probability of its first byte)
_DONE, _NODE, _AHEAD = 0, 1, 2


class _BestFirst:
    """Best-first search over the candidates' byte trie (see `likeliest_continuation`).

    The heap holds (-log weight, kind, order, path): finished candidates with their exact
    score, and trie nodes still to expand with their log-probability, which bounds the
    score of each candidate below them. A node at the end of a run of bytes is first held
    with the probability of the run's first byte (free: its parent's distribution has it),
    a bound as good, and reached (one scoring, its own probability) when it tops the heap.
    A node's share of the total mass is at most its probability when the candidates are
    disjoint (`_Shape`: the names that end below it are different texts), and that times
    the candidates it stands for otherwise."""

    def __init__(self, trie: _Trie, continuations: Sequence[bytes], end: str) -> None:
        self.trie, self.end = trie, end
        self.shape = shape = _Shape(continuations, end, compress=not trie.by_bytes)
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
        for kid in self.shape.kids(path):
            first = kid[: len(path) + 1]
            if kid == first:
                self._enter(kid, self.trie.reach(kid))
            elif (bound := self.trie.reach(first)) > NEG_INF:
                heapq.heappush(self.heap, (-bound, _AHEAD, len(self.heap), kid))

    def _open(self, kind: int, path: bytes) -> None:
        """Go on from a node taken off the heap: expand it, or reach it first."""
        if kind == _NODE:
            self._expand(path)
        else:
            self._enter(path, self.trie.reach(path))

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
        if self.end == "none" and kind == _NODE:
            return self.shape.below[path]  # its own score is an entry of its own
        return self.shape.many(path)  # its own is pushed when it is expanded (or reached)

    def next_done(self) -> tuple[bytes, float] | None:
        """The next candidate in decreasing order of score, with its score (None after the
        last): nodes are expanded until a finished candidate tops the heap."""
        while self.heap:
            key, kind, _, path = heapq.heappop(self.heap)
            if kind == _DONE:
                return path, -key
            self._open(kind, path)
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
            if kind != _DONE:
                self._open(kind, path)
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
