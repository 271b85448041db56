"""Completions guided by the editor's names (issue 39), end to end: a client puts the names
its other language servers offer at the cursor in ``midwordCandidates`` of an inline or a
plain completion request; the completion then starts with the one the model likes best,
by the engine's exact scores of the same prompt in a fresh sampler."""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from midword.engine import ByteSampler, load_engine, load_hf_model, score_continuations
from pygls.exceptions import JsonRpcException
from pytest_lsp import ClientServerConfig, LanguageClient

from ..lsp_support import (
    SERVER_COMMAND,
    Buffer,
    Session,
    send_json,
    start,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

MODEL_DIR = "models/default"
OPTIONS = {
    "dtype": "float64",
    "device": "cpu",
    "fim": "off",
    "contextFiles": "off",
    "temperature": 0,
    "maxTokens": 6,
    "debounceMs": 0,
    "symbolsMinMass": 0,  # made-up names hold little probability: guide whatever they hold
}
TEXT = "import os\n\n\nclass Store:\n    def load(self, obj):\n        return obj.zq"
NAMES = ["zqxMember", "zqyOther", "zzNotExtending"]  # made up: the model never saw them


LOG = Path(tempfile.mkdtemp(prefix="midword-guided-")) / "acceptance.jsonl"
CONFIG = ClientServerConfig(
    server_command=SERVER_COMMAND,
    server_env={**os.environ, "MIDWORD_ACCEPTANCE_LOG": str(LOG)},
)


@pytest_lsp.fixture(config=CONFIG, scope="module")
async def client(lsp_client: LanguageClient):
    session = await start(lsp_client, "visual-studio-code", OPTIONS, events=True)
    await session.wait_state("ready")
    yield
    await lsp_client.shutdown_session()


def cursor(text: str) -> dict[str, int]:
    return {"line": text.count("\n"), "character": len(text.split("\n")[-1])}


async def inline_items(session: Session, uri: str, before: str, names: Any) -> list[Any]:
    """An automatic inline request at the end of ``before`` with ``midwordCandidates``
    (what pytest-lsp's typed params cannot carry), sent as the JSON an editor sends."""
    params = {
        "textDocument": {"uri": uri},
        "position": cursor(before),
        "context": {"triggerKind": 2},
        "midwordCandidates": names,
    }
    result = await send_json(session.client, "textDocument/inlineCompletion", params)
    return result.items if hasattr(result, "items") else result or []


async def ask_inline(session: Session, buf: Buffer, names: Any) -> list[str]:
    """The texts of `inline_items` at the end of the buffer."""
    return [item.insert_text for item in await inline_items(session, buf.uri, buf.text, names)]


def best_rest(names: list[str], typed: str) -> str:
    """The rest of the likeliest name that extends ``typed``, by the engine's exact
    scores (the name ending after it) in a fresh sampler on the same prompt."""
    model = load_hf_model(MODEL_DIR, device="cpu", dtype="float64")
    sampler = ByteSampler(model, load_engine(MODEL_DIR))
    rests = [n[len(typed) :] for n in names if n.startswith(typed)]
    scores = score_continuations(sampler, TEXT.encode(), [r.encode() for r in rests], "identifier")
    logprobs = [-math.inf if s.logprob is None else s.logprob for s in scores]
    return rests[max(range(len(rests)), key=logprobs.__getitem__)]


async def test_the_inline_item_starts_with_the_likeliest_name(session: Session) -> None:
    buf = Buffer(session.client, "file:///tmp/guided_inline.py", TEXT)
    unguided = await buf.inline()
    guided = await ask_inline(session, buf, NAMES)
    rest = best_rest(NAMES, "zq")
    assert guided and guided[0].startswith(rest)
    # the unguided model would not invent either name: the guidance made the difference
    assert not any(u.startswith(("xMember", "yOther")) for u in unguided)
    buf.close()


async def test_names_that_do_not_extend_the_word_leave_it_unguided(session: Session) -> None:
    buf = Buffer(session.client, "file:///tmp/guided_none.py", TEXT)
    unguided = await buf.inline()
    assert await ask_inline(session, buf, ["zzNotExtending", "other"]) == unguided
    assert await ask_inline(session, buf, []) == unguided
    buf.close()


async def test_the_completion_list_takes_names_too(session: Session) -> None:
    buf = Buffer(session.client, "file:///tmp/guided_list.py", TEXT)
    params = {"textDocument": {"uri": buf.uri}, "position": cursor(TEXT)}
    params = {**params, "midwordCandidates": NAMES}
    result = await send_json(session.client, "textDocument/completion", params)
    labels = [item.label for item in result.items]
    assert labels and labels[0] == "zq" + best_rest(NAMES, "zq")
    buf.close()


async def test_guided_items_are_tagged_for_the_acceptance_log(session: Session) -> None:
    buf = Buffer(session.client, "file:///tmp/guided_tags.py", TEXT)
    items = await inline_items(session, buf.uri, TEXT, NAMES)
    assert items[0].command.arguments[0]["method"] == "bytesampler+symbols"
    plain = await buf.inline()  # the unguided item of the same place is not tagged so
    assert plain
    buf.close()


async def test_names_the_model_gives_too_little_probability_are_left_out(
    session: Session,
) -> None:
    buf = Buffer(session.client, "file:///tmp/guided_mass.py", TEXT)
    guided = await ask_inline(session, buf, NAMES)
    session.configure({**OPTIONS, "symbolsMinMass": 0.05})  # more than the made-up names hold
    try:
        unguided = await buf.inline()
        assert await ask_inline(session, buf, NAMES) == unguided != guided
    finally:
        session.configure(OPTIONS)
    buf.close()


async def test_a_fill_in_the_middle_prompt_is_guided_too(session: Session) -> None:
    """The shipped model has FIM tokens: with the text after the cursor in the prompt,
    the middle still starts with the likeliest of the names."""
    session.statuses.clear()
    session.configure({**OPTIONS, "fim": "auto"})  # reloads the model with its template
    await session.wait_state("ready")
    try:
        buf = Buffer(session.client, "file:///tmp/guided_fim.py", TEXT + "\n\nx = 1\n")
        unguided = await buf.inline(index=len(TEXT))  # the text below is the suffix
        guided = [i.insert_text for i in await inline_items(session, buf.uri, TEXT, NAMES)]
        assert guided and guided[0].startswith(("xMember", "yOther"))
        assert not any(u.startswith(("xMember", "yOther")) for u in unguided)
        buf.close()
    finally:
        session.statuses.clear()
        session.configure(OPTIONS)
        await session.wait_state("ready")


async def test_malformed_names_are_an_error_not_a_crash(session: Session) -> None:
    buf = Buffer(session.client, "file:///tmp/guided_bad.py", TEXT)
    with pytest.raises(JsonRpcException, match="midwordCandidates"):
        await ask_inline(session, buf, "zqxMember")
    with pytest.raises(JsonRpcException, match="midwordCandidates"):
        await ask_inline(session, buf, [1, 2])
    assert await ask_inline(session, buf, NAMES)  # still up
    buf.close()
