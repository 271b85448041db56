"""The language server on a vocabulary that lacks some single bytes (as SmolLM2 does).

A buffer that holds such a byte cannot be covered up to the cursor. The server never gives
up on it: the prompt window starts just after the last such byte (said once in the log),
and when the byte is deleted the live tree covers the whole window again.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import pytest_lsp
from pytest_lsp import LanguageClient

from midword.models import shipped_test_model
from midword.testing.vocab import HOLDING_MISSING, MISSING, derive_tokenizer

from ..lsp_support import CONFIG, Buffer, Session, start

pytestmark = pytest.mark.asyncio(loop_scope="module")
UNCOVERABLE = "\x04"  # a byte of MISSING that is also one character


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random model on the shipped vocabulary without the bytes of MISSING."""
    pytest.importorskip("torch")
    from midword.engine import load_engine

    from midword.testing.tiny_models import build_tiny_llama

    assert ord(UNCOVERABLE) in MISSING
    folder = tmp_path_factory.mktemp("missing-bytes-server")
    source = shipped_test_model() / "tokenizer.json"
    path = derive_tokenizer(source, MISSING, HOLDING_MISSING, folder / "tokenizer.json")
    build_tiny_llama(load_engine(str(path)).tok.size, dir=folder, seed=7, hidden=16, layers=1)
    return folder


@pytest_lsp.fixture(config=CONFIG, scope="module")
async def client(lsp_client: LanguageClient, model_dir: Path):
    options = {"model": str(model_dir), "device": "cpu", "maxTokens": 4, "maxItems": 1}
    options["fim"] = "off"  # the derived tokenizer has the shipped model's FIM tokens
    session = await start(lsp_client, "visual-studio-code", options)
    await session.wait_state("ready")
    yield
    await lsp_client.shutdown_session()


async def live_prefix(session: Session, buf: Buffer) -> bytes:
    state = await session.client.protocol.send_request_async(
        "midword/inspect", {"textDocument": {"uri": buf.uri}}
    )
    assert state is not None, "the document has no live covering tree"
    return bytes.fromhex(state.prefix)


async def test_the_window_starts_after_the_byte_and_recovers(session: Session) -> None:
    buf = Buffer(session.client, "untitled:Untitled-1")
    head, tail = "import os\n# a stray ", "\ndef main(argv):\n    path = os.pa"
    buf.type(head + UNCOVERABLE + tail)
    texts = await buf.inline(invoked=True)
    assert texts, "the buffer got no completion"
    assert await live_prefix(session, buf) == tail.encode()

    # delete the byte: the whole window is covered again
    at = len(head)
    buf.replace(at, at + 1, "")
    buf.cursor = len(buf.text)
    assert await buf.inline(invoked=True)
    assert await live_prefix(session, buf) == (head + tail).encode()
    buf.close()


async def test_completions_go_on_after_the_byte_is_typed(session: Session) -> None:
    buf = Buffer(session.client, "file:///tmp/stray_byte.py")
    buf.type("x = 1")
    assert await buf.inline(invoked=True)
    buf.type(UNCOVERABLE)  # the window now ends on the byte: nothing before it to cover
    await buf.inline(invoked=True)  # answers (perhaps empty), never an error
    buf.type("y")
    assert await buf.inline(invoked=True)
    assert await live_prefix(session, buf) == b"y"
    buf.close()
