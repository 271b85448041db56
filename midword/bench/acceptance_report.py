"""Tables and plots of ``midword bench acceptance`` (midword/bench/acceptance.py); the
choice of the thresholds is midword/bench/acceptance_tuning.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from midword.bench import common, plots
from midword.bench.acceptance_policies import (
    BASELINES,
    KINDS,
    SPLITS,
    TODAY,
    WASTE_COST,
    Case,
    Cursor,
    Generated,
    Policy,
    confident,
    evaluate,
)
from midword.bench.acceptance_tuning import (
    THRESHOLDS,
    changes,
    goal_pairs,
    meets,
    sweep,
    tune,
)

TUNED_METHOD = "bytesampler"
COLUMNS = (
    ("shown_per_cut", "shown / cut", 3),
    ("acceptance_rate", "acceptance rate", 3),
    ("accepted_chars_per_cut", "accepted chars / cut", 2),
    ("accepted_chars_per_shown", "accepted chars / shown", 2),
    ("wasted_chars_per_cut", "wasted chars / cut", 2),
    ("objective", f"accepted - {WASTE_COST:g} x wasted", 2),
)


# ---------------------------------------------------------------------- cases
def cases_of(records: Sequence[dict], method: str) -> list[Case]:
    """Each record's cut with ``method``'s completion."""
    out = []
    for r in records:
        cursor = Cursor(r["line_prefix"], r.get("indent_unit", "    "))
        gen = Generated.from_record(r["methods"][method])
        out.append(Case(cursor, gen, r["truth"], r["cut_kind"], r["split"], r["source"]))
    return out


def subset(cases: Sequence[Case], keep: Callable[[Case], bool]) -> list[Case]:
    return [c for c in cases if keep(c)]


def in_split(split: str) -> Callable[[Case], bool]:
    return lambda c: split == "all" or c.split == split


# ---------------------------------------------------------------------- report
def policies(tuned: dict[str, Any]) -> tuple[list[Policy], list[Policy]]:
    """The rows of the main tables (today's baselines, the engine's ``auto``, the tuned
    pair with ``multiline`` auto, and with always), and the tuned rows."""
    from midword.engine import AUTO_MIN_CONFIDENCE

    auto = confident(AUTO_MIN_CONFIDENCE)
    auto = Policy(f"confidence auto (engine: {AUTO_MIN_CONFIDENCE:g})", **_fields(auto))
    c, s = tuned["cut"], tuned["silence"]
    chosen = Policy(f"confidence tuned (cut {c:g}, silence {s:g})", **_fields(confident(c, s)))
    always = confident(c, s, multiline="always")
    name = f"confidence tuned, multiline always (cut {c:g}, silence {s:g})"
    tuned_rows = [chosen, Policy(name, **_fields(always))]
    return [*BASELINES, auto, *tuned_rows], tuned_rows


def _fields(p: Policy) -> dict[str, Any]:
    return {k: getattr(p, k) for k in ("kind", "steps", "multiline", "max_lines", "cut", "silence")}


def groups_of(cases: Sequence[Case]) -> dict[str, list[Case]]:
    """The cuts of each split, of all, of each cut kind and of each source (both splits)."""
    out = {s: subset(cases, in_split(s)) for s in (*SPLITS, "all")}
    out.update({k: [c for c in cases if c.kind == k] for k in KINDS})
    for source in sorted({c.source for c in cases}):
        out[source] = [c for c in cases if c.source == source]
    return out


def report(records: Sequence[dict], methods: Sequence[str]) -> tuple[str, dict[str, Any]]:
    """Markdown and JSON summary over the given samples."""
    by_method = {m: cases_of(records, m) for m in methods}
    tuned_on = TUNED_METHOD if TUNED_METHOD in by_method else methods[0]
    tuned = tune(subset(by_method[tuned_on], in_split("dev")))
    tuned["method"] = tuned_on
    rows, tuned_rows = policies(tuned)
    summary: dict[str, Any] = {
        "cuts": {g: len(c) for g, c in groups_of(by_method[methods[0]]).items()},
        "tuned": tuned,
        "policies": {},
        "sweep": {},
    }
    for method, cases in by_method.items():
        groups = groups_of(cases)
        summary["policies"][method] = {
            p.name: {g: evaluate(p, part) for g, part in groups.items()} for p in rows
        }
        held = groups["held-out"]
        summary["sweep"][method] = {"auto": sweep(held)}
        if method == tuned_on:
            summary["sweep"][method]["always"] = sweep(held, "always")
    tuned["held-out"] = summary["policies"][tuned_on][tuned_rows[0].name]["held-out"]
    summary["goal"] = {p.name: _goal(summary["policies"][tuned_on], p.name) for p in tuned_rows}
    groups = groups_of(by_method[tuned_on])
    summary["goal_pairs"] = {
        ml: {s: goal_pairs(groups[s], ml) for s in (*SPLITS, "all")} for ml in ("auto", "always")
    }
    return _markdown(summary, rows, methods), _clean(summary)


def _goal(policies_: dict[str, Any], name: str) -> dict[str, Any]:
    """The issue's goal for policy ``name`` against today's, per group of cuts: at equal
    or higher accepted characters per cut, at least 30% fewer suggestions shown and 40%
    fewer wasted characters."""
    out: dict[str, Any] = {}
    for group, new in policies_[name].items():
        if group == "dev":
            continue
        change = changes(new, policies_[TODAY][group])
        out[group] = {"n": new["n"], **change, "met": meets(change)}
    return out


def _clean(value: Any) -> Any:
    """nan -> None, recursively (results.json stays strict JSON)."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


# ---------------------------------------------------------------------- markdown
def _policy_table(summary: dict[str, Any], rows: Sequence[Policy], methods, split: str) -> str:
    head = ["policy", "method", *(label for _, label, _ in COLUMNS)]
    body = []
    for p in rows:
        for m in methods:
            stats = summary["policies"][m][p.name][split]
            body.append([p.name, m, *(common.fmt(stats[k], d) for k, _, d in COLUMNS)])
    return common.markdown_table(head, body)


def _pct(x: float) -> str:
    return "-" if x is None or math.isnan(x) else f"{100 * x:+.0f}%"


def _goal_table(goal: dict[str, Any]) -> str:
    head = ["cuts", "n", "accepted chars / cut", "shown / cut", "wasted chars / cut", "goal met"]
    body = [
        [
            g,
            v["n"],
            _pct(v["accepted"]),
            _pct(v["shown"]),
            _pct(v["wasted"]),
            "yes" if v["met"] else "no",
        ]
        for g, v in goal.items()
    ]
    return common.markdown_table(head, body)


def _goal_tables(summary: dict[str, Any]) -> str:
    method = summary["tuned"]["method"]
    out = ""
    for name, goal in summary["goal"].items():
        out += f"\n### Goal: {name} against multiline auto (today), {method}\n\n"
        out += _goal_table(goal)
    return out + (
        "\nChange against today's policy. Goal: accepted chars / cut >= +0%, shown / cut "
        "<= -30%, wasted chars / cut <= -40%. Rows other than held-out span both splits "
        "(the thresholds were chosen on the development half).\n"
    )


def _tuning_text(tuned: dict[str, Any]) -> str:
    dev, held = tuned["dev"], tuned["held-out"]
    pair = tuned["best_pair"]
    sens = ", ".join(
        f"cost {w}: cut {v['cut']:g}, silence {v['silence']:g}"
        for w, v in tuned["sensitivity"].items()
    )
    return (
        f"Chosen on the development split ({tuned['method']}, multiline auto; objective: "
        f"accepted - {tuned['waste_cost']:g} x wasted characters per cut): **cut "
        f"{tuned['cut']:g}, silence {tuned['silence']:g}**. Best single threshold "
        f"{tuned['best_single']:g}; best pair cut {pair['cut']:g}, silence "
        f"{pair['silence']:g}, better by {tuned['pair_gain']:.2f} ± "
        f"{tuned['pair_gain_se']:.2f} characters per cut (paired; a pair is taken only when "
        f"it gains more than one standard error). Objective {dev['objective']:.2f} on dev, "
        f"{held['objective']:.2f} held out. At other costs of a wasted character: {sens}.\n"
    )


def _goal_pairs_text(summary: dict[str, Any]) -> str:
    parts = []
    for ml, splits in summary["goal_pairs"].items():
        cells = []
        for split, found in splits.items():
            top = found["best"]
            note = f" (best: cut {top['cut']:g}, silence {top['silence']:g})" if top else ""
            cells.append(f"{split} {found['count']}{note}")
        parts.append(f"multiline {ml}: " + "; ".join(cells))
    return (
        f"\nThreshold pairs (of {len(THRESHOLDS) ** 2}) that meet the goal against today, "
        f"by split: {'. '.join(parts)}.\n"
    )


def _sweep_table(summary: dict[str, Any]) -> str:
    """Rows: thresholds; a column per curve: shown / cut, accepted and wasted chars / cut."""
    curves = [
        (m, scope, points)
        for m, scopes in summary["sweep"].items()
        for scope, points in scopes.items()
    ]
    head = ["threshold", *(f"{m}, multiline {scope}" for m, scope, _ in curves)]
    body = []
    for i, t in enumerate(THRESHOLDS):
        cells = [
            f"{common.fmt(p[i]['shown_per_cut'], 2)} / {common.fmt(p[i]['accepted_chars_per_cut'], 1)}"
            f" / {common.fmt(p[i]['wasted_chars_per_cut'], 1)}"
            for _, _, p in curves
        ]
        body.append([f"{t:g}", *cells])
    return common.markdown_table(head, body)


def _markdown(summary: dict[str, Any], rows: Sequence[Policy], methods) -> str:
    n = summary["cuts"]
    counts = ", ".join(f"{k} {n[k]}" for k in n if k != "all")
    return (
        f"## Simulated acceptance ({n['all']} cuts: {counts})\n\n"
        "### Held-out split\n\n"
        + _policy_table(summary, rows, methods, "held-out")
        + "\n### Development split\n\n"
        + _policy_table(summary, rows, methods, "dev")
        + "\n### Tuning\n\n"
        + _tuning_text(summary["tuned"])
        + _goal_tables(summary)
        + _goal_pairs_text(summary)
        + "\n### Sweep: one threshold for cut and silence (the engine's rule), held-out split\n\n"
        + "Each cell: shown / cut, accepted chars / cut, wasted chars / cut.\n\n"
        + _sweep_table(summary)
        + "\nPlots: tradeoff.png (accepted characters per cut against suggestions shown per "
        "cut), wasted.png (against wasted characters per cut).\n"
    )


# ---------------------------------------------------------------------- plots
def plot(folder: Path, summary: dict[str, Any]) -> None:
    """tradeoff.png (accepted characters against suggestions shown) and wasted.png
    (against wasted characters): the sweeps as curves, the policies as points (held-out)."""
    for name, x_key, x_label, logx in (
        ("tradeoff.png", "shown_per_cut", "suggestions shown per cut", False),
        ("wasted.png", "wasted_chars_per_cut", "wasted characters per cut", True),
    ):
        plots.tradeoff(
            folder / name,
            _curves(summary, x_key),
            _points(summary, x_key),
            f"Accepted characters against {x_label.split(' per')[0]} (held-out cuts)",
            x_label,
            "accepted characters per cut",
            logx=logx,
        )


def _curves(summary: dict[str, Any], x_key: str) -> dict[str, tuple[list, list]]:
    curves = {}
    for method, scopes in summary["sweep"].items():
        for scope, points in scopes.items():
            xs = [_num(p[x_key]) for p in points]
            ys = [_num(p["accepted_chars_per_cut"]) for p in points]
            curves[f"{method}, threshold sweep (multiline {scope})"] = (xs, ys)
    return curves


def _points(summary: dict[str, Any], x_key: str) -> dict[str, tuple[float, float]]:
    marks = {}
    for method, rows in summary["policies"].items():
        for name, groups in rows.items():
            if name.startswith("confidence tuned") or (method == TUNED_METHOD and name in _BASE):
                held = groups["held-out"]
                marks[f"{method}: {name}"] = (
                    _num(held[x_key]),
                    _num(held["accepted_chars_per_cut"]),
                )
    return marks


_BASE = {p.name for p in BASELINES}


def _num(x: float | None) -> float:
    return math.nan if x is None else x
