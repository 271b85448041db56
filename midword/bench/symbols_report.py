"""The tables of `midword bench symbols`: metrics per method and cut kind, and the goals.

Every metric is computed here from the records (what each method wrote at each cut, and
jedi's names there), so a change of a metric applies to runs recorded before it.

* **identifier exact**: the identifier at the cursor once the completion is accepted
  (what was typed plus the completion's leading identifier characters) equals the true one;
* **hallucinated**: that identifier is not among jedi's names (as identifiers: ``default=``
  is ``default``), counted over the cuts where jedi offers a candidate (a name that extends
  what was typed); an empty identifier (the completion does not go on with the name)
  counts as hallucinated too;
* **first line exact**: the completion's first line equals the rest of the true line;
* **p50 s**: the median time of one completion (guided: choosing the name and the rest),
  in CPU seconds of the process and in wall seconds;
* **added latency**: the median over cuts of (guided time - ByteSampler time), as a share of
  ByteSampler's median completion. The goal is judged on CPU time: on a shared machine the
  wall time also counts the waits for a core, which neither method causes (both are shown).

A what-if row follows the guided one: the same records, except where guidance stood aside
for lack of mass, there the name it would have chosen anyway (``--min-mass 0``). With
``--sweep``, a table weighs minimum masses against each other: at each value, the guided
completion (or the what-if one) where guidance would guide, the unguided one where not.

>>> rec = {"kind": "dot-inside", "typed": "ap", "name": "append", "line_rest": "pend(x)",
...        "names": ["append", "apply"], "methods": {"bytesampler": {"completion": "pendix",
...        "seconds": 1.0}}}
>>> s = method_stats([rec], "bytesampler")
>>> s["ident_exact"], s["hallucinated"], s["offered"]
(0.0, 1.0, 1)
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from midword.bench import common
from midword.bench.symbol_cuts import KINDS, completed_identifier, identifiers, offered

METHODS = ("naive", "healing1", "bytesampler", "guided")
# a row derived from the guided method's records: what it would write with --min-mass 0
WHAT_IF = "guided-always"
LABELS = {
    "naive": "naive",
    "healing1": "token healing (1 token)",
    "bytesampler": "ByteSampler",
    "guided": "ByteSampler guided by jedi",
    WHAT_IF: "guided, min mass 0 (what-if)",
}
GOAL_HALLUCINATED = 0.02  # guided, where jedi offers candidates: below this
GOAL_EXACT_RATIO = 1.3  # guided identifier exact over unguided ByteSampler's: at least
GOAL_ADDED_SHARE = 0.20  # guided added latency p50 over a ByteSampler completion: at most


def first_line(text: str) -> str:
    """The text up to its first newline.

    >>> first_line("a(b)\\nc"), first_line("x")
    ('a(b)', 'x')
    """
    return text.split("\n", 1)[0]


def judge(record: dict[str, Any], method: str, sweep: str | None = None) -> dict[str, Any] | None:
    """One method's outcome at one cut (None when the method did not run there).

    >>> rec = {"typed": "ap", "name": "append", "line_rest": "pend(x)", "names": ["append"],
    ...        "methods": {"naive": {"completion": "pend(x)\\n", "seconds": 0.5}}}
    >>> j = judge(rec, "naive"); j["ident_exact"], j["hallucinated"], j["line_exact"]
    (True, False, True)
    """
    out = _outcome(record, method) if sweep is None else sweep_outcome(record, sweep)
    if out is None:
        return None
    ident = completed_identifier(record["typed"], out["completion"])
    names = identifiers(record.get("names") or [])
    is_offered = offered(record["typed"], names)
    return {
        "ident": ident,
        "ident_exact": ident == record["name"],
        "offered": is_offered,
        "hallucinated": (ident not in set(names)) if is_offered else None,
        "line_exact": first_line(out["completion"]) == record["line_rest"],
        "seconds": float(out["seconds"]),
        "cpu_seconds": float(out.get("cpu_seconds", out["seconds"])),
        "guided": out.get("guided"),
        "reason": out.get("reason", ""),
    }


def _outcome(record: dict[str, Any], method: str) -> dict[str, Any] | None:
    """What ``method`` wrote at the cut; `WHAT_IF` is the guided outcome, or where guidance
    stood aside for lack of mass, the name it would have chosen anyway (``forced``)."""
    methods = record.get("methods", {})
    if method != WHAT_IF:
        return methods.get(method)
    guided = methods.get("guided")
    if guided is None:
        return None
    return {**guided, **guided["forced"]} if "forced" in guided else guided


def sweep_outcome(record: dict[str, Any], min_mass: str) -> dict[str, Any] | None:
    """What guidance writes at ``min_mass`` (a key of the guided record's ``sweep``): the
    guided completion (the what-if one where it stood aside at the run's own minimum)
    where it would guide there, else the unguided one (its own fallback, or ByteSampler's,
    the same greedy completion). None when the cut has no sweep.

    >>> rec = {"methods": {"bytesampler": {"completion": "x"}, "guided": {"completion": "y",
    ...        "guided": True, "sweep": {"0": True, "0.5": False}}}}
    >>> sweep_outcome(rec, "0")["completion"], sweep_outcome(rec, "0.5")["completion"]
    ('y', 'x')
    """
    methods = record.get("methods", {})
    guided = methods.get("guided")
    if guided is None or min_mass not in guided.get("sweep", {}):
        return None
    if guided["sweep"][min_mass]:
        out = {**guided, **guided.get("forced", {})}
        return {**out, "guided": True, "reason": ""}
    if guided.get("guided") is False:  # its own fallback is the unguided completion
        return guided
    return {**methods["bytesampler"], "guided": False, "reason": "the candidates hold"}


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def method_stats(records: list[dict[str, Any]], method: str) -> dict[str, Any]:
    """Counts and rates of one method over ``records`` (one cut kind, or all)."""
    judged = [j for r in records if (j := judge(r, method)) is not None]
    stats = _rates(judged)
    if method == WHAT_IF:  # its times would be the guided method's: not its own
        stats["p50_seconds"] = stats["p50_cpu_seconds"] = math.nan
        stats["forced"] = sum("forced" in r["methods"].get("guided", {}) for r in records)
    if method in ("guided", WHAT_IF):
        aside = [j for j in judged if j["guided"] is False]
        stats["stood_aside"] = len(aside)
        stats["aside_no_candidate"] = sum(j["reason"].startswith("no candidate") for j in aside)
        stats["aside_low_mass"] = len(aside) - stats["aside_no_candidate"]
    return stats


def _rates(judged: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts, rates and median times of judged outcomes."""
    hall = [j["hallucinated"] for j in judged if j["offered"]]
    return {
        "n": len(judged),
        "ident_exact": common.mean([float(j["ident_exact"]) for j in judged]),
        "offered": len(hall),
        "hallucinated_count": sum(hall),
        "hallucinated": common.mean([float(h) for h in hall]),
        "line_exact": common.mean([float(j["line_exact"]) for j in judged]),
        "p50_seconds": _median([j["seconds"] for j in judged]),
        "p50_cpu_seconds": _median([j["cpu_seconds"] for j in judged]),
    }


def sweep_stats(records: list[dict[str, Any]], min_mass: str) -> dict[str, Any]:
    """Guidance's rates at one --sweep minimum mass (no times: they are not measured), and
    how often it would stand aside for lack of mass."""
    judged = [j for r in records if (j := judge(r, "guided", min_mass)) is not None]
    stats = _rates(judged)
    del stats["p50_seconds"], stats["p50_cpu_seconds"]
    aside = [j for j in judged if j["guided"] is False]
    stats["aside_low_mass"] = sum(not j["reason"].startswith("no candidate") for j in aside)
    return stats


def sweep_keys(records: list[dict[str, Any]]) -> list[str]:
    """The --sweep minimum masses recorded, ascending."""
    keys = {k for r in records for k in r.get("methods", {}).get("guided", {}).get("sweep", {})}
    return sorted(keys, key=float)


def added_latency(
    records: list[dict[str, Any]], clock: str = "cpu_seconds", only_guided: bool = False
) -> dict[str, Any]:
    """The guided method's added time (``clock``: "cpu_seconds" or "seconds", wall) over
    ByteSampler's at the same cuts: the median of the paired differences, and that as a
    share of ByteSampler's median completion; ``only_guided``: the cuts where it guided.

    >>> recs = [{"methods": {"bytesampler": {"seconds": b}, "guided": {"seconds": g}}}
    ...         for b, g in ((1.0, 1.25), (2.0, 2.5), (1.0, 1.0))]
    >>> a = added_latency(recs, "seconds"); a["added_p50"], a["share"]
    (0.25, 0.25)
    """
    pairs = []
    for r in records:
        methods = r.get("methods", {})
        if "bytesampler" in methods and "guided" in methods:
            if only_guided and methods["guided"].get("guided") is False:
                continue
            pairs.append((_clock(methods["bytesampler"], clock), _clock(methods["guided"], clock)))
    added = _median([g - b for b, g in pairs])
    base = _median([b for b, _ in pairs])
    share = added / base if base and not math.isnan(base) else math.nan
    return {"n": len(pairs), "added_p50": round(added, 6), "base_p50": base, "share": share}


def _clock(out: dict[str, Any], clock: str) -> float:
    """A method's time on ``clock`` (a record without CPU time: its wall time)."""
    return float(out.get(clock, out["seconds"]))


def jedi_stats(records: list[dict[str, Any]]) -> dict[str, Any]:
    """How often jedi offers a candidate, how often the true name is among its names,
    its median time and its errors."""
    return {
        "n": len(records),
        "offered": common.mean(
            [float(offered(r["typed"], identifiers(r["names"]))) for r in records]
        ),
        "truth_listed": common.mean([float(r["name"] in identifiers(r["names"])) for r in records]),
        "p50_seconds": _median([r["jedi_seconds"] for r in records]),
        "errors": sum(bool(r.get("jedi_error")) for r in records),
    }


def summarize(records: list[dict[str, Any]], methods: Sequence[str]) -> dict[str, Any]:
    """The JSON summary: per method overall and per kind, jedi's figures, the goals."""
    by_kind = {k: [r for r in records if r["kind"] == k] for k in KINDS}
    rows = [*methods, WHAT_IF] if "guided" in methods else list(methods)
    stats = {m: {"all": method_stats(records, m)} for m in rows}
    for m in rows:
        for k in KINDS:
            stats[m][k] = method_stats(by_kind[k], m)
    summary: dict[str, Any] = {
        "cuts": len(records),
        "rows": rows,
        "methods": stats,
        "jedi": {"all": jedi_stats(records), **{k: jedi_stats(v) for k, v in by_kind.items()}},
    }
    if keys := sweep_keys(records):
        summary["sweep"] = {
            key: {"all": sweep_stats(records, key)}
            | {k: sweep_stats(by_kind[k], key) for k in KINDS}
            for key in keys
        }
    if "guided" in methods and "bytesampler" in methods:
        summary["latency"] = {
            "cpu": added_latency(records),
            "wall": added_latency(records, "seconds"),
            "cpu_guided_only": added_latency(records, only_guided=True),
        }
        if _all_have(records, "inference_tokens"):  # runs before the field: none
            summary["latency"]["tokens"] = added_latency(records, "inference_tokens")
        summary["goals"] = goals(stats, summary["latency"]["cpu"])
    return summary


def goals(stats: dict[str, Any], latency: dict[str, Any]) -> dict[str, Any]:
    """The three goals of issue 39 with the measured figures and whether each is met."""
    guided, plain = stats["guided"]["all"], stats["bytesampler"]["all"]
    ratio = _ratio(guided["ident_exact"], plain["ident_exact"])
    return {
        "hallucinated": {
            "value": guided["hallucinated"],
            "goal": f"< {GOAL_HALLUCINATED:.0%}",
            "met": guided["hallucinated"] < GOAL_HALLUCINATED,
        },
        "exact_ratio": {
            "value": ratio,
            "goal": f">= {GOAL_EXACT_RATIO}x",
            "met": ratio >= GOAL_EXACT_RATIO,
        },
        "added_latency": {
            "value": latency["share"],
            "goal": f"<= {GOAL_ADDED_SHARE:.0%}",
            "met": latency["share"] <= GOAL_ADDED_SHARE,
        },
    }


def _ratio(a: float, b: float) -> float:
    """a / b; inf when only b is 0, nan when both are.

    >>> _ratio(0.75, 0.5), _ratio(0.5, 0.0), math.isnan(_ratio(0.0, 0.0))
    (1.5, inf, True)
    """
    if b:
        return a / b
    return math.inf if a else math.nan


# ---------------------------------------------------------------------- markdown
def _rate(value: float) -> str:
    return common.fmt(value)


def _hall_cell(s: dict[str, Any]) -> str:
    """ "rate (count/offered)"."""
    if not s["offered"]:
        return "-"
    return f"{_rate(s['hallucinated'])} ({s['hallucinated_count']}/{s['offered']})"


def markdown(summary: dict[str, Any]) -> str:
    """results.md: the overall table, the split by cut kind, jedi, guidance and the goals."""
    stats, methods = summary["methods"], summary["rows"]
    md = [f"## Symbols: next identifier at {summary['cuts']} cuts, jedi's names as candidates\n\n"]
    head = ["method", "n", "identifier exact", "hallucinated (where jedi offers)"]
    head += ["first line exact", "p50 CPU s", "p50 wall s"]
    rows = []
    for m in methods:
        s = stats[m]["all"]
        rows.append(
            [
                LABELS[m],
                s["n"],
                _rate(s["ident_exact"]),
                _hall_cell(s),
                _rate(s["line_exact"]),
                common.fmt(s["p50_cpu_seconds"], 3),
                common.fmt(s["p50_seconds"], 3),
            ]
        )
    md.append(common.markdown_table(head, rows))
    if WHAT_IF in stats:
        md.append(
            f"\nThe what-if row is the guided method with the name it would have chosen where "
            f"the candidates held too little of the probability ({stats[WHAT_IF]['all']['forced']} "
            "cuts; --min-mass 0 would choose it); its times are not measured.\n"
        )
    md.append("\nBy cut kind (identifier exact / hallucinated / first line exact):\n\n")
    head = ["method", *[f"{k} (n={stats[methods[0]][k]['n']})" for k in KINDS]]
    rows = [[LABELS[m], *(_kind_cell(stats[m][k]) for k in KINDS)] for m in methods]
    md.append(common.markdown_table(head, rows))
    if "sweep" in summary:
        md.append(_sweep_table(summary["sweep"]))
    md.append(_jedi_table(summary["jedi"]))
    if "goals" in summary:
        md.append(_guidance_lines(stats["guided"]["all"], summary))
    return "".join(md)


def _sweep_table(sweep: dict[str, dict[str, Any]]) -> str:
    """Guidance at each --sweep minimum mass: overall, then identifier exact / hallucinated
    by cut kind."""
    head = ["min mass", "stood aside (too little mass)", "identifier exact"]
    head += ["hallucinated (where jedi offers)", "first line exact"]
    head += [f"{k}: exact / hallucinated" for k in KINDS]
    rows = []
    for key, stats in sweep.items():
        s = stats["all"]
        rows.append(
            [key, s["aside_low_mass"], _rate(s["ident_exact"]), _hall_cell(s)]
            + [_rate(s["line_exact"])]
            + [f"{_rate(stats[k]['ident_exact'])} / {_hall_rate(stats[k])}" for k in KINDS]
        )
    intro = (
        "\nGuidance by minimum mass (--sweep; the unguided completion where it stands aside):\n\n"
    )
    return intro + common.markdown_table(head, rows)


def _hall_rate(s: dict[str, Any]) -> str:
    return _rate(s["hallucinated"]) if s["offered"] else "-"


def _kind_cell(s: dict[str, Any]) -> str:
    return f"{_rate(s['ident_exact'])} / {_hall_rate(s)} / {_rate(s['line_exact'])}"


def _jedi_table(jedi: dict[str, Any]) -> str:
    head = ["jedi", "cuts", "offers a candidate", "true name listed", "p50 s", "errors"]
    rows = [
        [
            group,
            j["n"],
            _rate(j["offered"]),
            _rate(j["truth_listed"]),
            common.fmt(j["p50_seconds"], 3),
            j["errors"],
        ]
        for group, j in jedi.items()
    ]
    return "\n" + common.markdown_table(head, rows)


def _guidance_lines(guided: dict[str, Any], summary: dict[str, Any]) -> str:
    latency = summary["latency"]
    cpu, wall, only = latency["cpu"], latency["wall"], latency["cpu_guided_only"]
    lines = [
        f"\nGuidance stood aside at {guided['stood_aside']} of {guided['n']} cuts "
        f"({guided['aside_no_candidate']}: no candidate extends what was typed; "
        f"{guided['aside_low_mass']}: the candidates held too little of the probability); "
        "there the unguided ByteSampler completion was used.\n",
        f"Added latency p50: {_ms(cpu['added_p50'])} CPU over ByteSampler's "
        f"{_ms(cpu['base_p50'])} ({_share(cpu['share'])}; {_share(only['share'])} over the "
        f"{only['n']} guided cuts only); wall: {_ms(wall['added_p50'])} over "
        f"{_ms(wall['base_p50'])} ({_share(wall['share'])}).\n",
        _tokens_line(latency.get("tokens")),
        "\nGoals (issue 39):\n\n",
    ]
    for name, text in (
        ("hallucinated", "guided hallucinated where jedi offers candidates"),
        ("exact_ratio", "identifier exact, guided / ByteSampler"),
        ("added_latency", "added latency p50 (CPU), share of a completion"),
    ):
        goal = summary["goals"][name]
        value = f"{goal['value']:.2f}x" if name == "exact_ratio" else _share(goal["value"])
        lines.append(
            f"- {text}: {value} (goal {goal['goal']}): {'met' if goal['met'] else 'NOT met'}\n"
        )
    return "".join(lines)


def _tokens_line(tokens: dict[str, Any] | None) -> str:
    """The model work guidance adds: inference tokens, median of the paired differences."""
    if not tokens:
        return ""
    return (
        f"Added inference tokens p50: {tokens['added_p50']:g} over ByteSampler's "
        f"{tokens['base_p50']:g} ({_share(tokens['share'])}).\n"
    )


def _all_have(records: list[dict[str, Any]], field: str) -> bool:
    """Whether ByteSampler's and the guided method's outcomes all record ``field``."""
    outs = [r["methods"].get(m) for r in records for m in ("bytesampler", "guided")]
    return bool(records) and all(o is not None and field in o for o in outs)


def _ms(seconds: float) -> str:
    return "-" if seconds is None or math.isnan(seconds) else f"{seconds * 1000:.0f} ms"


def _share(value: float) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.1%}"
