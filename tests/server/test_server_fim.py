"""Fill-in-the-middle through the language server: a completion that uses a name defined
only below the cursor. The model is trained here, in seconds on the CPU, to copy a name
from the suffix of prompts in the ``qwen-spm`` layout (its config.json names the
template, so ``fim: auto`` finds it); with ``fim: off`` the same model cannot know the
name, and the same assertion fails (the ``off`` run checks that it does)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from pytest_lsp import LanguageClient

from midword.testing.vocab import with_special_tokens

from ..lsp_support import CONFIG, Buffer, Session, start

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.asyncio(loop_scope="module")

SOURCE = Path(__file__).resolve().parents[2] / "models" / "default" / "tokenizer.json"
PREFIX = "result = "
STEPS = 150
NAME_COUNT = 12


def single_token_names(tok, count: int) -> list[str]:
    """Lowercase words that are one token after a space (copying one is one attention
    step), not keywords and not in the document's own text; the first ``count`` by id."""
    import keyword

    taken = document("")
    found = []
    for data in tok.token_bytes:
        word = data[1:].decode("utf-8", "replace") if data and data[:1] == b" " else ""
        wordlike = 5 <= len(word) <= 9 and word.isalpha() and word.islower()
        if wordlike and not keyword.iskeyword(word) and word not in taken:
            found.append(word)
    assert len(found) >= count, found
    return found[:count]


def document(name: str) -> str:
    """The prefix, then the suffix that alone says which name the prefix wants."""
    return f"{PREFIX}\n\ndef {name}():\n    return 1\n"


def train_copy_model(folder: Path) -> tuple[Path, list[str]]:
    """A tiny Llama (float32, CPU) trained on FIM examples in the qwen-spm layout whose
    middle is the name the suffix defines; saved with its tokenizer and template name.
    Returns the folder and the names."""
    from midword.engine import load_tokenizer
    from midword.engine.sample.fim import TEMPLATES

    from midword.testing.tiny_models import build_tiny_llama

    template = TEMPLATES["qwen-spm"]
    with_special_tokens(SOURCE, template.tokens, folder / "tokenizer.json")
    tok = load_tokenizer(folder / "tokenizer.json")
    end = tok.special_ids[0]
    names = single_token_names(tok, NAME_COUNT)
    model = build_tiny_llama(tok.size, hidden=64, layers=2, heads=4, seed=0)
    model.config.fim_template = template.name  # what `fim: auto` reads from config.json
    rng = random.Random(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model.train()
        for _ in range(STEPS):
            batch = [_example(template, tok, rng.choice(names), end) for _ in range(16)]
            loss = _batch_loss(model, batch, end)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    finally:
        torch.set_num_threads(threads)
    model.eval()
    model.save_pretrained(str(folder))
    return folder, names


def _example(template, tok, name: str, end: int) -> tuple[list[int], list[int]]:
    """(input ids, labels): the loss is on the middle and the end token only."""
    suffix = document(name)[len(PREFIX) :]
    context = template.prompt(tok, PREFIX.encode(), suffix.encode()).context
    ids = [end, *template.training_tokens(tok, PREFIX, f"{name}()", suffix, end)]
    scored = 1 + len(context)
    return ids, [-100] * scored + ids[scored:]


def _batch_loss(model, batch: list[tuple[list[int], list[int]]], pad: int):
    width = max(len(ids) for ids, _ in batch)
    ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids, _ in batch])
    labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in batch])
    return model(input_ids=ids, labels=labels).loss


@pytest.fixture(scope="module")
def copy_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    return train_copy_model(tmp_path_factory.mktemp("fim_copy_model"))


@pytest_lsp.fixture(config=CONFIG, scope="module", params=["auto", "off"])
async def client(request: pytest.FixtureRequest, lsp_client: LanguageClient, copy_model):
    folder, names = copy_model
    options = {"model": str(folder), "fim": request.param, "maxItems": 1, "maxTokens": 6}
    session = await start(lsp_client, "visual-studio-code", options)
    session.fim_setting = request.param  # type: ignore[attr-defined]
    session.names = names  # type: ignore[attr-defined]
    await session.wait_state("ready")
    yield
    await lsp_client.shutdown_session()


async def completions_for_names(session: Session) -> dict[str, str]:
    """Name -> the inline completion at the end of ``PREFIX`` in a buffer defining it below."""
    found: dict[str, str] = {}
    for k, name in enumerate(session.names[:4]):  # type: ignore[attr-defined]
        buf = Buffer(session.client, f"file:///tmp/fim_{k}.py", document(name))
        buf.cursor = len(PREFIX)
        items = await buf.inline(invoked=True)
        found[name] = items[0] if items else ""
        buf.close()
    return found


async def test_status_names_the_template_or_off(session: Session) -> None:
    expected = "qwen-spm" if session.fim_setting == "auto" else "off"  # type: ignore[attr-defined]
    assert getattr(session.statuses[-1], "fim", None) == expected


async def test_completion_uses_a_name_defined_only_below_the_cursor(session: Session) -> None:
    found = await completions_for_names(session)
    right = [name for name, text in found.items() if text.startswith(name)]
    if session.fim_setting == "auto":  # type: ignore[attr-defined]
        assert len(right) >= 3, found
    else:  # prefix-only: the same text whatever is below, so it names at most one of them
        assert len(set(found.values())) == 1, found
        assert len(right) <= 1, found


async def test_typing_keeps_the_suffix_and_the_cache(session: Session) -> None:
    """Background syncs while typing keep the suffix of the last request (the text after
    the cursor does not change); the answer after typing a space and deleting it again
    is the answer before."""
    name = session.names[5]  # type: ignore[attr-defined]
    buf = Buffer(session.client, "file:///tmp/fim_typing.py", document(name))
    buf.cursor = len(PREFIX)
    [before] = await buf.inline(invoked=True)
    buf.type(" ")
    buf.backspace()
    [after] = await buf.inline(invoked=True)
    assert after == before
    if session.fim_setting == "auto":  # type: ignore[attr-defined]
        assert before.startswith(name), (name, before)
    buf.close()


async def inspect(session: Session, uri: str) -> Any:
    return await session.client.protocol.send_request_async(
        "midword/inspect", {"textDocument": {"uri": uri}}
    )


def field(obj: Any, name: str) -> Any:
    """A field of a custom request's result (pygls gives a namedtuple-like object)."""
    return obj[name] if isinstance(obj, dict) else getattr(obj, name)


async def test_a_background_sync_takes_the_suffix_at_the_edit(session: Session) -> None:
    """An edit elsewhere in the buffer moves the cursor: the background sync that follows
    prefills the prompt with the text after *that* edit, not the last request's suffix."""
    name = session.names[6]  # type: ignore[attr-defined]
    buf = Buffer(session.client, "file:///tmp/fim_sync.py", document(name))
    buf.cursor = len(PREFIX)
    await buf.inline(invoked=True)  # the document is live, its suffix the def below
    buf.cursor = len(buf.text)  # the end of the buffer: nothing after the cursor
    buf.type("x")
    state = await inspect(session, buf.uri)
    assert bytes.fromhex(field(state, "prefix")).endswith(b"return 1\nx")
    if session.fim_setting == "auto":  # type: ignore[attr-defined]
        assert field(state, "suffix") == ""  # was the def below the first cursor
        buf.cursor = len(PREFIX)  # back above the def
        buf.type(" ")
        state = await inspect(session, buf.uri)
        assert name.encode() in bytes.fromhex(field(state, "suffix"))
    buf.close()
