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

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import BackendError
from .generate import Interrupted
from .sampling import NEG_INF, ByteSampler, NextBytes, logsumexp

__all__ = [
    "END_CONDITIONS",
    "ENDING_BYTES",
    "IDENTIFIER_BYTES",
    "CandidateScore",
    "ending_logprob",
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


class _Walk:
    """The byte trie walk: next-byte distributions of the current path's prefixes, and the
    path's log-probabilities, kept while consecutive (sorted) candidates share them."""

    def __init__(
        self, sampler: ByteSampler, prefix: bytes, should_stop: Callable[[], bool] | None
    ) -> None:
        self.sampler = sampler
        self.prefix = prefix
        self.should_stop = should_stop
        self.path = b""
        self.reach = [0.0]  # reach[i] = log P(path[:i] | prefix)
        self.dists: dict[int, NextBytes] = {}  # depth -> distribution after path[:depth]

    def go_to(self, target: bytes) -> float:
        """log P(target | prefix), walking from the current path."""
        keep = _common_len(self.path, target)
        self.path = target
        del self.reach[keep + 1 :]
        self.dists = {d: v for d, v in self.dists.items() if d <= keep}
        for depth in range(keep, len(target)):
            here = self.reach[depth]
            step = float(self.dist(depth).next[target[depth]]) if here > NEG_INF else NEG_INF
            self.reach.append(here + step)
        return self.reach[-1]

    def dist(self, depth: int) -> NextBytes:
        """The exact next-byte distribution after prefix + path[:depth] (computed once)."""
        if depth not in self.dists:
            if self.should_stop is not None and self.should_stop():
                raise Interrupted("scoring interrupted")
            self.sampler.reset(self.prefix + self.path[:depth])
            self.dists[depth] = _checked(self.sampler.next_bytes(), depth)
        return self.dists[depth]


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
    walk = _Walk(sampler, prefix, should_stop)
    scored: dict[bytes, CandidateScore] = {}
    for cont in sorted(set(continuations)):  # sorted: neighbours share their trie path
        reach = walk.go_to(cont)
        if end == "none" or reach == NEG_INF:
            scored[cont] = CandidateScore(cont, reach, reach)
            continue
        after = walk.dist(len(cont))
        scored[cont] = CandidateScore(cont, reach + ending_logprob(after), reach, after)
    sampler.reset(prefix)
    return [scored[c] for c in continuations]


def _common_len(a: bytes, b: bytes) -> int:
    """Length of the longest common prefix of two byte strings.

    >>> _common_len(b"ual", b"uals"), _common_len(b"ab", b"b")
    (3, 0)
    """
    n = 0
    for x, y in zip(a, b, strict=False):  # stops at the shorter
        if x != y:
            break
        n += 1
    return n
