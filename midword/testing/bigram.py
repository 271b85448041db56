"""A token bigram language model counted from text: a cheap, real stand-in for a trained
model on any tokenizer (benchmarks only).

The lazy PBP solve (engine/sample/lazy_pbp.py) scores the covering tree's internal nodes only
where the model's mass goes, so its inference-token count depends on the model. A
random-weight model spreads its mass over the whole vocabulary and says little about
that; training a transformer for each 128k-200k vocabulary is out of reach here. A
bigram model counted from the shipped model's training split knows which tokens follow
which in real code (indentation, identifiers, operators), which is what decides where
a solve goes.

    P(t | prev) = (count(prev, t) + k * P_uni(t)) / (count(prev) + k)
    P_uni(t)    = (count(t) + 0.5) / (N + 0.5 V)

>>> model = BigramModel(5, [[1, 2, 1, 2, 1, 3]], start_id=0)
>>> round(float(np.exp(model.row(1)[2])), 3), round(float(np.exp(model.row(1)[3])), 3)
(0.566, 0.289)
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from midword.engine import ForwardStep, TreeScoringSession

__all__ = ["BigramModel", "BigramSession"]

ROW_CACHE = 64  # rows kept (a 200k vocabulary's row is 1.6 MB)


class BigramModel:
    """Interpolated bigram over token ids; documents start after ``start_id``.

    ``smoothing`` is k above: how much of the unigram distribution a context mixes in.
    """

    def __init__(
        self,
        vocab_size: int,
        docs: Sequence[Sequence[int]],
        start_id: int,
        smoothing: float = 1.0,
    ) -> None:
        self.vocab_size = int(vocab_size)
        self.bos_token_id = int(start_id)
        self.smoothing = float(smoothing)
        ids = [np.asarray([start_id, *doc], dtype=np.int64) for doc in docs]
        unigram = np.bincount(np.concatenate(ids), minlength=self.vocab_size).astype(np.float64)
        self._uniform = (unigram + 0.5) / (unigram.sum() + 0.5 * self.vocab_size)  # [V]
        pairs = np.concatenate([d[:-1] * self.vocab_size + d[1:] for d in ids if d.size > 1])
        self._keys, self._counts = np.unique(pairs, return_counts=True)  # sorted pair keys
        self._prev = self._keys // self.vocab_size  # [P] sorted: rows are slices
        self._rows: OrderedDict[int, np.ndarray] = OrderedDict()

    def row(self, prev: int) -> np.ndarray:
        """float64 [V] log P(t | prev), read-only."""
        cached = self._rows.get(prev)
        if cached is not None:
            self._rows.move_to_end(prev)
            return cached
        lo, hi = np.searchsorted(self._prev, [prev, prev + 1])
        probs = self.smoothing * self._uniform  # [V] a fresh array
        probs[self._keys[lo:hi] % self.vocab_size] += self._counts[lo:hi]
        out = np.log(probs / (self._counts[lo:hi].sum() + self.smoothing))
        out.setflags(write=False)
        self._rows[prev] = out
        if len(self._rows) > ROW_CACHE:
            self._rows.popitem(last=False)
        return out

    def sequence_logprobs(self, tokens: Sequence[int]) -> np.ndarray:
        """float64 [len(tokens), V]: row i is the distribution after tokens[: i + 1]."""
        return (
            np.stack([self.row(int(t)) for t in tokens])
            if len(tokens)
            else np.zeros((0, self.vocab_size))
        )

    def session(self, bos_id: int | None = None) -> BigramSession:
        return BigramSession(self, bos_id)


class BigramSession(TreeScoringSession):
    """The shared tree session over a bigram: a query's row depends on its own token only,
    and the "cache" is the token of each row (so `cache_len` is checked like a model's)."""

    def __init__(self, model: BigramModel, bos_id: int | None = None) -> None:
        super().__init__(model.vocab_size, bos_id)
        self.model = model
        self._tokens = np.zeros(0, dtype=np.int64)  # [rows]

    def cache_len(self) -> int:
        return len(self._tokens)

    def _clear(self) -> None:
        self._tokens = np.zeros(0, dtype=np.int64)

    def _apply(self, step: ForwardStep) -> np.ndarray:
        tokens = np.concatenate([self._tokens[step.keep], step.tokens])  # [K+Q]
        self._tokens = tokens[step.order]
        rows = [self.model.row(int(step.tokens[q])) for q in step.logit_queries]
        return np.stack(rows) if rows else np.zeros((0, self.vocab_size))
