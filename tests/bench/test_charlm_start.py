"""`midword bench charlm --start-token`: which token each choice conditions on, and the
arm with no start token at all."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from midword.engine import load_engine
from midword.engine.model.fake import FakeModel

from midword.bench import charlm
from midword.cli import CommandError

DEFAULT = Path(__file__).resolve().parents[2] / "models" / "default"
TEXT = "import os\n\n\ndef main(argv):\n    return os.path.join(argv[0], 'x')\n" * 3


def cut(at: int) -> dict:
    """A charlm sample of TEXT cut at character ``at``."""
    return {"key": str(at), "file": "a.py", "start": 0, "cut": at, "prefix": TEXT[:at],
            "target": TEXT[at], "after": TEXT[at : at + 64]}  # fmt: skip


@pytest.fixture(scope="module")
def engine():
    return load_engine(str(DEFAULT))


def fake(engine, bos: int | None = 2, eos: int | None = 3) -> FakeModel:
    model = FakeModel(engine.tok.size, seed=1)
    model.bos_token_id, model.eos_token_id = bos, eos
    return model


@pytest.mark.parametrize(
    ("choice", "start"), [("auto", 0), ("bos", 2), ("eos", 3), ("<|fim_prefix|>", 1)]
)
def test_each_choice_conditions_on_its_token(engine, choice: str, start: int) -> None:
    assert engine.tok.added[1].content == "<|fim_prefix|>"
    scorer = charlm.Scorer(fake(engine), engine, start=choice)
    assert scorer.start_id == start and scorer.session.inner.bos_id == start


def test_unknown_choices_are_errors(engine) -> None:
    with pytest.raises(CommandError, match="no such added token"):
        charlm.Scorer(fake(engine), engine, start="<|nope|>")
    with pytest.raises(CommandError, match="no BOS"):
        charlm.Scorer(fake(engine, bos=None), engine, start="bos")


def test_no_start_token_scores_what_has_a_context_and_skips_the_rest(engine) -> None:
    """Without a start the first token has no distribution: a prefix inside the first
    pre-token (an empty trunk) is skipped by every method; a longer one is scored, with
    the same next-byte distribution as a start the model ignores would give after it."""
    scorer = charlm.Scorer(fake(engine), engine, start="none")
    assert scorer.start_id is None and scorer.session.inner.bos_id is None
    head = cut(2)
    assert all(r == {"skipped": True} for r in scorer.score(head).values())
    result = scorer.score(cut(60))
    assert set(result) == set(charlm.METHODS)
    assert np.isfinite(result["bytesampler"]["logprob"])
    records = [{"key": "0", "cut_kind": "other", "methods": scorer.score(head)},
               {"key": "1", "cut_kind": "mid-word", "methods": result}]  # fmt: skip
    summary = charlm.report(records)[1]["methods"]
    assert summary["bytesampler"]["n"] == 1  # the skipped sample is left out everywhere


def test_a_failure_with_a_start_token_is_not_hidden(engine) -> None:
    scorer = charlm.Scorer(fake(engine), engine)
    scorer.session.inner.bos_id = None  # as if the start were lost: the error surfaces
    with pytest.raises(ValueError, match="needs a context"):
        scorer.score(cut(2))
