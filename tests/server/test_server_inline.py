"""Inline completion end to end: `midword serve` over stdio with the shipped model,
driven by pytest-lsp as VS Code and as Neovim (with inline completion added)."""

from __future__ import annotations

import re

import pytest
import pytest_lsp
from pytest_lsp import LanguageClient

from ..lsp_support import CONFIG, Buffer, Session, start

pytestmark = pytest.mark.asyncio(loop_scope="module")
SPECIAL = re.compile(r"<\|[a-z_]+\|>")


@pytest_lsp.fixture(config=CONFIG, scope="module", params=["visual-studio-code", "neovim"])
async def client(request: pytest.FixtureRequest, lsp_client: LanguageClient):
    session = await start(lsp_client, request.param, {"maxItems": 3})
    await session.wait_state("ready")
    yield
    await lsp_client.shutdown_session()


def check_common(text: str, buffer: Buffer) -> None:
    """No special-token text; nothing repeats what follows the cursor on its line."""
    assert not SPECIAL.search(text), text
    suffix = buffer.line_suffix().strip()
    if suffix:
        assert not text.split("\n")[0].rstrip().endswith(suffix), (text, suffix)


async def test_mid_identifier_continues_the_word(session: Session) -> None:
    buf = Buffer(session.client, "untitled:Untitled-1")
    buf.type("import argparse\n\n\ndef main(argv):\n    parser = argparse.ArgumentPar")
    [text] = await buf.inline()
    # The prompt boundary problem: a naive pipeline continues "Par" with a fresh token.
    assert ("ArgumentPar" + text).startswith("ArgumentParser"), text
    assert "\n" not in text  # mid-line: one line
    check_common(text, buf)
    buf.close()


async def test_after_a_space_stays_on_the_line(session: Session) -> None:
    buf = Buffer(session.client, "file:///tmp/after_space.py")
    buf.type("import os\n\npath = os.")
    buf.type("path.join(root, ")
    for text in await buf.inline(invoked=True):
        assert "\n" not in text
        check_common(text, buf)
    buf.close()


async def test_empty_line_allows_a_block_that_stops_at_dedent(session: Session) -> None:
    buf = Buffer(session.client, "file:///tmp/block.py")
    buf.type("def total(values):\n    result = 0\n    for v in values:\n        ")
    texts = await buf.inline(invoked=True)
    assert texts, "an empty line in a block should get a suggestion"
    for text in texts:
        lines = text.split("\n")
        assert len(lines) <= 16
        for line in lines[1:]:
            # A later line indented less than the cursor's block ends the completion.
            assert not line.strip() or len(line) - len(line.lstrip()) >= 8, text
        assert "\n\n\n" not in text
        check_common(text, buf)
    buf.close()


async def test_never_repeats_the_suffix(session: Session) -> None:
    buf = Buffer(session.client, "file:///tmp/suffix.py", "import sys\n\nprint()\n")
    buf.cursor = buf.text.index("()") + 1  # between the parentheses
    for text in await buf.inline(invoked=True):
        assert _closes_an_outer_bracket(text) is False, text  # the suffix's ")" does
        assert "\n" not in text
    buf.close()


async def test_end_of_file_and_distinct_items(session: Session) -> None:
    buf = Buffer(session.client, "file:///tmp/eof.py", "import os\n\n\ndef main():\n    return os.")
    texts = await buf.inline(invoked=True)
    assert 1 <= len(texts) <= 3
    assert len(set(texts)) == len(texts)
    for text in texts:
        assert "\n" not in text
        check_common(text, buf)
    buf.type("\n")
    await buf.inline()  # the empty last line after a trailing newline is a valid position
    buf.close()


def _closes_an_outer_bracket(text: str) -> bool:
    """Whether ``text`` closes a bracket it did not open (one opened before the cursor)."""
    depth = 0
    for char in text:
        depth += (char in "([{") - (char in ")]}")
        if depth < 0:
            return True
    return False
