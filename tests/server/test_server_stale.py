"""Answers stay in the document version they were asked about (issue: a request made
before a burst of edits was answered with its position converted against the newer
text: an IndexError when the document had shrunk, or a range on other text).

A real server over the LSP transport (pytest-lsp) takes random edits (typing,
backspaces, pastes, range deletions that shrink the document, full replacements,
non-ASCII text and surrogate pairs) interleaved with inline and completion-list
requests that are sent at once and awaited later. Every request must be answered
without an error, and every item must sit at the position asked about, in the text
of the version it was asked about.
"""

from __future__ import annotations

import asyncio
import random
import re
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import LanguageClient

from ..lsp_support import CONFIG, Buffer, Session, start

pytestmark = pytest.mark.asyncio(loop_scope="module")

OPTIONS = {"timeBudgetMs": 30000, "maxTokens": 6, "windowBytes": 512}
STEPS = 160
START = "import os\n\ndef walk(root):\n    for name in os.listdir(root):\n        yield na"
PIECES = ["x", "e", " ", "(", "\n", "\n    ", "é", "中", "😀", "𝔘", "name", "os.pa", "\t"]
PASTE = "def helper(values):\n    total = 0\n    for v in values:\n        total += v  # Σ😀\n"
IDENTIFIER_TAIL = re.compile(r"[\w$]*$")


@pytest_lsp.fixture(config=CONFIG, scope="module")
async def client(lsp_client: LanguageClient):
    session = await start(lsp_client, "visual-studio-code", OPTIONS)
    await session.wait_state("ready")
    yield
    await lsp_client.shutdown_session()


def _replace_all(buf: Buffer, text: str) -> None:
    buf.text, buf.cursor, buf.version = text, len(text), buf.version + 1
    buf.client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=buf.uri, version=buf.version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )


def _random_edit(buf: Buffer, rng: random.Random) -> None:
    """One edit as editors send them; deletions often take whole lines (the text shrinks)."""
    action = rng.choices(
        ["type", "backspace", "paste", "delete", "shrink", "jump", "replace"],
        weights=[8, 3, 2, 2, 2, 2, 1],
    )[0]
    size = len(buf.text)
    if action == "type":
        buf.type(rng.choice(PIECES))
    elif action == "backspace":
        buf.backspace(rng.randrange(1, 4))
    elif action == "paste":
        buf.replace(buf.cursor, buf.cursor, PASTE[: rng.randrange(1, len(PASTE))])
    elif action == "delete":
        start = rng.randrange(size + 1)
        buf.replace(start, min(size, start + rng.randrange(1, 20)), "")
    elif action == "shrink":  # cut everything from a random line on
        start = rng.randrange(size + 1)
        buf.replace(start, size, rng.choice(["", "\n", "é"]))
    elif action == "jump":
        buf.cursor = rng.randrange(size + 1)
    else:
        _replace_all(buf, START[: rng.randrange(len(START) + 1)])


def _send(buf: Buffer, rng: random.Random) -> dict[str, Any]:
    """An inline or completion-list request at the cursor (or anywhere), sent now."""
    index = buf.cursor if rng.random() < 0.7 else rng.randrange(len(buf.text) + 1)
    position = buf.position(index)
    doc = types.TextDocumentIdentifier(uri=buf.uri)
    if rng.random() < 0.7:
        method = types.TEXT_DOCUMENT_INLINE_COMPLETION
        kind = rng.choice(list(types.InlineCompletionTriggerKind))
        params: Any = types.InlineCompletionParams(
            text_document=doc,
            position=position,
            context=types.InlineCompletionContext(trigger_kind=kind),
        )
    else:
        method = types.TEXT_DOCUMENT_COMPLETION
        params = types.CompletionParams(text_document=doc, position=position)
    future = asyncio.wrap_future(buf.client.protocol.send_request(method, params))
    return {"method": method, "text": buf.text, "index": index, "pos": position, "at": future}


def _check(asked: dict[str, Any], result: Any) -> int:
    """Items sit where they were asked, in the text of that version; returns their count."""
    pos = asked["pos"]
    line = asked["text"][: asked["index"]].split("\n")[-1]
    if asked["method"] == types.TEXT_DOCUMENT_INLINE_COMPLETION:
        items = result.items if isinstance(result, types.InlineCompletionList) else result or []
        for item in items:
            assert item.range.start == pos and item.range.end == pos, (item.range, pos)
            item.insert_text.encode("utf-8")  # no lone surrogate
        return len(items)
    items = result.items if isinstance(result, types.CompletionList) else result or []
    for item in items:
        rng = item.text_edit.range
        assert rng.start.line == rng.end.line == pos.line and rng.end == pos, (rng, pos)
        replaced = line.encode("utf-16-le")[2 * rng.start.character :].decode("utf-16-le")
        assert IDENTIFIER_TAIL.fullmatch(replaced), replaced  # only the partial identifier
        assert item.text_edit.new_text.startswith(replaced)
    return len(items)


@pytest.mark.parametrize("seed", range(4))
async def test_answers_stay_in_the_version_they_were_asked_about(
    session: Session, seed: int
) -> None:
    rng = random.Random(seed)
    buf = Buffer(session.client, f"file:///tmp/stale-{seed}.py", START)
    asked: list[dict[str, Any]] = []
    for _ in range(STEPS):
        for _ in range(rng.randrange(1, 4)):
            _random_edit(buf, rng)
        if rng.random() < 0.4:
            asked.append(_send(buf, rng))
        if rng.random() < 0.25:  # answers may come in between, or after more edits
            await asyncio.sleep(rng.choice([0, 0.005, 0.03, 0.1]))
    answered = 0
    for request in asked:
        answered += _check(request, await asyncio.wait_for(request["at"], 120)) > 0
    # the document sent at the end is still answered (nothing stale about it)
    final = _send(buf, random.Random(0))
    _check(final, await asyncio.wait_for(final["at"], 120))
    print(f"\nseed {seed}: {len(asked)} requests, {answered} answered with items")
    assert len(asked) > STEPS // 4
    buf.close()
