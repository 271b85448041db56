"""Brute-force oracle for the ByteSampler operations: enumerate every canonical covering
sequence of a prefix (tests/oracle.py) and score each with plain forward passes.

Shares nothing with the engine's scoring code: no tree, no KV cache, no tree mask.
"""

from __future__ import annotations

import numpy as np
from midword.engine.tokenize.tokenizer import BPETokenizer
from tokenizers import Tokenizer

from .oracle import brute_force_tree, kept_verdicts

NEG_INF = float("-inf")


def _lse(values: list[float]) -> float:
    if not values:
        return NEG_INF
    top = max(values)
    if top == NEG_INF:
        return NEG_INF
    return top + float(np.log(sum(np.exp(v - top) for v in values)))


class LMOracle:
    """log P(text starts with x) by brute force, for one model and tokenizer."""

    def __init__(self, model, hf: Tokenizer, tok: BPETokenizer, start_id: int) -> None:
        self.model, self.hf, self.tok, self.start = model, hf, tok, start_id
        self._rows: dict[tuple[int, ...], np.ndarray] = {}
        # verdicts kept across prefixes, and on disk across runs (`KeptVerdicts`)
        self._canonical = kept_verdicts(hf, tok)

    def rows(self, path: tuple[int, ...]) -> np.ndarray:
        """[len(path) + 1, V]: row j is the distribution after start + path[:j]."""
        if path not in self._rows:
            self._rows[path] = self.model.sequence_logprobs([self.start, *path])
        return self._rows[path]

    def seq_logprob(self, seq: tuple[int, ...]) -> float:
        rows = self.rows(seq[:-1])
        return float(sum(rows[j][t] for j, t in enumerate(seq)))

    def prefix_logprob(self, prefix: bytes) -> float:
        """Sum over canonical coverings: leaves reaching past x, and paths ending at x."""
        seqs = brute_force_tree(self.hf, self.tok, prefix, [], self._canonical)
        return _lse([self.seq_logprob(s) for s in seqs])

    def eos_logprob(self, prefix: bytes) -> float:
        """log P(the text is exactly ``prefix``): its canonical encoding, then a special token."""
        ids = tuple(self.hf.encode(prefix.decode("utf-8"), add_special_tokens=False).ids)
        rows = self.rows(ids)  # row j follows start + ids[:j]
        path = sum(float(rows[j][t]) for j, t in enumerate(ids))
        specials = [i for i in self.tok.special_ids if i < rows.shape[1]]
        return path + _lse([float(rows[-1][i]) for i in specials])
