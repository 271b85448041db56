"""The lazy PBP solve (engine/sample/lazy_pbp.py) against the whole scored tree: sampled leaf
frequencies match the exact leaf distribution (chi-square), greedy finds the same leaf
as the argmax over every leaf, and the solve never scores more than the whole tree.

Rows come from a synthetic model that puts most of its mass on the tree's internal
children (and, at some nodes, on tokens that are not leaves), so the walks enter
internal nodes, get rejected and restart: the paths a real model rarely takes."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from midword.engine import VCT, Tree, load_engine
from midword.engine.model.fake import FakeModel
from midword.engine.sample.generate import Completer, Settings
from midword.engine.sample.lazy_pbp import LazyTree
from midword.engine.sample.transform import Transform

from midword.testing import shipped_test_model

from .test_generate import _chi_square_ok

# Digits too. Whether a draw ever takes the rejection path depends on the tree, so on the
# vocabulary: with the shipped model's FIM-era vocabulary "x = 12345" gives a two-node tree
# whose top-k draws are never rejected, "x = 1234" one that is.
PREFIXES = [b"    ", b"        ret", b"self.assertEq", b"def pri", b"x = 1234", b"\t\t"]


@pytest.fixture(scope="module")
def engine():
    return load_engine(str(shipped_test_model()))


def tree_of(engine, prefix: bytes) -> Tree:
    vct = VCT(engine)
    vct.push_bytes(prefix)
    return vct.tree()


class SyntheticRows:
    """Log-prob rows per node path, seeded by the path: random logits, internal children
    boosted (so walks go down), and at odd nodes a boost on tokens that are not leaves
    (so a node's in-tree mass is small and walks into it are rejected)."""

    def __init__(self, tree: Tree, vocab: int, seed: int) -> None:
        self.tree, self.vocab, self.seed = tree, vocab, seed
        self.calls: list[list[tuple[int, ...]]] = []

    def row(self, path: tuple[int, ...]) -> np.ndarray:
        h = zlib.crc32(repr((self.seed, tuple(int(t) for t in path))).encode())
        rng = np.random.default_rng(h)
        logits = rng.standard_normal(self.vocab)  # [V]
        node = next(n for n in self.tree.nodes if n.path == path)
        children = [n.path[-1] for n in self.tree.nodes if n.path[:-1] == path and n.path]
        logits[np.asarray(children, dtype=np.int64)] += 6.0
        if h % 2:  # mass outside the tree: in-tree mass below this node is small
            outside = np.setdiff1d(np.arange(self.vocab), np.r_[node.leaves, children])
            logits[rng.choice(outside, size=3, replace=False)] += 7.0
        logits -= logits.max()
        return logits - np.log(np.exp(logits).sum())

    def __call__(self, paths: list[tuple[int, ...]]) -> list[np.ndarray]:
        self.calls.append(list(paths))
        return [self.row(p) for p in paths]


def exact_leaves(tree: Tree, rows: SyntheticRows, transform: Transform) -> dict:
    """{leaf sequence: probability}, the whole tree scored (the reference)."""
    node_lp = {(): 0.0}
    weights: dict[tuple[int, ...], float] = {}
    for node in tree.nodes:  # parents first
        if node.path:
            parent = transform.apply(rows.row(node.path[:-1]))
            node_lp[node.path] = node_lp[node.path[:-1]] + parent[node.path[-1]]
        row = transform.apply(rows.row(node.path))
        for t in node.leaves:
            weights[node.path + (int(t),)] = node_lp[node.path] + row[int(t)]
    values = np.array(list(weights.values()))
    probs = np.exp(values - values.max())
    probs /= probs.sum()
    return dict(zip(weights, probs, strict=True))


def frequencies_fit(exact: dict, draw, n: int) -> bool:
    """Chi-square of ``n`` calls of ``draw()`` (leaf sequences) against ``exact``."""
    keys = list(exact)
    position = {k: i for i, k in enumerate(keys)}
    counts = np.zeros(len(keys))
    for _ in range(n):
        counts[position[draw()]] += 1
    return _chi_square_ok(counts, np.array([exact[k] for k in keys]))


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize("transform", [Transform(), Transform(temperature=0.7, top_k=50)])
def test_lazy_samples_match_the_exact_leaf_distribution(engine, prefix, transform) -> None:
    tree = tree_of(engine, prefix)
    rows = SyntheticRows(tree, engine.tok.size, seed=len(prefix))
    rng = np.random.default_rng(11)
    solves: list[LazyTree] = []

    def draw() -> tuple[int, ...]:
        solves.append(LazyTree(tree, rows, transform.apply))
        return solves[-1].sample(rng).sequence

    assert frequencies_fit(exact_leaves(tree, rows, transform), draw, 2000)
    assert max(lazy.scored for lazy in solves) <= len(tree.nodes)
    if len(tree.nodes) > 1:
        assert sum(lazy.rejections for lazy in solves) > 0  # the rejection path is reached


def test_a_broken_acceptance_step_fails_the_check(engine) -> None:
    """The chi-square check above can fail: always accepting skews the leaf frequencies."""
    tree = tree_of(engine, b"    ")
    rows = SyntheticRows(tree, engine.tok.size, seed=4)
    rng = np.random.default_rng(3)

    def draw() -> tuple[int, ...]:
        lazy = LazyTree(tree, rows)
        lazy._tighten = lambda i: None  # bounds stay 1: entering is always accepted
        return lazy.sample(rng).sequence

    assert not frequencies_fit(exact_leaves(tree, rows, Transform()), draw, 2000)


def test_reused_tree_keeps_sampling_exactly(engine) -> None:
    """One LazyTree drawn from again and again (bounds tight after the first draws)."""
    tree = tree_of(engine, b"def pri")
    rows = SyntheticRows(tree, engine.tok.size, seed=9)
    lazy = LazyTree(tree, rows)
    rng = np.random.default_rng(5)
    exact = exact_leaves(tree, rows, Transform())
    assert frequencies_fit(exact, lambda: lazy.sample(rng).sequence, 3000)
    assert lazy.scored == len(tree.nodes) or lazy.rejections == 0


@pytest.mark.parametrize("prefix", PREFIXES)
def test_lazy_greedy_is_the_argmax_over_every_leaf(engine, prefix) -> None:
    for seed in range(8):
        tree = tree_of(engine, prefix)
        rows = SyntheticRows(tree, engine.tok.size, seed=seed)
        exact = exact_leaves(tree, rows, Transform())
        leaf = LazyTree(tree, rows).greedy()
        assert leaf.sequence == max(exact, key=exact.get)


def test_the_solve_asks_for_every_scored_node_each_call(engine) -> None:
    """A tree session keeps only the nodes of its last call: each fetch repeats them."""
    tree = tree_of(engine, b"    ")
    rows = SyntheticRows(tree, engine.tok.size, seed=1)
    LazyTree(tree, rows).greedy()
    for before, after in zip(rows.calls, rows.calls[1:], strict=False):
        assert after[: len(before)] == before and len(after) == len(before) + 1


def fake_completer(engine) -> tuple[Completer, FakeModel]:
    fake = FakeModel(engine.tok.size, seed=5, scale=1.0)
    return Completer(fake, engine), fake


@pytest.mark.parametrize("prefix", [b"    self.assertEq", b"        ret", b"def pri"])
def test_completer_lazy_greedy_equals_the_whole_tree(engine, prefix) -> None:
    completer, _ = fake_completer(engine)
    lazy = completer.complete(prefix, Settings(max_tokens=4, solve="lazy"))
    tree = Completer(*fake_completer(engine)[1:], engine).complete(
        prefix, Settings(max_tokens=4, solve="tree")
    )
    assert lazy.text == tree.text and lazy.tokens == tree.tokens
    assert lazy.leaf_logprob is None and tree.leaf_logprob is not None


def test_lazy_solve_scores_no_more_than_the_tree(engine) -> None:
    fewer = 0
    for prefix in PREFIXES:
        counts = {}
        for solve in ("lazy", "tree"):
            completer, _ = fake_completer(engine)
            settings = Settings(max_tokens=1, temperature=1.0, seed=3, solve=solve)
            completer.complete(prefix, settings)
            counts[solve] = completer.session.inference_tokens
        assert counts["lazy"] <= counts["tree"]
        fewer += counts["lazy"] < counts["tree"]
    assert fewer > 0


class EventfulFake(FakeModel):
    """FakeModel with a large boost on the special tokens: end-of-text leaves are likely."""

    def __init__(self, vocab: int, specials: list[int]) -> None:
        super().__init__(vocab, seed=2, scale=1.0)
        self.specials = specials

    def _logprobs_for_hash(self, h: int) -> np.ndarray:
        logits = super()._logprobs_for_hash(h)
        logits[self.specials] += 12.0
        return logits - np.log(np.exp(logits).sum())


@pytest.mark.parametrize("solve", ["lazy", "tree"])
def test_pbp_solves_honour_ignore_eos(engine, solve) -> None:
    model = EventfulFake(engine.tok.size, list(engine.tok.special_ids))
    completer = Completer(model, engine)
    reasons = {
        ignore: {
            completer.complete(  # a prefix whose end-of-text leaf the fake makes likely
                b"pass\n",
                Settings(max_tokens=1, temperature=1.0, seed=s, ignore_eos=ignore, solve=solve),
            ).stop_reason
            for s in range(20)
        }
        for ignore in (False, True)
    }
    assert "eos" in reasons[False] and "eos" not in reasons[True]


def test_lazy_solve_on_the_shipped_model_agrees_with_the_whole_tree(engine) -> None:
    """Through the real backend (tree attention, nodes asked one call at a time): greedy
    leaves equal, sampled leaves follow the exact leaf distribution of the scored tree."""
    from midword.engine.model.hf_loading import load_hf_model

    model = load_hf_model(str(shipped_test_model()), device="cpu", dtype="float64")
    lazy, whole = Completer(model, engine), Completer(model, engine)
    for prefix in (b"        ret", b"    self.assertEq", b"def pri", b"x = 12345"):
        settings = Settings(max_tokens=1)
        a = lazy.complete(prefix, settings)
        b = whole.complete(prefix, Settings(max_tokens=1, solve="tree"))
        assert a.data == b.data
    prefix = b"        ret"
    whole.sampler.reset(prefix)
    leaf_set = whole.leaf_set()
    rest = whole.sampler.vct.tree().rest
    probs = np.exp(leaf_set.weights - leaf_set.weights.max())
    exact: dict[bytes, float] = {}  # completion text -> probability (leaves with one text merged)
    events = set(engine.tok.special_ids)
    for k, p in enumerate(probs / probs.sum()):
        ends = int(leaf_set.token[k]) in events  # an end-of-text leaf completes nothing
        text = b"" if ends else engine.tok.decode(leaf_set.sequence(k))[rest:]
        exact[text] = exact.get(text, 0.0) + float(p)
    seeds = iter(range(10**6))

    def draw() -> bytes:
        settings = Settings(max_tokens=1, temperature=1.0, seed=next(seeds))
        return lazy.complete(prefix, settings).data

    assert frequencies_fit(exact, draw, 400)
