"""The bit sets of the leaf tables (:mod:`~midword.engine.tree.leaf_tables`): for every
row (a token's text), one bit per probe ``y`` and per ``j``, the characters of ``y``
inside the row's pre-token, packed into ``_WORDS`` uint64 words; `_ProbeBits` holds what
each probe does to an open match attempt, per local machine state; `TableSource` is what
the tables read of the per-tokenizer engine (here, below both halves of the tables).

Example:
    >>> words = np.zeros((_WORDS, 3), dtype=np.uint64)
    >>> _set_bits(words, 5, np.array([True, False, True]))
    >>> _get_bits(words, 5).tolist(), _get_bits(words, 4).tolist()
    ([True, False, True], [False, False, False])
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple, Protocol

import numpy as np

from ..tokenize.bpe import BPETokenizer
from .completions import Completions
from .utf8 import PROBES
from .validity import Validity


class _ProbeBits(NamedTuple):
    """What each probe does to an attempt a row's text leaves in local state ``l`` (see
    :meth:`LeafTables._local_of`), as bit sets: probe ``y`` is bit ``y``; "the attempt
    ends after ``j`` characters of probe ``y``" is bit ``_Y_OFFSET[y] + j`` of a
    ``_WORDS``-word set."""

    ends: np.ndarray  # [L, Y] int16: where the attempt ends in probe y then END (-1: never)
    open_: np.ndarray  # [L] uint64: probes that do not end it (bit y)
    open_x: np.ndarray  # [W, L] uint64: the same probes, every (y, j) bit of each
    ends_x: np.ndarray  # [W, L] uint64: bit (y, j) where it ends after j characters of y


# first (y, j) bit of probe y: j runs over 0..len(y) (characters of y inside the pre-token)
_Y_OFFSET = np.cumsum([0, *(len(y) + 1 for y in PROBES)]).tolist()
_WORDS = -(-_Y_OFFSET[-1] // 64)  # uint64 words of a row's (y, j) bits
assert len(PROBES) <= 64, "fresh_bits holds one bit per probe in a uint64"
_ZERO = np.uint64(0)
_PROBES_KEY = np.frombuffer(repr(PROBES).encode(), dtype=np.uint8)  # the bit layout's probes


def _set_bits(words: np.ndarray, bit: int, mask: np.ndarray) -> None:
    """Set bit ``bit`` of the ``[W, n]`` bit sets ``words`` where ``mask`` holds."""
    words[bit // 64] |= mask.astype(np.uint64) << np.uint64(bit % 64)


def _get_bits(words: np.ndarray, bit: int) -> np.ndarray:
    """Bit ``bit`` of the ``[W, n]`` bit sets ``words``, as bools."""
    return ((words[bit // 64] >> np.uint64(bit % 64)) & np.uint64(1)).astype(bool)


class TableSource(Protocol):
    """What the leaf tables read of the per-tokenizer :class:`~midword.engine.tree.tables.Engine`."""

    tok: BPETokenizer
    validity: Validity
    is_added: np.ndarray
    sorted_keys: list[bytes]

    def completions(self, partial: bytes) -> Completions: ...

    def token_range(self, prefix: bytes) -> tuple[int, int]: ...

    def cache_file(self, kind: str) -> Path | None: ...
