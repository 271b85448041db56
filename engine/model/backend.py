"""Model backend: exact next-token log-probabilities for the paths of a token tree.

The engine asks one question of a language model. Given a *trunk* of tokens and
a set of short *paths* hanging off it (a trie: the internal nodes of a Valid
Covering Tree), what is the next-token distribution after ``bos? + trunk + path``
for every path? The path ``()`` means "right after the trunk".

A session answers it incrementally (docs/design.md, paper appendix C.1):

* the cache holds one row (K/V) per token of the *absolute* context: one per
  trunk token (plus BOS) and one per distinct trie node of the current paths;
* a call keeps every old row whose absolute context is still needed (the common
  trunk prefix, trie nodes that are still prefixes of some path, trie nodes that
  the trunk grew into, trunk tokens that a backspace turned back into trie
  nodes) and drops the others (copying garbage collection);
* all missing rows (new trunk tokens and new trie nodes) are evaluated in ONE
  forward call with a tree-shaped attention mask: a token attends to its own
  ancestors only, never to siblings, and its position id is its depth.

The bookkeeping lives in `TreeScoringSession` and is shared by the fast
deterministic `FakeSession` (numpy only, for tests of higher layers) and the
Hugging Face `HFSession` (engine/model/hf_backend.py), so both count inference tokens
and cache rows identically.

Example:
    >>> model = FakeModel(vocab_size=50, seed=0)
    >>> session = model.session(bos_id=1)
    >>> lp = session.logprobs([5, 6], [(), (7,), (7, 8), (9,)])
    >>> lp.shape, session.cache_len(), session.inference_tokens
    ((4, 50), 6, 6)
    >>> lp = session.logprobs([5, 6, 7], [(), (8,)])   # the trunk grew into node (7,)
    >>> session.cache_len(), session.inference_tokens  # nothing was re-evaluated
    (5, 6)

Importing this module does not import torch or transformers.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from ..errors import BackendError, ForwardStopped
from .kvcache import prefix_run

TokenPath = tuple[int, ...]

__all__ = [
    "BackendError",
    "FakeModel",
    "FakeSession",
    "ForwardDone",
    "ForwardStep",
    "ForwardStopped",
    "ScoringModel",
    "ScoringSession",
    "TokenPath",
    "TreeScoringSession",
    "observe_forwards",
]


@dataclass(frozen=True)
class ForwardDone:
    """One forward step of a tree-scoring session, as `observe_forwards` reports it."""

    started: float  # time.monotonic() seconds
    ended: float
    cpu_seconds: float  # CPU time of the thread that ran it (the model's worker)
    tokens: int  # tokens evaluated

    @property
    def seconds(self) -> float:
        return self.ended - self.started


_FORWARD_OBSERVERS: list[Callable[[ForwardDone], None]] = []


def observe_forwards(observer: Callable[[ForwardDone], None]) -> Callable[[], None]:
    """Call ``observer`` after every forward step of every tree-scoring session (any
    backend, any thread) until the returned function is called: how benchmarks tell the
    model's time from the rest without patching a session class.

    Example:
        >>> seen = []
        >>> stop = observe_forwards(seen.append)
        >>> _ = FakeModel(20).session(bos_id=0).logprobs([3, 4], [()])
        >>> stop()
        >>> [d.tokens for d in seen]
        [3]
    """
    _FORWARD_OBSERVERS.append(observer)
    return lambda: _FORWARD_OBSERVERS.remove(observer)


@runtime_checkable
class ScoringSession(Protocol):
    """Stateful scorer of token-tree paths over a KV cache (see module docstring)."""

    vocab_size: int
    inference_tokens: int

    def logprobs(self, trunk: Sequence[int], paths: Sequence[TokenPath]) -> np.ndarray:
        """float64 [len(paths), vocab_size]: log-softmax after ``bos? + trunk + path``."""
        ...

    def cache_len(self) -> int:
        """Number of token positions currently held in the KV cache."""
        ...

    def reset(self) -> None:
        """Drop the cache (the inference-token counter keeps running)."""
        ...


@runtime_checkable
class ScoringModel(Protocol):
    """A loaded model: opens sessions and scores plain sequences (the oracle)."""

    vocab_size: int

    def session(self, bos_id: int | None = None) -> ScoringSession:
        """A new session with an empty cache."""
        ...

    def sequence_logprobs(self, tokens: Sequence[int]) -> np.ndarray:
        """float64 [len(tokens), vocab_size]: row i is the distribution after tokens[: i + 1]."""
        ...


# --------------------------------------------------------------------------------------
# The plan of one call: which old rows survive, which tokens are evaluated, the mask
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ForwardStep:
    """What a backend must do for one `logprobs` call, in three steps.

    1. keep: the cache becomes ``old_rows[keep]`` (K rows, in this order);
    2. evaluate `tokens` (Q of them) in one forward call on top of it, appending
       their K/V rows (rows K .. K+Q-1), with `positions` as position ids and
       `attention_mask()` as the tree mask; return the next-token log-probs of the
       queries listed in `logit_queries` (float64 [L, vocab]);
    3. order: the cache becomes ``rows[order]`` (canonical layout: trunk rows first).

    Row indices in `row_parent`, `trunk_rows` and the mask refer to the layout
    after step 1 plus the appended rows (K+Q rows in all). New trunk tokens come
    first in `tokens`, then new trie nodes (parents before children).

    Example (trunk [5], no BOS, paths (7,) and (7, 8), nothing cached):
        >>> s = ForwardStep(keep=np.zeros(0, np.int64), tokens=np.array([5, 7, 8]),
        ...                 positions=np.array([0, 1, 2]), row_parent=np.array([-1, 0, 1]),
        ...                 trunk_rows=np.array([0]), logit_queries=np.array([0, 1, 2]),
        ...                 order=np.arange(3))
        >>> s.attention_mask().astype(int).tolist()
        [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    """

    keep: np.ndarray  # [K] int64: old cache rows kept, in their new order
    tokens: np.ndarray  # [Q] int64: token ids to evaluate, appended after the kept rows
    positions: np.ndarray  # [Q] int64: position id of each new token (BOS or first token = 0)
    row_parent: np.ndarray  # [K+Q] int64: row of each row's predecessor in its context, -1: none
    trunk_rows: np.ndarray  # [T] int64: rows of bos? + trunk, in context order
    logit_queries: np.ndarray  # [L] int64: indices into tokens that need next-token log-probs
    order: np.ndarray  # [K+Q] int64: final permutation of rows after the forward

    def attention_mask(self) -> np.ndarray:
        """bool [Q, K+Q]: True where new token q may attend to row k (its ancestors and itself).

        New trunk tokens form a causal chain over the trunk rows; each trie node
        attends to the whole trunk and to its trie ancestors.
        """
        n_keep, n_new = len(self.keep), len(self.tokens)
        n_rows, n_trunk = n_keep + n_new, len(self.trunk_rows)
        mask = np.zeros((n_new, n_rows), dtype=bool)  # [Q, K+Q]
        is_trunk = np.zeros(n_rows, dtype=bool)  # [K+Q]
        is_trunk[self.trunk_rows] = True
        n_trunk_new = int(is_trunk[n_keep:].sum())
        if n_trunk_new:
            depth = np.arange(n_trunk)  # [T]
            own = n_trunk - n_trunk_new + np.arange(n_trunk_new)  # [Qt] own trunk index
            mask[:n_trunk_new, self.trunk_rows] = depth[None, :] <= own[:, None]
        for q in range(n_trunk_new, n_new):
            mask[q, self.trunk_rows] = True
            row = n_keep + q
            while row >= 0 and not is_trunk[row]:
                mask[q, row] = True
                row = int(self.row_parent[row])
        return mask

    def row_positions(self) -> np.ndarray:
        """int64 [K+Q]: position id of every row (its depth in its own context).

        A sliding-window layer lets a token see an ancestor only if their positions
        differ by less than the window; this gives the positions of the kept rows too.

        Example (trunk [5, 6] cached, new node (7,) and its child (8,)):
            >>> s = ForwardStep(keep=np.arange(2), tokens=np.array([7, 8]),
            ...                 positions=np.array([2, 3]), row_parent=np.array([-1, 0, 1, 2]),
            ...                 trunk_rows=np.arange(2), logit_queries=np.array([1]),
            ...                 order=np.arange(4))
            >>> s.row_positions().tolist()
            [0, 1, 2, 3]
        """
        n_keep = len(self.keep)
        positions = np.full(n_keep + len(self.tokens), -1, dtype=np.int64)  # [K+Q]
        positions[self.trunk_rows] = np.arange(len(self.trunk_rows))
        positions[n_keep:] = self.positions
        for row in np.flatnonzero(positions < 0):  # kept trie nodes: parents come first
            parent = int(self.row_parent[row])
            if positions[parent] < 0:
                raise AssertionError(f"kept row {row} comes before its parent row {parent}")
            positions[row] = positions[parent] + 1
        return positions


class _Entry:
    """A cached row in the index of old rows: its row number and its children by token."""

    __slots__ = ("children", "row")

    def __init__(self, row: int) -> None:
        self.row = row
        self.children: dict[int, _Entry] = {}


@dataclass
class _Plan:
    """A `ForwardStep` plus what the session needs to update its bookkeeping afterwards."""

    step: ForwardStep
    nodes: list[TokenPath]  # distinct non-empty path prefixes, parents first (final rows T..)
    new_rows: np.ndarray  # [Q] final row of each new token
    lp_rows: dict[int, int] = field(default_factory=dict)  # final row -> old row with stored lp


def _common_prefix_len(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the longest common prefix of two 1-D int arrays.

    Example:
        >>> _common_prefix_len(np.array([1, 2, 3]), np.array([1, 2, 4, 5]))
        2
    """
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if len(diff) else n


_LCP_TAIL = 64  # _list_lcp compares this many ids from the end one by one


def _list_lcp(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two lists of ids (C-speed list compares for
    the usual case, a difference near the end).

    Example:
        >>> _list_lcp([1, 2, 3], [1, 2, 4, 5]), _list_lcp([1, 2], [1, 2, 3]), _list_lcp([], [1])
        (2, 2, 0)
    """
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    i = max(0, n - _LCP_TAIL)
    if i and a[:i] != b[:i]:
        i = 0
    while a[i] == b[i]:  # they differ before n
        i += 1
    return i


def _distinct_prefixes(paths: Iterable[TokenPath]) -> list[TokenPath]:
    """Distinct non-empty prefixes of `paths`, shortest first (parents before children).

    Example:
        >>> _distinct_prefixes([(1, 2), (1,), (3,), ()])
        [(1,), (3,), (1, 2)]
    """
    seen: dict[TokenPath, None] = {}
    for path in paths:
        for depth in range(1, len(path) + 1):
            seen.setdefault(path[:depth], None)
    return sorted(seen, key=len)


class _Planner:
    """Computes the `_Plan` of one call from the old state and the request."""

    def __init__(
        self,
        old_ctx: np.ndarray,
        old_nodes: dict[TokenPath, int],
        old_lp: set[int],
        ctx: np.ndarray,
        paths: list[TokenPath],
        window: int,
        lcp: int | None = None,
    ) -> None:
        self.old_ctx, self.old_nodes, self.old_lp = old_ctx, old_nodes, old_lp
        self.ctx, self.paths, self.window = ctx, paths, window
        self.nodes = _distinct_prefixes(paths)
        self.endpoints = {p for p in paths if p}
        # the session knows the common prefix already (`_context`); else compare the arrays
        self.lcp = _common_prefix_len(old_ctx, ctx) if lcp is None else lcp

    def _old_index(self) -> dict[int, _Entry]:
        """Trie of old rows whose absolute context extends ctx[:lcp], keyed from there.

        Only entries that could match a needed row are indexed (depth limit), so a
        long deleted trunk tail costs at most the depth of the request.
        """
        c = self.lcp
        limit = len(self.ctx) - c + max((len(p) for p in self.nodes), default=0)
        root: dict[int, _Entry] = {}
        level = root
        stop = min(len(self.old_ctx), c + limit)
        for i in range(c, stop):
            entry = _Entry(i)
            level[int(self.old_ctx[i])] = entry
            level = entry.children
        if stop < len(self.old_ctx):
            return root
        by_path: dict[TokenPath, dict[int, _Entry]] = {(): level}
        for path in sorted(self.old_nodes, key=len):
            parent = by_path.get(path[:-1])
            if parent is None or len(self.old_ctx) - c + len(path) > limit:
                continue
            entry = _Entry(self.old_nodes[path])
            parent[path[-1]] = entry
            by_path[path] = entry.children
        return root

    def build(self) -> _Plan:
        """Match needed rows to old rows, then lay out the kept and new rows.

        A keystroke's plan has a long kept trunk and a handful of new rows: numpy for
        the trunk-long arrays, plain lists for the rest (numpy's per-call cost showed).
        """
        n_prefix, tail, level = self._match_trunk(self._old_index())
        node_old = self._match_nodes(level)
        kept_nodes = [p for p in self.nodes if node_old[p] is not None]
        new_nodes = [p for p in self.nodes if node_old[p] is None]
        n_trunk_old = n_prefix + len(tail)
        keep_tail = tail + [node_old[p] for p in kept_nodes]  # old rows kept after the prefix
        t = len(self.ctx)
        n_keep, n_new_trunk = n_prefix + len(keep_tail), t - n_trunk_old
        n_rows = n_keep + n_new_trunk + len(new_nodes)
        layout = {p: n_trunk_old + k for k, p in enumerate(kept_nodes)}  # row before `order`
        layout.update({p: n_keep + n_new_trunk + j for j, p in enumerate(new_nodes)})

        row_parent = np.arange(-1, n_rows - 1, dtype=np.int64)  # [K+Q] chains the trunk rows
        if n_new_trunk:
            row_parent[n_keep] = n_trunk_old - 1  # the first new trunk token follows the old
        trunk_end = n_keep + n_new_trunk - 1 if n_new_trunk else n_trunk_old - 1
        for path, row in layout.items():
            row_parent[row] = layout[path[:-1]] if len(path) > 1 else trunk_end

        trunk_rows = np.concatenate(
            (np.arange(n_trunk_old), np.arange(n_keep, n_keep + n_new_trunk))
        ).astype(np.int64, copy=False)  # [T] row of each trunk token, in context order
        n_lp_trunk = min(self.window, n_new_trunk)
        step = ForwardStep(
            keep=np.concatenate((np.arange(n_prefix), keep_tail)).astype(np.int64, copy=False),
            tokens=np.array(
                self.ctx[n_trunk_old:].tolist() + [p[-1] for p in new_nodes], dtype=np.int64
            ),
            positions=np.array(
                [*range(n_trunk_old, t), *(t + len(p) - 1 for p in new_nodes)], dtype=np.int64
            ),
            row_parent=row_parent,
            trunk_rows=trunk_rows,
            logit_queries=np.arange(n_new_trunk - n_lp_trunk, n_rows - n_keep, dtype=np.int64),
            order=np.concatenate((trunk_rows, [layout[p] for p in self.nodes])).astype(
                np.int64, copy=False
            ),
        )
        # final rows: the trunk in order (0..t-1), then the nodes in `self.nodes` order
        final_node = {p: t + i for i, p in enumerate(self.nodes)}
        new_rows = [*range(n_trunk_old, t), *(final_node[p] for p in new_nodes)]
        kept_final = [final_node[p] for p in kept_nodes]  # of keep[n_trunk_old + i]
        lp_rows = {
            (k if k < n_trunk_old else kept_final[k - n_trunk_old]): old
            for old, k in self._kept_at(keep_tail, n_prefix).items()
        }
        return _Plan(step, self.nodes, np.array(new_rows, dtype=np.int64), lp_rows)

    def _kept_at(self, keep_tail: list[int], n_prefix: int) -> dict[int, int]:
        """Old row -> its place in `keep`, for the few old rows that hold log-probs (the
        kept trunk prefix can be long: it is ``keep[:n_prefix] == 0..n_prefix-1``, and
        `keep_tail` the rest)."""
        after = {old: n_prefix + j for j, old in enumerate(keep_tail)}
        at = {old: old if old < n_prefix else after.get(old, -1) for old in self.old_lp}
        return {old: k for old, k in at.items() if k >= 0}

    def _match_trunk(
        self, index: dict[int, _Entry]
    ) -> tuple[int, list[int], dict[int, _Entry] | None]:
        """Old rows reused for the trunk and the index level after it.

        The trunk's reused rows are ``0 .. n_prefix-1`` followed by `tail` (old trie
        nodes or old trunk rows the new trunk runs through); the rest is new.
        """
        n_prefix, tail = self.lcp, []
        level: dict[int, _Entry] | None = index
        for i in range(self.lcp, len(self.ctx)):
            entry = level.get(int(self.ctx[i])) if level is not None else None
            if entry is None:
                return n_prefix, tail, None
            tail.append(entry.row)
            level = entry.children
        end = tail[-1] if tail else n_prefix - 1
        if () in self.paths and end >= 0 and end not in self.old_lp:
            # the trunk end's K/V is cached but its log-probs are not: evaluate it again
            if tail:
                tail.pop()
            else:
                n_prefix -= 1
        return n_prefix, tail, level

    def _match_nodes(self, level: dict[int, _Entry] | None) -> dict[TokenPath, int | None]:
        """Old row reused for each needed trie node, or None where it must be evaluated."""
        entries: dict[TokenPath, _Entry | None] = {}
        rows: dict[TokenPath, int | None] = {}
        for path in self.nodes:
            parent_level = level if len(path) == 1 else _children(entries[path[:-1]])
            entry = parent_level.get(path[-1]) if parent_level is not None else None
            entries[path] = entry
            usable = entry is not None and (path not in self.endpoints or entry.row in self.old_lp)
            rows[path] = entry.row if usable and entry is not None else None
        return rows


def _children(entry: _Entry | None) -> dict[int, _Entry] | None:
    return entry.children if entry is not None else None


# --------------------------------------------------------------------------------------
# The shared session
# --------------------------------------------------------------------------------------


class TreeScoringSession(ABC):
    """Bookkeeping shared by all backends; subclasses implement `_apply` and the cache.

    State between calls (canonical layout): cache rows 0..T-1 hold ``bos? + trunk``
    in order, rows T.. hold the distinct trie nodes of the last call's paths,
    parents before children. Log-probs are remembered for every trie-node row and
    for the last `trunk_logits_window` trunk rows, so a path asked again, a trunk
    that grows into a trie node, or a short backspace costs no model call. A row
    whose K/V is cached but whose log-probs are not (e.g. the trunk end after a
    long backspace) is evaluated again and counted in `inference_tokens`.

    Subclasses must call `super().__init__` and implement `_apply`, `_clear` and
    `cache_len`.
    """

    def __init__(
        self,
        vocab_size: int,
        bos_id: int | None = None,
        input_vocab_size: int | None = None,
        trunk_logits_window: int = 8,
    ) -> None:
        self.vocab_size = int(vocab_size)
        self.input_vocab_size = int(input_vocab_size or vocab_size)
        if bos_id is not None:
            self._check_ids(np.asarray([bos_id]), "bos_id")
        self.bos_id = bos_id
        self.trunk_logits_window = max(1, int(trunk_logits_window))
        self.inference_tokens = 0
        self._ctx = np.zeros(0, dtype=np.int64)  # [T] bos? + trunk: cache rows 0..T-1
        self._trunk: list[int] = []  # the trunk in _ctx, as the caller gave it (see _context)
        self._nodes: dict[TokenPath, int] = {}  # trie node (relative to trunk) -> cache row
        self._lp: dict[int, np.ndarray] = {}  # cache row -> float64 [vocab] next-token log-probs

    # -- public API -----------------------------------------------------------------------

    def logprobs(self, trunk: Sequence[int], paths: Sequence[TokenPath]) -> np.ndarray:
        """float64 [len(paths), vocab_size]: log-softmax after ``bos? + trunk + path``.

        Raises ValueError for token ids out of range and for the path () when
        there is no context at all (empty trunk and no BOS).

        Example:
            >>> s = FakeModel(20).session(bos_id=0)
            >>> s.logprobs([3], [(), (4, 5)]).shape
            (2, 20)
        """
        rows = self.logprob_rows(trunk, paths)
        if not rows:
            return np.zeros((0, self.vocab_size), dtype=np.float64)
        return np.stack(rows)  # [P, V]

    def logprob_rows(self, trunk: Sequence[int], paths: Sequence[TokenPath]) -> list[np.ndarray]:
        """`logprobs` as one read-only float64 [vocab_size] row per path, not copied into
        one matrix (with a 128k vocabulary a row is 1 MB, and a tree asks for several).

        Example:
            >>> rows = FakeModel(20).session(bos_id=0).logprob_rows([3], [(), (4,)])
            >>> len(rows), rows[0].shape, rows[0].flags.writeable
            (2, (20,), False)
        """
        # our own copy (callers append to theirs while decoding), kept for the next call
        trunk = trunk.tolist() if isinstance(trunk, np.ndarray) else list(trunk)
        ctx, lcp = self._context(trunk)
        wanted = [self._path(p) for p in paths]
        if len(ctx) == 0 and () in wanted:
            raise ValueError(
                "path () needs a context: the trunk is empty and the session has no bos_id"
            )
        plan = _Planner(
            self._ctx, self._nodes, set(self._lp), ctx, wanted, self.trunk_logits_window, lcp
        ).build()
        try:
            new_lp = self._timed_apply(plan.step)
        except ForwardStopped:
            self._keep_leading_rows(plan.step.keep)
            raise
        except BaseException:
            self._forget()  # the cache may be half-updated: start afresh next time
            raise
        self._commit(ctx, trunk, plan, new_lp)
        return [self._lp[len(ctx) - 1 if not p else self._nodes[p]] for p in wanted]

    def _timed_apply(self, step: ForwardStep) -> np.ndarray:
        if not _FORWARD_OBSERVERS:
            return self._apply(step)
        started, cpu = time.monotonic(), time.thread_time()
        try:
            return self._apply(step)
        finally:
            done = ForwardDone(
                started, time.monotonic(), time.thread_time() - cpu, len(step.tokens)
            )
            for observe in list(_FORWARD_OBSERVERS):
                observe(done)

    def cached_trunk_len(self, trunk: Sequence[int]) -> int:
        """How many leading tokens of ``trunk`` the cache holds already (a call with this
        trunk evaluates only the rest): lets a caller prefill a long trunk in chunks.

        Example:
            >>> s = FakeModel(20).session(bos_id=0)
            >>> _ = s.logprobs([3, 4, 5], [()])
            >>> s.cached_trunk_len([3, 4, 9, 9]), s.cached_trunk_len([3, 4, 5, 6])
            (2, 3)
        """
        return _list_lcp(self._trunk, list(trunk))

    @contextmanager
    def stop_inside_forward(self, should_stop: Callable[[], bool]) -> Iterator[None]:
        """Within it, a backend that can checks ``should_stop()`` between the layers of
        each forward pass and raises `ForwardStopped` when it is true; the call that
        stopped leaves the session as it was before it (minus remembered tree nodes), so
        what earlier calls evaluated stays cached. Here (and for backends that cannot
        stop inside a pass) it changes nothing: a pass runs to its end.

        A long prefill is evaluated in chunks with a check between two; this lets a
        newer request wait for a layer rather than for a whole chunk (seconds on a CPU).
        """
        yield

    def expected_cache_len(self) -> int:
        """bos? + trunk + distinct trie nodes of the last call: what `cache_len` must be."""
        return len(self._ctx) + len(self._nodes)

    def reset(self) -> None:
        """Drop the cache and all remembered log-probs (the counter keeps running)."""
        self._forget()

    @abstractmethod
    def cache_len(self) -> int:
        """Rows physically held by the backend's cache."""

    # -- backend hooks --------------------------------------------------------------------

    @abstractmethod
    def _apply(self, step: ForwardStep) -> np.ndarray:
        """Run `step` on the cache; return float64 [len(step.logit_queries), vocab_size]."""

    @abstractmethod
    def _clear(self) -> None:
        """Empty the backend's cache."""

    def _keep_rows(self, rows: int) -> bool:
        """Cut the backend's cache to its first ``rows`` rows (after a stopped pass);
        False when it cannot (the session then starts afresh)."""
        return False

    # -- internals ------------------------------------------------------------------------

    def _forget(self) -> None:
        self._clear()
        self._ctx = np.zeros(0, dtype=np.int64)
        self._trunk = []
        self._nodes = {}
        self._lp = {}

    def _keep_leading_rows(self, keep: np.ndarray) -> None:
        """After a stopped pass: keep the trunk rows that the pass kept in place (a
        prefill chunk keeps the whole cached trunk), drop everything else."""
        rows = min(prefix_run(np.asarray(keep)), len(self._ctx))
        if rows == 0 or not self._keep_rows(rows):
            self._forget()
            return
        dropped = len(self._ctx) - rows
        self._trunk = self._trunk[: len(self._trunk) - dropped] if dropped else self._trunk
        self._ctx = self._ctx[:rows]
        self._nodes = {}
        self._lp = {row: v for row, v in self._lp.items() if row < rows}

    def _commit(self, ctx: np.ndarray, trunk: list[int], plan: _Plan, new_lp: np.ndarray) -> None:
        """Update bookkeeping after a successful `_apply`."""
        step = plan.step
        lp = {row: self._lp[old] for row, old in plan.lp_rows.items()}
        new_lp.setflags(write=False)  # rows are handed out as they are (logprob_rows)
        for q, values in zip(step.logit_queries, new_lp, strict=True):
            lp[int(plan.new_rows[q])] = values
        oldest = len(ctx) - self.trunk_logits_window
        self._lp = {row: v for row, v in lp.items() if row >= oldest}
        self._ctx, self._trunk = ctx, trunk
        self._nodes = {p: len(ctx) + j for j, p in enumerate(plan.nodes)}
        self.inference_tokens += len(step.tokens)

    def _context(self, trunk: list[int]) -> tuple[np.ndarray, int]:
        """(bos? + trunk as checked int64 ids, how many leading ids the cached context shares).

        A trunk is about a thousand tokens and a keystroke changes its end: converting and
        checking the whole list cost more than the rest of the bookkeeping, so only the ids
        after the common prefix with the cached trunk (checked when it was cached) are.
        """
        shared = _list_lcp(self._trunk, trunk)
        tail = tuple(trunk[shared:])  # a few ids: checked in Python, cheaper than numpy here
        if _is_id_tuple(tail, self.input_vocab_size):
            new = np.array(tail, dtype=np.int64)
        else:
            new = self._check_ids(np.asarray(tail), "trunk")
        if len(self._ctx):  # starts with bos? + self._trunk
            head = self._ctx[: len(self._ctx) - len(self._trunk) + shared]
            lcp = len(head)
        else:
            head = np.zeros(0, dtype=np.int64)
            if self.bos_id is not None:
                head = np.asarray([self.bos_id], dtype=np.int64)
            lcp = 0
        return (np.concatenate([head, new]) if len(new) else head), lcp

    def _path(self, path: Sequence[int]) -> TokenPath:
        if _is_id_tuple(path, self.input_vocab_size):  # fast path: already a valid tuple
            return path
        ids = self._check_ids(np.asarray(path), "path")
        return tuple(int(t) for t in ids)

    def _check_ids(self, ids: np.ndarray, what: str) -> np.ndarray:
        """Validated int64 copy of a 1-D sequence of token ids."""
        if ids.size == 0:
            return np.zeros(0, dtype=np.int64)
        if ids.ndim != 1 or ids.dtype.kind not in "iu":
            raise ValueError(f"{what} must be a flat sequence of integer token ids")
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= self.input_vocab_size:
            bad = lo if lo < 0 else hi
            raise ValueError(
                f"token id {bad} in {what} is out of range [0, {self.input_vocab_size})"
            )
        return ids.astype(np.int64)


def _is_id_tuple(path: object, vocab: int) -> bool:
    """True if `path` is a tuple of Python ints in [0, vocab).

    Example:
        >>> _is_id_tuple((1, 2), 3), _is_id_tuple((1, 3), 3), _is_id_tuple([1], 3)
        (True, False, False)
    """
    if not isinstance(path, tuple) or not all(type(t) is int for t in path):
        return False
    return not path or (min(path) >= 0 and max(path) < vocab)


# --------------------------------------------------------------------------------------
# A deterministic fake model (numpy only)
# --------------------------------------------------------------------------------------

_HASH_MULT = np.uint64(0x9E3779B97F4A7C15)


def _context_hash(tokens: np.ndarray) -> int:
    """Polynomial hash of a token sequence mod 2**64 (order-sensitive, length-sensitive).

    Example:
        >>> _context_hash(np.array([1, 2])) != _context_hash(np.array([2, 1]))
        True
    """
    n = len(tokens)
    powers = np.cumprod(np.full(n, _HASH_MULT, dtype=np.uint64), dtype=np.uint64)  # [n]
    with np.errstate(over="ignore"):
        terms = (tokens.astype(np.uint64) + np.uint64(1)) * powers
    return int(terms.sum(dtype=np.uint64))


class FakeModel:
    """Deterministic stand-in for a language model: logits from a hash of the context.

    The next-token log-probs after a context are ``log_softmax(scale * z)`` with
    ``z ~ N(0, 1)^vocab`` drawn from a generator seeded by ``(seed, hash(context))``:
    any two contexts get unrelated distributions, the same context always the same.

    Example:
        >>> m = FakeModel(10, seed=3)
        >>> np.allclose(m.sequence_logprobs([4, 5])[1], m.next_logprobs([4, 5]))
        True
    """

    def __init__(self, vocab_size: int, seed: int = 0, scale: float = 2.0) -> None:
        self.vocab_size = int(vocab_size)
        self.seed = int(seed)
        self.scale = float(scale)

    def next_logprobs(self, context: Sequence[int]) -> np.ndarray:
        """float64 [vocab_size]: the distribution after `context` (must be non-empty)."""
        ctx = np.asarray(context, dtype=np.int64)
        if len(ctx) == 0:
            raise ValueError("the fake model needs a non-empty context")
        return self._logprobs_for_hash(_context_hash(ctx))

    def sequence_logprobs(self, tokens: Sequence[int]) -> np.ndarray:
        """float64 [len(tokens), vocab_size]: row i is the distribution after tokens[: i + 1]."""
        ctx = np.asarray(tokens, dtype=np.int64)
        rows = [self.next_logprobs(ctx[: i + 1]) for i in range(len(ctx))]
        return np.stack(rows) if rows else np.zeros((0, self.vocab_size))

    def session(self, bos_id: int | None = None, trunk_logits_window: int = 8) -> FakeSession:
        """A new `FakeSession` over this model."""
        return FakeSession(self, bos_id=bos_id, trunk_logits_window=trunk_logits_window)

    def _logprobs_for_hash(self, h: int) -> np.ndarray:
        rng = np.random.default_rng((self.seed, h))
        logits = self.scale * rng.standard_normal(self.vocab_size)  # [V]
        logits -= logits.max()
        return logits - np.log(np.exp(logits).sum())


class FakeSession(TreeScoringSession):
    """`TreeScoringSession` over a `FakeModel`: a "cache" of (token, position) rows.

    Like a real transformer, the fake sees only what the attention mask lets it
    see: the context of a new token is the tokens of the rows it attends to,
    sorted by position id. A wrong mask or position therefore gives wrong
    log-probs here too, and a mask that is not one row per position 0..p raises
    AssertionError.

    Example:
        >>> s = FakeModel(30).session()
        >>> lp = s.logprobs([1, 2], [(3,)])
        >>> np.allclose(lp[0], FakeModel(30).next_logprobs([1, 2, 3]))
        True
    """

    def __init__(
        self, model: FakeModel, bos_id: int | None = None, trunk_logits_window: int = 8
    ) -> None:
        super().__init__(model.vocab_size, bos_id, None, trunk_logits_window)
        self.model = model
        self._tokens = np.zeros(0, dtype=np.int64)  # [rows] token of each cache row
        self._positions = np.zeros(0, dtype=np.int64)  # [rows] position id of each cache row

    def cache_len(self) -> int:
        """Rows held by the fake cache."""
        return len(self._tokens)

    def _clear(self) -> None:
        self._tokens = np.zeros(0, dtype=np.int64)
        self._positions = np.zeros(0, dtype=np.int64)

    def _apply(self, step: ForwardStep) -> np.ndarray:
        tokens = np.concatenate([self._tokens[step.keep], step.tokens])  # [K+Q]
        positions = np.concatenate([self._positions[step.keep], step.positions])  # [K+Q]
        mask = step.attention_mask()  # [Q, K+Q]
        n_keep = len(step.keep)
        out = [self._score(mask[q], tokens, positions, n_keep + int(q)) for q in step.logit_queries]
        self._tokens, self._positions = tokens[step.order], positions[step.order]
        return np.stack(out) if out else np.zeros((0, self.vocab_size))

    def _score(
        self, visible: np.ndarray, tokens: np.ndarray, positions: np.ndarray, own: int
    ) -> np.ndarray:
        """Log-probs after the context that row `own` sees: visible rows sorted by position."""
        rows = np.flatnonzero(visible)
        rows = rows[np.argsort(positions[rows], kind="stable")]
        if not np.array_equal(positions[rows], np.arange(len(rows))) or rows[-1] != own:
            raise AssertionError(
                f"row {own} sees positions {positions[rows].tolist()}: not a single context"
            )
        return self.model._logprobs_for_hash(_context_hash(tokens[rows]))
