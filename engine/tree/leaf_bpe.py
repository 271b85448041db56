"""The BPE half of the leaf tables, computed once per tokenizer when they are built:
per row (a token's text) and per probe ending, may the row's token come first in the
BPE of its pre-token (the pairwise theorem, paper section 3.4), with exact verdicts for
tokens that end inside a character; and the tokens the tables leave to an exact check
by encoding (added text, NFC-sensitive heads) or that never come out (rewritten by the
normalizer). `BpeSideMixin` is that half of
:class:`~midword.engine.tree.leaf_tables.LeafTables`.

Example:
    >>> from midword.engine.tree.tables import load_engine
    >>> tables = load_engine("models/default").tables      # doctest: +SKIP
    >>> tables.needs_exact.shape == (tables.tok.size,)      # doctest: +SKIP
    True
"""

from __future__ import annotations

import numpy as np

from ..tokenize.bpe import BPETokenizer
from ..tokenize.class_machine import ClassMachine
from .completions import Completions
from .leaf_bits import TableSource
from .utf8 import ENDING_INDEX, PROBE_ENDINGS, PROBES, complete_head, nfc_boundary, split_lenient


class BpeSideMixin:
    """The BPE side and the special tokens of
    :class:`~midword.engine.tree.leaf_tables.LeafTables` (build time only)."""

    engine: TableSource
    tok: BPETokenizer
    machine: ClassMachine
    row_tok: np.ndarray
    row_partial: np.ndarray
    row_seq: np.ndarray
    seq_len: np.ndarray
    seq_cols: list[np.ndarray]

    # -------------------------------------------------------------- BPE side
    def _bpe_masks(self) -> tuple[list[list[np.ndarray]], list[list[np.ndarray]]]:
        """Per probe y and j (characters of y inside T's pre-token): may T's token come
        first in the BPE of that pre-token? j = 0: T alone encodes to t (A: it starts the
        pre-token; B: it continues one, so t must be reachable); j > 0: t must be valid
        before the first BPE token of y[:j], and T + y[:j] must not be a whole token
        under ignore_merges."""
        tok, t = self.tok, self.row_tok
        self._whole_by_ext: dict[bytes, list[int]] | None = None
        reach = tok.reachable[t]
        whole = tok.ignore_merges & tok.is_text[t]
        part_a, part_b = self._partial_bpe()
        bpe_a: list[list[np.ndarray]] = []
        bpe_b: list[list[np.ndarray]] = []
        for y in PROBES:
            k = ENDING_INDEX[b""]
            a_list = [np.where(self.row_partial, part_a[:, k], reach | whole)]
            b_list = [np.where(self.row_partial, part_b[:, k], reach)]
            for j in range(1, len(y) + 1):
                ext = y[:j].encode("utf-8")
                k = ENDING_INDEX[ext]
                first = tok._bpe_cached(ext)[0]
                ok = reach & self.engine.validity.predecessors(first)[t] & ~self._whole_with(ext)[t]
                a_list.append(np.where(self.row_partial, part_a[:, k], ok))
                b_list.append(np.where(self.row_partial, part_b[:, k], ok))
            bpe_a.append(a_list)
            bpe_b.append(b_list)
        return bpe_a, bpe_b

    def _partial_bpe(self) -> tuple[np.ndarray, np.ndarray]:
        """[rows, PROBE_ENDINGS] verdicts for rows whose token ``T`` ends inside a
        character: is ``t`` the first token of BPE(T + rest + ext) for some character of
        the row's class (``rest``: the bytes that complete it)? By the pairwise theorem
        that is "t reachable and valid before the first token of BPE(rest + ext)". B
        (t continues a pre-token) is that; A (t starts the pre-token) also needs the
        whole pre-token not to be a token under ignore_merges. Exact over every
        completing character (:class:`Completions`), as the byte-by-byte check is once
        the next byte is typed. Under NFC only characters that NFC leaves alone whatever
        precedes them count; a token whose verdicts other characters could change is
        checked by encoding instead (added to ``needs_exact``)."""
        ok_a = np.zeros((len(self.row_tok), len(PROBE_ENDINGS)), dtype=bool)
        ok_b = ok_a.copy()
        by_tok: dict[int, list[int]] = {}
        for r in np.flatnonzero(self.row_partial).tolist():
            by_tok.setdefault(int(self.row_tok[r]), []).append(r)
        self.context_bound: list[int] = []
        for t, rows in by_tok.items():
            if not self.tok.reachable[t]:
                continue
            classes = [self._last_class(r) for r in rows]
            safe, loose = self._partial_verdicts(t, sorted(set(classes)))
            for r, c in zip(rows, classes, strict=True):
                ok_a[r], ok_b[r] = safe[c]
            if any(
                (safe[c][0] != loose[c][0]).any() or (safe[c][1] != loose[c][1]).any() for c in safe
            ):
                self.context_bound.append(t)
        return ok_a, ok_b

    def _last_class(self, row: int) -> int:
        seq = int(self.row_seq[row])
        return int(self.seq_cols[int(self.seq_len[seq]) - 1][seq])

    def _partial_verdicts(self, t: int, classes: list[int]) -> tuple[dict, dict]:
        """Per class of completing character: (A, B) verdicts over the probe endings,
        counting NFC-safe characters only, and counting every character."""
        word = self.tok.token_bytes[t]
        assert word is not None
        info = self.engine.completions(split_lenient(word)[1])
        cls = self._completion_class_array(info)
        longer = self._longer_tokens(word) if self.tok.ignore_merges else []
        size = len(PROBE_ENDINGS)
        safe = {c: (np.zeros(size, dtype=bool), np.zeros(size, dtype=bool)) for c in classes}
        loose = {c: (np.zeros(size, dtype=bool), np.zeros(size, dtype=bool)) for c in classes}
        valid_by_column: dict[int, np.ndarray] = {}
        for k, ext in enumerate(PROBE_ENDINGS):
            column = k if k in info.cross else -1  # endings without a bridge share a column
            valid = valid_by_column.get(column)
            if valid is None:
                firsts = info.firsts(k)
                uniq, inverse = np.unique(firsts, return_inverse=True)
                ok = np.array([self.engine.validity.pair_valid(t, int(f)) for f in uniq])
                valid = valid_by_column[column] = ok[inverse.reshape(-1)]
            whole = self._whole_rests(info, word, longer, ext)
            for c in classes:
                b = valid & (cls == c)
                a = b & ~whole if whole is not None else b
                safe[c][0][k], safe[c][1][k] = (a & info.safe).any(), (b & info.safe).any()
                loose[c][0][k], loose[c][1][k] = a.any(), b.any()
        return safe, loose

    def _longer_tokens(self, word: bytes) -> list[bytes]:
        lo, hi = self.engine.token_range(word)
        return [b[len(word) :] for b in self.engine.sorted_keys[lo:hi] if len(b) > len(word)]

    @staticmethod
    def _whole_rests(
        info: Completions, word: bytes, longer: list[bytes], ext: bytes
    ) -> np.ndarray | None:
        """Completions whose rest + ext, after ``word``, makes a whole token."""
        width = info.rests.shape[1]
        hits = [
            info.index(tail[:width])
            for tail in longer
            if len(tail) == width + len(ext) and tail.endswith(ext)
        ]
        hits = [i for i in hits if i is not None]
        if not hits:
            return None
        out = np.zeros(len(info), dtype=bool)
        out[hits] = True
        return out

    def _completion_class_array(self, info: Completions) -> np.ndarray:
        """Class (of this machine) of every completion, computed once per partial."""
        got = info.derived.get("machine_classes")
        if got is None:
            got = info.derived["machine_classes"] = self.machine.bulk_classes(info.text)
        return got  # type: ignore[return-value]

    def _completion_classes(self, partial: bytes) -> list[int]:
        return sorted(set(self._completion_class_array(self.engine.completions(partial)).tolist()))

    def _whole_with(self, ext: bytes) -> np.ndarray:
        """Tokens T with T + ext itself a token (ignore_merges would emit that one)."""
        if self._whole_by_ext is None:
            self._whole_by_ext = {}
            if self.tok.ignore_merges:
                endings = set(PROBE_ENDINGS) - {b""}
                for b in self.engine.sorted_keys:
                    for cut in range(1, min(4, len(b))):
                        t = self.tok.bytes_to_id.get(b[:-cut])
                        if b[-cut:] in endings and t is not None:
                            self._whole_by_ext.setdefault(b[-cut:], []).append(t)
        out = np.zeros(self.tok.size, dtype=bool)
        out[self._whole_by_ext.get(ext, [])] = True
        return out

    # ------------------------------------------------------- special tokens
    def _needs_exact(self) -> np.ndarray:
        """Tokens whose verdict the tables do not model: non-special added text (matched
        before pre-tokenization) and text that contains it, and under NFC a token whose
        first character may compose with what precedes it."""
        tok = self.tok
        out = self.engine.is_added.copy()
        texts = [a.encode("utf-8") for a in tok.added_text]
        for i, b in enumerate(tok.token_bytes):
            if b is None:
                continue
            if any(a in b for a in texts):
                out[i] = True
            elif tok.normalize is not None and b[:1] and not 0x80 <= b[0] < 0xC0:
                head = complete_head(b)
                out[i] = bool(head) and not nfc_boundary(head[0])
        return out

    def _norm_bad(self) -> np.ndarray:
        """Tokens the normalizer rewrites: they never come out of the encoder."""
        out = np.zeros(self.tok.size, dtype=bool)
        if self.tok.normalize is None:
            return out
        for i, b in enumerate(self.tok.token_bytes):
            if b is not None and not 0x80 <= b[0] < 0xC0:
                text, _ = split_lenient(b)
                out[i] = self.tok.normalize(text) != text
        return out
