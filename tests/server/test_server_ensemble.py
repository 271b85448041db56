"""The server with a configured byte-level ensemble instead of a single model: each open
document keeps one live VCT per member, completions come from the combined distribution
(the same text as the engine's `Ensemble`), proxy tuning with expert = anti-expert gives
the base model's completion, and bad weights are reported, not crashed on."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from midword.engine import load_engine
from midword.engine.sample.ensemble import Ensemble
from midword.engine.sample.generate import Settings
from pytest_lsp import LanguageClient

from midword.testing import tokenizer_path
from midword.testing.tiny_models import build_tiny_llama

from ..lsp_support import CONFIG, Buffer, Session, start
from .test_server_equivalence import as_plain

pytestmark = pytest.mark.asyncio(loop_scope="module")
DEFAULT = Path(__file__).resolve().parents[2] / "models" / "default"
TEXT = "import os\n\ndef list_files(path):\n    return os.li"
BASE = {"device": "cpu", "dtype": "float64", "maxTokens": 12, "timeBudgetMs": 60000}


@pytest.fixture(scope="module")
def llama3_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny random model on the llama3 tokenizer (a different vocabulary from the default)."""
    d = tmp_path_factory.mktemp("tiny-llama3")
    build_tiny_llama(load_engine(str(tokenizer_path("llama3"))).tok.size, d, seed=5, hidden=16)
    shutil.copy(tokenizer_path("llama3"), d / "tokenizer.json")
    return str(d)


@pytest_lsp.fixture(config=CONFIG, scope="module")
async def client(lsp_client: LanguageClient, llama3_dir: str):
    options = {**BASE, "ensemble": [str(DEFAULT), llama3_dir], "ensembleWeights": [0.8, 0.2]}
    session = await start(lsp_client, "visual-studio-code", options)
    await session.wait_state("ready")
    yield
    await lsp_client.shutdown_session()


def engine_text(dirs: list[str], weights: list[float], combine: str) -> str:
    """What the engine's ensemble writes after TEXT (greedy, byte mode, the server's budget)."""
    ens = Ensemble.from_dirs(dirs, weights, combine, device="cpu", dtype="float64")
    settings = Settings(mode="bytes", level="byte", max_tokens=BASE["maxTokens"], seed=0)
    return ens.complete(TEXT.encode(), settings).text


async def reconfigure(session: Session, settings: dict) -> None:
    """Send new settings and wait until the reload they cause is over."""
    seen = len(session.statuses)
    session.client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={**BASE, **settings})
    )
    for _ in range(600):
        if any(s.state in ("loading", "error") for s in session.statuses[seen:]):
            break
        await session.client.protocol.send_request_async("midword/stats", {})
    await session.wait_state("ready", "error")


async def test_each_document_keeps_a_live_tree_per_member(session: Session, llama3_dir) -> None:
    assert " + " in session.statuses[-1].model  # the status names both members
    buf = Buffer(session.client, "untitled:ensemble-live")
    buf.type(TEXT)
    [got] = await buf.inline()
    state = as_plain(
        await session.client.protocol.send_request_async(
            "midword/inspect", {"textDocument": {"uri": buf.uri}}
        )
    )
    assert len(state["members"]) == 2
    for member in state["members"]:
        assert bytes.fromhex(member["prefix"]) == TEXT.encode()
    # two tokenizers, two different segmentations of the same bytes
    assert state["members"][0]["tree"] != state["members"][1]["tree"]
    want = engine_text([str(DEFAULT), llama3_dir], [0.8, 0.2], "mix")
    assert got and want.startswith(got), (got, want)  # the server may cut at the line's end
    buf.close()


async def test_proxy_tuning_with_equal_expert_and_anti_expert_is_the_base(
    session: Session, llama3_dir: str
) -> None:
    dirs = [str(DEFAULT), llama3_dir, llama3_dir]
    await reconfigure(
        session, {"ensemble": dirs, "ensembleWeights": [1, 1, -1], "ensembleCombine": "product"}
    )
    assert session.state == "ready", session.statuses[-1].message
    buf = Buffer(session.client, "untitled:ensemble-proxy", TEXT)
    [got] = await buf.inline()
    base = engine_text([str(DEFAULT)], [1.0], "product")
    assert got and base.startswith(got), (got, base)
    buf.close()


async def test_bad_weights_are_an_error_status_and_empty_answers(
    session: Session, llama3_dir: str
) -> None:
    await reconfigure(session, {"ensemble": [str(DEFAULT), llama3_dir], "ensembleWeights": [1]})
    assert session.state == "error"
    assert "1 weight for 2 models" in session.statuses[-1].message
    buf = Buffer(session.client, "untitled:ensemble-bad", TEXT)
    assert await buf.inline() == []  # answers, empty, and keeps serving
    buf.close()
    await reconfigure(session, {"ensemble": [], "ensembleWeights": []})  # back to one model
    assert session.state == "ready"
    buf = Buffer(session.client, "untitled:ensemble-single", TEXT)
    assert await buf.inline()
    buf.close()
