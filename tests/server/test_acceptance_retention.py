"""Accepted-and-retained characters end to end (server/retention.py): `midword serve`
with short checkpoints, a pytest-lsp client that writes an accepted item into its buffer
as an editor does, reports the acceptance, edits before, inside and after the inserted
text, undoes some of it, and closes a buffer; the log's ``retained`` entries must say how
much of each item is still there, and `midword stats` must show it."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types
from midword.server.acceptance import ACCEPT_COMMAND
from pytest_lsp import ClientServerConfig, LanguageClient

from ..lsp_support import SERVER_COMMAND, Buffer, Session, start

pytestmark = pytest.mark.asyncio(loop_scope="module")
LOG = Path(tempfile.mkdtemp(prefix="midword-retention-")) / "acceptance.jsonl"
FIRST, SECOND = 1.0, 4.0  # checkpoints (seconds after the acceptance)
CONFIG = ClientServerConfig(
    server_command=SERVER_COMMAND,
    server_env={
        **os.environ,
        "MIDWORD_ACCEPTANCE_LOG": str(LOG),
        "MIDWORD_RETENTION_CHECKPOINTS": f"{FIRST},{SECOND}",
    },
)
MARK = "\u00a7\u00a7"  # typed inside the item: characters no completion here holds


@pytest_lsp.fixture(config=CONFIG, scope="module")
async def client(lsp_client: LanguageClient):
    session = await start(lsp_client, "visual-studio-code", {}, events=True)
    await session.wait_state("ready")
    yield
    await lsp_client.shutdown_session()


async def offered(buf: Buffer) -> tuple[str, str]:
    """The (id, text) of the inline item offered at the buffer's cursor."""
    result = await buf.client.text_document_inline_completion_async(
        types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=buf.uri),
            position=buf.position(),
            context=types.InlineCompletionContext(
                trigger_kind=types.InlineCompletionTriggerKind.Invoked
            ),
        )
    )
    assert isinstance(result, types.InlineCompletionList) and result.items, result
    item = result.items[0]
    assert item.command is not None and item.command.command == ACCEPT_COMMAND
    [tags] = item.command.arguments or [None]
    assert isinstance(item.insert_text, str)
    return tags["id"], item.insert_text


def notify(client: LanguageClient, event: str, params: dict[str, Any]) -> None:
    client.protocol.notify(f"midword/{event}", params)


def entries() -> list[dict[str, Any]]:
    if not LOG.exists():
        return []
    return [json.loads(line) for line in LOG.read_text().splitlines() if line.strip()]


async def checkpoint(item_id: str, seconds: float, timeout: float = 15.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in entries():
            if (entry["id"], entry["event"], entry.get("checkpoint")) == (
                item_id,
                "retained",
                seconds,
            ):
                return entry
        await asyncio.sleep(0.05)
    raise AssertionError(f"no retained entry at {seconds} s for {item_id}: {entries()}")


def accept(buf: Buffer, item_id: str, text: str, event: str = "completionAccepted") -> int:
    """Write the item at the cursor (the editor's edit), then report it; its offset."""
    at = buf.cursor
    buf.replace(at, at, text)
    params: dict[str, Any] = {"id": item_id}
    if event == "completionPartiallyAccepted":
        params["acceptedLength"] = len(text)
    notify(buf.client, event, params)
    return at


async def test_edits_before_inside_and_after_then_undo(session: Session) -> None:
    buf = Buffer(session.client, "file:///tmp/retained_edits.py")
    buf.type("import os\n\n\ndef main(argv):\n    path = ")
    item_id, text = await offered(buf)
    assert len(text) >= 4, text  # room for an edit inside and a deletion at the end
    n = len(text)
    at = accept(buf, item_id, text)
    buf.replace(0, 0, "# edited\n")  # a line before
    at += len("# edited\n")
    buf.replace(at + 1, at + 1, MARK)  # inside
    buf.replace(len(buf.text), len(buf.text), "\n\nprint(main([]))\n")  # after its end
    end = at + len(MARK) + n
    buf.replace(end - 1, end, "")  # two backspaces at its end
    buf.replace(end - 2, end - 1, "")

    first = await checkpoint(item_id, FIRST)
    assert (first["inserted"], first["retained"]) == (n, n - 2), (text, buf.text)
    assert first["similarity"] == pytest.approx((n - 2) / n, abs=1e-4)
    assert "unknown" not in first and first["method"] == "bytesampler"

    buf.replace(end - 2, end - 2, text[-2:])  # undo of the backspaces: at its end, yet its own
    buf.replace(at + 1, at + 1 + len(MARK), "")  # undo of the insertion inside
    assert buf.text[at : at + n] == text
    second = await checkpoint(item_id, SECOND)
    assert (second["retained"], second["similarity"]) == (n, 1.0)
    assert text not in LOG.read_text()  # numbers, never the code
    buf.close()


async def test_a_partial_acceptance_and_a_closed_document(session: Session) -> None:
    kept = Buffer(session.client, "file:///tmp/retained_partial.py")
    kept.type("import argparse\n\n\ndef main(argv):\n    parser = argparse.Arg")
    closed = Buffer(session.client, "file:///tmp/retained_closed.py")
    closed.type("import os\n\n\ndef main(argv):\n    path = ")
    partial_id, partial_text = await offered(kept)
    closed_id, closed_text = await offered(closed)
    accepted = partial_text[: max(1, len(partial_text) // 2)]
    accept(kept, partial_id, accepted, "completionPartiallyAccepted")
    accept(closed, closed_id, closed_text)
    closed.close()

    entry = await checkpoint(partial_id, FIRST)
    assert (entry["inserted"], entry["retained"], entry["similarity"]) == (
        len(accepted),
        len(accepted),
        1.0,
    )
    for seconds in (FIRST, SECOND):
        gone = await checkpoint(closed_id, seconds)
        assert gone["unknown"] == "closed" and "retained" not in gone
    kept.close()

    report = json.loads(
        subprocess.run(
            [sys.executable, "-m", "midword", "stats", "--json", "--log", str(LOG)],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout
    )
    first = report["byMethod"]["bytesampler"]["retention"]["1"]
    assert first["unknown"] >= 1 and first["items"] >= 1
    assert report["checkpoints"] == [1, 4]


async def test_a_completion_list_item_is_followed_from_the_cursor(session: Session) -> None:
    """A completion-list item (what Neovim's omnifunc shows) carries its tags as ``data``.
    Its edit replaces the name typed so far; the log counts and follows only what the
    item added after it, as for an inline item at the same cursor."""
    typed = "ArgumentPar"
    buf = Buffer(session.client, "file:///tmp/retained_plain.py")
    buf.type(f"import argparse\n\n\ndef main(argv):\n    parser = argparse.{typed}")
    items = await buf.complete()
    assert items, "no completion-list item mid-identifier"
    tags = [item.data for item in items]
    assert all(isinstance(t, dict) for t in tags), tags
    assert len({t["id"] for t in tags}) == len(tags)  # one id per item
    assert {(t["method"], t["context"]) for t in tags} == {("bytesampler", "inside_word")}
    edit = items[0].text_edit
    assert isinstance(edit, types.TextEdit)
    start, cursor = buf.cursor - len(typed), buf.cursor
    assert (edit.range.start, edit.range.end) == (buf.position(start), buf.position(cursor))
    added = edit.new_text[len(typed) :]
    assert edit.new_text.startswith(typed) and len(added) >= 2, edit.new_text

    buf.replace(start, cursor, edit.new_text)  # the editor applies the edit, range and all
    item_id = tags[0]["id"]
    notify(buf.client, "completionShown", {"id": item_id})
    notify(buf.client, "completionAccepted", {"id": item_id})
    buf.backspace()  # the item's last character
    buf.type("()")  # typed at its end: the user's, not the item's

    entry = await checkpoint(item_id, FIRST)
    assert (entry["inserted"], entry["retained"]) == (len(added), len(added) - 1), buf.text
    assert (entry["method"], entry["context"]) == ("bytesampler", "inside_word")
    [accepted] = [e for e in entries() if e["id"] == item_id and e["event"] == "accepted"]
    assert accepted["length"] == len(added)  # not the typed name it replaced
    buf.close()
