"""Where midword completes, end to end through a real ``midword serve`` (shipped model):
the ``languages`` switch, ``excludeFiles``, their live update through
workspace/didChangeConfiguration, and the privacy point: an excluded file open beside
a buffer never reaches that buffer's prompt (read back with ``midword/inspect``)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types
from midword.server.where import DEFAULT_EXCLUDE_FILES, DEFAULT_LANGUAGES
from pytest_lsp import LanguageClient

from ..lsp_support import CONFIG, Buffer, Session, start

pytestmark = pytest.mark.asyncio(loop_scope="module")
CODE = "import os\n\nfiles = os.listd"  # the shipped model completes it: listdir
DEFAULTS = {"languages": DEFAULT_LANGUAGES, "excludeFiles": list(DEFAULT_EXCLUDE_FILES)}


@pytest_lsp.fixture(config=CONFIG, scope="module")
async def client(lsp_client: LanguageClient):
    # fim off: the prompt read back is the plain one (context block, then the window)
    session = await start(lsp_client, "visual-studio-code", {"debounceMs": 0, "fim": "off"})
    await session.wait_state("ready")
    yield
    await lsp_client.shutdown_session()


async def model_requests(session: Session) -> int:
    """Requests the server has sent to the model so far (midword/stats)."""
    result = await session.client.protocol.send_request_async("midword/stats", {})
    return result["modelRequests"] if isinstance(result, dict) else result.modelRequests


async def live_prefix(session: Session, uri: str) -> bytes | None:
    state = await session.client.protocol.send_request_async(
        "midword/inspect", {"textDocument": {"uri": uri}}
    )
    if state is None:
        return None
    return bytes.fromhex(state["prefix"] if isinstance(state, dict) else state.prefix)


async def logged(session: Session, text: str, timeout: float = 10.0) -> bool:
    """Whether a log message containing ``text`` arrives (window/logMessage)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(text in m.message for m in session.client.log_messages):
            return True
        await asyncio.sleep(0.05)
    return False


def completes_listdir(items: list[str]) -> bool:
    return any(("listd" + text).startswith("listdir") for text in items)


async def test_markdown_is_off_by_default_and_on_after_a_setting_change(session: Session) -> None:
    code = Buffer(session.client, "file:///w/tool.py", CODE)
    prose = Buffer(session.client, "file:///w/notes.md", CODE, language="markdown")
    try:
        assert completes_listdir(await code.inline())
        before = await model_requests(session)
        assert await prose.inline() == [] and await prose.inline(invoked=True) == []
        assert await prose.complete() == []
        assert await model_requests(session) == before  # no model work for it
        assert await live_prefix(session, prose.uri) is None  # and no VCT kept for it
        assert await logged(session, "completions are off for markdown")

        session.configure({"languages": {"markdown": True}})
        assert completes_listdir(await prose.inline())
        session.configure({"languages": {"markdown": True, "python": False}})
        assert await code.inline() == []
    finally:
        session.configure(DEFAULTS)
        code.close()
        prose.close()


async def test_a_buffer_that_becomes_disabled_loses_its_live_state(session: Session) -> None:
    prose = Buffer(session.client, "file:///w/later.md", CODE, language="markdown")
    try:
        session.configure({"languages": {"markdown": True}})
        assert completes_listdir(await prose.inline())
        assert await live_prefix(session, prose.uri) is not None
        session.configure({"languages": {"markdown": False}})
        assert await prose.inline() == []
        assert await live_prefix(session, prose.uri) is None
    finally:
        session.configure(DEFAULTS)
        prose.close()


async def test_an_env_file_gets_no_completion_whatever_its_language(session: Session) -> None:
    env = Buffer(session.client, "file:///w/.env", CODE)  # opened as python on purpose
    key = Buffer(session.client, "file:///w/certs/server.pem", CODE)
    try:
        assert await env.inline() == [] and await env.inline(invoked=True) == []
        assert await key.inline() == [] and await env.complete() == []
        assert await logged(session, 'midword.excludeFiles pattern ".env"')
    finally:
        env.close()
        key.close()


async def test_an_excluded_file_never_reaches_another_buffers_prompt(session: Session) -> None:
    # all python: the context block quotes other open files of the buffer's language
    secret = Buffer(session.client, "file:///w/.env", "API_TOKEN = 'tok_93f1c2_live'\n")
    secrets_module = Buffer(
        session.client, "file:///w/settings/secrets.py", "DB_PASS = 'hunter2x'\n"
    )
    lib = Buffer(session.client, "file:///w/lib.py", "def helper_zqx(value):\n    return value\n")
    main = Buffer(session.client, "file:///w/main.py", CODE)
    try:
        await main.inline()
        prefix = await live_prefix(session, main.uri)
        assert prefix is not None and prefix.endswith(CODE.encode())
        assert b"helper_zqx" in prefix  # an ordinary file of the same language is quoted
        assert b"tok_93f1c2_live" not in prefix and b"hunter2x" not in prefix
        assert b".env" not in prefix and b"secrets.py" not in prefix

        # with the list turned off the same files are quoted: the patterns kept them out
        session.configure({"excludeFiles": []})
        main.type("i")
        await main.inline()
        opened = await live_prefix(session, main.uri)
        assert opened is not None and b"tok_93f1c2_live" in opened
        # and turned on again, the kept block is chosen again without them
        session.configure(DEFAULTS)
        main.type("r")
        await main.inline()
        closed = await live_prefix(session, main.uri)
        assert closed is not None and b"tok_93f1c2_live" not in closed
    finally:
        session.configure(DEFAULTS)
        for buf in (main, lib, secrets_module, secret):
            buf.close()


async def test_a_user_exclude_list_replaces_the_default(session: Session) -> None:
    env = Buffer(session.client, "file:///w/.env", CODE)
    mine = Buffer(session.client, "file:///w/vault/token.py", CODE)
    try:
        session.configure({"excludeFiles": ["vault/**"]})
        assert completes_listdir(await env.inline())  # .env is no longer in the list
        assert await mine.inline() == []
    finally:
        session.configure(DEFAULTS)
        env.close()
        mine.close()


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"languages": ["markdown"]}, "languages"),
        ({"languages": {"markdown": "yes"}}, "languages"),
        ({"excludeFiles": ".env"}, "excludeFiles"),
    ],
)
async def test_bad_types_give_the_usual_option_error(
    session: Session, settings: dict[str, Any], key: str
) -> None:
    client = session.client
    shown_before = len(client.messages)
    prose = Buffer(client, "file:///w/bad.md", CODE, language="markdown")
    env = Buffer(client, "file:///w/.env", CODE)
    try:
        session.configure({"languages": {"markdown": True}, "excludeFiles": []})
        session.configure(settings)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(client.messages) == shown_before:
            await asyncio.sleep(0.05)
        [shown] = client.messages[shown_before:]
        assert shown.type == types.MessageType.Warning
        assert shown.message.startswith(f"midword.{key} = ") and "is invalid" in shown.message
        # the invalid one took its default: markdown off again, or .env excluded again
        blocked = prose if key == "languages" else env
        assert await blocked.inline() == []
    finally:
        session.configure(DEFAULTS)
        prose.close()
        env.close()
