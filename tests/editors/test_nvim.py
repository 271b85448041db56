"""A real client: Neovim (Debian's 0.7.2 in CI) drives `midword serve` headless.

tests/nvim/client.lua loads tests/nvim/midword.lua, the config snippet the README
tells users to copy, so the documented setup is what runs here. Neovim types into a
buffer (real incremental didChange), asks for a completion list and, as a raw request,
an inline completion mid-identifier, and prints one JSON line.

tests/nvim/symbols.lua runs the same config next to two stand-in language servers
(tests/nvim/symbols_server.py) and checks symbols guidance (issue 39): midword.lua's
omnifunc passes the names the other servers offer as ``midwordCandidates``, within its
time budget, and the completion starts with one of them; with ``symbols = "off"`` it
passes none.

tests/nvim/acceptance.lua accepts midword's first item through the omnifunc (<C-y>),
edits it, and waits for the acceptance log (issue 38): the server must log the item
shown, accepted and, after the edit, how much of it is retained.
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


def run_nvim(script: str, **env: str) -> dict:
    """Run a tests/nvim script in headless Neovim and return the JSON line it prints."""
    assert NVIM is not None
    env = dict(os.environ, MIDWORD_ROOT=str(ROOT), MIDWORD_PYTHON=sys.executable, **env)
    cmd = [NVIM, "--headless", "-u", "NONE", "-i", "NONE", "-n", "-c", f"luafile {script}"]
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


@pytest.fixture(scope="module")
def report() -> dict:
    return run_nvim("tests/nvim/client.lua")


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


# ---------------------------------------------------------------- symbols guidance
# What tests/nvim/symbols.lua's stand-in servers offer: "stub" answers at once with
# zqxMember, zqxMemo(x) (filter text zqxMemo), zqxOther and "zqx member" (not a name);
# "slow" offers zqxMemSlow 8 s late, far past the script's 1.5 s budget.
TYPED = "    value = obj.zqxMem"


def sent(report: dict, case: str, client: str) -> list[dict]:
    """The completion requests ``client`` was sent for one of the script's cursors."""
    first = report["cases"][case]["first"] - 1  # Lua counts from 1
    line = len(report["cases"][case]["typed"])
    return [
        s
        for s in report["sent"][first:]
        if s["client"] == client and s["position"] == {"line": 10, "character": line}
    ]


@pytest.fixture(scope="module")
def symbols() -> dict:
    return run_nvim("tests/nvim/symbols.lua", MIDWORD_SYMBOLS="auto")


@pytest.fixture(scope="module")
def no_symbols() -> dict:
    return run_nvim("tests/nvim/symbols.lua", MIDWORD_SYMBOLS="off")


def test_the_stand_in_servers_attach_next_to_midword(symbols: dict) -> None:
    assert symbols["status"] == "ready"
    assert sorted(symbols["clients"]) == ["midword", "slow", "stub"]


def test_omnifunc_passes_the_other_servers_names_that_extend_the_typed_one(symbols: dict) -> None:
    (asked,) = sent(symbols, "in a name", "midword")
    # Bare names only (not "zqx member"), from filter texts too (zqxMemo), each once,
    # only those that go on from "zqxMem" (not zqxOther), none from the slow server.
    assert asked["candidates"] == ["zqxMember", "zqxMemo"]
    assert len(sent(symbols, "in a name", "stub")) == 1


def test_a_slow_server_costs_at_most_the_time_budget(symbols: dict) -> None:
    (slow,) = sent(symbols, "in a name", "slow")
    (asked,) = sent(symbols, "in a name", "midword")
    waited = asked["at_ms"] - slow["at_ms"]
    assert waited < 6000, f"midword was asked {waited:.0f} ms after the others: no time budget"
    assert "zqxMemSlow" not in asked["candidates"]


def test_the_completion_starts_with_a_name_that_exists(symbols: dict, no_symbols: dict) -> None:
    guided = symbols["cases"]["in a name"]
    assert guided["words"][0] == "zqxMember", guided
    assert guided["line"] == "    value = obj.zqxMember"  # what <C-x><C-o> inserted
    assert any("guided: 'zqxMember'" in line for line in symbols["log"]), symbols["log"]
    # The small model alone goes on otherwise (zqxMemberD): the name came from the guide.
    unguided = no_symbols["cases"]["in a name"]
    assert unguided["typed"] == TYPED and unguided["words"], unguided
    assert unguided["words"][0] != "zqxMember", unguided


def test_after_a_dot_every_member_name_is_passed(symbols: dict) -> None:
    (asked,) = sent(symbols, "after a dot", "midword")
    assert asked["candidates"] == ["zqxMember", "zqxMemo", "zqxOther"]


def test_away_from_names_the_other_servers_are_not_asked(symbols: dict) -> None:
    (asked,) = sent(symbols, "not at a name", "midword")
    assert asked["candidates"] is None
    assert not sent(symbols, "not at a name", "stub") and not sent(symbols, "not at a name", "slow")


def test_symbols_off_passes_no_names(no_symbols: dict) -> None:
    assert [s["client"] for s in no_symbols["sent"]] == ["midword"]  # nobody else asked
    assert no_symbols["sent"][0]["candidates"] is None
    assert not any("guided" in line for line in no_symbols["log"])


# ---------------------------------------------------------------- acceptance log
RETAINED_AFTER_S = 3  # the checkpoint the script waits for (MIDWORD_RETENTION_CHECKPOINTS)


@pytest.fixture(scope="module")
def acceptance(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, list[dict]]:
    """The script's report and the acceptance log the server wrote meanwhile."""
    log = tmp_path_factory.mktemp("nvim-acceptance") / "acceptance.jsonl"
    result = run_nvim(
        "tests/nvim/acceptance.lua",
        MIDWORD_ACCEPTANCE_LOG=str(log),
        MIDWORD_RETENTION_CHECKPOINTS=str(RETAINED_AFTER_S),
    )
    entries = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return result, entries


def test_omnifunc_items_carry_the_servers_tags(acceptance: tuple[dict, list[dict]]) -> None:
    result, _ = acceptance
    assert result["status"] == "ready"
    word = result["words"][0]
    assert word.startswith(PARTIAL) and len(word) > len(PARTIAL), result["words"]
    assert result["accepted_line"] == LINE[: -len(PARTIAL)] + word  # <C-y> kept the first
    [done] = [d for d in result["done"] if d["word"] == word]  # CompleteDone saw it, tags and all
    tags = done["user_data"]["midword"]
    assert tags["id"] and (tags["method"], tags["context"]) == ("bytesampler", "inside_word")


def test_shown_and_accepted_reach_the_log_with_one_id(acceptance: tuple[dict, list[dict]]) -> None:
    result, entries = acceptance
    [shown] = [e for e in entries if e["event"] == "shown"]  # the first item of the menu only
    [accepted] = [e for e in entries if e["event"] == "accepted"]
    for key in ("id", "method", "context", "language"):
        assert shown[key] == accepted[key], (shown, accepted)
    assert (accepted["method"], accepted["context"]) == ("bytesampler", "inside_word")
    assert accepted["language"] == "python"
    # the item adds what follows the typed name; the typed name itself is the user's
    assert accepted["length"] == len(result["words"][0]) - len(PARTIAL)


def test_the_accepted_text_is_followed_through_the_edit(
    acceptance: tuple[dict, list[dict]],
) -> None:
    result, entries = acceptance
    assert result["retained"], "no retained event in the log"
    word = result["words"][0]
    assert result["line"] == LINE[: -len(PARTIAL)] + word[:-1] + "()"  # <BS>() after <C-y>
    [accepted] = [e for e in entries if e["event"] == "accepted"]
    [retained] = [e for e in entries if e["event"] == "retained"]
    assert (retained["id"], retained["checkpoint"]) == (accepted["id"], RETAINED_AFTER_S)
    added = len(word) - len(PARTIAL)
    # the backspace took one character of the item; "()" typed after it is not the item's
    assert (retained["inserted"], retained["retained"]) == (added, added - 1), retained
