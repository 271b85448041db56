"""The leaf tables' disk cache: the per-token tables of
:class:`~midword.engine.tree.leaf_tables.LeafTables` saved beside the tokenizer's normal
form (``leaf-<digest>-<VCT_CACHE_VERSION>.npz``), read back only when intact, of this
version, for these probes and self-consistent (`load_checked`); anything else is
rebuilt. `LeafCacheMixin` turns the tables into the saved arrays and back.

Example:
    >>> load_checked(None) is None  # no cache folder: build the tables
    True
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..disk_arrays import load_intact
from ..tokenize.class_machine import ClassMachine
from .leaf_bits import _PROBES_KEY, _WORDS
from .utf8 import PROBES

VCT_CACHE_VERSION = "8"  # bump when the cached per-token tables change meaning (the leaf
# cache also keys runs by the class machine's thread lists: bump when those change too)
# what the leaf cache holds (a file with other keys is an older or damaged one: rebuilt)
_SAVED = (
    "version", "sigs", "row_tok", "row_len", "row_partial", "row_seq", "seq_len", "seq_cols",
    "needs_exact", "norm_bad", "fresh_bits", "bbits", "runs_rec", "runs_fin", "state_pcs",
    "state_pcs_len", "probes", "probe_ends",
)  # fmt: skip


class LeafCacheMixin:
    """The half of :class:`~midword.engine.tree.leaf_tables.LeafTables` that writes its
    tables to the saved arrays (`_arrays`) and reads them back (`_restore`)."""

    machine: ClassMachine
    row_tok: np.ndarray
    row_len: np.ndarray
    row_partial: np.ndarray
    row_seq: np.ndarray
    seq_len: np.ndarray
    seq_cols: list[np.ndarray]
    needs_exact: np.ndarray
    norm_bad: np.ndarray
    fresh_bits: np.ndarray
    bbits: np.ndarray
    runs_rec: np.ndarray
    runs_fin: np.ndarray
    _local_states: list[int]
    _ends_known: np.ndarray

    def _arrays(self) -> dict[str, np.ndarray]:
        pcs = [self.machine.state_pcs[s] for s in self._local_states]
        return {
            "version": np.array(VCT_CACHE_VERSION),
            "sigs": np.array(self.machine.class_sigs, dtype=bool).reshape(
                len(self.machine.class_sigs), -1
            ),
            "row_tok": self.row_tok,
            "row_len": self.row_len,
            "row_partial": self.row_partial,
            "row_seq": self.row_seq,
            "seq_len": self.seq_len,
            "seq_cols": np.concatenate(self.seq_cols),
            "needs_exact": self.needs_exact,
            "norm_bad": self.norm_bad,
            "fresh_bits": self.fresh_bits,
            "bbits": self.bbits,
            "runs_rec": self.runs_rec,
            "runs_fin": self.runs_fin,
            "state_pcs": np.array([pc for p in pcs for pc in p], dtype=np.int32),
            "state_pcs_len": np.array([len(p) for p in pcs], dtype=np.int32),
            "probes": _PROBES_KEY,
            "probe_ends": self._probe_bits().ends,
        }

    def _restore(self, a: dict[str, np.ndarray]) -> None:
        for sig in map(tuple, a["sigs"].tolist()):  # same class ids as when saved
            self.machine.class_ids[sig] = len(self.machine.class_sigs)
            self.machine.class_sigs.append(sig)
        self.row_tok, self.row_len, self.row_partial = a["row_tok"], a["row_len"], a["row_partial"]
        self.row_seq, self.seq_len = a["row_seq"], a["seq_len"]
        self.seq_cols = self._split_columns(a["seq_cols"], self.seq_len)
        self.needs_exact, self.norm_bad = a["needs_exact"], a["norm_bad"]
        self.fresh_bits, self.bbits = a["fresh_bits"], a["bbits"]
        # the machine numbers states as it meets them: find the saved ones by thread list
        ends = np.cumsum(a["state_pcs_len"]).tolist()
        flat = a["state_pcs"].tolist()
        for lo, hi in zip([0, *ends[:-1]], ends, strict=True):
            self._local_of(_state_id(self.machine, tuple(flat[lo:hi])))
        self._set_runs(a["runs_rec"], a["runs_fin"])
        self._ends_known = a["probe_ends"]

    @staticmethod
    def _split_columns(flat: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
        """Column i: the i-th class of every sequence longer than i (longest first)."""
        counts = [int((lengths > i).sum()) for i in range(int(lengths.max()))]
        return np.split(flat, np.cumsum(counts)[:-1])


def _state_id(machine: ClassMachine, pcs: tuple[int, ...]) -> int:
    """The machine's number for the state with thread list ``pcs``, registering it as
    its own stepping would (the machine numbers states in the order it meets them)."""
    ids = machine._state_ids  # (the machine has no public lookup)
    sid = ids.get(pcs)
    if sid is None:
        sid = ids[pcs] = len(machine.state_pcs)
        machine.state_pcs.append(pcs)
    return sid


def load_checked(path: Path | None) -> dict[str, np.ndarray] | None:
    """The leaf tables saved at ``path``, or None when there are none, or when the file
    is damaged (a bad CRC, a torn write), of another version, or inconsistent: the
    caller then rebuilds them rather than trust it."""
    a = load_intact(path)
    if a is None or sorted(a) != sorted(_SAVED) or str(a["version"]) != VCT_CACHE_VERSION:
        return None
    if not np.array_equal(a["probes"], _PROBES_KEY):
        return None  # the bits stand for other probes
    rows, seqs, states = len(a["row_tok"]), len(a["seq_len"]), len(a["state_pcs_len"])
    shapes_ok = (
        all(len(a[k]) == rows for k in ("row_len", "row_partial", "row_seq", "fresh_bits"))
        and a["bbits"].shape == (_WORDS, rows)
        and a["runs_rec"].shape == a["runs_fin"].shape
        and a["runs_rec"].shape[1:] == (seqs,)
        and 0 < len(a["runs_rec"]) <= states
        and int(a["seq_len"].sum()) == len(a["seq_cols"])
        and int(a["state_pcs_len"].sum()) == len(a["state_pcs"])
        and a["probe_ends"].shape == (states, len(PROBES))
    )
    if not shapes_ok or not rows or not seqs:
        return None
    vocab = len(a["needs_exact"])
    in_range = (
        rows >= vocab
        and np.array_equal(a["row_tok"][:vocab], np.arange(vocab))  # row t: token t's
        and int(a["row_seq"].max()) < seqs
        and int(a["runs_fin"].max()) < states
        and np.array_equal(a["seq_len"][a["row_seq"]], a["row_len"])
    )
    return a if in_range else None
