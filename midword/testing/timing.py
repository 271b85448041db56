"""Small helpers the speed scripts in ``benchmarks/`` share.

>>> percentile([3.0, 1.0, 2.0, 4.0], 0.5), percentile([3.0, 1.0, 2.0, 4.0], 0.95)
(3.0, 4.0)
"""

from __future__ import annotations

__all__ = ["percentile"]


def percentile(values: list[float], q: float) -> float:
    """The value at quantile ``q`` (0 to 1) by nearest rank, rounding up."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
