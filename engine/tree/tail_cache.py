"""Built tails kept per engine (:class:`TailCache`): an LRU by region, bounded by entries
and by the bytes of the leaf arrays, which also holds the last tail builder (the next
key's builder takes over from it).

Example:
    >>> cache = TailCache(max_entries=2)
    >>> cache.put(b"x", ((), []))
    >>> cache.get(b"x"), cache.get(b"y")
    (((), []), None)
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np

from .tail_types import TailNode

# Built tails are asked again for the prefix just built (a request, its sync, its items),
# after a backspace, and for the few buffers in use; typing makes a new region per key. So
# a small cache gets the hits, while a large one only grows the server's memory (an end
# node holds a leaf array per token: ~850 KB with a 128k vocabulary).
TAIL_CACHE_ENTRIES = 256
TAIL_CACHE_BYTES = 32 << 20  # leaf arrays kept at most (a llama3 tree's end node: 850 KB)


class TailCache:
    """Built tails by region (LRU), bounded by entries and by the bytes of their leaf
    arrays: a node at the prefix end has almost the whole vocabulary as leaves, so with a
    large vocabulary an entry count alone would let a long session keep gigabytes, and
    memory that only grows is also slow to write (every new array faults in fresh pages).

    Example:
        >>> cache = TailCache(max_bytes=100)
        >>> cache.put(b"ab", ((), [TailNode((1,), True, np.arange(10))]))  # 80 bytes
        >>> cache.put(b"abc", ((), [TailNode((1,), True, np.arange(10))]))
        >>> (cache.get(b"ab") is None, cache.get(b"abc") is not None, len(cache))
        (True, True, 1)
    """

    def __init__(self, max_entries: int = TAIL_CACHE_ENTRIES, max_bytes: int = TAIL_CACHE_BYTES):
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._items: OrderedDict[bytes, tuple[tuple[tuple[int, ...], list[TailNode]], int]] = (
            OrderedDict()
        )
        self.nbytes = 0
        # the builder of the last tail built: the next key's builder takes over what stays
        # true of the bytes both regions share (`_TailBuilder._take_over`). Outside the
        # byte cap: its straddler arrays held under 1 MB after a 200-space run (gpt4o)
        self.last_build: Any = None  # tail._TailBuilder of the last region built, or None
        self._places: tuple[np.ndarray, np.ndarray] | None = None

    def places(self, sorted_ids: np.ndarray) -> np.ndarray:
        """Each token's index in ``sorted_ids`` (the engine's text tokens in byte order;
        -1 for the others), by token id."""
        if self._places is None or self._places[0] is not sorted_ids:
            places = np.full(int(sorted_ids.max(initial=-1)) + 1, -1, dtype=np.int64)
            places[sorted_ids] = np.arange(len(sorted_ids))
            self._places = (sorted_ids, places)
        return self._places[1]

    def __len__(self) -> int:
        return len(self._items)

    def get(self, region: bytes) -> tuple[tuple[int, ...], list[TailNode]] | None:
        hit = self._items.get(region)
        if hit is None:
            return None
        self._items.move_to_end(region)
        return hit[0]

    def put(self, region: bytes, tail: tuple[tuple[int, ...], list[TailNode]]) -> None:
        size = sum(node.leaves.nbytes for node in tail[1])
        old = self._items.pop(region, None)
        if old is not None:
            self.nbytes -= old[1]
        self._items[region] = (tail, size)
        self.nbytes += size
        while len(self._items) > 1 and (
            len(self._items) > self.max_entries or self.nbytes > self.max_bytes
        ):
            _, (_, dropped) = self._items.popitem(last=False)
            self.nbytes -= dropped

    def clear(self) -> None:
        self._items.clear()
        self.nbytes = 0
        self.last_build = None
