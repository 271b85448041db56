"""A scoring session over a vLLM server: which rows a tree needs, asked as cheaply as they can be.

`VLLMSession` is the `ScoringSession` (engine/model/backend.py) of the team-server backend: it
turns ``logprobs(trunk, paths)`` into row requests of its `VLLMModel`
(engine/remote/model.py), sending ``bos? + context`` as token ids within the model's window
(`VLLMSession.prompt`), and keeps the rows it got for contexts asked again. A caller that
reads only a few entries of a row says so with `VLLMSession.expect` (`tree_reads` works
them out for a covering tree), and those rows go as chosen ids (at most 128 per request,
`group_by_ids`), or as the server's top ids for a greedy search, instead of whole rows.

The session reads its model through `RowSource`, so this module does not import the
model's.

Example:
    >>> tree = type("T", (), {"trunk": [5], "complete": (), "nodes": [
    ...     type("N", (), {"path": (), "leaves": [9, 3]})(),
    ...     type("N", (), {"path": (7,), "leaves": [4]})()]})()
    >>> reads = tree_reads(tree, events=None)
    >>> {ctx: (leaves.tolist(), exact.tolist()) for ctx, (leaves, exact) in reads.items()}
    {(5,): ([3, 9], [7]), (5, 7): ([4], [])}
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ..model.backend import TokenPath
from .wire import MAX_CHOSEN_IDS

if TYPE_CHECKING:
    from ..tree.vct import Tree

__all__ = [
    "CHOSEN_ROWS_KEPT",
    "GREEDY_TOP_K",
    "ROW_CACHE_BYTES",
    "NodeReads",
    "RowSource",
    "VLLMSession",
    "group_by_ids",
    "tree_reads",
]

ROW_CACHE_BYTES = 64 << 20  # full rows kept by a session for contexts asked again
CHOSEN_ROWS_KEPT = 256
GREEDY_TOP_K = 20  # ids a greedy search asks of a node with many leaves (see VLLMSession.expect)
NodeReads = dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]]  # context -> (leaves, exact)


class RowSource(Protocol):
    """What a session asks of its model (`VLLMModel`): its sizes and three kinds of rows,
    float64 [vocab_size] after each prompt, ``-inf`` where not asked."""

    vocab_size: int
    window: int  # the longest prompt a scoring request sends

    def full_rows(self, prompts: list[list[int]]) -> list[np.ndarray]: ...

    def chosen_rows(self, prompts: list[list[int]], ids: Sequence[int]) -> list[np.ndarray]: ...

    def top_rows(self, prompts: list[list[int]], k: int) -> list[np.ndarray]: ...


class VLLMSession:
    """`ScoringSession` over a `VLLMModel`: ``bos? + trunk + path`` sent as token ids.

    Rows are kept (least recently used out, `ROW_CACHE_BYTES` in all) for contexts asked
    again: the leaf search asks every node it entered at each step, and the trunk may
    grow into a node. `expect` tells it which entries of which rows the caller reads,
    so those nodes go as chosen ids. ``inference_tokens`` counts the rows the server
    evaluated (a row is one new token for the server: its prefix cache holds the rest).
    """

    def __init__(self, model: RowSource, bos_id: int | None = None) -> None:
        self.model = model
        self.vocab_size = model.vocab_size
        self.bos_id = bos_id
        self.inference_tokens = 0
        # rows by the prompt sent (bos? + the context within the window)
        self._rows: OrderedDict[tuple[int, ...], np.ndarray] = OrderedDict()  # full rows
        self._chosen: dict[tuple[int, ...], tuple[frozenset[int], np.ndarray]] = {}
        self._needs: dict[tuple[int, ...], np.ndarray] = {}  # by context (see expect)
        self._wide: NodeReads = {}  # by context: rows read for their likeliest leaf only
        self._top: OrderedDict[tuple[int, ...], np.ndarray] = OrderedDict()  # by prompt
        self._cut = 0  # context tokens left out in front (see prompt)

    # ------------------------------------------------------------------ protocol
    def logprobs(self, trunk: Sequence[int], paths: Sequence[TokenPath]) -> np.ndarray:
        rows = self.logprob_rows(trunk, paths)
        return np.stack(rows) if rows else np.zeros((0, self.vocab_size))

    def logprob_rows(self, trunk: Sequence[int], paths: Sequence[TokenPath]) -> list[np.ndarray]:
        """One float64 [vocab] row per path (read-only; sparse where `expect` allowed)."""
        base = tuple(int(t) for t in trunk)
        if not base and self.bos_id is None and () in paths:
            raise ValueError("path () needs a context: the trunk is empty and there is no bos_id")
        contexts = [base + tuple(int(t) for t in p) for p in paths]
        prompts = {ctx: tuple(self.prompt(ctx)) for ctx in dict.fromkeys(contexts)}
        found: dict[tuple[int, ...], np.ndarray] = {}
        full: list[tuple[int, ...]] = []
        chosen: list[tuple[int, ...]] = []
        wide: list[tuple[int, ...]] = []
        for ctx, prompt in prompts.items():
            row = self._cached(prompt, self._needs.get(ctx))
            if row is None and ctx in self._wide:
                row = self._top.get(prompt)
            if row is not None:
                found[ctx] = row
            else:
                (chosen if ctx in self._needs else wide if ctx in self._wide else full).append(ctx)
        found.update(self._fetch_top(wide, prompts))
        found.update(self._fetch_full(full, prompts))
        found.update(self._fetch_chosen(chosen, prompts))
        return [found[ctx] for ctx in contexts]

    def cache_len(self) -> int:
        """Rows held by this session (the server's KV cache is its own)."""
        return len(self._rows) + len(self._chosen)

    def reset(self) -> None:
        self._rows.clear()
        self._chosen.clear()
        self._top.clear()

    # ------------------------------------------------------------------ chosen ids
    @contextlib.contextmanager
    def expect(self, reads: NodeReads, greedy: bool = False) -> Iterator[None]:
        """Within the block, the row after context ``trunk + path`` (a key of ``reads``)
        is read only at the ids ``reads[key]`` names: it is fetched as chosen ids when
        that is at most 128 ids, else as a full row.

        ``greedy``: the caller only looks for the likeliest leaf of such a row (and reads
        its exact ids exactly): a row with more than 128 ids comes as the server's top
        `GREEDY_TOP_K` plus the exact ids, and as a full row only when no leaf is among
        the top ones (then some leaf outside them could be the likeliest).
        """
        for ctx, (leaves, exact) in reads.items():
            ids = np.union1d(leaves, exact)
            if len(ids) <= MAX_CHOSEN_IDS:
                self._needs[ctx] = ids
            elif greedy:
                self._wide[ctx] = (leaves, exact)
        try:
            yield
        finally:
            self._needs, self._wide = {}, {}

    # ------------------------------------------------------------------ the prompt
    def prompt(self, context: Sequence[int]) -> list[int]:
        """``bos? + context`` within the model's window: a longer context loses its oldest
        tokens, in steps of half the window, and the cut stays where it is while it is
        enough, so consecutive prompts share a prefix for the server's prefix cache.

        Example (a window of 8, BOS 0):
            >>> s = VLLMSession.__new__(VLLMSession)
            >>> s.model, s.bos_id, s._cut = type("M", (), {"window": 8})(), 0, 0
            >>> s.prompt([1, 2, 3]), s.prompt(list(range(1, 10))), s.prompt(list(range(1, 11)))
            ([0, 1, 2, 3], [0, 4, 5, 6, 7, 8, 9], [0, 4, 5, 6, 7, 8, 9, 10])
        """
        head = [] if self.bos_id is None else [int(self.bos_id)]
        room = self.model.window - len(head)
        excess = len(context) - room
        if excess <= 0:
            self._cut = 0
            return head + [int(t) for t in context]
        if self._cut < excess or self._cut >= len(context):
            step = max(1, room // 2)
            self._cut = min(-(-excess // step) * step, len(context) - 1)
        return head + [int(t) for t in context[self._cut :]]

    # ------------------------------------------------------------------ rows
    def _cached(self, prompt: tuple[int, ...], need: np.ndarray | None) -> np.ndarray | None:
        row = self._rows.get(prompt)
        if row is not None:
            self._rows.move_to_end(prompt)
            return row
        chosen = self._chosen.get(prompt)
        if chosen is not None and need is not None and chosen[0].issuperset(need.tolist()):
            return chosen[1]
        return None

    def _fetch_full(
        self, contexts: list[tuple[int, ...]], prompts: dict[tuple[int, ...], tuple[int, ...]]
    ) -> dict[tuple[int, ...], np.ndarray]:
        if not contexts:
            return {}
        rows = self.model.full_rows([list(prompts[c]) for c in contexts])
        self.inference_tokens += len(contexts)
        for ctx, row in zip(contexts, rows, strict=True):
            row.setflags(write=False)
            self._rows[prompts[ctx]] = row
        limit = max(4, ROW_CACHE_BYTES // (8 * self.vocab_size))
        while len(self._rows) > limit:
            self._rows.popitem(last=False)
        return dict(zip(contexts, rows, strict=True))

    def _fetch_top(
        self, contexts: list[tuple[int, ...]], prompts: dict[tuple[int, ...], tuple[int, ...]]
    ) -> dict[tuple[int, ...], np.ndarray]:
        """Rows for a greedy search: the top ids and the exact ids; a full row where no
        leaf made the top (see `expect`)."""
        if not contexts:
            return {}
        rows = self.model.top_rows([list(prompts[c]) for c in contexts], GREEDY_TOP_K)
        exact = {c: self._wide[c][1] for c in contexts if len(self._wide[c][1])}
        by_ctx = dict(zip(contexts, rows, strict=True))
        for group, ids in group_by_ids(list(exact), exact):
            values = self.model.chosen_rows([list(prompts[c]) for c in group], ids)
            for ctx, row in zip(group, values, strict=True):
                by_ctx[ctx][ids] = row[ids]
        self.inference_tokens += len(contexts)
        missing = [c for c in contexts if not np.isfinite(by_ctx[c][self._wide[c][0]]).any()]
        out = {c: row for c, row in by_ctx.items() if c not in missing}
        for ctx, row in out.items():
            row.setflags(write=False)
            self._top[prompts[ctx]] = row
        while len(self._top) > CHOSEN_ROWS_KEPT:
            self._top.popitem(last=False)
        out.update(self._fetch_full(missing, prompts))
        return out

    def _fetch_chosen(
        self, contexts: list[tuple[int, ...]], prompts: dict[tuple[int, ...], tuple[int, ...]]
    ) -> dict[tuple[int, ...], np.ndarray]:
        """Rows by chosen ids: nodes grouped so that each request asks at most 128 ids."""
        out: dict[tuple[int, ...], np.ndarray] = {}
        for group, ids in group_by_ids(contexts, self._needs):
            rows = self.model.chosen_rows([list(prompts[c]) for c in group], ids)
            self.inference_tokens += len(group)
            for ctx, row in zip(group, rows, strict=True):
                row.setflags(write=False)
                self._chosen[prompts[ctx]] = (frozenset(ids), row)
                out[ctx] = row
        while len(self._chosen) > CHOSEN_ROWS_KEPT:  # per keystroke: keep the latest only
            del self._chosen[next(iter(self._chosen))]
        return out


def group_by_ids(
    keys: list[tuple[int, ...]], needs: dict[tuple[int, ...], np.ndarray]
) -> list[tuple[list[tuple[int, ...]], list[int]]]:
    """Keys in groups whose needed ids together are at most `MAX_CHOSEN_IDS`.

    Example:
        >>> needs = {(1,): np.arange(100), (2,): np.arange(50, 120), (3,): np.arange(200, 300)}
        >>> [(g, len(ids)) for g, ids in group_by_ids([(1,), (2,), (3,)], needs)]
        [([(1,), (2,)], 120), ([(3,)], 100)]
    """
    groups: list[tuple[list[tuple[int, ...]], set[int]]] = []
    for key in keys:
        need = set(needs[key].tolist())
        for members, ids in groups:
            if len(ids | need) <= MAX_CHOSEN_IDS:
                members.append(key)
                ids |= need
                break
        else:
            groups.append(([key], need))
    return [(members, sorted(ids)) for members, ids in groups]


def tree_reads(tree: Tree, events: np.ndarray | None) -> NodeReads:
    """What a sampler reads of each node's row, keyed by ``trunk + path``: (the ids of its
    leaves, the ids it reads exactly: its children's tokens), with the end-of-text
    events at ``tree.complete`` in both (what `ByteSampler` and `LazyTree` read with an
    identity transform)."""
    trunk = tuple(int(t) for t in tree.trunk)
    children: dict[tuple[int, ...], list[int]] = {}
    for node in tree.nodes:
        if node.path:
            children.setdefault(tuple(node.path[:-1]), []).append(int(node.path[-1]))
    reads: NodeReads = {}
    no_events = np.zeros(0, dtype=np.int64)
    for node in tree.nodes:
        path = tuple(node.path)
        ends = events if events is not None and path == tree.complete else no_events
        leaves = np.concatenate([np.asarray(node.leaves, dtype=np.int64), ends])
        exact = np.concatenate([np.asarray(children.get(path, []), dtype=np.int64), ends])
        reads[trunk + path] = (np.unique(leaves), np.unique(exact))
    return reads
