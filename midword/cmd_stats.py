"""Print the acceptance rate and the retained characters of completions, from the local
acceptance log.

The language server appends one JSON line per event to the log (the VS Code extension
reports when an inline item is shown, accepted, or partly accepted, e.g. a word or a
line, and Neovim's midword.lua when its completion menu's item is shown or accepted;
see server/acceptance.py). The log stays on this machine; the server option
``acceptanceLog: false`` stops it.

For each method (bytesampler, the baselines, ensemble) and each cursor context
(``inside_word``: the cursor was inside an identifier; ``boundary``: it was not), it
counts the items shown, accepted whole and accepted in part (items with at least one
partial acceptance and no whole one), and the rates over the items shown. An item
counts once however often its events came.

Beside the rates, the characters retained: after an acceptance the server follows the
inserted text through later edits and logs, at each checkpoint (30 s, 2 min, 10 min),
how many of its characters are still in place (``retained``: difflib's matching blocks
between the inserted text and the text now in the followed range) and their similarity
(difflib's ratio). ``kept@30s`` shows the characters retained at that checkpoint and
their share of the characters inserted. Items whose document was closed before the
checkpoint, or whose server stopped, are unknown: counted apart, never as retained.
Logs written before retention was logged have no such events; the columns are left out.

--json prints one object:

  {"log": path, "events": int, "skipped": int, "checkpoints": [seconds],
   "byMethod": {method: row}, "byContext": {context: row}, "total": row}

  row = {"shown": int, "accepted": int, "partial": int,
         "acceptRate": float | null, "anyRate": float | null,
         "retention": {seconds: kept}}

  kept = {"items": int, "unknown": int, "inserted": int, "retained": int,
          "share": float | null, "similarity": float | null}

anyRate counts partial acceptances too; a rate is null when nothing was shown. In
``kept``, ``items`` are the items measured at that checkpoint, ``inserted`` and
``retained`` their characters summed, ``share`` = retained / inserted, ``similarity``
the items' mean similarity (null when none was measured); ``seconds`` as in the log
(``"30"``, ``"120"``, ``"600"``).

--plot FILE draws the retained share against the checkpoint, one line per method and
one per cursor context (a PNG; needs matplotlib).

Examples:
  midword stats
  midword stats --json --log /tmp/acceptance.jsonl
  midword stats --plot retention.png
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from midword.cli import CommandError

UNKNOWN = "unknown"
ACCEPTANCE_EVENTS = ("shown", "accepted", "partial")
RETAINED = "retained"  # a checkpoint of an accepted item (server/retention.py)
GROUPS = (("by method", "byMethod"), ("by cursor context", "byContext"))


@dataclass
class Row:
    """Distinct item ids per event kind, and checkpoint entries, for one group."""

    shown: set[str] = field(default_factory=set)
    accepted: set[str] = field(default_factory=set)
    partial: set[str] = field(default_factory=set)
    # checkpoint -> item id -> its entry (the last one, should an entry come twice)
    kept: dict[float, dict[str, dict[str, Any]]] = field(default_factory=dict)

    def add(self, event: str, item_id: str) -> None:
        # an accepted or partly accepted item was on screen, even if "shown" got lost
        self.shown.add(item_id)
        if event == "accepted":
            self.accepted.add(item_id)
        elif event == "partial":
            self.partial.add(item_id)

    def add_retained(self, entry: dict[str, Any]) -> None:
        self.kept.setdefault(float(entry["checkpoint"]), {})[entry["id"]] = entry

    def to_json(self, checkpoints: list[float]) -> dict[str, Any]:
        shown, accepted = len(self.shown), len(self.accepted)
        partial = len(self.partial - self.accepted)
        return {
            "shown": shown,
            "accepted": accepted,
            "partial": partial,
            "acceptRate": accepted / shown if shown else None,
            "anyRate": (accepted + partial) / shown if shown else None,
            "retention": {
                checkpoint_key(c): kept_json(self.kept.get(c, {}).values()) for c in checkpoints
            },
        }


def kept_json(entries: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The characters retained by a group's items at one checkpoint (unknown apart).

    >>> kept_json([{"inserted": 10, "retained": 8, "similarity": 0.8},
    ...            {"inserted": 6, "retained": 6, "similarity": 1.0}, {"unknown": "closed"}])
    {'items': 2, 'unknown': 1, 'inserted': 16, 'retained': 14, 'share': 0.875, 'similarity': 0.9}
    """
    entries = list(entries)
    known = [e for e in entries if "unknown" not in e]
    inserted = sum(e["inserted"] for e in known)
    retained = sum(e["retained"] for e in known)
    return {
        "items": len(known),
        "unknown": len(entries) - len(known),
        "inserted": inserted,
        "retained": retained,
        "share": retained / inserted if inserted else None,
        "similarity": sum(e["similarity"] for e in known) / len(known) if known else None,
    }


def checkpoint_key(seconds: float) -> str:
    """A checkpoint as the log and the JSON keys write it: ``30``, ``0.2``."""
    return str(int(seconds)) if seconds == int(seconds) else str(seconds)


def checkpoint_label(seconds: float) -> str:
    """A checkpoint for people: ``30s``, ``2m``, ``10m``, ``0.2s``."""
    if seconds >= 60 and seconds % 60 == 0:
        return f"{int(seconds) // 60}m"
    return f"{checkpoint_key(seconds)}s"


def read_events(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The log's events, and how many lines were not events (skipped)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except FileNotFoundError:
        return [], 0
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc}") from exc
    events = list(_parse(lines))
    blank = sum(1 for line in lines if not line.strip())
    return events, len(lines) - blank - len(events)


def _parse(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            continue
        event = entry.get("event")
        if event in ACCEPTANCE_EVENTS or (event == RETAINED and _is_checkpoint(entry)):
            yield entry


def _is_checkpoint(entry: dict[str, Any]) -> bool:
    """A well-formed ``retained`` entry: its checkpoint, then unknown or the numbers."""
    if not _number(entry.get("checkpoint")):
        return False
    if isinstance(entry.get("unknown"), str):
        return True
    counts = (entry.get("inserted"), entry.get("retained"))
    return all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts) and (
        _number(entry.get("similarity"))
    )


def _number(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )


def summarize(events: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Rows by method, by cursor context, and in total.

    >>> rows = summarize([
    ...     {"event": "shown", "id": "a", "method": "bytesampler", "context": "inside_word"},
    ...     {"event": "accepted", "id": "a", "method": "bytesampler", "context": "inside_word"},
    ...     {"event": "shown", "id": "b", "method": "naive", "context": "inside_word"},
    ... ])
    >>> rows["byContext"]["inside_word"]["acceptRate"], rows["byMethod"]["naive"]["shown"]
    (0.5, 1)
    """
    by_method: dict[str, Row] = {}
    by_context: dict[str, Row] = {}
    total = Row()
    checkpoints: set[float] = set()
    for entry in events:
        event, item_id = entry["event"], entry["id"]
        rows = (
            by_method.setdefault(entry.get("method") or UNKNOWN, Row()),
            by_context.setdefault(entry.get("context") or UNKNOWN, Row()),
            total,
        )
        for row in rows:
            if event == RETAINED:
                row.add_retained(entry)
            else:
                row.add(event, item_id)
        if event == RETAINED:
            checkpoints.add(float(entry["checkpoint"]))
    ordered = sorted(checkpoints)
    return {
        "checkpoints": [int(c) if c == int(c) else c for c in ordered],
        "byMethod": {k: v.to_json(ordered) for k, v in sorted(by_method.items())},
        "byContext": {k: v.to_json(ordered) for k, v in sorted(by_context.items())},
        "total": total.to_json(ordered),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log",
        type=Path,
        default=None,
        help="the acceptance log (default: $MIDWORD_ACCEPTANCE_LOG, else acceptance.jsonl "
        "in midword's cache folder)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--plot",
        type=Path,
        default=None,
        metavar="FILE",
        help="draw the retained share of accepted characters at each checkpoint, by method "
        "and by cursor context, to a PNG file (needs matplotlib)",
    )


def run(args: argparse.Namespace) -> int:
    from midword.server.acceptance import default_log_path

    path = args.log or default_log_path()
    events, skipped = read_events(path)
    report = {"log": str(path), "events": len(events), "skipped": skipped, **summarize(events)}
    if args.json:
        print(json.dumps(report, allow_nan=False))
    else:
        print(_table(report))
    if args.plot is not None:
        plot_retention(report, args.plot)
        print(f"retention plot: {args.plot}", file=sys.stderr)
    return 0


def _table(report: dict[str, Any]) -> str:
    lines = [f"acceptance log: {report['log']} ({report['events']} events)"]
    if report["skipped"]:
        lines[0] += f", {report['skipped']} unreadable lines skipped"
    if not report["events"]:
        lines.append(
            "no events yet: completions shown in VS Code or Neovim (midword.lua) are counted here"
        )
        return "\n".join(lines)
    keys = [checkpoint_key(c) for c in report["checkpoints"]]
    header = f"  {'':<14}{'shown':>7}{'accepted':>10}{'partly':>8}{'rate':>8}{'any':>8}"
    header += "".join(f"{'kept@' + checkpoint_label(c):>14}" for c in report["checkpoints"])
    for title, key in GROUPS:
        lines += ["", title, header]
        lines += [_row(name, row, keys) for name, row in report[key].items()]
    lines += ["", _row("total", report["total"], keys).lstrip()]
    lines += _retention_notes(report)
    return "\n".join(lines)


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _row(name: str, row: dict[str, Any], keys: list[str]) -> str:
    kept = "".join(f"{_kept(row['retention'][key]):>14}" for key in keys)
    return (
        f"  {name:<14}{row['shown']:>7}{row['accepted']:>10}{row['partial']:>8}"
        f"{_rate(row['acceptRate']):>8}{_rate(row['anyRate']):>8}{kept}"
    )


def _kept(kept: dict[str, Any]) -> str:
    """Characters retained and their share of those inserted: ``301 88.5%``."""
    return "-" if kept["share"] is None else f"{kept['retained']} {_rate(kept['share'])}"


def _retention_notes(report: dict[str, Any]) -> list[str]:
    """One line per checkpoint: the totals, similarity and unknown items."""
    if not report["checkpoints"]:
        return []
    lines = [
        "",
        "kept@T: characters of the accepted text still in place T after the acceptance, "
        "and their share of those inserted",
    ]
    for seconds in report["checkpoints"]:
        kept = report["total"]["retention"][checkpoint_key(seconds)]
        similarity = "-" if kept["similarity"] is None else f"{kept['similarity']:.3f}"
        lines.append(
            f"  after {checkpoint_label(seconds)}: {kept['retained']} of {kept['inserted']} "
            f"characters ({_rate(kept['share'])}) in {kept['items']} items, mean similarity "
            f"{similarity}; {kept['unknown']} unknown (document closed or server stopped)"
        )
    return lines


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise CommandError("--plot needs matplotlib (pip install matplotlib)") from exc
    matplotlib.use("Agg")  # headless: no display needed
    import matplotlib.pyplot as plt

    return plt


def plot_retention(report: dict[str, Any], path: Path) -> Path:
    """The retained share at each checkpoint: by method (left), by cursor context (right)."""
    if not report["checkpoints"]:
        raise CommandError("no retention checkpoints in the log yet: nothing to plot")
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10.0, 4.0), sharey=True)
    for ax, (title, key) in zip(axes, GROUPS, strict=True):
        _plot_group(ax, report[key], report["checkpoints"], title)
    axes[0].set_ylabel("accepted characters retained (%)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_group(ax: Any, rows: dict[str, Any], checkpoints: list[float], title: str) -> None:
    """One line per group value (a method, a context), gaps where nothing was measured."""
    xs = list(range(len(checkpoints)))
    for name, row in rows.items():
        shares = [row["retention"][checkpoint_key(c)]["share"] for c in checkpoints]
        if any(share is not None for share in shares):
            ys = [math.nan if share is None else 100 * share for share in shares]
            ax.plot(xs, ys, marker="o", label=name)
    ax.set_xticks(xs)
    ax.set_xticklabels([checkpoint_label(c) for c in checkpoints])
    ax.set_xlabel("time after acceptance")
    ax.set_title(title)
    ax.set_ylim(0, 105)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
