"""What a sampler does to a distribution before drawing from it: temperature (0 =
greedy), top-k and top-p (`Transform`), renormalized over what is left; and the
``logsumexp`` the samplers add log-probabilities with.

>>> Transform(temperature=0.5).apply(np.log(np.array([0.25, 0.75]))).round(4).tolist()
[-2.3026, -0.1054]
>>> logsumexp(np.array([NEG_INF, NEG_INF]))
-inf
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["NEG_INF", "Transform", "logsumexp"]

NEG_INF = float("-inf")


def logsumexp(values: np.ndarray) -> float:
    """log(sum(exp(values))) that is -inf for an empty or all -inf input.

    >>> logsumexp(np.log(np.array([0.25, 0.25])))
    -0.6931471805599453
    """
    if values.size == 0:
        return NEG_INF
    top = float(values.max())
    if top == NEG_INF:
        return NEG_INF
    shifted = values - top
    # exp in place: one vocabulary-size temporary per call instead of two (called per key)
    return top + float(np.log(np.exp(shifted, out=shifted).sum()))


@dataclass(frozen=True)
class Transform:
    """Sampling transform of a distribution: temperature (0 = greedy), top-k, top-p.

    >>> Transform().is_identity
    True
    >>> Transform(temperature=0).is_greedy
    True
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0

    @property
    def is_identity(self) -> bool:
        return self.temperature == 1 and self.top_k == 0 and self.top_p == 1

    def apply(self, logp: np.ndarray) -> np.ndarray:
        """Transformed log-probs over the last axis, renormalized (greedy: one-hot argmax).

        >>> Transform(top_k=1).apply(np.log(np.array([0.2, 0.8]))).tolist()
        [-inf, 0.0]
        """
        if self.is_identity:
            return logp
        if np.ndim(logp) == 1 and not self.is_greedy:
            return self._apply_row(np.asarray(logp))
        out = np.array(logp, dtype=np.float64)
        if self.is_greedy:
            best = np.argmax(out, axis=-1)
            out = np.full_like(out, NEG_INF)
            np.put_along_axis(out, best[..., None], 0.0, axis=-1)
            return out
        out = out / self.temperature
        if self.top_k and self.top_k < out.shape[-1]:
            kth = np.partition(out, -self.top_k, axis=-1)[..., -self.top_k, None]
            out = np.where(out >= kth, out, NEG_INF)
        out = _normalize(out)
        if self.top_p < 1:
            order = np.argsort(-out, axis=-1)
            sorted_p = np.exp(np.take_along_axis(out, order, axis=-1))
            before = np.cumsum(sorted_p, axis=-1) - sorted_p  # mass strictly above each entry
            drop_sorted = before >= self.top_p
            drop = np.zeros_like(drop_sorted)
            np.put_along_axis(drop, order, drop_sorted, axis=-1)
            out = _normalize(np.where(drop, NEG_INF, out))
        return out

    def _apply_row(self, logp: np.ndarray) -> np.ndarray:
        """`apply` on one row (what each generated token asks), the same numbers with fewer
        vocabulary-sized passes: the temperature divides into a fresh array that is then
        normalized in place, and top-p sorts only the likeliest entries (`_top_p_keep`)
        where the row's ``argsort`` over a 152k vocabulary took longer than a model step."""
        out = np.divide(logp, self.temperature, dtype=np.float64)  # a fresh array
        n = out.shape[-1]
        if self.top_k and self.top_k < n:
            kth = np.partition(out, -self.top_k)[-self.top_k]
            out[out < kth] = NEG_INF
        out = _normalize_row(out)
        if self.top_p < 1:
            keep = _top_p_keep(out, self.top_p)
            kept = np.full_like(out, NEG_INF)
            kept[keep] = out[keep]
            out = _normalize_row(kept)
        return out


# top-p on one row sorts this many likeliest entries first (more while they hold too little)
TOP_P_FIRST = 1024
# ... and trusts the partial sort once the last sorted entry is dropped by this margin:
# entries after it have at least that much mass above them, give or take a few ulps
TOP_P_MARGIN = 1e-9


def _top_p_keep(logp: np.ndarray, top_p: float) -> np.ndarray:
    """Indices of the entries top-p keeps (each with less than ``top_p`` of the mass strictly
    before it in descending order) of a normalized 1-D row, by sorting only its likeliest
    ``k`` entries: when the ``k``-th is dropped by TOP_P_MARGIN, every later entry is too.
    The mass before each sorted entry is the same cumulative sum as a full sort's (a
    prefix of it); tied values may be ordered differently, as ``argsort`` may order them.

    >>> row = np.log(np.array([0.1, 0.5, 0.15, 0.25]))
    >>> sorted(_top_p_keep(row, 0.7).tolist())
    [1, 3]
    """
    n = logp.size
    k = min(n, TOP_P_FIRST)
    while True:
        if k >= n:
            order = np.argsort(-logp)
        else:
            likeliest = np.argpartition(-logp, k - 1)[:k]
            order = likeliest[np.argsort(-logp[likeliest])]
        sorted_p = np.exp(logp[order])
        before = np.cumsum(sorted_p) - sorted_p  # mass strictly above each entry
        if k >= n or before[-1] >= top_p + TOP_P_MARGIN:
            return order[before < top_p]
        k = _next_k(k, n, top_p - (before[-1] + sorted_p[-1]), float(sorted_p[-1]))


def _next_k(k: int, n: int, missing: float, smallest: float) -> int:
    """How many entries to sort next: eight times more, or at least enough to hold the
    ``missing`` mass if each is at most as likely as the ``smallest`` sorted so far; all
    of them once that is over a quarter of the row (a flat row: one full sort is cheaper).

    >>> _next_k(1024, 150_000, 0.01, 1e-4), _next_k(1024, 150_000, 0.5, 1e-5)
    (8192, 150000)
    """
    wanted = max(8 * k, k + missing / smallest if smallest > 0 else n)
    return int(wanted) if wanted <= n // 4 else n


def _normalize_row(row: np.ndarray) -> np.ndarray:
    """`_normalize` of a 1-D row, in place (the same operations in the same order)."""
    top = float(row.max())
    if not np.isfinite(top):
        top = 0.0
    row -= top
    with np.errstate(divide="ignore"):
        total = np.log(np.exp(row).sum())
    row -= total
    return row


def _normalize(logp: np.ndarray) -> np.ndarray:
    top = np.max(logp, axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return logp - top - np.log(np.sum(np.exp(logp - top), axis=-1, keepdims=True))
