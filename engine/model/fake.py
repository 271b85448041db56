"""A deterministic fake language model (numpy only) for tests of the layers above the
backend: `FakeModel` draws the log-probs after a context from a hash of the context, and
`FakeSession` is a `TreeScoringSession` over it that sees only what the tree mask lets
each new token see, so a wrong mask or position gives wrong log-probs here too.

Example:
    >>> model = FakeModel(vocab_size=50, seed=0)
    >>> session = model.session(bos_id=1)
    >>> lp = session.logprobs([5, 6], [(), (7,), (7, 8), (9,)])
    >>> np.allclose(lp[2], model.next_logprobs([1, 5, 6, 7, 8]))
    True
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .backend import TreeScoringSession
from .forward_plan import ForwardStep

__all__ = ["FakeModel", "FakeSession"]

_HASH_MULT = np.uint64(0x9E3779B97F4A7C15)


def _context_hash(tokens: np.ndarray) -> int:
    """Polynomial hash of a token sequence mod 2**64 (order-sensitive, length-sensitive).

    Example:
        >>> _context_hash(np.array([1, 2])) != _context_hash(np.array([2, 1]))
        True
    """
    n = len(tokens)
    powers = np.cumprod(np.full(n, _HASH_MULT, dtype=np.uint64), dtype=np.uint64)  # [n]
    with np.errstate(over="ignore"):
        terms = (tokens.astype(np.uint64) + np.uint64(1)) * powers
    return int(terms.sum(dtype=np.uint64))


class FakeModel:
    """Deterministic stand-in for a language model: logits from a hash of the context.

    The next-token log-probs after a context are ``log_softmax(scale * z)`` with
    ``z ~ N(0, 1)^vocab`` drawn from a generator seeded by ``(seed, hash(context))``:
    any two contexts get unrelated distributions, the same context always the same.

    Example:
        >>> m = FakeModel(10, seed=3)
        >>> np.allclose(m.sequence_logprobs([4, 5])[1], m.next_logprobs([4, 5]))
        True
    """

    def __init__(self, vocab_size: int, seed: int = 0, scale: float = 2.0) -> None:
        self.vocab_size = int(vocab_size)
        self.seed = int(seed)
        self.scale = float(scale)

    def next_logprobs(self, context: Sequence[int]) -> np.ndarray:
        """float64 [vocab_size]: the distribution after `context` (must be non-empty)."""
        ctx = np.asarray(context, dtype=np.int64)
        if len(ctx) == 0:
            raise ValueError("the fake model needs a non-empty context")
        return self._logprobs_for_hash(_context_hash(ctx))

    def sequence_logprobs(self, tokens: Sequence[int]) -> np.ndarray:
        """float64 [len(tokens), vocab_size]: row i is the distribution after tokens[: i + 1]."""
        ctx = np.asarray(tokens, dtype=np.int64)
        rows = [self.next_logprobs(ctx[: i + 1]) for i in range(len(ctx))]
        return np.stack(rows) if rows else np.zeros((0, self.vocab_size))

    def session(
        self, bos_id: int | None = None, trunk_logits_window: int = 8, hold_last_tree: bool = False
    ) -> FakeSession:
        """A new `FakeSession` over this model (``hold_last_tree``: keep the last tree's
        nodes as llama.cpp sessions do, see `TreeScoringSession`)."""
        session = FakeSession(self, bos_id=bos_id, trunk_logits_window=trunk_logits_window)
        session.hold_last_tree = hold_last_tree
        return session

    def _logprobs_for_hash(self, h: int) -> np.ndarray:
        rng = np.random.default_rng((self.seed, h))
        logits = self.scale * rng.standard_normal(self.vocab_size)  # [V]
        logits -= logits.max()
        return logits - np.log(np.exp(logits).sum())


class FakeSession(TreeScoringSession):
    """`TreeScoringSession` over a `FakeModel`: a "cache" of (token, position) rows.

    Like a real transformer, the fake sees only what the attention mask lets it
    see: the context of a new token is the tokens of the rows it attends to,
    sorted by position id. A wrong mask or position therefore gives wrong
    log-probs here too, and a mask that is not one row per position 0..p raises
    AssertionError.

    Example:
        >>> s = FakeModel(30).session()
        >>> lp = s.logprobs([1, 2], [(3,)])
        >>> np.allclose(lp[0], FakeModel(30).next_logprobs([1, 2, 3]))
        True
    """

    def __init__(
        self, model: FakeModel, bos_id: int | None = None, trunk_logits_window: int = 8
    ) -> None:
        super().__init__(model.vocab_size, bos_id, None, trunk_logits_window)
        self.model = model
        self._tokens = np.zeros(0, dtype=np.int64)  # [rows] token of each cache row
        self._positions = np.zeros(0, dtype=np.int64)  # [rows] position id of each cache row

    def cache_len(self) -> int:
        """Rows held by the fake cache."""
        return len(self._tokens)

    def _clear(self) -> None:
        self._tokens = np.zeros(0, dtype=np.int64)
        self._positions = np.zeros(0, dtype=np.int64)

    def _apply(self, step: ForwardStep) -> np.ndarray:
        tokens = np.concatenate([self._tokens[step.keep], step.tokens])  # [K+Q]
        positions = np.concatenate([self._positions[step.keep], step.positions])  # [K+Q]
        mask = step.attention_mask()  # [Q, K+Q]
        n_keep = len(step.keep)
        out = [self._score(mask[q], tokens, positions, n_keep + int(q)) for q in step.logit_queries]
        self._tokens, self._positions = tokens[step.order], positions[step.order]
        return np.stack(out) if out else np.zeros((0, self.vocab_size))

    def _score(
        self, visible: np.ndarray, tokens: np.ndarray, positions: np.ndarray, own: int
    ) -> np.ndarray:
        """Log-probs after the context that row `own` sees: visible rows sorted by position."""
        rows = np.flatnonzero(visible)
        rows = rows[np.argsort(positions[rows], kind="stable")]
        if not np.array_equal(positions[rows], np.arange(len(rows))) or rows[-1] != own:
            raise AssertionError(
                f"row {own} sees positions {positions[rows].tolist()}: not a single context"
            )
        return self.model._logprobs_for_hash(_context_hash(tokens[rows]))
