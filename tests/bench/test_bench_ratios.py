"""Honest speed ratios in `midword bench overhead` (issue 23): the ratio of total times and
the median of paired per-run ratios with their interquartile range, a flag where that
spread makes the ratio meaningless, and runs that take turns between methods."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from midword.bench import overhead
from midword.bench.overhead import SPREAD_LIMIT, paired_ratios


def _quartiles_by_hand(values: list[float]) -> tuple[float, float, float]:
    """Quartiles by linear interpolation between order statistics (numpy's default)."""
    ordered = sorted(values)

    def at(q: float) -> float:
        pos = q * (len(ordered) - 1)
        low, high = math.floor(pos), math.ceil(pos)
        return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)

    return at(0.25), at(0.5), at(0.75)


@pytest.mark.parametrize("seed", range(20))
def test_paired_ratios_match_a_direct_computation(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(3, 15)
    theirs = [rng.uniform(0.5, 3.0) for _ in range(n)]
    ours = [t * rng.uniform(0.7, 1.6) for t in theirs]
    r = paired_ratios(ours, theirs)
    q1, median, q3 = _quartiles_by_hand([a / b for a, b in zip(ours, theirs, strict=True)])
    assert r.pairs == n
    assert r.of_totals == pytest.approx(sum(ours) / sum(theirs), rel=1e-12)
    assert (r.q1, r.median, r.q3) == pytest.approx((q1, median, q3), rel=1e-12)
    assert r.meaningful == (q3 - q1 <= SPREAD_LIMIT * median)


def test_the_totals_ratio_is_not_a_mean_of_speeds() -> None:
    """The issue's case: one fast PBP run made a mean of speeds read 1.00x while the
    total times read 5.33 s against 2.39 s."""
    normal = [0.24] * 10
    pbp = [0.03] + [0.587] * 9  # one very fast run, the rest over twice as slow
    speeds = [1 / p / (1 / n) for p, n in zip(pbp, normal, strict=True)]
    assert sum(speeds) / len(speeds) > 0.9  # what the old column showed: about even
    r = paired_ratios(pbp, normal)
    assert r.of_totals == pytest.approx(sum(pbp) / sum(normal))
    assert r.of_totals > 2.1 and r.median == pytest.approx(0.587 / 0.24)


def test_a_wide_spread_is_flagged() -> None:
    steady = paired_ratios([1.0, 1.02, 0.98, 1.01, 0.99], [1.0] * 5)
    assert steady.meaningful and steady.why == ""
    noisy = paired_ratios([0.5, 2.5, 1.0, 0.4, 3.0], [1.0] * 5)
    assert not noisy.meaningful and "IQR" in noisy.why
    few = paired_ratios([1.0, 1.0], [1.0, 1.0])
    assert not few.meaningful and "fewer than" in few.why


def test_unpaired_or_empty_input() -> None:
    with pytest.raises(ValueError, match="pairs"):
        paired_ratios([1.0], [1.0, 2.0])
    empty = paired_ratios([], [])
    assert empty.pairs == 0 and math.isnan(empty.of_totals) and not empty.meaningful


def _records(times: dict[str, list[float]]) -> list[dict]:
    return [
        {"key": f"wall/{m}/{i}", "kind": "wall", "method": m, "seconds": t, "bytes": 40}
        for m, runs in times.items()
        for i, t in enumerate(runs)
    ]


def test_report_prints_both_ratios_and_the_flag() -> None:
    times = {
        "normal": [1.0, 1.1, 0.9, 1.0],
        "pbp": [1.05, 1.1, 0.95, 1.0],
        "bytes": [3.0, 9.0, 1.0, 6.0],  # too noisy to compare
    }
    markdown, summary = overhead.report(_records(times))
    wall = summary["wall"]
    assert wall["normal"]["ratio"] == 1.0
    assert wall["pbp"]["ratio"] == pytest.approx(sum(times["pbp"]) / sum(times["normal"]))
    assert wall["pbp"]["paired"]["meaningful"] and not wall["bytes"]["paired"]["meaningful"]
    assert wall["pbp"]["total_seconds"] == pytest.approx(sum(times["pbp"]))
    pbp_row = next(
        line for line in markdown.splitlines() if line.startswith("| ByteSampler PBP mode |")
    )
    assert f"{wall['pbp']['ratio']:.2f}x" in pbp_row and "spread too wide" not in pbp_row
    bytes_row = next(
        line for line in markdown.splitlines() if line.startswith("| ByteSampler byte sampling |")
    )
    assert "spread too wide" in bytes_row


def test_runs_pair_by_index_even_when_one_method_has_fewer() -> None:
    records = _records({"normal": [1.0, 2.0, 4.0], "pbp": [2.0, 4.0]})
    _, summary = overhead.report(records)
    assert summary["wall"]["pbp"]["paired"]["pairs"] == 2
    assert summary["wall"]["pbp"]["ratio"] == pytest.approx(6.0 / 3.0)


def test_methods_take_turns(monkeypatch, tmp_path) -> None:
    """Run r of every method comes before run r + 1 of any: load changes hit all alike."""
    seen: list[str] = []

    def fake_do(args, rundir, runner, docs, todo) -> None:  # noqa: ANN001
        seen.extend(k for k in todo if k.startswith("wall/"))

    monkeypatch.setattr(overhead, "_do", fake_do)
    monkeypatch.setattr(overhead.common, "load_model", lambda args: (None, None))
    monkeypatch.setattr(overhead, "Runner", lambda model, engine: None)
    monkeypatch.setattr(overhead.data, "load_texts", lambda text, glob: [])
    monkeypatch.setattr(overhead, "report", lambda records: ("", {}))
    monkeypatch.setattr(overhead, "_plot", lambda rundir, summary: None)
    monkeypatch.setattr(overhead.common, "finish", lambda *a: None)
    monkeypatch.setattr(overhead.common, "model_settings", lambda args: {})
    monkeypatch.setattr(overhead.data, "text_settings", lambda args: {})
    args = type("Args", (), {"out": str(tmp_path), "limit": 0, "runs": 3, "window": 10})()
    args.tokens, args.prompt_bytes, args.text, args.glob = 4, 100, None, "*"
    overhead.run(args)
    expected = [f"wall/{m}/{r}" for r, m in itertools.product(range(3), overhead.WALL_METHODS)]
    assert seen == expected
