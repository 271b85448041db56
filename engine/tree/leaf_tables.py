"""Exact leaf verdicts for the whole vocabulary at once (:class:`LeafTables`), from
per-token tables cached on disk beside the tokenizer's normal form.

The covering tree's nodes at a character boundary ask, for every token, "may this
token be the next one of a covering sequence?". Where the pre-tokenizer is one
pattern the :class:`~midword.engine.tokenize.class_machine.ClassMachine` models, the answer depends on
the region only through the machine state it leaves (:func:`scan_configs`), so the
verdicts are a few vector operations per tree.

The tables' bit layout is :mod:`.leaf_bits`, their disk cache :mod:`.leaf_cache`, and
their BPE side (computed once when they are built) :mod:`.leaf_bpe`.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

import numpy as np

from ..disk_arrays import save_arrays
from ..tokenize.bpe import narrow_ids
from ..tokenize.class_machine import END, ClassMachine
from .leaf_bits import _WORDS, _Y_OFFSET, _ZERO, TableSource, _get_bits, _ProbeBits, _set_bits
from .leaf_bpe import BpeSideMixin
from .leaf_cache import LeafCacheMixin, load_checked
from .utf8 import PROBES, split_lenient

CONTINUES_MEMO_SIZE = 1 << 15  # remembered LeafTables.continues verdicts (~250 bytes each)


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


class LeafTables(LeafCacheMixin, BpeSideMixin):
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
    token of those ``j`` characters. Tokens the model does not cover (non-special added
    text, characters the normalizer may merge across the boundary, a whole in-vocabulary
    pre-token under ignore_merges) are listed for an exact check by encoding instead.

    The machine's run over each token's text, from every state the machine can be in
    (a few dozen), is computed when the tables are built and cached on disk with them
    (per distinct class sequence of the rows: a few times fewer than tokens), so a tree
    never pays a pass over the vocabulary: its masks are a few vector operations on bit
    sets (see :meth:`masks`), kept per chain of states.
    """

    def __init__(self, engine: TableSource, machine: ClassMachine) -> None:
        self.engine, self.tok, self.machine = engine, engine.tok, machine
        self._local_states: list[int] = []  # local state -> machine state
        self._local: dict[int, int] = {}  # machine state -> local state
        self._extra_runs: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # states not cached
        self._bits: _ProbeBits | None = None
        self._ends_known = np.zeros((0, len(PROBES)), dtype=np.int16)  # per local state
        cache = engine.cache_file("leaf")
        saved = load_checked(cache)
        if saved is not None:
            self._restore(saved)
        else:
            self._build_rows()
        # row tokens in int32, classes in the smallest type: 1.4 MiB less at 151k tokens
        self.row_tok = narrow_ids(self.row_tok)
        self.seq_cols = _narrow_columns(self.seq_cols)
        self.probe_cls = [machine.classes(y) for y in PROBES]
        self.n_cls = len(machine.class_sigs)  # table classes; END is column n_cls
        self._dense_seen: set[int] = set()
        self._dt = self._dm = np.zeros((0, 0))
        self.total = self._is_total()
        if not self.total:
            return  # the engine falls back to the head-key shortcut
        if saved is None:
            self._build_tables()
            save_arrays(cache, self._arrays())
        self._row_of: np.ndarray | None = None
        self.fresh_tok = self._tok_mask(self.fresh_bits != 0)
        # fixed per tokenizer: tokens the tables leave to encoding, or that never come out
        self.blocked = self.needs_exact | self.norm_bad
        self.exact_ids = np.flatnonzero(self.needs_exact)
        self._masks: OrderedDict[tuple[int, ...], list[tuple[np.ndarray, np.ndarray]]]
        self._masks = OrderedDict()
        self.cache_size = 128
        # kept `continues` verdicts: (chain, n, token, bad endings) -> verdict
        self.continued: dict[tuple[tuple[int, ...], int, int, frozenset[bytes]], bool] = {}

    def _build_tables(self) -> None:
        """Everything but the rows, on a first load (seconds; then cached on disk)."""
        self.needs_exact = self._needs_exact()
        self.norm_bad = self._norm_bad()
        bpe_a, bpe_b = self._bpe_masks()
        self.needs_exact[self.context_bound] = True  # NFC may decide these: encode
        self._precompute_runs()
        self.bbits = np.zeros((_WORDS, len(self.row_tok)), dtype=np.uint64)
        for y, per_j in enumerate(bpe_b):
            for j, mask in enumerate(per_j):
                _set_bits(self.bbits, _Y_OFFSET[y] + j, mask)
        self.fresh_bits = self._fresh_bits(bpe_a)
        self.bbits[:, self._placeholders] = 0  # rows of tokens without text: never leaves
        self.fresh_bits[self._placeholders] = 0

    def clear_caches(self) -> None:
        """Forget the kept token masks per chain, ``continues`` verdicts and runs from
        states the disk tables lack (those tables stay: they are the engine's own)."""
        self._masks.clear()
        self.continued.clear()
        self._extra_runs.clear()

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

    # ------------------------------------------------------------ token rows
    def _build_rows(self) -> None:
        """One row per token that starts on a character: the classes of its characters;
        a token that ends inside a character gets one row per class of the characters
        that complete it (the same completions the oracle tries). Rows with the same
        classes share one class sequence (``row_seq``): the machine runs per sequence.

        Row ``t`` is token ``t``'s first row (a token without rows gets a placeholder,
        whose bits :meth:`_build_tables` clears), so the first ``vocabulary size`` rows of
        a row mask are already a token mask; further rows of partial tokens follow."""
        rows: list[list[tuple[int, ...]]] = []  # per token: its rows' class sequences
        for b in self.tok.token_bytes:
            rows.append([])
            if b is None or 0x80 <= b[0] < 0xC0:
                continue
            text, partial = split_lenient(b)
            if not text and not partial:
                continue
            head = tuple(self.machine.classes(text))
            tails = self._completion_classes(partial) if partial else [None]
            rows[-1] = [head if c is None else (*head, c) for c in tails]
        distinct = sorted({s for per in rows for s in per}, key=lambda s: (-len(s), s))
        index = {s: k for k, s in enumerate(distinct)}  # longest first: columns are prefixes
        placeholder = len(distinct) - 1  # a shortest sequence: cheapest to check
        extra = [(t, s) for t, per in enumerate(rows) for s in per[1:]]
        self.row_tok = np.array([*range(len(rows)), *(t for t, _ in extra)], dtype=np.int64)
        self.row_seq = np.array(
            [index[per[0]] if per else placeholder for per in rows] + [index[s] for _, s in extra],
            dtype=np.int32,
        )
        self._placeholders = [t for t, per in enumerate(rows) if not per]
        partial = [bool(per) and self._ends_inside(t) for t, per in enumerate(rows)]
        self.row_partial = np.array(partial + [True] * len(extra), dtype=bool)
        self.seq_len = np.array([len(s) for s in distinct], dtype=np.int16)
        self.row_len = self.seq_len[self.row_seq]
        flat = np.array([c for s in distinct for c in s], dtype=np.int32)  # sequence-major
        starts = np.cumsum([0, *self.seq_len.tolist()])[:-1]
        self.seq_cols = [
            flat[starts[: int((self.seq_len > i).sum())] + i]
            for i in range(int(self.seq_len.max()))
        ]

    def _ends_inside(self, t: int) -> bool:
        b = self.tok.token_bytes[t]
        return b is not None and bool(split_lenient(b)[1])

    def row_classes(self, row: int) -> list[int]:
        """The classes of a row's characters (its text's, then the completing one's)."""
        seq = int(self.row_seq[row])
        return [int(self.seq_cols[i][seq]) for i in range(int(self.seq_len[seq]))]

    def _tok_mask(self, rows: np.ndarray) -> np.ndarray:
        """Tokens with some row in ``rows`` (row t is token t's first)."""
        size = self.tok.size
        out = rows[:size].copy()
        more = rows[size:]
        out[self.row_tok[size:][more]] = True
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

    def _local_of(self, state: int) -> int:
        """The local number of a machine state (the order the tables met it in: the disk
        cache keeps runs by it, while the machine numbers states as the text leads it)."""
        got = self._local.get(state)
        if got is None:
            got = self._local[state] = len(self._local_states)
            self._local_states.append(state)
        return got

    def _walk(self, state: int) -> tuple[np.ndarray, np.ndarray]:
        """The vectorized pass (per class sequence): where an attempt in ``state`` last
        ends inside the sequence (int16, in characters; -1: nowhere inside it), and the
        local state it is in after the whole sequence."""
        dt, dm = self._dense(state)
        st = np.full(len(self.seq_len), state, dtype=np.int32)
        rec = np.full(len(self.seq_len), -1, dtype=np.int16)
        for i, col in enumerate(self.seq_cols):
            k = len(col)
            cur = st[:k]
            rec[:k][dm[cur, col]] = i
            st[:k] = dt[cur, col]
        uniq, inverse = np.unique(st, return_inverse=True)
        local = np.array([self._local_of(s) for s in uniq.tolist()], dtype=np.int32)
        return rec, local[inverse.reshape(-1)]

    def _precompute_runs(self) -> None:
        """Walk from every state the machine reaches over the table classes: a region's
        attempt is in one of them unless the region holds a character of a class no
        token has (then :meth:`_state_runs` walks on demand)."""
        self._dense(ClassMachine.INIT)
        states = sorted(self._dense_seen)
        for s in states:
            self._local_of(s)  # local numbers 0..len(states)-1: the cached runs' rows
        walks = [self._walk(s) for s in states]
        rec_type = np.int8 if len(self.seq_cols) <= np.iinfo(np.int8).max else np.int16
        fin_type = np.uint8 if len(self._local_states) <= 1 << 8 else np.uint16
        self._set_runs(
            np.array([r for r, _ in walks], dtype=rec_type),
            np.array([f for _, f in walks], dtype=fin_type),
        )

    def _set_runs(self, rec: np.ndarray, fin: np.ndarray) -> None:
        """Cached runs: row k for local state k (``[states, sequences]``); the character
        indices in int8 where they fit (-1 to 127: Qwen2's 128-character tokens, 0.9 MiB
        less than int16)."""
        if rec.dtype != np.int8 and (not rec.size or int(rec.max()) <= np.iinfo(np.int8).max):
            rec = rec.astype(np.int8)
        self.runs_rec, self.runs_fin = rec, fin
        self._run_row = {s: k for k, s in enumerate(self._local_states[: len(rec)])}

    def _state_runs(self, state: int) -> tuple[np.ndarray, np.ndarray]:
        """(:meth:`_walk`'s two arrays) for ``state``: cached, or walked and kept."""
        k = self._run_row.get(state)
        if k is not None:
            return self.runs_rec[k], self.runs_fin[k]
        got = self._extra_runs.get(state)
        if got is None:
            got = self._extra_runs[state] = self._walk(state)
        return got

    def _probe_bits(self) -> _ProbeBits:
        """:class:`_ProbeBits` over every local state met so far."""
        states = self._local_states
        if self._bits is not None and len(self._bits.open_) == len(states):
            return self._bits
        if len(self._ends_known) < len(states):  # scalar runs for states met since
            more = self._probe_ends(states[len(self._ends_known) :])
            self._ends_known = np.concatenate([self._ends_known, more])
        ends = self._ends_known
        open_ = np.zeros(len(states), dtype=np.uint64)
        open_x = np.zeros((_WORDS, len(states)), dtype=np.uint64)
        ends_x = np.zeros((_WORDS, len(states)), dtype=np.uint64)
        for y, probe in enumerate(PROBES):
            stays = ends[:, y] < 0
            open_ |= stays.astype(np.uint64) << np.uint64(y)
            for j in range(len(probe) + 1):
                _set_bits(open_x, _Y_OFFSET[y] + j, stays)
                _set_bits(ends_x, _Y_OFFSET[y] + j, ends[:, y] == j)
        self._bits = _ProbeBits(ends, open_, open_x, ends_x)
        return self._bits

    def run(self, state: int) -> list[np.ndarray]:
        """Per probe y, for every row (int16): where the attempt in ``state`` ends, in
        characters from the row's start (-1: it ends before, inside the region).

        The probe-by-probe form of what :meth:`masks` reads as bit sets (it and
        :meth:`masks_uncached` serve as the reference)."""
        rec_seq, fin_seq = self._state_runs(state)
        ends = self._probe_bits().ends  # [local states, Y]
        rec = rec_seq.take(self.row_seq).astype(np.int16)
        fin = fin_seq.take(self.row_seq)
        rec.setflags(write=False)
        out, made = [], {}  # probes of one class sequence get one (shared, read-only) array
        for y in range(len(self.probe_cls)):
            key = ends[:, y].tobytes()
            if key not in made:
                q = ends[:, y].take(fin)  # [rows]: -1, or the probe character it ends after
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

    def _fresh_bits(self, bpe_a: list[list[np.ndarray]]) -> np.ndarray:
        """Per row, bit y: its text, scanned from a split, stays one pre-token that
        encodes with t first when probe y follows (case A's second half)."""
        out = np.zeros(len(self.row_tok), dtype=np.uint64)
        for y, r in enumerate(self.run(ClassMachine.INIT)):
            j = r - self.row_len
            ok = np.zeros(len(r), dtype=bool)
            for jj, mask in enumerate(bpe_a[y]):
                ok |= (j == jj) & mask
            out |= ok.astype(np.uint64) << np.uint64(y)
        return out

    def masks(self, chain: tuple[int, ...]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Token masks (A: ends the open attempt and starts a pre-token; B: continues it)
        for each configuration of a chain of attempt states (see :func:`scan_configs`).

        Per row, bit sets over the probes: A holds where the attempt ends where the row
        starts (no probe extends it past, ``fresh_bits``), B where it ends after ``j``
        characters of a probe and the row's token may come first then (``bbits``); a
        later configuration counts only the probes every earlier one left open (the
        attempt ended inside the region). Small tables per state, gathered per row.
        """
        hit = self._masks.get(chain)
        if hit is not None:
            self._masks.move_to_end(chain)
            return hit
        runs = [self._state_runs(st) for st in chain]
        bits = self._probe_bits()  # after the runs: they may meet new states
        seq = self.row_seq
        left: tuple[np.ndarray, list[np.ndarray]] | None = None  # probes still open
        out = []
        for n, (rec, fin) in enumerate(runs):
            a = self.fresh_bits & np.where(rec == 0, bits.open_[fin], _ZERO).take(seq)
            b = [self.bbits[w] & bits.ends_x[w][fin].take(seq) for w in range(_WORDS)]
            if left is not None:
                a &= left[0]
                b = [bw & lw for bw, lw in zip(b, left[1], strict=True)]
            if n + 1 < len(runs):
                inside = rec == -1  # the attempt ends inside the region: next configuration
                keep = np.where(inside, bits.open_[fin], _ZERO).take(seq)
                keep_x = [
                    np.where(inside, bits.open_x[w][fin], _ZERO).take(seq) for w in range(_WORDS)
                ]
                if left is not None:
                    keep &= left[0]
                    keep_x = [k & lw for k, lw in zip(keep_x, left[1], strict=True)]
                left = keep, keep_x
            b_rows = np.logical_or.reduce([bw != 0 for bw in b])
            out.append((self._tok_mask(a != 0), self._tok_mask(b_rows)))
        self._masks[chain] = out
        if len(self._masks) > self.cache_size:
            self._masks.popitem(last=False)
        return out

    def masks_uncached(self, chain: tuple[int, ...]) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`masks` as the rule states it, probe by probe over :meth:`run`'s arrays
        (slow; tests compare the two)."""
        out = []
        left = [np.ones(len(self.row_tok), dtype=bool) for _ in PROBES]
        for recs in [self.run(st) for st in chain]:
            a = np.zeros(len(self.row_tok), dtype=bool)
            b = np.zeros(len(self.row_tok), dtype=bool)
            for y, r in enumerate(recs):
                fresh = _get_bits(self.fresh_bits[None], y)
                a |= left[y] & (r == 0) & fresh
                j = r - self.row_len
                for jj in range(len(PROBES[y]) + 1):
                    b |= left[y] & (j == jj) & _get_bits(self.bbits, _Y_OFFSET[y] + jj)
                left[y] &= r == -1
            out.append((self._tok_mask(a), self._tok_mask(b)))
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
        if self._row_of is None:  # each whole-character token's one row (-1: none)
            rows = np.flatnonzero(~self.row_partial)
            self._row_of = np.full(self.tok.size, -1, dtype=np.int64)
            self._row_of[self.row_tok[rows]] = rows
        row = int(self._row_of[t])
        for y, ycls in enumerate(self.probe_cls):
            ends = [self._scalar_end(st, cls + ycls) for st in chain[: n + 1]]
            if any(e != -1 for e in ends[:n]):
                continue  # an earlier configuration already decides this probe
            j = ends[n] - len(cls)
            ext = PROBES[y][:j].encode("utf-8") if j >= 0 else None
            if ext is not None and ext not in bad and row >= 0 and self._b_bit(row, y, j):
                return True
        return False

    def _b_bit(self, row: int, y: int, j: int) -> bool:
        bit = _Y_OFFSET[y] + j
        return bool((int(self.bbits[bit // 64, row]) >> (bit % 64)) & 1)

    def _scalar_end(self, state: int, classes: list[int]) -> int:
        rec = -1
        for i, c in enumerate([*classes, END]):
            matched, state = self.machine.step(state, c)
            rec = i if matched else rec
            if state == ClassMachine.DEAD:
                break
        return rec


def _narrow_columns(columns: list[np.ndarray]) -> list[np.ndarray]:
    """Class columns (ids from 0) in the smallest unsigned type that holds them all.

    >>> [c.dtype.name for c in _narrow_columns([np.array([0, 14]), np.array([3])])]
    ['uint8', 'uint8']
    """
    top = max((int(c.max()) for c in columns if c.size), default=0)
    return [c.astype(np.min_scalar_type(top)) for c in columns]
