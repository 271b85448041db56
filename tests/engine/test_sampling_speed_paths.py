"""The per-keystroke fast paths of engine/sample/sampling.py give, bit for bit, what the plain
computations give (tests/engine/test_sampling.py checks the values against brute force)."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from midword.engine import load_engine
from midword.engine.model.fake import FakeModel
from midword.engine.sample.sampling import (
    ByteSampler,
    LeafSet,
    _common_len,
    _node_scores,
    _ScoredTree,
)
from midword.engine.sample.transform import Transform, logsumexp

ROOT = Path(__file__).resolve().parents[2]
PREFIXES = [
    b"def f(x",
    b"def f(x):\n    ret",
    b"    ",
    b"        ",
    b"self.assertEq",
    b" we'v",
    b"x = 12",
    b"import o",
    b"",
    "中文".encode()[:4],
    "😀".encode()[:2],
    b"\t\t",
    b"a  b",
    b"print('hello, wor",
]
TRANSFORMS = [Transform(), Transform(0.8), Transform(1.0, top_k=50), Transform(0.0)]


@pytest.fixture(scope="module")
def engine():
    return load_engine(str(ROOT / "models" / "default"))


@pytest.fixture(scope="module")
def sampler(engine) -> ByteSampler:
    return ByteSampler(FakeModel(engine.tok.size, seed=5, scale=1.0), engine, track_prefix=False)


def plain_leaf_set(sc: _ScoredTree, special: np.ndarray) -> LeafSet:
    """The leaf set as first written: one full / asarray / fancy-index add per run."""
    nodes, tokens, weights = [], [], []
    for i, node in enumerate(sc.tree.nodes):
        ends = [node.leaves]
        if node.path == sc.tree.complete and special.size:
            ends.append(special)
        for toks in ends:
            nodes.append(np.full(toks.size, i, dtype=np.int64))
            tokens.append(np.asarray(toks, dtype=np.int64))
            weights.append(sc.node_lp[i] + sc.rows[i][toks])
    return LeafSet(sc.tree, np.concatenate(nodes), np.concatenate(tokens), np.concatenate(weights))


def plain_node_scores(
    paths: list[tuple[int, ...]], rows, rest: int, token_bytes: list[bytes]
) -> tuple[np.ndarray, list[int]]:
    """Each node on its own: its path's log-probs summed from the root (in path order, as
    the parent-first recursion adds them), its bytes measured by joining its tokens."""
    index = {p: i for i, p in enumerate(paths)}
    node_lp = np.zeros(len(paths))
    for i, path in enumerate(paths):
        total = 0.0
        for j, token in enumerate(path):
            total = total + float(rows[index[path[:j]]][token])
        node_lp[i] = total
    offsets = [rest - len(b"".join(token_bytes[t] for t in path)) for path in paths]
    return node_lp, offsets


def plain_logsumexp(values: np.ndarray) -> float:
    if values.size == 0:
        return float("-inf")
    top = float(np.max(values))
    if top == float("-inf"):
        return float("-inf")
    return top + float(np.log(np.sum(np.exp(values - top))))


def _assert_same_leaves(got: LeafSet, want: LeafSet) -> None:
    """The same leaves, the weights bit for bit; nodes and token ids in int32 (half the
    memory of the plain int64 ones: the values are the same)."""
    assert got.node.dtype == got.token.dtype == np.int32
    assert got.weights.dtype == want.weights.dtype
    for field in ("node", "token", "weights"):
        np.testing.assert_array_equal(getattr(got, field), getattr(want, field), err_msg=field)


@pytest.mark.parametrize("prefix", PREFIXES)
def test_leaf_set_is_the_plain_one(sampler: ByteSampler, prefix: bytes) -> None:
    sampler.reset(prefix)
    for transform in TRANSFORMS:
        sc = sampler._score(transform)
        _assert_same_leaves(sampler.leaf_set(transform), plain_leaf_set(sc, sampler._special))


def test_leaf_set_of_float32_rows_is_the_plain_one(engine) -> None:
    """Rows a model hands out in float32 are widened before the node log-prob is added,
    as numpy does for ``float64 scalar + float32 array``."""
    sampler = ByteSampler(FakeModel(engine.tok.size, seed=2), engine, track_prefix=False)
    plain_rows = sampler._rows
    sampler._rows = lambda trunk, paths: [r.astype(np.float32) for r in plain_rows(trunk, paths)]
    for prefix in PREFIXES:
        sampler.reset(prefix)
        sc = sampler._score()
        got = sampler.leaf_set()
        assert got.weights.dtype == np.float64
        _assert_same_leaves(got, plain_leaf_set(sc, sampler._special))


@pytest.mark.parametrize("prefix", PREFIXES)
def test_node_scores_are_the_plain_ones(sampler: ByteSampler, prefix: bytes) -> None:
    sampler.reset(prefix)
    tree = sampler.vct.tree()
    paths = [n.path for n in tree.nodes]
    rows = sampler._rows(tree.trunk, paths)
    node_lp, offsets = _node_scores(paths, rows, tree.rest, sampler._lengths)
    want_lp, want_offsets = plain_node_scores(paths, rows, tree.rest, sampler.tok.token_bytes)
    np.testing.assert_array_equal(node_lp, want_lp)
    assert offsets == want_offsets


def test_node_scores_of_a_deep_tree() -> None:
    """Deeper than the shipped model's trees: chains and siblings, random rows."""
    rng = np.random.default_rng(0)
    paths = [(), (3,), (3, 1), (3, 1, 4), (3, 2), (0,), (0, 4)]
    rows = [np.log(rng.dirichlet(np.ones(5))) for _ in paths]
    token_bytes = [b"a", b"bb", b"ccc", b"dddd", b"eeeee"]
    node_lp, offsets = _node_scores(paths, rows, 20, [len(b) for b in token_bytes])
    want_lp, want_offsets = plain_node_scores(paths, rows, 20, token_bytes)
    np.testing.assert_array_equal(node_lp, want_lp)
    assert offsets == want_offsets == [20, 16, 14, 9, 13, 19, 14]


@pytest.mark.parametrize("seed", range(30))
def test_logsumexp_is_the_plain_one(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 5000)) if seed % 3 else int(rng.integers(0, 3))
    values = rng.normal(-8, 6, n)
    if n and seed % 2:
        values[rng.integers(0, n, max(1, n // 3))] = -np.inf
    if seed == 7:
        values[:] = -np.inf
    kept = values.copy()
    got, want = logsumexp(values), plain_logsumexp(values)
    assert got == want or (np.isnan(got) and np.isnan(want))
    np.testing.assert_array_equal(values, kept)  # the input is not changed


@pytest.mark.parametrize(
    ("a", "b", "want"),
    [(b"ab", b"xab", 0), (b"ab", b"abc", 2), (b"abc", b"ab", 2), (b"", b"a", 0), (b"a", b"", 0)],
)
def test_common_len_of_pinned_pairs(a: bytes, b: bytes, want: int) -> None:
    assert _common_len(a, b) == want


@pytest.mark.parametrize("seed", range(40))
def test_common_len_is_the_common_prefix(seed: int) -> None:
    rng = random.Random(seed)
    a = bytes(rng.randrange(3) for _ in range(rng.randrange(0, 60)))
    action = rng.choice(["grow", "cut", "change", "same", "other"])
    if action == "grow":
        b = a + bytes(rng.randrange(3) for _ in range(rng.randrange(1, 5)))
    elif action == "cut":
        b = a[: rng.randrange(len(a) + 1)]
    elif action == "change":
        at = rng.randrange(len(a) + 1)
        b = a[:at] + bytes(rng.randrange(3) for _ in range(rng.randrange(0, 9)))
    elif action == "same":
        b = a
    else:
        b = bytes(rng.randrange(3) for _ in range(rng.randrange(0, 60)))
    pairs = enumerate(zip(a, b, strict=False))  # up to the shorter one
    want = next((i for i, (x, y) in pairs if x != y), min(len(a), len(b)))
    assert _common_len(a, b) == want


def test_reset_along_typing_keeps_the_fresh_tree(engine) -> None:
    """Typing, deleting and jumping: the live sampler's leaves equal a fresh sampler's."""
    fake = FakeModel(engine.tok.size, seed=9, scale=1.0)
    live = ByteSampler(fake, engine, track_prefix=False)
    text = b"def walk(root):\n    for name in os.listdir(root):\n        yield name\n"
    rng = random.Random(4)
    cut = 0
    for _ in range(60):
        cut = max(0, min(len(text), cut + rng.choice([1, 1, 1, 2, -1, -3, 7])))
        live.reset(text[:cut])
        fresh = ByteSampler(fake, engine, track_prefix=False)
        fresh.reset(text[:cut])
        assert live.prefix == text[:cut]
        _assert_same_leaves(live.leaf_set(), fresh.leaf_set())
