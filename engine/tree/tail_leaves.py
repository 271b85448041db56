"""How the tail builder judges the leaves at a node of the branching tail
(:class:`TailLeavesMixin`, the half of ``tail._TailBuilder`` that asks): by the engine's
:class:`~midword.engine.tree.leaf_tables.LeafTables` where they apply (the open match
attempts of the region's prefix, `ConfigScan`; whole words under ignore_merges,
`WholeWords`), by encoding (`_exact_leaves`), and by the head-key shortcut for
pre-tokenizers the class machine does not model.

Example:
    >>> NO_WHOLE_WORDS.ids.size
    0
"""

from __future__ import annotations

import itertools

import numpy as np

from ..tokenize.bpe import BPETokenizer
from .config_scan import ConfigScan
from .leaf_tables import Config, LeafTables
from .tail_types import NO_WHOLE_WORDS, TailSource, WholeWords, _Node


class TailLeavesMixin:
    """The leaf verdicts of ``tail._TailBuilder`` (see the module docstring)."""

    engine: TailSource
    tok: BPETokenizer
    region: bytes
    text: str
    partial: bytes
    byte_offs: list[int]
    char_at: dict[int, int]
    _classes: list[int] | None
    _prev_classes: list[int]
    _configs: dict[int, list[Config] | None]
    _scan: ConfigScan | None

    def _table_leaves(self, node: _Node, cands: np.ndarray | None) -> np.ndarray | None:
        """Leaves at ``node`` from the engine's :class:`LeafTables` (exact); None where
        they do not apply (no class machine, a node inside a character, added text).
        ``cands``: judge only these tokens (a straddler's few), not the whole vocabulary."""
        tables, k = self.engine.tables, self.char_at.get(node.pos)
        if tables is None or k is None:
            return None
        configs = self._configs_at(k)
        if configs is None:
            return None
        verdict = self._config_verdicts(tables, node, configs, k, cands)
        if self.tok.added_text:
            exact = tables.needs_exact | self._added_boundary(node.pos)
            blocked = exact | tables.norm_bad
            check = np.flatnonzero(exact) if cands is None else cands[exact[cands]]
        else:  # the usual case: both masks are fixed per tokenizer
            blocked, check = tables.blocked, tables.exact_ids
            if cands is not None:
                check = cands[tables.needs_exact[cands]]
        verdict &= ~(blocked if cands is None else blocked[cands])
        skip = len(self.region) - node.pos
        good = [t for t in check.tolist() if self._exact_one(node, t, skip)]
        if cands is None:
            verdict[good] = True
            return np.flatnonzero(verdict)
        if not good:  # the usual case
            return np.sort(cands[verdict])
        return np.sort(np.concatenate([cands[verdict], np.asarray(good, dtype=cands.dtype)]))

    def _configs_at(self, k: int) -> list[Config] | None:
        """`scan_configs` of the text's first ``k`` characters (None where the tables do not
        apply: no class machine, added text), once per tree: nodes at one offset share it."""
        if k in self._configs:
            return self._configs[k]
        machine, got = self.engine.machine, None
        if machine is not None and not self._has_added(self.text[:k]):
            if self._scan is None:
                self._scan = ConfigScan(machine)
            got = self._scan.at(k, self._class_list())
        self._configs[k] = got
        return got

    def _class_list(self) -> list[int]:
        """The class machine's class of every character of the text (those of the
        previous region's shared characters taken over)."""
        if self._classes is None:
            machine, head = self.engine.machine, self._prev_classes
            assert machine is not None
            self._classes = head + machine.classes(self.text[len(head) :])
        return self._classes

    def _config_verdicts(
        self,
        tables: LeafTables,
        node: _Node,
        configs: list[Config],
        k: int,
        cands: np.ndarray | None,
    ) -> np.ndarray:
        """Table verdicts (bool) over ``cands``, or over the whole vocabulary when None."""

        def pick(mask: np.ndarray) -> np.ndarray:
            return mask.copy() if cands is None else mask[cands]

        if configs[0][1] == k:  # the region ends on a split: a fresh pre-token
            return pick(tables.fresh_tok)
        verdict = np.zeros(self.tok.size if cands is None else len(cands), dtype=bool)
        succ = self.engine.validity.successors(node.last) if node.last is not None else None
        chain = tuple(c[2] for c in configs)
        for n, ((splits, s, _, _), (a_tok, b_tok)) in enumerate(
            zip(configs, tables.masks(chain), strict=True)
        ):
            allow_a, allow_b = self._allow(node, splits, s)
            if allow_a:
                verdict |= a_tok if cands is None else a_tok[cands]
            if allow_b and succ is not None:
                ok = b_tok & succ if cands is None else b_tok[cands] & succ[cands]
                bad = self._whole_open(self.region[self.byte_offs[s] : node.pos])
                if len(bad.ids):  # none without ignore_merges
                    self._drop_whole_words(tables, chain, n, bad, b_tok, succ, ok, cands)
                verdict |= ok
        return verdict

    @staticmethod
    def _drop_whole_words(
        tables: LeafTables,
        chain: tuple,
        n: int,
        bad: WholeWords,
        b_tok: np.ndarray,
        succ: np.ndarray,
        ok: np.ndarray,
        cands: np.ndarray | None,
    ) -> None:
        """Clear in ``ok`` the tokens whose whole word with the open attempt is a token of
        its own for every probe ending (`LeafTables.continues` says no)."""
        # continues() is b_tok's condition with some probe endings left out, so
        # only tokens b_tok & succ keeps can lose their verdict here
        live = np.flatnonzero(b_tok[bad.ids] & succ[bad.ids]).tolist()
        drop = [
            t
            for t, exts in ((int(bad.ids[i]), bad.exts[i]) for i in live)
            if not tables.continues(chain, n, t, exts)
        ]
        if drop:
            ok[drop if cands is None else np.isin(cands, drop)] = False

    def _allow(self, node: _Node, splits: tuple[int, ...], s: int) -> tuple[bool, bool]:
        """May the path be the encoding of the region's pre-tokens before the open attempt
        (A: the attempt ends at the node, B: it goes on into the child)?"""
        index = node.token_at
        if index is None:  # a node is asked once per configuration: made once
            lengths = (len(self.tok.token_bytes[t] or b"") for t in node.path)
            ends = itertools.accumulate(lengths)
            index = node.token_at = {0: 0} | {e: i + 1 for i, e in enumerate(ends)}
        cuts = [0, *(self.byte_offs[c] for c in splits)]
        if any(c not in index for c in cuts):
            return False, False
        for a, b in itertools.pairwise(cuts):
            if not self._is_bpe_of(node.path[index[a] : index[b]], self.region[a:b]):
                return False, False
        s_b = self.byte_offs[s]
        open_toks = node.path[index[s_b] :]
        allow_a = self._is_bpe_of(open_toks, self.region[s_b : node.pos])
        return allow_a, self._valid_run(open_toks)

    def _is_bpe_of(self, toks: tuple[int, ...], word: bytes) -> bool:
        """``tok.encode_word(word) == toks`` for tokens that spell ``word``, without BPE
        (quadratic in the word: 2 ms for a 200-byte open pre-token, new at every key). By
        the pairwise theorem, as :mod:`.partial_leaves` judges it: the BPE of a word is
        the sequence that spells it whose first token is reachable and whose adjacent pairs
        are valid; under ignore_merges a word that is a token is that token."""
        if self.tok.ignore_merges:
            whole = self.tok.bytes_to_id.get(word)
            if whole is not None:
                return toks == (whole,)
        return self._valid_run(toks) if toks else not word

    def _valid_run(self, toks: tuple[int, ...]) -> bool:
        """Can ``toks`` start the BPE of a longer pre-token (pairwise theorem)?"""
        if not toks or not self.tok.reachable[toks[0]]:
            return False
        return all(self.engine.validity.pair_valid(a, b) for a, b in itertools.pairwise(toks))

    def _whole_open(self, head: bytes) -> WholeWords:
        """Under ignore_merges: tokens T, with the endings ``e``, for which ``head + T + e``
        is itself a token (the encoder would emit that one token instead)."""
        if not self.tok.ignore_merges:
            return NO_WHOLE_WORDS
        return self.engine.whole_words(head)

    def _has_added(self, text: str) -> bool:
        return any(a in text for a in self.tok.added_text)

    def _added_boundary(self, pos: int) -> np.ndarray:
        """Tokens that would complete a non-special added text begun before ``pos``."""
        out = np.zeros(self.tok.size, dtype=bool)
        head = self.region[:pos]
        for text in self.tok.added_text:
            a = text.encode("utf-8")
            for k in range(1, len(a)):
                if head.endswith(a[:k]):
                    lo, hi = self.engine.token_range(a[k:])
                    out[self.engine.sorted_ids[lo:hi]] = True
                    for j in range(1, len(a) - k + 1):
                        t = self.tok.bytes_to_id.get(a[k : k + j])
                        if t is not None:
                            out[t] = True
        return out

    def _exact_one(self, node: _Node, t: int, skip: int) -> bool:
        data = self.region + self.tok.token_bytes[t][skip:]  # type: ignore[index]
        return self._extends_canonically(node.path + (t,), data)

    def _exact_leaves(self, node: _Node, cands: list[int], skip: int) -> list[int]:
        """The candidates that extend ``node`` canonically, checked by encoding.

        A cheap necessary condition goes first: a token that cannot start a
        pre-token at ``node.pos`` must be a valid successor of the node's token.
        """
        may_split = node.pos == 0 or any(self._is_split(h, node.pos) for h in node.hyps)
        succ = self.engine.validity.successors(node.last) if node.last is not None else None
        out = []
        for t in cands:
            spelled = self.tok.token_bytes[t]
            if spelled is None:  # no bytes (a duplicate's second id, an event): never text
                continue
            if not (
                (may_split and self.engine.starts_ok[t])
                or (succ is not None and succ[t])
                or self.engine.is_added[t]
            ):
                continue
            data = self.region + spelled[skip:]
            if self._extends_canonically(node.path + (t,), data):
                out.append(t)
        return out

    def _extends_canonically(self, seq: tuple[int, ...], data: bytes) -> bool:
        return self.engine.extends_canonically(seq, data)

    def _leaf_verdicts(
        self, node: _Node, extra: str, extra_bytes: int, truncated: bool = False
    ) -> tuple[bool, bool]:
        """(may start a new pre-token at node.pos, may continue the open one) for a leaf
        whose bytes beyond the region decode to ``extra``. When ``extra`` stands for a longer
        token (``truncated``), a split before its last character is an artefact of the cut
        (a greedy run would go on) and is not held against it."""
        ok_new = ok_cont = False
        n = len(self.region)
        for bounds, end in self.hyps_for(extra, extra_bytes):
            if truncated:
                end -= len(extra[-1].encode("utf-8"))
            inner = {b for b in bounds if 0 < b < n}
            if any(b > node.pos and b not in node.bounds for b in inner):
                continue  # a split inside the region that the path does not honour
            if any(node.pos < b < end for b in bounds):
                continue  # the leaf would cross a split
            needed = {b for b in inner if b <= node.pos}
            if not needed <= node.bounds | {0}:
                continue
            if node.pos == 0 or node.pos in bounds:
                ok_new = True
            else:
                ok_cont = True
        return ok_new, ok_cont

    def _head_key_leaves(self, node: _Node, only: int | None = None) -> list[int]:
        """The head-key shortcut (not exact): tokens grouped by the classes of their first
        4 characters, one verdict per group. Only for pre-tokenizers the class machine
        does not model. ``only``: judge that one token (its group's verdict alone)."""
        engine = self.engine
        keys, reps, long_key, irregular, irregular_ids = engine.head_keys()
        ok_new = np.zeros(len(reps) + 1, dtype=bool)  # last slot: tokens with key -1 (never)
        ok_cont = np.zeros(len(reps) + 1, dtype=bool)
        groups = range(len(reps)) if only is None else [k for k in [int(keys[only])] if k >= 0]
        for k in groups:
            rep, long = reps[k], bool(long_key[k])
            ok_new[k], ok_cont[k] = self._leaf_verdicts(node, rep, len(rep.encode("utf-8")), long)
        mask = ok_new[keys] & engine.starts_ok & engine.tail_ok
        if node.last is not None:
            mask |= ok_cont[keys] & engine.validity.successors(node.last)
        mask &= (keys >= 0) & engine.whole_ok & ~irregular
        exact_cands = irregular_ids + engine.added_ids
        if only is not None:
            exact_cands = [only] if only in exact_cands else []
            return [only] if mask[only] or self._exact_leaves(node, exact_cands, 0) else []
        exact = self._exact_leaves(node, exact_cands, 0)
        return sorted(np.flatnonzero(mask).tolist() + exact)
