"""Typing through a shown completion, and the debounce of automatic requests, end to end:
`midword serve` over stdio with the shipped model, driven by pytest-lsp as VS Code
(server/reuse.py, server/debounce.py; issue 25 §1, §2)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import pytest_lsp
from pytest_lsp import LanguageClient

from ..lsp_support import CONFIG, Buffer, Session, start

pytestmark = pytest.mark.asyncio(loop_scope="module")
LINE = "import argparse\n\n\ndef main(argv):\n    parser = argparse.ArgumentPar"


@pytest_lsp.fixture(config=CONFIG, scope="module")
async def client(lsp_client: LanguageClient):
    session = await start(lsp_client, "visual-studio-code", {"debounceMs": 0})
    await session.wait_state("ready")
    yield
    await lsp_client.shutdown_session()


def field(obj: Any, name: str) -> Any:
    """A field of a custom request's result (pygls gives a namedtuple-like object)."""
    return obj[name] if isinstance(obj, dict) else getattr(obj, name)


async def counts(session: Session) -> dict[str, int]:
    stats = await session.client.protocol.send_request_async("midword/stats", {})
    names = ("modelRequests", "reusedAnswers", "debounceDropped")
    return {name: field(stats, name) for name in names}


async def live_prefix(session: Session, uri: str) -> bytes:
    state = await session.client.protocol.send_request_async(
        "midword/inspect", {"textDocument": {"uri": uri}}
    )
    return bytes.fromhex(field(state, "prefix"))


async def test_typing_through_the_shown_completion_needs_no_model_call(session: Session) -> None:
    buf = Buffer(session.client, "file:///tmp/through.py")
    buf.type(LINE)
    [shown] = await buf.inline()
    assert len(shown) >= 3, shown  # "ser()" with the shipped model
    before = await counts(session)
    for typed in range(1, len(shown)):
        buf.type(shown[typed - 1])
        assert await buf.inline() == [shown[typed:]]
    after = await counts(session)
    assert after["modelRequests"] == before["modelRequests"]
    assert after["reusedAnswers"] == before["reusedAnswers"] + len(shown) - 1
    # the live covering tree followed the text typed (what any edit does)
    assert await live_prefix(session, buf.uri) == buf.text[: buf.cursor].encode()
    # a character the completion does not go on with: the model is asked again
    buf.type("Z" if shown[-1] != "Z" else "Q")
    await buf.inline()
    final = await counts(session)
    assert final["modelRequests"] == after["modelRequests"] + 1
    assert final["reusedAnswers"] == after["reusedAnswers"]
    buf.close()


async def test_an_edit_other_than_the_completion_forgets_it(session: Session) -> None:
    buf = Buffer(session.client, "file:///tmp/forget.py")
    buf.type(LINE)
    [shown] = await buf.inline()
    buf.type(shown[0])
    buf.backspace()  # back where it was shown, but through an edit that is not typing on
    buf.type(shown[0])
    before = await counts(session)
    [again] = await buf.inline()
    after = await counts(session)
    assert after["modelRequests"] == before["modelRequests"] + 1
    assert after["reusedAnswers"] == before["reusedAnswers"]
    assert again  # the model answered the cursor afresh
    buf.close()


async def test_a_superseded_automatic_request_never_reaches_the_model(session: Session) -> None:
    session.configure({"debounceMs": 400})
    try:
        buf = Buffer(session.client, "file:///tmp/debounce.py")
        buf.type(LINE)
        before = await counts(session)
        first = asyncio.ensure_future(buf.inline())
        await asyncio.sleep(0.05)  # the request is waiting for typing to pause
        buf.type("s")
        started = time.monotonic()
        second = await buf.inline()
        waited = time.monotonic() - started
        assert await first == []
        after = await counts(session)
        assert after["debounceDropped"] == before["debounceDropped"] + 1
        assert after["modelRequests"] == before["modelRequests"] + 1  # the second only
        assert second and waited >= 0.35  # it waited for the pause itself
        # an invoked request (the user asked) does not wait, however long the debounce
        session.configure({"debounceMs": 20000})
        buf.type("e")
        started = time.monotonic()
        invoked = await buf.inline(invoked=True)
        assert invoked and time.monotonic() - started < 10.0
        buf.close()
    finally:
        session.configure({"debounceMs": 0})


async def test_edits_to_another_buffer_do_not_hold_back_a_request(session: Session) -> None:
    """The debounce waits for a pause in the asked-about document only: a tool editing
    other buffers all the time (issue 27's busy editor) must not delay or drop it."""
    session.configure({"debounceMs": 5000})
    try:
        asked = Buffer(session.client, "file:///tmp/asked.py", LINE)  # opened, not typed in
        other = Buffer(session.client, "file:///tmp/elsewhere.py")
        other.type("x = 1\n")
        started = time.monotonic()
        answer = await asked.inline()
        waited = time.monotonic() - started
        assert answer  # not dropped
        assert waited < 4.0  # it did not wait the 5 s that typing in its own buffer means
        asked.type("Z" if not answer[0].startswith("Z") else "Q")  # its own buffer: it waits
        started = time.monotonic()
        await asked.inline()
        assert time.monotonic() - started >= 4.5
        asked.close()
        other.close()
    finally:
        session.configure({"debounceMs": 0})
