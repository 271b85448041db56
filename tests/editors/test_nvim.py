"""A real client: Neovim (Debian's 0.7.2 in CI) drives `midword serve` headless.

tests/nvim/client.lua loads tests/nvim/midword.lua, the config snippet the README
tells users to copy, so the documented setup is what runs here. Neovim types into a
buffer (real incremental didChange), asks for a completion list and, as a raw request,
an inline completion mid-identifier, and prints one JSON line.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NVIM = shutil.which("nvim")
SPECIAL = re.compile(r"<\|[a-z_]+\|>")
LINE = "    parser = argparse.ArgumentPar"
PARTIAL = "ArgumentPar"

pytestmark = pytest.mark.skipif(NVIM is None, reason="nvim is not installed (.ci/run installs it)")


@pytest.fixture(scope="module")
def report() -> dict:
    assert NVIM is not None
    env = dict(os.environ, MIDWORD_ROOT=str(ROOT), MIDWORD_PYTHON=sys.executable)
    cmd = [
        NVIM,
        "--headless",
        "-u",
        "NONE",
        "-i",
        "NONE",
        "-n",
        "-c",
        "luafile tests/nvim/client.lua",
    ]
    proc = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=360, check=False
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no JSON from nvim (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr[-3000:]}"
    result = json.loads(lines[-1])
    print(f"\nNeovim {result.get('nvim')}: server ready after {result.get('load_s', 0):.1f} s")
    assert proc.returncode == 0 and "error" not in result, (
        result.get("error"),
        proc.stderr[-3000:],
    )
    return result


def test_the_documented_config_attaches_and_the_model_loads(report: dict) -> None:
    assert report["nvim"].split(".")[:2] >= ["0", "7"]
    assert report["status"] == "ready"
    assert report["attached"] == 1  # the snippet's FileType autocmd attached the buffer


def test_neovim_sent_every_edit(report: dict) -> None:
    state = report["inspect"]
    # The live VCT's prompt is exactly the typed buffer up to the cursor.
    prompt = bytes.fromhex(state["prefix"]).decode()
    assert prompt == "import argparse\n\n\ndef main(argv):\n" + LINE
    assert state["version"] > len(LINE)  # one didChange per typed character at least
    assert report["position"] == {"line": 4, "character": len(LINE)}


def test_completion_items_replace_the_partial_identifier(report: dict) -> None:
    items = report["completion"]["items"]
    assert items, "the completion list should not be empty mid-identifier"
    start = len(LINE) - len(PARTIAL)
    for item in items:
        edit = item["textEdit"]
        assert edit["range"]["start"] == {"line": 4, "character": start}, edit
        assert edit["range"]["end"] == {"line": 4, "character": len(LINE)}, edit
        new = edit["newText"]
        assert new.startswith(PARTIAL) and len(new) > len(PARTIAL), new
        assert "\n" not in new and not SPECIAL.search(new)
        assert item["filterText"].startswith(PARTIAL)  # Neovim's filter keeps the item
    word = items[0]["textEdit"]["newText"]
    assert re.fullmatch(r"\w+", word), f"the first item completes the identifier: {word!r}"
    assert report["accepted"] == LINE[:start] + word


def test_inline_completion_continues_the_prefix(report: dict) -> None:
    items = report["inline"]["items"]
    assert 1 <= len(items) <= 2  # Invoked, maxItems 2
    texts = [item["insertText"] for item in items]
    assert len(set(texts)) == len(texts)
    for item in items:
        at = {"line": 4, "character": len(LINE)}
        assert item["range"] == {"start": at, "end": at}
        text = item["insertText"]
        assert text and "\n" not in text and not SPECIAL.search(text), text
    # Same model, same prefix, greedy: the first inline item and the completed
    # identifier agree on how the word goes on.
    word = report["completion"]["items"][0]["textEdit"]["newText"]
    first = re.match(r"\w*", texts[0]).group()
    assert PARTIAL + first == word, (texts[0], word)
