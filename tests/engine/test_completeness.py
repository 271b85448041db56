"""Completeness at scale (issue 2): real encodings of 1 MB of random texts per
tokenizer, cut at random points, are paths of the trees built by streaming them byte
by byte, and the streamed trunk is the matching prefix (the harness is
``midword/testing/completeness.py``; ``benchmarks/bench_completeness.py`` runs 10 MB
and more)."""

from __future__ import annotations

import pytest
from midword.engine import VCT, load_engine

from midword.testing import real_encoder, tokenizer_path
from midword.testing.completeness import canonical_cut, covers, is_path, run, self_check

MEGABYTE = 1 << 20


@pytest.mark.slow  # a minute or more per tokenizer on a 2-core machine
def test_streamed_trees_cover_real_encodings(tokenizer_name: str) -> None:
    report = run(tokenizer_name, MEGABYTE, seed=0)
    assert report.bytes_streamed >= MEGABYTE
    assert report.skipped == 0, report.summary()  # every fragment decodes back to itself
    assert report.cuts > 1.5 * report.fragments and report.tree_cuts > 0, report.summary()
    assert report.mismatches == 0, report.summary()


def test_wrong_paths_are_reported(tokenizer_name: str) -> None:
    """The check can fail: leaves swapped for tokens with the right bytes that the whole
    tree does not hold, or a changed first token, are mismatches; other leaves the whole
    tree holds pass the one-path check."""
    out = self_check(tokenizer_name, cuts=15)
    assert out.wrong_leaves >= 15 and out.wrong > out.wrong_leaves
    assert out.wrong_reported == out.wrong, out
    assert out.right > 0 and out.right_accepted == out.right, out


ADDED_TEXT_CASES = [
    ("qwen3", "<think>"),  # the whole added text typed
    ("qwen3", "_<think>x"),  # starting inside a pre-token ('_<' alone would be one)
    ("qwen3", "a<think>b</think>\n<thinking"),  # two matches, then a near miss
    ("qwen3", "<tool_call>\n{ 'x': 1}</tool_call>"),
    ("deepseek_v3", "x <｜User｜>"),  # a multi-byte added text after a space
    ("deepseek_v3", "  <｜Assistant｜>def f(): <｜fim▁hole｜>"),
]


@pytest.mark.parametrize(("name", "text"), ADDED_TEXT_CASES)
def test_added_text_in_the_prefix(name: str, text: str) -> None:
    """Non-special added text is matched before pre-tokenization: at every cut, typed
    whole or in part, the real encoding is a path of the streamed tree."""
    path = tokenizer_path(name)
    engine, hf = load_engine(str(path)), real_encoder(path)
    data = text.encode()
    ids = hf.encode(text, add_special_tokens=False).ids
    assert any(t in engine.tok.added_text.values() for t in ids)  # the case is real
    vct = VCT(engine)
    for k in range(1, len(data) + 1):
        vct.push(data[k - 1])
        expected = canonical_cut(ids, engine.tok, k)
        assert covers(vct, expected), (k, data[:k])
        assert is_path(vct.tree(), expected), (k, data[:k])
