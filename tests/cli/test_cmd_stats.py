"""`midword stats` (midword/cmd_stats.py) on constructed acceptance logs: its counts and
rates against a brute-force count of the same events."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest


def brute_force_counts(events: list[dict[str, Any]], key: str) -> dict[str, tuple[int, int, int]]:
    """(shown, accepted, partial-only) item counts per value of ``key``, the slow way."""
    counts: dict[str, tuple[int, int, int]] = {}
    for value in {e[key] for e in events}:
        ids = {e["id"] for e in events if e[key] == value}
        accepted = {
            i for i in ids if any(e["id"] == i and e["event"] == "accepted" for e in events)
        }
        partial = {
            i
            for i in ids - accepted
            if any(e["id"] == i and e["event"] == "partial" for e in events)
        }
        counts[value] = (len(ids), len(accepted), len(partial))
    return counts


def constructed_log(path: Path, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    events: list[dict[str, Any]] = []
    for n in range(300):
        tags = {
            "id": f"s-{n}",
            "method": rng.choice(["bytesampler", "naive", "healing1"]),
            "context": rng.choice(["inside_word", "boundary"]),
        }
        events.append({"event": "shown", **tags})
        if rng.random() < 0.2:
            events.append({"event": "shown", **tags})  # shown again: counted once
        if rng.random() < 0.3:
            events.append({"event": "partial", "acceptedLength": 4, **tags})
        if rng.random() < 0.4:
            events.append({"event": "accepted", **tags})
    rng.shuffle(events)
    lines = [json.dumps(e) for e in events] + ["not json", '{"event": "shown"}']
    path.write_text("\n".join(lines) + "\n")
    return events


def run_stats(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "midword", "stats", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


@pytest.mark.parametrize("seed", [1, 2])
def test_stats_counts_a_constructed_log(tmp_path: Path, seed: int) -> None:
    path = tmp_path / "log.jsonl"
    events = constructed_log(path, seed)
    report = json.loads(run_stats("--json", "--log", str(path)).stdout)
    assert report["events"] == len(events) and report["skipped"] == 2
    for key, group in (("method", "byMethod"), ("context", "byContext")):
        expected = brute_force_counts(events, key)
        assert set(report[group]) == set(expected)
        for value, (shown, accepted, partial) in expected.items():
            row = report[group][value]
            assert (row["shown"], row["accepted"], row["partial"]) == (shown, accepted, partial)
            assert row["acceptRate"] == pytest.approx(accepted / shown)
            assert row["anyRate"] == pytest.approx((accepted + partial) / shown)
    total = brute_force_counts([{**e, "all": "all"} for e in events], "all")["all"]
    assert (report["total"]["shown"], report["total"]["accepted"]) == total[:2]

    text = run_stats("--log", str(path)).stdout
    row = report["byContext"]["inside_word"]
    assert f"{100 * row['acceptRate']:.1f}%" in text and "by cursor context" in text


def test_stats_without_a_log(tmp_path: Path) -> None:
    report = json.loads(run_stats("--json", "--log", str(tmp_path / "none.jsonl")).stdout)
    assert report["events"] == 0 and report["total"]["acceptRate"] is None
