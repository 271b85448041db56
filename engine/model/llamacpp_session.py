"""The llama.cpp scoring session: `TreeScoringSession`'s plan on llama.cpp's KV cells.

llama.cpp keeps no rows in an order we choose; it keeps *cells*, each a token's K/V at
a position, tagged with the set of sequence ids that may attend to it. A token of a
batch attends to the cells of its *first* sequence id at positions up to its own. So
a covering tree maps onto cells like this (docs/design.md, "trunk and trie"):

* every row of the session (a trunk token, or a node of the trie of paths) is one cell
  at its depth in its context;
* each leaf of the trie (a node no other node extends) gets its own sequence id; a
  node's cell carries the ids of every leaf below it, and a trunk cell carries the
  trunk's own id and every leaf id. A branch's id is then one context, the trunk plus
  the nodes down to its leaf, with one cell per position, as llama.cpp requires;
* all new tokens (trunk and nodes) go in one batch (`LlamaContext.decode`, in slices of
  at most 63 rows); new trunk tokens list the trunk id first (they see the trunk), a
  node lists one of its leaves first.

Cells form a stack: rows sit in cells 0..R-1 in the order they were evaluated (parents
before children), so every context's cells lie in position order. That makes a tree
row bitwise equal to the plain sequence's: flash attention sums a query's visible
cells one by one in cell order (masked cells skipped), just as it sums the cells
0..n-1 of a plain sequence. Out of order, the sums round differently, and quantized
activations amplify that (measured: 0.4 in a tail log-probability on SmolLM2 Q4_1).

Between calls, the kept rows (the plan's ``keep``) below the first dropped row's cell
stay; kept rows above it are evaluated again on top of them, with the new tokens (and
counted in ``inference_tokens``). Typing keeps the trunk and the nodes scored first.
Staying cells are re-tagged: each is found by (one id it has, its position) and the new
ids are added with ``llama_memory_seq_cp`` (which, in a unified cache, only adds tags);
then the old ids are removed with ``llama_memory_seq_rm``, which frees every cell no new
id reached, and llama.cpp fills free cells from the lowest up. New ids are always ids
not in use, so an addition never meets a cell of the same id at the same position. No
K row is ever shifted: a position never changes. A step with no tree whose kept rows all
stay in their cells and roles (a generated token) skips the re-tagging: its rows go on
top under the trunk's id (`LlamaCppSession._apply_trunk`).

The session holds the last tree (`TreeScoringSession.hold_last_tree`): while a
completion grows the trunk past the tree's nodes, they keep their cells and ids, and
the next keystroke asks them again for free. A leaf's id then tags the trunk's cells
below the node it hangs from only (`_Layout.anchor`), so each id stays one context.

A tree with more leaves than free sequence ids is scored in several decodes, a group of
leaves at a time (shared nodes evaluated once per group), and then only the trunk stays
cached (`LlamaCppSession.logprob_rows` drops the nodes from the bookkeeping).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from .backend import TokenPath, TreeScoringSession
from .forward_plan import ForwardStep
from .kvcache import prefix_run


class LlamaModelLike(Protocol):
    """What a session asks of its `~.llamacpp.LlamaCppModel` (that module opens sessions,
    so this one does not import it): the vocabulary sizes and a new context."""

    vocab_size: int
    input_vocab_size: int

    def new_context(self) -> Any: ...


__all__ = ["LlamaCppSession"]


@dataclass
class _Layout:
    """The rows of one step before its final `order`: kept rows, then new tokens.

    Example (trunk [5] cached, new nodes (7,) and (7, 8) and (9,)):
        >>> step = ForwardStep(keep=np.arange(1), tokens=np.array([7, 8, 9]),
        ...     positions=np.array([1, 2, 1]), row_parent=np.array([-1, 0, 1, 0]),
        ...     trunk_rows=np.arange(1), logit_queries=np.arange(3), order=np.arange(4))
        >>> lay = _Layout.of(step, np.array([0]), np.array([5]))
        >>> lay.leaves, lay.below, lay.anchor
        ([2, 3], {2: [0], 1: [0], 3: [1]}, [1, 1])
    """

    pos: np.ndarray  # [K+Q] position of each row
    tok: np.ndarray  # [K+Q] token of each row
    is_trunk: np.ndarray  # [K+Q] bool
    leaves: list[int]  # trie rows no trie row extends, ascending
    below: dict[int, list[int]]  # trie row -> indices into `leaves` of the leaves under it
    # [leaves] position of the top trie row above each leaf: the leaf's context holds the
    # trunk's rows below it only (a held row hangs off an earlier trunk row)
    anchor: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, step: ForwardStep, old_pos: np.ndarray, old_tok: np.ndarray) -> _Layout:
        pos = np.concatenate([old_pos[step.keep], step.positions]).astype(np.int64)
        tok = np.concatenate([old_tok[step.keep], step.tokens]).astype(np.int64)
        is_trunk = np.zeros(len(pos), dtype=bool)
        is_trunk[step.trunk_rows] = True
        trie = np.flatnonzero(~is_trunk)
        has_child = np.zeros(len(pos), dtype=bool)
        parents = step.row_parent[trie]
        has_child[parents[parents >= 0]] = True
        leaves = [int(r) for r in trie if not has_child[r]]
        below: dict[int, list[int]] = {}
        anchor = []
        for j, leaf in enumerate(leaves):
            row = top = leaf
            while row >= 0 and not is_trunk[row]:
                below.setdefault(row, []).append(j)
                row, top = int(step.row_parent[row]), row
            anchor.append(int(pos[top]))
        return cls(pos, tok, is_trunk, leaves, below, anchor)

    def trunk_ids(self, position: int, trunk_id: int, leaf_ids: list[int]) -> list[int]:
        """The ids of a trunk cell at `position`: the trunk's, and every leaf's whose
        context reaches past it."""
        return [trunk_id, *(s for s, a in zip(leaf_ids, self.anchor, strict=True) if a > position)]


def _first_ids(lay: _Layout, trunk_id: int, leaf_ids: list[int]) -> np.ndarray:
    """int64 [K+Q]: the sequence id each row attends by (the first of its ids): the
    trunk's for trunk rows, the first leaf's below it for a node. One array for the
    trunk, a loop over the few nodes only (a Python loop over a 1,000-row trunk cost
    2.5 ms a generated token).

    Example (trunk rows 0-1, nodes 2 and 3 under leaves 0 and 1):
        >>> lay = _Layout(np.arange(4), np.arange(4), np.array([1, 1, 0, 0], bool),
        ...     [2, 3], {2: [0], 3: [1]})
        >>> _first_ids(lay, 0, [5, 6]).tolist()
        [0, 0, 5, 6]
    """
    first = np.full(len(lay.pos), trunk_id, dtype=np.int64)
    for row, under in lay.below.items():
        first[row] = leaf_ids[under[0]]
    return first


class LlamaCppSession(TreeScoringSession):
    """`ScoringSession` over a `LlamaCppModel`: one llama.cpp context, the tree's branches
    as sequences (see module docstring). `close` frees the context.

    Example:
        >>> session = llama_model.session(bos_id=1)                 # doctest: +SKIP
        >>> session.logprobs([5, 6], [(), (7,), (7, 8)]).shape      # doctest: +SKIP
        (3, 49152)
        >>> session.cache_len()                                     # doctest: +SKIP
        5
    """

    hold_last_tree = True  # a held node costs a cell and, on a tree's step, an id

    def __init__(
        self, model: LlamaModelLike, bos_id: int | None = None, trunk_logits_window: int = 8
    ) -> None:
        super().__init__(model.vocab_size, bos_id, model.input_vocab_size, trunk_logits_window)
        self.model = model
        self.llama = model.new_context()
        self.decodes = 0  # llama_decode calls made (a wide tree takes several)
        self._trimmed = False  # the last call kept only the trunk cached (a wide tree)
        self._reset_cells()

    # -- public ---------------------------------------------------------------------------

    def cache_len(self) -> int:
        """Cells this session holds in llama.cpp's cache (the trunk and the kept nodes)."""
        return len(self._pos)

    def logprob_rows(self, trunk: Sequence[int], paths: Sequence[TokenPath]) -> list[np.ndarray]:
        """`TreeScoringSession.logprob_rows`; after a tree too wide to keep, the nodes are
        forgotten (only the trunk stayed cached)."""
        rows = super().logprob_rows(trunk, paths)
        if self._trimmed:
            self._trimmed = False
            self._keep_leading_rows(np.arange(len(self._ctx)))
        return rows

    @contextmanager
    def stop_inside_forward(self, should_stop: Callable[[], bool]) -> Iterator[None]:
        """`TreeScoringSession.stop_inside_forward`: llama.cpp asks ``should_stop()``
        between the operations of its compute graph (its abort callback) and the decode
        returns early; the session then raises `ForwardStopped` and keeps the trunk rows
        that were cached before the call."""

        def check(_data: object) -> bool:
            try:
                return bool(should_stop())
            except Exception:  # an exception cannot cross llama.cpp: stop instead
                return True

        self.llama.set_abort(self.llama.ll.ggml_abort_callback(check))
        try:
            yield
        finally:
            self.llama.set_abort(None)

    def close(self) -> None:
        """Free the llama.cpp context (the session cannot be used afterwards)."""
        self.llama.close()

    # -- TreeScoringSession hooks ---------------------------------------------------------

    def _clear(self) -> None:
        self.llama.clear()
        self._reset_cells()

    def _reset_cells(self) -> None:
        self._pos = np.zeros(0, dtype=np.int64)  # [R] position of each row
        self._tok = np.zeros(0, dtype=np.int64)  # [R] token of each row
        self._addr = np.zeros(0, dtype=np.int64)  # [R] a sequence id the row's cell has
        self._cell = np.zeros(0, dtype=np.int64)  # [R] the row's cell index in llama.cpp
        self._ids: set[int] = set()  # sequence ids with cells

    def _keep_rows(self, rows: int) -> int:
        """Keep rows 0..rows-1 (a chain: the trunk before a stopped call), or the first of
        them, and nothing else; returns how many stayed.

        They are the ancestors of row rows-1, so the id it was found by holds them all,
        at positions 0..rows-1; every other id, and that id's later cells, go. Only the
        rows in cells 0..n-1 stay: a held node's cell can lie between trunk rows (the
        completion's tokens went on top of it), and once freed, the next rows would fill
        it below their ancestors.
        """
        if rows > len(self._pos):
            return 0
        rows = prefix_run(self._cell[:rows])
        if rows == 0:
            return 0
        keep_id = int(self._addr[rows - 1])
        for seq in self._ids - {keep_id}:
            self.llama.seq_rm(seq)
        self.llama.seq_rm(keep_id, rows, -1)
        if self.llama.seq_pos_range(keep_id) != (0, rows - 1):
            return 0
        self._pos, self._tok = np.arange(rows, dtype=np.int64), self._tok[:rows]
        self._addr = np.full(rows, keep_id, dtype=np.int64)
        self._cell = np.arange(rows, dtype=np.int64)  # the trunk's rows are cells 0..rows-1
        self._ids = {keep_id}
        return rows

    def _apply(self, step: ForwardStep) -> np.ndarray:
        lay = _Layout.of(step, self._pos, self._tok)
        stay = self._staying(step)
        kept_ids = set(self._addr[step.keep][stay].tolist())
        trunk_id = self._on_top_of_trunk(step, lay, stay)
        if trunk_id is not None:
            logprobs = self._apply_trunk(step, lay, trunk_id)
        elif 1 + len(lay.leaves) + len(kept_ids) > self.llama.n_seq_max:
            logprobs = self._apply_wide(step, lay)
        else:
            logprobs = self._apply_tree(step, lay, stay, kept_ids)
        self._pos, self._tok, self._addr, self._cell = (
            a[step.order] for a in (lay.pos, lay.tok, self._addr, self._cell)
        )
        return logprobs

    def _on_top_of_trunk(self, step: ForwardStep, lay: _Layout, stay: np.ndarray) -> int | None:
        """The trunk's id when `step` only appends trunk tokens on top of rows that all
        stay with their roles (trunk rows stay trunk rows, every trie row stays: the held
        nodes of the last tree), so no cell needs other ids; else None."""
        n_keep = len(step.keep)
        if not lay.is_trunk[n_keep:].all() or not stay.all():
            return None
        was_trunk = step.keep < len(self._ctx)  # the old layout: trunk rows first
        if not np.array_equal(was_trunk, lay.is_trunk[:n_keep]):
            return None
        if n_keep - int(was_trunk.sum()) != len(self._pos) - len(self._ctx):
            return None  # a trie row went: its ids are on cells that stay
        trunk_ids = set(self._addr[step.keep][was_trunk].tolist())
        return trunk_ids.pop() if len(trunk_ids) == 1 else None

    def _staying(self, step: ForwardStep) -> np.ndarray:
        """bool [K]: which kept rows keep their cells. Cells are a stack: rows sit in
        cells 0..R-1 in the order they were evaluated, so the first dropped row's cell
        ends the rows that stay; kept rows above it are evaluated again, on top."""
        dropped = np.ones(len(self._cell), dtype=bool)
        dropped[step.keep] = False
        cut = int(self._cell[dropped].min()) if dropped.any() else len(self._cell)
        return self._cell[step.keep] < cut

    # -- one decode -----------------------------------------------------------------------

    def _apply_tree(
        self, step: ForwardStep, lay: _Layout, stay: np.ndarray, kept_ids: set[int]
    ) -> np.ndarray:
        """Re-tag the staying cells with fresh ids, free the others, then decode the rows
        that lost their cells and every new token at once, parents first."""
        kept_cells = self._cell[step.keep][stay]
        for seq in self._ids - kept_ids:  # frees the dropped cells that only they held
            self.llama.seq_rm(seq)
        free = [s for s in range(self.llama.n_seq_max) if s not in kept_ids]
        trunk_id, leaf_ids = free[0], free[1 : 1 + len(lay.leaves)]
        ids_of = self._ids_of(lay, trunk_id, leaf_ids)
        self._retag(step, lay, ids_of, stay, [trunk_id, *leaf_ids])
        for seq in kept_ids:  # frees every cell above the staying ones
            self.llama.seq_rm(seq)
        n_keep, n_stay = len(step.keep), int(stay.sum())
        rows = np.array(
            [*np.flatnonzero(~stay).tolist(), *range(n_keep, len(lay.pos))], dtype=np.int64
        )
        # by position: llama.cpp refuses a batch whose positions go down within a sequence
        # (a kept node evaluated again, deeper than a new trunk token that shares its ids),
        # and a row's cell then lies above its ancestors' (parents have lower positions)
        rows = rows[np.argsort(lay.pos[rows], kind="stable")]
        self._pos, self._tok, self._ids = lay.pos, lay.tok, {trunk_id, *leaf_ids}
        self._addr = _first_ids(lay, trunk_id, leaf_ids)
        self._cell = np.empty(len(lay.pos), dtype=np.int64)
        self._cell[np.flatnonzero(stay)] = kept_cells
        self._cell[rows] = n_stay + np.arange(len(rows))  # llama.cpp fills free cells upwards
        again = len(rows) - len(step.tokens)  # kept rows evaluated again
        self.decodes += 1
        at = np.empty(len(lay.pos), dtype=np.int64)
        at[rows] = np.arange(len(rows))  # layout row -> its index in the batch
        outputs = at[n_keep + np.asarray(step.logit_queries, dtype=np.int64)]
        ascending = np.argsort(outputs, kind="stable")  # decode reads outputs in batch order
        rows_out = self.llama.decode(
            lay.tok[rows], lay.pos[rows], [ids_of(int(r)) for r in rows], outputs[ascending]
        )
        self.inference_tokens += again  # the base counts the new tokens
        return _in_query_order(rows_out, ascending)

    def _apply_trunk(self, step: ForwardStep, lay: _Layout, trunk_id: int) -> np.ndarray:
        """A step that only appends trunk tokens on top of rows that all stay with their
        roles (`_on_top_of_trunk`: a generated token): the new rows go on top under the
        trunk's id.
        `_apply_tree` would give the trunk a fresh id and move every cell's tag to it,
        two passes over the cells per token for nothing.

        Cells of that id above the staying rows (an old trunk's end) lose it by position,
        which frees them; the held nodes keep their cells and ids (their contexts end
        below the new tokens)."""
        n_keep = len(step.keep)
        dropped = np.ones(len(self._addr), dtype=bool)
        dropped[step.keep] = False
        if (self._addr[dropped] == trunk_id).any():
            self.llama.seq_rm(trunk_id, int(self._pos[dropped & (self._addr == trunk_id)].min()))
        rows = n_keep + np.argsort(step.positions, kind="stable")  # parents first
        outputs = np.empty(len(step.tokens), dtype=np.int64)
        outputs[rows - n_keep] = np.arange(len(rows))  # new token -> its index in the batch
        queries = outputs[np.asarray(step.logit_queries, dtype=np.int64)]
        ascending = np.argsort(queries, kind="stable")  # decode reads outputs in batch order
        self.decodes += 1
        rows_out = self.llama.decode(
            lay.tok[rows], lay.pos[rows], [[trunk_id]] * len(rows), queries[ascending]
        )
        self._cell = np.concatenate([self._cell[step.keep], np.empty(len(rows), np.int64)])
        self._cell[rows] = n_keep + np.arange(len(rows))  # llama.cpp fills free cells upwards
        self._pos, self._tok = lay.pos, lay.tok
        self._addr = np.concatenate([self._addr[step.keep], np.full(len(rows), trunk_id)])
        return _in_query_order(rows_out, ascending)

    @staticmethod
    def _ids_of(lay: _Layout, trunk_id: int, leaf_ids: list[int]) -> Callable[[int], list[int]]:
        """Row -> its sequence ids, the one it attends by first."""
        every = [trunk_id, *leaf_ids]
        lowest = min(lay.anchor, default=0)  # trunk cells below it carry every id

        def ids_of(row: int) -> list[int]:
            if not lay.is_trunk[row]:
                return [leaf_ids[j] for j in lay.below[row]]
            position = int(lay.pos[row])
            return every if position < lowest else lay.trunk_ids(position, trunk_id, leaf_ids)

        return ids_of

    def _retag(
        self,
        step: ForwardStep,
        lay: _Layout,
        ids_of: Callable[[int], list[int]],
        stay: np.ndarray,
        trunk_ids: list[int],
    ) -> None:
        """Add each staying cell's new ids, a run of trunk cells at a time (a leaf's id
        only up to its anchor: `_Layout.anchor`)."""
        n_keep = len(step.keep)
        if not stay.any():
            return
        addr, pos, trunk = self._addr[step.keep], lay.pos[:n_keep], lay.is_trunk[:n_keep] & stay
        joins = trunk[1:] & trunk[:-1] & (addr[1:] == addr[:-1]) & (pos[1:] == pos[:-1] + 1)
        starts = np.flatnonzero(np.concatenate([[True], ~joins]) & stay)
        last = np.flatnonzero(np.append(~joins, True))  # rows that end a run
        ends = last[np.searchsorted(last, starts)] + 1
        ends_at = [0, *lay.anchor]  # of trunk_ids: the trunk's id has no end
        for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
            src, p0, p1 = int(addr[start]), int(pos[start]), int(pos[end - 1]) + 1
            if not lay.is_trunk[start]:
                for dst in ids_of(start):
                    self.llama.seq_cp(src, dst, p0, p1)
                continue
            for dst, stop in zip(trunk_ids, ends_at, strict=True):
                top = p1 if dst == trunk_ids[0] else min(p1, stop)
                if p0 < top:
                    self.llama.seq_cp(src, dst, p0, top)

    # -- a tree wider than the free ids ---------------------------------------------------

    def _apply_wide(self, step: ForwardStep, lay: _Layout) -> np.ndarray:
        """Score a tree with too many leaves: keep the cached trunk prefix, evaluate the
        rest of the trunk, then each group of leaves with its branches in its own decode
        (freed after it). Only the trunk stays cached."""
        n_keep = len(step.keep)
        cached = _cached_trunk_prefix(step, lay, len(self._ctx))  # rows that stay in place
        cached = self._keep_rows(cached) if cached else 0
        if not cached:
            self._clear()
        trunk_id = int(self._addr[0]) if cached else 0
        self._ids = {trunk_id}
        wanted = {n_keep + int(q): j for j, q in enumerate(step.logit_queries)}
        out = np.zeros((len(step.logit_queries), self.vocab_size), dtype=np.float64)
        rows = [int(r) for r in step.trunk_rows[cached:]]
        done = self._decode_rows(lay, rows, [[trunk_id]] * len(rows), wanted, out)
        n_trunk = len(step.trunk_rows)
        room = self.llama.n_seq_max - 1
        leaf_ids = [s for s in range(self.llama.n_seq_max) if s != trunk_id][:room]
        live = _live_leaves(lay, wanted, n_keep)  # held rows: nothing asks them, they go
        for first in range(0, len(live), room):
            group = {j: leaf_ids[k] for k, j in enumerate(live[first : first + room])}
            rows = sorted(r for r, under in lay.below.items() if any(j in group for j in under))
            for seq in group.values():
                self.llama.seq_cp(trunk_id, seq, 0, n_trunk)
            self._ids |= set(group.values())
            seqs = [[group[j] for j in lay.below[r] if j in group] for r in rows]
            done += self._decode_rows(lay, rows, seqs, wanted, out)
            for seq in group.values():
                self.llama.seq_rm(seq)
            self._ids = {trunk_id}
        self.inference_tokens += done - len(step.tokens)  # shared nodes, kept rows: again
        self._trimmed = True  # logprob_rows drops the nodes: only trunk rows are cached
        self._pos, self._tok = lay.pos, lay.tok
        self._addr = np.full(len(lay.pos), trunk_id, dtype=np.int64)
        self._cell = np.full(len(lay.pos), n_trunk, dtype=np.int64)  # nodes: dropped next
        self._cell[step.trunk_rows] = np.arange(n_trunk)
        return out

    def _decode_rows(
        self,
        lay: _Layout,
        rows: list[int],
        seqs: list[list[int]],
        wanted: dict[int, int],
        out: np.ndarray,
    ) -> int:
        """Decode layout rows with the given ids; their rows of `wanted` go into `out`.
        Returns how many rows it evaluated."""
        if not rows:
            return 0
        queries = [i for i, r in enumerate(rows) if r in wanted]
        self.decodes += 1
        lp = self.llama.decode(lay.tok[rows], lay.pos[rows], seqs, queries)
        for i, values in zip(queries, lp, strict=True):
            out[wanted[rows[i]]] = values
        return len(rows)


def _live_leaves(lay: _Layout, wanted: dict[int, int], n_keep: int) -> list[int]:
    """Indices of the leaves whose branch holds a row asked for or a new token.

    Example (4 kept rows: a trunk of 2, node 2 asked, node 3 held; then a new token):
        >>> lay = _Layout(np.arange(5), np.arange(5), np.array([1, 1, 0, 0, 1], bool),
        ...     [2, 3], {2: [0], 3: [1]}, [2, 2])
        >>> _live_leaves(lay, {2: 0}, 4), _live_leaves(lay, {}, 2)
        ([0], [0, 1])
    """
    live = {j for row, under in lay.below.items() if row in wanted or row >= n_keep for j in under}
    return sorted(live)


def _in_query_order(rows: np.ndarray, ascending: np.ndarray) -> np.ndarray:
    """[L, V] rows decoded in batch order, put back in the order of the step's queries;
    the usual case, already in that order, is not copied (a row is 1 MB at 128k tokens).

    Example:
        >>> rows = np.array([[1.0], [2.0], [3.0]])
        >>> _in_query_order(rows, np.array([2, 0, 1]))[:, 0].tolist()
        [2.0, 3.0, 1.0]
        >>> _in_query_order(rows, np.arange(3)) is rows
        True
    """
    if len(ascending) < 2 or (np.diff(ascending) > 0).all():
        return rows
    ordered = np.empty_like(rows)
    ordered[ascending] = rows
    return ordered


def _cached_trunk_prefix(step: ForwardStep, lay: _Layout, old_trunk: int) -> int:
    """How many leading kept rows are old trunk rows in place that stay trunk rows.

    Example (old trunk of 3 rows; the new one keeps 2 of them, then an old node):
        >>> step = ForwardStep(keep=np.array([0, 1, 4]), tokens=np.zeros(0, np.int64),
        ...     positions=np.zeros(0, np.int64), row_parent=np.array([-1, 0, 1]),
        ...     trunk_rows=np.arange(3), logit_queries=np.zeros(0, np.int64),
        ...     order=np.arange(3))
        >>> _cached_trunk_prefix(step, _Layout.of(step, np.arange(5), np.arange(5)), 3)
        2
    """
    keep = step.keep[:old_trunk]
    run = int(np.argmin(np.append(keep == np.arange(len(keep)), False)))
    trunk = np.append(lay.is_trunk[:run], False)
    return int(np.argmin(trunk))
