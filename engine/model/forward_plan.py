"""The plan of one scoring call: which old cache rows survive, which tokens are evaluated,
and the tree mask they are evaluated under.

`TreeScoringSession` (engine/model/backend.py) hands its old state (the absolute
context of every cached row, the rows whose log-probs it remembers) and a request
(``bos? + trunk`` and the paths hanging off it) to `_Planner`, which returns a
`_Plan`: the `ForwardStep` a backend runs (keep rows, evaluate new tokens in one
forward pass with a tree mask, reorder rows) and what the session updates afterwards.

Example:
    >>> _distinct_prefixes([(1, 2), (1,), (3,), ()])
    [(1,), (3,), (1, 2)]

numpy only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

TokenPath = tuple[int, ...]
# a held row: (how many rows of bos? + trunk its path hangs after, the path from there)
HeldKey = tuple[int, TokenPath]

__all__ = ["ForwardStep", "TokenPath"]


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
    held: list[HeldKey] = field(default_factory=list)  # rows kept unasked, after the nodes
    moved: dict[int, int] = field(default_factory=dict)  # old row -> final row (after prefix)


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
        old_held: dict[HeldKey, int] | None = None,
        hold: set[int] | None = None,
    ) -> None:
        self.old_ctx, self.old_nodes, self.old_lp = old_ctx, old_nodes, old_lp
        # rows of earlier trees (old nodes, old held rows) kept though this call does not
        # ask them, while their context stays: `hold` says which may be
        self.old_held, self.hold = old_held or {}, hold or set()
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
        levels = [root]  # levels[i]: the index after old_ctx[c : c + i]
        stop = min(len(self.old_ctx), c + limit)
        for i in range(c, stop):
            entry = _Entry(i)
            levels[-1][int(self.old_ctx[i])] = entry
            levels.append(entry.children)
        if stop == len(self.old_ctx):
            self._index_paths(levels[-1], self.old_nodes, limit - (stop - c))
        for anchor in sorted({a for a, _ in self.old_held if c <= a <= stop}):
            here = {p: row for (a, p), row in self.old_held.items() if a == anchor}
            self._index_paths(levels[anchor - c], here, limit - (anchor - c))
        return root

    @staticmethod
    def _index_paths(level: dict[int, _Entry], rows: dict[TokenPath, int], limit: int) -> None:
        """Hang the rows of a trie of paths under `level` (none deeper than `limit`; an
        entry already there wins: it is the same context)."""
        by_path: dict[TokenPath, dict[int, _Entry]] = {(): level}
        for path in sorted(rows, key=len):
            parent = by_path.get(path[:-1])
            if parent is None or len(path) > limit or path[-1] in parent:
                continue
            entry = _Entry(rows[path])
            parent[path[-1]] = entry
            by_path[path] = entry.children

    def build(self) -> _Plan:
        """Match needed rows to old rows, then lay out the kept and new rows.

        A keystroke's plan has a long kept trunk and a handful of new rows: numpy for
        the trunk-long arrays, plain lists for the rest (numpy's per-call cost showed).
        """
        n_prefix, tail, level = self._match_trunk(self._old_index())
        node_old = self._match_nodes(level)
        kept_nodes = [p for p in self.nodes if node_old[p] is not None]
        new_nodes = [p for p in self.nodes if node_old[p] is None]
        held = self._held({*tail, *(node_old[p] for p in kept_nodes)})
        n_trunk_old = n_prefix + len(tail)
        # old rows kept after the prefix: trunk, nodes, held rows
        keep_tail = tail + [node_old[p] for p in kept_nodes] + list(held.values())
        t = len(self.ctx)
        n_keep, n_new_trunk = n_prefix + len(keep_tail), t - n_trunk_old
        n_rows = n_keep + n_new_trunk + len(new_nodes)
        layout = {p: n_trunk_old + k for k, p in enumerate(kept_nodes)}  # row before `order`
        layout.update({p: n_keep + n_new_trunk + j for j, p in enumerate(new_nodes)})
        held_at = n_trunk_old + len(kept_nodes)
        held_layout = {key: held_at + i for i, key in enumerate(held)}

        trunk_rows = np.concatenate(
            (np.arange(n_trunk_old), np.arange(n_keep, n_keep + n_new_trunk))
        ).astype(np.int64, copy=False)  # [T] row of each trunk token, in context order
        row_parent = np.arange(-1, n_rows - 1, dtype=np.int64)  # [K+Q] chains the trunk rows
        if n_new_trunk:
            row_parent[n_keep] = n_trunk_old - 1  # the first new trunk token follows the old
        trunk_end = n_keep + n_new_trunk - 1 if n_new_trunk else n_trunk_old - 1
        for path, row in layout.items():
            row_parent[row] = layout[path[:-1]] if len(path) > 1 else trunk_end
        for (anchor, path), row in held_layout.items():
            parent = held_layout[(anchor, path[:-1])] if len(path) > 1 else trunk_rows[anchor - 1]
            row_parent[row] = parent
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
            order=np.concatenate(
                (trunk_rows, [layout[p] for p in self.nodes], list(held_layout.values()))
            ).astype(np.int64, copy=False),
        )
        # final rows: the trunk in order (0..t-1), the nodes in `self.nodes` order, the held
        final_node = {p: t + i for i, p in enumerate(self.nodes)}
        new_rows = [*range(n_trunk_old, t), *(final_node[p] for p in new_nodes)]
        first_held = t + len(self.nodes)
        kept_final = [final_node[p] for p in kept_nodes] + [  # of keep[n_trunk_old + i]
            first_held + i for i in range(len(held))
        ]
        final_of = [*range(n_prefix, n_trunk_old), *kept_final]  # of keep_tail[i]
        lp_rows = {
            (k if k < n_trunk_old else kept_final[k - n_trunk_old]): old
            for old, k in self._kept_at(keep_tail, n_prefix).items()
        }
        moved = dict(zip(keep_tail, final_of, strict=True))
        new_rows_array = np.array(new_rows, dtype=np.int64)
        return _Plan(step, self.nodes, new_rows_array, lp_rows, list(held), moved)

    def _held(self, used: set[int]) -> dict[HeldKey, int]:
        """Old rows of earlier trees to keep though this call does not ask them: those in
        `hold` that it does not use, whose context the new one still starts with, keyed
        again from where they leave the new trunk, parents first (a row whose parent is
        not kept goes). A call that asks nodes holds none: it is the next tree, whose
        nodes are pinned in their place (on llama.cpp a held row costs an id in a tree's
        step, and a tree short of ids is scored in several decodes)."""
        if self.nodes or not self.hold:
            return {}
        candidates = [((len(self.old_ctx), p), row) for p, row in self.old_nodes.items()]
        candidates += list(self.old_held.items())
        candidates.sort(key=lambda item: len(item[0][1]))
        ctx, held = self.ctx, {}
        for (anchor, path), row in candidates:
            if row not in self.hold or row in used or not 0 < anchor <= self.lcp:
                continue
            while path and anchor < len(ctx) and ctx[anchor] == path[0]:
                anchor, path = anchor + 1, path[1:]  # the trunk runs through its first rows
            if path and (len(path) == 1 or (anchor, path[:-1]) in held):
                held[(anchor, path)] = row
        return held

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
