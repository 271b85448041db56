"""The worker's per-document moves (server/live.py) keep no stale answer.

`FimDocument` remembers its latest move (the prefix asked, the suffix, the prompt used),
so that a request's items and the request's own prepare step do not move the tree and the
fill-in-the-middle context again for the same cursor. Here a document with that memo and
one with it switched off take the same random walk (typing, backspaces, jumps, a suffix
that changes, background syncs, prepares and completions, a context so short that the
prompt is cut): after every step both must hold the same tree, context and cut, and every
completion must be the same text. A memo that answered for a stale prefix, suffix or cut
would part them.
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest
from midword.engine import load_engine
from midword.engine.sample.fim import TEMPLATES, FimCompleter
from midword.engine.sample.generate import Settings
from midword.server.cleanup import _lines_after_first
from midword.server.live import FimDocument, _within

from midword.testing.vocab import with_special_tokens

torch = pytest.importorskip("torch")
from midword.testing.tiny_models import build_tiny_llama  # noqa: E402

SOURCE = Path(__file__).resolve().parents[2] / "models" / "default" / "tokenizer.json"
MAX_CONTEXT = 40  # short: long prefixes are cut to fit (the cut moves as the walk goes)
TEXT = b"def add(a, b):\n    total = a + b\n    return total\n\nclass Box:\n    size = 3\n"
SUFFIXES = [b"", b")\n", b"\nprint(add(1, 2))\n", b"(x)\n    return x\n"]


class UnmemoizedFim(FimDocument):
    """`FimDocument` that moves the tree and the context on every call, as before the memo."""

    def _prompt(self, prefix: bytes) -> bytes:
        self._moved = None
        return super()._prompt(prefix)


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory):
    from midword.engine.model.hf_backend import HFModel

    folder = tmp_path_factory.mktemp("fim_tok")
    path = with_special_tokens(SOURCE, TEMPLATES["qwen"].tokens, folder / "tokenizer.json")
    engine = load_engine(str(path))
    torch.set_num_threads(1)
    model = HFModel(
        build_tiny_llama(engine.tok.size, seed=3, hidden=16, layers=1, heads=2, dtype="float64")
    )
    return engine, model


def _walk(rng: random.Random, steps: int) -> list[tuple[str, bytes, bytes]]:
    """(operation, prefix, suffix) steps: the cursor types on through TEXT, backs up,
    jumps, and now and then the suffix changes."""
    out, cursor, suffix = [], 1, SUFFIXES[0]
    for _ in range(steps):
        move = rng.random()
        if move < 0.6:
            cursor = min(len(TEXT), cursor + 1)
        elif move < 0.75:
            cursor = max(1, cursor - rng.randint(1, 3))
        elif move < 0.85:
            cursor = rng.randint(1, len(TEXT))
        else:
            suffix = rng.choice(SUFFIXES)
        out.append((rng.choice(["prepare", "complete", "sync", "both"]), TEXT[:cursor], suffix))
    return out


def _state(doc: FimDocument) -> tuple:
    sampler = doc.fim.completer.sampler
    return doc.state(), list(doc.fim.session.context), sampler.prefix, bytes(doc.fit.dropped)


def _complete(doc: FimDocument, prefix: bytes, settings: Settings) -> bytes:
    return doc.complete(prefix, settings, should_stop=None, cut=None, deadline=None).data


@pytest.mark.parametrize("template", ["qwen-spm", "qwen"])
def test_remembered_moves_equal_moving_again(parts, template: str) -> None:
    engine, model = parts
    memo = FimDocument(FimCompleter(model, engine, TEMPLATES[template]), MAX_CONTEXT)
    fresh = UnmemoizedFim(FimCompleter(model, engine, TEMPLATES[template]), MAX_CONTEXT)
    settings = Settings(max_tokens=3)
    cut_seen = False
    for number, (operation, prefix, suffix) in enumerate(_walk(random.Random(7), 70)):
        for doc in (memo, fresh):
            doc.set_suffix(suffix)
        if operation in ("prepare", "both"):
            memo.prepare(prefix, "bytesampler")
            fresh.prepare(prefix, "bytesampler")
        if operation == "sync":
            memo.sync(prefix)
            fresh.sync(prefix)
        if operation in ("complete", "both"):
            got = _complete(memo, prefix, settings)
            assert got == _complete(fresh, prefix, settings), (number, prefix, suffix)
            assert got == _complete(memo, prefix, settings)  # an item asked again
        assert _state(memo) == _state(fresh), (number, operation, prefix, suffix)
        cut_seen = cut_seen or bool(memo.fit.dropped)
    assert cut_seen  # the walk reached prompts too long for the context


def test_within_keeps_the_settings_that_fit() -> None:
    settings = Settings(max_tokens=8)
    assert _within(settings, 8) is settings
    assert _within(settings, 100) is settings
    assert _within(settings, 3) == replace(settings, max_tokens=3)


def test_suffix_lines_read_lazily_equal_splitting_the_whole_suffix() -> None:
    """`suffix_repeat_cut` reads the suffix's lines only as far as it needs them: the same
    lines as splitting all of it, over random texts of newlines, blanks and letters."""
    rng = random.Random(11)
    pieces = ["a", "bc", " ", "\t", "\n", "\r\n", "\u2028", "\x0b", "\n\n"]
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(0, 24)))
        count = rng.randrange(0, 5)
        below = [line.strip() for line in text.split("\n")[1:]]
        assert _lines_after_first(text, count) == [x for x in below if x][:count], (text, count)
