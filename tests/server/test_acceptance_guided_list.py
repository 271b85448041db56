"""Completion-list items guided by the editor's names (issue 39) are tagged for the
acceptance log (issue 38) as guided inline items are: method ``bytesampler+symbols``, in
the items' ``data`` (what Neovim's omnifunc reads back), and plain ``bytesampler``
without names."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import pytest_lsp
from pytest_lsp import ClientServerConfig, LanguageClient

from ..lsp_support import SERVER_COMMAND, Buffer, Session, send_json, start
from .test_server_guided import NAMES as GUIDED_NAMES
from .test_server_guided import OPTIONS as GUIDED_OPTIONS
from .test_server_guided import TEXT

pytestmark = pytest.mark.asyncio(loop_scope="module")

MODEL = Path(__file__).resolve().parents[2] / "models" / "default"
OPTIONS = {**GUIDED_OPTIONS, "model": str(MODEL)}  # the guided tests' options and buffer
NAMES = GUIDED_NAMES[:2]  # the two that extend "zq"
LOG = Path(tempfile.mkdtemp(prefix="midword-guided-list-")) / "acceptance.jsonl"
CONFIG = ClientServerConfig(
    server_command=SERVER_COMMAND,
    server_env={**os.environ, "MIDWORD_ACCEPTANCE_LOG": str(LOG)},
)


@pytest_lsp.fixture(config=CONFIG, scope="module")
async def client(lsp_client: LanguageClient):
    session = await start(lsp_client, "neovim@v0.7.0", OPTIONS, inline=False, events=True)
    await session.wait_state("ready")
    yield
    await lsp_client.shutdown_session()


async def listed(session: Session, uri: str, names: list[str]) -> list[dict]:
    """The ``data`` of the completion-list items at the end of TEXT (``names`` sent as
    ``midwordCandidates``, as midword.lua's omnifunc sends them)."""
    position = {"line": TEXT.count("\n"), "character": len(TEXT.split("\n")[-1])}
    params = {"textDocument": {"uri": uri}, "position": position}
    if names:
        params["midwordCandidates"] = names
    result = await send_json(session.client, "textDocument/completion", params)
    assert result.items, result
    assert result.items[0].label.startswith(tuple(NAMES) if names else "zq")
    return [item.data for item in result.items]


async def test_guided_list_items_carry_the_guided_method(session: Session) -> None:
    buf = Buffer(session.client, "file:///tmp/guided_list_tags.py", TEXT)
    guided = await listed(session, buf.uri, NAMES)
    unguided = await listed(session, buf.uri, [])
    # both items come from the one guided text: both are tagged so
    assert {(d["method"], d["context"]) for d in guided} == {("bytesampler+symbols", "inside_word")}
    assert {(d["method"], d["context"]) for d in unguided} == {("bytesampler", "inside_word")}
    ids = [d["id"] for d in guided + unguided]
    assert len(set(ids)) == len(ids)
    buf.close()
