"""Reloading a model when its files change (a model being trained or swapped in place)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

__all__ = ["ModelWatcher"]

log = logging.getLogger("midword.server")


class ModelWatcher:
    """Calls ``on_change`` once when files in a model directory change (watchfiles,
    debounced); the reload it starts makes a new watcher."""

    def __init__(self, path: Path, on_change: Callable[[], None]) -> None:
        self.path = path
        self.on_change = on_change
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="midword-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        try:
            from watchfiles import watch
        except ImportError:
            log.info("watchfiles is not installed: model changes are not watched")
            return
        try:
            for _changes in watch(self.path, stop_event=self._stop, debounce=1500):
                if self._stop.is_set():
                    return
                self.on_change()
                return  # the reload starts a new watcher
        except Exception as exc:  # e.g. the folder was removed: keep serving
            log.warning("stopped watching %s: %s", self.path, exc)
