"""What the branching tail's modules share: the pre-tokenization hypotheses (:class:`Hyp`),
the tail's nodes as built (`_Node`) and as handed out (:class:`TailNode`), and what the
builder reads of the per-tokenizer engine (:class:`TailSource`). Kept apart so that the
builder (:mod:`.tail`), its leaf verdicts (:mod:`.tail_leaves`) and the tail cache
(:mod:`.tail_cache`) import them without importing one another in a circle.

Example:
    >>> TailNode((5,), True, np.arange(3)).path
    (5,)
    >>> NO_WHOLE_WORDS.ids.size, ONLY_BARE
    (0, frozenset({b''}))
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import numpy as np

from ..tokenize.bpe import BPETokenizer
from ..tokenize.class_machine import ClassMachine
from .leaf_tables import LeafTables
from .validity import Validity

ONLY_BARE: frozenset[bytes] = frozenset({b""})  # WholeWords.exts of a T with no other ending


class WholeWords(NamedTuple):
    """Under ignore_merges, for one head: tokens T (``ids``) and, aligned, the probe
    endings e with ``head + T + e`` itself a token (the encoder would emit that one)."""

    ids: np.ndarray  # int64 token ids
    exts: list[frozenset[bytes]]


NO_WHOLE_WORDS = WholeWords(np.zeros(0, dtype=np.int64), [])


@dataclass(frozen=True)
class Hyp:
    """One possible pre-tokenization: byte offsets of splits inside the region.

    ``stop``: a non-special added text may begin at this offset and still be completing;
    under this hypothesis the rest of the region is that one added token (a leaf), so no
    token of the path ends past it.
    """

    inner: frozenset[int]
    at_end: bool
    stop: int | None = None


@dataclass(frozen=True)
class TailNode:
    """An internal node of the branching tail.

    ``path``: token ids from the end of the trunk down to this node;
    ``ends_at_prefix_end``: the node's bytes end exactly where the prefix ends
    (then every valid next token is a leaf); ``leaves``: child tokens that
    complete a covering sequence from this node.
    """

    path: tuple[int, ...]
    ends_at_prefix_end: bool
    leaves: np.ndarray


@dataclass
class _Node:
    path: tuple[int, ...]
    pos: int
    last: int | None
    bounds: frozenset[int]  # byte offsets of token boundaries along the path (0 excluded)
    hyps: tuple[Hyp, ...]
    leaves: list[int] | np.ndarray = field(default_factory=list)
    children: list[_Node] = field(default_factory=list)
    token_at: dict[int, int] | None = None  # byte offset -> index in path (`_allow`, lazily)


class TailSource(Protocol):
    """What the tail builder reads of the per-tokenizer :class:`~midword.engine.tree.tables.Engine`."""

    tok: BPETokenizer
    validity: Validity
    machine: ClassMachine | None
    tables: LeafTables | None
    split_probes: tuple[str, ...]
    max_token_len: int
    sorted_ids: np.ndarray
    sorted_len: np.ndarray
    starts_ok: np.ndarray
    tail_ok: np.ndarray
    whole_ok: np.ndarray
    is_added: np.ndarray
    added_ids: list[int]
    holds_missing: np.ndarray | None
    tail_cache: Any  # a tail_cache.TailCache (typed loosely: that module imports this one)
    hyps_memo: dict[tuple, tuple[Hyp, ...]]

    def class_reps(self, partial: bytes) -> list[str]: ...

    def char_class(self, ch: str) -> int: ...

    def token_range(self, prefix: bytes) -> tuple[int, int]: ...

    def continuing(self, partial: bytes) -> np.ndarray: ...

    def head_keys(self) -> tuple[np.ndarray, list[str], list[bool], np.ndarray, list[int]]: ...

    def whole_words(self, head: bytes) -> WholeWords: ...

    def extends_canonically(self, seq: tuple[int, ...], data: bytes) -> bool: ...
