"""`midword stats` on the retention checkpoints of a constructed acceptance log
(midword/cmd_stats.py): retained characters per method, per cursor context and per
checkpoint against a brute-force sum of the same entries, the text columns, the plot,
and old logs without retention events."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

CHECKPOINTS = (30, 120, 600)


def constructed_log(path: Path, seed: int) -> list[dict[str, Any]]:
    """Shown/accepted events, then checkpoint entries: measured, unknown, repeated."""
    rng = random.Random(seed)
    events: list[dict[str, Any]] = []
    for n in range(200):
        tags = {
            "id": f"r-{n}",
            "method": rng.choice(["bytesampler", "naive"]),
            "context": rng.choice(["inside_word", "boundary"]),
            "language": "python",
        }
        events += [{"event": "shown", **tags}, {"event": "accepted", **tags}]
        inserted = rng.randint(1, 80)
        closed_at = rng.choice([None, None, None, 30, 120, 600])
        for checkpoint in CHECKPOINTS:
            entry: dict[str, Any] = {"event": "retained", **tags, "checkpoint": checkpoint}
            if closed_at is not None and checkpoint >= closed_at:
                entry["unknown"] = "closed"
            else:
                retained = rng.randint(0, inserted)
                entry.update(inserted=inserted, retained=retained, similarity=rng.random())
            events.append(entry)
    rng.shuffle(events)
    lines = [json.dumps(e) for e in events]
    lines += [  # malformed checkpoint entries: skipped
        '{"event": "retained", "id": "bad-1", "checkpoint": 30}',
        '{"event": "retained", "id": "bad-2", "checkpoint": "soon", "unknown": "closed"}',
        '{"event": "retained", "id": "bad-3", "checkpoint": 30, "inserted": 3, "retained": -1,'
        ' "similarity": 0.5}',
    ]
    path.write_text("\n".join(lines) + "\n")
    return events


def brute_force(events: list[dict[str, Any]], key: str, value: str, checkpoint: int) -> dict:
    entries = [
        e
        for e in events
        if e["event"] == "retained" and e[key] == value and e["checkpoint"] == checkpoint
    ]
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


def run_stats(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "midword", "stats", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=check,
    )


@pytest.mark.parametrize("seed", [3, 4])
def test_retained_characters_by_method_context_and_checkpoint(tmp_path: Path, seed: int) -> None:
    path = tmp_path / "log.jsonl"
    events = constructed_log(path, seed)
    report = json.loads(run_stats("--json", "--log", str(path)).stdout)
    assert report["checkpoints"] == list(CHECKPOINTS)
    assert report["events"] == len(events) and report["skipped"] == 3
    for key, group in (("method", "byMethod"), ("context", "byContext")):
        for value, row in report[group].items():
            assert set(row["retention"]) == {str(c) for c in CHECKPOINTS}
            for checkpoint in CHECKPOINTS:
                expected = brute_force(events, key, value, checkpoint)
                got = row["retention"][str(checkpoint)]
                assert got == pytest.approx(expected), (group, value, checkpoint)
    everything = [{**e, "all": "all"} for e in events]
    assert report["total"]["retention"]["600"] == pytest.approx(
        brute_force(everything, "all", "all", 600)
    )
    # acceptance counts are not disturbed by the checkpoint entries
    assert report["total"]["shown"] == report["total"]["accepted"] == 200

    text = run_stats("--log", str(path)).stdout
    assert "kept@30s" in text and "kept@2m" in text and "kept@10m" in text
    kept = report["byMethod"]["naive"]["retention"]["120"]
    naive_line = next(line for line in text.splitlines() if line.strip().startswith("naive"))
    assert f"{kept['retained']} {100 * kept['share']:.1f}%" in naive_line
    total = report["total"]["retention"]["30"]
    assert f"{total['unknown']} unknown" in text


def test_an_item_counts_once_per_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    tags = {"id": "a", "method": "naive", "context": "boundary"}
    entry = {"event": "retained", **tags, "checkpoint": 0.5, "inserted": 10}
    lines = [
        {"event": "accepted", **tags},
        {**entry, "retained": 4, "similarity": 0.4},
        {**entry, "retained": 8, "similarity": 0.8},  # written twice: the last counts
    ]
    path.write_text("".join(json.dumps(e) + "\n" for e in lines))
    report = json.loads(run_stats("--json", "--log", str(path)).stdout)
    assert report["checkpoints"] == [0.5]
    kept = report["total"]["retention"]["0.5"]
    assert (kept["items"], kept["retained"], kept["share"]) == (1, 8, 0.8)
    assert "kept@0.5s" in run_stats("--log", str(path)).stdout


def test_an_old_log_without_retention(tmp_path: Path) -> None:
    path = tmp_path / "old.jsonl"
    tags = {"id": "o-1", "method": "bytesampler", "context": "inside_word"}
    path.write_text(json.dumps({"event": "accepted", "length": 5, **tags}) + "\n")
    report = json.loads(run_stats("--json", "--log", str(path)).stdout)
    assert report["checkpoints"] == [] and report["total"]["retention"] == {}
    assert report["total"]["acceptRate"] == 1.0
    text = run_stats("--log", str(path)).stdout
    assert "kept@" not in text and "100.0%" in text
    failed = run_stats("--log", str(path), "--plot", str(tmp_path / "r.png"), check=False)
    assert failed.returncode != 0 and "nothing to plot" in failed.stderr


def test_the_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "log.jsonl"
    constructed_log(path, 5)
    png = tmp_path / "retention.png"
    done = run_stats("--json", "--log", str(path), "--plot", str(png))
    json.loads(done.stdout)  # stdout stays one JSON object
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
