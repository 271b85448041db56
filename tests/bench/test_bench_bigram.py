"""The bigram stand-in model of the inference-token benchmark (midword.testing.bigram):
counts, normalization, and its tree session against the model's own rows (the lazy
solve's counts rest on them)."""

from __future__ import annotations

import numpy as np
from midword.engine import load_engine
from midword.engine.sample.generate import Completer, Settings

from midword.testing import shipped_test_model
from midword.testing.bigram import BigramModel


def test_rows_follow_the_counts_and_sum_to_one() -> None:
    docs = [[1, 2, 1, 2, 1, 3], [2, 2]]
    model = BigramModel(6, docs, start_id=0, smoothing=0.5)
    unigram = np.bincount([0, 1, 2, 1, 2, 1, 3, 0, 2, 2], minlength=6) + 0.5
    unigram = unigram / unigram.sum()
    for prev, follows in {1: {2: 2, 3: 1}, 2: {1: 2, 2: 1}, 5: {}}.items():
        row = np.exp(model.row(prev))
        total = sum(follows.values())
        expected = 0.5 * unigram
        for t, c in follows.items():
            expected[t] += c
        assert np.allclose(row, expected / (total + 0.5))
        assert abs(row.sum() - 1) < 1e-12


def test_session_rows_are_the_rows_of_each_paths_last_token() -> None:
    model = BigramModel(40, [list(range(1, 40)) * 3], start_id=0)
    session = model.session(bos_id=0)
    paths = [(), (5,), (5, 6), (7,)]
    rows = session.logprobs([3, 4], paths)
    for path, row in zip(paths, rows, strict=True):
        assert np.array_equal(row, model.row(([0, 3, 4] + list(path))[-1]))
    assert session.cache_len() == session.expected_cache_len() == 3 + 3


def test_a_completion_runs_on_the_bigram_model() -> None:
    engine = load_engine(str(shipped_test_model()))
    docs = [engine.tok.encode("def main():\n    return 0\n" * 20)]
    model = BigramModel(engine.tok.size, docs, start_id=0)
    out = Completer(model, engine).complete(b"def ma", Settings(max_tokens=3))
    assert out.text.startswith("in")  # the only word the counts know
