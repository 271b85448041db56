"""Pairwise validity equals the brute-force definition, and masks equal pair checks."""

from __future__ import annotations

import random

import numpy as np
from midword.engine import load_engine

from midword.testing import shipped_test_model, tokenizer_path


def _biased_pair(v, ids: np.ndarray, rng: random.Random) -> tuple[int, int]:
    """Half the pairs are chosen so that some merge touches the boundary."""
    a, b = int(rng.choice(ids)), int(rng.choice(ids))
    if rng.random() < 0.5:
        spine = v.right_spine(a)
        x = spine[rng.randrange(len(spine))]
        lo, hi = v.part_ptr[x], v.part_ptr[x + 1]
        if hi > lo:
            p = int(v.part_sym[rng.randrange(lo, hi)])
            owners = v.inv_tok[v.inv_ptr[p] : v.inv_ptr[p + 1]]
            if len(owners):
                b = int(rng.choice(owners))
    return a, b


def test_pairs_match_brute_force(tokenizer_name: str) -> None:
    eng = load_engine(str(tokenizer_path(tokenizer_name)))
    tok, v = eng.tok, eng.validity
    rng = random.Random(7)
    ids = np.flatnonzero(
        tok.reachable & ~np.isin(np.arange(tok.size), list(tok.added_text.values()))
    )
    invalid = 0
    for _ in range(100_000):
        a, b = _biased_pair(v, ids, rng)
        truth = tok._bpe(tok.token_bytes[a] + tok.token_bytes[b]) == (a, b)
        invalid += not truth
        assert v.pair_valid(a, b) == truth, (tok.token_bytes[a], tok.token_bytes[b])
    assert invalid > 1000  # the sample really exercises invalid pairs


def test_equal_rank_ties() -> None:
    eng = load_engine(str(tokenizer_path("gpt35turbo")))
    tok, v = eng.tok, eng.validity
    for run in (b"aaaa", b"aaaaaaa", b"        ", b"====", b"0000"):
        for cut in range(1, len(run)):
            left, right = tok.bytes_to_id.get(run[:cut]), tok.bytes_to_id.get(run[cut:])
            if left is None or right is None:
                continue
            assert v.pair_valid(left, right) == (tok._bpe(run) == (left, right))


def test_masks_equal_pair_checks(tokenizer_name: str) -> None:
    eng = load_engine(str(tokenizer_path(tokenizer_name)))
    tok, v = eng.tok, eng.validity
    rng = random.Random(3)
    ids = np.flatnonzero(tok.reachable)
    for a in rng.sample(list(ids), 15):
        mask = v.successors(int(a))
        for b in rng.sample(list(ids), 300):
            assert mask[b] == v.pair_valid(int(a), int(b))


def test_predecessor_masks_equal_pair_checks(tokenizer_name: str) -> None:
    eng = load_engine(str(tokenizer_path(tokenizer_name)))
    tok, v = eng.tok, eng.validity
    rng = random.Random(4)
    ids = np.flatnonzero(tok.reachable)
    singles = [int(tok.byte_ids[c]) for c in b"a \n"]
    for b in rng.sample(list(ids), 8) + singles:
        mask = v.predecessors(int(b))
        for a in rng.sample(list(ids), 300):
            assert mask[a] == v.pair_valid(int(a), int(b))


def test_remembered_pair_verdicts_equal_fresh_ones(monkeypatch) -> None:
    """The pair memo answers as the trajectories do, also after it fills up and is cleared."""
    from midword.engine.tree import validity

    monkeypatch.setattr(validity, "PAIR_MEMO_SIZE", 64)
    eng = load_engine(str(tokenizer_path("gpt35turbo")))
    v = eng.validity
    rng = random.Random(11)
    ids = np.flatnonzero(eng.tok.reachable)
    pairs = [_biased_pair(v, ids, rng) for _ in range(150)]
    verdicts = set()
    for a, b in pairs + rng.sample(pairs, 100) + pairs[:20]:  # repeats, some after clearing
        fresh = v.pair_valid_uncached(a, b)
        verdicts.add(fresh)
        assert v.pair_valid(a, b) == fresh
        assert len(v._pairs) <= 64
    assert verdicts == {True, False}


def test_whole_successor_masks_equal_pair_checks() -> None:
    """Every entry of the successor masks (found for all of a token's merge partners at
    once) equals the uncached pair check, over the shipped model's whole vocabulary and
    for tokens with long right spines (the most partners) as well as random ones."""
    eng = load_engine(str(shipped_test_model()))
    tok, v = eng.tok, eng.validity
    ids = np.flatnonzero(tok.reachable)
    rng = random.Random(9)
    deep = sorted(ids.tolist(), key=lambda a: -len(v.right_spine(a)))[:15]
    for a in deep + rng.sample(list(ids), 15):
        mask = v._compute_successors(int(a))
        want = [v.pair_valid_uncached(int(a), b) for b in range(tok.size)]
        assert mask.tolist() == want, a
