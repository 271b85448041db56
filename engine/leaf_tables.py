"""Exact leaf verdicts for the whole vocabulary at once (:class:`LeafTables`), from
per-token tables cached on disk beside the tokenizer's normal form.

The covering tree's nodes at a character boundary ask, for every token, "may this
token be the next one of a covering sequence?". Where the pre-tokenizer is one
pattern the :class:`~midword.engine.pretok.ClassMachine` models, the answer depends on
the region only through the machine state it leaves (:func:`scan_configs`), so the
verdicts are a few vector operations per tree.
"""

from __future__ import annotations

import itertools
import os
from collections import OrderedDict
from pathlib import Path
from typing import NamedTuple, Protocol

import numpy as np

from .bpe import BPETokenizer
from .completions import Completions
from .pretok import END, ClassMachine
from .utf8 import ENDING_INDEX, PROBE_ENDINGS, PROBES, complete_head, nfc_boundary, split_lenient
from .validity import Validity

CONTINUES_MEMO_SIZE = 1 << 15  # remembered LeafTables.continues verdicts (~250 bytes each)
VCT_CACHE_VERSION = "5"  # bump when the cached per-token tables change meaning


class TableSource(Protocol):
    """What the leaf tables read of the per-tokenizer :class:`~midword.engine.tables.Engine`."""

    tok: BPETokenizer
    validity: Validity
    is_added: np.ndarray
    sorted_bytes: list[tuple[bytes, int]]

    def completions(self, partial: bytes) -> Completions: ...

    def token_range(self, prefix: bytes) -> tuple[int, int]: ...

    def cache_file(self, kind: str) -> Path | None: ...


class Config(NamedTuple):
    """An open match attempt a region may end in (see :func:`scan_configs`)."""

    splits: tuple[int, ...]  # character offsets of the splits made before the attempt
    start: int  # character offset where the attempt started
    state: int  # the class machine's state at the region's end
    pending: int | None  # where the attempt ends when what follows does not extend it


def scan_configs(machine: ClassMachine, classes: list[int]) -> list[Config] | None:
    """Scan a region (character classes) with a single Split pattern and return the open
    match attempts it may end in, in order: ``(splits, s, state, pending)``.

    The attempt that started at ``s`` is still running at the end; when what follows
    does not extend it, it ends at ``pending`` (a match already seen inside the region)
    and the scan restarts there, giving the next configuration. None when some attempt
    finds no match at all (patterns that leave gaps are not modelled).
    """
    n, splits, s, out = len(classes), [], 0, []
    while True:
        state, rec, i = ClassMachine.INIT, None, s
        while i < n:
            matched, state = machine.step(state, classes[i])
            rec = i if matched else rec
            if state == ClassMachine.DEAD:
                break
            i += 1
        if rec is not None and rec <= s:
            return None  # an empty match: outside the model
        if state == ClassMachine.DEAD:
            if rec is None:
                return None
            splits, s = [*splits, rec], rec
            continue
        out.append(Config(tuple(splits), s, state, rec))
        if rec is None:
            return out
        splits, s = [*splits, rec], rec


class LeafTables:
    """Exact leaf verdicts for the whole vocabulary at once, from per-token tables.

    Token ``t`` (text ``T``) is a leaf of a node at character offset ``p`` of the region
    ``R`` iff for some probe ``y`` the encoding of ``R[:p] + T + y`` starts with the
    node's path and ``t``. The pre-tokenizer half is decided by running the pattern's
    :class:`ClassMachine` from the state the region leaves (see :func:`scan_configs`)
    over ``T + y``: the open attempt ends at ``p`` (``t`` starts a pre-token; ``T + y`` is
    then scanned fresh and must not split inside ``T``), inside ``T`` (never), or at or
    past ``T``'s end after ``j`` characters of ``y`` (``t`` continues the open pre-token).
    The BPE half reduces, by the pairwise theorem (paper section 3.4), to masks: pair
    validity with the node's token, reachability, and validity of ``t`` before the first
    token of those ``j`` characters. Per machine state the two resulting token masks are
    cached, so a tree costs a few vector operations. Tokens the model does not cover
    (non-special added text, characters the normalizer may merge across the boundary,
    a whole in-vocabulary pre-token under ignore_merges) are listed for an exact check by
    encoding instead.
    """

    def __init__(self, engine: TableSource, machine: ClassMachine) -> None:
        self.engine, self.tok, self.machine = engine, engine.tok, machine
        cache = engine.cache_file("leaf")
        saved = load_arrays(cache)
        if saved is not None:
            self._restore(saved)
        else:
            self._build_rows()
        self.probe_cls = [machine.classes(y) for y in PROBES]
        self.n_cls = len(machine.class_sigs)  # table classes; END is column n_cls
        self._dense_seen: set[int] = set()
        self._dt = self._dm = np.zeros((0, 0))
        self.total = self._is_total()
        if not self.total:
            return  # the engine falls back to the head-key shortcut
        if saved is None:
            self.needs_exact = self._needs_exact()
            self.norm_bad = self._norm_bad()
            self._bpe_masks()
            self.needs_exact[self.context_bound] = True  # NFC may decide these: encode
        self.fresh = list(saved["fresh"]) if saved is not None else self._fresh_masks()
        if saved is None:
            save_arrays(cache, {**self._arrays(), "fresh": np.array(self.fresh)})
        self._row_of: dict[int, int] | None = None
        self.fresh_tok = self._tok_mask(np.logical_or.reduce(self.fresh))
        # fixed per tokenizer: tokens the tables leave to encoding, or that never come out
        self.blocked = self.needs_exact | self.norm_bad
        self.exact_ids = np.flatnonzero(self.needs_exact)
        self._masks: OrderedDict[int, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self.cache_size = 128
        # kept `continues` verdicts: (chain, n, token, bad endings) -> verdict
        self.continued: dict[tuple[tuple[int, ...], int, int, frozenset[bytes]], bool] = {}

    def clear_caches(self) -> None:
        """Forget the kept token masks per chain and ``continues`` verdicts."""
        self._masks.clear()
        self.continued.clear()

    def _is_total(self) -> bool:
        """Does every character start a match of at least one character, whatever
        follows? Then pre-tokens tile the text (no gaps), which the tables assume."""
        m, nexts = self.machine, [*range(self.n_cls), END]
        for c in range(self.n_cls):
            empty, state = m.step(ClassMachine.INIT, c)
            if empty:
                return False
            for c2 in nexts:
                matched, after = m.step(state, c2)
                # a match of one character, or of two whatever comes next (DeepSeek's
                # "a prefix character, then letters", or a gap before a letter)
                if not matched and not (
                    after != ClassMachine.DEAD and all(m.step(after, c3)[0] for c3 in nexts)
                ):
                    return False
        return True

    # ------------------------------------------------------------ disk cache
    def _arrays(self) -> dict[str, np.ndarray]:
        flat = [m for per_y in (*self.bpe_a, *self.bpe_b) for m in per_y]
        return {
            "sigs": np.array(self.machine.class_sigs, dtype=bool).reshape(
                len(self.machine.class_sigs), -1
            ),
            "row_tok": self.row_tok,
            "row_len": self.row_len,
            "row_partial": self.row_partial,
            "cols": np.concatenate(self.cols),
            "needs_exact": self.needs_exact,
            "norm_bad": self.norm_bad,
            "bpe": np.packbits(np.array(flat), axis=1),
        }

    def _restore(self, a: dict[str, np.ndarray]) -> None:
        for sig in map(tuple, a["sigs"].tolist()):  # same class ids as when saved
            self.machine.class_ids[sig] = len(self.machine.class_sigs)
            self.machine.class_sigs.append(sig)
        self.row_tok, self.row_len, self.row_partial = a["row_tok"], a["row_len"], a["row_partial"]
        counts = [int((self.row_len > i).sum()) for i in range(int(self.row_len.max()))]
        self.cols = np.split(a["cols"], np.cumsum(counts)[:-1])
        self.needs_exact, self.norm_bad = a["needs_exact"], a["norm_bad"]
        flat = np.unpackbits(a["bpe"], axis=1, count=len(self.row_tok)).astype(bool)
        sizes = [len(y) + 1 for y in PROBES]
        bounds = np.cumsum([0, *sizes, *sizes])
        per = [list(flat[lo:hi]) for lo, hi in itertools.pairwise(bounds)]
        self.bpe_a, self.bpe_b = per[: len(PROBES)], per[len(PROBES) :]

    # ------------------------------------------------------------ token rows
    def _build_rows(self) -> None:
        """One row per token that starts on a character: the classes of its characters;
        a token that ends inside a character gets one row per class of the characters
        that complete it (the same completions the oracle tries)."""
        seqs: list[list[int]] = []
        toks: list[int] = []
        partial_rows: list[bool] = []
        for i, b in enumerate(self.tok.token_bytes):
            if b is None or 0x80 <= b[0] < 0xC0:
                continue
            text, partial = split_lenient(b)
            if not text and not partial:
                continue
            head = self.machine.classes(text)
            tails = self._completion_classes(partial) if partial else [None]
            for c in tails:
                seqs.append(head if c is None else [*head, c])
                toks.append(i)
                partial_rows.append(c is not None)
        order = sorted(range(len(seqs)), key=lambda r: -len(seqs[r]))
        self.row_tok = np.array([toks[r] for r in order], dtype=np.int64)
        self.row_len = np.array([len(seqs[r]) for r in order], dtype=np.int16)
        self.row_partial = np.array([partial_rows[r] for r in order], dtype=bool)
        # column i holds the i-th class of every row longer than i (rows sorted longest first)
        self.cols = [
            np.array([seqs[r][i] for r in order[: int((self.row_len > i).sum())]], dtype=np.int32)
            for i in range(int(self.row_len.max()))
        ]

    def _tok_mask(self, rows: np.ndarray) -> np.ndarray:
        out = np.zeros(self.tok.size, dtype=bool)
        out[self.row_tok[rows]] = True
        return out

    # -------------------------------------------------------------- BPE side
    def _bpe_masks(self) -> None:
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
        self.bpe_a: list[list[np.ndarray]] = []
        self.bpe_b: list[list[np.ndarray]] = []
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
            self.bpe_a.append(a_list)
            self.bpe_b.append(b_list)

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
            classes = [int(self.cols[int(self.row_len[r]) - 1][r]) for r in rows]
            safe, loose = self._partial_verdicts(t, sorted(set(classes)))
            for r, c in zip(rows, classes, strict=True):
                ok_a[r], ok_b[r] = safe[c]
            if any(
                (safe[c][0] != loose[c][0]).any() or (safe[c][1] != loose[c][1]).any() for c in safe
            ):
                self.context_bound.append(t)
        return ok_a, ok_b

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
        return [b[len(word) :] for b, _ in self.engine.sorted_bytes[lo:hi] if len(b) > len(word)]

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
                for b, _ in self.engine.sorted_bytes:
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

    # ------------------------------------------------------ machine tables
    def _dense(self, start: int) -> tuple[np.ndarray, np.ndarray]:
        """Transition and match tables over the table classes for every state reachable
        from ``start`` (grown on demand: region characters may lead to new states)."""
        if start not in self._dense_seen:
            todo = [start]
            self._dense_seen.add(start)
            while todo:
                st = todo.pop()
                for c in [*range(self.n_cls), END]:
                    _, nxt = self.machine.step(st, c)
                    if nxt not in self._dense_seen:
                        self._dense_seen.add(nxt)
                        todo.append(nxt)
            size = len(self.machine.state_pcs)
            dt = np.zeros((size, self.n_cls + 1), dtype=np.int32)
            dm = np.zeros((size, self.n_cls + 1), dtype=bool)
            for st in self._dense_seen:
                for c in [*range(self.n_cls), END]:
                    dm[st, c], dt[st, c] = self.machine.step(st, c)
            self._dt, self._dm = dt, dm
        return self._dt, self._dm

    def run(self, state: int) -> list[np.ndarray]:
        """Per probe y, for every row (int16): where the attempt in ``state`` ends, in
        characters from the row's start (-1: it ends before, inside the region)."""
        dt, dm = self._dense(state)
        st = np.full(len(self.row_tok), state, dtype=np.int32)
        rec = np.full(len(self.row_tok), -1, dtype=np.int16)
        for i, col in enumerate(self.cols):
            k = len(col)
            cur = st[:k]
            rec[:k][dm[cur, col]] = i
            st[:k] = dt[cur, col]
        # A probe's run depends only on the state a row's text leaves, and rows share a
        # few dozen states at most: run each probe once per state, then look it up.
        live = [s for s in np.flatnonzero(np.bincount(st)).tolist() if s != ClassMachine.DEAD]
        ends = np.full((len(self.probe_cls), dt.shape[0]), -1, dtype=np.int16)  # [Y, states]
        if live:
            ends[:, live] = self._probe_ends(live).T
        rec.setflags(write=False)
        out, made = [], {}  # probes of one class sequence get one (shared, read-only) array
        for y in range(len(self.probe_cls)):
            key = ends[y].tobytes()
            if key not in made:
                q = ends[y].take(st)  # [rows]: -1, or the probe character it ends after
                got = rec if not (q >= 0).any() else np.where(q >= 0, self.row_len + q, rec)
                got.setflags(write=False)
                made[key] = got
            out.append(made[key])
        return out

    def _probe_ends(self, states: list[int]) -> np.ndarray:
        """[S, Y] int16: from each state, where the scalar machine last ends the attempt
        while scanning probe y then END (-1: it never ends there)."""
        return np.array(
            [[self._scalar_end(st, list(ycls)) for ycls in self.probe_cls] for st in states],
            dtype=np.int16,
        ).reshape(len(states), len(self.probe_cls))

    def _fresh_masks(self) -> list[np.ndarray]:
        """Per probe: rows whose text, scanned from a split, stays one pre-token that
        encodes with t first (case A's second half)."""
        out = []
        for y, r in enumerate(self.run(ClassMachine.INIT)):
            j = r - self.row_len
            ok = np.zeros(len(r), dtype=bool)
            for jj, mask in enumerate(self.bpe_a[y]):
                ok |= (j == jj) & mask
            out.append(ok)
        return out

    def masks(self, chain: tuple[int, ...]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Token masks (A: ends the open attempt and starts a pre-token; B: continues it)
        for each configuration of a chain of attempt states (see :func:`scan_configs`)."""
        hit = self._masks.get(chain)
        if hit is not None:
            self._masks.move_to_end(chain)
            return hit
        runs = [self.run(st) for st in chain]
        out = []
        left = [np.ones(len(self.row_tok), dtype=bool) for _ in PROBES]
        for recs in runs:
            a = np.zeros(len(self.row_tok), dtype=bool)
            b = np.zeros(len(self.row_tok), dtype=bool)
            for y, r in enumerate(recs):
                a |= left[y] & (r == 0) & self.fresh[y]
                j = r - self.row_len
                for jj, mask in enumerate(self.bpe_b[y]):
                    b |= left[y] & (j == jj) & mask
                left[y] &= r == -1  # the attempt ends inside the region: next configuration
            out.append((self._tok_mask(a), self._tok_mask(b)))
        self._masks[chain] = out
        if len(self._masks) > self.cache_size:
            self._masks.popitem(last=False)
        return out

    def continues(self, chain: tuple[int, ...], n: int, t: int, bad: frozenset[bytes]) -> bool:
        """Case B for one token, scalar: does some probe y end configuration ``n``'s
        attempt inside y (after ``j`` characters, with ``y[:j]`` not in ``bad``) once the
        earlier configurations have ended inside the region?

        Remembered: an identifier's every byte asks again about the same whole words.
        """
        key = (chain, n, t, bad)
        hit = self.continued.get(key)
        if hit is None:
            if len(self.continued) >= CONTINUES_MEMO_SIZE:
                self.continued.clear()
            hit = self.continued[key] = self.continues_uncached(chain, n, t, bad)
        return hit

    def continues_uncached(
        self, chain: tuple[int, ...], n: int, t: int, bad: frozenset[bytes]
    ) -> bool:
        """`continues` computed by running the class machine (no memo)."""
        b = self.tok.token_bytes[t]
        assert b is not None
        text, partial = split_lenient(b)
        if partial or not text:
            return False  # ignore_merges whole words are whole characters
        cls = self.machine.classes(text)
        if self._row_of is None:
            rows = np.flatnonzero(~self.row_partial)
            self._row_of = dict(zip(self.row_tok[rows].tolist(), rows.tolist(), strict=True))
        row = self._row_of.get(t)
        for y, ycls in enumerate(self.probe_cls):
            ends = [self._scalar_end(st, cls + ycls) for st in chain[: n + 1]]
            if any(e != -1 for e in ends[:n]):
                continue  # an earlier configuration already decides this probe
            j = ends[n] - len(cls)
            ext = PROBES[y][:j].encode("utf-8") if j >= 0 else None
            if ext is not None and ext not in bad and row is not None and self.bpe_b[y][j][row]:
                return True
        return False

    def _scalar_end(self, state: int, classes: list[int]) -> int:
        rec = -1
        for i, c in enumerate([*classes, END]):
            matched, state = self.machine.step(state, c)
            rec = i if matched else rec
            if state == ClassMachine.DEAD:
                break
        return rec


def load_arrays(path: Path | None) -> dict[str, np.ndarray] | None:
    """The arrays saved at ``path`` (None when there is no such file)."""
    if path is None or not path.is_file():
        return None
    with np.load(path) as arrays:
        return {k: arrays[k] for k in arrays.files}


def save_arrays(path: Path | None, arrays: dict[str, np.ndarray]) -> None:
    """Save ``arrays`` at ``path`` (nothing when None), atomically."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    # A unique name: servers and test workers may write the same cache at once.
    tmp = path.with_suffix(f".{os.getpid()}.tmp.npz")
    np.savez(tmp, **arrays)
    tmp.replace(path)
