"""Completion-list fallback end to end, as Neovim 0.7 (no inline completion) would ask:
items whose text edit replaces the partial identifier, with filterText set."""

from __future__ import annotations

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import LanguageClient

from ..lsp_support import CONFIG, Buffer, Session, start

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_lsp.fixture(config=CONFIG, scope="module", params=["neovim@v0.7.0", "visual-studio-code"])
async def client(request: pytest.FixtureRequest, lsp_client: LanguageClient):
    session = await start(lsp_client, request.param, inline=False)
    await session.wait_state("ready")
    yield
    await lsp_client.shutdown_session()


async def test_capabilities_offer_both_kinds(session: Session) -> None:
    caps = session.init.capabilities
    assert caps.completion_provider is not None
    assert caps.inline_completion_provider is not None
    assert caps.position_encoding in (None, types.PositionEncodingKind.Utf16)


async def test_items_replace_the_partial_identifier(session: Session) -> None:
    buf = Buffer(session.client, "file:///tmp/fallback.py")
    buf.type("import argparse\n\n\ndef main(argv):\n    parser = argparse.ArgumentPar")
    items = await buf.complete()
    assert items, "mid-identifier completion should offer items"
    cursor = buf.position()
    for item in items:
        edit = item.text_edit
        assert isinstance(edit, types.TextEdit)
        assert edit.range.end == cursor
        assert edit.range.start == types.Position(line=cursor.line, character=cursor.character - 11)
        assert edit.new_text.startswith("ArgumentPar")
        assert item.filter_text == item.label == edit.new_text  # the client's filter keeps it
        assert "\n" not in edit.new_text
    assert items[0].label == "ArgumentParser"  # the identifier first, then the line
    buf.close()


async def test_after_a_space_items_insert_at_the_cursor(session: Session) -> None:
    buf = Buffer(session.client, "file:///tmp/fallback2.py", "import os\n\nx = ")
    for item in await buf.complete():
        assert item.text_edit.range.start == item.text_edit.range.end == buf.position()
        assert item.text_edit.new_text.strip()
    buf.close()


async def test_unknown_document_gives_an_empty_list(session: Session) -> None:
    result = await session.client.text_document_completion_async(
        types.CompletionParams(
            text_document=types.TextDocumentIdentifier(uri="file:///never/opened.py"),
            position=types.Position(line=0, character=0),
        )
    )
    assert result is not None and not result.items
