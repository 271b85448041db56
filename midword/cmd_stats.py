"""Print the acceptance rate of inline completions, from the local acceptance log.

The language server appends one JSON line per event to the log (the VS Code extension
reports when an inline item is shown, accepted, or partly accepted, e.g. a word or a
line; see server/acceptance.py). The log stays on this machine; the server option
``acceptanceLog: false`` stops it.

For each method (bytesampler, the baselines, ensemble) and each cursor context
(``inside_word``: the cursor was inside an identifier; ``boundary``: it was not), it
counts the items shown, accepted whole and accepted in part (items with at least one
partial acceptance and no whole one), and the rates over the items shown. An item
counts once however often its events came.

--json prints one object:

  {"log": path, "events": int, "skipped": int,
   "byMethod": {method: row}, "byContext": {context: row}, "total": row}

  row = {"shown": int, "accepted": int, "partial": int,
         "acceptRate": float | null, "anyRate": float | null}

anyRate counts partial acceptances too; a rate is null when nothing was shown.

Examples:
  midword stats
  midword stats --json --log /tmp/acceptance.jsonl
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from midword.cli import CommandError

UNKNOWN = "unknown"


@dataclass
class Row:
    """Distinct item ids per event kind, for one group."""

    shown: set[str] = field(default_factory=set)
    accepted: set[str] = field(default_factory=set)
    partial: set[str] = field(default_factory=set)

    def add(self, event: str, item_id: str) -> None:
        # an accepted or partly accepted item was on screen, even if "shown" got lost
        self.shown.add(item_id)
        if event == "accepted":
            self.accepted.add(item_id)
        elif event == "partial":
            self.partial.add(item_id)

    def to_json(self) -> dict[str, Any]:
        shown, accepted = len(self.shown), len(self.accepted)
        partial = len(self.partial - self.accepted)
        return {
            "shown": shown,
            "accepted": accepted,
            "partial": partial,
            "acceptRate": accepted / shown if shown else None,
            "anyRate": (accepted + partial) / shown if shown else None,
        }


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
        if (
            isinstance(entry, dict)
            and entry.get("event") in ("shown", "accepted", "partial")
            and isinstance(entry.get("id"), str)
        ):
            yield entry


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
    for entry in events:
        event, item_id = entry["event"], entry["id"]
        method = entry.get("method") or UNKNOWN
        context = entry.get("context") or UNKNOWN
        by_method.setdefault(method, Row()).add(event, item_id)
        by_context.setdefault(context, Row()).add(event, item_id)
        total.add(event, item_id)
    return {
        "byMethod": {k: v.to_json() for k, v in sorted(by_method.items())},
        "byContext": {k: v.to_json() for k, v in sorted(by_context.items())},
        "total": total.to_json(),
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


def run(args: argparse.Namespace) -> int:
    from midword.server.acceptance import default_log_path

    path = args.log or default_log_path()
    events, skipped = read_events(path)
    report = {"log": str(path), "events": len(events), "skipped": skipped, **summarize(events)}
    if args.json:
        print(json.dumps(report, allow_nan=False))
    else:
        print(_table(report))
    return 0


def _table(report: dict[str, Any]) -> str:
    lines = [f"acceptance log: {report['log']} ({report['events']} events)"]
    if report["skipped"]:
        lines[0] += f", {report['skipped']} unreadable lines skipped"
    if not report["events"]:
        lines.append("no events yet: inline completions shown in VS Code are counted here")
        return "\n".join(lines)
    header = f"  {'':<14}{'shown':>7}{'accepted':>10}{'partly':>8}{'rate':>8}{'any':>8}"
    for title, key in (("by method", "byMethod"), ("by cursor context", "byContext")):
        lines += ["", title, header]
        lines += [_row(name, row) for name, row in report[key].items()]
    lines += ["", _row("total", report["total"]).lstrip()]
    return "\n".join(lines)


def _row(name: str, row: dict[str, Any]) -> str:
    def rate(value: float | None) -> str:
        return "-" if value is None else f"{100 * value:.1f}%"

    return (
        f"  {name:<14}{row['shown']:>7}{row['accepted']:>10}{row['partial']:>8}"
        f"{rate(row['acceptRate']):>8}{rate(row['anyRate']):>8}"
    )
