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

from ..tokenize.bpe import BPETokenizer, narrow_ids
from .completions import Completions
from .config_scan import ConfigScan
from .leaf_tables import Config, LeafTables
from .tail_types import NO_WHOLE_WORDS, TailSource, WholeWords, _Node
from .utf8 import PROBES, complete_head


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
        if cands is None:  # (nearly the whole vocabulary at the prefix's end: 4-byte ids)
            verdict[good] = True
            return narrow_ids(np.flatnonzero(verdict))
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
        index = self._token_index(node)
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

    def _token_index(self, node: _Node) -> dict[int, int]:
        """Byte offset of each token boundary along the path -> the index of the token
        that starts there (made once per node: it is asked per configuration or group)."""
        index = node.token_at
        if index is None:
            lengths = (len(self.tok.token_bytes[t] or b"") for t in node.path)
            ends = itertools.accumulate(lengths)
            index = node.token_at = {0: 0} | {e: i + 1 for i, e in enumerate(ends)}
        return index

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
            cuts = sorted({0} | {b for b in inner if b <= node.pos})
            if node.pos == 0 or node.pos in bounds:
                ok_new = ok_new or self._path_fits(node, cuts, closed=True)
            else:
                ok_cont = ok_cont or self._path_fits(node, cuts, closed=False)
        return ok_new, ok_cont

    def _path_fits(self, node: _Node, cuts: list[int], closed: bool) -> bool:
        """Is the path the encoding of the region up to ``node.pos`` when it splits at
        ``cuts`` (byte offsets, 0 first, none past the node)? Each pre-token between two
        cuts must be spelled as its BPE, and the last one (from the last cut to the node)
        too when it ends at the node (``closed``), else it must start that BPE. Honouring
        the splits is not enough: a boundary of the path where this split has none must
        be one BPE keeps (DeepSeek-Coder: '\t' '\t' fits "\t" "\ta" but not the one
        pre-token "\t\t+", which is '\t\t' '+')."""
        index = self._token_index(node)
        if any(c not in index for c in cuts):
            return False  # a token of the path would cross a split
        ends = [*cuts, node.pos] if closed and cuts[-1] < node.pos else cuts
        for a, b in itertools.pairwise(ends):
            if not self._is_bpe_of(node.path[index[a] : index[b]], self.region[a:b]):
                return False
        return closed or self._valid_run(node.path[index[cuts[-1]] :])

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
        exact_cands = irregular_ids  # (added tokens among them)
        if only is not None:
            exact_cands = [only] if only in exact_cands else []
        exact_cands, seen = self._worth_encoding(node, exact_cands)
        if only is not None:
            found = mask[only] or only in seen or self._exact_leaves(node, exact_cands, 0)
            return [only] if found else []
        exact = self._exact_leaves(node, exact_cands, 0)
        return sorted(np.flatnonzero(mask).tolist() + exact + seen)

    def _worth_encoding(self, node: _Node, cands: list[int]) -> tuple[list[int], list[int]]:
        """(``cands`` left to the exact check, those already seen to be leaves).

        The exact check encodes, for a token that fails, every witness completion with
        every probe, and there are hundreds of these candidates at a node, most of which
        never fit after it; a necessary condition refuses those first. Added text ends the
        pre-token before it, so the path must encode the region up to the node as a text
        of its own (`_encodes_alone`). A token that starts with a character it does not
        complete (b"\xcc"): the split sees the whole character, one completion per
        class standing for all, and BPE the rest of it (`_open_char_witness`); the
        encodings of one likely witness usually settle those that fit (`_encodes_to`)."""
        engine, tok = self.engine, self.tok
        by_class: dict[int, tuple[bool, bool]] = {}
        alone: bool | None = None
        check, seen = [], []
        for t in cands:
            word = tok.token_bytes[t] or b""
            if engine.is_added[t]:
                alone = self._encodes_alone(node) if alone is None else alone
                if alone:
                    check.append(t)
            elif not word or complete_head(word) != "":
                check.append(t)  # (its head is known: checked by encoding as it is)
            else:
                witness = self._open_char_witness(node, t, by_class)
                if witness is not None and self._encodes_to(node.path + (t,), witness):
                    seen.append(t)
                elif witness is not None:
                    check.append(t)
        return check, seen

    def _open_char_witness(
        self, node: _Node, t: int, by_class: dict[int, tuple[bool, bool]]
    ) -> str | None:
        """The first completion ``c`` of the character that ``t`` starts and does not
        complete for which ``t`` may follow the node (a necessary condition; None when
        there is none, and ``t`` is no leaf there). The split sees ``c`` only through its
        class (`_leaf_verdicts` of one per class, kept in ``by_class``); BPE, by the
        pairwise theorem, needs ``t`` valid before the first token of the rest of ``c``
        (with a probe's ending where they merge), as `Engine.witness_chars` picks the
        exact check's witnesses; added text is cut out whole."""
        engine = self.engine
        info = engine.completions(self.tok.token_bytes[t])
        group, first = engine.class_groups(info)
        succ = engine.validity.successors(node.last) if node.last is not None else None
        fits = np.zeros(len(first), dtype=bool)
        for g, i in enumerate(first.tolist()):
            key = engine.char_class(info.text[i])
            if key not in by_class:
                c = info.text[i]
                by_class[key] = self._leaf_verdicts(node, c, len(c.encode("utf-8")))
            new, cont = by_class[key]
            # (as `_exact_leaves` asks first: a pre-token's first token is reachable, a
            # later one a valid successor)
            fits[g] = (new and engine.starts_ok[t]) or bool(cont and succ is not None and succ[t])
        if not fits.any():
            return None
        before = engine.validity.successors(t)
        columns = [info.first] + [info.firsts(k) for k in sorted(info.cross)]
        kept = np.logical_or.reduce([before[col] for col in columns]) | ~info.safe
        where = np.flatnonzero(fits[group] & kept & ~self._added_chars(info))
        return info.text[int(where[0])] if len(where) else None

    def _encodes_to(self, seq: tuple[int, ...], c: str) -> bool:
        """Does the region's text, ``c`` and some probe encode to tokens that start with
        ``seq``? (The exact check's question, asked of one witness.)"""
        n = len(seq)
        return any(tuple(self.tok.encode(self.text + c + y)[:n]) == seq for y in PROBES)

    def _added_chars(self, info: Completions) -> np.ndarray:
        """Completions that are added text themselves: the encoder cuts such a character
        out whole, so no token ends inside it (DeepSeek-Coder's added 'é', 'ú', ...)."""
        got = info.derived.get("added_chars")
        if got is None:
            added = self.tok.added_text
            got = np.array([c in added for c in info.text], dtype=bool)
            info.derived["added_chars"] = got
        return got  # type: ignore[return-value]

    def _encodes_alone(self, node: _Node) -> bool:
        """Is the path the encoding of the region up to the node as a whole text (as
        it is before added text)? True where that is not known from the split alone:
        added text inside the region, a normalizer, a node inside a character."""
        k = self.char_at.get(node.pos)
        if k is None or self.tok.normalize is not None or self._has_added(self.text):
            return True
        ends = [e for _, e in self.tok.pretokenizer.spans(self.text[:k])]
        cuts = sorted({0} | {self.byte_offs[e] for e in ends if e < k})
        return self._path_fits(node, cuts, closed=True)
