"""No duplicated code, end to end: `midword serve` with the shipped model never suggests
the lines that already follow the cursor (server/cleanup.py).

The text below the cursor is built from what the model itself writes: first ask with
nothing below, then put those generated lines below the cursor and ask again. The
prompt is the text before the cursor only, so the model writes the same completion
again, and only the trimming can keep it from repeating the file."""

from __future__ import annotations

import pytest
import pytest_lsp
from midword.server.cleanup import cut_repeats
from pytest_lsp import LanguageClient

from ..lsp_support import CONFIG, Buffer, Session, start

pytestmark = pytest.mark.asyncio(loop_scope="module")

# Cursors where a block may follow (an empty line in a body, or after a block opener).
BLOCK_PREFIXES = [
    "def total(values):\n    result = 0\n    for v in values:\n        ",
    "class Point:\n    def __init__(self, x, y):\n        ",
    "import os\n\n\ndef main():\n    ",
    "def add(a, b):\n",
]


@pytest_lsp.fixture(config=CONFIG, scope="module")
async def client(lsp_client: LanguageClient):
    # fim off: the premise above (the prompt is the text before the cursor only); the shipped
    # model has FIM tokens, and with the suffix in its prompt it writes another completion.
    options = {"multiline": "always", "fim": "off"}
    session = await start(lsp_client, "visual-studio-code", options)
    await session.wait_state("ready")
    yield
    await lsp_client.shutdown_session()


def nonblank(text: str) -> list[str]:
    return [line.strip() for line in text.split("\n") if line.strip()]


async def ask(session: Session, uri: str, prefix: str, below: str = "") -> list[str]:
    buf = Buffer(session.client, uri, prefix + below)
    buf.cursor = len(prefix)
    texts = await buf.inline()
    buf.close()
    return texts


async def test_a_block_never_repeats_the_lines_below(session: Session) -> None:
    """For each prefix whose completion spans lines, the generated lines after the first
    go below the cursor; the new completion stops before them."""
    checked = 0
    for n, prefix in enumerate(BLOCK_PREFIXES):
        [first] = await ask(session, f"file:///tmp/trim_{n}.py", prefix) or [""]
        lines = first.split("\n")
        if len(nonblank("\n".join(lines[1:]))) < 1 or not lines[0].strip():
            continue  # not a completion with a first line and more lines after it
        below = "\n" + "\n".join(lines[1:]) + "\n"
        texts = await ask(session, f"file:///tmp/trim_{n}_below.py", prefix, below)
        repeated = nonblank(below)
        for text in texts:
            mine = nonblank(text)
            # no suggestion re-inserts the code below, nor any run of its first lines
            assert not any(line == repeated[0] for line in mine[1:]), (text, below)
            assert mine[: len(repeated)] != repeated, (text, below)
        # the same completion came back, cut before its first repeated line
        expected = cut_repeats(first, prefix.rsplit("\n", 1)[-1], below.split("\n"))
        assert expected != first, "the untrimmed completion repeats the lines below"
        assert texts == ([expected] if expected.strip() else []), (texts, expected)
        checked += 1
    assert checked, "no prefix got a multi-line completion: the test checked nothing"


async def test_a_block_repeating_the_next_line_entirely_is_dropped(session: Session) -> None:
    """The whole completion is the line below the cursor: no suggestion at all."""
    checked = 0
    for n, prefix in enumerate(BLOCK_PREFIXES):
        [first] = await ask(session, f"file:///tmp/whole_{n}.py", prefix) or [""]
        if "\n" not in first.strip("\n") or not first.split("\n")[0].strip():
            continue
        below = "\n" + first.split("\n")[0].strip() + "\n"
        texts = await ask(session, f"file:///tmp/whole_{n}_below.py", prefix, below)
        assert texts == [], (first, texts)
        checked += 1
    assert checked, "no prefix got a multi-line completion: the test checked nothing"


async def test_a_line_equal_to_the_rest_of_the_line_is_dropped(session: Session) -> None:
    prefix = "import argparse\n\n\ndef main(argv):\n    parser = argparse.ArgumentPar"
    [completion] = await ask(session, "file:///tmp/suffix_first.py", prefix)
    first = completion.split("\n")[0]  # with text after the cursor, one line is asked for
    assert first.strip(), completion
    texts = await ask(session, "file:///tmp/suffix_again.py", prefix, first + "\n")
    assert texts == [], (first, texts)
