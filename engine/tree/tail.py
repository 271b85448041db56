"""The branching tail of a covering tree: every token path that covers the region
after the last settled pre-token split, with the leaves of each node.

:func:`build_tail` expands the region's token paths under every pre-tokenization some
continuation gives (:class:`Hyp`), judges the leaves at each node with the engine's
:class:`~midword.engine.tree.leaf_tables.LeafTables` where they apply and by the canonical
checks (:mod:`.canonical`) elsewhere, and keeps built tails per engine
(:class:`~midword.engine.tree.tail_cache.TailCache`). Each key's builder takes over from the previous key's what depends
only on the bytes both regions share (`_TailBuilder._take_over`): typing a long open
pre-token re-judges only what its new end changes.
"""

from __future__ import annotations

import bisect
import itertools

import numpy as np

from ..tokenize.bpe import BPETokenizer
from .config_scan import ConfigScan
from .leaf_tables import Config
from .tail_leaves import TailLeavesMixin
from .tail_types import Hyp, TailNode, TailSource, _Node
from .utf8 import SHORT_PROBES, char_byte_offsets, split_utf8

HYPS_MEMO_CHARS = 64  # regions up to this many characters keep their hypotheses by shape
HYPS_MEMO_SIZE = 1 << 14  # shapes kept (a few hundred bytes each)
# below this many tokens from one offset, asking pair validity token by token is cheaper
# than gathering the successor mask (whitespace runs have dozens of tokens per offset)
MASKED_STEPS_MIN = 12


def build_tail(engine: TailSource, region: bytes) -> tuple[tuple[int, ...], list[TailNode]]:
    """Branching tail of ``region`` (bytes after the last settled split).

    Returns the tokens that every covering shares (moved into the trunk) and
    the internal nodes below them.
    """
    cached = engine.tail_cache.get(region)
    if cached is not None:
        return cached
    builder = _TailBuilder(engine, region, engine.tail_cache.last_build)
    result = builder.run()
    engine.tail_cache.put(region, result)
    engine.tail_cache.last_build = builder
    return result


def _hyp_order(h: Hyp) -> tuple[list[int], bool, int]:
    return sorted(h.inner), h.at_end, h.stop or -1


def pending_added(tok: BPETokenizer, text: str, partial: bytes) -> list[int]:
    """Character offsets where a non-special added text may have begun and still be
    completing (the rest of the prefix, ``partial`` included, is a proper prefix of it);
    ``len(text)`` stands for a start inside the open character."""
    tail = text.encode("utf-8") + partial
    offsets = char_byte_offsets(text)
    if not partial:
        offsets.pop()
    # only a start within the longest added text's length of the end can still be
    # completing: the prefix's unsettled text can be kilobytes long, and this runs per byte
    first = bisect.bisect_right(offsets, len(tail) - max(map(len, tok.added_bytes), default=0))
    return [
        k
        for k, off in enumerate(offsets[first:], start=first)
        if any(len(a) > len(tail) - off and a.startswith(tail[off:]) for a in tok.added_bytes)
    ]


class _TailBuilder(TailLeavesMixin):
    """Builds the tail of one region. ``prev``: the builder of the previous key's region;
    where one region starts with the other, what depends only on their shared bytes is
    taken over rather than worked out again (`_take_over`)."""

    def __init__(self, engine: TailSource, region: bytes, prev: _TailBuilder | None = None) -> None:
        self.engine = engine
        self.tok = engine.tok
        self.region = region
        self.text, self.partial = split_utf8(region)
        self.text_bytes = len(region) - len(self.partial)
        self.byte_offs = char_byte_offsets(self.text)
        self.char_at = {b: k for k, b in enumerate(self.byte_offs)}
        self._classes: list[int] | None = None
        self._steps: dict[int, list[tuple[int, int]]] = {}  # pos -> _tokens_from(pos)
        self._after: dict[int, list[int]] = {}  # id(hypothesis) -> _splits_after(h)
        self._configs: dict[int, list[Config] | None] = {}  # character offset -> _configs_at
        self._scan: ConfigScan | None = None  # `_configs_at`, every prefix of the text
        self._straddled: dict[tuple[int, ...], np.ndarray] = {}  # path -> table straddlers
        # taken over from ``prev`` (never ``prev`` itself: builders would chain up)
        self._prev_steps: tuple[dict[int, list[tuple[int, int]]], int] | None = None
        self._prev_classes: list[int] = []
        self._prev_straddled: dict[tuple[int, ...], np.ndarray] = {}
        if prev is not None and prev.engine is engine:
            self._take_over(prev)

    def _take_over(self, prev: _TailBuilder) -> None:
        """Keep what ``prev`` worked out that only depends on bytes both regions share.

        Where one region starts with the other (a key typed, a backspace): the tokens that
        spell the bytes from an offset (`_tokens_from`, trimmed or extended to the new
        end), the character classes and `scan_configs` states of the shared characters.
        Where the region only grew: the table-judged straddlers of a node (a path), whose
        verdicts hold token by token (`_straddlers`).
        """
        old = prev.region
        if not (self.region.startswith(old) or old.startswith(self.region)):
            return
        self._prev_steps = (prev._steps, len(old))
        chars = min(len(self.text), len(prev.text))  # one text starts with the other
        if prev._classes is not None:
            self._prev_classes = prev._classes[:chars]
        if prev._scan is not None:
            self._scan = prev._scan.head(chars)
        if len(self.region) >= len(old):
            self._prev_straddled = prev._straddled

    # hypotheses of where the pre-tokenizer splits, for text + continuation
    def hyps_for(self, cont: str, cont_bytes: int) -> list[tuple[list[int], int]]:
        """For each probe: split offsets (bytes) of text + cont + probe, and the end of cont."""
        out = []
        full = self.text + cont
        end = self.text_bytes + cont_bytes
        head = self.byte_offs[:-1]  # the text's character offsets, computed once per tree
        for y in self.engine.split_probes if len(cont) < 4 else SHORT_PROBES:
            offs = head + char_byte_offsets(cont + y, self.text_bytes)
            bounds = [offs[e] for _, e in self.tok.pretokenizer.spans(full + y)]
            out.append((bounds, end))
        return out

    def region_hyps(self) -> tuple[Hyp, ...]:
        """Every pre-tokenization of the region that some continuation gives, in a fixed
        order."""
        probed, added = self._probe_hyps(), self._added_hyps()
        if not added:
            return probed
        return tuple(sorted({*probed, *added}, key=_hyp_order))

    def _probe_hyps(self) -> tuple[Hyp, ...]:
        """The splits of text + continuation + probe, for one continuation per class of
        the open character's completions and every split probe.

        Only splits inside the text matter (a split at offset n exists only where the
        region ends on a character boundary), so this is `hyps_for` without mapping the
        continuation's offsets. Where the class machine models the pre-tokenizer, splits
        depend on the text only through its characters' classes (and their byte
        lengths, for the offsets): typed identifiers of one shape share the answer, so
        it is kept by that shape.
        """
        key = None
        if self.engine.machine is not None and len(self.text) <= HYPS_MEMO_CHARS:
            key = (tuple(self._class_list()), tuple(self.byte_offs), self.partial)
            hit = self.engine.hyps_memo.get(key)
            if hit is not None:
                return hit
        n, m, offs = len(self.region), len(self.text), self.byte_offs
        spans = self.tok.pretokenizer.spans
        found: set[Hyp] = set()
        for c in self.engine.class_reps(self.partial) if self.partial else [""]:
            for y in self.engine.split_probes if len(c) < 4 else SHORT_PROBES:
                ends = [e for _, e in spans(self.text + c + y) if e <= m]
                inner = frozenset(b for b in (offs[e] for e in ends) if 0 < b < n)
                found.add(Hyp(inner, not self.partial and m in ends))
        got = tuple(sorted(found, key=_hyp_order))
        if key is not None:
            if len(self.engine.hyps_memo) >= HYPS_MEMO_SIZE:
                self.engine.hyps_memo.clear()
            self.engine.hyps_memo[key] = got
        return got

    def _added_hyps(self) -> list[Hyp]:
        """One hypothesis per place where a non-special added text may have begun: the
        text before it is encoded as a whole text (the encoder matches added text first)."""
        out = []
        for k in pending_added(self.tok, self.text, self.partial):
            head = self.text[:k]
            stop = self.byte_offs[k] if k < len(self.text) else self.text_bytes
            offs = char_byte_offsets(head)
            bounds = [offs[e] for _, e in self.tok.pretokenizer.spans(head)]
            out.append(Hyp(frozenset(b for b in [*bounds, stop] if b > 0), False, stop))
        return out

    def run(self) -> tuple[tuple[int, ...], list[TailNode]]:
        root = _Node((), 0, None, frozenset(), self.region_hyps())
        self._expand(root)
        self._prune(root)
        trunk: list[int] = []
        node = root
        while not len(node.leaves) and len(node.children) == 1:
            node = node.children[0]
            trunk.append(node.path[-1])
        out: list[TailNode] = []
        self._collect(node, len(trunk), out)
        return tuple(trunk), out

    def _collect(self, node: _Node, skip: int, out: list[TailNode]) -> None:
        leaves = node.leaves
        if not isinstance(leaves, np.ndarray):
            leaves = np.unique(np.asarray(leaves, dtype=np.int64))
        out.append(TailNode(node.path[skip:], node.pos == len(self.region), leaves))
        for child in node.children:
            self._collect(child, skip, out)

    def _prune(self, node: _Node) -> bool:
        node.children = [c for c in node.children if self._prune(c)]
        return bool(len(node.leaves) or node.children)

    # ------------------------------------------------------------ expansion
    def _expand(self, node: _Node) -> None:
        n = len(self.region)
        if node.pos == n:
            node.leaves = self._spelled(self._end_children(node))
            return
        gates = self._gates(node)
        reach = max((limit for _, limit, _ in gates), default=-1)
        steps = self._tokens_from(node.pos)
        if len(steps) >= MASKED_STEPS_MIN and not any(split for _, _, split in gates):
            steps = self._pair_valid_steps(node, steps)
        for t, end in steps:
            if end > reach:
                break  # tokens come shortest first: every longer one crosses a split too
            hyps = self._inner_ok(node, t, end, gates)
            if hyps:
                child = _Node(node.path + (t,), end, t, node.bounds | {end}, hyps)
                node.children.append(child)
                self._expand(child)
        node.leaves = self._spelled(self._straddlers(node))

    def _spelled(self, leaves: list[int] | np.ndarray) -> list[int] | np.ndarray:
        """``leaves`` less the tokens that hold a byte the vocabulary has no token for
        (``Engine.holds_missing``): no canonical sequence spells such a byte."""
        holds = self.engine.holds_missing
        if holds is None:
            return leaves
        if isinstance(leaves, np.ndarray):
            return leaves[~holds[leaves]]
        return [t for t in leaves if not holds[t]]

    def _tokens_from(self, pos: int) -> list[tuple[int, int]]:
        """(token, end) for every token that spells the region's bytes from ``pos`` on
        (the same for every node at ``pos``: whitespace runs have many)."""
        got = self._steps.get(pos)
        if got is None:
            top = min(self.engine.max_token_len, len(self.region) - pos)
            got = self._prev_tokens_from(pos, top)
            if got is None:
                got = self._spell_from(pos, 0, top)
            self._steps[pos] = got
        return got

    def _spell_from(self, pos: int, lo: int, hi: int) -> list[tuple[int, int]]:
        """(token, end) for the tokens of ``lo + 1`` to ``hi`` bytes at ``pos``."""
        get, region = self.tok.bytes_to_id.get, self.region
        ids = ((get(region[pos : pos + k]), pos + k) for k in range(lo + 1, hi + 1))
        return [(t, end) for t, end in ids if t is not None]

    def _prev_tokens_from(self, pos: int, top: int) -> list[tuple[int, int]] | None:
        """`_tokens_from` of the previous region at ``pos`` (the bytes it read are shared),
        cut or extended to this region's end; None where it was not asked."""
        if self._prev_steps is None:
            return None
        steps, old_n = self._prev_steps
        old = steps.get(pos)
        if old is None:
            return None
        old_top = min(self.engine.max_token_len, old_n - pos)
        if old_top == top:
            return old
        if old_top > top:
            return [step for step in old if step[1] <= pos + top]
        return old + self._spell_from(pos, old_top, top)

    def _pair_valid_steps(self, node: _Node, steps: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """``steps`` less the tokens that cannot follow the node's token inside a
        pre-token (one mask gather, not a `pair_valid` per token): where no hypothesis
        splits at the node, `_inner_ok` refuses them all."""
        assert node.last is not None  # a split at offset 0 always: the root never gets here
        succ = self.engine.validity.successors(node.last)
        ok = succ[[t for t, _ in steps]].tolist()
        return list(itertools.compress(steps, ok))

    def _splits_after(self, h: Hyp) -> list[int]:
        """For each offset ``pos`` of the region, the first split of ``h`` inside the
        region after it (``len(region) + 1`` when there is none), made once per tree.

        Kept by ``id(h)``: a tree's hypotheses are the root's objects (a node keeps a
        subset of its parent's), alive as long as the builder, and hashing a `Hyp` rehashes
        its fields."""
        got = self._after.get(id(h))
        if got is None:
            n = len(self.region)
            got, nxt = [0] * (n + 1), n + 1
            for pos in range(n, -1, -1):
                got[pos] = nxt
                if pos in h.inner:
                    nxt = pos
            self._after[id(h)] = got
        return got

    def _is_split(self, h: Hyp, pos: int) -> bool:
        return pos == 0 or pos in h.inner or (pos == len(self.region) and h.at_end)

    def _gates(self, node: _Node) -> list[tuple[Hyp, int, bool]]:
        """Per hypothesis of ``node``: (it, the furthest end a token from ``node.pos`` may
        have under it, whether a pre-token starts at ``node.pos``). Worked out once per node
        rather than once per token from it (whitespace runs have many)."""
        pos, n = node.pos, len(self.region)
        gates = []
        for h in node.hyps:
            after = self._after.get(id(h)) or self._splits_after(h)
            limit = after[pos] if h.stop is None else min(after[pos], h.stop)
            split = pos == 0 or pos in h.inner or (pos == n and h.at_end)  # _is_split
            gates.append((h, limit, split))
        return gates

    def _inner_ok(
        self, node: _Node, t: int, end: int, gates: list[tuple[Hyp, int, bool]] | None = None
    ) -> tuple[Hyp, ...]:
        """Hypotheses under which token ``t`` (inside the region) may follow ``node``
        (``gates``: `_gates` of ``node``, when the caller keeps them)."""
        keep = []
        pair_ok = None
        for h, limit, split in self._gates(node) if gates is None else gates:
            if end > limit:
                continue  # t would cross a split (or reach past an added text's start)
            if split:
                if not self._starts_pretoken(h, node.pos, t, end):
                    continue
            else:  # the same verdict under every hypothesis: asked once
                if pair_ok is None:
                    pair_ok = self.engine.validity.pair_valid(node.last, t)  # type: ignore[arg-type]
                if not pair_ok:
                    continue
            keep.append(h)
        return tuple(keep)

    def _starts_pretoken(self, h: Hyp, pos: int, t: int, end: int) -> bool:
        """May ``t`` be the first token of the pre-token that starts at ``pos``?"""
        if not self.tok.ignore_merges:
            return bool(self.tok.reachable[t])
        n = len(self.region)
        nxt: int | None = self._splits_after(h)[pos]
        if nxt > n:  # type: ignore[operator]
            nxt = n if h.at_end else None
        if nxt is not None and self.region[pos:nxt] in self.tok.bytes_to_id:
            return end == nxt  # ignore_merges emits a whole in-vocabulary pre-token as one token
        if not self.tok.reachable[t]:
            return nxt is not None and end == nxt
        return True

    # ------------------------------------------------------- one path only
    def covers(self, rest: list[int]) -> bool:
        """:meth:`VCT.covers` below the settled trunk: ``rest`` walked from the root."""
        node = _Node((), 0, None, frozenset(), self.region_hyps())
        for i, t in enumerate(rest):
            data = self.tok.token_bytes[t]
            if data is None:
                return False  # a special token is never text
            end = node.pos + len(data)
            if end > len(self.region):
                return i == len(rest) - 1 and self.is_leaf(node, t)
            if self.region[node.pos : end] != data:
                return False
            hyps = self._inner_ok(node, t, end)
            if not hyps:
                return False
            node = _Node((*node.path, t), end, t, node.bounds | {end}, hyps)
        return node.pos == len(self.region)

    def is_leaf(self, node: _Node, t: int) -> bool:
        """``t in`` the leaves of ``node`` (``_straddlers`` / ``_end_children`` asked about
        one candidate)."""
        data = self.tok.token_bytes[t] or b""
        rest = self.region[node.pos :]
        one = np.array([t], dtype=np.int64)
        if self.engine.holds_missing is not None and self.engine.holds_missing[t]:
            return False  # never offered (`_spelled`)
        if rest:
            if not data.startswith(rest) or len(data) <= len(rest):
                return False
            got = self._table_leaves(node, one)
            return t in (got if got is not None else self._exact_leaves(node, [t], len(rest)))
        if self.partial:
            return 0x80 <= data[0] < 0xC0 and bool(self._exact_leaves(node, [t], 0))
        got = self._table_leaves(node, one)
        return t in (got if got is not None else self._head_key_leaves(node, only=t))

    # -------------------------------------------------------------- leaves
    def _straddlers(self, node: _Node) -> list[int] | np.ndarray:
        """Tokens that cover the rest of the region from ``node`` and reach past it."""
        rest = self.region[node.pos :]
        if len(rest) >= self.engine.max_token_len:  # away from the region's end: no token
            return np.zeros(0, dtype=self.engine.sorted_ids.dtype)  # reaches past it
        lo, hi = self.engine.token_range(rest)
        old = self._prev_straddled.get(node.path)
        if old is not None:  # the previous region's straddlers here, judged by the tables
            got = self._still_straddling(old, lo, hi, len(rest))
            self._straddled[node.path] = got
            return got
        ids = self.engine.sorted_ids[lo:hi][self.engine.sorted_len[lo:hi] > len(rest)]
        if not len(ids):
            return ids  # the usual case away from the region's end: no token reaches past it
        got = self._table_leaves(node, ids)
        if got is not None:
            self._straddled[node.path] = got
            return got
        return self._exact_leaves(node, ids.tolist(), len(rest))

    def _still_straddling(self, old: np.ndarray, lo: int, hi: int, rest: int) -> np.ndarray:
        """The tokens of ``old`` (sorted ids) that still spell the rest of the region
        (``rest`` bytes, the tokens ``lo:hi`` in byte order) and reach past it.

        A table verdict on a token at a node holds whatever the region's end (it reads the
        bytes up to the node and the token's own), and the region only grew: the previous
        region's straddlers at the same path that still straddle are this one's. Found
        through each token's place in byte order: no set operation on the candidates (a
        node one space before the end has tens of thousands)."""
        places = self.engine.tail_cache.places(self.engine.sorted_ids)[old]  # never -1: leaves
        keep = (places >= lo) & (places < hi)  # of a straddler are text tokens
        return old[keep & (self.engine.sorted_len[places] > rest)]

    def _end_children(self, node: _Node) -> list[int] | np.ndarray:
        if self.partial:  # only tokens that go on with the open character
            return self._exact_leaves(node, self.engine.continuing(self.partial).tolist(), 0)
        got = self._table_leaves(node, None)
        if got is not None:
            return got
        return self._head_key_leaves(node)
