"""Giving memory back to the operating system after a document is closed.

Two glibc behaviours keep a closed document's memory resident:

* its lines are many small blocks; once freed, glibc keeps the pages in its heap;
* glibc raises its mmap threshold each time a large block is freed, so later large
  buffers (the JSON body and text of the next big ``didOpen``) come from the heap
  too, and every 10 MB document opened and closed leaves about 10 MB behind.

`fix_mmap_threshold` (at start) keeps large blocks in their own mappings, which
are unmapped when freed; `release_memory` (after ``didClose``) returns free heap
pages with ``malloc_trim(0)`` (a few milliseconds). Both do nothing without glibc.

`freeze_heap` (once a model is in use) takes what the process holds by then out of
the cyclic garbage collector's passes, `thaw_heap` (at shutdown) gives it back.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import sys

__all__ = ["MMAP_THRESHOLD", "fix_mmap_threshold", "freeze_heap", "release_memory", "thaw_heap"]

MMAP_THRESHOLD = 4 << 20  # blocks of at least this many bytes get their own mapping
_M_MMAP_THRESHOLD = -3  # mallopt parameter (malloc.h)


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return None
    return libc


def fix_mmap_threshold(size: int = MMAP_THRESHOLD) -> bool:
    """Stop glibc from raising its mmap threshold; True when the allocator supports it."""
    libc = _glibc()
    return libc is not None and libc.mallopt(_M_MMAP_THRESHOLD, size) == 1


def release_memory() -> bool:
    """Return free heap pages to the OS; True when the allocator supports it."""
    libc = _glibc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


def freeze_heap() -> None:
    """Collect, then move every object left out of the cyclic collector's passes.

    The model, its tokenizer tables and the imported modules are hundreds of thousands
    of objects that live as long as the model: an oldest-generation pass walks them all
    (175 ms with the shipped model) in the middle of whatever keystroke triggers it.
    Frozen objects are still freed by reference counting. Objects frozen earlier are
    thawed first, so the cycles of a model just replaced are collected now.
    """
    gc.unfreeze()
    gc.collect()
    gc.freeze()


def thaw_heap() -> None:
    """Give frozen objects back to the collector (a host shuts down)."""
    gc.unfreeze()
