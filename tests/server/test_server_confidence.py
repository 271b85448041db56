"""minConfidence and maxLines through the language server (issue 38), with the shipped
model: a completion cut where its exact probability falls below the threshold is a
prefix of the uncut one ending at a word boundary; a first word below it is a real empty
answer (not an error), logged at debug level; maxLines 1 is single-line mode."""

from __future__ import annotations

import asyncio
import re
import time

import pytest
import pytest_lsp
from pytest_lsp import LanguageClient

from ..lsp_support import CONFIG, Buffer, Session, start

pytestmark = pytest.mark.asyncio(loop_scope="module")
WORD = re.compile(r"[A-Za-z0-9_]")
BLOCK_START = "def total(values):\n    result = 0\n    for v in values:\n        "


@pytest_lsp.fixture(config=CONFIG, scope="module")
async def client(lsp_client: LanguageClient):
    options = {"maxItems": 1, "maxTokens": 24, "debounceMs": 0, "timeBudgetMs": 60000}
    session = await start(lsp_client, "visual-studio-code", options)
    await session.wait_state("ready")
    yield
    await lsp_client.shutdown_session()


async def answer_with(session: Session, options: dict, text: str, uri: str) -> list[str]:
    """The inline answer at the end of ``text`` under ``options`` (applied live)."""
    session.configure({"multiline": "auto", "minConfidence": 0, "maxLines": 0, **options})
    await asyncio.sleep(0.3)  # the configuration notification is applied before the request
    buf = Buffer(session.client, uri, text)
    try:
        return await buf.inline(invoked=False)
    finally:
        buf.close()


async def wait_for_log(session: Session, text: str, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(text in m.message for m in session.client.log_messages):
            return True
        await asyncio.sleep(0.05)
    return False


async def test_a_cut_completion_is_a_prefix_that_ends_on_a_word(session: Session) -> None:
    text = "import os\n\n\ndef main(argv):\n    path = os.path.join("
    [whole] = await answer_with(session, {}, text, "file:///tmp/conf_a.py")
    cuts = {}
    for p in (0.9, 0.5, 0.1, 0.01):
        got = await answer_with(session, {"minConfidence": p}, text, f"file:///tmp/conf_{p}.py")
        cut = got[0] if got else ""
        assert whole.startswith(cut), (cut, whole)
        rest = whole[len(cut) :]
        assert not (cut and rest and WORD.match(cut[-1]) and WORD.match(rest[0])), (cut, rest)
        cuts[p] = cut
    lengths = [len(cuts[p]) for p in (0.9, 0.5, 0.1, 0.01)]
    assert lengths == sorted(lengths)  # a lower threshold never shows less
    assert lengths[0] < len(whole)  # 0.9 cuts this completion


async def test_a_first_word_below_the_threshold_is_silence(session: Session) -> None:
    text = "x = "
    assert await answer_with(session, {}, text, "file:///tmp/silent_a.py")
    got = await answer_with(session, {"minConfidence": 0.999}, text, "file:///tmp/silent_b.py")
    assert got == []  # a real, empty answer
    assert await wait_for_log(session, "silent: the first word's probability is below")


async def test_max_lines_one_is_single_line_mode(session: Session) -> None:
    [block] = await answer_with(session, {"multiline": "always"}, BLOCK_START, "file:///tmp/l.py")
    if "\n" not in block:
        pytest.fail(f"the block completion has one line, nothing to limit: {block!r}")
    [line] = await answer_with(
        session, {"multiline": "always", "maxLines": 1}, BLOCK_START, "file:///tmp/l1.py"
    )
    assert line == block.split("\n")[0]
    two = await answer_with(
        session, {"multiline": "always", "maxLines": 2}, BLOCK_START, "file:///tmp/l2.py"
    )
    assert two == ["\n".join(block.split("\n")[:2]).rstrip()] or two == [block]
    assert two[0].count("\n") <= 1
