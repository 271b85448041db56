"""The confidence cut (issue 38, engine/sample/confidence.py) against brute force: on a
tiny random model, each step's log-probability comes from fresh forward passes over the
whole token sequence and the leaf's share from the brute-force covering tree (no tree,
no KV cache), and the cut point from every byte position checked one by one."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from midword.engine import (
    AUTO_MIN_CONFIDENCE,
    Completer,
    Settings,
    confidence_cut,
    load_engine,
    min_logprob,
)

from midword.testing import real_encoder

from ..lm_oracle import LMOracle, _lse
from ..oracle import brute_force_tree

torch = pytest.importorskip("torch")
from midword.testing.tiny_models import build_tiny_llama  # noqa: E402

DEFAULT = Path(__file__).resolve().parents[2] / "models" / "default"
TOL = 1e-6
SPLITS_A_WORD = re.compile(rb"[A-Za-z0-9_\x80-\xff]{2}")


@pytest.fixture(scope="module")
def setup():
    from midword.engine.model.hf_backend import HFModel

    engine = load_engine(str(DEFAULT))
    torch.set_num_threads(1)
    tiny = build_tiny_llama(engine.tok.size, seed=11, hidden=16, layers=1, heads=2, dtype="float64")
    model = HFModel(tiny)
    completer = Completer(model, engine)
    oracle = LMOracle(
        model, real_encoder(DEFAULT / "tokenizer.json"), engine.tok, completer.start_id
    )
    return engine, completer, oracle


def brute_force_steps(oracle: LMOracle, engine, prefix: bytes, data: bytes, first_end: int):
    """[(end byte, log-prob)] of the leaf whose text is ``data[:first_end]`` (its share of
    all leaves, by brute force) and of greedy tokens after it from fresh forward passes."""
    tok = engine.tok
    specials = list(tok.special_ids)
    ordinary = [t for t in range(tok.size) if t not in set(specials)]
    # after a node that ends exactly at the prefix, every ordinary token is tried
    seqs = brute_force_tree(oracle.hf, tok, prefix, ordinary, oracle._canonical)
    weights = {}
    for seq in seqs:
        lp = oracle.seq_logprob(seq)
        if tok.decode(seq) == prefix:  # ends exactly at the prefix: an end-of-text leaf
            row = oracle.rows(seq)[-1]
            lp += _lse([float(row[i]) for i in specials])
        weights[seq] = lp
    total = _lse(list(weights.values()))
    want = prefix + data[:first_end]
    leaf = max((s for s in seqs if tok.decode(s) == want), key=lambda s: weights[s])
    steps = [(first_end, weights[leaf] - total)]
    context, end = list(leaf), first_end
    while end < len(data):
        row = oracle.rows(tuple(context))[-1]
        t = int(np.argmax(row))
        end += len(tok.token_bytes[t])
        steps.append((min(end, len(data)), float(row[t])))
        context.append(t)
    return steps


def brute_force_cut(data: bytes, steps: list[tuple[int, float]], threshold: float) -> int:
    """The largest byte position whose confidence is >= threshold and that does not split
    a word, then whitespace dropped: every position tried."""

    def confidence(p: int) -> float:
        total = 0.0
        for end, lp in steps:
            if end >= p and p == 0:
                return 0.0
            total += lp
            if end >= p:
                return total
        raise AssertionError("a position past the steps")

    fine = [
        p
        for p in range(len(data) + 1)
        if confidence(p) >= threshold
        and not SPLITS_A_WORD.fullmatch(data[p - 1 : p + 1] if p else b"")
    ]
    best = max(fine)
    return best if best == len(data) else len(data[:best].rstrip(b" \t\r\n"))


@pytest.mark.parametrize("prefix", [b"def pri", b"x = 1", b"    self.assertEq"])
def test_the_cut_point_equals_brute_force(setup, prefix: bytes) -> None:
    engine, completer, oracle = setup
    out = completer.complete(prefix, Settings(max_tokens=8, solve="tree"))
    assert out.spans and out.spans[-1][0] == len(out.data)
    steps = brute_force_steps(oracle, engine, prefix, out.data, out.spans[0][0])
    assert [end for end, _ in out.spans] == [end for end, _ in steps]
    assert np.allclose([lp for _, lp in out.spans], [lp for _, lp in steps], atol=TOL)
    totals = np.cumsum([lp for _, lp in steps])
    thresholds = [-math.inf, 0.0, *(totals - 1e-4), *(totals + 1e-4)]
    cuts = set()
    for threshold in thresholds:
        got = confidence_cut(out.data, out.spans, float(threshold))
        assert got == brute_force_cut(out.data, steps, float(threshold)), (out.data, threshold)
        cuts.add(got)
    assert len(cuts) >= 2  # the thresholds do move the cut


def test_stopping_early_gives_the_same_cut(setup) -> None:
    """Settings.min_logprob stops generating once the completion falls below it; the cut
    of what was made is the cut of the whole completion."""
    _, completer, _ = setup
    whole = completer.complete(b"def pri", Settings(max_tokens=8, solve="tree"))
    totals = np.cumsum([lp for _, lp in whole.spans])
    for threshold in totals[:-2] - 1e-4:  # step i + 1 < the last one falls below
        early = completer.complete(
            b"def pri", Settings(max_tokens=8, solve="tree", min_logprob=float(threshold))
        )
        assert early.stop_reason == "confidence" and whole.data.startswith(early.data)
        assert len(early.data) < len(whole.data)
        cut = confidence_cut(early.data, early.spans, float(threshold))
        assert cut == confidence_cut(whole.data, whole.spans, float(threshold))


def test_unknown_steps_mean_no_cut_and_the_threshold_of_an_option() -> None:
    assert confidence_cut(b"foo bar", [(3, None), (7, -9.0)], -1.0) == 7
    assert confidence_cut(b"foo bar", [(3, -0.1), (7, -9.0)], -1.0) == 3
    assert confidence_cut(b"foo bar", [(3, -2.0), (7, -9.0)], -1.0) == 0
    assert confidence_cut("été fini".encode(), [(2, -0.1), (10, -5.0)], -1.0) == 0  # é is a word
    assert min_logprob(0) == -math.inf and min_logprob(0.5) == math.log(0.5)
    assert min_logprob("auto") == math.log(AUTO_MIN_CONFIDENCE) == math.log(0.2)
