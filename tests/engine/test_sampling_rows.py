"""`Transform.apply` on one row (each generated token's transform, issue 23): the same
numbers as the matrix path, and top-p's partial sort against a brute-force nucleus."""

from __future__ import annotations

import numpy as np
import pytest
from midword.engine.sample import transform as transforms
from midword.engine.sample.transform import NEG_INF, Transform

VOCAB = 151_936  # Qwen2.5's output size: the row size the partial sort is for


def _row(rng: np.random.Generator, n: int, scale: float) -> np.ndarray:
    """Normalized log-probs without ties (continuous draws)."""
    logits = rng.normal(size=n) * scale
    logits -= logits.max()
    return logits - np.log(np.exp(logits).sum())


def _nucleus_by_hand(logp: np.ndarray, top_p: float) -> set[int]:
    """Top-p from its definition: walk the entries from the likeliest, keeping each one
    while the mass already walked past is below top_p (a plain Python loop)."""
    order = sorted(range(logp.size), key=lambda i: -logp[i])
    kept, above = set(), 0.0
    for i in order:
        if above >= top_p:
            break
        kept.add(i)
        above += float(np.exp(logp[i]))
    return kept


TRANSFORMS = [
    Transform(temperature=0.7),
    Transform(temperature=1.3, top_k=40),
    Transform(temperature=1.0, top_p=0.9),
    Transform(temperature=0.8, top_k=500, top_p=0.95),
    Transform(temperature=1.0, top_p=0.5),
]


@pytest.mark.parametrize("transform", TRANSFORMS, ids=str)
@pytest.mark.parametrize(("n", "scale"), [(7, 1.0), (3000, 2.0), (VOCAB, 3.0), (VOCAB, 8.0)])
def test_one_row_gives_the_matrix_paths_numbers(transform: Transform, n: int, scale: float):
    rng = np.random.default_rng(n + int(10 * scale))
    rows = np.stack([_row(rng, n, scale) for _ in range(2)])
    matrix = transform.apply(rows)  # [2, n]: the general path
    for k in range(2):
        one = transform.apply(rows[k])
        assert one.shape == (n,)
        assert np.array_equal(one, matrix[k])  # bit for bit, -inf where dropped


@pytest.mark.parametrize("top_p", [0.3, 0.9, 0.999])
@pytest.mark.parametrize("scale", [0.05, 1.0, 6.0])
def test_top_p_keeps_the_nucleus(top_p: float, scale: float) -> None:
    rng = np.random.default_rng(int(100 * top_p + scale))
    logp = _row(rng, 20_000, scale)  # scale 0.05: a flat row, the nucleus outgrows 1024
    kept = set(transforms._top_p_keep(logp, top_p).tolist())
    assert kept == _nucleus_by_hand(logp, top_p)
    out = Transform(top_p=top_p).apply(logp)
    assert set(np.flatnonzero(np.isfinite(out)).tolist()) == kept
    assert np.exp(out).sum() == pytest.approx(1.0, abs=1e-12)


def test_the_partial_sort_grows_until_it_can_tell(monkeypatch) -> None:
    """A row whose likeliest TOP_P_FIRST entries hold less than top_p: more are sorted."""
    sorts: list[int] = []
    real = np.argsort

    def counting(a, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        sorts.append(np.size(a))
        return real(a, *args, **kwargs)

    monkeypatch.setattr(transforms.np, "argsort", counting)
    logp = np.full(50_000, -np.log(50_000.0))  # uniform: the first 1024 hold 2%
    logp[:10] += 1e-9  # no ties among the likeliest few
    keep = transforms._top_p_keep(logp, 0.5)
    assert sorts[0] == transforms.TOP_P_FIRST and sorts[-1] > transforms.TOP_P_FIRST
    assert keep.size == pytest.approx(25_000, abs=2)


def test_a_row_with_dropped_entries_and_top_p() -> None:
    rng = np.random.default_rng(3)
    logp = _row(rng, 5000, 2.0)
    logp[::3] = NEG_INF  # entries top-k (or ignore_eos) dropped already
    logp -= np.log(np.exp(logp).sum())
    transform = Transform(top_p=0.8)
    one = transform.apply(logp)
    assert np.array_equal(one, transform.apply(logp[None])[0])
    assert not np.isfinite(one[::3]).any()


def test_greedy_and_identity_rows_are_unchanged() -> None:
    rng = np.random.default_rng(4)
    logp = _row(rng, 100, 1.0)
    assert Transform().apply(logp) is logp
    greedy = Transform(temperature=0).apply(logp)
    assert np.flatnonzero(np.isfinite(greedy)).tolist() == [int(np.argmax(logp))]
