"""Once a model is in use, what the process holds is frozen out of the cyclic garbage
collector's passes (server/memory.py `freeze_heap`), and nothing that should be
collected is kept by it."""

from __future__ import annotations

import gc
import weakref

from midword.server.worker import ModelHost


class _Backend:
    """A stand-in for a loaded model, in a reference cycle as model objects can be."""

    def __init__(self) -> None:
        self.me = self


def _tracked(obj: object) -> bool:
    """True when the collector's passes see ``obj`` (frozen objects are not listed)."""
    return any(o is obj for o in gc.get_objects())


def test_the_model_in_use_is_frozen_until_shutdown() -> None:
    host = ModelHost()
    backend = _Backend()
    assert _tracked(backend)
    host._worker.submit(host.use, backend, "fake").result()
    try:
        assert host.ready and gc.get_freeze_count() > 0
        assert not _tracked(backend)
    finally:
        host.shutdown()
    assert gc.get_freeze_count() == 0 and _tracked(backend)


def test_a_replaced_model_in_a_cycle_is_collected() -> None:
    host = ModelHost()
    try:
        old = _Backend()
        gone = weakref.ref(old)
        host._worker.submit(host.use, old, "old").result()
        del old  # only the host and its own cycle hold it now; the cycle is frozen
        host._worker.submit(host.use, _Backend(), "new").result()
        assert gone() is None
    finally:
        host.shutdown()


def test_garbage_made_while_frozen_is_still_collected() -> None:
    host = ModelHost()
    try:
        host._worker.submit(host.use, _Backend(), "fake").result()
        later = _Backend()
        gone = weakref.ref(later)
        del later
        gc.collect()
        assert gone() is None
    finally:
        host.shutdown()
