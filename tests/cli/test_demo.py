"""`midword demo` end to end: it starts the server, types the sample file and prints one
JSON row per cursor (naive and midword side by side)."""

from __future__ import annotations

import json
import subprocess
import sys

from midword.cmd_demo import CASES, SAMPLE


def test_demo_json_rows() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "midword", "demo", "--json", "--max-tokens", "6"],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["case"] for r in rows] == list(CASES)
    cursors = [piece.split("\n")[-1] for piece in SAMPLE.split("|")[:-1]]
    for row, context in zip(rows, cursors, strict=True):
        assert row["context"] == context
        assert row["naive_ms"] > 0 and row["midword_ms"] > 0
        assert "<|" not in row["naive"] + row["midword"]
    mid_word = rows[0]
    assert ("ArgumentPar" + mid_word["midword"]).startswith("ArgumentParser")
    assert "loading the model" in out.stderr  # progress goes to stderr, results to stdout
