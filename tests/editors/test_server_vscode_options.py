"""The VS Code extension and the server cannot drift: the initializationOptions the
compiled extension builds from its declared defaults are accepted by the server as is,
and a completion works with them (the same protocol path VS Code uses)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import pytest_lsp
from midword.server.options import ServerOptions, parse_options
from pytest_lsp import LanguageClient

from ..lsp_support import CONFIG, Buffer, Session, start

ASYNC = pytest.mark.asyncio(loop_scope="module")
ROOT = Path(__file__).resolve().parents[2]
DUMP = ROOT / "extension-vscode" / "out" / "dumpDefaultOptions.js"


def extension_defaults() -> dict:
    """`node out/dumpDefaultOptions.js` (built by `npm run ext:build`, which CI runs first)."""
    node = shutil.which("node")
    if node is None or not DUMP.is_file():
        pytest.fail(f"{DUMP} missing: run `npm run ext:build` (CI's `npm run ext:all` does)")
    out = subprocess.run([node, str(DUMP)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytest.mark.extension_build
def test_extension_defaults_are_the_server_defaults() -> None:
    options, problems = parse_options(extension_defaults())
    assert problems == []
    assert options == ServerOptions()


@pytest_lsp.fixture(config=CONFIG, scope="module")
async def client(lsp_client: LanguageClient):
    session = await start(lsp_client, "visual-studio-code", extension_defaults())
    await session.wait_state("ready")
    yield
    await lsp_client.shutdown_session()


@ASYNC
@pytest.mark.extension_build
async def test_vscode_profile_with_extension_options(session: Session) -> None:
    assert not session.client.messages  # no "invalid option" warnings were shown
    buf = Buffer(session.client, "untitled:Untitled-1")
    buf.type("import os\n\nfiles = os.listd")
    [text] = await buf.inline()
    assert ("listd" + text).startswith("listdir"), text
    buf.close()
