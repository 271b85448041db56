"""The thresholds of ``minConfidence: auto``, chosen on the development cuts of
``midword bench acceptance`` (tables and plots: midword/bench/acceptance_report.py).

**Tuning ``auto``.** Two thresholds, on the development split, with ``bytesampler`` (the
method whose probabilities are exact) under today's scope (``multiline: auto``): the cut
threshold and the silence threshold for the first word, each over `THRESHOLDS` (every
pair). The objective is accepted characters per cut minus `WASTE_COST` (0.5) times wasted
characters per cut. Why: accepted characters are the value (GitHub's accepted-and-retained
argument: the acceptance rate alone rewards short suggestions), and a character shown and
rejected costs the reading of it; code is read about twice as fast as it is typed, so a
wasted character costs about half what an accepted one saves. A policy cut can never
accept more than the text it cuts, so accepted characters alone would pick "no cut";
wasted characters alone would pick "never show". Ties go to the pair that shows fewer
suggestions. A silence threshold apart from the cut threshold is one more parameter: the
best pair is taken over the best single threshold (silence = cut, the engine's rule) only
when its paired gain over the development cuts exceeds one standard error. The choices at
other costs of a wasted character are listed too (sensitivity).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from midword.bench import common
from midword.bench.acceptance_policies import (
    BASELINES,
    TODAY,
    WASTE_COST,
    Case,
    Policy,
    ScopedCache,
    confident,
    evaluate,
)

THRESHOLDS = (0.0, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6)
THRESHOLDS += (0.7, 0.8, 0.9)
SENSITIVITY = (0.25, 0.5, 1.0)  # other costs of a wasted character, for the record


# ---------------------------------------------------------------------- tuning
def objective(m: dict[str, float], waste_cost: float) -> float:
    """Accepted minus ``waste_cost`` x wasted characters per cut."""
    return m["accepted_chars_per_cut"] - waste_cost * m["wasted_chars_per_cut"]


def grid(cache: ScopedCache) -> list[dict[str, Any]]:
    """Every (cut, silence) pair of `THRESHOLDS` over the cache's cases and scope."""
    return [
        {"cut": c, "silence": s, **cache.evaluate(confident(c, s, cache.multiline))}
        for c in THRESHOLDS
        for s in THRESHOLDS
    ]


def best(points: Sequence[dict[str, Any]], waste_cost: float = WASTE_COST) -> dict[str, Any]:
    """The point of highest objective; ties to fewer suggestions shown, then to the lower
    thresholds."""

    def key(p: dict[str, Any]) -> tuple[float, ...]:
        return (round(objective(p, waste_cost), 9), -p["shown_per_cut"], -p["cut"], -p["silence"])

    return max(points, key=key)


def paired_gain(
    cache: ScopedCache, better: Policy, simpler: Policy, waste_cost: float = WASTE_COST
) -> tuple[float, float]:
    """Mean and standard error of the per-cut objective of ``better`` minus ``simpler``
    (the same cuts: a paired difference)."""
    pairs = zip(cache.outcomes(better), cache.outcomes(simpler), strict=True)
    diffs = [
        (a.accepted_chars - b.accepted_chars) - waste_cost * (a.wasted_chars - b.wasted_chars)
        for a, b in pairs
    ]
    if len(diffs) < 2:
        return common.mean(diffs), math.inf
    return common.mean(diffs), common.std(diffs) / math.sqrt(len(diffs))


def choose(
    cache: ScopedCache, points: Sequence[dict[str, Any]], waste_cost: float = WASTE_COST
) -> dict[str, Any]:
    """The best single threshold (silence = cut: the engine's rule today) unless the best
    pair beats it by more than one standard error of the paired difference (the
    one-standard-error rule: the extra parameter must earn its place)."""
    pair = best(points, waste_cost)
    single = best([p for p in points if p["cut"] == p["silence"]], waste_cost)
    gain, se = paired_gain(
        cache, confident(pair["cut"], pair["silence"]), confident(single["cut"]), waste_cost
    )
    chosen = pair if gain > se else single
    return {
        "cut": chosen["cut"],
        "silence": chosen["silence"],
        "pair": {k: pair[k] for k in ("cut", "silence")},
        "single": single["cut"],
        "pair_gain": gain,
        "pair_gain_se": se,
        "metrics": chosen,
    }


def tune(cases: Sequence[Case]) -> dict[str, Any]:
    """The thresholds `auto` should have, chosen on ``cases`` (the development split)."""
    cache = ScopedCache(cases)
    points = grid(cache)
    chosen = choose(cache, points)
    return {
        "cut": chosen["cut"],
        "silence": chosen["silence"],
        "waste_cost": WASTE_COST,
        "best_pair": chosen["pair"],
        "best_single": chosen["single"],
        "pair_gain": chosen["pair_gain"],
        "pair_gain_se": chosen["pair_gain_se"],
        "dev": chosen["metrics"],
        "sensitivity": {
            f"{w:g}": {k: choose(cache, points, w)[k] for k in ("cut", "silence")}
            for w in SENSITIVITY
        },
    }


def goal_pairs(cases: Sequence[Case], multiline: str) -> dict[str, Any]:
    """The (cut, silence) pairs that meet the issue's goal against today's policy on
    ``cases``, and the one of highest objective among them."""
    today = evaluate(next(p for p in BASELINES if p.name == TODAY), cases)
    met = [p for p in grid(ScopedCache(cases, multiline)) if meets(changes(p, today))]
    top = best(met) if met else None
    return {
        "count": len(met),
        "best": None if top is None else {"cut": top["cut"], "silence": top["silence"]},
    }


def sweep(cases: Sequence[Case], multiline: str = "auto") -> list[dict[str, Any]]:
    """One threshold for both cut and silence (the engine's rule), over `THRESHOLDS`."""
    cache = ScopedCache(cases, multiline)
    return [
        {"threshold": t, **cache.evaluate(confident(t, multiline=multiline))} for t in THRESHOLDS
    ]


def change(new: float, old: float) -> float:
    """The relative change from ``old`` to ``new`` (nan from 0)."""
    return (new - old) / old if old else math.nan


def changes(new: dict[str, float], old: dict[str, float]) -> dict[str, float]:
    """Relative changes of accepted characters, suggestions shown and wasted characters."""
    return {
        "accepted": change(new["accepted_chars_per_cut"], old["accepted_chars_per_cut"]),
        "shown": change(new["shown_per_cut"], old["shown_per_cut"]),
        "wasted": change(new["wasted_chars_per_cut"], old["wasted_chars_per_cut"]),
    }


def meets(delta: dict[str, float]) -> bool:
    """The issue's goal: accepted >= +0%, shown <= -30%, wasted <= -40%."""
    return delta["accepted"] >= 0 and delta["shown"] <= -0.3 and delta["wasted"] <= -0.4
