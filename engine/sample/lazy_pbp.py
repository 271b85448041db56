"""Exact PBP leaf choice that scores the covering tree lazily, one internal node at a time.

PBP mode needs one leaf of the Valid Covering Tree: a sample with probability
proportional to ``P(path + leaf | trunk)``, or the likeliest leaf (greedy). Scoring
every internal node first (`ByteSampler.leaf_set`) costs one inference token per
node; most of them are never needed, because a model that knows the word puts
little mass on the short-token paths the tree also has to hold. Here a node is
scored only when the search enters it; the answer is the same distribution (or the
same argmax) as scoring the whole tree.

Sampling is adaptive rejection sampling. Every node ``n`` carries a bound ``U[n]`` on
the in-tree mass below it, relative to ``n`` (1 while ``n`` is unscored; once scored,
``B[n] = leaf mass + sum over internal children c of p(c | n) * U[c]``, which is <= 1).
A round walks down from the root, choosing at each node a leaf or an internal child
with weight ``p * U``. Entering an unscored child scores it and goes on with
probability ``B[child] / 1``, else the round restarts with the tighter bounds. The
factors telescope: every leaf ends a round accepted with probability
``P(path + leaf) / B[root]``, the same constant for all leaves, so an accepted leaf is
an exact sample. Each rejection follows the scoring of a new node, so a solve scores
at most the whole tree and makes at most one round more than it scores nodes.

Greedy is best-first search: a node's path log-probability bounds every leaf below it
(log-probs are <= 0), so nodes are expanded from the likeliest while they can still
beat the best leaf found; ties go to the leaf `LeafSet` lists first, as there.

Drawn nodes (``draw``, for a remote model that can sample but would have to send a whole
row to be read): a node whose next token the caller draws from ``p(. | node)`` instead of
reading its row. Its bound stays 1, the exact mass of its row; a walk in it draws a token:
a leaf ends the round accepted, an internal child's token goes on into that child with
probability ``U[child]`` (after scoring it, as an entered child is), any other token
rejects the round. A leaf below the node is then reached with probability
``p(child) U[child] * (its share below the child) / U[child]``, so every leaf still ends a
round with probability ``P(path + leaf) / B[root]``: the sample stays exact without the
node's row. After ``draw_tries`` draws at a node that were neither a leaf nor a child its
row is fetched after all (a model with most of its mass outside the tree there would
otherwise keep drawing).

>>> engine = load_engine("models/default")                             # doctest: +SKIP
>>> vct = VCT(engine); vct.push_bytes(b"    self.assertEq"); tree = vct.tree()  # doctest: +SKIP
>>> session = FakeModel(engine.tok.size).session(bos_id=0)             # doctest: +SKIP
>>> lazy = LazyTree(tree, lambda paths: session.logprob_rows(tree.trunk, paths))  # doctest: +SKIP
>>> leaf = lazy.sample(np.random.default_rng(0))                       # doctest: +SKIP
>>> engine.tok.decode(leaf.sequence), leaf.scored, len(tree.nodes)     # doctest: +SKIP
(b'Equal', 2, 3)
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..errors import BackendError
from ..model.backend import TokenPath
from ..tree.vct import Tree
from .transform import NEG_INF

__all__ = ["Draws", "LazyLeaf", "LazyTree", "RowFetch", "TokenDraw"]

# rows for the given node paths; the last one is new, the others were asked before (a
# tree session keeps only the nodes of its last call, so all are asked every time)
RowFetch = Callable[[list[TokenPath]], Sequence[np.ndarray]]
# one token drawn from p(. | node) after the node with this path (any token of the vocabulary)
TokenDraw = Callable[[TokenPath], int]


class Draws(Protocol):
    """What a sampler needs of a random generator (np.random.Generator has it)."""

    def random(self) -> float: ...


@dataclass(frozen=True)
class LazyLeaf:
    """The chosen leaf: ``sequence`` (path + leaf token) below the trunk, its log-probability
    given the trunk (unnormalized over the tree: the tree's total is never computed; NaN
    at or below a node drawn without its row), and how many tree nodes were scored (the
    node at the trunk's end included)."""

    sequence: tuple[int, ...]
    logprob: float
    scored: int


@dataclass
class _ScoredNode:
    """A node after its row is known: leaf and child probabilities relative to the node."""

    leaves: np.ndarray  # [L] int64 leaf tokens (events included where they apply)
    leaf_lp: np.ndarray  # [L] float64 log p(leaf | node)
    leaf_p: np.ndarray  # [L] float64 p(leaf | node)
    leaf_mass: float
    child_p: np.ndarray  # [C] float64 p(child token | node), children in `_children` order


class LazyTree:
    """A tree whose rows are fetched on demand; `sample` and `greedy` pick one leaf.

    ``transform`` maps a node's log-prob row to the row sampled from (temperature,
    top-k, top-p: any per-row transform; identity by default). ``events`` are extra
    leaves (the model's special tokens) of the node ``tree.complete``. ``drawn``: paths of
    nodes that `sample` goes through by ``draw`` (see the module docstring; identity
    transform only), each until ``draw_tries`` of its draws fell outside the tree.
    """

    def __init__(
        self,
        tree: Tree,
        fetch: RowFetch,
        transform: Callable[[np.ndarray], np.ndarray] | None = None,
        events: np.ndarray | None = None,
        *,
        draw: TokenDraw | None = None,
        drawn: Collection[TokenPath] = (),
        draw_tries: int = 8,
    ) -> None:
        self.tree = tree
        self._fetch = fetch
        self._transform = transform
        self._events = events if events is not None and events.size else None
        index = {node.path: i for i, node in enumerate(tree.nodes)}
        self._parent = [index[n.path[:-1]] if n.path else -1 for n in tree.nodes]  # [N]
        self._children: list[list[int]] = [[] for _ in tree.nodes]  # child node indices
        for i, parent in enumerate(self._parent):
            if parent >= 0:
                self._children[parent].append(i)
        self._asked: list[TokenPath] = []
        self._scored: dict[int, _ScoredNode] = {}
        self._node_lp = np.full(len(tree.nodes), NEG_INF)  # [N] log P(path | trunk) once known
        if tree.nodes:
            self._node_lp[0] = 0.0
        self._bound = np.ones(len(tree.nodes))  # [N] U: bound on the mass below each node
        self.rejections = 0  # rounds that ended without a leaf (each scored a new node)
        self._draw = draw
        self._drawing = self._drawn_nodes(drawn)  # node indices sampled through draw
        self._misses = dict.fromkeys(self._drawing, 0)  # rejected draws per drawn node
        self._draw_tries = draw_tries

    @property
    def scored(self) -> int:
        """Tree nodes scored so far (each cost one inference token)."""
        return len(self._scored)

    # ------------------------------------------------------------------ sampling
    def sample(self, rng: Draws) -> LazyLeaf:
        """One leaf drawn exactly in proportion to its (transformed) path probability."""
        if 0 not in self._drawing:
            self._need_root()
        elif not self.tree.nodes:
            raise BackendError("no token sequence covers this prefix")
        while True:
            leaf = self._round(rng)
            if leaf is not None:
                return leaf

    def _round(self, rng: Draws) -> LazyLeaf | None:
        """One walk from the root: the leaf it accepts, or None when it rejects."""
        if self._bound[0] <= 0.0:
            raise BackendError("nothing to sample: every covering has probability zero")
        i = 0
        while True:
            if i in self._drawing:
                step = self._drawn_step(i, rng)
                if not isinstance(step, int):
                    return step  # a leaf, or None: the round is rejected
                i = step
                continue
            self._score(i)  # only a root whose draws gave up is not scored yet
            node = self._scored[i]
            children = self._children[i]
            weights = node.child_p * self._bound[children]  # [C] p(child) * U(child)
            draw = rng.random() * (node.leaf_mass + float(weights.sum()))
            if draw < node.leaf_mass:
                return self._leaf(i, _select(node.leaf_p, draw))
            child = children[_select(weights, draw - node.leaf_mass)]
            if child not in self._scored and child not in self._drawing:
                self._score(child)
                # the child was proposed with bound 1: go on with probability B(child) / 1
                if rng.random() >= self._bound[child]:
                    self.rejections += 1
                    return None
            i = child

    def _drawn_step(self, i: int, rng: Draws) -> LazyLeaf | int | None:
        """A token drawn after drawn node i: its leaf, the child the walk goes on into,
        or None (a rejected round)."""
        assert self._draw is not None
        path = self.tree.nodes[i].path
        token = int(self._draw(path))
        if np.any(self._leaves(i) == token):
            return LazyLeaf(path + (token,), float("nan"), self.scored)
        child = next((c for c in self._children[i] if self.tree.nodes[c].path[-1] == token), None)
        if child is None:
            self._misses[i] += 1
            if self._misses[i] >= self._draw_tries:
                self._drawing.discard(i)  # its row decides from the next walk into it on
        elif child not in self._scored and child not in self._drawing:
            self._score(child)
        if child is None or rng.random() >= self._bound[child]:
            self.rejections += 1
            return None
        return child

    def _drawn_nodes(self, paths: Collection[TokenPath]) -> set[int]:
        """Indices of the nodes at ``paths``."""
        if not paths:
            return set()
        if self._draw is None or self._transform is not None:
            raise ValueError("drawn nodes need a draw and the identity transform")
        index = {node.path: i for i, node in enumerate(self.tree.nodes)}
        return {index[tuple(p)] for p in paths}

    # ------------------------------------------------------------------ greedy
    def greedy(self) -> LazyLeaf:
        """The likeliest leaf (ties: the first in `LeafSet` order), by best-first search."""
        self._need_root()
        best: tuple[float, int, int] | None = None  # (log-prob, node, position in its leaves)
        frontier = [(-0.0, 0)]  # (-log P(path), node): the bound on every leaf below it
        while frontier:
            key, i = heapq.heappop(frontier)
            if best is not None and -key < best[0]:
                break  # nothing below any node left can beat the best leaf
            self._score(i)
            node = self._scored[i]
            if node.leaf_lp.size:
                k = int(np.argmax(node.leaf_lp))
                value = float(self._node_lp[i] + node.leaf_lp[k])
                if best is None or (value, -i) > (best[0], -best[1]):
                    best = (value, i, k)
            for child in self._children[i]:
                if self._node_lp[child] > NEG_INF:
                    heapq.heappush(frontier, (-float(self._node_lp[child]), child))
        if best is None or best[0] == NEG_INF:
            raise BackendError("nothing to sample: every continuation has probability zero")
        return self._leaf(best[1], best[2])

    # ------------------------------------------------------------------ scoring
    def _need_root(self) -> None:
        if not self.tree.nodes:
            raise BackendError("no token sequence covers this prefix")
        self._score(0)

    def _score(self, i: int) -> None:
        """Fetch node i's row (once), record its leaves and children, tighten the bounds."""
        if i in self._scored:
            return
        path = self.tree.nodes[i].path
        self._asked.append(path)
        row = np.asarray(self._fetch(list(self._asked))[-1], dtype=np.float64)
        if self._transform is not None:
            row = self._transform(row)
        leaves = self._leaves(i)
        leaf_lp = row.take(leaves)
        leaf_p = np.exp(leaf_lp)
        tokens = [self.tree.nodes[c].path[-1] for c in self._children[i]]
        child_lp = row.take(np.asarray(tokens, dtype=np.int64))
        # the same sums, in the same order, as `_node_scores` (greedy ties agree with it)
        for c, lp in zip(self._children[i], child_lp, strict=True):
            self._node_lp[c] = self._node_lp[i] + lp
        self._scored[i] = _ScoredNode(
            leaves, leaf_lp, leaf_p, float(leaf_p.sum()), np.exp(child_lp)
        )
        self._tighten(i)

    def _tighten(self, i: int) -> None:
        """Recompute B for node i and its ancestors (each is scored: they were entered),
        up to a drawn one (its bound stays 1, so those above it do not change)."""
        while i >= 0 and i in self._scored:
            node = self._scored[i]
            below = (
                float(node.child_p @ self._bound[self._children[i]]) if node.child_p.size else 0.0
            )
            self._bound[i] = min(1.0, node.leaf_mass + below)  # rounding must not exceed 1
            i = self._parent[i]

    def _leaves(self, i: int) -> np.ndarray:
        leaves = np.asarray(self.tree.nodes[i].leaves, dtype=np.int64)
        if self._events is not None and self.tree.nodes[i].path == self.tree.complete:
            leaves = np.concatenate([leaves, self._events])
        return leaves

    def _leaf(self, i: int, k: int) -> LazyLeaf:
        node = self._scored[i]
        sequence = self.tree.nodes[i].path + (int(node.leaves[k]),)
        # a node below a drawn one has no known path log-prob (-inf, never drawn otherwise)
        known = self._node_lp[i] > NEG_INF
        logprob = float(self._node_lp[i] + node.leaf_lp[k]) if known else float("nan")
        return LazyLeaf(sequence, logprob, self.scored)


def _select(weights: np.ndarray, draw: float) -> int:
    """The index whose cumulative-weight interval holds ``draw`` (0 <= draw < total); a
    draw that rounding pushed past the end goes to the last positive weight."""
    k = int(np.cumsum(weights).searchsorted(draw, side="right"))
    if k < weights.size:
        return k
    return int(np.flatnonzero(weights > 0)[-1])
