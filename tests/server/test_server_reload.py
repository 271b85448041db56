"""Model reloads: the watched model folder changes on disk, or the model option changes."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import LanguageClient

from ..lsp_support import CONFIG, Buffer, Session, start

pytestmark = pytest.mark.asyncio(loop_scope="module")
DEFAULT_MODEL = Path(__file__).resolve().parents[2] / "models" / "default"


@pytest.fixture(scope="module")
def model_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("model") / "copy"
    shutil.copytree(DEFAULT_MODEL, target)
    return target


@pytest_lsp.fixture(config=CONFIG, scope="module")
async def client(lsp_client: LanguageClient, model_copy: Path):
    session = await start(lsp_client, "visual-studio-code", {"model": str(model_copy)})
    await session.wait_state("ready")
    yield
    await lsp_client.shutdown_session()


async def wait_reload(session: Session, seen: int) -> None:
    """Wait for a "loading" status after the first ``seen`` ones, then for "ready"."""
    for _ in range(600):
        if any(s.state == "loading" for s in session.statuses[seen:]):
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the model was not reloaded")
    await session.wait_state("ready")


async def test_changed_model_files_reload_the_model(session: Session, model_copy: Path) -> None:
    seen = len(session.statuses)
    config = model_copy / "config.json"
    config.write_text(config.read_text())  # same content, new write: a change on disk
    await wait_reload(session, seen)
    buf = Buffer(session.client, "untitled:reload", "import os\nos.pa")
    assert await buf.inline()  # serving again with the reloaded model
    buf.close()


async def test_model_option_change_reloads_and_others_apply_live(session: Session) -> None:
    seen = len(session.statuses)
    session.client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"maxTokens": 2})
    )
    await asyncio.sleep(1.0)
    assert all(s.state == "ready" for s in session.statuses[seen:])  # no reload for maxTokens
    session.client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"model": str(DEFAULT_MODEL), "maxTokens": 2})
    )
    await wait_reload(session, seen)
    assert session.statuses[-1].model == "default"
