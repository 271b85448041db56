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
deterministic `FakeSession` (engine/model/fake.py: numpy only, for tests of higher
layers) and the Hugging Face `HFSession` (engine/model/hf_backend.py), so both count
inference tokens and cache rows identically. The plan of one call (which old rows
survive, which tokens are evaluated, the tree mask: `ForwardStep`) is computed in
engine/model/forward_plan.py.

Example:
    >>> from midword.engine.model.fake import FakeModel
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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from ..errors import BackendError, ForwardStopped
from .forward_plan import ForwardStep, HeldKey, TokenPath, _list_lcp, _Plan, _Planner
from .kvcache import prefix_run

__all__ = [
    "BackendError",
    "ForwardDone",
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
        >>> from midword.engine.model.fake import FakeModel
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
# The shared session
# --------------------------------------------------------------------------------------


_PINNED_NODES = 4  # a wide tree's nodes beyond these are not pinned: 1 MB a row at 128k


class TreeScoringSession(ABC):
    """Bookkeeping shared by all backends; subclasses implement `_apply` and the cache.

    State between calls (canonical layout): cache rows 0..T-1 hold ``bos? + trunk``
    in order, rows T.. hold the distinct trie nodes of the last call's paths,
    parents before children. Log-probs are remembered for every trie-node row and
    for the last `trunk_logits_window` trunk rows, so a path asked again, a trunk
    that grows into a trie node, or a short backspace costs no model call. A row
    whose K/V is cached but whose log-probs are not (e.g. the trunk end after a
    long backspace) is evaluated again and counted in `inference_tokens`.

    A backend that sets `hold_last_tree` also keeps the pinned *nodes* while the trunk
    grows past them (held rows, after the nodes): on the keystroke after a completion,
    the last tree's nodes are asked again, and their rows and log-probs are still there.

    Subclasses must call `super().__init__` and implement `_apply`, `_clear` and
    `cache_len`.
    """

    hold_last_tree = False

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
        self._pinned: set[int] = set()  # rows of the last tree: their _lp outlives the window
        # pinned nodes of earlier trees that the cache keeps though no call asks them (on
        # backends that `hold_last_tree`): (rows of _ctx the path hangs after, path) -> row
        self._held: dict[HeldKey, int] = {}

    # -- public API -----------------------------------------------------------------------

    def logprobs(self, trunk: Sequence[int], paths: Sequence[TokenPath]) -> np.ndarray:
        """float64 [len(paths), vocab_size]: log-softmax after ``bos? + trunk + path``.

        Raises ValueError for token ids out of range and for the path () when
        there is no context at all (empty trunk and no BOS).

        Example:
            >>> from midword.engine.model.fake import FakeModel
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
            >>> from midword.engine.model.fake import FakeModel
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
            self._ctx,
            self._nodes,
            set(self._lp),
            ctx,
            wanted,
            self.trunk_logits_window,
            lcp,
            self._held,
            self._pinned if self.hold_last_tree else None,
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
            >>> from midword.engine.model.fake import FakeModel
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
        """bos? + trunk + distinct trie nodes of the last call + held rows: what
        `cache_len` must be."""
        return len(self._ctx) + len(self._nodes) + len(self._held)

    def cached_contexts(self) -> set[tuple[int, ...]]:
        """The absolute context (bos? + tokens) of every cached row: what tests check the
        cost of a call against.

        Example:
            >>> from midword.engine.model.fake import FakeModel
            >>> s = FakeModel(20).session(bos_id=0)
            >>> _ = s.logprobs([3], [(4, 5)])
            >>> sorted(s.cached_contexts())
            [(0,), (0, 3), (0, 3, 4), (0, 3, 4, 5)]
        """
        ctx = tuple(int(t) for t in self._ctx)
        rows = {ctx[: i + 1] for i in range(len(ctx))} | {ctx + p for p in self._nodes}
        return rows | {ctx[:anchor] + p for anchor, p in self._held}

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

    def _keep_rows(self, rows: int) -> int:
        """Cut the backend's cache to its first ``rows`` rows, or fewer (after a stopped
        pass); returns how many it kept, 0 when it cannot (the session starts afresh)."""
        return 0

    # -- internals ------------------------------------------------------------------------

    def _forget(self) -> None:
        self._clear()
        self._ctx = np.zeros(0, dtype=np.int64)
        self._trunk = []
        self._nodes = {}
        self._lp = {}
        self._pinned = set()
        self._held = {}

    def _keep_leading_rows(self, keep: np.ndarray) -> None:
        """After a stopped pass: keep the trunk rows that the pass kept in place (a
        prefill chunk keeps the whole cached trunk), drop everything else."""
        rows = min(prefix_run(np.asarray(keep)), len(self._ctx))
        rows = self._keep_rows(rows) if rows else 0
        if not rows:
            self._forget()
            return
        dropped = len(self._ctx) - rows
        self._trunk = self._trunk[: len(self._trunk) - dropped] if dropped else self._trunk
        self._ctx = self._ctx[:rows]
        self._nodes = {}
        self._held = {}
        self._lp = {row: v for row, v in self._lp.items() if row < rows}
        self._pinned = {row for row in self._pinned if row < rows}

    def _commit(self, ctx: np.ndarray, trunk: list[int], plan: _Plan, new_lp: np.ndarray) -> None:
        """Update bookkeeping after a successful `_apply`."""
        step = plan.step
        lp = {row: self._lp[old] for row, old in plan.lp_rows.items()}
        new_lp.setflags(write=False)  # rows are handed out as they are (logprob_rows)
        for q, values in zip(step.logit_queries, new_lp, strict=True):
            lp[int(plan.new_rows[q])] = values
        self._ctx, self._trunk = ctx, trunk
        self._nodes = {p: len(ctx) + j for j, p in enumerate(plan.nodes)}
        first_held = len(ctx) + len(plan.nodes)
        self._held = {key: first_held + i for i, key in enumerate(plan.held)}
        if plan.nodes:  # a tree: pin its trunk end and its first nodes
            self._pinned = {
                *range(len(ctx) - 1, len(ctx)),
                *list(self._nodes.values())[:_PINNED_NODES],
            }
        else:  # the rows of the last tree that stayed (the trunk may have grown into them)
            n_prefix = len(step.keep) - len(plan.moved)  # kept in place: rows 0..n_prefix-1
            self._pinned = {
                old if old < n_prefix else plan.moved[old]
                for old in self._pinned
                if old < n_prefix or old in plan.moved
            }
        oldest = len(ctx) - self.trunk_logits_window
        self._lp = {row: v for row, v in lp.items() if row >= oldest or row in self._pinned}
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
