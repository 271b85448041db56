"""Settings.ignore_eos: fixed-length runs (the sampling benchmark's counterpart of
generate(min_new_tokens=n)) never end at an end-of-text event, in either mode."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from midword.engine.model.fake import FakeModel
from midword.engine.sample.generate import Completer, Settings

ROOT = Path(__file__).resolve().parents[2]
# a prefix that ends where a token ends, so end of text can follow at once in both modes
PREFIX = b"def f(x)"


class EosHeavyModel(FakeModel):
    """A fake model that puts most of its mass on the special token 0 (end of text)."""

    def _logprobs_for_hash(self, h: int) -> np.ndarray:
        logits = super()._logprobs_for_hash(h)
        logits[0] += 8.0
        return logits - np.log(np.exp(logits).sum())


@pytest.fixture(scope="module")
def engine():
    from midword.engine import load_engine

    return load_engine(str(ROOT / "models" / "default"))


@pytest.mark.parametrize("mode", ["pbp", "bytes"])
def test_eos_ends_runs_unless_ignored(engine, mode: str) -> None:
    completer = Completer(EosHeavyModel(engine.tok.size, seed=1), engine)
    base = Settings(mode=mode, max_tokens=12, max_bytes=12, temperature=1.0)
    ended = 0
    for seed in range(8):
        ended += completer.complete(PREFIX, replace(base, seed=seed)).stop_reason == "eos"
        done = completer.complete(PREFIX, replace(base, seed=seed, ignore_eos=True))
        assert done.stop_reason == ("max_bytes" if mode == "bytes" else "max_tokens")
        assert done.tokens == 12 and (mode == "pbp" or len(done.data) == 12)
    assert ended >= 3  # the model does end its text often when allowed to


def test_ignore_eos_keeps_greedy_deterministic(engine) -> None:
    completer = Completer(EosHeavyModel(engine.tok.size, seed=2), engine)
    settings = Settings(max_tokens=6, ignore_eos=True)
    first = completer.complete(b"import o", settings)
    again = completer.complete(b"import o", settings)
    assert first.text == again.text and first.tokens == again.tokens == 6
