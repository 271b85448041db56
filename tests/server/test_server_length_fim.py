"""maxLines with fill-in-the-middle and with typing through (issue 38), through the
language server. The model is built to write many lines: a tiny Llama whose output does
not depend on its input (the attention and MLP outputs are zero, every embedding is the
same constant direction) and puts almost all its mass on the token ``()\\n``; its
tokenizer has the ``qwen-spm`` FIM sentinels and its config names the template, so
``fim: auto`` serves it with the text after the cursor in the prompt."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import pytest_lsp
from pytest_lsp import LanguageClient

from midword.testing.vocab import with_special_tokens

from ..lsp_support import CONFIG, Buffer, Session, start

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.asyncio(loop_scope="module")

SOURCE = Path(__file__).resolve().parents[2] / "models" / "default" / "tokenizer.json"
LINE = b"()\n"  # the token the model writes again and again
LOGIT = 20.0  # its logit; every other token's is 0
BEFORE = "def f():\n    return 1\n\n"
AFTER = "\n\nclass G:\n    pass\n"


def build_line_writer(folder: Path) -> Path:
    from midword.engine import load_tokenizer
    from midword.engine.sample.fim import TEMPLATES

    from midword.testing.tiny_models import build_tiny_llama

    template = TEMPLATES["qwen-spm"]
    with_special_tokens(SOURCE, template.tokens, folder / "tokenizer.json")
    tok = load_tokenizer(folder / "tokenizer.json")
    model = build_tiny_llama(tok.size, hidden=16, layers=1, heads=2, seed=0)
    with torch.no_grad():
        for layer in model.model.layers:  # the residual stream stays the embedding
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.model.embed_tokens.weight.zero_()
        model.model.embed_tokens.weight[:, 0] = 1.0
        model.model.norm.weight.zero_()
        model.model.norm.weight[0] = 1.0  # normalized: 4.0 in dimension 0, 0 elsewhere
        model.lm_head.weight.zero_()
        model.lm_head.weight[tok.bytes_to_id[LINE], 0] = LOGIT / 4.0
    model.config.fim_template = template.name
    model.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def line_writer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_line_writer(tmp_path_factory.mktemp("line_writer"))


@pytest_lsp.fixture(config=CONFIG, scope="module")
async def client(lsp_client: LanguageClient, line_writer: Path):
    options = {
        "model": str(line_writer),
        "fim": "auto",
        "multiline": "always",
        "maxTokens": 12,
        "maxItems": 1,
        "debounceMs": 0,
        "timeBudgetMs": 60000,
    }
    session = await start(lsp_client, "visual-studio-code", options)
    await session.wait_state("ready")
    yield
    await lsp_client.shutdown_session()


async def answer(session: Session, max_lines: int, uri: str) -> tuple[Buffer, list[str]]:
    session.configure({"maxLines": max_lines})
    await asyncio.sleep(0.3)  # the configuration notification is applied before the request
    buf = Buffer(session.client, uri, BEFORE + AFTER)
    buf.cursor = len(BEFORE)
    return buf, await buf.inline()


async def test_max_lines_with_fim_and_typing_through(session: Session) -> None:
    assert session.statuses[-1].fim == "qwen-spm"  # the text after the cursor is in the prompt
    buf, [whole] = await answer(session, 0, "file:///tmp/lines_all.py")
    buf.close()
    lines = whole.split("\n")
    assert len(lines) >= 5 and lines[1:5] == ["()"] * 4, whole
    for limit in (1, 2, 3, 4):
        buf, got = await answer(session, limit, f"file:///tmp/lines_{limit}.py")
        want = "\n".join(lines[:limit])
        assert got == ([want] if want.strip() else []), (limit, got)  # "": nothing to show
        shown = got[0] if got else ""
        for typed in range(1, min(len(shown), 8)):  # type it through, one character a time
            buf.type(shown[typed - 1])
            [rest] = await buf.inline()
            assert rest == shown[typed:]  # the shown text's rest, nothing more
            assert rest.count("\n") + 1 <= limit
        buf.close()
