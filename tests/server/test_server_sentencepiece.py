"""The language server on a SentencePiece model: a tiny random LlamaForCausalLM built with the
llama2 tokenizer (byte fallback, dummy prefix), driven by pytest-lsp as VS Code. It completes
mid-word, keeps its live covering tree on the text before the cursor (without the dummy
prefix's space), and goes on after characters spelled by byte fallback."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import pytest_lsp
from pytest_lsp import LanguageClient

from midword.testing import tokenizer_path

from ..lsp_support import CONFIG, Buffer, Session, start

pytestmark = pytest.mark.asyncio(loop_scope="module")
SPECIAL_TEXT = ("<s>", "</s>", "<unk>")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    from midword.engine import load_engine

    from midword.testing.tiny_models import build_tiny_llama

    folder = tmp_path_factory.mktemp("sentencepiece-server")
    shutil.copy(tokenizer_path("llama2"), folder / "tokenizer.json")
    size = load_engine(str(folder / "tokenizer.json")).tok.size
    build_tiny_llama(size, dir=folder, seed=5, hidden=16, layers=1, bos_token_id=1, eos_token_id=2)
    return folder


@pytest_lsp.fixture(config=CONFIG, scope="module")
async def client(lsp_client: LanguageClient, model_dir: Path):
    options = {"model": str(model_dir), "device": "cpu", "maxTokens": 4, "maxItems": 2}
    session = await start(lsp_client, "visual-studio-code", options)
    await session.wait_state("ready")
    yield
    await lsp_client.shutdown_session()


async def inspect(session: Session, buf: Buffer) -> tuple[bytes, dict]:
    state = await session.client.protocol.send_request_async(
        "midword/inspect", {"textDocument": {"uri": buf.uri}}
    )
    assert state is not None, "the document has no live covering tree"
    return bytes.fromhex(state.prefix), state.tree


def check_text(text: str) -> None:
    assert text, "an empty completion"
    assert not any(s in text for s in SPECIAL_TEXT), text


async def test_completes_mid_word(session: Session) -> None:
    buf = Buffer(session.client, "untitled:Untitled-1")
    head = "import argparse\n\n\ndef main(argv):\n    parser = argparse.ArgumentPar"
    buf.type(head)
    texts = await buf.inline(invoked=True)
    assert texts, "no completion mid-word"
    for text in texts:
        check_text(text)
    prefix, _ = await inspect(session, buf)
    assert head.encode().endswith(prefix) and prefix.endswith(b"ArgumentPar")
    buf.close()


async def test_goes_on_after_byte_fallback_characters(session: Session) -> None:
    """'𝔘' is not in the vocabulary: four <0xNN> tokens, a boundary no merge crosses."""
    buf = Buffer(session.client, "file:///tmp/fallback.py")
    buf.type("name = '𝔘 ok'\nprint(name.upp")
    texts = await buf.inline(invoked=True)
    assert texts
    for text in texts:
        check_text(text)
    prefix, _ = await inspect(session, buf)
    assert prefix.endswith(b"name.upp")
    buf.close()
