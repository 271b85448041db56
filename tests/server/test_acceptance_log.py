"""The local acceptance log end to end (server/acceptance.py, midword/cmd_stats.py):
`midword serve` tags each inline item, a pytest-lsp client sends the shown / accepted /
partly accepted notifications the VS Code extension sends, the server appends them to
the JSONL file, and `midword stats` counts them."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types
from midword.server.acceptance import ACCEPT_COMMAND
from pytest_lsp import ClientServerConfig, LanguageClient

from ..lsp_support import SERVER_COMMAND, Buffer, Session, capabilities

pytestmark = pytest.mark.asyncio(loop_scope="module")
LOG = Path(tempfile.mkdtemp(prefix="midword-acceptance-")) / "acceptance.jsonl"
CONFIG = ClientServerConfig(
    server_command=SERVER_COMMAND,
    server_env={**os.environ, "MIDWORD_ACCEPTANCE_LOG": str(LOG)},
)
EVENTS_CAPABILITY = {"midword": {"completionEvents": True}}


async def start_with_events(client: LanguageClient, events: bool) -> Session:
    """Like lsp_support.start, with the experimental capability that asks for tags."""
    session = Session(client)

    def on_status(params: Any) -> None:
        session.statuses.append(params)

    client.feature("midword/status")(on_status)
    caps = capabilities("visual-studio-code")
    if events:
        caps.experimental = EVENTS_CAPABILITY
    session.init = await client.initialize_session(
        types.InitializeParams(capabilities=caps, initialization_options={})
    )
    client.midword_session = session  # type: ignore[attr-defined]
    await session.wait_state("ready")
    return session


@pytest_lsp.fixture(config=CONFIG, scope="module", params=["events", "no-events"])
async def client(request: pytest.FixtureRequest, lsp_client: LanguageClient):
    lsp_client.asked_for_events = request.param == "events"  # type: ignore[attr-defined]
    await start_with_events(lsp_client, lsp_client.asked_for_events)
    yield
    await lsp_client.shutdown_session()


async def inline_items(buf: Buffer) -> list[types.InlineCompletionItem]:
    result = await buf.client.text_document_inline_completion_async(
        types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=buf.uri),
            position=buf.position(),
            context=types.InlineCompletionContext(
                trigger_kind=types.InlineCompletionTriggerKind.Automatic
            ),
        )
    )
    assert isinstance(result, types.InlineCompletionList)
    return list(result.items)


def log_entries() -> list[dict[str, Any]]:
    if not LOG.exists():
        return []
    return [json.loads(line) for line in LOG.read_text().splitlines() if line.strip()]


async def wait_for_entry(item_id: str, event: str, timeout: float = 10.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in log_entries():
            if entry["id"] == item_id and entry["event"] == event:
                return entry
        await asyncio.sleep(0.05)
    raise AssertionError(f"no {event} entry for {item_id} in {LOG}: {log_entries()}")


def notify(session: Session, event: str, params: dict[str, Any]) -> None:
    session.client.protocol.notify(f"midword/{event}", params)


def tags_of(item: types.InlineCompletionItem) -> dict[str, Any]:
    assert item.command is not None and item.command.command == ACCEPT_COMMAND
    [tags] = item.command.arguments or [None]
    assert isinstance(tags, dict), item.command
    return tags


async def test_items_are_tagged_and_events_reach_the_log(session: Session) -> None:
    events = session.client.asked_for_events  # type: ignore[attr-defined]
    word = Buffer(session.client, "file:///tmp/acc_word.py")
    word.type("import argparse\n\n\ndef main(argv):\n    parser = argparse.ArgumentPar")
    boundary = Buffer(session.client, "file:///tmp/acc_boundary.py")
    boundary.type("import os\n\n\ndef main(argv):\n    path = ")
    [in_word] = await inline_items(word)
    [at_boundary] = await inline_items(boundary)
    listed = await word.complete()  # completion-list items carry the tags as their data
    assert listed
    if not events:
        # a client that did not ask gets plain items (no command it would not know)
        assert in_word.command is None and at_boundary.command is None
        assert all(item.data is None and item.command is None for item in listed)
        return
    for item in listed:
        assert isinstance(item.data, dict) and item.command is None, item
        assert (item.data["method"], item.data["context"]) == ("bytesampler", "inside_word")
    word_tags, boundary_tags = tags_of(in_word), tags_of(at_boundary)
    assert word_tags["id"] not in {item.data["id"] for item in listed}  # ids never repeat
    assert word_tags["context"] == "inside_word" and boundary_tags["context"] == "boundary"
    assert word_tags["method"] == boundary_tags["method"] == "bytesampler"
    assert word_tags["id"] != boundary_tags["id"]

    notify(session, "completionShown", {"id": word_tags["id"]})
    notify(session, "completionAccepted", {"id": word_tags["id"]})
    notify(session, "completionShown", {"id": boundary_tags["id"]})
    notify(session, "completionPartiallyAccepted", {"id": boundary_tags["id"], "acceptedLength": 3})
    accepted = await wait_for_entry(word_tags["id"], "accepted")
    partial = await wait_for_entry(boundary_tags["id"], "partial")
    assert accepted["method"] == "bytesampler" and accepted["context"] == "inside_word"
    assert accepted["language"] == "python"
    assert accepted["length"] == len(in_word.insert_text)
    assert partial["acceptedLength"] == 3 and partial["context"] == "boundary"
    shown = [e for e in log_entries() if e["event"] == "shown"]
    assert {e["id"] for e in shown} >= {word_tags["id"], boundary_tags["id"]}
    # the code itself never goes into the log
    assert "ArgumentPar" not in LOG.read_text()
    word.close()
    boundary.close()


async def test_the_option_turns_the_log_off(session: Session) -> None:
    """Events sent while ``acceptanceLog`` is false are not written. Without tagged items
    (the client did not ask) the client's own tags go into the log."""
    buf = Buffer(session.client, "file:///tmp/acc_off.py")
    buf.type("import argparse\nparser = argparse.ArgumentPar")
    [item] = await inline_items(buf)
    buf.close()
    if session.client.asked_for_events:  # type: ignore[attr-defined]
        tags = tags_of(item)
    else:
        tags = {"id": "client-made-1", "method": "naive", "context": "boundary"}
    session.client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"acceptanceLog": False})
    )
    notify(session, "completionAccepted", tags)
    session.client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"acceptanceLog": True})
    )
    notify(session, "completionShown", tags)
    shown = await wait_for_entry(tags["id"], "shown")  # in order: the accepted one came first
    assert [e["event"] for e in log_entries() if e["id"] == tags["id"]] == ["shown"]
    assert (shown["method"], shown["context"]) == (tags["method"], tags["context"])
