"""Faults of a remote engine, with the real vLLM server the tests start, pause and kill by
PID (tests/vllm_support.py), and real language servers (pytest-lsp):

* slow: the server's process group is paused (SIGSTOP): the request in flight ends at
  the request timeout, the status says the engine did not answer, later requests are
  answered at once, and once it runs again (SIGCONT) the retry brings the status back;
* killed mid-completion (SIGKILL while a request waits on it): the answer comes at once,
  empty, the status says the engine is unreachable and when the next try is;
* down at start: a second language server loads while the engine is down;
* back: vLLM restarted on the same port; both servers become ready by themselves, and
  the first one's buffer still has its live covering tree (the same tree as before);
* an error: a server without the right API key gets HTTP 401, said in the status.

In every phase the editor gets its answers (empty when the engine is away) within the
request timeout. Tests run in file order; each phase starts where the one before ended.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_lsp
from pytest_lsp import ClientServerConfig, LanguageClient

from ..lsp_support import SERVER_COMMAND, Buffer, Session, start
from ..vllm_support import (
    API_KEY,
    MODEL_DIR,
    VLLMServer,
    requires_vllm,
    shared_vllm,
    stop_shared,
)

pytestmark = [pytest.mark.vllm, requires_vllm, pytest.mark.asyncio(loop_scope="module")]

TIMEOUT_S = 3.0  # MIDWORD_ENGINE_TIMEOUT of the language servers: how long "slow" takes
ANSWER_S = TIMEOUT_S + 2.0  # an answer must come within this, whatever the engine does
RECOVER_S = 60.0  # back to ready after the engine is: backoff (at most 4 s here) and checks


def server_env(api_key: str = API_KEY) -> dict[str, str]:
    return {
        **os.environ,
        "MIDWORD_ENGINE_API_KEY": api_key,
        "MIDWORD_ENGINE_TIMEOUT": str(TIMEOUT_S),
        "MIDWORD_ENGINE_RETRY_MAX_S": "4",  # back soon after vLLM is (30 s by default)
    }


CONFIG = ClientServerConfig(server_command=SERVER_COMMAND, server_env=server_env())


@pytest.fixture(scope="session")
def vllm() -> Iterator[VLLMServer]:
    yield shared_vllm()
    stop_shared()


def options(vllm: VLLMServer) -> dict[str, Any]:
    return {
        "model": str(MODEL_DIR),
        "engine": "vllm",
        "engineUrl": vllm.url,
        "maxTokens": 8,
        "timeBudgetMs": 2000,
        "contextFiles": "off",
    }


@pytest_lsp.fixture(config=CONFIG, scope="module")
async def client(lsp_client: LanguageClient, vllm: VLLMServer) -> AsyncIterator[None]:
    session = await start(lsp_client, "visual-studio-code", options(vllm))
    await wait_status(session, lambda s: s.state == "ready")
    yield
    await lsp_client.shutdown_session()


@pytest.fixture(scope="module")
def shared() -> dict[str, Any]:
    """What one phase leaves for the next (buffers, trees, other clients)."""
    return {}


# ---------------------------------------------------------------------------- helpers
def session_of(client: LanguageClient) -> Session:
    return client.midword_session  # type: ignore[attr-defined]


async def wait_status(session: Session, ok: Any, timeout: float = RECOVER_S) -> Any:
    """The first status (latest first) that ``ok`` accepts, waiting up to ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if session.statuses and ok(session.statuses[-1]):
            return session.statuses[-1]
        await asyncio.sleep(0.1)
    last = session.statuses[-1] if session.statuses else None
    raise AssertionError(f"status never matched; last: {last}")


async def timed_inline(buffer: Buffer) -> tuple[list[str], float]:
    started = time.monotonic()
    items = await asyncio.wait_for(buffer.inline(invoked=True), timeout=ANSWER_S + 5)
    return items, time.monotonic() - started


async def tree_of(client: LanguageClient, uri: str) -> Any:
    state = await client.protocol.send_request_async(
        "midword/inspect", {"textDocument": {"uri": uri}}
    )
    assert state is not None
    return state["tree"] if isinstance(state, dict) else state.tree


KILLED_TYPED = "mpy as np\n\nvalues = np.zer"  # typed before the engine is killed


async def settle() -> None:
    await asyncio.sleep(0.2)  # didChange notifications reach the server before requests


# ---------------------------------------------------------------------------- phases
async def test_completes_from_vllm(client: LanguageClient, shared: dict) -> None:
    session = session_of(client)
    assert "vllm at" in session.statuses[-1].message
    buffer = Buffer(client, "file:///faults/a.py")
    buffer.type("import nu")
    await settle()
    items, seconds = await timed_inline(buffer)
    assert items, "no completion from the engine"
    shared.update(buffer=buffer, items=items, tree=await tree_of(client, buffer.uri))


async def test_slow_engine(client: LanguageClient, vllm: VLLMServer, shared: dict) -> None:
    session, buffer = session_of(client), shared["buffer"]
    buffer.type("m")
    await settle()
    vllm.signal(signal.SIGSTOP)
    try:
        items, seconds = await timed_inline(buffer)
        assert items == [] and seconds < ANSWER_S
        status = await wait_status(session, lambda s: s.state == "error", timeout=5)
        assert f"within {TIMEOUT_S:g} s" in status.message and "retrying in" in status.message
        items, seconds = await timed_inline(buffer)  # the status is error: answered at once
        assert items == [] and seconds < 1.0
    finally:
        vllm.signal(signal.SIGCONT)
    await wait_status(session, lambda s: s.state == "ready", timeout=30)
    buffer.backspace()
    await settle()
    items, _ = await timed_inline(buffer)
    assert items == shared["items"]  # greedy: the same answer as before the stall
    assert await tree_of(client, buffer.uri) == shared["tree"]


async def test_engine_killed_mid_completion(
    client: LanguageClient, vllm: VLLMServer, shared: dict
) -> None:
    session, buffer = session_of(client), shared["buffer"]
    # The engine stops before the new text arrives, so none of it is scored and the request
    # below must wait on the engine (an answer the session's kept scores cover, as "import
    # num" after the stall, comes without it) ...
    vllm.signal(signal.SIGSTOP)
    buffer.type(KILLED_TYPED)
    await settle()
    pending = asyncio.ensure_future(timed_inline(buffer))
    await asyncio.sleep(1.0)
    vllm.kill()  # ... which dies under it (SIGKILL to its process group)
    items, seconds = await pending
    assert items == [] and seconds < ANSWER_S
    status = await wait_status(session, lambda s: s.state == "error", timeout=5)
    assert "retrying in" in status.message
    await wait_status(session, lambda s: "unreachable" in s.message, timeout=15)
    tree = await tree_of(client, buffer.uri)
    assert tree and tree != shared["tree"]  # brought to the typed text, engine or not
    items, seconds = await timed_inline(buffer)
    assert items == [] and seconds < 1.0
    assert await tree_of(client, buffer.uri) == tree  # the live tree is kept


async def test_engine_down_at_start(vllm: VLLMServer, shared: dict) -> None:
    other = await CONFIG.start()
    session = await start(other, "visual-studio-code", options(vllm))
    shared["other"] = other
    status = await wait_status(session, lambda s: s.state == "error", timeout=120)
    assert "unreachable" in status.message and "retrying in" in status.message
    buffer = Buffer(other, "file:///faults/b.py")
    buffer.type("def ma")
    await settle()
    items, seconds = await timed_inline(buffer)
    assert items == [] and seconds < 1.0
    shared["other_buffer"] = buffer


async def test_both_recover_when_the_engine_is_back(
    client: LanguageClient, vllm: VLLMServer, shared: dict
) -> None:
    vllm.start()  # the same port: the servers retry the URL they have
    await asyncio.to_thread(vllm.wait_ready)
    first, second = session_of(client), session_of(shared["other"])
    await wait_status(first, lambda s: s.state == "ready")
    await wait_status(second, lambda s: s.state == "ready")
    buffer = shared["buffer"]
    buffer.backspace(len(KILLED_TYPED))  # back to the text of the first phase
    await settle()
    assert await tree_of(client, buffer.uri) == shared["tree"]
    items, _ = await timed_inline(buffer)
    assert items == shared["items"]
    other_items, _ = await timed_inline(shared["other_buffer"])
    assert other_items
    await shared["other"].shutdown_session()


async def test_an_engine_error_is_shown(vllm: VLLMServer) -> None:
    config = ClientServerConfig(server_command=SERVER_COMMAND, server_env=server_env("wrong"))
    other = await config.start()
    try:
        session = await start(other, "visual-studio-code", options(vllm))
        status = await wait_status(session, lambda s: s.state == "error", timeout=120)
        assert "HTTP 401" in status.message and "MIDWORD_ENGINE_API_KEY" in status.message
        buffer = Buffer(other, "file:///faults/c.py")
        buffer.type("x = 1")
        await settle()
        items, seconds = await timed_inline(buffer)
        assert items == [] and seconds < 1.0
    finally:
        await other.shutdown_session()
