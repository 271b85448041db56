"""Pairwise validity of adjacent tokens inside one pre-token (paper section 3.4).

A pair ``(a, b)`` is valid iff BPE on ``bytes(a) + bytes(b)`` never merges
across the boundary. Only the boundary trajectory matters: ``a``'s right spine
``x_0 .. x_m`` (``x_0`` its last byte, ``x_m = a``) and ``b``'s left spine
``y_0 .. y_n``, with ``f`` the normal-form rank that formed each symbol. The
pair is invalid iff some merge ``(x_i, y_j)`` of rank ``r`` has
``max(f(x_i), f(y_j)) < r < f(x_{i+1})`` and ``r <= f(y_{j+1})`` (ties go to
the left-most merge, as in the HF and tiktoken encoders).

>>> v = Validity(tok)  # doctest: +SKIP
>>> v.pair_valid(tok.encode("Hel")[0], tok.encode("lo")[0])  # doctest: +SKIP
False
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from ..tokenize.bpe import NO_MERGE, BPETokenizer, narrow_ids

INF = NO_MERGE  # (the int64 maximum) above every rank: the rank of "never formed"
PAIR_MEMO_SIZE = 1 << 18  # remembered pair verdicts (about 85 bytes each: 22 MB when full)
MASK_CACHE_BYTES = 32 << 20  # successor masks kept (one byte per vocabulary entry each)


class Validity:
    """Constant-time pair checks and vectorized valid-successor masks (LRU cached)."""

    def __init__(self, tok: BPETokenizer, cache_size: int | None = None) -> None:
        self.tok = tok
        # f: the tokenizer's ranks as they are (its NO_MERGE is INF already: no copy)
        self.rank = np.asarray(tok.rank, dtype=np.int64)
        self._build_partners()
        self._build_left_spine_index()
        # for `predecessors` (few callers): left partners and the right-spine index, built
        # on first use (7 MiB at 151k tokens)
        self.rinv_tok: np.ndarray | None = None
        self._masks: OrderedDict[int, np.ndarray] = OrderedDict()
        # at least 256 masks; a small vocabulary keeps them all (4096 tokens: 16 MB), so a
        # tree never recomputes one (60 us each) once its token has been seen
        self._cache_size = cache_size or max(256, MASK_CACHE_BYTES // max(1, tok.size))
        self._pairs: dict[
            int, bool
        ] = {}  # (a << 32 | b) -> verdict: int keys, half a tuple's memory

    def clear_caches(self) -> None:
        """Forget the kept successor masks and pair verdicts (answers stay the same)."""
        self._masks.clear()
        self._pairs.clear()

    # ------------------------------------------------------------------ spines
    def right_spine(self, a: int) -> list[int]:
        """``[x_0, ..., x_m]``: last byte first, the token itself last."""
        spine = [a]
        while self.tok.right[spine[-1]] >= 0:
            spine.append(int(self.tok.right[spine[-1]]))
        return spine[::-1]

    def left_spine(self, b: int) -> list[int]:
        spine = [b]
        while self.tok.left[spine[-1]] >= 0:
            spine.append(int(self.tok.left[spine[-1]]))
        return spine[::-1]

    def pair_valid(self, a: int, b: int) -> bool:
        """True iff ``[a, b]`` is the BPE encoding of ``bytes(a) + bytes(b)``.

        Verdicts are remembered: a covering tree asks about the same few pairs under
        every pre-tokenizer hypothesis, and the tree of the next byte asks again.
        """
        key = a << 32 | b
        hit = self._pairs.get(key)
        if hit is None:
            if len(self._pairs) >= PAIR_MEMO_SIZE:
                self._pairs.clear()
            hit = self._pairs[key] = self.pair_valid_uncached(a, b)
        return hit

    def pair_valid_uncached(self, a: int, b: int) -> bool:
        """`pair_valid` computed from the boundary trajectories (no memo)."""
        reach = self.tok.reachable
        if not (reach[a] and reach[b]):
            return False
        xs, ys = self.right_spine(a), self.left_spine(b)
        f = self.rank
        for i, x in enumerate(xs):
            fx_next = f[xs[i + 1]] if i + 1 < len(xs) else INF
            for j, y in enumerate(ys):
                hit = self.tok.merges.get(x, y)
                if hit is None:
                    continue
                r = hit[0]
                fy_next = f[ys[j + 1]] if j + 1 < len(ys) else INF
                if max(f[x], f[y]) < r < fx_next and r <= fy_next:
                    return False
        return True

    # ------------------------------------------------------------------- masks
    def successors(self, a: int) -> np.ndarray:
        """Boolean mask over token ids: ``b`` with ``(a, b)`` valid inside a pre-token."""
        hit = self._masks.get(a)
        if hit is not None:
            self._masks.move_to_end(a)
            return hit
        mask = self._compute_successors(a)
        mask.setflags(write=False)
        self._masks[a] = mask
        if len(self._masks) > self._cache_size:
            self._masks.popitem(last=False)
        return mask

    def _compute_successors(self, a: int) -> np.ndarray:
        valid = self.tok.reachable.copy()
        if not valid[a]:
            valid[:] = False
            return valid
        xs = self.right_spine(a)
        f = self.rank
        partners, merge_ranks = [], []  # (p, r): p merges with x at rank r
        for i, x in enumerate(xs):
            fx, fx_next = f[x], (f[xs[i + 1]] if i + 1 < len(xs) else INF)
            lo, hi = self.part_ptr[x], self.part_ptr[x + 1]
            syms, ranks = self.part_sym[lo:hi], self.part_rank[lo:hi].astype(np.int64)
            keep = (ranks > fx) & (ranks < fx_next) & (f[syms] < ranks)
            partners.append(syms[keep])
            merge_ranks.append(ranks[keep])
        # (int64 before the keys are made: p * cap passes 2**31)
        p, r = np.concatenate(partners).astype(np.int64), np.concatenate(merge_ranks)
        if not len(p):
            return valid
        # every b whose left spine holds p with p's parent formed at rank >= r is invalid:
        # the entries of p's list from the first such one to its end (lists are sorted by
        # that rank), found for every p at once and gathered as one index array
        cut = np.searchsorted(self._inv_key, p * self._inv_cap + r, side="left")
        end = self.inv_ptr[p + 1]
        lengths = np.maximum(end - cut, 0)
        total = int(lengths.sum())
        if total:
            starts = np.repeat(cut - np.cumsum(lengths) + lengths, lengths)
            valid[self.inv_tok[starts + np.arange(total)]] = False
        return valid

    def predecessors(self, b: int) -> np.ndarray:
        """Boolean mask over token ids: ``a`` with ``(a, b)`` valid (the mirror of
        :meth:`successors`: walk ``b``'s left spine, invalidate every ``a`` whose right
        spine holds a left partner that would merge first). Not cached: few callers."""
        valid = self.tok.reachable.copy()
        if not valid[b]:
            valid[:] = False
            return valid
        if self.rinv_tok is None:
            self._build_left_partners()
            self._build_right_spine_index()
        ys = self.left_spine(b)
        f = self.rank
        for j, y in enumerate(ys):
            fy, fy_next = f[y], (f[ys[j + 1]] if j + 1 < len(ys) else INF)
            lo, hi = self.lpart_ptr[y], self.lpart_ptr[y + 1]
            syms, ranks = self.lpart_sym[lo:hi], self.lpart_rank[lo:hi]
            keep = (ranks > fy) & (ranks <= fy_next) & (f[syms] < ranks)
            for x, r in zip(syms[keep].tolist(), ranks[keep].tolist(), strict=True):
                xlo, xhi = self.rinv_ptr[x], self.rinv_ptr[x + 1]
                # entries of x's list are sorted by the rank of x's parent in a's right spine
                cut = xlo + int(np.searchsorted(self.rinv_prank[xlo:xhi], r, side="right"))
                valid[self.rinv_tok[cut:xhi]] = False  # type: ignore[index]
        return valid

    def _formed(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(left, right, rank) of every merge that forms a reachable token."""
        tok = self.tok
        formed = np.flatnonzero((tok.left >= 0) & tok.reachable)
        return tok.left[formed], tok.right[formed], tok.rank[formed]

    def _build_partners(self) -> None:
        """CSR: for each left symbol, its right partners and merge ranks (ids, ranks and
        offsets are below 2**31: 4 bytes each, 1.7 MiB less at 151k tokens)."""
        lefts, rights, ranks = self._formed()
        order = np.argsort(lefts, kind="stable")
        self.part_sym, self.part_rank = narrow_ids(rights[order]), narrow_ids(ranks[order])
        counts = np.bincount(lefts, minlength=self.tok.size)
        self.part_ptr = narrow_ids(np.concatenate([[0], np.cumsum(counts)]))

    def _build_left_partners(self) -> None:
        """CSR: for each right symbol, its left partners and merge ranks."""
        lefts, rights, ranks = self._formed()
        order = np.argsort(rights, kind="stable")
        self.lpart_sym, self.lpart_rank = lefts[order], ranks[order]
        counts = np.bincount(rights, minlength=self.tok.size)
        self.lpart_ptr = np.concatenate([[0], np.cumsum(counts)])

    def _build_left_spine_index(self) -> None:
        """CSR: for each symbol p, tokens b whose left spine holds p, with f(parent of p)."""
        inv_tok, prank, inv_ptr = self._spine_index(self.tok.left)
        # token ids and offsets in 4 bytes (they only index): 2.6 MiB less at 151k tokens
        self.inv_tok, self.inv_ptr = narrow_ids(inv_tok), narrow_ids(inv_ptr)
        # one sorted key per entry, symbol then parent rank (INF capped above every real
        # rank, which keeps the order and every comparison with a real rank), so one
        # search finds the cut in every symbol's list at once; the ranks are not kept
        self._inv_cap = int(self.tok.size) + int(prank[prank < INF].max(initial=0)) + 1
        sym = np.repeat(np.arange(len(self.inv_ptr) - 1, dtype=np.int64), np.diff(self.inv_ptr))
        self._inv_key = sym * self._inv_cap + np.minimum(prank, self._inv_cap - 1)

    def _build_right_spine_index(self) -> None:
        """CSR: for each symbol x, tokens a whose right spine holds x, with f(parent of x)."""
        self.rinv_tok, self.rinv_prank, self.rinv_ptr = self._spine_index(self.tok.right)

    def _spine_index(self, child: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        tok = self.tok
        cur = np.flatnonzero(tok.reachable)
        owners, prank = cur.copy(), np.full(len(cur), INF, dtype=np.int64)
        all_sym, all_tok, all_prank = [cur], [owners], [prank]
        while True:
            has = child[cur] >= 0
            if not has.any():
                break
            parent = cur[has]
            cur, owners = child[parent], owners[has]
            all_sym.append(cur)
            all_tok.append(owners)
            all_prank.append(self.rank[parent])
        sym, toks, pr = (np.concatenate(a) for a in (all_sym, all_tok, all_prank))
        order = np.lexsort((pr, sym))
        counts = np.bincount(sym, minlength=tok.size)
        return toks[order], pr[order], np.concatenate([[0], np.cumsum(counts)])
