"""Where a suggestion stops being likely: the confidence cut (issue 38).

A completion is made in steps: the covering tree's leaf, then one token at a time (in
byte mode one byte at a time). `Completion.spans` holds, per step, the byte offset where
its text ends and its log-probability given everything before it, so the first ``k``
steps have the log-probability of their sum: the exact probability, given the prefix,
that the model goes on with exactly these steps (the leaf's share among all leaves, then
each token under the model's own distribution). It only falls as steps are added.

**The rule.** The confidence of the first ``p`` bytes is that of the steps needed to
spell them (the last one may spell more). The text is cut at the largest ``p`` whose
confidence is at least the threshold and where a cut does not split a word: ``p`` is 0,
the end of the text, or a point with no word byte on both sides (word bytes: ASCII
letters, digits, ``_`` and every non-ASCII byte, so a cut never splits a character
either). Whitespace left at the end of a cut is dropped. So whole words whose last byte
is still above the threshold are kept, and a word that falls below it goes entirely,
never leaving a piece the user would have to delete. When the text holds no step below
the threshold it is kept whole (even if it ends inside a word: that is the token budget's
cut, as without a threshold). A step of unknown log-probability (None: a baseline
method, an ensemble, a remote engine) means no cut.

>>> data = b"foo(bar, baz)"
>>> spans = [(3, -0.1), (4, -0.1), (7, -0.5), (8, -0.1), (13, -2.0)]
>>> confidence_cut(data, spans, math.log(0.5))   # "bar" ends at 0.41: cut after "("
4
>>> confidence_cut(data, spans, math.log(0.3))   # "bar" kept; " baz)" goes
8
>>> confidence_cut(data, spans, -math.inf)
13
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["AUTO_MIN_CONFIDENCE", "confidence_cut", "min_logprob"]

# "auto": tuned by `midword bench acceptance` (docs/benchmarks.md) on accepted minus half
# the wasted characters per cut, for the cut and the silence alike. On 400 cuts the
# development half's best (0.15, and 0.2 for silence) beat 0.2 by less than its noise and
# lost to it on the held-out half, so 0.2 stayed
AUTO_MIN_CONFIDENCE = 0.2
_SPACE = b" \t\r\n"

Span = tuple[int, "float | None"]  # (end byte of the step's text, its log-probability)


def min_logprob(min_confidence: float | str) -> float:
    """The log-probability threshold of a ``minConfidence`` value (0: -inf, no cut).

    >>> min_logprob(0), round(min_logprob("auto"), 4)
    (-inf, -1.6094)
    """
    value = AUTO_MIN_CONFIDENCE if min_confidence == "auto" else float(min_confidence)
    return math.log(value) if value > 0 else -math.inf


def _word(byte: int) -> bool:
    return byte >= 0x80 or byte == 0x5F or chr(byte).isalnum()


def _splits_a_word(data: bytes, p: int) -> bool:
    return 0 < p < len(data) and _word(data[p - 1]) and _word(data[p])


def _limit(spans: Sequence[Span], threshold: float) -> int | None:
    """The start of the first step whose cumulative log-probability is below
    ``threshold`` (bytes from there on are below it); None: no such step, or one of
    unknown log-probability comes first."""
    total, start = 0.0, 0
    for end, logprob in spans:
        if logprob is None:
            return None
        total += logprob
        if total < threshold:
            return start
        start = end
    return None


def confidence_cut(data: bytes, spans: Sequence[Span], threshold: float) -> int:
    """Where to cut ``data`` (a byte offset) for a log-probability ``threshold``, by the
    rule in the module docstring; ``len(data)`` when nothing is cut."""
    limit = _limit(spans, threshold) if threshold > -math.inf else None
    if limit is None or limit >= len(data):
        return len(data)
    p = limit
    while _splits_a_word(data, p):
        p -= 1
    while p > 0 and data[p - 1] in _SPACE:
        p -= 1
    return p
