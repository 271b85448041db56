"""``midword/score`` end to end: a client asks, at a cursor inside an identifier, for the
exact log-probabilities of candidate continuations (what an editor's other completion
providers offer); the server answers from the document's live covering tree and KV cache,
and the answer equals the engine's own scores of the same prompt in a fresh sampler."""

from __future__ import annotations

import math

import pytest
import pytest_lsp
from midword.engine import ByteSampler, load_engine, load_hf_model, score_continuations
from pygls.exceptions import JsonRpcException
from pytest_lsp import LanguageClient

from ..lsp_support import CONFIG, Buffer, Session, start

pytestmark = pytest.mark.asyncio(loop_scope="module")

MODEL_DIR = "models/default"
OPTIONS = {"dtype": "float64", "device": "cpu", "fim": "off", "contextFiles": "off"}
TEXT = (
    "import unittest\n\n\nclass T(unittest.TestCase):\n    def test(self):\n        self.assertEq"
)
CANDIDATES = ["ual", "ualsAny", "ual(", "xyz", "u"]


@pytest_lsp.fixture(config=CONFIG, scope="module")
async def client(lsp_client: LanguageClient):
    session = await start(lsp_client, "visual-studio-code", OPTIONS)
    await session.wait_state("ready")
    yield
    await lsp_client.shutdown_session()


async def ask(session: Session, buf: Buffer, candidates: list[str], end: str) -> object:
    line = buf.text.count("\n")
    character = len(buf.text.split("\n")[-1])
    return await session.client.protocol.send_request_async(
        "midword/score",
        {
            "textDocument": {"uri": buf.uri},
            "position": {"line": line, "character": character},
            "candidates": candidates,
            "end": end,
        },
    )


def engine_scores(candidates: list[str], end: str) -> list[float]:
    model = load_hf_model(MODEL_DIR, device="cpu", dtype="float64")
    sampler = ByteSampler(model, load_engine(MODEL_DIR))
    texts = [c.encode() for c in candidates]
    return [s.logprob for s in score_continuations(sampler, TEXT.encode(), texts, end)]


@pytest.mark.parametrize("end", ["identifier", "none"])
async def test_scores_equal_the_engine(session: Session, end: str) -> None:
    buf = Buffer(session.client, f"file:///tmp/score_{end}.py", TEXT)
    await buf.inline()  # a live tree at the cursor, as an editor has one by now
    answer = await ask(session, buf, CANDIDATES, end)
    expected = engine_scores(CANDIDATES, end)
    got = [-math.inf if lp is None else lp for lp in answer.logprobs]
    assert got == pytest.approx(expected, abs=1e-9)
    assert answer.version == buf.version
    assert got[0] > got[3]  # the real name beats a made-up one
    if end == "none":  # "u" is a prefix of "ual": at least as likely
        assert got[4] >= got[0]
    buf.close()


async def test_bad_requests_are_errors_not_crashes(session: Session) -> None:
    buf = Buffer(session.client, "file:///tmp/score_bad.py", TEXT)
    with pytest.raises(JsonRpcException, match="end must be"):
        await ask(session, buf, ["ual"], "sentence")
    with pytest.raises(JsonRpcException, match="not open"):
        await session.client.protocol.send_request_async(
            "midword/score",
            {
                "textDocument": {"uri": "file:///tmp/never.py"},
                "position": {"line": 0, "character": 0},
                "candidates": ["x"],
            },
        )
    answer = await ask(session, buf, ["ual"], "identifier")  # the server is still up
    assert answer.logprobs[0] is not None
    buf.close()
